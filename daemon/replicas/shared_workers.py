"""Every replica knows every worker; each uses only those the published owners give it (issue
#27, deliverable 2b). The wiring (I/O) of ``scaler.replicas.apply_owners``, ``scaler.replicas.owners_round``,
``scaler.replicas.owning_replicas`` and ``scaler.replicas.worker_table``.

* **Registration.** The replica that accepts a worker's RegisterWorker does not add it: it records
  the worker (instance id, type, address, itself) as a ``{cluster}#worker#{id}`` item
  (:meth:`ReplicaWorkers.on_register`). A record that fails leaves the worker unheard, so it
  registers again (``worker.rejoin``).
* **Every heartbeat round, on every replica** (:meth:`ReplicaWorkers.read`, then
  :meth:`ReplicaWorkers.apply`, before the heartbeat is written): the published owners and the
  worker items are read; ``apply_owners`` says which workers to connect to, which to drop (an idle
  one at once, a busy one drained and removed in a later round once its query ended) and which
  version it has applied, reported in the heartbeat that follows.
* **The holder's round** (:meth:`ReplicaWorkers.holder_round`, after its heartbeat): the items of
  live instances, ``owners_round`` over the owning replicas (``owning_replicas``: as many as keep
  >= 2 base-type workers each, the holder first), the items of instances gone forgotten.
* **Forwarding** (deliverable 2c): while it holds no worker, the dispatcher's
  ``dispatcher.forwarding.Forwarder`` sends each Submit to the owning replicas ``forward_targets``
  names (by their heartbeat addresses), in turn; else it admits queries itself.
* **A crashed owner** (issue #40): a forwarding hop to an owning replica failed and that replica's
  process is proven gone (``scaler.replicas.membership.crashed_here``: this host, its pid exited, its
  port refusing): its heartbeat item is deleted at once (:meth:`ReplicaWorkers.forget_crashed`), as
  its clean stop would have, so the next round moves its workers without waiting out the ttl.
  When it held the cluster lease, the standby also deals the workers that register meanwhile (a
  replacement the dead holder launched), for two replica ttls or until a new holder publishes
  (:meth:`ReplicaWorkers.holder_crashed`, :meth:`ReplicaWorkers.rescue_round`).
* **The heartbeat's deadline**: when it passes with no newer beat, every worker is dropped at once
  (:meth:`ReplicaWorkers.expire`), before the holder, by its clock, sees the heartbeat expire and
  grants them to others (``scaler.replicas.heartbeat``).

So a worker is matched by at most one replica at a time (``scaler.replicas.handoff``'s argument):
``tests/replicas/test_replica_workers.py`` runs two replicas on moto's DynamoDB and checks it after every
step.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable, Mapping, Protocol

from dispatcher.forwarding import Forwarder
from scaler.cloud.provider import CloudError
from scaler.replicas.handoff import Published
from scaler.replicas.heartbeat import ReplicaHeartbeat
from scaler.replicas.cluster_scan import ClusterItems, read_cluster
from scaler.replicas.membership import REPLICA_TTL_S, Beat, crashed_here
from scaler.replicas.owners_round import OwnersRound, OwnersTable, owners_round
from scaler.replicas.owning_replicas import owning_replicas
from scaler.replicas.apply_owners import (OwnedWorkers, WorkerItem, apply_owners, base_workers, forward_targets,
                                    no_live_owner, owners_orphaned, round_workers)
from scaler.replicas.worker_table import DynamoWorkerTable

log = logging.getLogger("costscale")


class HeldWorkers(Protocol):
    """The workers one replica's dispatcher holds (:class:`RegistryWorkers` over its registry)."""

    def held(self) -> dict[str, str]: ...           # instance id -> address

    def busy(self) -> set[str]: ...                 # running a query now

    def connect(self, item: WorkerItem) -> None: ...

    def keep(self, instance_id: str) -> None: ...   # owned: takes queries (a drop undone)

    def drop(self, instance_id: str) -> None: ...   # no new query; removed when idle


class RegistryWorkers:
    """:class:`HeldWorkers` over a ``dispatcher.workers.registry.WorkerRegistry`` (on the dispatcher's loop)."""

    def __init__(self, registry: Any) -> None:
        self.registry = registry
        self.dropping: set[str] = set()    # drained by a drop, not by a drain or parking

    def held(self) -> dict[str, str]:
        return {iid: w.address for iid, w in self.registry.workers.items()}

    def busy(self) -> set[str]:
        return {iid for iid, w in self.registry.workers.items() if not w.idle}

    def connect(self, item: WorkerItem) -> None:
        self.dropping.discard(item.instance_id)
        self.registry.add_worker_direct(item.instance_id, item.instance_type, item.address)

    def keep(self, instance_id: str) -> None:
        w = self.registry.workers.get(instance_id)
        if instance_id in self.dropping and w is not None and not w.parked:
            w.draining = False
            self.registry.trigger.kick()
        self.dropping.discard(instance_id)

    def drop(self, instance_id: str) -> None:
        w = self.registry.workers.get(instance_id)
        if w is None:
            return
        if w.idle:
            self.dropping.discard(instance_id)
            self.registry.remove_worker(w, "owned by another replica")
        elif not w.draining:
            self.dropping.add(instance_id)
            w.draining = True
            self.registry.trigger.kick()


