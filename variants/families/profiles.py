"""Profiles of a variant family: latency per (member, instance type, batch size) with the member's
accuracy, as the CSV the accuracy planner reads (columns :data:`COLUMNS`).

Two steps, as ``costscale profile --local`` does for one model (:mod:`config.emulation`):

1. :func:`measure`: each member on this machine with ONNX Runtime (:func:`variants.profiler.profile_variant`;
   instance type ``local``, the CPU provider unless told otherwise); the latency is the median of
   the timed runs (robust to a busy neighbour; the mean is skewed by one slow run).
2. :func:`derive`: the measured rows as estimates for every instance type that has an emulation
   factor (rule 2 of :mod:`config.emulation`: measured time x the type's factor at that batch, the
   factors the worker pads with). Types without a reference profile (the Inferentia types, g5,
   g4dn.2xlarge, ...) have no factor and get no row: they can only be measured there.

:func:`write_csv` and :func:`read_csv` are the file format; :func:`shipped_csv` finds the CSVs
shipped in ``config/families`` (see that package's docstring for what each file holds).
"""
from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from config.emulation import factor_types, reference_profiles
from config.families import csv_path
from config.files import write_atomic
from config.profiles import ProfileTable
from variants.families.family import Member

COLUMNS = ("model", "variant", "instance_type", "batch_size", "latency_ms", "accuracy")
LOCAL_TYPE = "local"
CPU = "CPUExecutionProvider"


@dataclass(frozen=True)
class ProfileRow:
    """One CSV row: ``model`` is the family (the application queries name), ``variant`` the member."""

    model: str
    variant: str
    instance_type: str
    batch_size: int
    latency_ms: float
    accuracy: float


def measure(members: Sequence[Member], batch_sizes: Sequence[int], repeats: int = 5, warmup: int = 1,
            instance_type: str = LOCAL_TYPE, providers: Sequence[str] = (CPU,), threads: int | None = None,
            on_member=None) -> list[ProfileRow]:
    """Adapter (blocking, seconds to minutes): time every member at every batch size here."""
    from variants.profiler import profile_variant

    rows = []
    for m in members:
        if on_member is not None:
            on_member(m.name)
        p = profile_variant(m.path, m.name, instance_type, model=m.family, providers=tuple(providers),
                            batch_sizes=batch_sizes, repeats=repeats, warmup=warmup, threads=threads)
        rows += [ProfileRow(m.family, m.name, instance_type, b.batch_size, round(b.p50_ms, 4), m.accuracy)
                 for b in p.batches]
    return rows


def derive(local: Sequence[ProfileRow], reference: ProfileTable | None = None,
           types: Iterable[str] | None = None) -> list[ProfileRow]:
    """Rows for every type with an emulation factor (or ``types``, those of them with one), by the
    rule ``costscale profile --local`` uses (:func:`variants.type_profiles.estimate_types`: the
    measured latency, made non-decreasing in the batch, times the type's factor at that batch)."""
    from variants.profiler import BatchLatency, VariantProfile
    from variants.type_profiles import estimate_types

    ref = reference if reference is not None else reference_profiles()
    wanted = list(types) if types is not None else factor_types(ref)
    groups: dict[tuple[str, str], list[ProfileRow]] = {}
    for r in local:
        groups.setdefault((r.model, r.variant), []).append(r)
    by_type: dict[str, list[ProfileRow]] = {t: [] for t in wanted}
    for (model, variant), rs in groups.items():
        vp = VariantProfile(variant=variant, model=model, instance_type=LOCAL_TYPE, provider=CPU,
                            batches=tuple(BatchLatency(r.batch_size, r.latency_ms, r.latency_ms, r.latency_ms, 1)
                                          for r in sorted(rs, key=lambda r: r.batch_size)),
                            load_ms=0.0, peak_memory_mb=0.0, memory_method="")
        estimates, _ = estimate_types(vp, wanted, ref)
        for p in estimates:
            by_type[p.instance_type] += [ProfileRow(model, variant, p.instance_type, b.batch_size, round(b.p50_ms, 4),
                                                    rs[0].accuracy) for b in p.batches]
    return [r for t in wanted for r in by_type[t]]


