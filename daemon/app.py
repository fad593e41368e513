"""The costscale daemon process: the dispatcher (query loop), the model loop and the fleet loop.
I/O lives here and in the adapters; every decision is a pure function from scaler/, dispatcher/ and
variants/ (DESIGN "How the code is shaped"). Loops are APScheduler 3.x jobs on the asyncio event
loop; boto3 calls run in worker threads so the query path never waits on EC2."""
from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Awaitable, Callable
from collections import deque

from apscheduler.schedulers.asyncio import AsyncIOScheduler

from daemon import sdnotify
from config.schema import Config
from config.errors import UsageError
from daemon.reload import reload_parts
from daemon.ticks import schedule_loops
from daemon.fleet_upkeep import reconcile_round, terminate_fleet
from scaler.state import StateStore
from dispatcher.latency_model import LatencyModel
from dispatcher.server import Dispatcher
from daemon.model_loop import ModelLoop
from variants.capacity_hint import next_capacity_hint
from variants.model_decision import ModelLoopParams, model_params_for
from daemon.replica import ReplicaRole, fleet_left_to_others, lease_generation, model_windows, start_replica
from scaler.actuator import FleetActuator
from scaler.cloud import CloudError, CloudProvider, ManagedInstance
from daemon.aws_wiring import AwsWiring, DaemonError, aws_error
from scaler import fleet_step
from scaler.fleet_step import plan_id_for
from sim.slo_check import slo_check
from scaler.parking import ParkState
from scaler.base_aux import PlanError
from scaler.joint_plan import JointPlan, ModelShare
from scaler.replan import DemandView
from variants.registry import VariantRegistry, registry_path_for
from daemon.cluster_token import with_cluster_token
from daemon.profiling import generate_config_variants, models_dir, open_config_registry
from daemon.probing import Prober
from daemon.self_profiling import SelfProfiler, profile_sink
from daemon.metrics import MetricsServer, snapshot_on_loop, start_observing, stop_observing
from daemon.status_feed import LoopFacts, StatusFeed, build_feed, status_line
from daemon.fleet_status import FleetStatus, load_profiles_for, plan_estimates, quiet_at_shutdown, tick_line
from daemon.pick_confirmer import PickConfirmer
from daemon.spot_wiring import FleetMarket, open_market

log = logging.getLogger("costscale")

FleetHook = Callable[[list[ManagedInstance]], Awaitable[None]]

DRAIN_TIMEOUT_S = 30.0
UNPARK_TIMEOUT_S = 15.0   # loading a parked instance's variants back, before the actuator runs


