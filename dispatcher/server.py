"""The live dispatcher: the public ``Inference`` gRPC front end, worker registration, and the query
loop that runs a :class:`dispatcher.policy.Policy` on every event (Kairos §6: a central controller
that predicts latencies, matches queries to instances and calls them over gRPC, one query per
instance at a time).

Events that trigger a matching round: a query arrives, a query completes or fails, a worker joins,
leaves or starts draining. Rounds triggered within one event-loop iteration are coalesced.

Guarantees (DESIGN invariant 4): every accepted query ends with a result or a typed gRPC error —
DEADLINE_EXCEEDED (cannot meet its SLO in ``drop`` mode, or its overall deadline
``query_timeout_s`` passed), RESOURCE_EXHAUSTED (queue full), UNAVAILABLE (its workers kept failing
after ``max_retries`` re-dispatches, or the dispatcher stopped), INVALID_ARGUMENT (malformed). A query
whose worker dies (RPC UNAVAILABLE/CANCELLED, failed health checks, ``forget_instance``) goes back to
the head of the queue. A deadline sweep (one timer over a heap of deadlines) ends each query at its
overall deadline, so nothing hangs.

Each matching round passes the policy at most ``2·n`` of the oldest waiting queries (n = workers
that may receive work), the same bound the Kairos policy documents.
"""
from __future__ import annotations

import asyncio
import heapq
import hmac
import itertools
import math
import time
from collections import Counter, OrderedDict, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, Union

import grpc
import numpy as np
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from config.schema import Config, ModelSpec
from config.hostport import split_hostport
from dispatcher.latency_model import LatencyModel
from dispatcher.policies import infeasible, make_policy
from dispatcher.policy import Policy, QueryView, WorkerView, pick_base_type
from dispatcher.proto import costscale_pb2 as pb, costscale_pb2_grpc as pbg
from config.files import replace_atomic, write_atomic
from dispatcher.proto.tensors import array_to_tensor, tensor_to_array
from dispatcher import modelless as ml
from dispatcher.window import DemandWindow, WindowSnapshot
from dispatcher.worker_client import WorkerClient, is_worker_failure
from config.catalog import InstanceType
from variants.executor import ANY_HARDWARE
from variants.pipeline import generate_and_profile, hardware_classes
from variants.selection import Request as VariantRequest

if TYPE_CHECKING:
    from variants.generator import Variant

SC = grpc.StatusCode
Outcome = Union[pb.SubmitReply, tuple[grpc.StatusCode, str]]
SERVICE_NAME = "costscale.v1.Inference"
_EMPTY_WINDOW = DemandWindow(capacity=1)
#: weight of the newest call in a worker's smoothed call overhead
OVERHEAD_EWMA = 0.1


@dataclass(eq=False)
class _Query:
    query_id: str
    model: ModelSpec
    variant: str
    batch: int
    arrival: float
    qos_ms: float
    deadline: float
    inputs: list
    view: QueryView
    future: asyncio.Future
    key: str = ""
    attempts: int = 0
    gen: int = 0
    dispatched_at: float = 0.0
    offline: bool = False


@dataclass(eq=False)
class WorkerState:
    """One registered worker, as the dispatcher sees it."""

    instance_id: str
    instance_type: str
    address: str
    client: WorkerClient
    idle: bool = True
    busy_until: float = 0.0
    in_flight: str | None = None
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
    samples: list = field(default_factory=list)
    #: smoothed time (ms) a call to this worker takes beyond the service time it reports (network,
    #: (de)serialization): part of how long the worker stays busy, so of the remaining busy time in L
    overhead_ms: float = 0.0


