"""What costscale is judged against (``costscale replay --baselines``, issue #12): the same trace
through the same query loop, cloud, actuator and boot delays, with another rule choosing the pool.

- ``static_peak``: the cheapest pool that holds the SLO at the trace's peak one-minute rate
  (``min_cost``, headroom 0, checked by the planner's simulation), held all day;
- ``static_budget``: the ``max_throughput`` pick (Kairos alone), held all day;
- ``reactive``: a homogeneous pool of the planner's base type under target tracking, as an EC2 Auto
  Scaling target-tracking policy runs it: every minute the pool's mean utilisation over the last
  minute sets ``ceil(n × util / 70 %)``; scale-out at most every 60 s, scale-in only 300 s after
  the last scaling activity; never past the budget, never below one instance;
- ``hindsight``: per 5-minute window, the ``min_cost`` pool (headroom 0) for that window's peak
  one-minute rate, known in advance and up with no boot delay, summed over the windows. A
  reference for what the load needed, not a lower bound: a window's pool is checked at its peak
  rate only, and switching costs nothing.

Baselines run without parking (surplus retires at once) and without the model loop.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from config.profiles import ProfileTable
from config.schema import Config
from dispatcher.policy import default_base_type
from scaler.fleet_decision import SloCheck, plan_fleet
from scaler.fleet_step import declared_demand
from scaler.plan import Plan
from scaler.replan import DemandView
from scaler.transitions import pool_cost
from sim.query_loop import QueryLoop
from sim.replay import ReplayRun, ReplaySpec, replay
from sim.slo_check import slo_check as default_slo_check
from sim.workload import Workload

#: target tracking (EC2 Auto Scaling): target utilisation, scale-out and scale-in cooldowns (s)
TARGET_UTILIZATION = 0.70
SCALE_OUT_COOLDOWN_S = 60.0
SCALE_IN_COOLDOWN_S = 300.0
REACTIVE_PERIOD_S = 60.0
#: the hindsight reference's window (s)
HINDSIGHT_WINDOW_S = 300.0
#: planning rates are rounded up to this relative grid so equal windows share one plan
_RATE_GRID = 1.02

BASELINE_NAMES = ("static_peak", "static_budget", "reactive", "hindsight")


def minute_peaks(arrivals: np.ndarray, duration_s: float) -> np.ndarray:
    """Arrivals per whole minute from 0, as q/s."""
    n = max(int(math.ceil(duration_s / 60.0)), 1)
    idx = np.minimum((np.asarray(arrivals) // 60.0).astype(np.int64), n - 1)
    return np.bincount(idx, minlength=n) / 60.0


def _grid_rate(qps: float) -> float:
    """``qps`` rounded up to the 2 % grid (and at least 0.1 q/s)."""
    q = max(qps, 0.1)
    return float(_RATE_GRID ** math.ceil(math.log(q / 0.1, _RATE_GRID)) * 0.1)


class PoolPlanner:
    """``plan_fleet`` with the config's declared batch mix, memoised per (objective, grid rate)."""

    def __init__(self, cfg: Config, profiles: ProfileTable, slo_check: SloCheck) -> None:
        self.cfg, self.profiles, self.slo_check = cfg, profiles, slo_check
        self.mix = declared_demand(cfg).mix
        self._memo: dict[tuple[str, float], dict[str, int]] = {}

    def pool(self, objective: str, qps: float) -> dict[str, int]:
        key = (objective, _grid_rate(qps) if objective == "min_cost" else 0.0)
        if key not in self._memo:
            cfg = self.cfg.model_copy(update={"headroom": 0.0, "pinned_pool": None})
            plan = plan_fleet(cfg, self.profiles, self.mix, key[1], slo_check=self.slo_check,
                              objective=objective)  # type: ignore[arg-type]
            self._memo[key] = {t: n for t, n in plan.chosen.items() if n > 0}
        return dict(self._memo[key])


def _no_parking(cfg: Config) -> Config:
    ms = cfg.model_scaling.model_copy(update={"vm_park_s": 0.0})
    return cfg.model_copy(update={"model_scaling": ms})


def _held(pool: dict[str, int]) -> Callable[[float, DemandView], tuple[dict[str, int], Plan | None]]:
    return lambda now, demand: (dict(pool), None)


