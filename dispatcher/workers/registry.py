"""The worker registry: which workers may receive queries, and in what state each one is.

A worker registers with the cluster token, and only as an instance the fleet loop launched
(:meth:`WorkerRegistry.allow_instance`); health checks every ``health_interval_s`` remove a worker
after ``health_failures`` failures in a row, and its Health reply says which variants it holds. A
worker leaves the routing round when it drains, is parked (:mod:`scaler.fleet.parking`: surplus kept warm,
its variants unloaded) or is removed; a query in flight on a removed worker goes back to the head
of the queue (DESIGN invariant 4). Utilization over the last ``utilization_horizon_s`` seconds feeds
getVariant, the model loop and offline throttling (INFaaS §4.1, §5).

The cloud view (:meth:`WorkerRegistry.set_cloud_view`, given by the daemon after each listing of the
managed instances) says which instances may register and which are still booting: Status counts
the pool and its $/hr from it, and admission refuses at once a query nothing serves while nothing
is booting. Until the first view (a dispatcher run without the daemon) nothing is known to boot and
admission does not refuse on that ground.

:class:`WorkerRegistry` is a part of :class:`dispatcher.server.Dispatcher` (``d.worker_registry``; the
Dispatcher forwards its API and ``workers``, ``serves``, ``parked_ids``, ``cloud_view`` and the
tunables ``health_interval_s``, ``health_timeout_s``, ``health_failures``, ``utilization_horizon_s``).
It takes the :class:`dispatcher.runtime.Runtime` (clock, loop, tasks), the round trigger, the
catalog (a type's hardware class), how to dial a worker (``connect``) and what to do with the call
of a worker that is removed (``calls``: :meth:`dispatcher.queries.QueryBook.abandon_call`). Parking
and the model each worker serves, which also load and unload variants, are
:mod:`dispatcher.workers.roles`'.
"""
from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Protocol

from config.catalog import InstanceType
from config.hostport import split_hostport
from config.version import PROTOCOL_VERSION, costscale_version, version_mismatch
from dispatcher import modelless as ml
from dispatcher.auth import TokenRing
from dispatcher.proto import costscale_pb2 as pb
from dispatcher.runtime import RoundTrigger, Runtime
from dispatcher.workers.client import WorkerClient
from scaler.cloud.provider import ManagedInstance
from scaler.cloud.slots import base_type

#: (instance id, "instance-action" | "rebalance", when EC2 reclaims it: epoch s or None)
SpotNoticeHandler = Callable[[str, str, "float | None"], None]


#: served-query samples a worker keeps until the model loop takes them (the oldest dropped first)
SAMPLES_KEPT = 4096
#: seconds between two health checks of every registered worker (the default of ``health_interval_s``;
#: a worker that hears nothing for 3 of them registers again, worker.rejoin)
HEALTH_INTERVAL_S = 1.0


@dataclass(eq=False)
class WorkerState:
    """One registered worker, as the dispatcher sees it."""

    instance_id: str
    instance_type: str
    address: str
    client: WorkerClient
    idle: bool = True
    busy_until: float = 0.0
    #: the call under way: its (query, generation) pairs, head first, taken at dispatch (with the
    #: queries that joined it, dispatcher.batch_join), and the inputs it sends; None when idle
    call: tuple[list, list] | None = None
    served: int = 0
    draining: bool = False
    removed: bool = False
    #: parked (scaler.fleet.parking): surplus kept warm, given no queries, its variants unloaded; it
    #: counts as draining while parked, and ``parked_variants`` is what it held (loaded back on unpark)
    parked: bool = False
    parked_variants: set[str] | None = None
    health_failures: int = 0
    idle_event: asyncio.Event = field(default_factory=asyncio.Event)
    hardware: str = "cpu"
    #: variants loaded on the worker (its Health reply is authoritative; Load/Unload update it)
    loaded: set[str] | None = None   # None: not known yet (assume the config's models)
    last_op_at: float = 0.0
    ops_in_flight: int = 0           # Load/Unload calls under way (a Health reply then may be stale)
    #: (start, end) of recent online queries, for utilization (model loop, offline throttling)
    busy: deque = field(default_factory=lambda: deque(maxlen=4096))
    #: (variant, batch, service_ms, offline) served since the model loop last took them
    samples: deque = field(default_factory=lambda: deque(maxlen=SAMPLES_KEPT))

    @property
    def in_flight(self) -> str | None:
        """The id of the query heading the call under way; None when idle."""
        return self.call[0][0][0].query_id if self.call is not None else None
    #: smoothed time (ms) a call to this worker takes beyond the service time it reports (network,
    #: (de)serialization): part of how long the worker stays busy, so of the remaining busy time in L
    overhead_ms: float = 0.0


