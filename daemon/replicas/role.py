"""The daemon as one of several replicas of a cluster (issue #27, deliverable 1; ``lease.replicas``).

Every replica serves the same gRPC API; one of them, the cluster lease's holder, runs the fleet
loop. This module is the wiring (I/O); the decisions are ``scaler.replicas.lease_decision.decide`` (who holds the
lease), ``scaler.replicas.membership.decide_beat`` (heartbeats) and
``scaler.replicas.demand.merge_demand`` (the demand the holder plans for).

* A daemon that finds the lease held starts as a **standby** (``daemon.aws.wiring``): it serves
  queries, and every third of the replica ttl it beats (``scaler.replicas.heartbeat``, its address
  in the item) and publishes its per-model demand windows (``scaler.replicas.demand_table``).
* Every renew interval (lease ttl / 3) a standby tries to take the lease (``ClusterLease.acquire``).
  When the holder died its lease expires after its ttl and the first standby to write takes it, at
  the next generation. The new holder then does what a restarted daemon does: ``reconcile`` from
  EC2's cluster tags (adopt, finish, clean up), and a fleet tick at once.
* The holder plans for the demand of every live replica: the published windows of the replicas
  whose heartbeat is live and fresh, summed (``merge_demand``), read with each heartbeat (the
  heartbeats and the windows in one Scan of the lease table).

Invariant (with the fence, ``scaler.replicas.lease_holder.FencedCloud``): **at most one replica launches or
terminates at any instant, and only under a lease generation it holds**. A standby's cloud is
fenced (no lease held: every launch and terminate refused), a holder stops acting
``ttl x CLOCK_SAFETY`` before its lease can expire by another host's clock, and each launch is
tagged with its lease generation. Plan ids lead with the lease generation
(``fleet_step.plan_id_for(..., lease_generation)``), so a new holder never re-derives the dead
holder's ClientTokens. A new holder adopts every instance carrying the cluster tag, so a takeover
leaves no orphan and launches nothing twice; the budget holds because only the holder acts and
the actuator checks every launch against the budget over everything it lists.

A stopping replica answers health checks NOT_SERVING for ``lease.unready_s`` first (:meth:`ReplicaRole.leave`),
so a balancer in front (README "High availability: replicas") moves new queries off it.

Workers (deliverable 2, ``daemon.replicas.shared_workers``): the replica that accepts a registration
records the worker in the lease table; each beat every replica reads the published owners and the
worker items, connects to its own, drops the others (after their running query) and reports the
version it applied in its heartbeat; the holder runs the owners round over the owning replicas.
"""
from __future__ import annotations

import asyncio
import logging
import socket
import time
from typing import Any, Awaitable, Callable, Mapping

from config.pids import pid_running
from config.schema import Config
from daemon.aws.wiring import DaemonError
from daemon.replicas.naming import replica_address, replica_id
from daemon.replicas.shared_workers import RegistryWorkers, ReplicaWorkers
from dispatcher.forwarding import Forwarder
from dispatcher.api.status import ReplicaFacts
from scaler.cloud.provider import CloudError
from scaler.replicas.lease_holder import ClusterLease
from scaler.replicas.demand_table import DynamoDemandTable
from scaler.replicas.lease_decision import LeaseHeld, holder_text, renew_interval_s
from scaler.fleet.step import steady_horizon
from scaler.forecast.history import series_names
from scaler.replicas.demand import ModelWindow, MergedDemand, ReplicaDemand, merge_demand, window_of
from scaler.replicas.heartbeat import ReplicaHeartbeat
from scaler.replicas.membership import REPLICA_TTL_S, Beat, Replica, live_replicas, owner_pid
from scaler.replicas.cluster_scan import ClusterItems, read_cluster
from scaler.replicas.replica_table import DynamoReplicaTable
from scaler.replicas.worker_table import DynamoWorkerTable

log = logging.getLogger("costscale")

Windows = Callable[[], Mapping[str, ModelWindow]]


def _listening(address: str) -> bool:
    """Something accepts connections at ``address`` (host:port); only a refused connect says no
    (a timeout or another error proves nothing)."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=1.0):
            return True
    except ConnectionRefusedError:
        return False
    except (OSError, ValueError):
        return True


def model_windows(cfg: Config, dispatcher: Any) -> dict[str, ModelWindow]:
    """This replica's demand window of each model and pipeline (its queries at entry), as it publishes them."""
    if dispatcher is None:
        return {}
    steady = steady_horizon(cfg)
    return {n: window_of(dispatcher.window_snapshot(n, steady_s=steady)) for n in series_names(cfg)}