@dataclass
class Reactive:
    """Target tracking on a homogeneous pool of ``itype`` (module doc)."""

    itype: str
    price: float
    budget: float
    n: int = 1
    last_out: float = -math.inf
    last_activity: float = -math.inf
    _q: QueryLoop | None = None
    _busy: float = 0.0
    _at: float = 0.0

    def attach(self, q: QueryLoop) -> None:
        self._q = q

    def decide(self, now: float, demand: DemandView) -> tuple[dict[str, int], Plan | None]:
        q = self._q
        if q is not None and now > self._at:
            serving = sum(q.serving().values())
            util = (q.busy_s - self._busy) / ((now - self._at) * max(serving, 1))
            self._busy, self._at = q.busy_s, now
            cap = max(int(math.floor(self.budget / self.price + 1e-9)), 1)
            desired = min(max(int(math.ceil(self.n * util / TARGET_UTILIZATION - 1e-9)), 1), cap)
            if desired > self.n and now - self.last_out >= SCALE_OUT_COOLDOWN_S:
                self.n, self.last_out, self.last_activity = desired, now, now
            elif desired < self.n and now - self.last_activity >= SCALE_IN_COOLDOWN_S:
                self.n, self.last_activity = desired, now
        return {self.itype: self.n}, None


def base_type_for(cfg: Config, profiles: ProfileTable, model: str | None) -> str:
    """The base type: :func:`dispatcher.policy.default_base_type` on the profiles' means (a type
    without a profile never wins)."""
    def mean_ms(name: str, itype: str, batch: float) -> float:
        return float(profiles.latency_ms(name, itype, np.asarray([batch]), "mean")[0]) if profiles.has(name, itype) \
            else math.inf
    return default_base_type(cfg, mean_ms, model)


def run_baseline(name: str, cfg: Config, profiles: ProfileTable, workload: Workload, duration_s: float,
                 spec: ReplaySpec, *, slo_check: SloCheck = default_slo_check,
                 planner: PoolPlanner | None = None) -> ReplayRun:
    """One baseline's replay (module doc)."""
    planner = planner or PoolPlanner(cfg, profiles, slo_check)
    base_cfg = _no_parking(cfg)
    if name == "static_peak":
        pool = planner.pool("min_cost", float(minute_peaks(workload.arrivals, duration_s).max()))
        return replay(base_cfg, profiles, workload, duration_s, spec, slo_check=slo_check, decide_fn=_held(pool))
    if name == "static_budget":
        pool = planner.pool("max_throughput", 0.0)
        return replay(base_cfg, profiles, workload, duration_s, spec, slo_check=slo_check, decide_fn=_held(pool))
    if name == "reactive":
        itype = base_type_for(cfg, profiles, spec.model)
        price = cfg.catalog()[itype].price_per_hour
        first = planner.pool("min_cost", float(minute_peaks(workload.arrivals, min(duration_s, 60.0))[0]))
        n0 = max(1, min(int(math.ceil(pool_cost(first, cfg.prices(allowed_only=True)) / price)),
                        int(cfg.budget_per_hour // price)))
        ctl = Reactive(itype, price, cfg.budget_per_hour, n=n0)
        iv = base_cfg.intervals.model_copy(update={"fleet_s": REACTIVE_PERIOD_S})
        return replay(base_cfg.model_copy(update={"intervals": iv}), profiles, workload, duration_s, spec,
                      slo_check=slo_check, decide_fn=ctl.decide, on_query_loop=ctl.attach)
    if name == "hindsight":
        peaks = minute_peaks(workload.arrivals, duration_s)
        per = int(HINDSIGHT_WINDOW_S // 60)
        pools = [planner.pool("min_cost", float(peaks[k:k + per].max())) for k in range(0, len(peaks), per)]

        def decide(now: float, demand: DemandView) -> tuple[dict[str, int], Plan | None]:
            return dict(pools[min(int(now // HINDSIGHT_WINDOW_S), len(pools) - 1)]), None
        iv = base_cfg.intervals.model_copy(update={"fleet_s": HINDSIGHT_WINDOW_S})
        zero = ReplaySpec(model=spec.model, service=spec.service, seed=spec.seed,
                          boot_s={"gpu": 0.0, "inferentia": 0.0, "cpu": 0.0}, load_s=0.0, warm_start=True)
        return replay(base_cfg.model_copy(update={"intervals": iv}), profiles, workload, duration_s, zero,
                      slo_check=slo_check, decide_fn=decide)
    raise ValueError(f"unknown baseline {name!r} (known: {', '.join(BASELINE_NAMES)})")


__all__ = ["BASELINE_NAMES", "PoolPlanner", "Reactive", "base_type_for", "minute_peaks", "run_baseline"]
