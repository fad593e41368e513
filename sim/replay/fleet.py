"""The daemon's fleet loop on a virtual clock: the one fleet tick (:func:`scaler.fleet.tick.fleet_tick`,
``Daemon.fleet_tick`` runs the same) over the replay's ports, the fleet part of the model tick
(:func:`scaler.fleet.tick.replan_early_due`, :func:`scaler.fleet.tick.hint_replan_due`) and the
reconcile tick, through the same decisions (:mod:`scaler.fleet.step`) and the same actuator.

What is real here: ``scaler.fleet.actuator.FleetActuator`` (budget-ordered transitions, write-ahead
intents in a real ``scaler.fleet.state.StateStore``, reconciliation) over ``scaler.cloud.fake.FakeCloud``
(boot delay per type, InsufficientCapacity and throttling injectable), the demand window
(``dispatcher.window.DemandWindow``), the planner (``plan_fleet`` with ``sim.slo_check.slo_check``)
and parking. What stands in for I/O: :class:`sim.replay.workers.ReplayWorkers`, the dispatcher's
worker registry (register when the instance runs and its model is loaded, park, unpark, drain,
forget) over :class:`sim.replay.query_loop.QueryLoop`; its ports never wait, so a tick runs to its end at
one virtual instant (:func:`scaler.fleet.tick.run_now`).

Differences from the live daemon, all in virtual time: a tick takes no time (the live one plans
for ~0.3-1 s while queries flow); a drain does not hold the tick up (the drained worker finishes
its query after its instance stops being billed, by at most one service time); an unpark's loads
run beside the actuator instead of before it (bounded by 15 s live).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from config.profiles import ProfileTable
from config.schema import Config
from dispatcher.window import DemandWindow
from scaler.fleet import step as fleet_step
from scaler.fleet import tick as fleet_tick
from scaler.fleet.actuator import FleetActuator
from scaler.cloud.provider import ManagedInstance
from scaler.cloud.fake import FakeCloud, QuotaCheck
from scaler.cloud.slots import split_slot
from scaler.planner.quota import lowered_quotas, quota_for
from config.sections.quotas import merged_quotas
from scaler.planner.model_plan import SloCheck
from scaler.fleet.step import Demands
from scaler.fleet.reports import ReconcileReport
from scaler.fleet.tick import EventKind, FleetPorts, FleetState, TickResult, run_now
from scaler.planner.joint_plan import JointPlan, ModelShare, declared_demands
from scaler.planner.pick_cache import PickCache
from scaler.planner.replan import DemandView
from scaler.fleet.market_hooks import MarketHooks
from scaler.fleet.state import StateStore
from sim.clock import VirtualClock
from sim.pick_eval import confirmed_plan
from scaler.forecast.history import DemandHistory
from sim.replay.accuracy import ReplayAccuracyRound
from sim.replay.forecasting import ReplayForecast
from sim.replay.infaas import ReplayInfaas
from sim.replay.models import ReplayModelLoop
from sim.replay.query_loop import QueryLoop
from sim.replay.pipeline_round import ReplayPipelineRound, pipeline_rounds
from sim.replay.pipelines import PipelineReplay
from sim.replay.workers import Decisions, ReplayWorkers, Schedule
from sim.workload import Workload
from sim.replay.variant_lane import VariantLoop
from variants.infaas.capacity_hint import next_capacity_hint
from variants.infaas.model_decision import model_params_for

log = logging.getLogger("costscale.replay")

#: a baseline's rule in place of the planner: (now, each model's demand) -> (target, joint plan or None)
DecideFn = fleet_tick.Rule
#: what the replay is told of each new target: (at, target, plan, each model's demand)
OnTarget = Callable[[float, dict[str, int], JointPlan | None, Demands], None]


def quota_check(cfg: Config) -> QuotaCheck | None:
    """The account's vCPU quotas (the config's ``quotas``) as EC2 enforces them on a launch: the
    slot's market's running vCPUs of its family, the launch included, at most the quota (None: no
    quota, nothing refused). The replay's cloud refuses over it, so a replay shows a plan that asks
    for more than the account runs."""
    types = list(cfg.full_catalog())
    quotas = {"on_demand": quota_for(cfg, types, "on_demand"), "spot": quota_for(cfg, types, "spot")}
    if all(q is None for q in quotas.values()):
        return None

    def check(slot: str, live: list[ManagedInstance], n: int) -> str | None:
        t, zone = split_slot(slot)
        market = "on_demand" if zone is None else "spot"
        q = quotas[market]
        if q is None or q.family.get(t) not in q.limits:
            return None
        pool: dict[str, int] = {t: n}
        for i in live:
            it, iz = split_slot(i.instance_type)
            if (iz is None) == (zone is None):
                pool[it] = pool.get(it, 0) + 1
        f = q.family[t]
        used = q.used(pool).get(f, 0)
        if used <= q.limits[f]:
            return None
        return f"VcpuLimitExceeded: {n} {slot} would run {used} {market} {f} vCPUs, quota {q.limits[f]}"
    return check


@dataclass
class ReplayLoops:
    """What runs beside the fleet loop, built once the fleet is (it needs the fleet's cloud, windows
    and worker sync): the worker registry, each model's model loop, and the rounds that place
    variants (Loki's per pipeline, INFaaS's or the accuracy round's per application)."""

    workers: ReplayWorkers
    model_loops: dict[str, ReplayModelLoop]
    #: Loki's round of each pipeline scaled as one: its task models are left out of the per-model rounds
    pipeline_rounds: list[ReplayPipelineRound] = field(default_factory=list)
    #: accuracy scaling off: each application's getVariant and INFaaS round (sim.replay.infaas)
    infaas: dict[str, ReplayInfaas] = field(default_factory=dict)
    #: accuracy scaling on: each application's accuracy round (the INFaaS round then runs for none)
    accuracy_rounds: dict[str, ReplayAccuracyRound] | None = None


def loops_for(cfg: Config, profiles: ProfileTable, lanes: Mapping[str, QueryLoop], pipes: PipelineReplay | None,
              load_s: float, schedule: Schedule, decide_fn: DecideFn | None) -> Callable[[ReplayFleet], ReplayLoops]:
    """The builder of what runs beside the fleet (:class:`ReplayLoops`) over each model's query loop:
    the worker registry, each model's model loop, Loki's round of each pipeline scaled as one (none
    under a baseline's rule), and each application's INFaaS round (accuracy scaling off) or
    accuracy round (on, plan mode; SlackFit has none)."""
    def build(fleet: ReplayFleet) -> ReplayLoops:
        clock = fleet.clock
        workers = ReplayWorkers(lanes, clock, schedule, fleet.cloud.running_at, load_s, fleet.decisions,
                                warm_until=fleet.cloud.warm_until)
        out = ReplayLoops(workers, {m: ReplayModelLoop(cfg, profiles, q.times.predictor, m) for m, q in lanes.items()})
        params = model_params_for(cfg)
        acc = params.accuracy
        if pipes is not None and decide_fn is None:
            out.pipeline_rounds = pipeline_rounds(cfg, pipes, lanes, fleet.windows, clock.now, workers.pins,
                                                  fleet.sync_workers, load_s, schedule)
        owned = {m for r in out.pipeline_rounds for m in r.owned()}
        if acc is None:         # getVariant and the INFaaS round on each application
            out.infaas = {m: ReplayInfaas(q, params, load_s, out.model_loops[m].hardware, out.model_loops[m].prices,
                                          profiles, schedule, clock.now, cfg.model(m).min_accuracy)
                          for m, q in lanes.items() if isinstance(q, VariantLoop) and m not in owned}
        else:     # the model loop in accuracy mode (issue #25)
            apps = ({m: q for m, q in lanes.items() if isinstance(q, VariantLoop) and m not in owned}
                    if acc.mode == "plan" else {})
            out.accuracy_rounds = {m: ReplayAccuracyRound(q, fleet.windows[m], acc, load_s, schedule, clock.now)
                                   for m, q in apps.items()}
        return out
    return build


class ReplayAudit:
    """The fleet tick's audit port in the replay: events counted (:class:`sim.replay.workers.Decisions`),
    each new target told to ``on_target``, errors kept with their time."""

    def __init__(self, decisions: Decisions, clock: VirtualClock, on_target: OnTarget | None) -> None:
        self.decisions, self.clock, self.on_target = decisions, clock, on_target
        self.errors: list[tuple[float, str]] = []

    def event(self, kind: EventKind, instance_id: str, target: Mapping[str, int]) -> None:
        if kind != "retire":
            setattr(self.decisions, kind, getattr(self.decisions, kind) + 1)

    def applied(self, result: TickResult) -> None:
        if result.changed and self.on_target is not None:
            self.on_target(self.clock.now(), dict(result.target), result.plan, result.demand)

    def failed(self, error: str, expected: bool) -> None:
        self.errors.append((self.clock.now(), error))

    def list_failed(self, exc: Exception) -> None:
        """Logged live ("list instances failed"); the next sync retries."""

    def reconciled(self, report: ReconcileReport) -> None:
        self.decisions.terminate += len(report.terminated_stuck) + len(report.terminated_unwanted)
        self.decisions.launch += len(report.reissued)

    def reconcile_failed(self, exc: Exception) -> None:   # logged live; the next reconcile retries
        self.errors.append((self.clock.now(), f"reconcile: {type(exc).__name__}: {exc}"))


class _Listing:
    """The fake cloud as the fleet tick lists it (at once)."""

    def __init__(self, cloud: FakeCloud) -> None:
        self.cloud = cloud

    async def list_managed(self) -> list[ManagedInstance]:
        return self.cloud.list_managed()


async def _in_line(fn: Callable[..., Any], *args: Any) -> Any:
    return fn(*args)


class ReplayFleet:
    """The fleet loop of :class:`daemon.app.Daemon` over a fake cloud, on ``clock``, planning from
    each model's ``windows``; ``loops`` builds what runs beside it (:class:`ReplayLoops`) from the
    fleet once its cloud exists."""

    def __init__(self, cfg: Config, profiles: ProfileTable, clock: VirtualClock, state_dir: Path, *,
                 boot_by_type: dict[str, float], slo_check: SloCheck, windows: Mapping[str, DemandWindow],
                 loops: Callable[[ReplayFleet], ReplayLoops],
                 on_target: OnTarget | None = None, decide_fn: DecideFn | None = None,
                 baseline_accuracy: bool = False, warm_start: bool = False,
                 history: Mapping[str, DemandHistory] | None = None,
                 pipeline_loads: Mapping[str, Workload] | None = None) -> None:
        self.cfg, self.profiles, self.clock, self.slo_check = cfg, profiles, clock, slo_check
        self.cloud = FakeCloud(cfg.cluster, clock=clock.now, boot_by_type=boot_by_type, quota_check=quota_check(cfg))
        if warm_start:   # the first plan's pool is up at 0, as a daemon that has been running
            self.cloud.warm_until = 0.0
        self.store = StateStore.open(state_dir / "state.db")
        self.actuator = FleetActuator(self.cloud, self.store, cfg.catalog(), cfg.budget_per_hour, clock=clock.now,
                                      drain=self._drain, pending_timeout_s=cfg.launch.pending_timeout_s, other_prices=cfg.table_prices())
        #: the fleet tick's market hooks, the daemon's (on-demand here; spot: sim.replay.spot.SpotReplayFleet)
        self.hooks = self._market_hooks()
        self.models = [m.name for m in cfg.models]
        self.windows = dict(windows)     # each model's arrivals (its query loop records them)
        self.declared = declared_demands(cfg)
        self.fleet_state = FleetState()
        #: the demand history and the forecasts (issue #39; ``forecast.mode: off``: idle)
        self.forecast = ReplayForecast(cfg, self.fleet_state.forecast, self.windows, history if decide_fn is None else None,
                                       pipeline_loads)
        self.forecast.enabled = self.forecast.enabled and decide_fn is None
        self.decisions = Decisions()
        self.audit = ReplayAudit(self.decisions, clock, on_target)
        self.errors = self.audit.errors
        self.decide_fn = decide_fn     # a baseline's own rule instead of the planner (sim.replay.baselines)
        self.baseline_accuracy = baseline_accuracy   # a baseline with the accuracy round on (accuracy_only)
        self.confirmed = PickCache()   # max_throughput picks confirmed by simulation (daemon.loops.pick_confirmer)
        try:
            built = loops(self)
        except BaseException:
            self.store.close()
            raise
        self.workers = built.workers
        self.model_loops = built.model_loops
        self.pipeline_rounds = built.pipeline_rounds
        self.infaas = built.infaas
        self.accuracy_rounds = built.accuracy_rounds
        self.ports = FleetPorts(clock=clock.now, cloud=_Listing(self.cloud), market=self.hooks, workers=self.workers,
                                demand=self.current_demand, decide=self._decided, audit=self.audit,
                                offload=_in_line, rule=decide_fn, quota_refused=self._quota_refused,
                                shadow_decide=self._shadow_decided)

    def _quota_refused(self, refused: list[str], listed: list[ManagedInstance]) -> bool:
        """A launch refused for the vCPU quota (the cloud's ``quota_check``): as the daemon
        (``daemon.aws.quotas``), the family's quota in that market lowered to what runs now
        (:func:`scaler.planner.quota.lowered_quotas`) for the rest of the replay (it reads no Service
        Quotas to restore it); True when that moved the quotas planned with."""
        vcpus = {t: int(it.vcpu) for t, it in self.cfg.full_catalog().items()}
        new = merged_quotas(self.cfg.quotas, {}, lowered_quotas(refused, [i.instance_type for i in listed if i.live],
                                                                vcpus))
        if new == self.cfg.quotas:
            return False
        self.cfg = self.cfg.model_copy(update={"quotas": new})
        if self.hooks.spot is not None:
            self.hooks.spot.requota(self.cfg)   # type: ignore[attr-defined]
        return True

    def _market_hooks(self) -> MarketHooks:
        return MarketHooks(self.actuator)

    def close(self) -> None:
        self.store.close()

    def _drain(self, iid: str) -> bool:
        return self.workers.drain(iid)

    # ---- Daemon.current_demand / decide -------------------------------------------------------
    def current_demand(self) -> dict[str, DemandView]:
        """Each model's planning demand from its own window, times its capacity hint."""
        now, horizon = self.clock.now(), fleet_step.steady_horizon(self.cfg)
        return fleet_tick.planning_demands(self.declared, lambda m: self.windows[m].snapshot(now, horizon),
                                           self.fleet_state.capacity_hint)

    def shares(self, plan: JointPlan | None = None, target: Mapping[str, int] | None = None) -> dict[str, dict[str, int]]:
        """Each model's pool under a target (default: the one held): the joint plan's, else the
        target dealt over the models (:func:`scaler.fleet.worker_assignment.shares_for`)."""
        st = self.fleet_state
        if target is None:
            plan, target = st.plan, st.target
        return fleet_step.model_shares(self.cfg, plan, target, st.demand)

    def decide(self, demand: Mapping[str, DemandView],
               keep: Mapping[str, ModelShare] | None = None) -> tuple[dict[str, int], JointPlan | None]:
        """As the daemon's; a max_throughput pick is confirmed in line (``sim.pick_eval.confirmed_plan``,
        the function the daemon's confirmer runs in the background): the replay holds the confirmed
        pool from the first plan, the daemon a second or two after it."""
        pool, plan = self._target(demand, keep)
        todo = [p.confirm for p in (plan.plans if plan is not None else []) if p.confirm is not None]
        if not todo:
            return pool, plan
        for c in todo:
            self.confirmed.put(c.key, confirmed_plan(c))
        return self._target(demand, keep)

    def _target(self, demand: Mapping[str, DemandView],
                keep: Mapping[str, ModelShare] | None) -> tuple[dict[str, int], JointPlan | None]:
        """:func:`scaler.fleet.step.fleet_target` at the market's prices over the pools held now."""
        current = self.shares() if self.fleet_state.plan is not None else None
        cfg, unavailable = self.hooks.deciding(self.cfg)
        return fleet_step.fleet_target(cfg, self.profiles, demand, slo_check=self.slo_check, unavailable=unavailable,
                                       current=current, confirmed=self.confirmed, keep=keep)

    async def _shadow_decided(self, demand: Mapping[str, DemandView]) -> tuple[dict[str, int], JointPlan | None]:
        """``forecast.mode: shadow``'s price (``scaler.fleet.tick``): the pool and plan the planner picks
        for ``demand``, as the daemon's ``decide`` (no pick confirmed for it, nothing kept)."""
        return self._target(demand, None)

    async def _decided(self, demand: Mapping[str, DemandView],
                       keep: Mapping[str, ModelShare] | None) -> tuple[dict[str, int], JointPlan | None]:
        return self.decide(demand, keep)

    # ---- the ticks -------------------------------------------------------------------------------
    def fleet_tick(self, reason: str = "interval") -> None:
        """``Daemon.fleet_tick``: :func:`scaler.fleet.tick.fleet_tick` over the replay's ports."""
        self.forecast.upkeep(self.clock.now(), self.workers.boots)
        run_now(fleet_tick.fleet_tick(self.cfg, self.fleet_state, self.ports, reason))

    def sync_workers(self) -> None:
        """The workers' models again now (a pipeline round pinned some, ``ReplayWorkers.pins``)."""
        run_now(fleet_tick.sync_workers(self.cfg, self.fleet_state, self.ports.cloud, self.hooks.typed,
                                        self.workers, self.audit))

    def model_tick(self) -> None:
        """``Daemon.model_tick``: each model's model-loop round (:class:`sim.replay.models.ReplayModelLoop`
        over its own query loop), its capacity hint (a replan when one moved far enough), then the
        early-replan check."""
        w, st = self.workers, self.fleet_state
        if self.decide_fn is not None:      # a baseline: no model loop, no early replans
            if self.baseline_accuracy and self.accuracy_rounds:
                for r in self.accuracy_rounds.values():
                    r.tick(self.clock.now())
            return
        self.forecast.upkeep(self.clock.now(), self.workers.boots)
        if self.model_loops:
            now = self.clock.now()
            shares = self.shares()
            owned = {m for r in self.pipeline_rounds for m in r.owned()}
            for r in self.pipeline_rounds:
                r.tick(now)
            for model, ml in self.model_loops.items():
                if model in owned:                     # its pipeline's round places its variants (the hint stays 1)
                    continue
                if self.accuracy_rounds is not None:   # ``ModelLoop.tick`` in accuracy mode
                    r = self.accuracy_rounds.get(model)
                    if r is not None:
                        r.tick(now)
                    unmet = r.unmet() if r is not None else {}
                    st.capacity_hint[model] = next_capacity_hint(
                        st.capacity_hint.get(model, 1.0), (), {model: unmet.get(model, 0.0)},
                        settled=fleet_step.fleet_settled(shares.get(model, {}), w.serving(model)))
                    continue
                infaas = self.infaas.get(model)
                if infaas is not None:                 # an application: its members are the models
                    decision = infaas.tick(now)
                else:
                    snap = self.windows[model].snapshot(now)
                    decision = ml.tick(w.lanes[model], now, snap.arrival_qps, snap.mean_batch)
                st.capacity_hint[model] = ml.next_hint(st.capacity_hint.get(model, 1.0), decision,
                                                       shares.get(model, {}), w.serving(model))
            if fleet_tick.hint_replan_due(self.cfg, st):
                self.fleet_tick("model loop capacity hint")
        if fleet_tick.replan_early_due(self.cfg, st, self.clock.now(), self.current_demand):
            self.fleet_tick("demand changed")

    def reconcile_tick(self) -> None:
        """``Daemon.reconcile_tick``: :func:`scaler.fleet.tick.reconcile_tick` over the replay's ports."""
        run_now(fleet_tick.reconcile_tick(self.cfg, self.fleet_state, self.ports, self.actuator.reconcile))

__all__ = ["DecideFn", "OnTarget", "ReplayAudit", "ReplayFleet", "ReplayLoops", "loops_for"]