class Daemon:
    """One costscale cluster: dispatcher + fleet loop (+ model loop hooks)."""

    def __init__(self, cfg: Config, cfg_path: Path | None = None, *, cloud: CloudProvider | None = None,
                 on_fleet_change: FleetHook | None = None, listen: str | None = None,
                 model_params: ModelLoopParams | None = None,
                 generate_variants: bool | None = None) -> None:
        self.cfg = cfg
        self.cfg_path = cfg_path
        self.profiles = load_profiles_for(cfg)
        self._cloud = cloud
        self._on_fleet_change = on_fleet_change
        self._listen = listen
        self.status = FleetStatus()
        self.port: int = 0
        self._stop = asyncio.Event()
        self._fleet_lock = asyncio.Lock()
        self._scheduler: AsyncIOScheduler | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.store: StateStore | None = None
        self.dispatcher: Dispatcher | None = None
        self.actuator: FleetActuator | None = None
        self.cloud: CloudProvider | None = None
        self.aws: AwsWiring | None = None    # region prices, cluster lease, fenced EC2 (when no cloud is given)
        self.replica: ReplicaRole | None = None   # lease.replicas: heartbeat, demand, the lease retried (daemon.replica)
        self.market: FleetMarket | None = None   # the fleet tick's market hooks: on-demand, or spot (issue #28)
        self._generation = 0
        self._declared: tuple[Config, dict[str, DemandView]] | None = None
        # model loop (INFaaS §4.2): variant registry, placements, and the capacity hint it gives the
        # fleet planner (demand x hint); it never launches anything itself
        self._explicit_params = model_params
        self.model_params = model_params or model_params_for(cfg)
        self.generate_variants = cfg.model_scaling.generate_variants if generate_variants is None else generate_variants
        self.registry: VariantRegistry | None = None
        self.model_loop: ModelLoop | None = None
        self.capacity_hint: dict[str, float] = {}       # per model (the model loop's, variants.capacity_hint)
        self._hint_planned: dict[str, float] = {}
        self._demand_history: dict[str, list[tuple[float, DemandView]]] = {}   # per model (fleet_step.stabilized_demands)
        self._planned_at: float | None = None                      # when the last plan was made (fleet_step.plan_due)
        self._unavailable_planned: frozenset[str] = frozenset()
        self._gen_task: asyncio.Task | None = None
        self.profiling: SelfProfiler | None = None   # models without profiles: measured at start (INFaaS §3.2)
        # scale-in parks surplus instances warm before it retires them (scaler.parking)
        self._park_state = ParkState()
        #: (monotonic time, "park" | "unpark" | "retire" | "launch", instance id), newest last
        self.fleet_events: list[tuple[float, str, str]] = []
        self.unpark_ms: deque[float] = deque(maxlen=100)   # each unpark's variant loads, ms (latest 100)
        self.status_feed: StatusFeed | None = None   # costscale status: spend, decisions, errors (watched)
        self.metrics: MetricsServer | None = None    # GET /metrics (metrics.listen)
        # max_throughput: each pick confirmed by simulation off the tick (Kairos+, issue #16)
        self.confirmer = PickConfirmer(self._tick_soon)

    # ---- wiring ----------------------------------------------------------------------------
    def _declared_demand(self) -> dict[str, DemandView]:
        """Each model's declared workload (once per config: sampling the mix is not free, and this runs each tick)."""
        cfg = self.cfg
        if self._declared is None or self._declared[0] is not cfg:
            self._declared = (cfg, fleet_step.declared_demands(cfg))
        return self._declared[1]

    async def _on_vm(self, decisions, unmet) -> None:  # type: ignore[no-untyped-def]
        """VM-autoscaler decisions -> capacity hint for the fleet planner; replan when it moved."""
        if self.status_feed is not None:
            self.status_feed.vm(decisions)
        serving = self.dispatcher.serving_by_type() if self.dispatcher is not None else {}
        settled = fleet_step.fleet_settled(self.status.target, serving)
        for m in self.cfg.models:     # each model's hint moves on its own unmet load
            self.capacity_hint[m.name] = next_capacity_hint(self.capacity_hint.get(m.name, 1.0), decisions,
                                                            {m.name: unmet.get(m.name, 0.0)}, settled=settled)
        for d in decisions:
            if d.action != "hold":
                log.info("vm autoscaler: %s %s (%s) -> capacity hint %s", d.action, d.hardware, d.reason,
                         ", ".join(f"{m} {h:.2f}" for m, h in self.capacity_hint.items()))
        if fleet_step.hint_replan(self.cfg, self.capacity_hint, self._hint_planned) and not self._fleet_lock.locked():
            self._tick_soon("model loop capacity hint")

    async def start(self) -> None:
        cfg = self.cfg
        self._loop = asyncio.get_running_loop()
        try:
            self.store = StateStore.open(cfg.state_path)
        except UsageError:
            raise
        except Exception as exc:  # lock held or unwritable state path
            raise DaemonError(f"state store {cfg.state_path}: {exc}") from None
        # beyond loopback, workers register with a cluster token: generated (0600) if none is named
        self.cfg = cfg = with_cluster_token(cfg, self._listen)
        if self._cloud is None:   # the region's prices; the cluster's lease before reconciling; EC2 fenced by it
            self.aws = AwsWiring(cfg, self._listen)
            self.cfg = cfg = await asyncio.to_thread(self.aws.priced, cfg)
            self._cloud = await asyncio.to_thread(self.aws.open)
        self.predictor = LatencyModel.from_profiles(self.profiles)
        try:
            self.registry = open_config_registry(cfg)
        except Exception as exc:
            raise DaemonError(f"variant registry {registry_path_for(cfg.state_path)}: {exc}") from None
        self.dispatcher = Dispatcher(cfg, self.predictor, registry=self.registry, models_dir=models_dir(cfg))
        self.model_loop = ModelLoop(self.dispatcher, self.profiles, self.model_params, on_vm=self._on_vm,
                                    follows_config=self._explicit_params is None)
        self.model_loop.interval_s = cfg.intervals.model_s
        if self.aws is not None:   # the cluster token its SSM parameter holds, read again every minute
            self.aws.attach(self.dispatcher)
        try:
            self.port = await self.dispatcher.start(self._listen or cfg.dispatcher.listen)
        except UsageError:   # no client authentication beyond loopback, an unreadable certificate or token
            raise
        except Exception as exc:
            raise DaemonError(f"dispatcher cannot listen on {self._listen or cfg.dispatcher.listen}: {exc}") from None
        self.cloud = self._cloud
        self.actuator = FleetActuator(self.cloud, self.store, cfg.catalog(), cfg.budget_per_hour,
                                      drain=self._drain, drain_loop=self._loop, drain_timeout_s=DRAIN_TIMEOUT_S,
                                      pending_timeout_s=cfg.launch.pending_timeout_s, other_prices=cfg.table_prices())
        self.market = await open_market(cfg, self.actuator, self.cloud, self.dispatcher.set_spot_prices)
        self.replica = await start_replica(cfg, self.aws.lease if self.aws else None, self.aws and self.aws.dynamodb,
                                           self._listen or cfg.dispatcher.listen, self.port,
                                           lambda: model_windows(self.cfg, self.dispatcher), self._took_lease, self.dispatcher)
        if self.leading():
            try:
                report = await asyncio.to_thread(self.actuator.reconcile)
            except CloudError as exc:
                raise aws_error("EC2", cfg, exc, "describe, run, tag and terminate instances") from None
            log.info("reconciled at start: %s", report.summary())
        await self._sync_workers()
        self._scheduler = schedule_loops(self._loop, cfg.intervals, self.fleet_tick, self.model_tick, self.reconcile_tick)
        if self.aws is not None:   # lease renewal; a lost lease stops the daemon
            self.aws.schedule(self._scheduler, self.request_stop)
        if self.replica is not None:
            self.replica.schedule(self._scheduler)
        self.status_feed = build_feed(   # costscale status: each part given what it reads
            lambda: self.cfg, fleet=lambda: self.status, fleet_events=lambda: self.fleet_events, store=self.store,
            dispatcher=self.dispatcher, price=self.actuator.price, stopping=self.stopping, profiles=self.profiles,
            model_loop=self.model_loop, solver=lambda: self.model_params.solver, facts=LoopFacts(
                lambda: self.capacity_hint, lambda: self.status.plan, lambda: self.profiling.status() if self.profiling
                else (), lambda: self.replica.facts() if self.replica else None))
        self.metrics = start_observing(self.status_feed, self._scheduler, cfg.metrics.listen,
                                       snapshot_on_loop(self.dispatcher, self._loop),
                                       lambda: [t.type for t in self.cfg.instance_types])
        self._scheduler.start()
        self.market.start(lambda: self.cfg, self._fleet_lock, self._tick_soon, self._loop, self._drain,
                          self.dispatcher.set_spot_notice_handler)
        self.profiling = SelfProfiler(
            lambda: self.cfg, self.profiles, self.registry, self.dispatcher, lambda: self.status, self._fleet_lock,
            lambda: Prober(self.actuator, self.cloud, self.dispatcher, on_fleet_change=lambda _: self._sync_workers(),
                           register_timeout_s=self.cfg.launch.pending_timeout_s),
            self._tick_soon, self.stopping, profile_sink(self.predictor, self.dispatcher), self.predictor.observed_means)
        self.profiling.start(self._scheduler)
        if self.generate_variants:
            self._gen_task = self._loop.create_task(generate_config_variants(cfg, self.registry, self.dispatcher.refresh_variants))
        sdnotify.notify(f"READY=1\nSTATUS=dispatcher on port {self.port}")
        log.info("costscale %s: dispatcher listening on port %d, budget %.4g $/hr", cfg.cluster, self.port,
                 cfg.budget_per_hour)

    async def _drain(self, instance_id: str) -> bool:
        """Before a termination or a spot reclaim: no new queries for the worker; its in-flight one finishes."""
        if self.dispatcher is None:
            return True
        return await self.dispatcher.drain(instance_id, timeout=DRAIN_TIMEOUT_S)

    def leading(self) -> bool:
        """This daemon runs the fleet loop: replicas off, or it holds the cluster lease."""
        return self.replica is None or self.replica.leading()

    async def _took_lease(self) -> None:
        """A standby took the lease: reconcile from EC2 as a restarted daemon, then tick at once."""
        async with self._fleet_lock:
            if self.actuator is not None:
                log.info("reconciled at takeover: %s", (await asyncio.to_thread(self.actuator.reconcile)).summary())
            await self._sync_workers()
        await self.fleet_tick("lease taken")

    # ---- the loops -------------------------------------------------------------------------
    def current_demand(self) -> dict[str, DemandView]:
        """Each model's demand the fleet plans for (:func:`scaler.fleet_step.planning_demand` over
        the model's own window, as the replay): one model's queries never count as another's."""
        declared = self._declared_demand()
        if self.dispatcher is None:
            return dict(declared)
        out, merged = {}, self.replica.merged if self.replica is not None and self.replica.leading() else None
        for m, dec in declared.items():   # a replicated cluster's holder: every live replica's windows summed
            snap = self.dispatcher.window_snapshot(m, steady_s=fleet_step.steady_horizon(self.cfg))
            snap = merged.windows.get(m, snap) if merged is not None else snap   # type: ignore[assignment]
            out[m] = fleet_step.planning_demand(snap.arrival_qps, snap.mix, snap.count, dec,
                                                self.capacity_hint.get(m, 1.0), snap.steady_qps)
        return out

    def shares(self, plan: JointPlan | None = None, target: dict[str, int] | None = None) -> dict[str, dict[str, int]]:
        """Each model's pool under a target (default: the one held; :func:`scaler.fleet_step.model_shares`)."""
        if target is None:
            plan, target = self.status.plan, self.status.target
        return fleet_step.model_shares(self.cfg, plan, target, self.status.demand)

    def decide(self, demand: dict[str, DemandView],
               keep: dict[str, ModelShare] | None = None) -> tuple[dict[str, int], JointPlan | None]:
        """:func:`scaler.fleet_step.fleet_target` (as the replay, `costscale plan`) at the market's prices
        (:mod:`daemon.spot_wiring`), without types out of capacity; unprofiled models: conservative pools."""
        prof = self.profiling
        if not self.cfg.pinned_pool and prof is not None:
            held = prof.hold()
            if held is not None:   # every model not profiled yet: their conservative pools (daemon.self_profiling)
                return held, None
        cfg, unavailable = self.market.deciding(self.cfg) if self.market else (self.cfg, [])
        current = self.shares() if self.status.plan is not None else None
        return fleet_step.fleet_target(cfg, self.profiles, demand, slo_check=slo_check, unavailable=unavailable,
                                       current=current, confirmed=self.confirmer.cache,
                                       fixed=(prof.held_pools() or None) if prof else None,
                                       types_for=(prof.plan_types() or None) if prof else None, keep=keep)

    async def _decided(self, demand: dict[str, DemandView],
                       keep: dict[str, ModelShare] | None = None) -> tuple[dict[str, int], JointPlan | None]:
        """:meth:`decide` off the event loop; the status feed hears the decision before it is applied."""
        target, plan = await asyncio.to_thread(self.decide, demand, keep)
        for p in (plan.plans if plan is not None else []):
            self.confirmer.want(p)
        if self.status_feed is not None:
            self.status_feed.planned(dict(target), plan, demand)
        return target, plan

    @quiet_at_shutdown
    async def fleet_tick(self, reason: str = "interval") -> None:
        if self._stop.is_set() or self.market is None or (self.profiling and self.profiling.probing):
            return   # (probes hold the fleet: daemon.self_profiling replans when they are done)
        if not self.leading():   # a standby replica follows the fleet the holder keeps (daemon.replica)
            return await self._sync_workers()
        async with self._fleet_lock:
            try:
                now, told = time.monotonic(), None   # told: the STATUS line's target and demand
                demand, self._demand_history = fleet_step.stabilized_demands(
                    self._demand_history, now, self.current_demand(), self.cfg.intervals.scale_in_s)
                unavailable = self.market.plan_key()
                fresh = reason != "interval" or fleet_step.plan_due(self.cfg, self.status.demand, self._planned_at,
                                                                    demand, now, unavailable != self._unavailable_planned)
                if fresh:   # with several models, those whose demand did not move keep their workers
                    keep = fleet_step.unmoved_shares(self.cfg, reason, self.status.plan, self.status.demand,
                                                     self._planned_at, demand, now,
                                                     unavailable != self._unavailable_planned)
                    target, plan = await self._decided(demand, keep)
                    demand = fleet_step.planned_demands(keep, self.status.demand, demand)
                else:   # nothing the plan rests on moved: converge the pool to it
                    target, plan, demand = self.status.target, self.status.plan, self.status.demand or demand
                self._generation = fleet_step.next_generation(target, self.status.target, self._generation)
                pid = plan_id_for(target, self._generation, lease_generation(self.replica))
                report = await self._apply(target, pid, self.shares(plan, target))
                if self.market.replan_now(plan, target):   # InsufficientCapacity (spot: no zone left): replan now
                    target, plan = await self._decided(demand)
                    self._generation += 1
                    pid = plan_id_for(target, self._generation, lease_generation(self.replica))
                    report = await self._apply(target, pid, self.shares(plan, target))
                self.status.plan, self.status.target, self.status.demand = plan, target, demand
                self.status.estimated = plan_estimates(self.cfg, self.profiles, plan)
                if fresh:
                    self._planned_at, self._unavailable_planned = now, self.market.plan_key()
                self._hint_planned = dict(self.capacity_hint)
                self.status.plans_applied += 1
                self.status.last_error = None
                base = plan.dispatch_base_type() if plan is not None else None
                if base is not None and self.dispatcher is not None:
                    self.dispatcher.set_base_type(base, plan.base_types)   # each model's own C_j
                log.info("%s", tick_line(reason, demand, target, plan, bool(self.cfg.pinned_pool), report.summary(),
                                         self.status.estimated))
                if plan is not None and plan.short:
                    log.warning("fleet: the budget %.4g $/hr cannot cover every model: short %s", plan.budget_per_hour,
                                ", ".join(f"{m} {q:.1f} q/s" for m, q in plan.short.items()))
                told = (target, fleet_step.total_qps(demand))
            except (UsageError, PlanError) as exc:   # no pool fits: one line; the next interval retries
                self._planned_at = None
                self.status.last_error = str(exc)
                log.error("fleet: %s", exc)
            except Exception as exc:  # keep serving; the next tick retries
                self._planned_at = None
                self.status.last_error = f"{type(exc).__name__}: {exc}"
                log.exception("fleet tick failed")
            await self._sync_workers()
            if told is not None and self.dispatcher is not None:   # billed, once the view shows the launches
                sdnotify.notify(status_line(*told, self.dispatcher.cost_per_hour(), self.actuator.budget,
                                            self.profiling.note() if self.profiling else ""))

    def _tick_soon(self, reason: str) -> None:
        if self._loop is not None and not self._stop.is_set():
            self._loop.create_task(self.fleet_tick(reason))

    def _event(self, kind: str, instance_id: str) -> None:
        self.fleet_events.append((time.monotonic(), kind, instance_id))
        del self.fleet_events[:-1000]

    async def _apply(self, target: dict[str, int], plan_id: str,  # type: ignore[no-untyped-def]
                     shares: dict[str, dict[str, int]] | None = None):
        """Park/unpark (scaler.parking), then the market's actuate moves the pool to target + held parked;
        unparked instances get their variants back before any launch (a spike meets warm ones first)."""
        assert self.market is not None
        eff, retire = self.market.extend_target(target), ()      # spot: with the overprovision
        listed = None
        d = self.dispatcher
        if d is not None and self.cloud is not None:
            instances = self.market.parking_view(listed := await asyncio.to_thread(self.cloud.list_managed))
            ready = frozenset(iid for iid, w in d.workers.items() if not w.removed)
            dec, self._park_state = fleet_step.park_round(instances, eff, ready, self.market.type_price,
                                                          self.actuator.budget, time.monotonic(), self._park_state,
                                                          self.cfg.model_scaling.vm_park_s, shares, d.serves)
            # unparked instances get their variants back first (bounded: a hung worker must not
            # hold up the launches a spike needs); the actuator then launches the rest
            for iid in dec.unpark:
                self._event("unpark", iid)
            async def unpark(iid: str):  # type: ignore[no-untyped-def]
                t0 = time.monotonic()
                res = await asyncio.wait_for(d.unpark(iid), UNPARK_TIMEOUT_S)
                return res, 1000.0 * (time.monotonic() - t0)
            done = await asyncio.gather(*(unpark(iid) for iid in dec.unpark), return_exceptions=True)
            for iid, got in zip(dec.unpark, done):
                if isinstance(got, BaseException):
                    log.warning("fleet: unpark %s: %s", iid, type(got).__name__)
                else:
                    res, ms = got
                    self.unpark_ms.append(ms)
                    log.info("fleet: unpark %s in %.0f ms (load %s)", iid, ms,
                             ", ".join(f"{v}{'' if ok else ' failed: ' + m}" for v, ok, m in res) or "-")
            for iid in dec.park:
                self._event("park", iid)
                log.info("fleet: park %s for up to %gs (surplus to %s)", iid, self.cfg.model_scaling.vm_park_s, target)
                d.mark_parked(iid)     # no new queries from now on; its variants are unloaded below
            for iid in dec.retire:
                self._event("retire", iid)
            eff, retire = dec.target, dec.retire
        report = await asyncio.to_thread(self.market.actuate, eff, plan_id, list(retire), listed)
        if d is not None:
            gone = set(report.terminated)
            # new parks, and any parked worker that got a variant since (park is idempotent)
            todo = [iid for iid in self._park_state.parked if iid not in gone]
            for iid, res in zip(todo, await asyncio.gather(*(d.park(iid) for iid in todo), return_exceptions=True)):
                for v, ok, m in ([] if isinstance(res, BaseException) else res):
                    if not ok:
                        log.warning("fleet: unload %s from parked %s: %s", v, iid, m)
        for ids in report.launched.values():
            for iid in ids:
                self._event("launch", iid)
        return report

    @quiet_at_shutdown
    async def model_tick(self) -> None:
        """Model loop: variant states, model autoscaler and placements, VM-autoscaler hint
        (:mod:`daemon.model_loop`); then replan early on a significant change of demand or mix."""
        if self._stop.is_set():
            return
        if self.model_loop is not None and self.dispatcher is not None:
            try:
                await self.model_loop.tick(time.monotonic())
            except Exception:  # keep serving; the next tick retries
                log.exception("model loop tick failed")
        if self._stop.is_set() or self.cfg.pinned_pool or self._fleet_lock.locked():
            return
        # early replans follow a plan that was made; after a failed one, the fleet interval retries
        # (not every model tick: that looped on an unplannable config)
        now_demand, _ = fleet_step.stabilized_demands(self._demand_history, time.monotonic(), self.current_demand(),
                                                      self.cfg.intervals.scale_in_s)
        if fleet_step.replan_early(self.cfg, self.status.demand, now_demand):
            await self.fleet_tick("demand changed")

    @quiet_at_shutdown
    async def reconcile_tick(self) -> None:
        """:func:`daemon.fleet_upkeep.reconcile_round`, on the daemon leading the fleet."""
        if not self._stop.is_set() and self.actuator is not None and self.leading():
            await reconcile_round(self.actuator, self._fleet_lock, self._sync_workers)

    async def _sync_workers(self) -> None:
        """The dispatcher's cloud view (who may register, who boots: Status, admission); the list to the hook."""
        if self.cloud is None:
            return
        try:
            instances = await asyncio.to_thread(self.cloud.list_managed)
        except Exception as exc:
            log.warning("list instances failed: %s", exc)
            return
        self.status.instances, instances = instances, self.market.typed(instances) if self.market else instances
        if self.dispatcher is not None:
            self.dispatcher.set_cloud_view(self.status.instances)   # by slot: Status counts each market
            if len(self.cfg.models) > 1:   # each model's queries go to the workers planned for it
                st = self.status
                serves = fleet_step.worker_models(self.cfg, instances, st.plan, st.target, st.demand,
                                                  self.dispatcher.serves, self._park_state.parked)
                self.dispatcher.set_assignment({**serves, **self.model_loop.pipelines.pins_for(serves)}
                                               if self.model_loop is not None else serves)   # pipeline rounds' moves hold
        if self._on_fleet_change is not None:
            await self._on_fleet_change(instances)

    # ---- lifecycle -------------------------------------------------------------------------
    def request_stop(self) -> None:
        self._stop.set()

    def stopping(self) -> bool:   # shutdown has begun: the loops' ticks return quietly
        return self._stop.is_set()

    def reload(self) -> bool:
        """SIGHUP (:func:`daemon.reload.reload_parts`): the config read again (refused: the running one
        kept), the ticks moved to its intervals, each part given it (``reload(new)``), then a replan."""
        new = reload_parts(self.cfg, self.cfg_path, self._listen, self.aws, self._scheduler,
                           (self.model_loop, self.market, self.dispatcher))   # (the market: the actuator's too)
        if new is None:
            return False
        self.cfg, self.model_params = new, self._explicit_params or model_params_for(new)   # given ones are kept
        if self._loop is not None:
            self._loop.create_task(self.fleet_tick("config reloaded"))
        return True

    async def _terminate_fleet(self) -> None:
        """``on_shutdown: terminate``; with the lease lost, one line instead (the fence refuses, and
        the daemon holding the lease now owns the instances: no terminate intent is written)."""
        await self._sync_workers()   # (:func:`daemon.fleet_upkeep.terminate_fleet`)
        left = fleet_left_to_others(self.replica) or (self.aws.left_running(self.status.instances) if self.aws else None)
        await terminate_fleet(self.actuator, lambda: plan_id_for({}, self._generation + 1, lease_generation(self.replica)),
                              left)

    async def wait(self) -> None:
        await self._stop.wait()

    async def stop(self, grace: float = 10.0) -> None:
        self._stop.set()
        sdnotify.notify("STOPPING=1")
        if self.replica is not None and self.dispatcher is not None:   # NOT_SERVING first: balancers move off it
            await self.replica.leave(self.dispatcher)
        if self._scheduler is not None:
            self._scheduler.shutdown(wait=False)
        if self.profiling is not None:   # a probe round under way terminates its probes first
            await self.profiling.stop()
        async with self._fleet_lock:
            if self.dispatcher is not None:
                await self.dispatcher.stop(grace)
            if self.cfg.on_shutdown == "terminate" and self.actuator is not None and self._scheduler is not None:
                await self._terminate_fleet()
                await self._sync_workers()
        if self._gen_task is not None and not self._gen_task.done():
            self._gen_task.cancel()
        await self.confirmer.close()
        if self.market is not None:
            await self.market.close()
        stop_observing(self.status_feed, self.metrics)   # the last spend sample; /metrics closed
        if self.store is not None:
            self.store.close()
        if self.registry is not None:
            self.registry.close()
        if self.replica is not None:   # heartbeat and demand items deleted: the holder stops counting this one
            await self.replica.close()
        if self.aws is not None:   # the lease last: raises LeaseLost (exit 1, one line) if it was lost
            await self.aws.close()