class Dispatcher:
    """See the module docstring. Tunables are plain attributes, settable after construction:
    ``query_timeout_s`` (30), ``max_retries`` (2 re-dispatches), ``health_interval_s`` (1),
    ``health_timeout_s`` (1), ``health_failures`` (2 in a row), ``idempotency_capacity`` (10,000),
    ``xi`` (0.98), ``view_factor`` (2), ``observe_batch`` (32 measurements fed to the latency model
    at once) and ``observe_delay_s`` (0.05: the longest a measurement waits for its batch). The policy built here (none given) gets ``xi`` and
    ``view_factor`` as its ξ and ``max_queue_factor``; a policy passed in keeps its own."""

    def __init__(self, cfg: Config, predictor: LatencyModel, *, clock: Callable[[], float] = time.monotonic,
                 policy: Policy | None = None, base_type: str | None = None, registry=None,
                 models_dir: str | Path | None = None) -> None:
        self.cfg = cfg
        self.predictor = predictor
        self.clock = clock
        self._models = {m.name: m for m in cfg.models}
        self._cfg_models = tuple(m.name for m in cfg.models)
        self._apps: dict[str, ModelSpec] = {}
        for m in cfg.models:
            if m.application and m.application not in self._apps:
                self._apps[m.application] = m
        self.base_type = base_type or self._default_base_type()
        # the policy's tunables (one source: passed to the policy built here)
        self.xi = 0.98
        self.view_factor = 2
        self.policy: Policy = policy or make_policy(cfg.dispatcher.policy, predictor, self.base_type,
                                                    xi=self.xi, max_queue_factor=self.view_factor)
        self.workers: dict[str, WorkerState] = {}
        self.window = DemandWindow()
        #: per model (after routing): the model loop sizes each model's variant instances from its own load
        self.model_windows: dict[str, DemandWindow] = {}
        self.set_catalog(cfg.catalog())
        # model-less API (INFaaS §3.1): the variant registry and what routing knows of it
        self.registry = registry
        self.models_dir = Path(models_dir) if models_dir else None
        self._variant_meta: dict[str, ml.VariantMeta] = {}
        self._variant_path: dict[str, str] = {}
        self._app_models: dict[str, list[str]] = {}
        self._grid_cache: dict[tuple[str, str], tuple[tuple[int, float], ...]] = {}
        self.variant_states: dict[tuple[str, str], object] = {}   # (variant, worker) -> VariantState
        self.offline_threshold = ml.OFFLINE_UTILIZATION_THRESHOLD
        self.offline_chunk = 8
        self.offline_poll_s = 0.2
        self.utilization_horizon_s = 2.0
        self.offline_jobs: dict[str, "OfflineJob"] = {}
        self._loading: dict[tuple[str, str], asyncio.Task] = {}
        self.load_ops = 0
        self.unload_ops = 0
        self.refresh_variants()
        # tunables
        self.query_timeout_s = 30.0
        self.max_retries = 2
        self.health_interval_s = 1.0
        self.health_timeout_s = 1.0
        self.health_failures = 2
        self.idempotency_capacity = 10_000
        # state
        self._allowed: dict[str, str] = {}
        self.parked_ids: set[str] = set()   # parked instances, registered or not yet
        self._queue: dict[str, _Query] = {}
        self._retry: dict[str, _Query] = {}
        self._inflight: dict[str, _Query] = {}
        self._idem: OrderedDict[str, _Query] = OrderedDict()
        self._ids = itertools.count(1)
        self.accepted = 0
        self.served = 0
        self.redispatched = 0
        self.rejected: Counter[str] = Counter()
        self._recent: deque[float] = deque(maxlen=10_000)
        self._token: str | None = None
        self._server: grpc.aio.Server | None = None
        self._health: health.aio.HealthServicer | None = None
        self._health_task: asyncio.Task | None = None
        self._tasks: set[asyncio.Task] = set()
        self._kick_pending = False
        # a round run by a coroutine that serves what it dispatches itself: the query or worker it
        # catches, and the dispatch caught (see _round_catching)
        self._catch: _Query | WorkerState | None = None
        self._caught: tuple[_Query, WorkerState, int] | None = None
        self.observe_batch = 32
        self.observe_delay_s = 0.05
        self._pending_obs: list[tuple[str, str, int, float]] = []
        self._obs_timer: asyncio.TimerHandle | None = None
        # overall deadlines: a heap swept by one timer (not one timer per query)
        self._deadlines: list[tuple[float, int, str]] = []
        self._deadline_timer: asyncio.TimerHandle | None = None
        self._deadline_at = float("inf")
        self._stopping = False
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- configuration -----------------------------------------------------------------------------
    def _default_base_type(self) -> str:
        """Before the first plan: :func:`dispatcher.policy.pick_base_type` over the configured types."""
        m = self.cfg.models[0]
        b = float(min(m.max_batch, 1000))
        return pick_base_type([t.type for t in self.cfg.instance_types],
                              lambda t: self.predictor.predict_ms(m.profile_name, t, b))

    def set_catalog(self, catalog: Mapping[str, InstanceType]) -> None:
        """The allowed instance types and their prices (at start and on a config reload)."""
        self._catalog = dict(catalog)
        self._prices = {t: it.price_per_hour for t, it in self._catalog.items()}

    def set_base_type(self, t: str) -> None:
        self.base_type = t
        if hasattr(self.policy, "base_type"):
            self.policy.base_type = t  # type: ignore[attr-defined]
        self._kick()

    def _read_token(self) -> str | None:
        return self.cfg.dispatcher.token()

    # -- lifecycle ---------------------------------------------------------------------------------
    async def start(self, listen: str | None = None) -> int:
        self._loop = asyncio.get_running_loop()
        self._token = self._read_token()
        limit = self.cfg.dispatcher.max_payload_bytes + 1024 * 1024
        server = grpc.aio.server(options=[("grpc.max_receive_message_length", limit),
                                          ("grpc.max_send_message_length", 64 * 1024 * 1024),
                                          ("grpc.so_reuseport", 0)])
        pbg.add_InferenceServicer_to_server(_InferenceServicer(self), server)
        pbg.add_ControlServicer_to_server(_ControlServicer(self), server)
        self._health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        port = server.add_insecure_port(listen or self.cfg.dispatcher.listen)
        if port == 0:
            raise OSError(f"cannot listen on {listen or self.cfg.dispatcher.listen}")
        await server.start()
        self._server = server
        await self._health.set("", health_pb2.HealthCheckResponse.SERVING)
        await self._health.set(SERVICE_NAME, health_pb2.HealthCheckResponse.SERVING)
        self._health_task = asyncio.create_task(self._health_loop())
        return port

    async def stop(self, grace: float = 5.0) -> None:
        """Refuse new queries, let queued and in-flight ones finish within ``grace`` seconds, end the
        rest with UNAVAILABLE, then shut the server and the worker channels."""
        self._stopping = True
        end = self.clock() + grace
        if self._health is not None:
            await self._health.enter_graceful_shutdown()
        while (self._queue or self._retry or self._inflight) and self.clock() < end:
            await asyncio.sleep(0.01)
        for q in list(self._queue.values()) + list(self._retry.values()) + list(self._inflight.values()):
            self._finish(q, (SC.UNAVAILABLE, "dispatcher stopped before the query was served"))
        self._queue.clear()
        self._retry.clear()
        self._inflight.clear()
        self._deadlines.clear()
        self.flush_observations()
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
            self._deadline_timer = None
        if self._health_task is not None:
            self._health_task.cancel()
        if self._server is not None:
            await self._server.stop(max(0.0, min(1.0, end - self.clock())))
        for t in list(self._tasks):
            t.cancel()
        for w in list(self.workers.values()):
            await w.client.close()
        self.workers.clear()

    # -- workers -----------------------------------------------------------------------------------
    def allow_instance(self, instance_id: str, instance_type: str) -> None:
        self._allowed[instance_id] = instance_type

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
        w = WorkerState(instance_id, instance_type, address, WorkerClient(address))
        it = self._catalog.get(instance_type)
        w.hardware = it.hardware if it is not None else "cpu"
        w.idle_event.set()
        if instance_id in self.parked_ids:
            w.parked = w.draining = True
        self.workers[instance_id] = w
        self._kick()

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
        if w.in_flight is not None:
            q = self._inflight.pop(w.in_flight, None)
            w.in_flight = None
            if q is not None and not q.future.done():
                self._requeue(q, f"worker {w.instance_id} removed ({reason})")
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

    def register(self, req: pb.RegisterWorkerRequest) -> pb.RegisterWorkerReply:
        if self._token is not None and not hmac.compare_digest(req.token.encode(), self._token.encode()):
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

    # -- admission -------------------------------------------------------------------------------
    def _reject(self, code: grpc.StatusCode, msg: str) -> tuple[grpc.StatusCode, str]:
        self.rejected[code.name] += 1
        return code, msg

    def _validate(self, r: pb.SubmitRequest) -> tuple[ModelSpec, int, float, str, ml.Route | None] | tuple[grpc.StatusCode, str]:
        """(model, batch, SLO ms, variant, getVariant's route or None) or an error (code, message).
        Starts nothing: a route that needs a load is loaded by the caller once the query is admitted."""
        variant = r.variant
        choice: ml.Route | None = None
        if variant and variant not in self._variant_meta:
            return SC.NOT_FOUND, f"unknown variant {variant!r}"
        if variant and r.model and self._variant_meta[variant].model != r.model:
            return SC.INVALID_ARGUMENT, f"variant {variant!r} is not a variant of model {r.model!r}"
        if variant and not r.model:
            m = self._models.get(self._variant_meta[variant].model)
            if m is None:
                return SC.NOT_FOUND, f"model of variant {variant!r} is not registered"
        elif r.model:
            m = self._models.get(r.model)
            if m is None:
                return SC.INVALID_ARGUMENT, f"unknown model {r.model!r} (known: {', '.join(sorted(self._models))})"
        elif r.application:
            m = self._apps.get(r.application)
            if m is None:
                return SC.NOT_FOUND, f"unknown application {r.application!r}"
        else:
            return SC.INVALID_ARGUMENT, "give model or application"
        batch = int(r.batch_size)
        if batch < 0:
            return SC.INVALID_ARGUMENT, f"batch_size must be >= 1, got {batch}"
        if batch == 0:
            if not r.inputs:
                return SC.INVALID_ARGUMENT, "give batch_size or inputs"
            shape = list(r.inputs[0].shape)
            batch = int(shape[0]) if shape else 1
            if batch <= 0:
                return SC.INVALID_ARGUMENT, "inputs have an empty batch dimension"
        if batch > m.max_batch:
            return SC.INVALID_ARGUMENT, f"batch_size {batch} exceeds max_batch {m.max_batch} of model {m.name!r}"
        size = sum(len(t.data) for t in r.inputs)
        if size > self.cfg.dispatcher.max_payload_bytes:
            return SC.INVALID_ARGUMENT, f"payload of {size} bytes exceeds max_payload_bytes {self.cfg.dispatcher.max_payload_bytes}"
        slo = float(r.latency_slo_ms)
        if not math.isfinite(slo) or slo < 0:
            return SC.INVALID_ARGUMENT, f"latency_slo_ms must be >= 0, got {r.latency_slo_ms}"
        acc = float(r.min_accuracy)
        if not math.isfinite(acc) or acc < 0 or acc > 1:
            return SC.INVALID_ARGUMENT, f"min_accuracy must be in [0, 1], got {r.min_accuracy}"
        if not variant and (r.application or acc > 0) and self._variant_meta:
            # model-less query (INFaaS §4.1 getVariant): pick the variant and where it runs
            req = VariantRequest(model=r.model or None, latency_slo_ms=slo if slo > 0 else float("inf"),
                                 min_accuracy=acc, batch=batch)
            metas = [self._variant_meta[n] for n in self._variants_for(r.application, r.model)]
            try:
                choice = ml.route(req, metas, self._route_workers(), self._grid, self.variant_states)  # type: ignore[arg-type]
            except ml.RouteError as exc:
                return getattr(SC, exc.code, SC.INVALID_ARGUMENT), str(exc)
            variant = choice.variant
            m = self._models.get(self._variant_meta[variant].model, m)
        return m, batch, (slo if slo > 0 else m.qos_ms), variant, choice

    def _start_load(self, choice: ml.Route | None) -> None:
        """Load the routed variant on its worker when getVariant chose an Inactive one."""
        if choice is not None and choice.needs_load and choice.worker is not None:
            self.ensure_loaded(choice.worker, choice.variant)

    def _live_views(self) -> list[WorkerView]:
        return [WorkerView(w.instance_id, w.instance_type, w.busy_until, w.idle)
                for w in self.workers.values() if not w.draining]

    async def submit(self, r: pb.SubmitRequest) -> Outcome:
        """Admit one query and await its outcome (the servicer turns an error tuple into a status)."""
        if self._stopping:
            return self._reject(SC.UNAVAILABLE, "dispatcher is shutting down")
        key = r.idempotency_key
        if key:
            prior = self._idem.get(key)
            if prior is not None:
                self._idem.move_to_end(key)
                return await asyncio.shield(prior.future)
        v = self._validate(r)
        if isinstance(v[0], grpc.StatusCode):
            return self._reject(v[0], v[1])  # type: ignore[arg-type]
        m, batch, qos, variant, choice = v  # type: ignore[misc]
        if len(self._queue) + len(self._retry) >= self.cfg.dispatcher.queue_limit:
            return self._reject(SC.RESOURCE_EXHAUSTED, f"queue full ({self.cfg.dispatcher.queue_limit} waiting)")
        now = self.clock()
        qid = f"q{next(self._ids)}"
        view = QueryView(qid, m.profile_name, batch, now, qos)
        self.window.record(batch, now)
        mw = self.model_windows.get(m.name)
        if mw is None:
            mw = self.model_windows[m.name] = DemandWindow(capacity=self.window.capacity)
        mw.record(batch, now)
        if self.cfg.dispatcher.on_deadline == "drop":
            if infeasible([view], self._live_views(), self.predictor, now, self.xi):
                return self._reject(SC.DEADLINE_EXCEEDED, f"batch {batch} of {m.name!r} cannot meet its {qos:g} ms SLO on any worker")
        self._start_load(choice)
        loop = asyncio.get_running_loop()
        q = _Query(qid, m, variant, batch, now, qos, now + self.query_timeout_s, list(r.inputs), view,
                   loop.create_future(), key)
        if key:
            self._idem[key] = q
            while len(self._idem) > self.idempotency_capacity:
                self._idem.popitem(last=False)
        self.accepted += 1
        self._queue[qid] = q
        self._arm_deadline(q)
        if key:
            # a retry with the same key may collect the answer: the client going away must not
            # cancel the query's future
            self._kick()
            return await asyncio.shield(q.future)
        # the arrival event's matching round, run now: when it sends this query to a worker, this
        # coroutine makes the worker call itself (no task and no wake-up per query)
        caught = self._round_catching(q)
        if caught is not None:
            _, w, gen = caught
            try:
                await self._run(q, w, gen)
            except asyncio.CancelledError:
                # the client went away mid-call: free the worker; nobody can collect the answer
                self._release(w, qid)
                self._drop_cancelled(q)
                self._kick()
                raise
            self._completed(w)
        if q.future.done():
            return q.future.result()
        try:
            return await q.future
        except asyncio.CancelledError:
            # the client went away and nobody else can collect the answer: a waiting query leaves
            # the queue; one in flight finishes on its worker and its result is discarded
            self._drop_cancelled(q)
            raise

    def _drop_cancelled(self, q: _Query) -> None:
        qid = q.query_id
        if self._queue.pop(qid, None) or self._retry.pop(qid, None) or self._inflight.pop(qid, None):
            q.gen += 1
            self.rejected[SC.CANCELLED.name] += 1
            q.inputs = []

    def _arm_deadline(self, q: _Query) -> None:
        # the heap holds (deadline, seq, query id) only: finished queries are not kept alive by it
        heapq.heappush(self._deadlines, (q.deadline, next(self._ids), q.query_id))
        if q.deadline < self._deadline_at:
            self._schedule_sweep()

    def _schedule_sweep(self) -> None:
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
            self._deadline_timer = None
        self._deadline_at = self._deadlines[0][0] if self._deadlines else float("inf")
        if self._deadlines and self._loop is not None:
            delay = max(self._deadline_at - self.clock(), 0.001)
            self._deadline_timer = self._loop.call_later(delay, self._sweep_deadlines)

    def _sweep_deadlines(self) -> None:
        """End every query whose overall deadline has passed (DEADLINE_EXCEEDED), then re-arm."""
        self._deadline_timer = None
        now = self.clock()
        while self._deadlines and self._deadlines[0][0] <= now:
            qid = heapq.heappop(self._deadlines)[2]
            q = self._queue.get(qid) or self._retry.get(qid) or self._inflight.get(qid)
            if q is not None:
                self._expire(q)
        self._schedule_sweep()

    # -- the query loop ----------------------------------------------------------------------------
    def _kick(self) -> None:
        if self._kick_pending or self._loop is None:
            return
        self._kick_pending = True
        self._loop.call_soon(self._round)

    def _round(self) -> None:
        self._kick_pending = False
        if not (self._queue or self._retry):
            return
        live = [w for w in self.workers.values() if not w.draining]
        if not any(w.idle for w in live):
            return
        now = self.clock()
        k = self.view_factor * len(live)
        qs = list(itertools.islice(itertools.chain(self._retry.values(), self._queue.values()), k))
        if self.cfg.dispatcher.on_deadline == "drop":
            wviews = [WorkerView(w.instance_id, w.instance_type, w.busy_until, w.idle) for w in live]
            bad = infeasible([q.view for q in qs], wviews, self.predictor, now, self.xi)
            if bad:
                for qid in bad:
                    q = self._retry.pop(qid, None) or self._queue.pop(qid)
                    self._finish(q, (SC.DEADLINE_EXCEEDED, f"waited {1000 * (now - q.arrival):.1f} ms: can no longer meet its {q.qos_ms:g} ms SLO"))
                badset = set(bad)
                qs = [q for q in qs if q.query_id not in badset]
        if not qs:
            if self._queue or self._retry:
                self._kick()
            return
        # A variant's queries go only to workers where it is loaded (INFaaS §3.2): one matching
        # round per group of queries with the same eligible workers (usually a single group).
        key0 = self._group_key(qs[0])
        groups: dict[str, list[_Query]] = {key0: qs}
        if any(self._group_key(q) != key0 for q in qs):
            groups = {}
            for q in qs:
                groups.setdefault(self._group_key(q), []).append(q)
        taken: set[str] = set()
        for gkey, gqs in groups.items():
            gw = [WorkerView(w.instance_id, w.instance_type, w.busy_until, w.idle and w.instance_id not in taken)
                  for w in live if self._eligible(w, gkey)]
            if not any(x.idle for x in gw):
                continue
            for a in self.policy.match([q.view for q in gqs], gw, now):
                w = self.workers.get(a.worker_id)
                q = self._retry.pop(a.query_id, None) or self._queue.pop(a.query_id, None)
                if q is None:
                    continue
                if w is None or not w.idle or w.draining or w.removed or not self._eligible(w, gkey):
                    self._retry[q.query_id] = q   # policy broke the contract: keep it queued
                    continue
                taken.add(w.instance_id)
                self._dispatch(q, w, now)

    def _dispatch(self, q: _Query, w: WorkerState, now: float) -> None:
        pred = self.predictor.predict_ms(q.model.profile_name, w.instance_type, q.batch)
        w.idle = False
        w.idle_event.clear()
        w.in_flight = q.query_id
        w.busy_until = now + (pred + w.overhead_ms) / 1000.0
        q.dispatched_at = now
        q.gen += 1
        self._inflight[q.query_id] = q
        if self._catch is q or self._catch is w:
            self._caught = (q, w, q.gen)    # the coroutine running this round serves it itself
        else:
            self._spawn(self._serve(q, w, q.gen))

    def _round_catching(self, target: _Query | WorkerState) -> tuple[_Query, WorkerState, int] | None:
        """A matching round whose dispatch of ``target`` (the caller's own query, or the worker
        whose task runs the round) comes back to the caller instead of starting a task."""
        self._catch, self._caught = target, None
        try:
            self._round()
        finally:
            self._catch = None
        caught, self._caught = self._caught, None
        return caught

    async def _serve(self, q: _Query, w: WorkerState, gen: int) -> None:
        """Serve ``q`` on ``w``, then run the matching round for the completion event at once
        (Kairos §5.1: a round at each completion); when that round gives ``w`` its next query, serve
        it in this same task (no task per query under load)."""
        while True:
            await self._run(q, w, gen)
            nxt = self._completed(w, take_next=True)
            if nxt is None:
                return
            q, _, gen = nxt

    def _completed(self, w: WorkerState, take_next: bool = False) -> tuple[_Query, WorkerState, int] | None:
        """The completion event on ``w``: its matching round, now. With ``take_next`` (the caller
        is ``w``'s serving task) a query the round gives ``w`` is returned instead of spawned."""
        if w.removed or self._stopping or self._loop is None:
            self._kick()
            return None
        if take_next:
            return self._round_catching(w)
        self._round()
        return None

    def _spawn(self, coro) -> None:  # type: ignore[no-untyped-def]
        t = (self._loop or asyncio.get_running_loop()).create_task(coro)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    def _release(self, w: WorkerState, qid: str) -> None:
        if w.in_flight == qid:
            w.in_flight = None
        if not w.removed:
            w.idle = True
            w.busy_until = self.clock()
            w.idle_event.set()

    async def _run(self, q: _Query, w: WorkerState, gen: int) -> None:
        req = pb.InferRequest(query_id=q.query_id, model=q.model.name, variant=q.variant, batch_size=q.batch,
                              inputs=q.inputs)
        code: grpc.StatusCode | None = None
        details = ""
        reply: pb.InferReply | None = None
        try:
            reply = await w.client.infer(req, q.deadline - self.clock())
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise
            code, details = SC.CANCELLED, "worker channel closed"
        except grpc.aio.AioRpcError as exc:
            code, details = exc.code(), exc.details() or ""
        except Exception as exc:  # noqa: BLE001 - any client failure is a worker failure
            code, details = SC.UNKNOWN, repr(exc)
        now = self.clock()
        self._release(w, q.query_id)
        current = q.gen == gen and not q.future.done()
        if current:
            self._inflight.pop(q.query_id, None)
        if reply is not None:
            w.served += 1
            service_ms = reply.service_ms if reply.service_ms > 0 else 1000.0 * (now - q.dispatched_at)
            if not q.offline:
                w.busy.append((q.dispatched_at, now))
                # one query per worker at a time: end times only increase, so what ended before
                # the utilization horizon is at the left
                lo = now - self.utilization_horizon_s
                while w.busy and w.busy[0][1] < lo:
                    w.busy.popleft()
            w.samples.append((reply.variant or q.variant or q.model.name, q.batch, service_ms, q.offline))
            if reply.service_ms > 0:
                extra = max(1000.0 * (now - q.dispatched_at) - service_ms, 0.0)
                w.overhead_ms += OVERHEAD_EWMA * (extra - w.overhead_ms)
            self._observe(q.model.profile_name, w.instance_type, q.batch, service_ms)
            if current:
                total = 1000.0 * (now - q.arrival)
                self._finish(q, pb.SubmitReply(
                    outputs=reply.outputs, model=q.model.name, variant=reply.variant or q.variant,
                    instance_id=w.instance_id, instance_type=w.instance_type,
                    queue_ms=1000.0 * (q.dispatched_at - q.arrival), service_ms=service_ms, total_ms=total,
                    slo_met=total <= q.qos_ms, provider=reply.provider))
        else:
            if w.removed or is_worker_failure(code):
                self._remove_worker(w, f"Infer failed: {code.name if code else '?'} {details}")
                if current:
                    self._requeue(q, f"worker {w.instance_id} failed ({code.name if code else '?'})")
            elif current:
                if code == SC.DEADLINE_EXCEEDED:
                    self._finish(q, (SC.DEADLINE_EXCEEDED, f"no result within {self.query_timeout_s:g} s"))
                elif code == SC.INVALID_ARGUMENT:
                    self._finish(q, (SC.INVALID_ARGUMENT, f"worker rejected the query: {details}"))
                elif code == SC.NOT_FOUND:
                    # the worker does not hold what we routed (an unload raced with this query):
                    # it is authoritative, so stop routing that variant there and try elsewhere
                    gone = {q.variant} if q.variant else {v for v in self.loaded_on(w) if self.variant_model(v) == q.model.name}
                    w.loaded = self.loaded_on(w) - gone
                    self._requeue(q, f"worker {w.instance_id} does not hold {q.variant or q.model.name}: {details}")
                else:
                    self._requeue(q, f"worker {w.instance_id} returned {code.name if code else '?'}: {details}")

    def _observe(self, model: str, instance_type: str, batch: int, service_ms: float) -> None:
        """Feed a measured service time to the latency model, in batches of ``observe_batch`` (or
        after ``observe_delay_s``): the model learns within milliseconds, and the per-query path
        stays an append."""
        self._pending_obs.append((model, instance_type, batch, service_ms))
        if len(self._pending_obs) >= self.observe_batch:
            self.flush_observations()
        elif self._obs_timer is None and self._loop is not None:
            self._obs_timer = self._loop.call_later(self.observe_delay_s, self.flush_observations)

    def flush_observations(self) -> None:
        if self._obs_timer is not None:
            self._obs_timer.cancel()
            self._obs_timer = None
        pending, self._pending_obs = self._pending_obs, []
        observe = self.predictor.observe
        for o in pending:
            observe(*o)

    def _requeue(self, q: _Query, reason: str) -> None:
        q.attempts += 1
        q.gen += 1
        self._inflight.pop(q.query_id, None)
        if q.attempts > self.max_retries:
            self._finish(q, (SC.UNAVAILABLE, f"gave up after {q.attempts} attempts: {reason}"))
            return
        self.redispatched += 1
        self._retry[q.query_id] = q
        self._kick()

    def _expire(self, q: _Query) -> None:
        if q.future.done():
            return
        self._queue.pop(q.query_id, None)
        self._retry.pop(q.query_id, None)
        self._inflight.pop(q.query_id, None)
        q.gen += 1
        self._finish(q, (SC.DEADLINE_EXCEEDED, f"no result within {self.query_timeout_s:g} s"))

    def _finish(self, q: _Query, outcome: Outcome) -> None:
        if q.future.done():
            return
        q.inputs = []          # the payload is not needed any more (an idempotency entry may keep q)
        q.future.set_result(outcome)
        if isinstance(outcome, tuple):
            self.rejected[outcome[0].name] += 1
        else:
            self.served += 1
            self._recent.append(outcome.total_ms)

    # -- model-less API: registry, routing, placement (INFaaS §3-4) ----------------------------------
    def refresh_variants(self) -> None:
        """Reload what routing knows from the registry (after a registration or a generation)."""
        self._grid_cache.clear()
        if self.registry is None:
            return
        metas: dict[str, ml.VariantMeta] = {}
        paths: dict[str, str] = {}
        apps: dict[str, list[str]] = {}
        for rm in self.registry.models():
            if rm.name not in self._models:
                self._models[rm.name] = ModelSpec(name=rm.name, onnx=rm.onnx_path, qos_ms=rm.qos_ms,
                                                  max_batch=rm.max_batch, profile=rm.profile,
                                                  application=rm.application)
            apps.setdefault(rm.application, []).append(rm.name)
            if rm.application not in self._apps:
                self._apps[rm.application] = self._models[rm.name]
        variants = self.registry.variants()
        profs = {v.name: self.registry.profiles_of(v.name) for v in variants}
        for v in variants:
            m = self._models.get(v.model)
            prof = profs[v.name]
            load_ms = min((p.load_ms for p in prof), default=0.0)
            if v.name == v.model:
                speed = 1.0
            else:
                speed = _speed_factor(prof, profs[v.model] if v.model in profs else self.registry.profiles_of(v.model))
            metas[v.name] = ml.VariantMeta(v.name, v.model, v.hardware, v.accuracy,
                                           v.tuned_batch or (m.max_batch if m else 1), load_ms, speed)
            paths[v.name] = str(v.path)
        self._variant_meta, self._variant_path, self._app_models = metas, paths, apps

    def variant_model(self, variant: str) -> str:
        meta = self._variant_meta.get(variant)
        return meta.model if meta is not None else variant

    def _variants_for(self, application: str, model: str) -> list[str]:
        models = [model] if model else self._app_models.get(application, [])
        return sorted(n for n, v in self._variant_meta.items() if v.model in models)

    def _fastest_type(self, pkey: str, hardware: str) -> str | None:
        types = [t for t, it in self._catalog.items() if it.hardware == hardware]
        if not types:
            return None
        return min(types, key=lambda t: (self.predictor.predict_ms(pkey, t, 1.0), t))

    def speed_factor(self, variant: str) -> float:
        """Relative speed of a variant against its model's base variant (computed by
        :meth:`refresh_variants`; 1 for an unknown variant)."""
        meta = self._variant_meta.get(variant)
        return meta.speed_factor if meta is not None else 1.0

    def _grid(self, variant: str, hardware: str) -> tuple[tuple[int, float], ...]:
        """(batch, ms) profile of ``variant`` on the fastest allowed type of ``hardware``."""
        key = (variant, hardware)
        got = self._grid_cache.get(key)
        if got is None:
            meta = self._variant_meta.get(variant)
            m = self._models.get(meta.model) if meta else None
            t = self._fastest_type(m.profile_name, hardware) if m else None
            if m is None or t is None:
                got = ()
            else:
                f = self.speed_factor(variant)
                top = max(1, min(m.max_batch, 1024))
                bs = sorted({1 << i for i in range(11) if (1 << i) <= top} | {top})
                got = tuple((b, f * self.predictor.predict_ms(m.profile_name, t, float(b))) for b in bs)
            self._grid_cache[key] = got
        return got

    def utilization(self, w: WorkerState, now: float | None = None) -> float:
        now = self.clock() if now is None else now
        return ml.busy_fraction(w.busy, now, self.utilization_horizon_s, 1)

    def online_utilization(self, workers: list[WorkerState] | None = None) -> float:
        ws = [w for w in (self.workers.values() if workers is None else workers) if not w.draining]
        now = self.clock()
        return ml.busy_fraction((iv for w in ws for iv in w.busy), now, self.utilization_horizon_s, len(ws))

    def loaded_on(self, w: WorkerState) -> set[str]:
        return set(w.loaded) if w.loaded is not None else set(self.cfg_model_names())

    def cfg_model_names(self) -> list[str]:
        return list(self._cfg_models)

    def _route_workers(self) -> list[ml.RouteWorker]:
        now = self.clock()
        return [ml.RouteWorker(w.instance_id, w.hardware, w.instance_type, self.utilization(w, now),
                               frozenset(self.loaded_on(w)))
                for w in self.workers.values() if not w.draining and not w.removed]

    def _group_key(self, q: _Query) -> str:
        return "v:" + q.variant if q.variant else "m:" + q.model.name

    def _eligible(self, w: WorkerState, gkey: str) -> bool:
        if w.loaded is None:  # not reported yet: it serves the config's models
            return gkey[:2] == "m:" or gkey[2:] in self._cfg_models
        kind, name = gkey[:2], gkey[2:]
        if kind == "v:":
            return name in w.loaded
        return any(self.variant_model(x) == name for x in w.loaded)

    def _variant_request(self, variant: str) -> pb.VariantRequest:
        model = self.variant_model(variant)
        path = self._variant_path.get(variant, "")
        spec = self._models[model].onnx if variant == model and model in self._models else path
        speed = self.speed_factor(variant)
        if spec and not spec.startswith("builtin:") and Path(spec).is_file() and Path(spec).stat().st_size < 32 << 20:
            return pb.VariantRequest(model=model, variant=variant, onnx=Path(spec).read_bytes(), speed_factor=speed)
        return pb.VariantRequest(model=model, variant=variant, onnx_path=spec, speed_factor=speed)

    def ensure_loaded(self, instance_id: str, variant: str) -> asyncio.Task | None:
        """Start loading ``variant`` on a worker (once); queued queries of it wait for the load."""
        w = self.workers.get(instance_id)
        if w is None or variant in self.loaded_on(w):
            return None
        key = (variant, instance_id)
        task = self._loading.get(key)
        if task is None:
            task = (self._loop or asyncio.get_running_loop()).create_task(self.load_variant(instance_id, variant))
            self._loading[key] = task
            self._tasks.add(task)
            task.add_done_callback(lambda t: (self._loading.pop(key, None), self._tasks.discard(t)))
        return task

    async def load_variant(self, instance_id: str, variant: str, allow_parked: bool = False) -> tuple[bool, str]:
        """Worker.LoadVariant; on success the dispatcher routes the variant's queries there. A
        parked worker is refused (only :meth:`unpark` loads onto it)."""
        w = self.workers.get(instance_id)
        if w is None:
            return False, f"unknown worker {instance_id}"
        if w.parked and not allow_parked:
            return False, f"worker {instance_id} is parked"
        w.ops_in_flight += 1
        try:
            req = await asyncio.to_thread(self._variant_request, variant)
            reply = await w.client.load_variant(req, timeout=60.0)
        except Exception as exc:  # noqa: BLE001 - a failed load leaves placement unchanged
            return False, f"LoadVariant {variant} on {instance_id}: {exc}"
        finally:
            w.ops_in_flight -= 1
            w.last_op_at = self.clock()
        if not reply.ok:
            return False, reply.message
        w.loaded = self.loaded_on(w) | {variant}
        self.load_ops += 1
        self._kick()
        return True, reply.message

    async def unload_variant(self, instance_id: str, variant: str) -> tuple[bool, str]:
        """Stop routing ``variant`` to the worker first, then Worker.UnloadVariant (the worker
        finishes a running query of it before it unloads). Health replies that were asked before
        the unload finished do not bring the variant back."""
        w = self.workers.get(instance_id)
        if w is None:
            return False, f"unknown worker {instance_id}"
        w.loaded = self.loaded_on(w) - {variant}
        self.variant_states.pop((variant, instance_id), None)
        w.ops_in_flight += 1
        try:
            reply = await w.client.unload_variant(
                pb.VariantRequest(model=self.variant_model(variant), variant=variant), timeout=30.0)
        except Exception as exc:  # noqa: BLE001
            return False, f"UnloadVariant {variant} on {instance_id}: {exc}"
        finally:
            w.ops_in_flight -= 1
            w.last_op_at = self.clock()
        self.unload_ops += 1
        self._kick()
        return bool(reply.ok), reply.message

    def take_samples(self) -> dict[str, list]:
        """Per worker: (variant, batch, service_ms, offline) served since the last call."""
        self.flush_observations()
        out: dict[str, list] = {}
        for iid, w in self.workers.items():
            out[iid], w.samples = w.samples, []
        return out

    def variant_info(self, name: str, rows: Mapping[str, Variant] | None = None) -> pb.VariantInfo:
        """What ListVariants says of ``name``; ``rows``: registry rows by name, fetched once by the
        caller (without it, one registry lookup)."""
        if rows is not None:
            v = rows.get(name)
        else:
            v = self.registry.variant(name) if self.registry is not None else None
        meta = self._variant_meta.get(name)
        state = "Inactive"
        instances = sorted(w.instance_id for w in self.workers.values() if name in self.loaded_on(w))
        if instances:
            states = {str(getattr(self.variant_states.get((name, i)), "value", "active")) for i in instances}
            state = "Overloaded" if "overloaded" in states else ("Interfered" if "interfered" in states else "Active")
        model = self._models.get(meta.model) if meta else None
        return pb.VariantInfo(
            name=name, model=meta.model if meta else "", application=(model.application or model.name) if model else "",
            precision=v.precision if v else "fp32", hardware=v.hardware if v else ANY_HARDWARE, provider=v.provider if v else "",
            tuned_batch=v.tuned_batch if v else 0, accuracy=v.accuracy if v else 1.0,
            accuracy_estimated=v.accuracy_estimated if v else True, state=state, instances=instances)

    def list_variants(self, model: str = "", application: str = "") -> list[pb.VariantInfo]:
        names = sorted(n for n, m in self._variant_meta.items()
                       if (not model or m.model == model)
                       and (not application or m.model in self._app_models.get(application, [])))
        rows = {v.name: v for v in self.registry.variants(model=model or None)} if self.registry is not None else {}
        return [self.variant_info(n, rows) for n in names]

    async def register_model(self, r: pb.RegisterModelRequest) -> pb.RegisterModelReply | tuple[grpc.StatusCode, str]:
        """INFaaS §3.1 register_model: store the ONNX file, generate and profile its variants."""
        if self.registry is None or self.models_dir is None:
            return SC.UNIMPLEMENTED, "this dispatcher runs without a variant registry"
        from variants.builtin_models import ModelError, resolve_model
        from variants.registry import RegisteredModel

        name, app = r.name.strip(), (r.application.strip() or r.name.strip())
        try:
            ModelSpec(name=name or "?", qos_ms=r.qos_ms if r.qos_ms > 0 else 1.0)
        except Exception:
            return SC.INVALID_ARGUMENT, f"bad model name {r.name!r}: 1-63 letters, digits, '.', '_' or '-'"
        if name in self.cfg_model_names():
            return SC.ALREADY_EXISTS, f"model {name!r} comes from the config"
        if r.qos_ms < 0 or r.max_batch < 0:
            return SC.INVALID_ARGUMENT, "qos_ms and max_batch must be >= 0"
        if bool(r.onnx) == bool(r.onnx_path):
            return SC.INVALID_ARGUMENT, "give exactly one of onnx (bytes) and onnx_path"
        out_dir = self.models_dir / name
        try:
            if r.onnx:
                src = out_dir / "source.onnx"
                await asyncio.to_thread(write_atomic, src, r.onnx)
            else:
                src = Path(r.onnx_path)
            src = await asyncio.to_thread(resolve_model, str(src), self.models_dir)
        except ModelError as exc:
            return SC.INVALID_ARGUMENT, str(exc)
        val = Path(r.validation_path) if r.validation_path else None
        if val is not None and not val.is_file():
            return SC.INVALID_ARGUMENT, f"{val}: validation set not found"
        hws = hardware_classes(self._catalog) or ("cpu",)
        rm = RegisteredModel(name=name, application=app, onnx_path=str(src), qos_ms=float(r.qos_ms or 1000.0),
                             max_batch=int(r.max_batch or 64), profile=name)
        try:
            variants = await asyncio.to_thread(generate_and_profile, src, rm, out_dir, hws, val, self.registry)
        except ValueError as exc:
            return SC.INVALID_ARGUMENT, str(exc).splitlines()[0]
        except Exception as exc:  # noqa: BLE001 - a model we cannot convert is the caller's problem
            return SC.INVALID_ARGUMENT, f"cannot generate variants of {name!r}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
        self._models.pop(name, None)
        self.refresh_variants()
        rows = {v.name: v for v in variants}
        return pb.RegisterModelReply(name=name, variants=[self.variant_info(v.name, rows) for v in variants])

    # -- offline jobs (INFaaS §3.1 offline_query, §5) ----------------------------------------------------
    async def submit_offline(self, r: pb.OfflineJobRequest) -> pb.OfflineJobReply | tuple[grpc.StatusCode, str]:
        if not r.input_path or not r.output_path:
            return SC.INVALID_ARGUMENT, "give input_path and output_path"
        try:   # reading the inputs (whole .npy/.npz files) stays off the query loop
            inputs = await asyncio.to_thread(offline_inputs, Path(r.input_path))
        except ValueError as exc:
            return SC.INVALID_ARGUMENT, str(exc)
        probe = pb.SubmitRequest(model=r.model, application=r.application, batch_size=1, min_accuracy=r.min_accuracy)
        v = self._validate(probe)
        if isinstance(v[0], grpc.StatusCode):
            return v[0], v[1]  # type: ignore[return-value]
        m, _, _, variant, choice = v  # type: ignore[misc]
        job = OfflineJob(job_id=f"job-{len(self.offline_jobs) + 1}", model=m, variant=variant, inputs=inputs,
                         output=Path(r.output_path),
                         total=sum(ml.chunks(a.shape[0], self.offline_chunk).__len__() for _, a in inputs))
        self.offline_jobs[job.job_id] = job
        self._start_load(choice)
        job.task = (self._loop or asyncio.get_running_loop()).create_task(self._run_offline(job))
        return job.reply()

    def _offline_workers(self, job: "OfflineJob") -> list[WorkerState]:
        key = f"v:{job.variant}" if job.variant else f"m:{job.model.name}"
        return [w for w in self.workers.values() if not w.draining and self._eligible(w, key)]

    async def _offline_gate(self, job: "OfflineJob") -> None:
        """Wait until the job may run: a worker serves its model and online utilization of those
        workers is under the threshold (INFaaS §5); meanwhile the job reports ``throttled``."""
        while True:
            if self._stopping:
                raise RuntimeError("dispatcher stopped")
            ws = self._offline_workers(job)
            if ws and ml.offline_may_run(self.online_utilization(ws), self.offline_threshold):
                job.state = "running"
                return
            job.state = "throttled" if ws else "queued"
            job.throttled_polls += 1
            await asyncio.sleep(self.offline_poll_s)

    async def _offline_chunk(self, job: "OfflineJob", chunk: np.ndarray) -> np.ndarray:
        """One chunk through the normal queue; transient failures are retried, never dropped."""
        loop = asyncio.get_running_loop()
        while True:
            await self._offline_gate(job)
            now = self.clock()
            qid = f"q{next(self._ids)}"
            qos = 1e9  # offline: no latency SLO, never dropped for one
            n = int(chunk.shape[0])
            q = _Query(qid, job.model, job.variant, n, now, qos, now + self.query_timeout_s,
                       [array_to_tensor("", chunk)],
                       QueryView(qid, job.model.profile_name, n, now, qos), loop.create_future(), offline=True)
            self._queue[qid] = q
            self._arm_deadline(q)
            self._kick()
            out = await asyncio.shield(q.future)
            if not isinstance(out, tuple):
                return tensor_to_array(out.outputs[0])
            if out[0] not in (SC.UNAVAILABLE, SC.DEADLINE_EXCEEDED, SC.RESOURCE_EXHAUSTED):
                raise RuntimeError(f"{out[0].name}: {out[1]}")
            job.retries += 1
            await asyncio.sleep(self.offline_poll_s)

    async def _run_offline(self, job: "OfflineJob") -> None:
        """Run the job chunk by chunk while online utilization stays under the threshold; above it
        the job waits (state ``throttled``) and resumes later -- it is never dropped."""
        outputs: dict[str, list[np.ndarray]] = {}
        try:
            for key, arr in job.inputs:
                for s, e in ml.chunks(arr.shape[0], self.offline_chunk):
                    try:
                        got = await self._offline_chunk(job, np.ascontiguousarray(arr[s:e]))
                    except RuntimeError as exc:
                        raise RuntimeError(f"{key} rows {s}-{e}: {exc}") from None
                    outputs.setdefault(key, []).append(got)
                    job.done += 1
            await asyncio.to_thread(_save_npz, job.output, {k: np.concatenate(v) for k, v in outputs.items()})
            job.state, job.message = "done", f"wrote {job.output}"
        except asyncio.CancelledError:
            job.state, job.message = "failed", "dispatcher stopped"
            raise
        except Exception as exc:  # noqa: BLE001 - reported through GetOfflineJob
            job.state, job.message = "failed", str(exc)

    # -- reporting ---------------------------------------------------------------------------------
    def window_snapshot(self, model: str | None = None) -> WindowSnapshot:
        """The demand window of all queries, or of one model's (empty when it has had none)."""
        if model is None:
            return self.window.snapshot(self.clock())
        return self.model_windows.get(model, _EMPTY_WINDOW).snapshot(self.clock())

    def stats(self) -> dict[str, float | int]:
        lat = np.fromiter(self._recent, dtype=float) if self._recent else np.zeros(0)
        out: dict[str, float | int] = {
            "queued": len(self._queue) + len(self._retry),
            "in_flight": len(self._inflight),
            "accepted": self.accepted,
            "served": self.served,
            "redispatched": self.redispatched,
            "rejected": int(sum(self.rejected.values())),
            "workers": len(self.workers),
            "idle_workers": sum(1 for w in self.workers.values() if w.idle and not w.draining),
            "arrival_qps": self.window.arrival_rate(self.clock()),
            "p50_ms": float(np.percentile(lat, 50)) if lat.size else 0.0,
            "p99_ms": float(np.percentile(lat, 99)) if lat.size else 0.0,
        }
        for code, n in sorted(self.rejected.items()):
            out[f"rejected_{code}"] = n
        return out

    def status_reply(self) -> pb.StatusReply:
        pool = Counter(w.instance_type for w in self.workers.values())
        return pb.StatusReply(
            cluster=self.cfg.cluster, budget_per_hour=self.cfg.budget_per_hour,
            cost_per_hour=float(sum(self._prices.get(t, 0.0) * n for t, n in pool.items())),
            pool=dict(pool), queued=len(self._queue) + len(self._retry), served=self.served,
            rejected=int(sum(self.rejected.values())), arrival_qps=self.window.arrival_rate(self.clock()),
            workers=len(self.workers), parked=sum(1 for w in self.workers.values() if w.parked))


