"""The worker registry: which workers may receive queries, and in what state each one is.

A worker registers with the cluster token, and only as an instance the fleet loop launched
(:meth:`WorkerRegistry.allow_instance`); health checks every ``health_interval_s`` remove a worker
after ``health_failures`` failures in a row, and its Health reply says which variants it holds. A
worker leaves the routing round when it drains, is parked (:mod:`scaler.parking`: surplus kept warm,
its variants unloaded) or is removed; a query in flight on a removed worker goes back to the head
of the queue (DESIGN invariant 4). Utilization over the last ``utilization_horizon_s`` seconds feeds
getVariant, the model loop and offline throttling (INFaaS §4.1, §5).

The cloud view (:meth:`WorkerRegistry.set_cloud_view`, given by the daemon after each listing of the
managed instances) says which instances may register and which are still booting: Status counts
the pool and its $/hr from it, and admission refuses at once a query nothing serves while nothing
is booting. Until the first view (a dispatcher run without the daemon) nothing is known to boot and
admission does not refuse on that ground.

:class:`WorkerRegistry` is a mixin of :class:`dispatcher.server.Dispatcher`.
Owns: ``workers``, ``_allowed``, ``parked_ids``, ``cloud_view``, ``cloud_pending``, ``_health_task`` (started by ``start``) and the
tunables ``health_interval_s``, ``health_timeout_s``, ``health_failures``, ``utilization_horizon_s``.
Reads: ``clock``, ``_catalog``, ``_loop``, ``_token``, ``worker_security``, ``_spawn`` (server); ``_inflight``
(admission); ``_kick``, ``_requeue`` (routing); ``loaded_on``, ``cfg_model_names``,
``load_variant``, ``unload_variant`` (placement).
"""
from __future__ import annotations

import asyncio
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from config.hostport import split_hostport
from dispatcher import modelless as ml
from dispatcher.proto import costscale_pb2 as pb
from dispatcher.worker_client import WorkerClient
from scaler.cloud import ManagedInstance


#: served-query samples a worker keeps until the model loop takes them (the oldest dropped first)
SAMPLES_KEPT = 4096


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
    #: parked (scaler.parking): surplus kept warm, given no queries, its variants unloaded; it
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


