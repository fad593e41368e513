"""Each model's forecaster chosen by replayed dollars, not by forecast error (issue #39 deliverable 2).

For a model whose daily shape repeats (:func:`scaler.forecast.repeat.shape_repeats`; otherwise
reactive, without replaying), the last ``days`` of its own history are replayed once per candidate
(reactive: ``forecast.mode: off``; each of ``forecast.forecasters``: ``on`` with that forecaster)
through the daemon's loops (:func:`sim.replay.run.replay`), with the history before them as the
replay's history. Queries are drawn per minute from the measured rates (Poisson counts, uniform in
the minute, seed ``seed``; an unmeasured minute draws none), batches from the config's distribution;
the other models of the config replay without queries.

The pick: the cheapest candidate whose attainment of the model's SLO is at least the reactive
replay's (ties to the earlier candidate, reactive first). A more accurate forecast that buys
nothing is not chosen; a forecaster that is cheaper only by serving less is not either.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from config.profiles import ProfileTable
from config.schema import Config
from scaler.forecast.history import DAY_MIN, MINUTE_S, DemandHistory, minute_of
from scaler.forecast.repeat import shape_repeats
from scaler.forecast.state import REACTIVE
from scaler.planner.batch_mix import sample_batches
from scaler.planner.model_plan import SloCheck
from sim.replay.report import report
from sim.replay.run import ReplaySpec, replay
from sim.slo_check import slo_check as default_slo_check
from sim.workload import Workload

#: the days replayed per candidate by default (a day of rm2 at 40 q/s: about a minute per candidate on one core)
DEFAULT_DAYS = 1


@dataclass(frozen=True)
class Candidate:
    name: str
    usd: float
    attainment: float


@dataclass(frozen=True)
class Choice:
    """A model's pick, the replays behind it (none when its day does not repeat), and why."""

    model: str
    picked: str
    candidates: tuple[Candidate, ...]
    reason: str

    def saving(self) -> float | None:
        """The pick's dollars under reactive's, as a share of reactive's (None: not replayed)."""
        base = next((c for c in self.candidates if c.name == REACTIVE), None)
        got = next((c for c in self.candidates if c.name == self.picked), None)
        if base is None or got is None or base.usd <= 0:
            return None
        return 1.0 - got.usd / base.usd


def minute_workload(rates: np.ndarray, seed: int, batch_dist: object, max_batch: int) -> Workload:
    """Arrivals from per-minute rates (minute ``k`` is ``[60k, 60k + 60)`` s from 0; NaN: none)."""
    rng = np.random.default_rng([seed, 39, 1])
    lam = np.where(np.isnan(rates), 0.0, rates) * MINUTE_S
    counts = rng.poisson(lam)
    starts = np.repeat(np.arange(rates.size, dtype=float) * MINUTE_S, counts)
    arrivals = np.sort(starts + rng.random(starts.size) * MINUTE_S)
    batches = sample_batches(batch_dist, arrivals.size, np.random.default_rng([seed, 39, 2]), max_batch)  # type: ignore[arg-type]
    return Workload(arrivals, batches)


def shifted(history: DemandHistory, first: int, stop: int) -> DemandHistory:
    """Minutes ``first .. stop - 1`` of ``history`` moved so that ``stop`` is minute 0 (the replay's clock)."""
    out = DemandHistory(history.retention_min * 60.0)
    minutes, rates = history.known_minutes()
    keep = (minutes >= first) & (minutes < stop)
    out.record_minutes(minutes[keep] - stop, rates[keep])
    return out


def with_candidate(cfg: Config, name: str) -> Config:
    """The config replayed for one candidate: reactive is ``mode: off``; a forecaster, ``on`` with only it."""
    fc = (cfg.forecast.model_copy(update={"mode": "off"}) if name == REACTIVE else
          cfg.forecast.model_copy(update={"mode": "on", "forecasters": [name]}))
    return cfg.model_copy(update={"forecast": fc})


def choose_by_replay(cfg: Config, profiles: ProfileTable, model: str, history: DemandHistory, now: float, *,
                     days: int = DEFAULT_DAYS, candidates: Sequence[str] | None = None, seed: int = 0,
                     slo_check: SloCheck = default_slo_check, span_min: int | None = None) -> Choice:
    """``model``'s forecaster (module docstring); ``now`` on the history's clock; ``span_min``: replay
    only the last that many minutes instead of ``days``."""
    names = [REACTIVE] + [n for n in (candidates if candidates is not None else cfg.forecast.forecasters)
                          if n != REACTIVE]
    repeats = shape_repeats(history, now)
    if repeats is not True:
        why = "its daily shape does not repeat" if repeats is False else "under two comparable days of history"
        return Choice(model, REACTIVE, (), why)
    end = minute_of(now)
    span = span_min if span_min is not None else days * DAY_MIN
    start = end - span
    rates = history.rates(start, end)
    if not np.nansum(rates) > 0:
        return Choice(model, REACTIVE, (), f"no queries measured in the last {span / DAY_MIN:g} day(s)")
    m = cfg.model(model)
    wl = minute_workload(rates, seed, cfg.workload.batch_dist, m.max_batch)
    past = {model: shifted(history, start - history.retention_min, start)}
    out = []
    for name in names:
        run = replay(with_candidate(cfg, name), profiles, {model: wl}, span * 60.0,
                     ReplaySpec(model=model, seed=seed, history=past), slo_check=slo_check)
        r = report(run)
        att = float(r["models"][model]["slo_attainment"]) if model in r.get("models", {}) else float(r["slo_attainment"])
        out.append(Candidate(name, float(r["cost_usd"]), att))
    base = out[0]
    ok = [c for c in out if c.attainment >= base.attainment and math.isfinite(c.usd)]
    best = min(ok, key=lambda c: c.usd)      # min keeps the first of equals: reactive before the forecasters
    why = (f"cheapest at equal or better attainment over the last {span / DAY_MIN:g} day(s) replayed: "
           + ", ".join(f"{c.name} ${c.usd:.4f} at {100 * c.attainment:.2f} %" for c in out))
    return Choice(model, best.name, tuple(out), why)


__all__ = ["Candidate", "Choice", "DEFAULT_DAYS", "choose_by_replay", "minute_workload", "shifted", "with_candidate"]