@dataclass(eq=False)
class OfflineJob:
    """An offline job (INFaaS §3.1 offline_query): inputs, progress, and where the output goes."""

    job_id: str
    model: ModelSpec
    variant: str
    inputs: list[tuple[str, np.ndarray]]
    output: Path
    total: int
    done: int = 0
    state: str = "queued"
    message: str = ""
    retries: int = 0
    throttled_polls: int = 0
    task: asyncio.Task | None = None

    def reply(self) -> pb.OfflineJobReply:
        return pb.OfflineJobReply(job_id=self.job_id, state=self.state, done=self.done, total=self.total,
                                  message=self.message)


def offline_inputs(path: Path) -> list[tuple[str, np.ndarray]]:
    """(key, rows) arrays of an offline job: a .npy file (key: its stem), a .npz file (one per
    array) or a folder of them (keys prefixed by the file stem). ValueError with one line."""
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in (".npy", ".npz"))
        if not files:
            raise ValueError(f"{path}: no .npy or .npz files in the folder")
        out: list[tuple[str, np.ndarray]] = []
        for f in files:
            out += [(f"{f.stem}/{k}" if f.suffix == ".npz" else k, a) for k, a in offline_inputs(f)]
        return out
    if not path.exists():
        raise ValueError(f"{path}: no such file or folder")
    try:
        if path.suffix == ".npy":
            arrs = [(path.stem, np.load(str(path), allow_pickle=False))]
        elif path.suffix == ".npz":
            with np.load(str(path), allow_pickle=False) as data:
                arrs = [(k, np.asarray(data[k])) for k in data.files]
        else:
            raise ValueError(f"{path}: expected a .npy or .npz file or a folder of them")
    except (OSError, EOFError) as exc:
        raise ValueError(f"{path}: cannot read ({exc})") from None
    for k, a in arrs:
        if a.ndim < 1 or a.shape[0] == 0 or a.dtype.hasobject:
            raise ValueError(f"{path}: array {k!r} needs a non-empty first (row) dimension of numbers")
    return arrs