def lease_generation(role: "ReplicaRole | None") -> int | None:
    """The lease generation a daemon's plan ids lead with: None without replicas (the ids as
    before), else the generation it holds (``fleet_step.plan_id_for``)."""
    return role.lease_generation() if role is not None else None


async def start_replica(cfg: Config, lease: ClusterLease | None, client: Any, listen: str, port: int,
                        windows: Windows, on_lead: Callable[[], Awaitable[None]],
                        dispatcher: Any = None) -> "ReplicaRole | None":
    """This daemon's replica role, started (its first heartbeat), or None with replicas off (or
    no lease: a cloud handed in). With a dispatcher, its workers follow the published owners."""
    if not cfg.lease.replicas or lease is None:
        return None
    own = getattr(dispatcher, "private_port", None)   # dispatcher.processes > 1: the shared port reaches any of them
    role = ReplicaRole(cfg, lease, client, replica_address(listen, own or port), windows, on_lead)
    if dispatcher is not None:
        role.share_workers(cfg, client, dispatcher)
    await role.start()
    return role


def fleet_left_to_others(role: "ReplicaRole | None") -> str | None:
    """Why ``on_shutdown: terminate`` does not terminate the fleet at this replica's stop, or None
    (replicas off, or the last live replica): a standby never acts on the fleet, and a holder that
    other replicas outlive hands the fleet over (its lease is given back at the stop, and the next
    replica to take it adopts the instances) instead of ending the service for them."""
    if role is None:
        return None
    if not role.leading():
        return "on_shutdown: terminate skipped: a standby replica leaves the fleet to the lease holder"
    others = [r for r in role.live if r != role.me.replica]
    if others:
        return (f"on_shutdown: terminate skipped: replica{'s' * (len(others) > 1)} {', '.join(others)} "
                "live: the next to take the lease runs the fleet")
    return None


