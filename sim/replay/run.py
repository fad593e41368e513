"""Replay a workload through the daemon's loops on one virtual clock, scored in dollars and SLO
(DESIGN "Measuring": the yardstick of every decision; issue #12).

One :class:`sim.clock.VirtualClock` drives, merged in time order:

- the query loop (:class:`sim.replay.query_loop.QueryLoop`): every arrival and completion, the
  dispatcher's policy (Kairos §5.1 matching by default) over the workers registered at that instant;
- the fleet tick every ``intervals.fleet_s`` from 0 (APScheduler's ``next_run_time=now``), the model
  tick every ``intervals.model_s`` (its replan check, :func:`scaler.fleet.step.replan_early`) and
  the reconcile tick every ``intervals.reconcile_s``, all through :class:`sim.replay.fleet.ReplayFleet`
  (the daemon's own decisions and actuator over a fake cloud with boot delays);
- timed events: a worker registering when its instance runs and its model is loaded, an unparked
  worker taking queries again, injected faults (InsufficientCapacity on/off, throttling).

Ties: query events strictly before a tick's time run first; at one instant timed events, then the
fleet tick, the model tick, the reconcile tick. Dollars come from :class:`sim.replay.ledger.CostLedger`
(the pool observed after every launch and termination). The model loop
(:mod:`sim.replay.models`) runs over each model's base variant; an application (a model entry
naming a variant family, issue #25) is served by its variants (:mod:`sim.replay.variant_lane`), and with
accuracy scaling on the accuracy round places and routes them (:mod:`sim.replay.accuracy`, plan
mode; SlackFit binds per call); with it off INFaaS does, as the daemon then runs it: getVariant at
admission and the model loop over the family's members (:mod:`sim.replay.infaas`).

Several models (issue #24): each configured model has a query loop of its own (its queries, its
QoS, its service times) over the workers assigned to it (:mod:`scaler.fleet.worker_assignment`, from the
joint plan's shares), its own demand window and model loop; one fleet, one budget, one ledger.
"""
from __future__ import annotations

import heapq
import itertools
import math
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Mapping

import numpy as np

from config.profiles import ProfileTable
from config.schema import Config, ModelSpec
from dispatcher.latency_model import LatencyModel
from dispatcher.window import DemandWindow
from scaler.cloud.provider import CLUSTER_TAG, pool_of
from scaler.planner.model_plan import SloCheck
from scaler.planner.joint_plan import JointPlan
from scaler.planner.replan import DemandView
from scaler.forecast.history import DemandHistory
from scaler.spot.market import SpotMarket
from sim.clock import VirtualClock
from sim.replay.ledger import CostLedger
from dispatcher.policy import DISPATCH_VIEW_FACTOR, DISPATCH_XI
from sim.policies import dispatcher_policy
from sim.replay.query_loop import QueryLoop
from sim.replay.fleet import DecideFn, ReplayFleet, loops_for
from sim.replay.workers import Decisions
from sim.replay.pipelines import PipelineReplay, split_workloads
from sim.replay.spot import SpotDriver, SpotPriceStep, SpotReplayFleet, spot_prices_for
from sim.replay.spot_trace import SpotTrace
from sim.service import ServiceKind, ServiceModel, ServiceTimes
from sim.slo_check import slo_check as default_slo_check
from sim.replay.variant_lane import VariantLoop
from sim.workload import Workload
from variants.accuracy.allocation import Allocation
from variants.families.applications import application, with_applications

#: launch-to-running delay by hardware class (issue #12: 90 s for GPU types, 60 s for CPU types)
DEFAULT_BOOT_S: dict[str, float] = {"gpu": 90.0, "inferentia": 90.0, "cpu": 60.0}
#: a new worker loads its model before it registers, and an unparked one loads it back (s)
DEFAULT_LOAD_S = 1.0
#: the dispatcher's per-query deadline and queue bound (``dispatcher.admission``)
QUERY_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Fault:
    """An injected cloud fault at ``at_s``: ``capacity`` (launches of ``instance_type`` raise
    InsufficientCapacity until a ``capacity_end``) or ``throttle`` (the next ``count`` calls)."""

    at_s: float
    kind: Literal["capacity", "capacity_end", "throttle"]
    instance_type: str = ""
    count: int = 0


