"""The daemon's fleet loop on a virtual clock: ``daemon.app.Daemon.fleet_tick`` / ``_apply`` /
``_sync_workers``, the replan check of ``model_tick`` and ``reconcile_tick``, step for step,
through the same decisions (:mod:`scaler.fleet_step`) and the same actuator.

What is real here: ``scaler.actuator.FleetActuator`` (budget-ordered transitions, write-ahead
intents in a real ``scaler.state.StateStore``, reconciliation) over ``scaler.fake_cloud.FakeCloud``
(boot delay per type, InsufficientCapacity and throttling injectable), the demand window
(``dispatcher.window.DemandWindow``), the planner (``plan_fleet`` with ``sim.slo_check.slo_check``)
and parking. What stands in for I/O: :class:`ReplayWorkers`, the dispatcher's worker registry
(register when the instance runs and its model is loaded, park, unpark, drain, forget) over
:class:`sim.query_loop.QueryLoop`.

Differences from the live daemon, all in virtual time: a tick takes no time (the live one plans
for ~0.3-1 s while queries flow); a drain does not hold the tick up (the drained worker finishes
its query after its instance stops being billed, by at most one service time); an unpark's loads
run beside the actuator instead of before it (bounded by 15 s live).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

from config.errors import UsageError
from config.profiles import ProfileTable
from config.schema import Config
from dispatcher.window import DemandWindow
from scaler import fleet_step
from scaler.actuator import ApplyReport, FleetActuator
from scaler.base_aux import PlanError
from scaler.cloud import ManagedInstance
from scaler.fake_cloud import FakeCloud
from scaler.fleet_decision import SloCheck
from scaler.parking import ParkState
from scaler.pick_cache import PickCache
from scaler.joint_plan import JointPlan, ModelShare
from scaler.fleet_step import Demands
from scaler.replan import DemandView
from scaler.spot_fleet import MarketHooks
from scaler.state import StateStore
from sim.clock import VirtualClock
from sim.pick_eval import confirmed_plan
from sim.query_loop import QueryLoop
from sim.replay_accuracy import ReplayAccuracyRound
from sim.replay_infaas import ReplayInfaas
from sim.replay_pipeline_round import ReplayPipelineRound
from sim.replay_models import ReplayModelLoop
from variants.capacity_hint import next_capacity_hint

log = logging.getLogger("costscale.replay")

Schedule = Callable[[float, Callable[[], None]], None]
#: a baseline's rule in place of the planner: (now, each model's demand) -> (target, joint plan or None)
DecideFn = Callable[[float, Demands], tuple[dict[str, int], JointPlan | None]]


@dataclass
class Decisions:
    """What the loops decided, counted (the replay's ``decisions``)."""

    launch: int = 0
    terminate: int = 0
    park: int = 0
    unpark: int = 0
    variant_load: int = 0
    variant_unload: int = 0


class ReplayWorkers:
    """The dispatcher's worker registry (``dispatcher.workers.WorkerRegistry``) for the replay: an
    instance may register once its sync allowed it; its worker joins the query loop of the model it
    is assigned to (``lanes``: one :class:`sim.query_loop.QueryLoop` per configured model) when the
    instance runs and the model is loaded (``load_s``); parked ones take no queries. An instance
    moved to another model (:meth:`assign`) leaves the first loop and joins the other after a load."""

    def __init__(self, lanes: Mapping[str, QueryLoop], clock: VirtualClock, schedule: Schedule,
                 running_at: Callable[[ManagedInstance], float], load_s: float, decisions: Decisions,
                 warm_until: float = float("-inf")) -> None:
        self.lanes = dict(lanes)
        self.clock, self.schedule, self.running_at, self.load_s = clock, schedule, running_at, load_s
        self.warm_until = warm_until
        self.decisions = decisions
        self.allowed: dict[str, str] = {}
        self.assignment: dict[str, str] = {}      # instance id -> model it serves
        self.joined: dict[str, str] = {}          # instance id -> the lane its worker is in
        self.parked_ids: set[str] = set()
        self._joining: set[str] = set()
        self._holding: set[str] = set()    # registered parked workers whose model is still loaded

    def _model_of(self, iid: str) -> str | None:
        """The model the instance serves: its assignment (one model: that one); None before it has
        one (its worker then joins at the next sync, which assigns it)."""
        if len(self.lanes) == 1:
            return next(iter(self.lanes))
        return self.assignment.get(iid)

    def _worker_lane(self, iid: str) -> QueryLoop | None:
        m = self.joined.get(iid)
        return self.lanes[m] if m is not None else None

    def registered(self) -> frozenset[str]:
        return frozenset().union(*(q.registered() for q in self.lanes.values()))

    def serving(self, model: str | None = None) -> dict[str, int]:
        """Workers taking queries by type: of one model's loop, or of all."""
        out: dict[str, int] = {}
        for m, q in self.lanes.items():
            if model is None or m == model:
                for t, n in q.serving().items():
                    out[t] = out.get(t, 0) + n
        return out

    def allow(self, inst: ManagedInstance) -> None:
        """``allow_instance``; the worker registers at launch + boot + model load."""
        self.allowed[inst.instance_id] = inst.instance_type
        iid = inst.instance_id
        if iid in self._joining or iid in self.joined:
            return
        self._joining.add(iid)
        load = 0.0 if inst.launch_time <= self.warm_until else self.load_s
        at = max(self.running_at(inst) + load, self.clock.now())
        self.schedule(at, lambda: self._join(iid))

    def _join(self, iid: str) -> None:
        self._joining.discard(iid)
        itype = self.allowed.get(iid)
        if itype is None or iid in self.joined:     # terminated before its worker came up
            return
        m = self._model_of(iid)
        if m is None:
            return
        parked = iid in self.parked_ids
        self.joined[iid] = m
        self.lanes[m].add_worker(iid, itype, self.clock.now(), draining=parked)
        if parked:
            self._holding.add(iid)

    def assign(self, assignment: Mapping[str, str]) -> None:
        """The model each instance serves now (:func:`scaler.worker_assignment.assign_workers`); a
        registered worker whose model changed swaps it: it leaves its loop (its running query
        finishes) and joins the new model's after ``load_s``."""
        for iid, m in assignment.items():
            self.assignment[iid] = m
            was = self.joined.get(iid)
            if was is None or was == m:
                continue
            q = self.lanes[was]
            q.set_draining(iid, True, self.clock.now())
            q.remove_worker(iid, self.clock.now())
            del self.joined[iid]
            self._holding.discard(iid)
            self.decisions.variant_unload += 1
            self.decisions.variant_load += 1
            self._joining.add(iid)
            self.schedule(self.clock.now() + self.load_s, lambda iid=iid: self._join(iid))

    def forget(self, iid: str) -> None:
        self.allowed.pop(iid, None)
        self.parked_ids.discard(iid)
        self._holding.discard(iid)
        self.assignment.pop(iid, None)
        q = self._worker_lane(iid)
        self.joined.pop(iid, None)
        if q is not None:
            q.remove_worker(iid, self.clock.now())

    def drain(self, iid: str) -> bool:
        """Before a termination: no new queries (the in-flight one finishes, see the module doc)."""
        q = self._worker_lane(iid)
        if q is not None:
            q.set_draining(iid, True, self.clock.now())
        return True

    def mark_parked(self, iid: str) -> None:
        self.parked_ids.add(iid)
        q = self._worker_lane(iid)
        if q is not None and iid in q.workers and not q.workers[iid].draining:
            self._holding.add(iid)
        if q is not None:
            q.set_draining(iid, True, self.clock.now())

    def park(self, iid: str) -> None:
        """Unload the parked worker's model (once per park; idempotent like ``Dispatcher.park``)."""
        q = self._worker_lane(iid)
        if iid in self._holding and q is not None and iid in q.workers:
            self._holding.discard(iid)
            self.decisions.variant_unload += 1

    def unpark(self, iid: str) -> None:
        """Load the model back (``load_s``), then take queries again; an unregistered one just
        stops being parked."""
        self.parked_ids.discard(iid)
        q = self._worker_lane(iid)
        w = q.workers.get(iid) if q is not None else None
        if q is None or w is None or not w.draining:
            return
        if iid in self._holding:        # never unloaded: routable at once
            self._holding.discard(iid)
            q.set_draining(iid, False, self.clock.now())
            return
        self.decisions.variant_load += 1

        def back() -> None:
            lane = self._worker_lane(iid)
            if iid not in self.parked_ids and lane is q and iid in q.workers:
                q.set_draining(iid, False, self.clock.now())
        self.schedule(self.clock.now() + self.load_s, back)


@dataclass
class FleetMemory:
    """What ``Daemon.status`` and its fields carry between ticks."""

    target: dict[str, int] = field(default_factory=dict)
    plan: JointPlan | None = None
    planned: dict[str, DemandView] | None = None
    generation: int = 0
    park: ParkState = ParkState()
    capacity_hint: dict[str, float] = field(default_factory=dict)     # per model
    hint_planned: dict[str, float] = field(default_factory=dict)
    last_error: str | None = None
    history: dict[str, list[tuple[float, DemandView]]] = field(default_factory=dict)
    planned_at: float | None = None
    unavailable_planned: frozenset[str] = frozenset()
    plans: int = 0


class ReplayFleet:
    """The fleet loop of :class:`daemon.app.Daemon` over a fake cloud, on ``clock``."""

    def __init__(self, cfg: Config, profiles: ProfileTable, clock: VirtualClock, state_dir: Path, *,
                 boot_by_type: dict[str, float], slo_check: SloCheck,
                 on_target: Callable[[float, dict[str, int], JointPlan | None, Demands], None] | None = None,
                 decide_fn: DecideFn | None = None, baseline_accuracy: bool = False) -> None:
        self.cfg, self.profiles, self.clock, self.slo_check = cfg, profiles, clock, slo_check
        self.cloud = FakeCloud(cfg.cluster, clock=clock.now, boot_by_type=boot_by_type)
        self.store = StateStore.open(state_dir / "state.db")
        self.workers: ReplayWorkers | None = None
        self.model_loops: dict[str, ReplayModelLoop] = {}
        #: accuracy scaling on: each application's accuracy round (the INFaaS round then runs for none)
        self.accuracy_rounds: dict[str, ReplayAccuracyRound] | None = None
        #: accuracy scaling off: each application's getVariant and INFaaS round (sim.replay_infaas)
        self.infaas: dict[str, ReplayInfaas] = {}
        #: Loki's round of each pipeline scaled as one (sim.replay_pipeline_round): its task models are
        #: left out of the per-model rounds, and the instances it moved between tasks are pinned
        self.pipeline_rounds: list[ReplayPipelineRound] = []
        self.pins: dict[str, str] = {}
        self.actuator = FleetActuator(self.cloud, self.store, cfg.catalog(), cfg.budget_per_hour, clock=clock.now,
                                      drain=self._drain, pending_timeout_s=cfg.launch.pending_timeout_s, other_prices=cfg.table_prices())
        #: the fleet tick's market hooks, the daemon's (on-demand here; spot: sim.replay_spot.SpotReplayFleet)
        self.hooks = MarketHooks(self.actuator)
        self.models = [m.name for m in cfg.models]
        self.windows = {m: DemandWindow() for m in self.models}     # each model's arrivals
        self.declared = fleet_step.declared_demands(cfg)
        self.mem = FleetMemory()
        self.decisions = Decisions()
        self.on_target = on_target
        self.decide_fn = decide_fn     # a baseline's own rule instead of the planner (sim.replay_baselines)
        self.baseline_accuracy = baseline_accuracy   # a baseline with the accuracy round on (accuracy_only)
        self.confirmed = PickCache()   # max_throughput picks confirmed by simulation (daemon.pick_confirmer)
        self.errors: list[tuple[float, str]] = []

    def close(self) -> None:
        self.store.close()

    def _drain(self, iid: str) -> bool:
        return self.workers.drain(iid) if self.workers is not None else True

    # ---- Daemon.current_demand / decide -------------------------------------------------------
    def current_demand(self) -> dict[str, DemandView]:
        """Each model's planning demand from its own window, times its capacity hint."""
        now, horizon = self.clock.now(), fleet_step.steady_horizon(self.cfg)
        out = {}
        for m in self.models:
            snap = self.windows[m].snapshot(now, horizon)
            out[m] = fleet_step.planning_demand(snap.arrival_qps, snap.mix, snap.count, self.declared[m],
                                                self.mem.capacity_hint.get(m, 1.0), snap.steady_qps)
        return out

    def shares(self, plan: JointPlan | None = None, target: Mapping[str, int] | None = None) -> dict[str, dict[str, int]]:
        """Each model's pool under a target (default: the one held): the joint plan's, else the
        target dealt over the models (:func:`scaler.worker_assignment.shares_for`)."""
        if target is None:
            plan, target = self.mem.plan, self.mem.target
        return fleet_step.model_shares(self.cfg, plan, target, self.mem.planned)

    def decide(self, demand: Mapping[str, DemandView],
               keep: Mapping[str, ModelShare] | None = None) -> tuple[dict[str, int], JointPlan | None]:
        """As the daemon's; a max_throughput pick is confirmed in line (``sim.pick_eval.confirmed_plan``,
        the function the daemon's confirmer runs in the background): the replay holds the confirmed
        pool from the first plan, the daemon a second or two after it."""
        def once() -> tuple[dict[str, int], JointPlan | None]:
            current = self.shares() if self.mem.plan is not None else None
            cfg, unavailable = self.hooks.deciding(self.cfg)
            return fleet_step.fleet_target(cfg, self.profiles, demand, slo_check=self.slo_check,
                                           unavailable=unavailable, current=current,
                                           confirmed=self.confirmed, keep=keep)
        pool, plan = once()
        todo = [p.confirm for p in (plan.plans if plan is not None else []) if p.confirm is not None]
        if not todo:
            return pool, plan
        for c in todo:
            self.confirmed.put(c.key, confirmed_plan(c))
        return once()

    # ---- Daemon.fleet_tick ---------------------------------------------------------------------
    def fleet_tick(self, reason: str = "interval") -> None:
        m = self.mem
        try:
            now = self.clock.now()
            demand, m.history = fleet_step.stabilized_demands(m.history, now, self.current_demand(),
                                                              self.cfg.intervals.scale_in_s)
            unavailable = self.hooks.plan_key()
            fresh = reason != "interval" or fleet_step.plan_due(self.cfg, m.planned, m.planned_at, demand, now,
                                                                unavailable != m.unavailable_planned)
            if self.decide_fn is not None:
                target, plan = self.decide_fn(now, demand)
            elif fresh:   # with several models, those whose demand did not move keep their workers
                keep = fleet_step.unmoved_shares(self.cfg, reason, m.plan, m.planned, m.planned_at, demand, now,
                                                 unavailable != m.unavailable_planned)
                target, plan = self.decide(demand, keep)
                demand = fleet_step.planned_demands(keep, m.planned, demand)
                m.plans += 1
            else:   # nothing the plan rests on moved: converge to it
                target, plan, demand = m.target, m.plan, m.planned or demand
            m.generation = fleet_step.next_generation(target, m.target, m.generation)
            self._apply(target, fleet_step.plan_id_for(target, m.generation), self.shares(plan, target))
            if self.hooks.replan_now(plan, target):
                target, plan = self.decide(demand)
                m.generation += 1
                self._apply(target, fleet_step.plan_id_for(target, m.generation), self.shares(plan, target))
            changed = target != m.target
            m.plan, m.target, m.planned = plan, target, demand
            if fresh:
                m.planned_at, m.unavailable_planned = now, self.hooks.plan_key()
            m.hint_planned = dict(m.capacity_hint)
            m.last_error = None
            if plan is not None and self.workers is not None:
                for model, base in plan.base_types.items():
                    self.workers.lanes[model].set_base_type(base)
            if changed and self.on_target is not None:
                self.on_target(self.clock.now(), dict(target), plan, demand)
        except (UsageError, PlanError) as exc:   # no pool fits: the next interval retries
            m.planned_at = None
            m.last_error = str(exc)
            self.errors.append((self.clock.now(), m.last_error))
        except Exception as exc:  # noqa: BLE001 - the daemon keeps serving; the next tick retries
            m.planned_at = None
            m.last_error = f"{type(exc).__name__}: {exc}"
            self.errors.append((self.clock.now(), m.last_error))
        self._sync_workers()

    def sync_workers(self) -> None:
        """The workers' models again now (a pipeline round pinned some, :attr:`pins`)."""
        self._sync_workers()

    def _apply(self, target: dict[str, int], plan_id: str, shares: dict[str, dict[str, int]] | None = None) -> ApplyReport:
        """``Daemon._apply``: park/unpark, then the actuator moves the pool to target + held."""
        w = self.workers
        listed = self.cloud.list_managed()
        instances, target = self.hooks.parking_view(listed), self.hooks.extend_target(target)
        ready = w.registered() if w is not None else frozenset()
        dec, self.mem.park = fleet_step.park_round(instances, target, ready, self.hooks.type_price, self.actuator.budget,
                                                   self.clock.now(), self.mem.park, self.cfg.model_scaling.vm_park_s,
                                                   shares, w.assignment if w is not None else None)
        d = self.decisions
        if w is not None:
            for iid in dec.unpark:
                d.unpark += 1
                w.unpark(iid)
            for iid in dec.park:
                d.park += 1
                w.mark_parked(iid)
        report = self.hooks.actuate(dec.target, plan_id, list(dec.retire), listed)
        if w is not None:
            gone = set(report.terminated)
            for iid in self.mem.park.parked:
                if iid not in gone:
                    w.park(iid)
        d.launch += sum(len(ids) for ids in report.launched.values())
        d.terminate += len(report.terminated)
        return report

    # ---- Daemon.model_tick (the fleet part), reconcile_tick, _sync_workers --------------------
    def model_tick(self) -> None:
        """``Daemon.model_tick``: each model's model-loop round (:class:`sim.replay_models.ReplayModelLoop`
        over its own query loop), its capacity hint (a replan when one moved far enough), then the
        early-replan check."""
        w = self.workers
        if self.decide_fn is not None:      # a baseline: no model loop, no early replans
            if self.baseline_accuracy and self.accuracy_rounds:
                for r in self.accuracy_rounds.values():
                    r.tick(self.clock.now())
            return
        if self.model_loops and w is not None:
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
                    self.mem.capacity_hint[model] = next_capacity_hint(
                        self.mem.capacity_hint.get(model, 1.0), (), {model: unmet.get(model, 0.0)},
                        settled=fleet_step.fleet_settled(shares.get(model, {}), w.serving(model)))
                    continue
                infaas = self.infaas.get(model)
                if infaas is not None:                 # an application: its members are the models
                    decision = infaas.tick(now)
                else:
                    snap = self.windows[model].snapshot(now)
                    decision = ml.tick(w.lanes[model], now, snap.arrival_qps, snap.mean_batch)
                self.mem.capacity_hint[model] = ml.next_hint(self.mem.capacity_hint.get(model, 1.0), decision,
                                                             shares.get(model, {}), w.serving(model))
            if fleet_step.hint_replan(self.cfg, self.mem.capacity_hint, self.mem.hint_planned):
                self.fleet_tick("model loop capacity hint")
        if self.cfg.pinned_pool or self.mem.planned is None:
            return
        now_demand, _ = fleet_step.stabilized_demands(self.mem.history, self.clock.now(), self.current_demand(),
                                                      self.cfg.intervals.scale_in_s)
        if fleet_step.replan_early(self.cfg, self.mem.planned, now_demand):
            self.fleet_tick("demand changed")

    def reconcile_tick(self) -> None:
        try:
            rep = self.actuator.reconcile()
            self.decisions.terminate += len(rep.terminated_stuck) + len(rep.terminated_unwanted)
            self.decisions.launch += len(rep.reissued)
        except Exception as exc:  # noqa: BLE001 - logged live; the next reconcile retries
            self.errors.append((self.clock.now(), f"reconcile: {type(exc).__name__}: {exc}"))
        self._sync_workers()

    def _sync_workers(self) -> None:
        try:
            instances = self.hooks.typed(self.cloud.list_managed())
        except Exception:  # noqa: BLE001 - "list instances failed" live: the next sync retries
            return
        w = self.workers
        if w is None:
            return
        live = {i.instance_id: i for i in instances if i.live}
        m = self.mem
        assignment = fleet_step.worker_models(self.cfg, instances, m.plan, m.target, m.planned, w.assignment,
                                              m.park.parked)
        for iid in [i for i in self.pins if i not in live]:
            del self.pins[iid]
        w.assign({**assignment, **{i: mod for i, mod in self.pins.items() if i in assignment}})
        for inst in live.values():
            w.allow(inst)
        for iid in list(w.allowed):
            if iid not in live:
                w.forget(iid)
        w.parked_ids &= set(live)


__all__ = ["Decisions", "FleetMemory", "ReplayFleet", "ReplayWorkers"]
