"""The costscale daemon process: the dispatcher (query loop), the model loop and the fleet loop.
I/O lives here and in the adapters; every decision is a pure function from scaler/, dispatcher/ and
variants/ (DESIGN "How the code is shaped"). Loops are APScheduler 3.x jobs on the asyncio event
loop; boto3 calls run in worker threads so the query path never waits on EC2."""
from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from collections import deque

from apscheduler.schedulers.asyncio import AsyncIOScheduler

from daemon.observe import sdnotify
from config.schema import Config
from config.errors import UsageError
from daemon.reload import reload_parts
from daemon.loops.ticks import quiet_at_shutdown, schedule_loops
from daemon.loops.fleet_upkeep import schedule_pruning, terminate_fleet
from scaler.fleet.state import StateStore
from dispatcher.latency_model import LatencyModel
from dispatcher.server import Dispatcher
from daemon.loops.model_loop import ModelLoop
from variants.infaas.capacity_hint import next_capacity_hint
from variants.infaas.model_decision import ModelLoopParams, model_params_for
from daemon.replicas.role import ReplicaRole, fleet_left_to_others, lease_generation, model_windows, start_replica
from scaler.fleet.actuator import FleetActuator
from scaler.cloud.provider import CloudError, CloudProvider
from daemon.aws.wiring import AwsWiring, DaemonError, aws_error
from daemon.aws.quotas import KnownQuotas
from scaler.fleet import step as fleet_step, tick
from scaler.fleet.tick import FleetPorts
from sim.slo_check import slo_check
from scaler.planner.joint_plan import JointPlan, ModelShare
from scaler.planner.replan import DemandView
from variants.registry import VariantRegistry, registry_path_for
from daemon.aws.cluster_token import with_cluster_token
from daemon.profiling.model_profiles import generate_config_variants, load_profiles_for, models_dir, open_config_registry
from daemon.profiling.probing import Prober
from daemon.profiling.self_profiling import SelfProfiler, profile_sink
from daemon.observe.metrics import MetricsServer, snapshot_on_loop, start_observing, stop_observing
from daemon.observe.status_feed import LoopFacts, StatusFeed, build_feed, status_line
from daemon.loops.demand_minutes import DailyChooser, DemandMinutes, minute_rates
from daemon.observe.fleet_status import FleetStatus
from daemon.loops.fleet_ports import DaemonAudit, DeclaredDemands, DispatcherWorkers, FleetHook, ThreadedCloud
from daemon.loops.pick_confirmer import PickConfirmer
from daemon.aws.spot_wiring import FleetMarket, open_market

log = logging.getLogger("costscale")

