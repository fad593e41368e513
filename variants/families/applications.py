"""Applications in the config (issue #25): a model entry that names a variant family (``family:``)
is an application whose queries any of the family's variants may answer.

- The fleet planner plans it at its **most accurate** variant: :func:`application_profiles` gives
  the application's name that variant's latency on every type the family has rows for, as a
  latency profile (mean = p50 = p99: the family CSVs hold one latency per batch, the median of the
  timed runs), so ``plan_fleet``, ``plan_joint``, ``costscale plan`` and ``costscale capacity`` need
  nothing new.
- Every variant gets a profile under its own name too: the replay's query loop predicts and serves
  a query by the variant it is pinned to (:mod:`sim.replay.variant_lane`).

A shipped family (``config/families/<name>.csv``) or a CSV of the same columns
(:data:`variants.families.profiles.COLUMNS`); rows of the CSV whose ``model`` column is neither the
config model's name nor the family's are another application's and are ignored.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import numpy as np

from config.profiles import LatencyProfile, ProfileTable
from config.schema import Config, ModelSpec
from variants.families.profiles import ProfileRow, read_csv, shipped_csv


@dataclass(frozen=True)
class Application:
    """One configured application: its variants, most accurate first, and their latencies."""

    name: str
    variants: tuple[tuple[str, float], ...]                    # (variant, accuracy), most accurate first
    latency: Mapping[tuple[str, str], Mapping[int, float]]     # (variant, type) -> batch -> ms

    @property
    def top(self) -> str:
        return self.variants[0][0]

    @property
    def top_accuracy(self) -> float:
        return self.variants[0][1]

    def accuracy(self, variant: str) -> float:
        return dict(self.variants)[variant]

    def types(self, variant: str | None = None) -> list[str]:
        v = variant or self.top
        return sorted(t for (x, t) in self.latency if x == v)


def family_path(family: str) -> Path:
    """The CSV a ``family:`` value names (a shipped family, or the path ``load_config`` resolved)."""
    return Path(family) if family.endswith(".csv") else shipped_csv(family)


@functools.lru_cache(maxsize=32)
def _rows(path: str, stamp: tuple[int, int]) -> tuple[ProfileRow, ...]:
    """A family CSV's rows, read once per version of the file (``stamp``: its mtime and size): the
    CLI, the replay, its baselines and its query loops each ask for the application."""
    return tuple(read_csv(path))


def application(model: ModelSpec) -> Application:
    """``model``'s application (``model.family`` set); ValueError with one line naming the file."""
    if not model.family:
        raise ValueError(f"model {model.name!r} names no family")
    path = family_path(model.family)
    try:
        st = path.stat()
        rows = _rows(str(path), (st.st_mtime_ns, st.st_size))
    except OSError as exc:
        raise ValueError(f"{path}: cannot read ({exc.strerror or exc})") from None
    family = path.name.split(".")[0]
    mine = [r for r in rows if r.model in (model.name, family)] or rows
    names = {r.model for r in mine}
    if len(names) > 1:
        raise ValueError(f"{path}: rows for several applications ({', '.join(sorted(names))}): name the model "
                         f"{model.name!r} after one of them")
    if not mine:
        raise ValueError(f"{path}: no variants")
    acc: dict[str, float] = {}
    lat: dict[tuple[str, str], dict[int, float]] = {}
    for r in mine:
        if acc.setdefault(r.variant, r.accuracy) != r.accuracy:
            raise ValueError(f"{path}: variant {r.variant!r} has two accuracies")
        lat.setdefault((r.variant, r.instance_type), {})[r.batch_size] = r.latency_ms
    order = tuple(sorted(acc.items(), key=lambda kv: (-kv[1], kv[0])))
    return Application(model.name, order, lat)


def applications(cfg: Config) -> dict[str, Application]:
    """Every configured application (the models with ``family:``), by name."""
    return {m.name: application(m) for m in cfg.models if m.family}


def _profile(name: str, itype: str, by_batch: Mapping[int, float]) -> LatencyProfile:
    b = np.array(sorted(by_batch), dtype=float)
    ms = np.array([by_batch[int(x)] for x in b], dtype=float)
    return LatencyProfile(name, itype, b, ms, ms.copy(), ms.copy())


def application_profiles(apps: Mapping[str, Application]) -> ProfileTable:
    """Latency profiles: each application under its own name at its most accurate variant, and
    every variant under the variant's name (see the module docstring)."""
    out = ProfileTable()
    for app in apps.values():
        for (v, t), by_batch in app.latency.items():
            out.profiles[(v, t)] = _profile(v, t, by_batch)
            if v == app.top:
                out.profiles[(app.name, t)] = _profile(app.name, t, by_batch)
    return out


def with_applications(cfg: Config, profiles: ProfileTable) -> ProfileTable:
    """``profiles`` with the configured applications' (:func:`application_profiles`) added."""
    apps = applications(cfg)
    return profiles.merged(application_profiles(apps)) if apps else profiles


__all__ = ["Application", "application", "application_profiles", "applications", "family_path", "with_applications"]