class AbandonsCalls(Protocol):
    """What happens to the call of a worker that is removed (:class:`dispatcher.queries.QueryBook`)."""

    def abandon_call(self, w: WorkerState, reason: str) -> None: ...


class WorkerRegistry:
    """Registration, health, drain, the parked marks, the assignment and utilization (see the module
    docstring)."""

    def __init__(self, rt: Runtime, trigger: RoundTrigger, calls: AbandonsCalls,
                 catalog: Mapping[str, InstanceType], connect: Callable[[str], WorkerClient]) -> None:
        self.rt = rt
        self.trigger = trigger
        self.calls = calls
        #: the allowed instance types (the Dispatcher updates it in place on a config reload)
        self.catalog = catalog
        self.connect = connect
        self.workers: dict[str, WorkerState] = {}
        self.health_interval_s = HEALTH_INTERVAL_S
        self.health_timeout_s = 1.0
        self.health_failures = 2
        self.utilization_horizon_s = 2.0
        self._allowed: dict[str, str] = {}
        self.parked_ids: set[str] = set()   # parked instances, registered or not yet
        #: the daemon's last listing: live (pending or running) managed instance -> its type; None
        #: before the first one
        self.cloud_view: dict[str, str] | None = None
        self.cloud_pending: set[str] = set()   # of those, the ones EC2 still lists as pending
        self.cloud_slots: dict[str, str] = {}   # of those, each one's slot (scaler.cloud.slots: TYPE@ZONE spot)
        self.spot_notice_handler: SpotNoticeHandler | None = None   # the fleet loop (spot interruptions)
        self._health_task: asyncio.Task | None = None
        #: the model each instance serves (the fleet's joint plan, scaler.fleet.worker_assignment); an
        #: instance not named serves any model (one model, or a dispatcher without a daemon)
        self.serves: dict[str, str] = {}
        #: with dispatcher replicas (daemon.replicas.shared_workers): an accepted registration is handed
        #: here (instance id, type, address) instead of being added; the published owners add it
        self.on_register: Callable[[str, str, str], None] | None = None
        #: the costscale version a worker must run to register (issue #38)
        self.version = costscale_version()

    def set_assignment(self, serves: Mapping[str, str]) -> list[str]:
        """Which model each instance serves from now on (its queries of other models stop; a call
        running finishes); returns the instances whose model changed (no round is asked for: the
        caller loads what they miss first, :meth:`dispatcher.workers.roles.WorkerRoles.set_assignment`)."""
        moved = [iid for iid, m in serves.items() if self.serves.get(iid) != m]
        self.serves = dict(serves)
        return moved

    def serves_model(self, instance_id: str, model: str) -> bool:
        """``instance_id`` may take queries of ``model`` (the assignment; none: any model)."""
        m = self.serves.get(instance_id)
        return m is None or m == model

    def allow_instance(self, instance_id: str, instance_type: str) -> None:
        self._allowed[instance_id] = instance_type

    def set_cloud_view(self, instances: Iterable[ManagedInstance]) -> None:
        """The managed instances as the cloud lists them now (the daemon calls this after each
        listing): live ones may register, those listed shutting down or terminated no longer; a
        registered worker that is no longer live is forgotten
        (its in-flight query re-dispatched); parked marks of instances gone are dropped."""
        instances = list(instances)
        live = {i.instance_id: base_type(i.instance_type) for i in instances if i.live}   # a spot slot: its type
        self.cloud_view = live
        self.cloud_slots = {i.instance_id: i.instance_type for i in instances if i.live}
        self.cloud_pending = {i.instance_id for i in instances if i.state == "pending"}
        for iid, itype in live.items():
            self.allow_instance(iid, itype)
        for i in instances:     # listed terminated: never to register (the allowances stay the live ones')
            if not i.live and i.instance_id not in live:
                self._allowed.pop(i.instance_id, None)
        for iid in list(self.workers):
            if iid not in live:
                self.forget_instance(iid)
        self.parked_ids &= set(live)

    def booting(self) -> list[str]:
        """Live managed instances (cloud view) that have not registered yet: workers on their way."""
        return sorted(iid for iid in self.cloud_view or () if iid not in self.workers)

    def forget_instance(self, instance_id: str) -> None:
        if self.rt.off_loop():
            self.rt.loop.call_soon_threadsafe(self.forget_instance, instance_id)  # type: ignore[union-attr]
            return
        self._allowed.pop(instance_id, None)
        self.parked_ids.discard(instance_id)
        w = self.workers.get(instance_id)
        if w is not None:
            self.remove_worker(w, "instance forgotten")

    def add_worker_direct(self, instance_id: str, instance_type: str, address: str) -> None:
        if self.rt.off_loop():
            self.rt.loop.call_soon_threadsafe(self.add_worker_direct, instance_id, instance_type, address)  # type: ignore[union-attr]
            return
        old = self.workers.get(instance_id)
        if old is not None:
            if old.address == address and old.instance_type == instance_type:
                return
            self.remove_worker(old, "re-registered")
        w = WorkerState(instance_id, instance_type, address, self.connect(address))
        it = self.catalog.get(instance_type)
        w.hardware = it.hardware if it is not None else "cpu"
        w.idle_event.set()
        if instance_id in self.parked_ids:
            w.parked = w.draining = True
        self.workers[instance_id] = w
        self.trigger.kick()

    def register(self, req: pb.RegisterWorkerRequest, token: TokenRing | None) -> pb.RegisterWorkerReply:
        """A worker's RegisterWorker, checked against the cluster ``token`` (none: any), this
        dispatcher's costscale and protocol versions (``config.version``: another version, or none,
        is refused with one line naming both) and the instances the fleet launched."""
        if token is not None and not token.accepts(req.token):
            return pb.RegisterWorkerReply(accepted=False, message="bad cluster token")
        mismatch = version_mismatch(req.costscale_version, req.protocol_version, self.version, PROTOCOL_VERSION)
        if mismatch is not None:      # after the token: an unauthenticated caller learns no version
            return pb.RegisterWorkerReply(accepted=False, message=mismatch)
        want = self._allowed.get(req.instance_id)
        if want is None:
            return pb.RegisterWorkerReply(accepted=False, message=f"unknown instance {req.instance_id!r}: not launched by this cluster")
        if want != req.instance_type:
            return pb.RegisterWorkerReply(accepted=False, message=f"instance {req.instance_id!r} is a {want}, not {req.instance_type!r}")
        try:
            split_hostport(req.address)
        except ValueError:
            return pb.RegisterWorkerReply(accepted=False, message=f"bad worker address {req.address!r}: expected HOST:PORT")
        if self.on_register is not None:
            self.on_register(req.instance_id, req.instance_type, req.address)
        else:
            self.add_worker_direct(req.instance_id, req.instance_type, req.address)
        return pb.RegisterWorkerReply(accepted=True, message="registered")

    def set_spot_notice_handler(self, handler: SpotNoticeHandler | None) -> None:
        """Who hears a worker's spot interruption notice (the daemon's fleet loop)."""
        self.spot_notice_handler = handler

    def spot_notice(self, req: pb.SpotNoticeRequest, token: TokenRing | None) -> pb.SpotNoticeReply:
        """A worker's Control.SpotNotice (issue #28): checked like a registration (the cluster token,
        an instance the fleet launched), then handed to the fleet loop, which drains the worker before
        EC2 reclaims it and places a replacement (``daemon/aws/spot_wiring.py``)."""
        if token is not None and not token.accepts(req.token):
            return pb.SpotNoticeReply(accepted=False, message="bad cluster token")
        if req.instance_id not in self._allowed and req.instance_id not in self.workers:
            return pb.SpotNoticeReply(accepted=False, message=f"unknown instance {req.instance_id!r}")
        handler = self.spot_notice_handler
        if handler is None:
            return pb.SpotNoticeReply(accepted=False, message="no fleet loop to tell")
        handler(req.instance_id, req.kind or "instance-action", req.reclaim_at_unix or None)
        return pb.SpotNoticeReply(accepted=True, message="noted")

    async def drain(self, instance_id: str, timeout: float = 30.0) -> bool:
        """Stop giving ``instance_id`` queries and wait (up to ``timeout`` s) for its in-flight query
        to finish. True when it is idle (or unknown), False on timeout. The worker stays registered
        until ``forget_instance``."""
        w = self.workers.get(instance_id)
        if w is None:
            return True
        w.draining = True
        self.trigger.kick()
        if w.idle:
            return True
        try:
            await asyncio.wait_for(w.idle_event.wait(), timeout)
            return True
        except asyncio.TimeoutError:
            return False

    def remove_worker(self, w: WorkerState, reason: str) -> None:
        """``w`` leaves: its call's queries go back to the queue, its channel closes."""
        if w.removed:
            return
        w.removed = True
        if self.workers.get(w.instance_id) is w:
            del self.workers[w.instance_id]
        self.calls.abandon_call(w, f"worker {w.instance_id} removed ({reason})")
        w.idle = False
        w.idle_event.set()
        self.rt.spawn(w.client.close())
        self.trigger.kick()

    # -- health ------------------------------------------------------------------------------------
    def start_health(self) -> None:
        """Health checks every ``health_interval_s`` from now on (the dispatcher's start)."""
        self._health_task = asyncio.create_task(self._health_loop())

    def stop_health(self) -> None:
        """No more health checks (the dispatcher stops)."""
        if self._health_task is not None:
            self._health_task.cancel()

    async def close(self) -> None:
        """Every worker's channel closed and the workers forgotten (the dispatcher has stopped)."""
        for w in list(self.workers.values()):
            await w.client.close()
        self.workers.clear()

    async def _health_loop(self) -> None:
        while True:
            await asyncio.sleep(self.health_interval_s)
            ws = list(self.workers.values())
            if ws:
                await asyncio.gather(*(self._check(w) for w in ws), return_exceptions=True)

    async def answers(self, w: WorkerState, timeout: float) -> bool:
        """Whether ``w`` gives a Health reply within ``timeout`` s (the routing round's stall probe)."""
        try:
            await w.client.health(timeout)
            return True
        except Exception:  # noqa: BLE001 - no reply, whatever the reason
            return False

    async def _check(self, w: WorkerState) -> None:
        try:
            asked = self.rt.clock()
            reply = await w.client.health(self.health_timeout_s)
            w.health_failures = 0
            if reply.loaded_variants and asked > w.last_op_at and w.ops_in_flight == 0:
                before = w.loaded
                w.loaded = set(reply.loaded_variants)
                if before != w.loaded:
                    self.trigger.kick()
        except Exception:
            w.health_failures += 1
            if w.health_failures >= self.health_failures:
                self.remove_worker(w, "failed health checks")

    # -- load --------------------------------------------------------------------------------------
    def serving_by_type(self) -> dict[str, int]:
        """Workers taking queries (not draining, parked or removed), counted by instance type."""
        out: dict[str, int] = {}
        for w in self.workers.values():
            if not (w.draining or w.removed):
                out[w.instance_type] = out.get(w.instance_type, 0) + 1
        return out

    def utilization(self, w: WorkerState, now: float | None = None) -> float:
        now = self.rt.clock() if now is None else now
        return ml.busy_fraction(w.busy, now, self.utilization_horizon_s, 1)

    def online_utilization(self, workers: list[WorkerState] | None = None) -> float:
        ws = [w for w in (self.workers.values() if workers is None else workers) if not w.draining]
        now = self.rt.clock()
        return ml.busy_fraction((iv for w in ws for iv in w.busy), now, self.utilization_horizon_s, len(ws))
