"""The decisions of one fleet tick, apart from its I/O: what the daemon (``daemon.app.Daemon``)
and the replay (``sim.replay.fleet.ReplayFleet``) both call, so the replay cannot drift from the
daemon (DESIGN "One clock", "Measuring").

A fleet tick (ARCHITECTURE "The path of one fleet tick"; Kairos §5.2 plans the pool, INFaaS
§4.2.3 starts and retires the VMs) is, in order:

1. :func:`declared_demand` / :func:`planning_demand`, per model: the demand to plan for: measured
   once the model's window holds enough queries, never below its declared forecast, times the model
   loop's capacity hint for it (:mod:`scaler.planner.replan`);
2. :func:`stabilized_demands`: per model, the highest of that over the scale-in window
   (``intervals.scale_in_s``);
3. :func:`fleet_target`: the pinned pool, or the joint plan for every model
   (``scaler.planner.joint_plan.plan_joint``) without the types in a capacity cooldown, keeping each
   model's pool held when it still fits;
4. :func:`next_generation` and :func:`plan_id_for`: a new generation when the target moved, and
   the deterministic plan id (so a restarted daemon re-derives the same ClientTokens, DESIGN
   invariant 3);
5. :func:`park_round`: park surplus warm, unpark, retire after the hold (``scaler.fleet.parking``), over
   the live types and the target's;
6. the actuator applies the result (I/O: ``scaler.fleet.actuator.FleetActuator.apply``); when a type of the
   target ran out of capacity, :func:`replan_without_unavailable` says to decide and apply once
   more at once.

Between ticks, :func:`replan_early` (checked every model tick) and :func:`hint_replan` (when the
model loop's capacity hint moved) start a tick before the interval is up.

Pure: the caller passes the window's numbers, the time and the prices; no I/O, no clock.
"""
from __future__ import annotations

import hashlib
from typing import Callable, Collection, Mapping, Sequence

from config.profiles import ProfileTable
from config.schema import Config
from scaler.planner.batch_mix import BatchMix
from scaler.cloud.provider import ManagedInstance
from scaler.planner.model_plan import SloCheck
from scaler.planner.joint_plan import JointPlan, ModelShare, plan_joint
from scaler.fleet.parking import ParkDecision, ParkState, decide_parking
from scaler.planner.pick_cache import PickCache
from scaler.fleet.worker_assignment import assign_workers, released, shares_for
from scaler.planner.replan import (SHORT_HORIZON_S, STEADY_HORIZON_S, DemandView, demand_for_planning, planning_rate,
                           significant_change)

#: the model loop's capacity hint moving this far from the one last planned with replans at once
HINT_REPLAN_DELTA = 0.2

#: each configured model's demand (issue #24: every loop works per model)
Demands = Mapping[str, DemandView]


def planning_demand(measured_qps: float, measured_mix: BatchMix | None, samples: int, declared: DemandView,
                    capacity_hint: float, steady_qps: float) -> DemandView:
    """The demand the fleet plans for: :func:`scaler.planner.replan.demand_for_planning` over the window's
    rate, mix and sample count, times the model loop's capacity hint. The rate is
    :func:`scaler.planner.replan.planning_rate` of ``steady_qps`` (the window's rate over
    :func:`steady_horizon`) and ``measured_qps`` (the 10 s rate): the steady rate unless the short
    one shows a rise beyond noise."""
    d = demand_for_planning(planning_rate(measured_qps, steady_qps), measured_mix, samples, declared.qps, declared.mix)
    if capacity_hint != 1.0:
        d = DemandView(d.qps * capacity_hint, d.mix, d.measured)
    return d


def steady_horizon(cfg: Config) -> float:
    """The horizon of the rate the fleet plans from (:func:`scaler.planner.replan.planning_rate`):
    :data:`scaler.planner.replan.STEADY_HORIZON_S` (60 s), never longer than the scale-in window
    (``intervals.scale_in_s``: a rate counted over more would hold a peak past it) nor shorter than
    :data:`scaler.planner.replan.SHORT_HORIZON_S` (10 s)."""
    return max(SHORT_HORIZON_S, min(STEADY_HORIZON_S, cfg.intervals.scale_in_s))


