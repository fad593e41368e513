"""Variant registry: registered models and their variants (INFaaS §3.2 "Metadata Store": model
architectures, their variants with accuracy, and the variants' static profiles).

Persisted in SQLite (WAL), in its own tables ``registered_models`` and ``registered_variants``;
profiles go to :class:`variants.profiler.ProfileStore`'s table in the same file. The daemon keeps it
at ``state_path + ".variants.db"`` (:func:`registry_path_for`), next to the fleet state store.

A model declared in the config is registered at daemon start as one variant named after the model
(its fp32 original, ``hardware="any"``: every worker loads it at boot). Generated variants
(fp32/int8/fp16/batch-tuned, :func:`variants.generator.generate_variants`) carry their own hardware
class. This module is an adapter (file I/O); it decides nothing.
"""
from __future__ import annotations

import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from config.profiles import ProfileTable
from config.type_estimates import estimate_of
from config.schema import ModelSpec
from variants.runtime.executor import ANY_HARDWARE
from variants.generator import Variant
from variants.profiler import LOCAL_TYPE, ProfileStore, VariantProfile
from variants.type_profiles import is_estimate

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS registered_models (
        name        TEXT PRIMARY KEY,
        application TEXT NOT NULL,
        onnx_path   TEXT NOT NULL,
        qos_ms      REAL NOT NULL,
        max_batch   INTEGER NOT NULL,
        profile     TEXT NOT NULL,
        from_config INTEGER NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS registered_variants (
        name               TEXT PRIMARY KEY,
        model              TEXT NOT NULL,
        application        TEXT NOT NULL,
        precision          TEXT NOT NULL,
        hardware           TEXT NOT NULL,
        provider           TEXT NOT NULL,
        tuned_batch        INTEGER NOT NULL,
        path               TEXT NOT NULL,
        accuracy           REAL NOT NULL,
        accuracy_estimated INTEGER NOT NULL
    )""",
)


@dataclass(frozen=True)
class RegisteredModel:
    """A model architecture known to the system (INFaaS §3.1 ``register_model``)."""

    name: str
    application: str
    onnx_path: str
    qos_ms: float
    max_batch: int
    profile: str          # key of its latency profile (the Kairos CSV name for config models)
    from_config: bool = False


_VARIANT_SELECT = ("SELECT name, model, application, precision, hardware, provider, tuned_batch, path, accuracy, "
                   "accuracy_estimated FROM registered_variants")


def _model_of(r: tuple) -> RegisteredModel:
    return RegisteredModel(r[0], r[1], r[2], float(r[3]), int(r[4]), r[5], bool(r[6]))


def _variant_of(r: tuple) -> Variant:
    return Variant(name=r[0], model=r[1], application=r[2], precision=r[3], hardware=r[4], provider=r[5],
                   tuned_batch=int(r[6]), path=Path(r[7]), accuracy=float(r[8]), accuracy_estimated=bool(r[9]))


def registry_path_for(state_path: str) -> str:
    """Where the daemon keeps the registry: next to its state store."""
    return ":memory:" if state_path == ":memory:" else state_path + ".variants.db"


def registered_from_config(m: ModelSpec) -> RegisteredModel:
    """How a model of the config is registered (the daemon at start, ``costscale profile``)."""
    return RegisteredModel(name=m.name, application=m.application or m.name, onnx_path=m.onnx, qos_ms=m.qos_ms,
                           max_batch=m.max_batch, profile=m.profile_name, from_config=True)


def base_variant(model: RegisteredModel, accuracy: float = 1.0) -> Variant:
    """The model itself as a variant (fp32, any hardware): what every worker loads at boot."""
    return Variant(name=model.name, model=model.name, application=model.application, precision="fp32",
                   hardware=ANY_HARDWARE, provider="", tuned_batch=0, path=Path(model.onnx_path),  # type: ignore[arg-type]
                   accuracy=accuracy, accuracy_estimated=True)


class VariantRegistry:
    """Models -> variants (+ profiles) in SQLite. Thread-safe (one connection behind a lock) so the
    dispatcher's event loop and worker threads (generation, profiling) can share it."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, timeout=10.0, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        with self._db:
            for stmt in _SCHEMA:
                self._db.execute(stmt)
        # profiles: ProfileStore's table in the same file (a short-lived store per write: its
        # connection is bound to one thread), cached here
        self._profiles: dict[tuple[str, str], VariantProfile] = {}
        if self.path != ":memory:":
            with ProfileStore(self.path) as store:
                self._profiles = {(p.variant, p.instance_type): p for p in store.all()}

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- models --------------------------------------------------------------------------------------
    def register_model(self, model: RegisteredModel, variants: Sequence[Variant] = ()) -> None:
        """Insert or replace ``model`` and (re)place its variants with ``variants`` (one transaction);
        with no variants given, the model's base variant."""
        vs = list(variants) or [base_variant(model)]
        bad = [v.name for v in vs if v.model != model.name]
        if bad:
            raise ValueError(f"variant(s) {', '.join(bad)} do not belong to model {model.name!r}")
        with self._lock, self._db:
            self._db.execute("INSERT OR REPLACE INTO registered_models VALUES (?,?,?,?,?,?,?)",
                             (model.name, model.application, model.onnx_path, float(model.qos_ms),
                              int(model.max_batch), model.profile, int(model.from_config)))
            self._db.execute("DELETE FROM registered_variants WHERE model = ?", (model.name,))
            self._db.executemany("INSERT OR REPLACE INTO registered_variants VALUES (?,?,?,?,?,?,?,?,?,?)", [
                (v.name, v.model, v.application, v.precision, v.hardware, v.provider, int(v.tuned_batch),
                 str(v.path), float(v.accuracy), int(v.accuracy_estimated)) for v in vs])

    def add_variants(self, variants: Sequence[Variant]) -> None:
        """Add (or replace by name) variants of already registered models."""
        known = {m.name for m in self.models()}
        bad = sorted({v.model for v in variants if v.model not in known})
        if bad:
            raise ValueError(f"unknown model(s): {', '.join(bad)}")
        with self._lock, self._db:
            self._db.executemany("INSERT OR REPLACE INTO registered_variants VALUES (?,?,?,?,?,?,?,?,?,?)", [
                (v.name, v.model, v.application, v.precision, v.hardware, v.provider, int(v.tuned_batch),
                 str(v.path), float(v.accuracy), int(v.accuracy_estimated)) for v in variants])

    def models(self) -> list[RegisteredModel]:
        with self._lock:
            rows = self._db.execute("SELECT name, application, onnx_path, qos_ms, max_batch, profile, from_config "
                                    "FROM registered_models ORDER BY name").fetchall()
        return [_model_of(r) for r in rows]

    def model(self, name: str) -> RegisteredModel | None:
        with self._lock:
            r = self._db.execute("SELECT name, application, onnx_path, qos_ms, max_batch, profile, from_config "
                                 "FROM registered_models WHERE name = ?", (name,)).fetchone()
        return _model_of(r) if r is not None else None

    # -- variants ------------------------------------------------------------------------------------
    def variants(self, model: str | None = None, application: str | None = None) -> list[Variant]:
        q = _VARIANT_SELECT
        cond, args = [], []
        if model:
            cond.append("model = ?")
            args.append(model)
        if application:
            cond.append("application = ?")
            args.append(application)
        if cond:
            q += " WHERE " + " AND ".join(cond)
        with self._lock:
            rows = self._db.execute(q + " ORDER BY model, name", args).fetchall()
        return [_variant_of(r) for r in rows]

    def variant(self, name: str) -> Variant | None:
        with self._lock:
            r = self._db.execute(_VARIANT_SELECT + " WHERE name = ?", (name,)).fetchone()
        return _variant_of(r) if r is not None else None

    # -- profiles ------------------------------------------------------------------------------------
    def save_profile(self, profile: VariantProfile) -> None:
        with self._lock:
            if self.path != ":memory:":
                with ProfileStore(self.path) as store:
                    store.save(profile)
            self._profiles[(profile.variant, profile.instance_type)] = profile

    def profile(self, variant: str, instance_type: str) -> VariantProfile | None:
        with self._lock:
            return self._profiles.get((variant, instance_type))

    def type_profiles(self) -> ProfileTable:
        """The stored profiles on instance types (not this machine's ``local`` ones) as a profile
        table: a model's base variant under its profile key, other variants under their names; the
        estimates among them marked (``ProfileTable.estimated``, their provider as the basis)."""
        key = {m.name: m.profile for m in self.models()}
        with self._lock:
            stored = [p for (_, t), p in sorted(self._profiles.items()) if t != LOCAL_TYPE]
        table = ProfileTable()
        for p in stored:
            name = key.get(p.variant, p.variant)
            table.profiles[(name, p.instance_type)] = p.to_latency_profile(name)
            if is_estimate(p):    # from a local run, or from a sibling type: tagged as such
                table.estimated[(name, p.instance_type)] = estimate_of(p.provider, p.instance_type)
        return table

    def profiles_of(self, variant: str) -> list[VariantProfile]:
        """The variant's profiles, this machine's (``local``) first: speed factors compare those."""
        with self._lock:
            return [p for (v, t), p in sorted(self._profiles.items(), key=lambda kv: (kv[0][1] != LOCAL_TYPE, kv[0]))
                    if v == variant]