class WorkerRegistry:
    """Registration, health, drain, park/unpark and utilization (see the module docstring)."""

    def _init_workers(self) -> None:
        self.workers: dict[str, WorkerState] = {}
        self.health_interval_s = 1.0
        self.health_timeout_s = 1.0
        self.health_failures = 2
        self.utilization_horizon_s = 2.0
        self._allowed: dict[str, str] = {}
        self.parked_ids: set[str] = set()   # parked instances, registered or not yet
        #: the daemon's last listing: live (pending or running) managed instance -> its type; None
        #: before the first one
        self.cloud_view: dict[str, str] | None = None
        self.cloud_pending: set[str] = set()   # of those, the ones EC2 still lists as pending
        self._health_task: asyncio.Task | None = None
        #: the model each instance serves (the fleet's joint plan, scaler.worker_assignment); an
        #: instance not named serves any model (one model, or a dispatcher without a daemon)
        self.serves: dict[str, str] = {}

    def set_assignment(self, serves: Mapping[str, str]) -> None:
        """Which model each instance serves from now on: its queries of other models stop (a call
        running finishes), and the model it now serves is loaded on it when it is not."""
        moved = [iid for iid, m in serves.items() if self.serves.get(iid) != m]
        self.serves = dict(serves)
        for iid in moved:
            w = self.workers.get(iid)
            if w is not None and not w.removed and not w.parked and w.loaded is not None \
                    and not any(self.variant_model(v) == serves[iid] for v in w.loaded):
                self.ensure_loaded(iid, serves[iid])
        if moved:
            self._kick()

    def serves_model(self, instance_id: str, model: str) -> bool:
        """``instance_id`` may take queries of ``model`` (the assignment; none: any model)."""
        m = self.serves.get(instance_id)
        return m is None or m == model

    def allow_instance(self, instance_id: str, instance_type: str) -> None:
        self._allowed[instance_id] = instance_type

    def set_cloud_view(self, instances: Iterable[ManagedInstance]) -> None:
        """The managed instances as the cloud lists them now (the daemon calls this after each
        listing): live ones may register; a registered worker that is no longer live is forgotten
        (its in-flight query re-dispatched); parked marks of instances gone are dropped."""
        instances = list(instances)
        live = {i.instance_id: i.instance_type for i in instances if i.live}
        self.cloud_view = live
        self.cloud_pending = {i.instance_id for i in instances if i.state == "pending"}
        for iid, itype in live.items():
            self.allow_instance(iid, itype)
        for iid in list(self.workers):
            if iid not in live:
                self.forget_instance(iid)
        self.parked_ids &= set(live)

    def booting(self) -> list[str]:
        """Live managed instances (cloud view) that have not registered yet: workers on their way."""
        return sorted(iid for iid in self.cloud_view or () if iid not in self.workers)

    def pool_view(self) -> Counter[str]:
        """Live instances by type, registered or not: the cloud view's, and registered workers it
        does not list (one added directly, or registered since the last listing)."""
        pool = Counter((self.cloud_view or {}).values())
        pool.update(w.instance_type for iid, w in self.workers.items() if iid not in (self.cloud_view or {}))
        return pool

    def _off_loop(self) -> bool:
        """True when called from a thread other than the dispatcher's event loop."""
        if self._loop is None:
            return False
        try:
            return asyncio.get_running_loop() is not self._loop
        except RuntimeError:
            return True

    def forget_instance(self, instance_id: str) -> None:
        if self._off_loop():
            self._loop.call_soon_threadsafe(self.forget_instance, instance_id)  # type: ignore[union-attr]
            return
        self._allowed.pop(instance_id, None)
        self.parked_ids.discard(instance_id)
        w = self.workers.get(instance_id)
        if w is not None:
            self._remove_worker(w, "instance forgotten")

    def add_worker_direct(self, instance_id: str, instance_type: str, address: str) -> None:
        if self._off_loop():
            self._loop.call_soon_threadsafe(self.add_worker_direct, instance_id, instance_type, address)  # type: ignore[union-attr]
            return
        old = self.workers.get(instance_id)
        if old is not None:
            if old.address == address and old.instance_type == instance_type:
                return
            self._remove_worker(old, "re-registered")
        w = WorkerState(instance_id, instance_type, address, WorkerClient(address, self.worker_security, self._token))
        it = self._catalog.get(instance_type)
        w.hardware = it.hardware if it is not None else "cpu"
        w.idle_event.set()
        if instance_id in self.parked_ids:
            w.parked = w.draining = True
        self.workers[instance_id] = w
        self._kick()

    def register(self, req: pb.RegisterWorkerRequest) -> pb.RegisterWorkerReply:
        if self._token is not None and not self._token.accepts(req.token):
            return pb.RegisterWorkerReply(accepted=False, message="bad cluster token")
        want = self._allowed.get(req.instance_id)
        if want is None:
            return pb.RegisterWorkerReply(accepted=False, message=f"unknown instance {req.instance_id!r}: not launched by this cluster")
        if want != req.instance_type:
            return pb.RegisterWorkerReply(accepted=False, message=f"instance {req.instance_id!r} is a {want}, not {req.instance_type!r}")
        try:
            split_hostport(req.address)
        except ValueError:
            return pb.RegisterWorkerReply(accepted=False, message=f"bad worker address {req.address!r}: expected HOST:PORT")
        self.add_worker_direct(req.instance_id, req.instance_type, req.address)
        return pb.RegisterWorkerReply(accepted=True, message="registered")

    async def drain(self, instance_id: str, timeout: float = 30.0) -> bool:
        """Stop giving ``instance_id`` queries and wait (up to ``timeout`` s) for its in-flight query
        to finish. True when it is idle (or unknown), False on timeout. The worker stays registered
        until ``forget_instance``."""
        w = self.workers.get(instance_id)
        if w is None:
            return True
        w.draining = True
        self._kick()
        if w.idle:
            return True
        try:
            await asyncio.wait_for(w.idle_event.wait(), timeout)
            return True
        except asyncio.TimeoutError:
            return False

    def mark_parked(self, instance_id: str) -> None:
        """Stop giving a (possibly not yet registered) instance queries: it is parked
        (:mod:`scaler.parking`); a running query finishes."""
        self.parked_ids.add(instance_id)
        w = self.workers.get(instance_id)
        if w is not None and not w.removed and not w.parked:
            w.parked_variants = set(self.loaded_on(w))
            w.parked = w.draining = True
            self._kick()

    async def park(self, instance_id: str) -> list[tuple[str, bool, str]]:
        """Park an instance (:meth:`mark_parked`) and unload every variant on it (each unload waits
        for a running query of it). Idempotent: a worker that registered while parked, or got a
        variant since, has it unloaded by the next call. Returns (variant, ok, message) per unload."""
        self.mark_parked(instance_id)
        w = self.workers.get(instance_id)
        if w is None or w.removed:
            return []
        held = sorted(self.loaded_on(w))
        w.parked_variants = (w.parked_variants or set()) | set(held)
        out = []
        for v, r in zip(held, await asyncio.gather(*(self.unload_variant(instance_id, v) for v in held),
                                                   return_exceptions=True)):
            ok, msg = (False, str(r)) if isinstance(r, BaseException) else r
            out.append((v, ok, msg))
        return out

    async def unpark(self, instance_id: str) -> list[tuple[str, bool, str]]:
        """Bring a parked instance back: load what it held when parked (else the config's models),
        then route queries to it again -- also when a load fails or is cut short (the model loop
        and getVariant then place variants on it as on any worker). Returns (variant, ok, message)
        per load."""
        self.parked_ids.discard(instance_id)
        w = self.workers.get(instance_id)
        if w is None or w.removed or not w.parked:
            return []
        want = sorted(w.parked_variants or set(self.cfg_model_names()))
        out = []
        try:
            for v, r in zip(want, await asyncio.gather(*(self.load_variant(instance_id, v, allow_parked=True)
                                                         for v in want), return_exceptions=True)):
                ok, msg = (False, str(r)) if isinstance(r, BaseException) else r
                out.append((v, ok, msg))
        finally:
            if not w.removed and instance_id not in self.parked_ids:   # not parked again meanwhile
                w.parked = w.draining = False
                w.parked_variants = None
                self._kick()
        return out

    def _remove_worker(self, w: WorkerState, reason: str) -> None:
        if w.removed:
            return
        w.removed = True
        if self.workers.get(w.instance_id) is w:
            del self.workers[w.instance_id]
        self._abandon_call(w, f"worker {w.instance_id} removed ({reason})")
        w.idle = False
        w.idle_event.set()
        self._spawn(w.client.close())
        self._kick()

    async def _health_loop(self) -> None:
        while True:
            await asyncio.sleep(self.health_interval_s)
            ws = list(self.workers.values())
            if ws:
                await asyncio.gather(*(self._check(w) for w in ws), return_exceptions=True)

    async def _check(self, w: WorkerState) -> None:
        try:
            asked = self.clock()
            reply = await w.client.health(self.health_timeout_s)
            w.health_failures = 0
            if reply.loaded_variants and asked > w.last_op_at and w.ops_in_flight == 0:
                before = w.loaded
                w.loaded = set(reply.loaded_variants)
                if before != w.loaded:
                    self._kick()
        except Exception:
            w.health_failures += 1
            if w.health_failures >= self.health_failures:
                self._remove_worker(w, "failed health checks")

    def serving_by_type(self) -> dict[str, int]:
        """Workers taking queries (not draining, parked or removed), counted by instance type."""
        out: dict[str, int] = {}
        for w in self.workers.values():
            if not (w.draining or w.removed):
                out[w.instance_type] = out.get(w.instance_type, 0) + 1
        return out

    def utilization(self, w: WorkerState, now: float | None = None) -> float:
        now = self.clock() if now is None else now
        return ml.busy_fraction(w.busy, now, self.utilization_horizon_s, 1)

    def online_utilization(self, workers: list[WorkerState] | None = None) -> float:
        ws = [w for w in (self.workers.values() if workers is None else workers) if not w.draining]
        now = self.clock()
        return ml.busy_fraction((iv for w in ws for iv in w.busy), now, self.utilization_horizon_s, len(ws))