def stabilized_demand(history: Sequence[tuple[float, DemandView]], now: float, demand: DemandView,
                      window_s: float) -> tuple[DemandView, list[tuple[float, DemandView]]]:
    """Scale-in stabilization: plan for the highest rate of the last ``window_s`` seconds (with
    today's batch mix), so demand that dips and comes back does not retire and relaunch instances
    (the flip-flop the replay found at a steady 36 q/s: t3.xlarge 3 → 2 → 3 within 12 s). Scale-out
    is not delayed: a rise is the highest rate at once. Returns the demand to plan for and the
    history to keep (``history`` plus ``demand`` at ``now``, older entries dropped).

    The window is Kubernetes HPA's downscale stabilization (default 300 s); EC2 target tracking
    waits a 300 s scale-in cooldown the same way."""
    kept = [(t, d) for t, d in history if now - t < window_s] + [(now, demand)]
    top = max(kept, key=lambda td: td[1].qps)[1]
    if top.qps <= demand.qps:
        return demand, kept
    return DemandView(top.qps, demand.mix, demand.measured), kept


def stabilized_demands(history: Mapping[str, Sequence[tuple[float, DemandView]]], now: float, demand: Demands,
                       window_s: float) -> tuple[dict[str, DemandView], dict[str, list[tuple[float, DemandView]]]]:
    """:func:`stabilized_demand` for each model, over its own history."""
    out, kept = {}, {}
    for m, d in demand.items():
        out[m], kept[m] = stabilized_demand(history.get(m, ()), now, d, window_s)
    return out, kept


def total_qps(demand: Demands) -> float:
    """The summed rate of every model (logs, Status)."""
    return float(sum(d.qps for d in demand.values()))


def fleet_target(cfg: Config, profiles: ProfileTable, demand: Demands, *, slo_check: SloCheck,
                 unavailable: Sequence[str] = (), current: Mapping[str, Mapping[str, int]] | None = None,
                 types: Sequence[str] | None = None, confirmed: PickCache | None = None,
                 fixed: Mapping[str, Mapping[str, int]] | None = None,
                 types_for: Mapping[str, Sequence[str]] | None = None,
                 keep: Mapping[str, ModelShare] | None = None
                 ) -> tuple[dict[str, int], JointPlan | None]:
    """The pool to hold: ``cfg.pinned_pool`` (no plan), or the joint plan
    (:func:`scaler.planner.joint_plan.plan_joint`) for every model's ``demand`` without the ``unavailable``
    types, ``current`` being each model's pool held now (``min_cost`` keeps it while it covers the
    demand); ``types`` narrows the allowed types (None: all); ``confirmed``: the picks confirmed so
    far (``max_throughput``; see ``plan_fleet``); ``fixed``, ``types_for``: models held on a
    conservative pool, and the types a model has profiles on; ``keep``: shares to hold
    (:func:`unmoved_shares`) (``plan_joint``). Raises
    ``scaler.planner.base_aux.PlanError`` when no pool fits."""
    if cfg.pinned_pool:
        return {t: n for t, n in cfg.pinned_pool.items() if n > 0}, None
    plan = plan_joint(cfg, profiles, demand, slo_check=slo_check, exclude=sorted(unavailable), current=current,
                      types=types, confirmed=confirmed, fixed=fixed, types_for=types_for, keep=keep)
    return plan.pool, plan


def next_generation(target: Mapping[str, int], previous: Mapping[str, int], generation: int) -> int:
    """A new generation each time the target moves (its plan id, and so its tokens, change)."""
    return generation + 1 if dict(target) != dict(previous) else generation


def plan_id_for(target: Mapping[str, int], generation: int, lease_generation: int | None = None) -> str:
    """A deterministic plan id: the same target at the same generation gives the same id, so a
    restarted daemon re-derives the same ClientTokens (DESIGN invariant 3). With replicas
    (issue #27), the cluster lease's generation leads the id: a replica that takes the lease over
    counts its own generations from 0 again, and must not re-derive the ClientTokens of the dead
    holder's plans (EC2 would answer a reused token with the old launch, not a new one)."""
    digest = hashlib.sha256(repr(sorted(target.items())).encode()).hexdigest()[:10]
    lead = f"L{lease_generation}" if lease_generation is not None else ""
    return f"{lead}g{generation}-{digest}"