@dataclass(frozen=True)
class ReplaySpec:
    """How the replay runs (everything else comes from the config)."""

    model: str | None = None                      # the model a single workload is for (a one-model config: it)
    service: ServiceKind = "mean"
    seed: int = 0
    boot_s: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_BOOT_S))  # class or type -> s
    load_s: float = DEFAULT_LOAD_S
    faults: tuple[Fault, ...] = ()
    warm_start: bool = True     # the first plan's instances run (and serve) at 0; False: they boot
    #: spot (issue #28): zone availability over time, the spot prices billed (type -> zone -> $/hr over the
    #: shipped table), and price steps during the run
    spot_trace: SpotTrace | None = None
    spot_prices: Mapping[str, Mapping[str, float]] | None = None
    spot_price_steps: tuple[SpotPriceStep, ...] = ()
    #: each model's (and pipeline's) per-minute demand before the trace (``--history``, issue #39), on the
    #: replay's clock (negative minutes); planned from with ``forecast.mode`` shadow or on (sim.replay.forecasting)
    history: Mapping[str, DemandHistory] | None = None


@dataclass
class TargetChange:
    at_s: float
    target: dict[str, int]
    rule: str
    demand_qps: float
    upper_bound_qps: float
    shares: dict[str, dict[str, int]] = field(default_factory=dict)     # each model's pool (joint plans)
    short: dict[str, float] = field(default_factory=dict)               # models short of their need, q/s


@dataclass
class ReplayRun:
    """Everything a replay produced; :mod:`sim.replay.report` turns it into the report. ``lanes``:
    each configured model's query loop (in the config's order)."""

    cfg: Config
    lanes: dict[str, QueryLoop]
    duration_s: float
    ledger: CostLedger
    decisions: Decisions
    targets: list[TargetChange]
    launches: list[tuple[float, str, int]]        # (time, type, count)
    terminations: list[tuple[float, int]]         # (time, count)
    errors: list[tuple[float, str]]
    wall_s: float
    plans: int = 0
    #: accuracy scaling (issue #25): each application's variant swaps as routed, (at, worker, from, to),
    #: and its accuracy plans, (at, allocation)
    variant_swaps: dict[str, list[tuple[float, str, str, str]]] = field(default_factory=dict)
    accuracy_plans: dict[str, list[tuple[float, Allocation]]] = field(default_factory=dict)
    #: each pipeline with queries: its end-to-end figures (:meth:`sim.replay.pipelines.PipelineReplay.summary`)
    pipelines: dict[str, dict] = field(default_factory=dict)  # type: ignore[type-arg]
    #: with spot markets: preemptions, spot share, fallback hours, the cost by market (sim.replay.spot)
    spot: dict | None = None  # type: ignore[type-arg]
    #: with vCPU quotas (``quotas`` or ``--quota``): launches the cloud refused with VcpuLimitExceeded
    #: (the planner keeps every pool within the quotas, so 0; sim.replay.fleet.quota_check)
    quota_refusals: int | None = None
    forecast: dict | None = None  # type: ignore[type-arg]   # shadow/on: forecast against measured (sim.replay.forecasting)
    forecast_minutes: dict[str, list[tuple[float | None, float]]] = field(default_factory=dict)   # per minute, --plot
    #: shadow: the pools planning ahead would have asked for against those applied, in planned dollars
    forecast_shadow: dict | None = None  # type: ignore[type-arg]

    @property
    def models(self) -> list[ModelSpec]:
        return [self.cfg.model(m) for m in self.lanes]

    @property
    def replayed(self) -> list[str]:
        """The models with queries in the workload."""
        return [m for m, q in self.lanes.items() if q.n]

    @property
    def qloop(self) -> QueryLoop:
        """The query loop of the one model with queries (a single-model replay)."""
        busy = self.replayed or list(self.lanes)
        if len(busy) != 1:
            raise ValueError(f"several models were replayed ({', '.join(busy)}): read lanes")
        return self.lanes[busy[0]]

    @property
    def model(self) -> ModelSpec:
        return self.cfg.model(self.qloop.model_name)


