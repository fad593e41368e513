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

With accuracy scaling on and an application configured (issue #25) two more:

- ``fleet_only``: costscale itself with accuracy scaling off (the fleet planning the application at
  its most accurate variant; INFaaS's getVariant and model loop serving it, :mod:`sim.replay.infaas`);
- ``accuracy_only``: ``static_budget``'s pool held all day with the accuracy round on (Proteus on
  the budget's pool).

Baselines run without parking (surplus retires at once) and without the model loop (but for
``fleet_only``, which is costscale's, and ``accuracy_only``'s accuracy round); the others serve at
full accuracy, so ``hindsight`` is the full-accuracy reference. With several
models every baseline plans them jointly (:func:`scaler.planner.joint_plan.plan_joint`: ``hindsight`` is
the joint min_cost pool per 5-minute window at each model's peak minute; ``reactive`` tracks a
homogeneous pool per model, within the one budget).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from config.budget import BUDGET_EPS
from config.profiles import ProfileTable
from config.schema import Config
from dispatcher.policy import default_base_type
from scaler.planner.model_plan import SloCheck
from scaler.planner.joint_plan import JointPlan, ModelShare, declared_demands, plan_joint
from scaler.planner.replan import DemandView
from scaler.planner.pools import pool_cost
from sim.replay.query_loop import QueryLoop
from sim.replay.pipelines import split_workloads
from sim.replay.run import ReplayRun, ReplaySpec, replay, workloads_by_model
from sim.replay.fleet import DecideFn
from sim.slo_check import slo_check as default_slo_check
from sim.workload import Workload
from variants.families.applications import with_applications

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
#: with accuracy scaling on and an application configured (issue #25): costscale with accuracy
#: scaling off, and the budget's pool pinned with accuracy scaling on
ACCURACY_BASELINES = ("fleet_only", "accuracy_only")


def baseline_names(cfg: Config) -> tuple[str, ...]:
    """The baselines ``--baselines`` runs for ``cfg``: :data:`BASELINE_NAMES`, and
    :data:`ACCURACY_BASELINES` when an application is accuracy-scaled in the replay."""
    acc = cfg.model_scaling.accuracy_scaling
    scaled = acc.enabled and any(m.family for m in cfg.models)
    return BASELINE_NAMES + (ACCURACY_BASELINES if scaled else ())


def without_accuracy_scaling(cfg: Config) -> Config:
    acc = cfg.model_scaling.accuracy_scaling.model_copy(update={"enabled": False})
    return cfg.model_copy(update={"model_scaling": cfg.model_scaling.model_copy(update={"accuracy_scaling": acc})})


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
    """The joint plan (:func:`scaler.planner.joint_plan.plan_joint`, headroom 0) at each model's rate with
    the config's declared batch mix, memoised per (objective, each model's grid rate)."""

    def __init__(self, cfg: Config, profiles: ProfileTable, slo_check: SloCheck) -> None:
        self.cfg, self.profiles, self.slo_check = cfg, profiles, slo_check
        self.declared = declared_demands(cfg)
        self._memo: dict[tuple[str, tuple[float, ...]], JointPlan] = {}

    def plan(self, objective: str, qps: Mapping[str, float]) -> JointPlan:
        models = [m.name for m in self.cfg.models]
        rates = tuple(_grid_rate(qps.get(m, 0.0)) if objective == "min_cost" or len(models) > 1 else 0.0
                      for m in models)
        key = (objective, rates)
        if key not in self._memo:
            cfg = self.cfg.model_copy(update={"headroom": 0.0, "pinned_pool": None})
            demand = {m: DemandView(r, self.declared[m].mix, False) for m, r in zip(models, rates)}
            self._memo[key] = plan_joint(cfg, self.profiles, demand, slo_check=self.slo_check,
                                         objective=objective)  # type: ignore[arg-type]
        return self._memo[key]

    def pool(self, objective: str, qps: Mapping[str, float]) -> dict[str, int]:
        return self.plan(objective, qps).pool


def _no_parking(cfg: Config) -> Config:
    ms = cfg.model_scaling.model_copy(update={"vm_park_s": 0.0})
    return cfg.model_copy(update={"model_scaling": ms})


def _held(plan: JointPlan) -> DecideFn:
    return lambda now, demand: (plan.pool, plan)


@dataclass
class Reactive:
    """Target tracking on a homogeneous pool of ``itype`` for one model (module doc)."""

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

    def step(self, now: float, room: float) -> int:
        """The new count; a scale-out takes at most ``room`` $/hr more."""
        q = self._q
        if q is not None and now > self._at:
            serving = sum(q.serving().values())
            util = (q.busy_s - self._busy) / ((now - self._at) * max(serving, 1))
            self._busy, self._at = q.busy_s, now
            cap = self.n + max(int(math.floor(room / self.price + BUDGET_EPS)), 0)
            desired = min(max(int(math.ceil(self.n * util / TARGET_UTILIZATION - 1e-9)), 1), cap)
            if desired > self.n and now - self.last_out >= SCALE_OUT_COOLDOWN_S:
                self.n, self.last_out, self.last_activity = desired, now, now
            elif desired < self.n and now - self.last_activity >= SCALE_IN_COOLDOWN_S:
                self.n, self.last_activity = desired, now
        return self.n


@dataclass
class ReactiveFleet:
    """One :class:`Reactive` per model, within one budget (the models scale out in config order)."""

    cfg: Config
    ctl: dict[str, Reactive]

    def attach(self, lanes: Mapping[str, QueryLoop]) -> None:
        for m, c in self.ctl.items():
            c.attach(lanes[m])

    def decide(self, now: float, demand: Mapping[str, DemandView]) -> tuple[dict[str, int], JointPlan | None]:
        for m, c in self.ctl.items():
            others = sum(o.n * o.price for k, o in self.ctl.items() if k != m)
            c.step(now, self.cfg.budget_per_hour - others - c.n * c.price)
        return _fixed(self.cfg, {m: {c.itype: c.n} for m, c in self.ctl.items()}, demand)


def _fixed(cfg: Config, shares: Mapping[str, Mapping[str, int]], demand: Mapping[str, DemandView]) -> tuple[dict[str, int], JointPlan]:
    """Pools decided per model by a baseline's rule, as a joint plan (no per-model planner inside)."""
    prices = cfg.prices()
    models = {m: ModelShare(m, dict(p), pool_cost(dict(p), prices), math.nan,
                            demand[m].qps if m in demand else 0.0, math.nan) for m, p in shares.items()}
    plan = JointPlan(cfg.objective, cfg.budget_per_hour, "baseline", models)
    return plan.pool, plan


def base_type_for(cfg: Config, profiles: ProfileTable, model: str | None) -> str:
    """The base type: :func:`dispatcher.policy.default_base_type` on the profiles' means (a type
    without a profile never wins)."""
    def mean_ms(name: str, itype: str, batch: float) -> float:
        return float(profiles.latency_ms(name, itype, np.asarray([batch]), "mean")[0]) if profiles.has(name, itype) \
            else math.inf
    return default_base_type(cfg, mean_ms, model)


def run_baseline(name: str, cfg: Config, profiles: ProfileTable, workload: Workload | Mapping[str, Workload],
                 duration_s: float, spec: ReplaySpec, *, slo_check: SloCheck = default_slo_check,
                 planner: PoolPlanner | None = None) -> ReplayRun:
    """One baseline's replay (module doc), every model at once (jointly planned)."""
    profiles = with_applications(cfg, profiles)    # an application at its most accurate variant (issue #25)
    planner = planner or PoolPlanner(cfg, profiles, slo_check)
    base_cfg = _no_parking(cfg)
    models_wl, pipeline_loads = split_workloads(cfg, workload, spec.model)
    loads = {m: wl for m, wl in workloads_by_model(cfg, models_wl, spec).items()}

    def per_model(fn):  # type: ignore[no-untyped-def]
        """``fn(arrivals)`` (a rate, or rates per minute over the run) of each model, a pipeline's
        tasks' adding the pipeline's times their factors (issue #26)."""
        out = {m: fn(wl.arrivals) for m, wl in loads.items()}
        for p in cfg.pipelines:
            if p.name in pipeline_loads:
                g = p.graph()
                root = fn(pipeline_loads[p.name].arrivals)
                for task, scale in g.task_demand(1.0).items():
                    out[g.models[task]] = out[g.models[task]] + root * scale
        return out
    peaks = per_model(lambda a: minute_peaks(a, duration_s))
    loads = {**loads, **pipeline_loads}
    if name == "static_peak":
        plan = planner.plan("min_cost", {m: float(p.max()) for m, p in peaks.items()})
        return replay(base_cfg, profiles, loads, duration_s, spec, slo_check=slo_check, decide_fn=_held(plan))
    if name in ("static_budget", "accuracy_only"):   # accuracy_only: the same pool, the accuracy round on
        plan = planner.plan("max_throughput", per_model(lambda a: len(a) / duration_s))
        return replay(base_cfg, profiles, loads, duration_s, spec, slo_check=slo_check, decide_fn=_held(plan),
                      accuracy_round=name == "accuracy_only")
    if name == "fleet_only":      # costscale's own loops, accuracy scaling off
        return replay(without_accuracy_scaling(cfg), profiles, loads, duration_s, spec, slo_check=slo_check)
    if name == "reactive":
        first = planner.plan("min_cost", per_model(lambda a: float(minute_peaks(a, min(duration_s, 60.0))[0])))
        ctl = {}
        for m in peaks:
            itype = base_type_for(cfg, profiles, m)
            price = cfg.catalog()[itype].price_per_hour
            share = first.models[m].pool if m in first.models else {}
            n0 = max(1, min(int(math.ceil(pool_cost(share, cfg.prices(allowed_only=True)) / price)),
                            int(cfg.budget_per_hour // price)))
            ctl[m] = Reactive(itype, price, cfg.budget_per_hour, n=n0)
        fleet = ReactiveFleet(cfg, ctl)
        iv = base_cfg.intervals.model_copy(update={"fleet_s": REACTIVE_PERIOD_S})
        return replay(base_cfg.model_copy(update={"intervals": iv}), profiles, loads, duration_s, spec,
                      slo_check=slo_check, decide_fn=fleet.decide, on_query_loop=fleet.attach)
    if name == "hindsight":
        per = int(HINDSIGHT_WINDOW_S // 60)
        n = max(len(p) for p in peaks.values())
        plans = [planner.plan("min_cost", {m: float(p[k:k + per].max()) if k < len(p) else 0.0
                                           for m, p in peaks.items()}) for k in range(0, n, per)]

        def decide(now: float, demand: Mapping[str, DemandView]) -> tuple[dict[str, int], JointPlan | None]:
            plan = plans[min(int(now // HINDSIGHT_WINDOW_S), len(plans) - 1)]
            return plan.pool, plan
        iv = base_cfg.intervals.model_copy(update={"fleet_s": HINDSIGHT_WINDOW_S})
        zero = ReplaySpec(model=spec.model, service=spec.service, seed=spec.seed,
                          boot_s={"gpu": 0.0, "inferentia": 0.0, "cpu": 0.0}, load_s=0.0, warm_start=True)
        return replay(base_cfg.model_copy(update={"intervals": iv}), profiles, loads, duration_s, zero,
                      slo_check=slo_check, decide_fn=decide)
    raise ValueError(f"unknown baseline {name!r} (known: {', '.join(BASELINE_NAMES + ACCURACY_BASELINES)})")


__all__ = ["ACCURACY_BASELINES", "BASELINE_NAMES", "baseline_names", "without_accuracy_scaling", "HINDSIGHT_WINDOW_S", "PoolPlanner", "Reactive", "ReactiveFleet", "base_type_for", "minute_peaks", "run_baseline"]