#: base latencies below this (ms) are timer noise on a brief local profile: no speed factor from them
SPEED_MIN_BASE_MS = 0.1
#: a measured speed factor this close to 1 is within the brief profile's noise: taken as 1
SPEED_NOISE = 0.10


def _speed_factor(mine: list, base: list) -> float:
    """Relative speed of a variant against its model's base variant, from their local profiles
    (1 when either is unprofiled): the variant's latency on a type = the model's profile there × this.
    Only measurable differences count: base latencies under ``SPEED_MIN_BASE_MS`` or a factor within
    ``SPEED_NOISE`` of 1 give 1, so routing and the model loop do not act on profiling noise."""
    if not mine or not base:
        return 1.0
    a = {b.batch_size: b.mean_ms for b in mine[0].batches}
    c = {b.batch_size: b.mean_ms for b in base[0].batches if b.mean_ms >= SPEED_MIN_BASE_MS}
    common = sorted(set(a) & set(c))
    if not common:
        return 1.0
    f = float(np.clip(np.mean([a[k] / c[k] for k in common]), 0.25, 4.0))
    return 1.0 if abs(f - 1.0) <= SPEED_NOISE else f


def _save_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    replace_atomic(path, lambda tmp: np.savez(str(tmp), **arrays), suffix=".tmp.npz")


