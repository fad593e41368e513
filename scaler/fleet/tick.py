"""One fleet tick, the only one: what the daemon (``daemon.app.Daemon.fleet_tick``) and the replay
(``sim.replay.fleet.ReplayFleet.fleet_tick``) both run, over the state one tick reads and writes
(:class:`FleetState`) and narrow ports (ARCHITECTURE "The path of one fleet tick").

It decides the order of a tick's steps; the decisions themselves are :mod:`scaler.fleet.step`'s:

1. the demand to plan for, per model (:func:`scaler.fleet.step.stabilized_demands` over the
   port's planning demand, :func:`planning_demands`), raised to the forecast over the lead with
   ``forecast.mode: on`` (:func:`scaler.fleet.ahead.ahead_demands`; the scale-in window keeps the
   measured values, and a plan for the raised demand that would retire an instance the reactive
   plan keeps gives way to the reactive plan, :func:`scaler.fleet.ahead.keeps_measured`);
2. whether a plan is due (:func:`scaler.fleet.step.plan_due`; a reason other than the interval
   always plans); if so the decide port (the planner, or a baseline's ``rule`` every tick), the
   models whose demand did not move keeping their shares; else the target held;
3. the generation and the deterministic plan id (:func:`scaler.fleet.step.plan_id_for`);
4. the park round (:func:`scaler.fleet.step.park_round`): unparked workers get their variants back
   (awaited) before anything launches, parked ones take no new queries;
5. the market hooks' ``actuate`` (the actuator, spot: the slot placement), then the parked workers'
   variants unloaded;
6. InsufficientCapacity (spot: no zone left), or a launch over the vCPU quota (the known quota
   lowered by the ``quota_refused`` port): decide and apply once more at once;
7. the result recorded in the state and told to the audit port; on an error the state says so and
   the next interval plans again (an expected one, in one line: no pool fits, EC2 unreachable or
   refusing after botocore's retries, the state store's disk full);
8. the workers synced with the cloud (:func:`sync_workers`): who may register, which model each
   live instance serves (:func:`scaler.fleet.step.worker_models`).

The reconcile tick (:func:`reconcile_tick`, every ``intervals.reconcile_s``) runs over the same ports:
EC2 against the write-ahead intents (DESIGN invariant 3), the result to the audit port, the workers synced.

Between ticks, the model loop's part: :func:`hint_replan_due` (a capacity hint moved) and
:func:`replan_early_due` (demand moved) start a tick before the interval is up.

The ports are ``async``: the daemon's run blocking calls in threads and await the unparks; the
replay's never suspend, and :func:`run_now` drives the tick to its end at one virtual instant.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Coroutine, Literal, Mapping, Protocol, Sequence, TypeVar

from config.errors import UsageError
from config.schema import Config
from scaler.fleet import ahead as fleet_ahead
from scaler.fleet import step as fleet_step
from scaler.fleet.reports import ApplyReport, ReconcileReport
from scaler.planner.base_aux import PlanError
from scaler.planner.batch_mix import BatchMix
from scaler.cloud.provider import CloudError, ManagedInstance
from scaler.planner.joint_plan import JointPlan, ModelShare
from scaler.fleet.parking import ParkState
from scaler.planner.replan import DemandView
from scaler.fleet.market_hooks import MarketHooks
from scaler.forecast.state import ForecastState

T = TypeVar("T")

#: a target and the joint plan behind it (None: a pinned or held pool, or a baseline's rule)
Decision = tuple[dict[str, int], "JointPlan | None"]
#: what a fleet event is: a worker parked or unparked, an instance retired, launched or terminated
EventKind = Literal["park", "unpark", "retire", "launch", "terminate"]


@dataclass
class FleetState:
    """What one fleet tick reads and writes, carried from tick to tick (the daemon's ``status``,
    :class:`daemon.observe.fleet_status.FleetStatus`, adds what only it shows; the replay's ``fleet_state``)."""

    plan: JointPlan | None = None
    target: dict[str, int] = field(default_factory=dict)
    demand: dict[str, DemandView] | None = None       # each model's, as last planned
    generation: int = 0                               # bumped when the target moves (plan ids)
    park: ParkState = field(default_factory=ParkState)
    capacity_hint: dict[str, float] = field(default_factory=dict)    # per model (variants.infaas.capacity_hint)
    hint_planned: dict[str, float] = field(default_factory=dict)     # the hints the last tick applied
    history: dict[str, list[tuple[float, DemandView]]] = field(default_factory=dict)   # the scale-in window
    planned_at: float | None = None                   # when the last plan was made (None: plan again)
    unavailable_planned: frozenset[str] = frozenset()  # the market's plan key then
    plans_made: int = 0                               # the planner's plans (a baseline's rule: none)
    plans_applied: int = 0                            # ticks that applied a target
    last_error: str | None = None
    forecast: ForecastState = field(default_factory=ForecastState)   # histories, fits, boot delays (issue #39)


@dataclass(frozen=True)
class TickResult:
    """What one tick applied (the audit port hears it)."""

    reason: str
    target: dict[str, int]
    plan: JointPlan | None
    demand: Mapping[str, DemandView]
    report: ApplyReport
    changed: bool       # the target moved
    #: each model's forecast over the lead (q/s; None: none), shadow and on; the measured demand is ``demand``
    #: (shadow) or ``measured``
    forecast: Mapping[str, float | None] = field(default_factory=dict)
    measured: Mapping[str, DemandView] | None = None     # the reactive demand, when a forecast raised it


class WindowView(Protocol):
    """A model's demand window as the planning demand reads it (``dispatcher.window``'s snapshot)."""

    arrival_qps: float
    mix: BatchMix | None
    count: int
    steady_qps: float


class CloudListing(Protocol):
    """The managed instances of the cluster (the daemon lists EC2 in a thread)."""

    async def list_managed(self) -> list[ManagedInstance]: ...


class WorkerView(Protocol):
    """The dispatcher's worker registry as the fleet tick sees it."""

    def ready(self) -> frozenset[str]: ...

    def serves(self) -> Mapping[str, str]: ...

    async def unpark_all(self, ids: Sequence[str]) -> None: ...

    def mark_parked(self, instance_id: str) -> None: ...

    async def park_all(self, ids: Sequence[str]) -> None: ...

    def set_base_types(self, plan: JointPlan) -> None: ...

    async def synced(self, listed: list[ManagedInstance], typed: list[ManagedInstance],
                     assignment: Callable[[], dict[str, str]]) -> None: ...


class FleetAudit(Protocol):
    """Where a tick's events and results go (the daemon: logs, ``fleet_events``, the status feed;
    the replay: its counts, targets and errors)."""

    def event(self, kind: EventKind, instance_id: str, target: Mapping[str, int]) -> None: ...

    def applied(self, result: TickResult) -> None: ...

    def failed(self, error: str, expected: bool) -> None: ...

    def list_failed(self, exc: Exception) -> None: ...

    def reconciled(self, report: ReconcileReport) -> None: ...

    def reconcile_failed(self, exc: Exception) -> None: ...


#: the planner: each model's demand, the shares to keep -> target and plan
Decide = Callable[[Mapping[str, DemandView], "Mapping[str, ModelShare] | None"], Awaitable[Decision]]
#: a baseline's rule in place of the planner, every tick: (now, each model's demand) -> target and plan
Rule = Callable[[float, Mapping[str, DemandView]], Decision]
#: runs a blocking call (the daemon: in a thread; the replay: in line)
Offload = Callable[..., Awaitable[Any]]


@dataclass
class FleetPorts:
    """The ports one tick runs over."""

    clock: Callable[[], float]
    cloud: CloudListing
    market: MarketHooks
    workers: WorkerView
    demand: Callable[[], dict[str, DemandView]]
    decide: Decide
    audit: FleetAudit
    offload: Offload
    lease: Callable[[], int | None] = lambda: None      # the cluster lease's generation (plan ids)
    rule: Rule | None = None
    #: launches of these slots were refused for the vCPU quota, the instances listed after: True when
    #: the known quota was lowered (the daemon's ``daemon.aws.quotas``, the replay's), to decide again
    quota_refused: Callable[[list[str], list[ManagedInstance]], bool] | None = None
    wall: Callable[[], float] | None = None   # the demand history's clock (daemon: epoch; None: ``clock``)
    #: the planner without side effects, for ``forecast.mode: shadow``'s price (None: not priced): (target, plan)
    shadow_decide: Callable[[Mapping[str, DemandView]], Awaitable[Decision]] | None = None


def planning_demands(declared: Mapping[str, DemandView], snapshot: Callable[[str], WindowView],
                     hints: Mapping[str, float]) -> dict[str, DemandView]:
    """Each model's demand to plan for (:func:`scaler.fleet.step.planning_demand`) from its own
    window: one model's queries never count as another's."""
    out = {}
    for m, dec in declared.items():
        s = snapshot(m)
        out[m] = fleet_step.planning_demand(s.arrival_qps, s.mix, s.count, dec, hints.get(m, 1.0), s.steady_qps)
    return out


async def fleet_tick(cfg: Config, state: FleetState, ports: FleetPorts, reason: str = "interval") -> TickResult | None:
    """One fleet tick (module docstring); the result applied, None when it failed (the state and the
    audit port say why)."""
    result: TickResult | None = None
    market = ports.market
    try:
        now = ports.clock()
        demand, state.history = fleet_step.stabilized_demands(state.history, now, ports.demand(),
                                                              cfg.intervals.scale_in_s)
        measured, ahead = demand, {}
        if cfg.forecast.mode != "off" and ports.rule is None:   # the scale-in window keeps measured values
            demand, ahead = fleet_ahead.ahead_demands(cfg, state.forecast, measured, (ports.wall or ports.clock)(),
                                                      state.capacity_hint)
        moved = market.plan_key() != state.unavailable_planned
        fresh = reason != "interval" or fleet_step.plan_due(cfg, state.demand, state.planned_at, demand, now, moved)
        if ports.rule is not None:
            target, plan = ports.rule(now, demand)
        elif fresh:   # with several models, those whose demand did not move keep their workers
            keep = fleet_step.unmoved_shares(cfg, reason, state.plan, state.demand, state.planned_at, demand, now, moved)
            target, plan = await ports.decide(demand, keep)
            if fleet_ahead.raised(measured, demand) and fleet_ahead.retires(target, state.target):
                target, plan = await _measured_floor(cfg, state, ports, reason, now, moved, measured, target, plan)
            demand = fleet_step.planned_demands(keep, state.demand, demand)
            state.plans_made += 1
        else:   # nothing the plan rests on moved: converge the pool to it
            target, plan, demand = state.target, state.plan, state.demand or demand
        state.generation = fleet_step.next_generation(target, state.target, state.generation)
        report = await _apply(cfg, state, ports, target, plan)
        lowered = bool(report.quota_refused) and ports.quota_refused is not None and \
            ports.quota_refused(list(report.quota_refused), await ports.cloud.list_managed())
        if lowered or market.replan_now(plan, target):   # a quota lowered; InsufficientCapacity: replan now
            target, plan = await ports.decide(demand, None)
            if fleet_ahead.raised(measured, demand) and fleet_ahead.retires(target, state.target):
                target, plan = await _measured_floor_now(state, ports, measured, target, plan)
            state.generation += 1
            report = await _apply(cfg, state, ports, target, plan)
        changed = target != state.target
        state.plan, state.target, state.demand = plan, target, demand  # type: ignore[assignment]
        if fresh:
            state.planned_at, state.unavailable_planned = now, market.plan_key()
        state.hint_planned = dict(state.capacity_hint)
        if cfg.forecast.mode == "shadow" and ports.rule is None and \
                (fresh or fleet_ahead.shadow_due(cfg, state.forecast, measured, ahead, now, moved)):
            await _shadow(state, ports, now, measured, ahead, target)
        state.plans_applied += 1
        state.last_error = None
        if plan is not None:
            ports.workers.set_base_types(plan)    # each model's own C_j
        result = TickResult(reason, target, plan, demand, report, changed, ahead,  # type: ignore[arg-type]
                            measured if measured is not demand else None)
        ports.audit.applied(result)
    except (UsageError, PlanError, CloudError) as exc:   # no pool fits, EC2 down, a full store: the next tick retries
        state.planned_at, state.last_error = None, str(exc)
        ports.audit.failed(state.last_error, True)
        result = None
    except Exception as exc:  # noqa: BLE001 - keep serving; the next tick retries
        state.planned_at, state.last_error = None, f"{type(exc).__name__}: {exc}"
        ports.audit.failed(state.last_error, False)
        result = None
    await sync_workers(cfg, state, ports.cloud, market.typed, ports.workers, ports.audit)
    return result


async def _shadow(state: FleetState, ports: FleetPorts, now: float, measured: Mapping[str, DemandView],
                  ahead: Mapping[str, float | None], applied: Mapping[str, int]) -> None:
    """``mode: shadow``: the pool planning ahead would have asked for, priced beside the one applied
    (:func:`scaler.fleet.ahead.shadow_price`), each model's capacity in both noted for the served
    estimate (:mod:`scaler.forecast.served`); a raised demand no pool fits is left unpriced."""
    if ports.shadow_decide is None:
        return
    try:
        await fleet_ahead.shadow_note(state.forecast, now, (ports.wall or ports.clock)(), measured, ahead, applied,
                                      state.plan, ports.shadow_decide, ports.market.type_price)
    except (UsageError, PlanError):
        return


async def _measured_floor(cfg: Config, state: FleetState, ports: FleetPorts, reason: str, now: float, moved: bool,
                          measured: dict[str, DemandView], target: dict[str, int],
                          plan: JointPlan | None) -> Decision:
    """A plan for a forecast that retires some held instance: kept only when the reactive plan at
    this instant would retire it too (:func:`scaler.fleet.ahead.keeps_measured`), else the reactive
    plan (the forecast held back until demand moves again)."""
    if reason == "interval" and not fleet_step.plan_due(cfg, state.demand, state.planned_at, measured, now, moved):
        reactive, reactive_plan = state.target, state.plan     # the reactive tick would hold its target
    else:
        keep = fleet_step.unmoved_shares(cfg, reason, state.plan, state.demand, state.planned_at, measured, now, moved)
        reactive, reactive_plan = await ports.decide(measured, keep)
    if fleet_ahead.keeps_measured(target, state.target, reactive):
        return target, plan
    state.forecast.held_back += 1
    return reactive, reactive_plan


async def _measured_floor_now(state: FleetState, ports: FleetPorts, measured: dict[str, DemandView],
                              target: dict[str, int], plan: JointPlan | None) -> Decision:
    """:func:`_measured_floor` for the replan after an apply (a type out of capacity, a quota
    lowered): the reactive plan decided now, as that replan would have been without a forecast."""
    reactive, reactive_plan = await ports.decide(measured, None)
    if fleet_ahead.keeps_measured(target, state.target, reactive):
        return target, plan
    state.forecast.held_back += 1
    return reactive, reactive_plan


async def _apply(cfg: Config, state: FleetState, ports: FleetPorts, target: dict[str, int],
                 plan: JointPlan | None) -> ApplyReport:
    """Park/unpark (:mod:`scaler.fleet.parking`), then the market's actuate moves the pool to target + the
    parked held; unparked workers get their variants back before any launch (a spike meets warm ones)."""
    market, view, audit = ports.market, ports.workers, ports.audit
    plan_id = fleet_step.plan_id_for(target, state.generation, ports.lease())
    shares = fleet_step.model_shares(cfg, plan, target, state.demand)
    wanted = market.extend_target(target)      # spot: with the overprovision
    listed = await ports.cloud.list_managed()
    dec, state.park = fleet_step.park_round(market.parking_view(listed), wanted, view.ready(), market.type_price,
                                            market.actuator.budget, ports.clock(), state.park,
                                            cfg.model_scaling.vm_park_s, shares, view.serves())
    for iid in dec.unpark:
        audit.event("unpark", iid, target)
    await view.unpark_all(dec.unpark)
    for iid in dec.park:
        audit.event("park", iid, target)
        view.mark_parked(iid)     # no new queries from now on; its variants are unloaded below
    for iid in dec.retire:
        audit.event("retire", iid, target)
    report: ApplyReport = await ports.offload(market.actuate, dec.target, plan_id, list(dec.retire), listed)
    gone = set(report.terminated)
    # new parks, and any parked worker that got a variant since (park is idempotent)
    await view.park_all([iid for iid in state.park.parked if iid not in gone])
    for ids in report.launched.values():
        for iid in ids:
            audit.event("launch", iid, target)
    for iid in report.terminated:
        audit.event("terminate", iid, target)
    return report


async def sync_workers(cfg: Config, state: FleetState, cloud: CloudListing,
                       typed: Callable[[list[ManagedInstance]], list[ManagedInstance]], workers: WorkerView,
                       audit: FleetAudit) -> None:
    """The worker view learns the live instances (who may register) and, from the plan held, which
    model each serves (:func:`scaler.fleet.step.worker_models`, asked for when the view wants it)."""
    try:
        listed = await cloud.list_managed()
    except Exception as exc:  # noqa: BLE001 - the next sync retries
        audit.list_failed(exc)
        return
    by_type = typed(listed)

    def assignment() -> dict[str, str]:
        return fleet_step.worker_models(cfg, by_type, state.plan, state.target, state.demand, workers.serves(),
                                        state.park.parked)
    await workers.synced(listed, by_type, assignment)


async def reconcile_tick(cfg: Config, state: FleetState, ports: FleetPorts,
                         reconcile: Callable[[], ReconcileReport]) -> ReconcileReport | None:
    """The reconcile tick: ``reconcile`` (the actuator's: EC2 against the write-ahead intents, stuck
    launches ended, intents re-issued) off the caller's loop, its report to the audit port (a failure
    too: the next round retries), then the workers synced (:func:`sync_workers`)."""
    report: ReconcileReport | None = None
    try:
        report = await ports.offload(reconcile)
        ports.audit.reconciled(report)
    except Exception as exc:  # noqa: BLE001 - fenced, or EC2 failing: the next round retries
        ports.audit.reconcile_failed(exc)
    await sync_workers(cfg, state, ports.cloud, ports.market.typed, ports.workers, ports.audit)
    return report


def hint_replan_due(cfg: Config, state: FleetState) -> bool:
    """The model loop's part (``Daemon._on_vm``, the replay's model tick), once it recorded each
    model's capacity hint in ``state``: a tick now when a hint moved far enough from the one the
    last tick applied (:func:`scaler.fleet.step.hint_replan`)."""
    return fleet_step.hint_replan(cfg, state.capacity_hint, state.hint_planned)


def replan_early_due(cfg: Config, state: FleetState, now: float, demand: Callable[[], dict[str, DemandView]],
                     wall: float | None = None) -> bool:
    """The model tick's check: a tick now when any model's demand moved since the last plan that was
    made (:func:`scaler.fleet.step.replan_early`; none after a failed one, none for a pinned pool);
    with ``forecast.mode: on``, the demand raised to the forecast as the tick raises it (``wall``: the
    history's clock now, default ``now``)."""
    if cfg.pinned_pool or state.demand is None:
        return False
    now_demand, _ = fleet_step.stabilized_demands(state.history, now, demand(), cfg.intervals.scale_in_s)
    if cfg.forecast.mode == "on":
        now_demand, _ = fleet_ahead.ahead_demands(cfg, state.forecast, now_demand, now if wall is None else wall,
                                                  state.capacity_hint)
    return fleet_step.replan_early(cfg, state.demand, now_demand)


def run_now(step: Coroutine[Any, Any, T]) -> T:
    """Run a tick whose ports never suspend (the replay's) to its end, here and now."""
    try:
        step.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    step.close()
    raise RuntimeError("a fleet tick port suspended: the replay's ports must answer at once")


__all__ = ["CloudListing", "Decide", "Decision", "EventKind", "FleetAudit", "FleetPorts", "FleetState", "Offload",
           "Rule", "TickResult", "WindowView", "WorkerView", "fleet_tick", "hint_replan_due", "planning_demands",
           "reconcile_tick", "replan_early_due", "run_now", "sync_workers"]
