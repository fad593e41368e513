"""Generated load patterns for the replay (``costscale replay --pattern NAME[:k=v,...]``): a rate
over time, arrivals drawn from it with a seed, batch sizes from the config's distribution.

- ``diurnal``: two daily peaks over a night trough (morning and evening, the shape of the
  production traces in Kairos §8.4 and the Twitter trace of Proteus §6.1), time-compressible:
  ``period_h`` is the length of one simulated day. Parameters ``peak``, ``trough`` (q/s), and
  the peak hours ``am`` and ``pm`` (hours of a 24 h day; the evening peak is ``pm_share`` of the
  morning one above the trough) and ``width`` (hours, the standard deviation of each peak).
- ``step``: ``low`` q/s, then ``high`` q/s from ``at_s`` (default: half the run), like the demo.
- ``macroburst``: flat ``low`` and ``high`` phases of ``low_s`` and ``high_s`` seconds, low first,
  Poisson inter-arrivals inside each phase: Proteus §6.3's macro-scale bursts.
- ``microburst``: one ``rate`` with Gamma inter-arrivals of squared coefficient of variation
  ``cv2`` (default 20: Proteus §6.4 uses Gamma shape 0.05, i.e. CV² = 20), micro-scale bursts.

The non-homogeneous Poisson arrivals are drawn by Lewis–Shedler thinning (as
:func:`sim.workload.ramp_arrivals`); arrivals and batches come from independent child streams of
one seed (as :func:`sim.workload.make_workload`), so the same seed gives the same trace.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Mapping

import numpy as np

from config.sections.batch_dist import DEFAULT_MAX_BATCH, BatchDist
from scaler.planner.batch_mix import sample_batches
from sim.workload import Workload, gamma_arrivals, poisson_arrivals

RateFn = Callable[[np.ndarray], np.ndarray]

#: every pattern's parameters and their defaults (q/s, seconds, hours)
PATTERN_DEFAULTS: dict[str, dict[str, float]] = {
    "diurnal": {"peak": 20.0, "trough": 2.0, "period_h": 24.0, "am": 11.0, "pm": 20.0, "pm_share": 0.85,
                "width": 2.5},
    "step": {"low": 12.0, "high": 36.0, "at_s": -1.0},          # at_s < 0: half the run
    "macroburst": {"low": 10.0, "high": 40.0, "low_s": 600.0, "high_s": 300.0},
    "microburst": {"rate": 20.0, "cv2": 20.0},
}
PATTERN_NAMES = tuple(PATTERN_DEFAULTS)
#: a run is refused (one line) when a pattern would draw more queries than this (memory)
MAX_PATTERN_QUERIES = 20_000_000


@dataclass(frozen=True)
class PatternSpec:
    """A pattern by name and its parameters (defaults filled in)."""

    name: str
    params: Mapping[str, float] = field(default_factory=dict)

    def text(self) -> str:
        return self.name + ":" + ",".join(f"{k}={v:g}" for k, v in self.params.items() if v >= 0)

    def default_hours(self) -> float:
        """A run's length when ``--hours`` is not given: one period of a diurnal, else one hour."""
        return float(self.params["period_h"]) if self.name == "diurnal" else 1.0


def parse_pattern(text: str) -> PatternSpec:
    """``NAME[:k=v,...]`` → :class:`PatternSpec`; ValueError (one line) for an unknown name, an
    unknown parameter or a bad value."""
    name, _, rest = text.strip().partition(":")
    if name not in PATTERN_DEFAULTS:
        raise ValueError(f"unknown pattern {name!r} (known: {', '.join(PATTERN_NAMES)})")
    params = dict(PATTERN_DEFAULTS[name])
    for part in (p.strip() for p in rest.split(",")):
        if not part:
            continue
        key, sep, val = part.partition("=")
        key = key.strip()
        if not sep or key not in params:
            raise ValueError(f"pattern {name}: bad parameter {part!r} (known: {', '.join(params)}; give k=v)")
        try:
            x = float(val)
        except ValueError:
            raise ValueError(f"pattern {name}: {key} must be a number, not {val.strip()!r}") from None
        if not math.isfinite(x) or x < 0:
            raise ValueError(f"pattern {name}: {key} must be a finite number >= 0, not {val.strip()}")
        params[key] = x
    _check(name, params)
    return PatternSpec(name, params)


def _check(name: str, p: dict[str, float]) -> None:
    positive = {"diurnal": ("peak", "period_h", "width"), "step": (), "macroburst": ("low_s", "high_s"),
                "microburst": ("rate", "cv2")}[name]
    for k in positive:
        if not p[k] > 0:
            raise ValueError(f"pattern {name}: {k} must be > 0")
    if name == "diurnal":
        if p["trough"] > p["peak"]:
            raise ValueError(f"pattern diurnal: trough ({p['trough']:g}) is above peak ({p['peak']:g})")
        if not (0 <= p["am"] < 24 and 0 <= p["pm"] < 24):
            raise ValueError("pattern diurnal: am and pm are hours of the day in [0, 24)")
    if name in ("step", "macroburst") and max(p["low"], p["high"]) <= 0:
        raise ValueError(f"pattern {name}: low or high must be > 0")