class _InferenceServicer(pbg.InferenceServicer):
    def __init__(self, d: Dispatcher) -> None:
        self.d = d

    async def Submit(self, request: pb.SubmitRequest, context: grpc.aio.ServicerContext) -> pb.SubmitReply:
        out = await self.d.submit(request)
        if isinstance(out, tuple):
            await context.abort(out[0], out[1])
        return out  # type: ignore[return-value]

    async def Status(self, request: pb.StatusRequest, context: grpc.aio.ServicerContext) -> pb.StatusReply:
        return self.d.status_reply()

    async def _no_registry(self, context: grpc.aio.ServicerContext, name: str) -> None:
        if self.d.registry is None:
            await context.abort(SC.UNIMPLEMENTED, f"{name}: this dispatcher runs without a variant registry")

    async def RegisterModel(self, request: pb.RegisterModelRequest, context: grpc.aio.ServicerContext) -> pb.RegisterModelReply:
        await self._no_registry(context, "RegisterModel")
        out = await self.d.register_model(request)
        if isinstance(out, tuple):
            await context.abort(out[0], out[1])
        return out  # type: ignore[return-value]

    async def ListVariants(self, request: pb.ListVariantsRequest, context: grpc.aio.ServicerContext) -> pb.ListVariantsReply:
        await self._no_registry(context, "ListVariants")
        return pb.ListVariantsReply(variants=self.d.list_variants(request.model, request.application))

    async def SubmitOffline(self, request: pb.OfflineJobRequest, context: grpc.aio.ServicerContext) -> pb.OfflineJobReply:
        await self._no_registry(context, "SubmitOffline")
        out = await self.d.submit_offline(request)
        if isinstance(out, tuple):
            await context.abort(out[0], out[1])
        return out  # type: ignore[return-value]

    async def GetOfflineJob(self, request: pb.OfflineJobReply, context: grpc.aio.ServicerContext) -> pb.OfflineJobReply:
        job = self.d.offline_jobs.get(request.job_id)
        if job is None:
            await context.abort(SC.NOT_FOUND, f"no offline job {request.job_id!r}")
        return job.reply()


class _ControlServicer(pbg.ControlServicer):
    def __init__(self, d: Dispatcher) -> None:
        self.d = d

    async def RegisterWorker(self, request: pb.RegisterWorkerRequest, context: grpc.aio.ServicerContext) -> pb.RegisterWorkerReply:
        return self.d.register(request)
