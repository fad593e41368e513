"""Variant profiler (INFaaS §3.2 "Variant-Profiler"): one-time profiling of each variant on a
hardware type — inference latency per batch size, loading latency and peak memory — recorded in
SQLite so the dispatcher's latency model can be seeded from it (Kairos §5.1 needs per-type,
per-batch service times).

Measurement (:func:`profile_variant`) is an adapter: it loads the variant into an
:class:`~variants.runtime.onnx_executor.OnnxExecutor`, runs batch sizes 1, 2, 4, ..., 64 ``repeats`` times
each after ``warmup`` runs, and reduces the samples with the pure :func:`summarize`.

Memory is measured as the growth of the process's resident set size (``VmRSS`` in
``/proc/self/status``) from before the load to the largest value sampled after the load and after
every batch size's runs; it is an estimate (the allocator may reuse freed pages; GPU memory is not
counted). Where ``/proc`` is absent the figure is 0 and ``memory_method`` says ``"unavailable"``.
"""
from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from config.profiles import LatencyProfile

DEFAULT_BATCHES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
#: the instance type a profile measured on this machine is stored under
LOCAL_TYPE = "local"
RSS_METHOD = "rss-delta:/proc/self/status VmRSS, peak sampled after load and each batch size"


@dataclass(frozen=True)
class BatchLatency:
    batch_size: int
    mean_ms: float
    p50_ms: float
    p99_ms: float
    runs: int


@dataclass(frozen=True)
class VariantProfile:
    """Profile of one variant on one instance type (INFaaS Metadata Store: static profile)."""

    variant: str
    model: str
    instance_type: str
    provider: str
    batches: tuple[BatchLatency, ...]
    load_ms: float
    peak_memory_mb: float
    memory_method: str

    @property
    def batch_sizes(self) -> list[int]:
        return [b.batch_size for b in self.batches]

    def to_latency_profile(self, model: str | None = None) -> LatencyProfile:
        """As a :class:`config.profiles.LatencyProfile` keyed (model or the variant name,
        instance type), to seed the dispatcher's latency model."""
        bs = sorted(self.batches, key=lambda b: b.batch_size)
        return LatencyProfile(
            model=model or self.variant, instance_type=self.instance_type,
            batch_sizes=np.array([b.batch_size for b in bs], dtype=float),
            mean_ms=np.array([b.mean_ms for b in bs], dtype=float),
            p50_ms=np.array([b.p50_ms for b in bs], dtype=float),
            p99_ms=np.array([b.p99_ms for b in bs], dtype=float),
        )


def summarize(batch_size: int, samples_ms: Sequence[float]) -> BatchLatency:
    """Mean, median and 99th percentile (linear interpolation) of one batch size's samples."""
    if not samples_ms:
        raise ValueError("no samples")
    a = np.asarray(samples_ms, dtype=float)
    return BatchLatency(batch_size=int(batch_size), mean_ms=float(a.mean()), p50_ms=float(np.median(a)),
                        p99_ms=float(np.percentile(a, 99)), runs=len(a))