def boot_delays(cfg: Config, boot_s: Mapping[str, float]) -> dict[str, float]:
    """Per allowed type: its own entry in ``boot_s``, else its hardware class's, else the default."""
    out = {}
    for t, it in cfg.catalog().items():
        out[t] = float(boot_s.get(t, boot_s.get(it.hardware, DEFAULT_BOOT_S.get(it.hardware, 60.0))))
    return out


def service_times(profiles: ProfileTable, spec: ReplaySpec, model: ModelSpec, n: int, lane: int = 0) -> ServiceTimes:
    """The dispatcher's latency model (profiles, as ``Daemon.start`` builds it) and the service
    times; ``sampled`` draws one standard normal per query from ``spec.seed`` (and the model's
    place in the config past the first, so each model has its own stream)."""
    predictor = LatencyModel.from_profiles(profiles)
    key = [spec.seed, 12] + ([lane] if lane else [])
    z = np.random.default_rng(key).standard_normal(n) if spec.service == "sampled" else None
    return ServiceTimes(model.profile_name, predictor, ServiceModel(profiles, model.profile_name, spec.service), z,
                        max_batch=model.max_batch)


def make_query_loop(cfg: Config, profiles: ProfileTable, workload: Workload, spec: ReplaySpec,
                    record: Callable[[int, float], None] | None = None, model: str | None = None) -> QueryLoop:
    """A query loop over ``workload`` for ``model`` (default ``spec.model``; a one-model config's
    model) with the configured policy and the dispatcher's rules."""
    name = model or spec.model or _only_model(cfg)
    m = cfg.model(name)
    lane = [x.name for x in cfg.models].index(m.name)
    times = service_times(profiles, spec, m, len(workload), lane)
    kw = dict(model=m.profile_name, qos_ms=m.qos_ms, policy=dispatcher_policy(cfg, times.predictor, m.name),
              on_deadline=cfg.dispatcher.on_deadline, xi=DISPATCH_XI, view_factor=DISPATCH_VIEW_FACTOR,
              query_timeout_s=QUERY_TIMEOUT_S, queue_limit=cfg.dispatcher.queue_limit, record=record,
              model_name=m.name, batching=cfg.dispatcher.batching == "work_conserving")
    if m.family:    # an application: its queries are served by its variants (sim.replay.variant_lane)
        app = application(m)
        vt = {v: ServiceTimes(v, times.predictor, ServiceModel(profiles, v, spec.service), times.z,
                              max_batch=m.max_batch) for v, _ in app.variants}
        acc = cfg.model_scaling.accuracy_scaling
        return VariantLoop(workload.arrivals, workload.batches, app=app, variant_times=vt,
                           late=acc.enabled and acc.mode == "slackfit", **kw)
    return QueryLoop(workload.arrivals, workload.batches, times=times, **kw)  # type: ignore[arg-type]


def _only_model(cfg: Config) -> str:
    if len(cfg.models) != 1:
        raise ValueError(f"the config has {len(cfg.models)} models: name the model of the workload "
                         "(ReplaySpec.model) or give one workload per model")
    return cfg.models[0].name


def workloads_by_model(cfg: Config, workload: Workload | Mapping[str, Workload],
                       spec: ReplaySpec) -> dict[str, Workload]:
    """One workload per configured model (empty for a model without queries): ``workload`` is a
    mapping model → workload, or one model's (``spec.model``; a one-model config's)."""
    if isinstance(workload, Workload):
        workload = {spec.model or _only_model(cfg): workload}
    known = {m.name for m in cfg.models}
    bad = sorted(set(workload) - known)
    if bad:
        raise ValueError(f"model {bad[0]!r} is not in the config (known: {', '.join(sorted(known))})")
    empty = Workload(np.zeros(0), np.zeros(0, dtype=np.int64))
    return {m.name: workload.get(m.name, empty) for m in cfg.models}


class _Timeline:
    """Timed events (worker registrations, unpark loads, faults) in time order, FIFO at ties."""

    def __init__(self) -> None:
        self.heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()

    def schedule(self, t: float, fn: Callable[[], None]) -> None:
        heapq.heappush(self.heap, (t, next(self._seq), fn))

    def next_time(self) -> float:
        return self.heap[0][0] if self.heap else math.inf

    def run_due(self, t: float) -> None:
        while self.heap and self.heap[0][0] <= t:
            heapq.heappop(self.heap)[2]()