DRAIN_TIMEOUT_S = 30.0


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
        self.status = FleetStatus()   # the fleet tick's state (scaler.fleet.tick.FleetState) and what Status shows
        self.port: int = 0
        self._stop = asyncio.Event()
        self._fleet_lock = asyncio.Lock()
        self._scheduler: AsyncIOScheduler | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.store: StateStore | None = None
        self.minutes: DemandMinutes | None = None   # each model's rate per minute into the store (issue #39)
        self.dispatcher: Dispatcher | None = None
        self.actuator: FleetActuator | None = None
        self.cloud: CloudProvider | None = None
        self.aws: AwsWiring | None = None    # region prices, cluster lease, fenced EC2 (when no cloud is given)
        self.replica: ReplicaRole | None = None   # lease.replicas: heartbeat, demand, the lease retried (daemon.replicas.role)
        self.market: FleetMarket | None = None   # the fleet tick's market hooks: on-demand, or spot (issue #28)
        self.quotas = KnownQuotas()   # the vCPU quotas planned within: Service Quotas, the config's, refusals
        self._declared = DeclaredDemands()   # each model's declared workload, sampled once per config
        # model loop (INFaaS §4.2): variant registry, placements, and the capacity hint it gives the
        # fleet planner (demand x hint); it never launches anything itself
        self._explicit_params = model_params
        self.model_params = model_params or model_params_for(cfg)
        self.generate_variants = cfg.model_scaling.generate_variants if generate_variants is None else generate_variants
        self.registry: VariantRegistry | None = None
        self.model_loop: ModelLoop | None = None
        self._gen_task: asyncio.Task | None = None
        self.profiling: SelfProfiler | None = None   # models without profiles: measured at start (INFaaS §3.2)
        #: (monotonic time, "park" | "unpark" | "retire" | "launch", instance id), newest last
        self.fleet_events: list[tuple[float, str, str]] = []
        self.unpark_ms: deque[float] = deque(maxlen=100)   # each unpark's variant loads, ms (latest 100)
        self.status_feed: StatusFeed | None = None   # costscale status: spend, decisions, errors (watched)
        self.metrics: MetricsServer | None = None    # GET /metrics (metrics.listen)
        # max_throughput: each pick confirmed by simulation off the tick (Kairos+, issue #16)
        self.confirmer = PickConfirmer(self._tick_soon)
        self._audit = DaemonAudit(lambda: self.cfg, lambda: self.profiles, self.status, self.fleet_events)

    @property
    def capacity_hint(self) -> dict[str, float]:
        """Each model's capacity hint (the model loop's, :mod:`variants.infaas.capacity_hint`), in the fleet state."""
        return self.status.capacity_hint

    # ---- wiring ----------------------------------------------------------------------------
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
        if tick.hint_replan_due(self.cfg, self.status) and not self._fleet_lock.locked():
            self._tick_soon("model loop capacity hint")

    async def start(self) -> None:
        cfg = self.cfg
        self._loop = asyncio.get_running_loop()
        try:
            self.store = StateStore.open(cfg.state_path)
            self.minutes = DemandMinutes(self.store, cfg.forecast.retention_days, forecast=self.status.forecast,
                                         cfg=lambda: self.cfg, chooser=DailyChooser(self.cfg_path))
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
        self.cfg = cfg = await asyncio.to_thread(self.quotas.start, cfg, self.aws is not None)
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
        self.quotas.schedule(self._scheduler, lambda: self.cfg, lambda: self._requota() and self._tick_soon("vCPU quotas"))
        schedule_pruning(self._scheduler, self.store, lambda: self.cfg.state_retention)   # closed history forgotten
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
        """Each model's demand the fleet plans for (:func:`scaler.fleet.step.planning_demand` over
        the model's own window, as the replay): one model's queries never count as another's."""
        declared = self._declared(self.cfg)
        if self.dispatcher is None:
            return dict(declared)
        merged = self.replica.merged if self.replica is not None and self.replica.leading() else None
        dispatcher, horizon = self.dispatcher, fleet_step.steady_horizon(self.cfg)

        def window(m: str) -> tick.WindowView:   # a replicated cluster's holder: every live replica's windows summed
            snap = dispatcher.window_snapshot(m, steady_s=horizon)
            return merged.windows.get(m, snap) if merged is not None else snap   # type: ignore[no-any-return]
        return tick.planning_demands(declared, window, self.capacity_hint)

    def shares(self, plan: JointPlan | None = None, target: dict[str, int] | None = None) -> dict[str, dict[str, int]]:
        """Each model's pool under a target (default: the one held; :func:`scaler.fleet.step.model_shares`)."""
        if target is None:
            plan, target = self.status.plan, self.status.target
        return fleet_step.model_shares(self.cfg, plan, target, self.status.demand)

    def decide(self, demand: dict[str, DemandView],
               keep: dict[str, ModelShare] | None = None) -> tuple[dict[str, int], JointPlan | None]:
        """:func:`scaler.fleet.step.fleet_target` (as the replay, `costscale plan`) at the market's prices
        (:mod:`daemon.aws.spot_wiring`), without types out of capacity; unprofiled models: conservative pools."""
        prof = self.profiling
        if not self.cfg.pinned_pool and prof is not None:
            held = prof.hold()
            if held is not None:   # every model not profiled yet: their conservative pools (daemon.profiling.self_profiling)
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
            return   # (probes hold the fleet: daemon.profiling.self_profiling replans when they are done)
        if not self.leading():   # a standby replica follows the fleet the holder keeps (daemon.replicas.role)
            return await self._sync_workers()
        async with self._fleet_lock:
            done = await tick.fleet_tick(self.cfg, self.status, self._tick_ports(), reason)
            if done is not None and self.dispatcher is not None:   # billed, once the view shows the launches
                sdnotify.notify(status_line(done.target, fleet_step.total_qps(done.demand), self.dispatcher.cost_per_hour(),
                                            self.actuator.budget, self.profiling.note() if self.profiling else ""))

    def _tick_ports(self) -> FleetPorts:
        """The ports of :func:`scaler.fleet.tick.fleet_tick` in the daemon (:mod:`daemon.loops.fleet_ports`)."""
        assert self.market is not None and self.cloud is not None
        return FleetPorts(clock=time.monotonic, cloud=ThreadedCloud(self.cloud), market=self.market,
                          workers=self._worker_view(), demand=self.current_demand, decide=self._decided,
                          audit=self._audit, offload=asyncio.to_thread, lease=lambda: lease_generation(self.replica), wall=time.time,
                          quota_refused=lambda slots, listed: self.quotas.lower(self.cfg, slots, listed) and self._requota(),
                          shadow_decide=lambda d: asyncio.to_thread(self.decide, dict(d)))

    def _requota(self) -> bool:   # the known vCPU quotas moved (daemon.aws.quotas): the config planned with, spot's
        self.cfg = self.quotas.applied(self.cfg)
        return self.market is None or self.market.requota(self.cfg)

    def _worker_view(self) -> DispatcherWorkers:
        ml = self.model_loop
        return DispatcherWorkers(self.dispatcher, self.status, len(self.cfg.models), self.unpark_ms,
                                 ml.pipelines.pins_for if ml is not None else None, self._on_fleet_change)

    def _tick_soon(self, reason: str) -> None:
        if self._loop is not None and not self._stop.is_set():
            self._loop.create_task(self.fleet_tick(reason))

    @quiet_at_shutdown
    async def model_tick(self) -> None:
        """Model loop: variant states, model autoscaler and placements, VM-autoscaler hint
        (:mod:`daemon.loops.model_loop`); then replan early on a significant change of demand or mix."""
        if self._stop.is_set():
            return
        if self.model_loop is not None and self.dispatcher is not None:
            try:
                await self.model_loop.tick(time.monotonic())
            except Exception:  # keep serving; the next tick retries
                log.exception("model loop tick failed")
        done = self.minutes.due() if self.minutes is not None and self.dispatcher is not None and self.leading() else None
        if done is not None:   # a minute ended: each model's rate over it into the demand history
            await self.minutes.ended(done, minute_rates(self.cfg, self.dispatcher, self.replica))
        if self._stop.is_set() or self.cfg.pinned_pool or self._fleet_lock.locked():
            return
        # early replans follow a plan that was made; after a failed one, the fleet interval retries
        # (not every model tick: that looped on an unplannable config)
        if tick.replan_early_due(self.cfg, self.status, time.monotonic(), self.current_demand, time.time()):
            await self.fleet_tick("demand changed")

    @quiet_at_shutdown
    async def reconcile_tick(self) -> None:
        """:func:`scaler.fleet.tick.reconcile_tick` under the fleet lock, on the daemon leading the fleet."""
        if not self._stop.is_set() and self.actuator is not None and self.market is not None and self.leading():
            async with self._fleet_lock:
                await tick.reconcile_tick(self.cfg, self.status, self._tick_ports(), self.actuator.reconcile)

    async def _sync_workers(self) -> None:
        """The dispatcher's cloud view (who may register, who boots: Status, admission); the list to the hook
        (:func:`scaler.fleet.tick.sync_workers`)."""
        if self.cloud is None:
            return
        await tick.sync_workers(self.cfg, self.status, ThreadedCloud(self.cloud),
                                self.market.typed if self.market else list, self._worker_view(), self._audit)

    # ---- lifecycle -------------------------------------------------------------------------
    def request_stop(self) -> None:
        self._stop.set()

    def stopping(self) -> bool:   # shutdown has begun: the loops' ticks return quietly
        return self._stop.is_set()

    def reload(self) -> bool:
        """SIGHUP (:func:`daemon.reload.reload_parts`): the config read again (refused: the running one
        kept), the ticks moved to its intervals, each part given it (``reload(new)``), then a replan."""
        new = reload_parts(self.cfg, self.cfg_path, self._listen, self.aws, self._scheduler,
                           (self.model_loop, self.market, self.dispatcher), self.quotas.adopt)   # (the market: the actuator's too)
        if new is None:
            return False
        self.cfg, self.model_params = new, self._explicit_params or model_params_for(new)   # given ones are kept
        if self._loop is not None:
            self._loop.create_task(self.fleet_tick("config reloaded"))
        return True

    async def _terminate_fleet(self) -> None:
        """``on_shutdown: terminate``; with the lease lost, one line instead (the fence refuses, and
        the daemon holding the lease now owns the instances: no terminate intent is written)."""
        await self._sync_workers()   # (:func:`daemon.loops.fleet_upkeep.terminate_fleet`)
        left = fleet_left_to_others(self.replica) or (self.aws.left_running(self.status.instances) if self.aws else None)
        await terminate_fleet(self.actuator, lambda: fleet_step.plan_id_for({}, self.status.generation + 1,
                                                                 lease_generation(self.replica)), left)

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