class ReplicaWorkers:
    """One replica's part in sharing the workers (module docstring)."""

    def __init__(self, me: str, table: DynamoWorkerTable, owners: OwnersTable, heartbeat: ReplicaHeartbeat,
                 workers: HeldWorkers, clock: Callable[[], float],
                 base_type: Callable[[], str | None] = lambda: None,
                 cloud_view: Callable[[], Mapping[str, str] | None] = lambda: None,
                 forwarder: Forwarder | None = None) -> None:
        self.me = me
        self.table = table
        self.owners = owners
        self.heartbeat = heartbeat
        self.workers = workers
        self.clock = clock
        self.base_type = base_type
        self.cloud_view = cloud_view
        self.forwarder = forwarder             # set while this replica holds no worker (deliverable 2c)
        self.applied = 0                       # the owners version applied (reported in the heartbeat)
        self.last: OwnedWorkers | None = None
        self.last_round: OwnersRound | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self.expiry: dict[str, float] = {}      # live replicas' heartbeat expiry (epoch s) by address
        self.beats: dict[str, Beat] = {}         # live replicas' heartbeats by address (forget_crashed)
        self.generation: int | None = None        # the lease generation of the owners read last
        self.holder_gone: tuple[int, float] | None = None   # (that generation, until): its holder crashed
        self.published: Published | None = None  # the owners read last (status)
        self.live: dict[str, str] = {}           # the live replicas read last: id -> address (status)
        self._failed_seen = 0                   # the forwarder's failed hops already answered by a beat
        self._expiry: asyncio.TimerHandle | None = None

    # -- registration (on the dispatcher's loop) ------------------------------------------------
    def record(self, instance_id: str, instance_type: str, address: str) -> bool:
        """The worker item of a registration this replica accepted (blocking I/O)."""
        return self.table.record(WorkerItem(instance_id, instance_type, address, self.me, round(self.clock(), 3)))

    def on_register(self, instance_id: str, instance_type: str, address: str) -> None:
        """``WorkerRegistry.on_register``: the item written in a thread, failures logged."""
        async def write() -> None:
            try:
                await asyncio.to_thread(self.record, instance_id, instance_type, address)
            except CloudError as exc:
                log.warning("replica %s: worker %s not recorded (%s); it registers again", self.me, instance_id, exc)
        task = asyncio.get_running_loop().create_task(write())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- every round ----------------------------------------------------------------------------
    def read(self) -> tuple[Published | None, list[WorkerItem], dict[str, str]]:
        """The published owners, the worker items and the live replicas' addresses, in one Scan
        (blocking I/O)."""
        return self.seen(read_cluster(self.table, self.table.cluster, round(self.clock(), 3)))

    def seen(self, items: ClusterItems) -> tuple[Published | None, list[WorkerItem], dict[str, str]]:
        """What :meth:`apply` takes from the cluster's items read at one Scan; the live replicas'
        heartbeat expiry kept for :meth:`rescue_in_s`."""
        self.beats = {b.address: b for b in items.beats if not b.expired(items.at) and b.replica != self.me}
        self.expiry = {b.address: b.expires_at for b in items.beats if not b.expired(items.at)}
        self.generation = items.owners[1] if items.owners is not None else None
        return (items.owners[0] if items.owners is not None else None), list(items.workers), items.live_addresses()

    def rescue_in_s(self) -> float | None:
        """A replica that forwards and saw a hop fail since it last asked: seconds until the
        first heartbeat of its forwarding targets expires (when :meth:`rescue_round` may move that
        owner's workers), so the daemon beats then instead of up to a beat period later."""
        fwd = self.forwarder
        if fwd is None or fwd.failed == self._failed_seen:
            return None
        self._failed_seen = fwd.failed
        ats = [self.expiry[t] for t in fwd.targets if t in self.expiry]
        return None if not ats else max(0.0, min(ats) - self.clock()) + 0.05

    def forget_crashed(self, address: str, host: str, alive: Callable[[int], bool],
                       listening: Callable[[str], bool]) -> Beat | None:
        """The heartbeat of the replica at ``address`` (as read last), deleted when its process is
        proven gone (``crashed_here``; blocking I/O, conditional on its process): the next owners
        round, the holder's or a standby's :meth:`rescue_round`, moves its workers at once."""
        beat = self.beats.get(address)
        if beat is None or not crashed_here(beat, host, alive, listening) or not self.heartbeat.table.forget(beat):
            return None
        self.beats.pop(address, None)
        self.expiry.pop(address, None)
        return beat

    def holder_crashed(self, now: float) -> None:
        """The crashed replica :meth:`forget_crashed` named held the cluster lease: until a new
        holder publishes (another generation), for at most two replica ttls, this replica's
        :meth:`rescue_round` deals the workers that register meanwhile."""
        if self.generation is not None:
            self.holder_gone = (self.generation, now + 2 * REPLICA_TTL_S)

    def apply(self, published: Published | None, items: list[WorkerItem],
              live: Mapping[str, str] | None = None) -> OwnedWorkers:
        """Connect, keep and drop as ``apply_owners`` says (on the dispatcher's loop); the
        forwarding targets while it holds none (``forward_targets``)."""
        d = apply_owners(published, self.me, items, self.workers.held(), self.workers.busy(),
                         self.heartbeat.valid(), self.applied)
        if live is not None:
            self.published, self.live = published, dict(live)
        for w in d.drop:
            self.workers.drop(w)
        for w in d.keep:
            self.workers.keep(w)
        for item in d.connect:
            self.workers.connect(item)
        if d.connect or d.drop:
            log.info("replica %s: owners version %d: connected %s, dropped %s", self.me,
                     published.version if published else 0,
                     ", ".join(i.instance_id for i in d.connect) or "none", ", ".join(d.drop) or "none")
        self.applied = d.applied
        self.last = d
        if self.forwarder is not None:
            holds = bool(self.workers.held())
            targets = forward_targets(published, self.me, live or {}, holds)
            if targets != self.forwarder.targets:
                log.info("replica %s: %s", self.me,
                         f"forwarding queries to {', '.join(targets)}" if targets else "serving queries itself")
            self.forwarder.targets = targets
            self.forwarder.refusal = ("no live replica owns a worker (the owners are moving)"
                                      if no_live_owner(published, self.me, live or {}, holds) else None)
        return d

    def arm_expiry(self) -> None:
        """After a beat landed: :meth:`expire` at the heartbeat's local deadline (on the loop)."""
        if self._expiry is not None:
            self._expiry.cancel()
        self._expiry = asyncio.get_running_loop().call_later(max(0.0, self.heartbeat.remaining_s()), self.expire)

    def expire(self) -> None:
        """The heartbeat's deadline passed with no newer beat: hold no worker."""
        if not self.heartbeat.valid() and self.workers.held():
            log.warning("replica %s: heartbeat lapsed: dropping every worker until owners are read again", self.me)
            self.apply(None, [])

    # -- the lease holder's round (blocking I/O) ------------------------------------------------
    def holder_round(self, generation: int, now: float, holder: str | None = "",
                     items: ClusterItems | None = None) -> OwnersRound:
        """Publish the owners of the registered workers of live instances (module docstring);
        ``holder``: the replica ``owning_replicas`` puts first (default this one); ``items``: the
        heartbeat round's Scan (read again without it), ``now`` its time."""
        first = self.me if holder == "" else holder
        table: OwnersTable = self.owners if items is None else _ReadOwners(items, self.owners)
        registered = self.table.workers() if items is None else list(items.workers)
        rw = round_workers(registered, self.cloud_view(), now, REPLICA_TTL_S)
        for gone in rw.forget:
            self.table.forget(gone)
        base = base_workers(rw.workers, self.base_type())

        def owning(live: list[str], current: Published) -> tuple[str, ...]:
            return owning_replicas(live, first, base, sorted(set(current.intended().values()))).owners
        self.last_round = owners_round(table, rw.workers, generation, now, owning)
        return self.last_round

    def rescue_round(self, now: float, items: ClusterItems | None = None) -> OwnersRound | None:
        """A standby's round (blocking I/O), run only while workers are owned but no owner is
        live (``scaler.replicas.apply_owners.owners_orphaned``: the owning replicas died, the lease
        holder among them), or the lease holder crashed (:meth:`holder_crashed`): the owners round
        as the holder runs it, with no replica put first (the live owners stay, then id order)
        and under the generation of the published owners, so a new lease holder's next write
        still wins. The workers of the dead owners move
        ``REPLICA_TTL_S`` after their last beat, not a lease ttl later; the handoff argument is
        the holder's (a dead owner stopped using its workers before its heartbeat expired, by
        this replica's clock too), and the write is conditional on the version read, so two
        rescuing standbys cannot both win."""
        held = self.owners.owners() if items is None else items.owners
        if held is None:
            return None
        published, generation = held
        beats = self.owners.beats() if items is None else items.beats
        if owners_orphaned(published, {b.replica for b in beats if not b.expired(now)}):
            log.warning("replica %s: no owning replica is live: moving their workers without the lease holder", self.me)
        elif self.holder_gone is None or self.holder_gone[0] != generation or now > self.holder_gone[1]:
            self.holder_gone = None
            return None     # else: the lease holder crashed; new workers are dealt until a new one publishes
        return self.holder_round(generation, now, holder=None, items=items)


class _ReadOwners:
    """The owners table as one heartbeat round's Scan read it (``OwnersTable``): its heartbeats
    and published owners; a publish goes to the table, conditional on the version read."""

    def __init__(self, items: ClusterItems, table: OwnersTable) -> None:
        self.items, self.table = items, table

    def beats(self) -> list[Beat]:
        return list(self.items.beats)

    def owners(self) -> tuple[Published, int] | None:
        return self.items.owners

    def publish(self, published: Published, generation: int, expect_version: int | None) -> bool:
        return self.table.publish(published, generation, expect_version)


__all__ = ["HeldWorkers", "RegistryWorkers", "ReplicaWorkers"]
