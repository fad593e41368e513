"""Latency profiles: service time of one query per (model, instance type, batch size).

Source data: real AWS measurements from the Kairos artifact (``config/kairos_latency_profiles.csv``,
MIT, see ``config/LICENSE.kairos-data``), batch sizes 10..1000 in steps of 10. A query's batch is
rounded *up* to the next profiled size to look up its latency (data README); beyond the largest
profiled size the last two points are extrapolated linearly.

A table also says which of its profiles are *estimates* (:class:`Estimate`: from a local run and a
type's emulation factor, ``config.emulation``; or from a measured sibling type, ``config.type_estimates``)
rather than measurements, so nothing downstream can take one for the other. A profile CSV may carry
that in an optional ``source`` column (``measured`` or the estimate's basis).
"""
from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Iterable, Literal, Mapping

import numpy as np

from config.files import write_atomic

Stat = Literal["mean", "p50", "p99"]


@dataclass(frozen=True)
class LatencyProfile:
    """Service latency (ms) of one model on one instance type, by batch size (sorted ascending)."""

    model: str
    instance_type: str
    batch_sizes: np.ndarray
    mean_ms: np.ndarray
    p50_ms: np.ndarray
    p99_ms: np.ndarray

    def column(self, stat: Stat = "mean") -> np.ndarray:
        return {"mean": self.mean_ms, "p50": self.p50_ms, "p99": self.p99_ms}[stat]

    def latency_ms(self, batch: float | np.ndarray, stat: Stat = "mean") -> np.ndarray:
        """Latency for ``batch`` (scalar or array): round up to the next profiled size; linear
        extrapolation from the last two points past the largest; the first point below the smallest."""
        b = np.asarray(batch, dtype=float)
        col = self.column(stat)
        sizes = self.batch_sizes
        idx = np.searchsorted(sizes, b, side="left")
        inside = idx < len(sizes)
        out = np.empty_like(b, dtype=float)
        out[inside] = col[idx[inside]]
        if (~inside).any():
            if len(sizes) >= 2:
                slope = (col[-1] - col[-2]) / (sizes[-1] - sizes[-2])
            else:
                slope = col[-1] / sizes[-1]
            out[~inside] = col[-1] + slope * (b[~inside] - sizes[-1])
        return out

    def largest_batch_within(self, limit_ms: float, stat: Stat = "mean") -> int:
        """Largest profiled batch size whose latency is <= ``limit_ms`` (0 when none)."""
        ok = self.column(stat) <= limit_ms
        return int(self.batch_sizes[ok].max()) if ok.any() else 0


@dataclass(frozen=True)
class Estimate:
    """Why a profile is an estimate and not a measurement: ``basis``, one line (what it was made
    from); ``sibling``: the measured type it scales (``config.type_estimates``), None for an estimate
    from a local run on a type that has an emulation factor (``config.emulation`` rule 2)."""

    basis: str
    sibling: str | None = None


#: the ``source`` column's value for a measured profile (:func:`save_profiles_csv`)
MEASURED = "measured"


@dataclass
class ProfileTable:
    """All profiles, keyed by (model, instance type); ``estimated``: the keys whose profile is an
    estimate (each with its :class:`Estimate`); every other profile is a measurement."""

    profiles: dict[tuple[str, str], LatencyProfile] = field(default_factory=dict)
    estimated: dict[tuple[str, str], Estimate] = field(default_factory=dict)

    def get(self, model: str, instance_type: str) -> LatencyProfile:
        try:
            return self.profiles[(model, instance_type)]
        except KeyError:
            raise KeyError(f"no latency profile for model {model!r} on {instance_type!r}") from None

    def has(self, model: str, instance_type: str) -> bool:
        return (model, instance_type) in self.profiles

    def models(self) -> list[str]:
        return sorted({m for m, _ in self.profiles})

    def types(self, model: str | None = None) -> list[str]:
        return sorted({t for m, t in self.profiles if model is None or m == model})

    def latency_ms(self, model: str, instance_type: str, batch: float | np.ndarray, stat: Stat = "mean") -> np.ndarray:
        return self.get(model, instance_type).latency_ms(batch, stat)

    def estimate(self, model: str, instance_type: str) -> Estimate | None:
        """The :class:`Estimate` behind a profile, None for a measured one (or none)."""
        return self.estimated.get((model, instance_type))

    def merged(self, other: "ProfileTable") -> "ProfileTable":
        """A new table: this one's profiles, with ``other``'s added (``other`` wins on a clash,
        with what it says about being an estimate)."""
        est = {k: e for k, e in self.estimated.items() if k not in other.profiles}
        return ProfileTable({**self.profiles, **other.profiles}, {**est, **other.estimated})

    def update(self, other: "ProfileTable") -> None:
        """:meth:`merged` in place (the daemon's table is shared by its loops)."""
        for k in other.profiles:
            self.estimated.pop(k, None)
        self.profiles.update(other.profiles)
        self.estimated.update({k: e for k, e in other.estimated.items() if k in self.profiles})