def park_round(instances: Sequence[ManagedInstance], target: Mapping[str, int], ready: frozenset[str] | set[str],
               price: Callable[[str], float], budget: float, now: float, state: ParkState, hold_s: float,
               shares: Mapping[str, Mapping[str, int]] | None = None, assignment: Mapping[str, str] | None = None
               ) -> tuple[ParkDecision, ParkState]:
    """:func:`scaler.fleet.parking.decide_parking` over the live instances' types and the target's, with
    their prices from ``price`` (the actuator's). With several models (``shares``: each model's pool
    under ``target``; ``assignment``: the model each instance serves now), the instances their
    model no longer wants are parked first (:func:`scaler.fleet.worker_assignment.released`: the booting
    ones before the ready ones)."""
    types = {i.instance_type for i in instances if i.live} | set(target)
    prices = {t: price(t) for t in types}
    prefer: set[str] = set()
    if shares is not None and assignment and len(shares) > 1:
        prefer = released([(i.instance_id, i.instance_type) for i in instances if i.live], shares, assignment, ready)
    return decide_parking(instances, target, ready, prices, budget, now, state, hold_s, prefer)


def replan_without_unavailable(plan: JointPlan | None, target: Mapping[str, int], unavailable: set[str]) -> bool:
    """After an apply: a planned target with a type that ran out of capacity (InsufficientCapacity)
    is decided again at once without it (a pinned pool is not)."""
    return plan is not None and bool(unavailable & set(target))


#: demand that fell this far (relative, and 1 q/s) below the plan's is planned for again (the
#: scale-in window has already held the peak for ``intervals.scale_in_s``). At 10 % the pool kept
#: up to a tenth of the demand above what it needed on a slow fall (an r5n.large, 10 q/s, at 100 q/s
#: for 25 minutes of a 24 h day's evening); the 60 s rate it compares is steady to ~1.3 % at 100 q/s
SCALE_IN_STEP = 0.03
#: an interval tick plans again at least this often even when demand held still (s)
PLAN_MAX_AGE_S = 1800.0


def demand_moved(cfg: Config, planned: DemandView, now: DemandView) -> bool:
    """Demand left what the plan was made for: it rose past half the headroom (the plan covers
    ``demand × (1 + headroom)``; at least 5 % and 1 q/s), fell :data:`SCALE_IN_STEP` (3 %, 1 q/s),
    or the mean batch moved (:func:`scaler.planner.replan.significant_change`: 25 %). The replay measured the
    fall step: 25 % → 10 % cut a compressed diurnal day's dollars 1.7 % at -0.03 points of
    attainment; 10 % → 3 % (on the 60 s rate) 1.6 % at -0.01 points (BENCHMARKS.md "replay")."""
    rise = now.qps - planned.qps
    if rise >= 1.0 and rise > planned.qps * max(cfg.headroom / 2.0, 0.05):
        return True
    if -rise >= 1.0 and -rise > planned.qps * SCALE_IN_STEP:
        return True
    return significant_change(planned, now)


def demands_moved(cfg: Config, planned: Demands, now: Demands) -> bool:
    """Any model's demand moved since the plan (:func:`demand_moved`), or a model the plan had no
    demand for has some now."""
    for m, d in now.items():
        p = planned.get(m)
        if p is None:
            if d.qps > 0:
                return True
        elif demand_moved(cfg, p, d):
            return True
    return False


def replan_early(cfg: Config, planned: Demands | None, now: Demands) -> bool:
    """Checked every model tick: replan before the interval when any model's demand moved since
    the last plan that was made (:func:`demands_moved`; none after a failed one: the fleet interval
    retries that), never for a pinned pool."""
    return not cfg.pinned_pool and planned is not None and demands_moved(cfg, planned, now)


def plan_due(cfg: Config, planned: Demands | None, planned_at: float | None, now_demand: Demands, now: float,
             unavailable_changed: bool) -> bool:
    """An interval tick plans again only when something the plan rests on moved: no plan yet (or
    the last failed), demand moved (:func:`demand_moved`), a type ran out of capacity or came back,
    or the plan is :data:`PLAN_MAX_AGE_S` old; otherwise it keeps the target and only converges the
    pool to it (launch what is missing, parking). Ticks for another reason (reload, profiles
    measured, capacity hint) always plan."""
    if cfg.pinned_pool or planned is None or planned_at is None or unavailable_changed:
        return True
    return now - planned_at >= PLAN_MAX_AGE_S or demands_moved(cfg, planned, now_demand)