class ReplicaRole:
    """One daemon's part in a replicated cluster: heartbeat, demand, the lease retried."""

    def __init__(self, cfg: Config, lease: ClusterLease, client: Any, address: str, windows: Windows,
                 on_lead: Callable[[], Awaitable[None]], *, clock: Callable[[], float] = time.time,
                 beat_ttl_s: float = REPLICA_TTL_S) -> None:
        self.lease = lease
        self.address = address
        self.windows = windows
        self.on_lead = on_lead
        self.clock = clock
        host = lease.me.host
        self.me = Replica(cluster=cfg.cluster, replica=replica_id(cfg, address, host), owner=lease.me.owner, host=host,
                          address=address)
        self.table = DynamoReplicaTable(cfg.lease.table, client, cfg.cluster)
        self.demand_table = DynamoDemandTable(cfg.lease.table, client, cfg.cluster)
        self.heartbeat = ReplicaHeartbeat(self.table, self.me, beat_ttl_s, table_name=cfg.lease.table)
        self.unready_s = cfg.lease.unready_s
        self.merged: MergedDemand | None = None   # the holder's view, read with each heartbeat
        self.live: tuple[str, ...] = ()          # the live replicas as the holder read them last
        self.takeovers = 0
        self.workers: ReplicaWorkers | None = None   # the workers shared by owners (share_workers)
        self._beating = asyncio.Lock()                # a scheduled beat and a rescue beat never overlap
        self._rescue: asyncio.TimerHandle | None = None
        self._suspects: set[str] = set()              # replica addresses being checked (suspect)
        self._tasks: set[asyncio.Task[Any]] = set()

    def share_workers(self, cfg: Config, client: Any, dispatcher: Any) -> None:
        """Registrations recorded, workers connected and dropped by the published owners."""
        reg = dispatcher.worker_registry
        self.workers = ReplicaWorkers(self.me.replica, DynamoWorkerTable(cfg.lease.table, client, cfg.cluster),
                                      self.table, self.heartbeat, RegistryWorkers(reg), self.clock,
                                      base_type=lambda: getattr(dispatcher, "base_type", None),
                                      cloud_view=lambda: reg.cloud_view,
                                      forwarder=Forwarder() if cfg.dispatcher.tls is None else None)
        reg.on_register = self.workers.on_register
        dispatcher.forwarder = self.workers.forwarder
        if dispatcher.forwarder is not None:    # the queries it forwards count in its own demand window
            dispatcher.forwarder.on_arrival = dispatcher.record_arrival
            dispatcher.forwarder.on_hop_failed = self.suspect

    def leading(self) -> bool:
        """This replica holds the cluster lease (it runs the fleet loop)."""
        return self.lease.held is not None and self.lease.lost is None

    def lease_generation(self) -> int | None:
        held = self.lease.held
        return held.generation if held is not None else None

    # -- the jobs ---------------------------------------------------------------------------
    def _beat_sync(self, windows: Mapping[str, ModelWindow], items: ClusterItems | None = None) -> None:
        """Heartbeat (with the owners version applied), publish this replica's ``windows``; the
        holder reads every replica's and runs the owners round, a standby its rescue round, on
        ``items`` (the round's one Scan, taken before the heartbeat; read after it without),
        with this replica's own heartbeat and windows as just written."""
        beat = self.heartbeat.beat(applied=self.workers.applied if self.workers is not None else 0)
        demand = ReplicaDemand(self.me.replica, round(self.clock(), 3), windows)
        self.demand_table.publish(self.me, demand)
        if not self.leading() and self.workers is None:
            return                          # a standby that shares no workers reads nobody's items
        if items is None:
            items = read_cluster(self.table, self.me.cluster, round(self.clock(), 3))
        items = items.with_own(beat, demand)
        if self.leading():
            live = live_replicas(list(items.beats), items.at)
            self.live = tuple(live)
            self.merged = merge_demand(list(items.demands), live, items.at)
            generation = self.lease_generation()
            if self.workers is not None and generation is not None:
                self.workers.holder_round(generation, items.at, items=items)
        elif self.workers is not None:     # a standby moves the workers of owners that all died
            self.workers.rescue_round(items.at, items=items)

    async def beat(self) -> None:
        """One heartbeat: the windows taken here, on the event loop that records the queries in
        them, the table calls in a thread. A replica whose forwarded queries failed beats again
        just after its target's heartbeat expires (``ReplicaWorkers.rescue_in_s``)."""
        async with self._beating:
            await self._beat()
        due = self.workers.rescue_in_s() if self.workers is not None else None
        if due is not None and self._rescue is None:
            def fire() -> None:
                self._rescue = None
                task = asyncio.get_running_loop().create_task(self.beat())
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            self._rescue = asyncio.get_running_loop().call_later(due, fire)

    def suspect(self, address: str) -> None:
        """A forwarded query's hop to the replica at ``address`` failed (``Forwarder.on_hop_failed``,
        on the loop): when its process is proven gone (``ReplicaWorkers.forget_crashed``) its
        heartbeat is deleted and this replica beats at once, so its workers move now instead of
        when its heartbeat expires (up to the replica ttl, 6 s: issue #40). One check per address
        at a time."""
        if self.workers is None or address in self._suspects:
            return
        self._suspects.add(address)
        workers = self.workers

        async def check() -> None:
            try:
                gone, held_lease = await asyncio.to_thread(self._forget_crashed, workers, address)
                if gone is not None:
                    log.warning("replica %s: replica %s (pid %s) is gone: its heartbeat deleted, its workers move now",
                                self.me.replica, gone.replica, owner_pid(gone))
                    await self.beat()
                    if held_lease:   # its lease is free at once (a dead process of this host): take it now
                        await self.try_lead()
            except CloudError as exc:
                log.warning("replica %s: replica at %s not checked (%s)", self.me.replica, address, exc)
            finally:
                self._suspects.discard(address)
        task = asyncio.get_running_loop().create_task(check())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _forget_crashed(self, workers: ReplicaWorkers, address: str) -> tuple[Beat | None, bool]:
        """``ReplicaWorkers.forget_crashed`` (blocking I/O), and whether the crashed replica held the
        cluster lease (its process is the lease item's): then ``ReplicaWorkers.holder_crashed``."""
        gone = workers.forget_crashed(address, self.me.host, pid_running, _listening)
        if gone is None:
            return None, False
        held = self.lease.table.get(self.me.cluster)
        holder = held is not None and held.owner == gone.owner
        if holder:
            workers.holder_crashed(round(self.clock(), 3))
        return gone, holder

    async def _beat(self) -> None:
        try:
            items = (await asyncio.to_thread(read_cluster, self.table, self.me.cluster, round(self.clock(), 3))
                     if self.workers is not None or self.leading() else None)
            if self.workers is not None and items is not None:   # the owners applied before the beat reporting them
                self.workers.last_round = None
                seen = self.workers.seen(items)
                self.workers.apply(*seen)
            await asyncio.to_thread(self._beat_sync, dict(self.windows()), items)
            if self.workers is not None:
                rnd = self.workers.last_round
                if rnd is not None and rnd.wrote:   # the writer applies what it published at once
                    self.workers.apply(rnd.published, seen[1], seen[2])
                self.workers.arm_expiry()
        except CloudError as exc:
            log.warning("replica %s: heartbeat not written (%s); retrying", self.me.replica, exc)

    async def start(self) -> None:
        """The first heartbeat (raises ReplicaIdTaken, one line, when another live process beats
        under this id), then the log line saying which role this replica starts in."""
        try:
            await asyncio.to_thread(self._beat_sync, dict(self.windows()))
        except CloudError as exc:     # one line, exit 1 (as the lease's own table errors at start)
            raise DaemonError(f"replica {self.me.replica}: DynamoDB table {self.table.table} refused its first "
                              f"heartbeat: {exc}") from None
        role = f"lease holder (generation {self.lease_generation()})" if self.leading() else "standby"
        log.info("replica %s of cluster %s at %s: %s", self.me.replica, self.me.cluster, self.address, role)

    async def try_lead(self) -> None:
        """A standby's lease retry; on success ``on_lead`` (reconcile, then a fleet tick)."""
        if self.leading() or self.lease.lost is not None:
            return
        try:
            held = await asyncio.to_thread(self.lease.acquire)
        except LeaseHeld:
            return
        except CloudError as exc:
            log.warning("replica %s: lease not tried (%s)", self.me.replica, exc)
            return
        prev = self.lease.taken_from
        self.takeovers += 1
        log.info("replica %s took the lease of cluster %s (generation %d)%s: running the fleet loop",
                 self.me.replica, self.me.cluster, held.generation,
                 f"; its last holder ({holder_text(prev)}) is gone" if prev else "")
        if prev is not None and prev.host == self.me.host:   # taken from a dead process of this host:
            self._suspect_owner(prev.owner)                    # its workers move now too, not at its beat's expiry
        await self.beat()       # the merged demand before the first tick
        await self.on_lead()

    def _suspect_owner(self, owner: str) -> None:
        """:meth:`suspect` the replica whose heartbeat names process ``owner``, if one does."""
        beats = self.workers.beats.values() if self.workers is not None else ()
        address = next((b.address for b in beats if b.owner == owner and b.address), None)
        if address is not None:
            self.suspect(address)

    def schedule(self, scheduler: Any) -> None:
        scheduler.add_job(self.beat, "interval", seconds=self.heartbeat.ttl_s / 3, max_instances=1, coalesce=True,
                          id="replica-beat")
        scheduler.add_job(self.try_lead, "interval", seconds=renew_interval_s(self.lease.ttl_s), max_instances=1,
                          coalesce=True, id="replica-lead")

    async def leave(self, dispatcher: Any) -> None:
        """The first step of a stop: health NOT_SERVING on every service while this replica still
        serves, for ``lease.unready_s``, so balancers (NLB health checks, nginx, a client's
        health-checked round_robin) send new queries to the other replicas; the daemon then
        drains and exits (``Dispatcher.stop``). The heartbeat goes on through the drain, until
        :meth:`close`, so the workers this replica owns stay its own until their queries ended
        (its item deleted then: the holder moves them at its next round)."""
        log.info("replica %s leaving: NOT_SERVING for %g s, then draining", self.me.replica, self.unready_s)
        await dispatcher.unready()

        async def beating() -> None:   # the scheduler stops now: the heartbeat goes on until close()
            while True:
                await self.beat()
                await asyncio.sleep(self.heartbeat.ttl_s / 3)
        task = asyncio.get_running_loop().create_task(beating())
        self._tasks.add(task)
        await asyncio.sleep(self.unready_s)

    def facts(self) -> ReplicaFacts:
        """What Status shows of this replica and of the owners it read last."""
        w = self.workers
        pub = w.published if w is not None else None
        return ReplicaFacts(
            id=self.me.replica, lease_holder=self.leading(),
            live=tuple(sorted(w.live)) if w is not None and w.live else self.live,
            owners=dict(pub.owner) if pub is not None else {},
            releasing={i: r.to for i, r in pub.releasing.items()} if pub is not None else {},
            forwarding_to=", ".join(w.forwarder.targets) if w is not None and w.forwarder is not None else "",
            owners_version=w.applied if w is not None else 0)

    async def close(self) -> None:
        """A clean stop: the heartbeat and demand items deleted (if still ours)."""
        if self._rescue is not None:
            self._rescue.cancel()
        for task in list(self._tasks):   # the beats of the drain (leave) and a rescue beat under way
            task.cancel()
        def forget() -> None:
            self.heartbeat.stop()
            self.demand_table.forget(self.me)
        try:
            await asyncio.to_thread(forget)
        except CloudError as exc:
            log.warning("replica %s: items not deleted (%s); they expire in %g s", self.me.replica, exc,
                        self.heartbeat.ttl_s)



__all__ = ["ReplicaRole", "fleet_left_to_others", "lease_generation", "model_windows", "replica_address", "replica_id",
           "start_replica"]