def rss_mb() -> float | None:
    """Current resident set size in MiB, or None where /proc is not available."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None


def profile_variant(path: Path, variant: str, instance_type: str, model: str | None = None,
                    providers: Sequence[str] = ("CPUExecutionProvider",),
                    batch_sizes: Sequence[int] = DEFAULT_BATCHES, repeats: int = 5, warmup: int = 1,
                    seed: int = 0, threads: int | None = None) -> VariantProfile:
    """Measure one variant here (this machine stands for ``instance_type``)."""
    from variants.runtime.builtin_models import input_signature, make_inputs_for
    from variants.runtime.onnx_executor import OnnxExecutor

    if repeats < 1:
        raise ValueError("repeats must be >= 1")
    if not batch_sizes or min(batch_sizes) < 1:
        raise ValueError("batch sizes must be >= 1")
    ex = OnnxExecutor(list(providers), threads=threads)
    before = rss_mb()
    t0 = time.perf_counter()
    ex.load(variant, Path(path))
    load_ms = (time.perf_counter() - t0) * 1000.0
    peak = rss_mb()
    sig = input_signature(path)
    rng = np.random.default_rng(seed)
    rows: list[BatchLatency] = []
    for b in sorted({int(b) for b in batch_sizes}):
        inputs = make_inputs_for(sig, int(b), rng)
        for _ in range(warmup):
            ex.run(variant, inputs)
        samples = []
        for _ in range(repeats):
            s = time.perf_counter()
            ex.run(variant, inputs)
            samples.append((time.perf_counter() - s) * 1000.0)
        rows.append(summarize(int(b), samples))
        now = rss_mb()
        if now is not None and peak is not None:
            peak = max(peak, now)
    provider = ex.providers_for(variant)[0]
    ex.unload(variant)
    if before is None or peak is None:
        mem, method = 0.0, "unavailable"
    else:
        mem, method = max(0.0, peak - before), RSS_METHOD
    return VariantProfile(variant=variant, model=model or variant, instance_type=instance_type,
                          provider=provider, batches=tuple(rows), load_ms=load_ms,
                          peak_memory_mb=mem, memory_method=method)


_SCHEMA = """
CREATE TABLE IF NOT EXISTS variant_profiles (
    variant        TEXT    NOT NULL,
    instance_type  TEXT    NOT NULL,
    batch_size     INTEGER NOT NULL,
    model          TEXT    NOT NULL,
    provider       TEXT    NOT NULL,
    mean_ms        REAL    NOT NULL,
    p50_ms         REAL    NOT NULL,
    p99_ms         REAL    NOT NULL,
    runs           INTEGER NOT NULL,
    load_ms        REAL    NOT NULL,
    peak_memory_mb REAL    NOT NULL,
    memory_method  TEXT    NOT NULL,
    PRIMARY KEY (variant, instance_type, batch_size)
)
"""


class ProfileStore:
    """Variant profiles in SQLite (table ``variant_profiles``, WAL mode). The file may be shared
    with the daemon's state store; this class touches only its own table."""

    def __init__(self, path: Path | str) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, timeout=10.0)
        self._db.execute("PRAGMA journal_mode=WAL")
        with self._db:
            self._db.execute(_SCHEMA)

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> "ProfileStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def save(self, profile: VariantProfile) -> None:
        """Replace the stored profile of (variant, instance type) with ``profile`` (one transaction)."""
        with self._db:
            self._db.execute("DELETE FROM variant_profiles WHERE variant = ? AND instance_type = ?",
                             (profile.variant, profile.instance_type))
            self._db.executemany(
                "INSERT INTO variant_profiles VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                [(profile.variant, profile.instance_type, b.batch_size, profile.model, profile.provider,
                  b.mean_ms, b.p50_ms, b.p99_ms, b.runs, profile.load_ms, profile.peak_memory_mb,
                  profile.memory_method) for b in profile.batches])

    def load(self, variant: str, instance_type: str) -> VariantProfile | None:
        rows = self._db.execute(
            "SELECT batch_size, model, provider, mean_ms, p50_ms, p99_ms, runs, load_ms, peak_memory_mb, "
            "memory_method FROM variant_profiles WHERE variant = ? AND instance_type = ? ORDER BY batch_size",
            (variant, instance_type)).fetchall()
        if not rows:
            return None
        first = rows[0]
        return VariantProfile(
            variant=variant, model=first[1], instance_type=instance_type, provider=first[2],
            batches=tuple(BatchLatency(int(r[0]), float(r[3]), float(r[4]), float(r[5]), int(r[6])) for r in rows),
            load_ms=float(first[7]), peak_memory_mb=float(first[8]), memory_method=first[9])

    def keys(self) -> list[tuple[str, str]]:
        return [(r[0], r[1]) for r in self._db.execute(
            "SELECT DISTINCT variant, instance_type FROM variant_profiles ORDER BY variant, instance_type")]

    def all(self) -> list[VariantProfile]:
        out = []
        for v, t in self.keys():
            p = self.load(v, t)
            if p is not None:
                out.append(p)
        return out

    def delete(self, variant: str, instance_type: str) -> None:
        with self._db:
            self._db.execute("DELETE FROM variant_profiles WHERE variant = ? AND instance_type = ?", (variant, instance_type))