def default_profiles_path() -> Path:
    return Path(str(resources.files("config").joinpath("kairos_latency_profiles.csv")))


def profiles_from_rows(rows: Iterable[dict[str, str]]) -> ProfileTable:
    """Rows of a profile CSV as a table; a row whose optional ``source`` is not ``measured`` (nor
    empty) marks its (model, type) an estimate with that basis."""
    grouped: dict[tuple[str, str], list[tuple[float, float, float, float]]] = {}
    sources: dict[tuple[str, str], str] = {}
    for r in rows:
        key = (r["model"], r["instance_type"])
        src = (r.get("source") or "").strip()
        if src and src != MEASURED:
            sources[key] = src
        grouped.setdefault(key, []).append(
            (float(r["batch_size"]), float(r["service_ms_mean"]), float(r["service_ms_p50"]), float(r["service_ms_p99"]))
        )
    table = ProfileTable()
    for (model, itype), pts in grouped.items():
        arr = np.array(sorted(pts), dtype=float)
        table.profiles[(model, itype)] = LatencyProfile(
            model=model, instance_type=itype, batch_sizes=arr[:, 0],
            mean_ms=arr[:, 1], p50_ms=arr[:, 2], p99_ms=arr[:, 3],
        )
    table.estimated = {k: Estimate(src) for k, src in sources.items()}
    return table


#: the columns a profile CSV must have (and the ones :func:`save_profiles_csv` writes)
PROFILE_COLUMNS = ("model", "instance_type", "batch_size", "service_ms_mean", "service_ms_p50", "service_ms_p99")


def save_profiles_csv(path: str | Path, profiles: Iterable[LatencyProfile],
                      estimated: Mapping[tuple[str, str], Estimate] | None = None) -> None:
    """Write ``profiles`` as a profile CSV (:data:`PROFILE_COLUMNS`, 4 decimals), atomically; with
    ``estimated`` non-empty, also a ``source`` column (``measured``, or the estimate's basis) so the
    file keeps saying which rows are estimates."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    tagged = bool(estimated)
    w.writerow(PROFILE_COLUMNS + (("source",) if tagged else ()))
    for p in sorted(profiles, key=lambda p: (p.model, p.instance_type)):
        e = (estimated or {}).get((p.model, p.instance_type))
        tag = [e.basis if e is not None else MEASURED] if tagged else []
        for i, b in enumerate(p.batch_sizes):
            w.writerow([p.model, p.instance_type, int(b), f"{p.mean_ms[i]:.4f}", f"{p.p50_ms[i]:.4f}",
                        f"{p.p99_ms[i]:.4f}"] + tag)
    write_atomic(Path(path), buf.getvalue().encode("utf-8"))


def load_profiles_csv(path: str | Path | None = None) -> ProfileTable:
    """Load a profile CSV (columns model, instance_type, batch_size, service_ms_mean/_p50/_p99).

    Raises ``ValueError`` with one line naming the file and the problem.
    """
    p = Path(path) if path is not None else default_profiles_path()
    try:
        with p.open(newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            missing = set(PROFILE_COLUMNS) - set(reader.fieldnames or [])
            if missing:
                raise ValueError(f"{p}: profile CSV lacks column(s) {', '.join(sorted(missing))}")
            return profiles_from_rows(reader)
    except OSError as exc:
        raise ValueError(f"{p}: cannot read profile CSV ({exc.strerror or exc})") from None
    except (KeyError, TypeError) as exc:
        raise ValueError(f"{p}: malformed profile CSV ({exc})") from None
    except ValueError as exc:
        if str(exc).startswith(str(p)):
            raise
        raise ValueError(f"{p}: malformed profile CSV ({exc})") from None