#: the reasons for a tick whose plan may keep the models whose demand did not move
KEEP_REASONS = frozenset({"interval", "demand changed", "model loop capacity hint"})


def unmoved_shares(cfg: Config, reason: str, plan: JointPlan | None, planned: Demands | None,
                   planned_at: float | None, now_demand: Demands, now: float,
                   unavailable_changed: bool) -> dict[str, ModelShare]:
    """With several models, the shares of the last ``joint-min-cost`` plan whose model's demand has
    not moved (:func:`demand_moved`) since it was planned: the next plan keeps them and plans only
    the models whose demand moved (``plan_joint(keep=...)``), as one model's plan stays while its
    demand holds. None when the tick is for another reason (a reload, a type out of capacity, the
    plan :data:`PLAN_MAX_AGE_S` old) or the last plan split the budget."""
    if (len(cfg.models) < 2 or reason not in KEEP_REASONS or plan is None or planned is None or planned_at is None
            or unavailable_changed or now - planned_at >= PLAN_MAX_AGE_S or plan.rule != "joint-min-cost"):
        return {}
    return {m: s for m, s in plan.models.items()
            if s.plan is not None and m in planned and m in now_demand and not demand_moved(cfg, planned[m], now_demand[m])}


def planned_demands(kept: Mapping[str, ModelShare], planned: Demands | None, demand: Demands) -> dict[str, DemandView]:
    """The demand each model's share was planned for: a kept share's is the one it was planned
    for then (so a slow drift still moves it past :func:`demand_moved`), the others' is now's."""
    return {m: (planned[m] if planned is not None and m in kept and m in planned else d) for m, d in demand.items()}


def model_shares(cfg: Config, plan: JointPlan | None, target: Mapping[str, int],
                 planned: Demands | None) -> dict[str, dict[str, int]]:
    """Each model's pool under ``target``: the joint plan's, else ``target`` dealt over the models
    by their planned demand (:func:`scaler.fleet.worker_assignment.shares_for`)."""
    qps = {m: d.qps for m, d in (planned or {}).items()}
    return shares_for(plan, target, [m.name for m in cfg.models], qps)


def worker_models(cfg: Config, instances: Sequence[ManagedInstance], plan: JointPlan | None,
                  target: Mapping[str, int], planned: Demands | None, previous: Mapping[str, str],
                  parked: Collection[str]) -> dict[str, str]:
    """After a tick, which model each live instance serves (:func:`scaler.fleet.worker_assignment.assign_workers`
    over :func:`model_shares`): the daemon hands it to the dispatcher, the replay to its query loops."""
    qps = {m: d.qps for m, d in (planned or {}).items()}
    return assign_workers([(i.instance_id, i.instance_type) for i in instances if i.live],
                          model_shares(cfg, plan, target, planned), previous, qps, parked=parked)


def fleet_settled(target: Mapping[str, int], serving: Mapping[str, int]) -> bool:
    """The whole target serves: at least ``target[t]`` workers of every type ``t`` take queries
    (the model loop's capacity hint rises only then, ``variants.infaas.capacity_hint``)."""
    return all(serving.get(t, 0) >= n for t, n in target.items())


def hint_replan(cfg: Config, hint: Mapping[str, float], hint_planned: Mapping[str, float]) -> bool:
    """Replan at once when a model's capacity hint (the model loop's, per model) moved
    :data:`HINT_REPLAN_DELTA` from the one the last plan used (not for a pinned pool)."""
    return not cfg.pinned_pool and any(abs(h - hint_planned.get(m, 1.0)) >= HINT_REPLAN_DELTA for m, h in hint.items())


__all__ = ["HINT_REPLAN_DELTA", "KEEP_REASONS", "model_shares", "worker_models", "unmoved_shares", "planned_demands",
           "Demands", "stabilized_demands", "total_qps", "demands_moved", "planning_demand", "steady_horizon",
           "stabilized_demand", "fleet_target", "next_generation", "plan_id_for", "park_round",
           "replan_without_unavailable", "demand_moved", "replan_early", "plan_due", "PLAN_MAX_AGE_S", "fleet_settled",
           "hint_replan"]