def to_csv(rows: Iterable[ProfileRow]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    for r in rows:
        w.writerow([r.model, r.variant, r.instance_type, r.batch_size, f"{r.latency_ms:.4f}", f"{r.accuracy:.5f}"])
    return buf.getvalue()


def write_csv(path: Path, rows: Iterable[ProfileRow]) -> Path:
    path = Path(path)
    write_atomic(path, to_csv(rows).encode())
    return path


def parse_csv(text: str, source: str = "<csv>") -> list[ProfileRow]:
    """Rows of a family CSV; ValueError naming the line for a wrong header or a malformed row."""
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    if header is None or tuple(h.strip() for h in header) != COLUMNS:
        raise ValueError(f"{source}:1: header must be {','.join(COLUMNS)}")
    rows = []
    for n, rec in enumerate(reader, start=2):
        if not rec:
            continue
        if len(rec) != len(COLUMNS):
            raise ValueError(f"{source}:{n}: {len(rec)} fields, expected {len(COLUMNS)}")
        try:
            row = ProfileRow(rec[0].strip(), rec[1].strip(), rec[2].strip(), int(rec[3]), float(rec[4]), float(rec[5]))
        except ValueError:
            raise ValueError(f"{source}:{n}: batch_size must be an integer, latency_ms and accuracy numbers") from None
        if not (row.model and row.variant and row.instance_type):
            raise ValueError(f"{source}:{n}: empty model, variant or instance_type")
        if row.batch_size < 1 or not (math.isfinite(row.latency_ms) and row.latency_ms > 0):
            raise ValueError(f"{source}:{n}: batch_size must be >= 1 and latency_ms > 0")
        if not 0.0 <= row.accuracy <= 1.0:
            raise ValueError(f"{source}:{n}: accuracy must be a fraction in [0, 1]")
        rows.append(row)
    return rows


def read_csv(path: Path | str) -> list[ProfileRow]:
    return parse_csv(Path(path).read_text(), str(path))


def shipped_csv(family: str, kind: str = "") -> Path:
    """Path of a CSV shipped in ``config/families`` (:func:`config.families.csv_path`)."""
    return csv_path(family, kind)


def latency_table(rows: Sequence[ProfileRow], instance_type: str) -> dict[str, dict[int, float]]:
    """variant -> batch -> latency (ms) on ``instance_type``."""
    out: dict[str, dict[int, float]] = {}
    for r in rows:
        if r.instance_type == instance_type:
            out.setdefault(r.variant, {})[r.batch_size] = r.latency_ms
    return out


def accuracies(rows: Sequence[ProfileRow]) -> dict[str, float]:
    """variant -> accuracy (one value per variant; ValueError if rows disagree)."""
    out: dict[str, float] = {}
    for r in rows:
        if out.setdefault(r.variant, r.accuracy) != r.accuracy:
            raise ValueError(f"variant {r.variant} has two accuracies")
    return out


def spread(rows: Sequence[ProfileRow], instance_type: str) -> dict[int, tuple[str, str, float, float]]:
    """Per batch size: (fastest member, most accurate member, latency ratio most accurate / fastest,
    accuracy points between them): the trade-off a family offers on ``instance_type``."""
    lat = latency_table(rows, instance_type)
    acc = accuracies([r for r in rows if r.instance_type == instance_type])
    best = max(acc, key=lambda v: acc[v])
    out = {}
    for b in sorted({b for v in lat.values() for b in v}):
        have = {v: t[b] for v, t in lat.items() if b in t}
        if best not in have:
            continue
        fast = min(have, key=lambda v: (have[v], v))
        out[b] = (fast, best, float(np.round(have[best] / have[fast], 3)), round(100.0 * (acc[best] - acc[fast]), 3))
    return out