def _apply_fault(cloud, f: Fault) -> None:  # type: ignore[no-untyped-def]
    if f.kind == "throttle":
        cloud.throttle_next(f.count)
    else:
        cloud.fail_capacity(f.instance_type, f.kind == "capacity")


def replay(cfg: Config, profiles: ProfileTable, workload: Workload | Mapping[str, Workload], duration_s: float,
           spec: ReplaySpec = ReplaySpec(), *, slo_check: SloCheck = default_slo_check,
           progress: Callable[[float], None] | None = None, state_dir: Path | None = None,
           decide_fn: DecideFn | None = None,
           on_query_loop: Callable[[dict[str, QueryLoop]], None] | None = None,
           accuracy_round: bool = False, spot_policy: Any = None) -> ReplayRun:
    """Replay ``workload`` (arrivals from 0; one per model, see :func:`workloads_by_model`) for
    ``duration_s`` virtual seconds under ``cfg``: every configured model on one clock and one budget.

    ``decide_fn(now, demand) -> (target, plan)`` replaces the planner on every fleet tick (the
    baselines of :mod:`sim.replay.baselines`); ``on_query_loop`` receives the query loops (model →
    loop) once built; ``accuracy_round``: with ``decide_fn``, the model loop's accuracy round runs
    all the same (a baseline's, ``accuracy_only``); ``spot_policy``: where spot capacity goes when a
    type may run spot (default costscale's, :class:`scaler.spot.fleet.CostscaleSpot`)."""
    if not duration_s > 0:
        raise ValueError("duration must be > 0")
    wall0 = time.perf_counter()
    workload, pipeline_loads = split_workloads(cfg, workload, spec.model)
    loads = workloads_by_model(cfg, workload, spec)
    profiles = with_applications(cfg, profiles)     # each application's variants (issue #25)
    pipes = PipelineReplay(cfg, loads, pipeline_loads, spec.seed, profiles) if pipeline_loads else None
    if pipes is not None:       # each pipeline's queries through its tasks' lanes (issue #26)
        loads = pipes.lane_workloads(loads)
    clock = VirtualClock(0.0)
    timeline = _Timeline()
    targets: list[TargetChange] = []

    def on_target(t: float, target: dict[str, int], plan: JointPlan | None, demand: Mapping[str, DemandView]) -> None:
        targets.append(TargetChange(t, target, plan.rule if plan else "pinned", sum(d.qps for d in demand.values()),
                                    plan.upper_bound_qps if plan else math.nan,
                                    {m: dict(s.pool) for m, s in plan.models.items()} if plan else {},
                                    dict(plan.short) if plan else {}))

    windows = {m.name: DemandWindow() for m in cfg.models}     # each model's arrivals (the fleet plans from them)
    lanes = {m: make_query_loop(cfg, profiles, wl, spec, record=windows[m].record, model=m) for m, wl in loads.items()}
    if pipes is not None:
        pipes.attach(lanes)
    order = pipes.ordered(lanes) if pipes is not None else list(lanes.values())
    if on_query_loop is not None:
        on_query_loop(lanes)
    tmp = tempfile.TemporaryDirectory(prefix="costscale-replay-") if state_dir is None else None
    market = SpotMarket.from_config(cfg, spot_prices_for(cfg, spec.spot_prices))
    kw: dict[str, Any] = dict(boot_by_type=boot_delays(cfg, spec.boot_s), slo_check=slo_check, windows=windows,
                              loops=loops_for(cfg, profiles, lanes, pipes, spec.load_s, timeline.schedule, decide_fn),
                              on_target=on_target, decide_fn=decide_fn, baseline_accuracy=accuracy_round,
                              warm_start=spec.warm_start, history=spec.history, pipeline_loads=pipeline_loads)
    fleet = (SpotReplayFleet(cfg, profiles, clock, Path(tmp.name) if tmp else state_dir, market=market,
                             policy=spot_policy, **kw) if market.enabled else
             ReplayFleet(cfg, profiles, clock, Path(tmp.name) if tmp else state_dir, **kw))
    spot = SpotDriver(cfg, market, spec.spot_trace, spec.spot_price_steps) if market.enabled else None
    try:
        prices = {**cfg.prices(), **market.slot_prices()}
        ledger = CostLedger(prices, cfg.budget_per_hour)
        launches: list[tuple[float, str, int]] = []
        terminations: list[tuple[float, int]] = []

        def after_call(op: str, args: dict) -> None:  # type: ignore[type-arg]
            if op not in ("launch", "terminate", "reclaim"):
                return
            now = clock.now()
            live = pool_of([i for i in fleet.cloud.all_instances() if i.tags.get(CLUSTER_TAG) == cfg.cluster])
            before = sum(ledger.pool.values())
            ledger.observe(now, live)
            if op == "launch" and sum(live.values()) > before:
                launches.append((now, args["instance_type"], sum(live.values()) - before))
            elif op == "terminate":
                terminations.append((now, len(args["instance_ids"])))

        fleet.cloud.after_call.append(after_call)
        if spot is not None:
            spot.attach(fleet, ledger, timeline.schedule)  # type: ignore[arg-type]
        for f in spec.faults:
            timeline.schedule(f.at_s, lambda f=f: _apply_fault(fleet.cloud, f))
        iv = cfg.intervals
        k_fleet, k_model, k_rec = 0, 1, 1
        last_report = 0.0
        while True:
            t = min(k_fleet * iv.fleet_s, k_model * iv.model_s, k_rec * iv.reconcile_s, timeline.next_time(),
                    duration_s)
            for q in order:
                q.run_until(t)
            clock.advance_to(t)
            if t >= duration_s:
                break
            timeline.run_due(t)
            if t == k_fleet * iv.fleet_s:
                fleet.fleet_tick("interval")
                k_fleet += 1
            if t == k_model * iv.model_s:
                fleet.model_tick()
                k_model += 1
            if t == k_rec * iv.reconcile_s:
                fleet.reconcile_tick()
                k_rec += 1
            if progress is not None and t - last_report >= duration_s / 200:
                last_report = t
                progress(t / duration_s)
        for q in order:
            q.finish(duration_s)
        if pipes is not None:
            pipes.close()
        ledger.close(duration_s)
        if progress is not None:
            progress(1.0)
        return ReplayRun(cfg=cfg, lanes=lanes, duration_s=duration_s, ledger=ledger,
                         decisions=fleet.decisions, targets=targets, launches=launches, terminations=terminations,
                         errors=fleet.errors, wall_s=time.perf_counter() - wall0, plans=fleet.fleet_state.plans_made,
                         variant_swaps={m: r.swap_log for m, r in (fleet.accuracy_rounds or {}).items()},
                         accuracy_plans={m: list(r.plans) for m, r in (fleet.accuracy_rounds or {}).items()},
                         pipelines=_with_rounds(pipes.summary(), fleet.pipeline_rounds) if pipes is not None else {},
                         spot=spot.report(lanes, ledger, duration_s) if spot is not None else None,
                         quota_refusals=fleet.cloud.quota_refusals if fleet.cloud.quota_check is not None else None,
                         forecast=fleet.forecast.summary(), forecast_minutes=fleet.forecast.scored,
                         forecast_shadow=fleet.forecast.shadow_summary(duration_s))
    finally:
        fleet.close()
        if tmp is not None:
            tmp.cleanup()


def _with_rounds(summary: dict[str, dict], rounds: list) -> dict[str, dict]:  # type: ignore[type-arg]
    """Each pipeline's figures with its Loki round's (``scaling``: "per_task" when it has none)."""
    by_name = {r.pipe.name: r.summary() for r in rounds}
    return {n: {**f, "scaling": by_name.get(n, {"scaling": "per_task"})} for n, f in summary.items()}


__all__ = ["DEFAULT_BOOT_S", "DEFAULT_LOAD_S", "Fault", "ReplayRun", "ReplaySpec", "TargetChange", "boot_delays",
           "make_query_loop", "replay", "workloads_by_model"]