def _diurnal_shape(p: Mapping[str, float]) -> Callable[[np.ndarray], np.ndarray]:
    """Hour of day (0..24) → 0..1: two Gaussian peaks on a 24 h circle, normalised to max 1."""
    def raw(h: np.ndarray) -> np.ndarray:
        out = np.zeros_like(h, dtype=float)
        for centre, share in ((p["am"], 1.0), (p["pm"], p["pm_share"])):
            d = np.abs(h - centre) % 24.0
            d = np.minimum(d, 24.0 - d)
            out += share * np.exp(-0.5 * (d / p["width"]) ** 2)
        return out
    grid = np.linspace(0.0, 24.0, 24 * 60 * 4, endpoint=False)
    lo, hi = float(raw(grid).min()), float(raw(grid).max())
    return lambda h: (raw(h) - lo) / (hi - lo if hi > lo else 1.0)


def rate_function(spec: PatternSpec, duration_s: float) -> RateFn:
    """The pattern's rate (q/s) at times ``t`` (s) of a run of ``duration_s`` (microburst: its mean)."""
    p = spec.params
    if spec.name == "diurnal":
        shape = _diurnal_shape(p)
        day_s = p["period_h"] * 3600.0
        return lambda t: p["trough"] + (p["peak"] - p["trough"]) * shape(24.0 * (np.asarray(t, float) % day_s) / day_s)
    if spec.name == "step":
        at = p["at_s"] if p["at_s"] >= 0 else duration_s / 2.0
        return lambda t: np.where(np.asarray(t, float) < at, p["low"], p["high"])
    if spec.name == "macroburst":
        cycle = p["low_s"] + p["high_s"]
        return lambda t: np.where(np.asarray(t, float) % cycle < p["low_s"], p["low"], p["high"])
    return lambda t: np.full(np.shape(t), p["rate"], dtype=float)


def expected_queries(spec: PatternSpec, duration_s: float) -> float:
    """The mean number of arrivals in ``[0, duration_s)`` (midpoint rule on a one-second grid)."""
    n = max(int(math.ceil(duration_s)), 1)
    t = (np.arange(n) + 0.5) * (duration_s / n)
    return float(rate_function(spec, duration_s)(t).sum() * duration_s / n)


def pattern_arrivals(spec: PatternSpec, duration_s: float, rng: np.random.Generator) -> np.ndarray:
    """Arrival times (s, ascending) in ``[0, duration_s)``."""
    if not duration_s > 0:
        raise ValueError("duration must be > 0")
    if spec.name == "microburst":
        return gamma_arrivals(spec.params["rate"], spec.params["cv2"], rng, duration=duration_s)
    rate = rate_function(spec, duration_s)
    # thinning needs a rate at or above the pattern's everywhere: its largest value, 1 % over
    top = 1.01 * max(spec.params.get(k, 0.0) for k in ("peak", "low", "high"))
    if top <= 0:
        return np.zeros(0)
    cand = poisson_arrivals(top, rng, duration=duration_s)
    keep = rng.random(cand.size) * top < rate(cand)
    return cand[keep]


def pattern_workload(spec: PatternSpec, duration_s: float, batch_dist: BatchDist | str = "deeprecsys", *,
                     seed: int = 0, max_batch: int = DEFAULT_MAX_BATCH) -> Workload:
    """The pattern's queries over ``duration_s``: arrivals and batch sizes from independent child
    streams of ``seed``. ValueError (one line) when it would be over :data:`MAX_PATTERN_QUERIES`."""
    expect = expected_queries(spec, duration_s)
    if expect > MAX_PATTERN_QUERIES:
        raise ValueError(f"pattern {spec.text()} over {duration_s / 3600:g} h is about {expect:.3g} queries, over "
                         f"the limit of {MAX_PATTERN_QUERIES:,}")
    arr_ss, bat_ss = np.random.SeedSequence(seed).spawn(2)
    arrivals = pattern_arrivals(spec, duration_s, np.random.default_rng(arr_ss))
    batches = sample_batches(batch_dist, arrivals.size, np.random.default_rng(bat_ss), max_batch)
    return Workload(arrivals, batches)


def peak_minute_rate(arrivals: np.ndarray, duration_s: float | None = None) -> float:
    """The highest one-minute arrival rate (q/s) over whole minutes from 0 (the last, partial
    minute counts as a whole one)."""
    if arrivals.size == 0:
        return 0.0
    end = duration_s if duration_s is not None else float(arrivals[-1]) + 1e-9
    counts = np.bincount((np.asarray(arrivals) // 60.0).astype(np.int64), minlength=max(int(math.ceil(end / 60.0)), 1))
    return float(counts.max()) / 60.0


__all__ = ["PATTERN_NAMES", "PatternSpec", "parse_pattern", "pattern_workload", "rate_function",
           "peak_minute_rate", "expected_queries"]
