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
the head of the queue. Each query has a timer that ends it at its overall deadline, so nothing hangs.

Each matching round passes the policy at most ``2·n`` of the oldest waiting queries (n = workers
that may receive work), the same bound the Kairos policy documents.
"""
from __future__ import annotations

import asyncio
import hmac
import itertools
import time
from collections import Counter, OrderedDict, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Union

import grpc
import numpy as np
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from daemon.config import Config, ModelSpec
from dispatcher.latency_model import LatencyModel
from dispatcher.policies import infeasible, make_policy
from dispatcher.policy import Policy, QueryView, WorkerView
from dispatcher.proto import costscale_pb2 as pb, costscale_pb2_grpc as pbg
from dispatcher.window import DemandWindow, WindowSnapshot
from dispatcher.worker_client import WorkerClient, is_worker_failure

SC = grpc.StatusCode
Outcome = Union[pb.SubmitReply, tuple[grpc.StatusCode, str]]
SERVICE_NAME = "costscale.v1.Inference"


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
    timer: asyncio.TimerHandle | None = None
    dispatched_at: float = 0.0


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
    health_failures: int = 0
    idle_event: asyncio.Event = field(default_factory=asyncio.Event)


class Dispatcher:
    """See the module docstring. Tunables are plain attributes, settable after construction:
    ``query_timeout_s`` (30), ``max_retries`` (2 re-dispatches), ``health_interval_s`` (1),
    ``health_timeout_s`` (1), ``health_failures`` (2 in a row), ``idempotency_capacity`` (10,000),
    ``xi`` (0.98), ``view_factor`` (2)."""

    def __init__(self, cfg: Config, predictor: LatencyModel, *, clock: Callable[[], float] = time.monotonic,
                 policy: Policy | None = None, base_type: str | None = None) -> None:
        self.cfg = cfg
        self.predictor = predictor
        self.clock = clock
        self._models = {m.name: m for m in cfg.models}
        self._apps: dict[str, ModelSpec] = {}
        for m in cfg.models:
            if m.application and m.application not in self._apps:
                self._apps[m.application] = m
        self.base_type = base_type or self._default_base_type()
        self.policy: Policy = policy or make_policy(cfg.dispatcher.policy, predictor, self.base_type)
        self.workers: dict[str, WorkerState] = {}
        self.window = DemandWindow()
        try:
            self._prices = {t: it.price_per_hour for t, it in cfg.catalog().items()}
        except Exception:  # pragma: no cover - catalog is validated with the config
            self._prices = {}
        # tunables
        self.query_timeout_s = 30.0
        self.max_retries = 2
        self.health_interval_s = 1.0
        self.health_timeout_s = 1.0
        self.health_failures = 2
        self.idempotency_capacity = 10_000
        self.xi = 0.98
        self.view_factor = 2
        # state
        self._allowed: dict[str, str] = {}
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
        self._stopping = False
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- configuration -----------------------------------------------------------------------------
    def _default_base_type(self) -> str:
        """Kairos §7: the base type is the one that serves the largest query fastest."""
        m = self.cfg.models[0]
        types = [t.type for t in self.cfg.instance_types]
        b = float(min(m.max_batch, 1000))
        return min(types, key=lambda t: self.predictor.predict_ms(m.profile_name, t, b))

    def set_policy(self, policy: Policy) -> None:
        self.policy = policy
        self._kick()

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
        w.idle_event.set()
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
            await w.client.health(self.health_timeout_s)
            w.health_failures = 0
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
        host, sep, port = req.address.rpartition(":")
        if not sep or not host or not port.isdigit():
            return pb.RegisterWorkerReply(accepted=False, message=f"bad worker address {req.address!r}: expected HOST:PORT")
        self.add_worker_direct(req.instance_id, req.instance_type, req.address)
        return pb.RegisterWorkerReply(accepted=True, message="registered")

    # -- admission -------------------------------------------------------------------------------
    def _reject(self, code: grpc.StatusCode, msg: str) -> tuple[grpc.StatusCode, str]:
        self.rejected[code.name] += 1
        return code, msg

    def _validate(self, r: pb.SubmitRequest) -> tuple[ModelSpec, int, float] | tuple[grpc.StatusCode, str]:
        if r.model:
            m = self._models.get(r.model)
            if m is None:
                return SC.INVALID_ARGUMENT, f"unknown model {r.model!r} (known: {', '.join(sorted(self._models))})"
        elif r.application:
            m = self._apps.get(r.application)
            if m is None:
                return SC.INVALID_ARGUMENT, f"unknown application {r.application!r}"
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
        if not np.isfinite(slo) or slo < 0:
            return SC.INVALID_ARGUMENT, f"latency_slo_ms must be >= 0, got {r.latency_slo_ms}"
        return m, batch, (slo if slo > 0 else m.qos_ms)

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
        m, batch, qos = v  # type: ignore[misc]
        if len(self._queue) + len(self._retry) >= self.cfg.dispatcher.queue_limit:
            return self._reject(SC.RESOURCE_EXHAUSTED, f"queue full ({self.cfg.dispatcher.queue_limit} waiting)")
        now = self.clock()
        qid = f"q{next(self._ids)}"
        view = QueryView(qid, m.profile_name, batch, now, qos)
        self.window.record(batch, now)
        if self.cfg.dispatcher.on_deadline == "drop":
            if infeasible([view], self._live_views(), self.predictor, now, self.xi):
                return self._reject(SC.DEADLINE_EXCEEDED, f"batch {batch} of {m.name!r} cannot meet its {qos:g} ms SLO on any worker")
        loop = asyncio.get_running_loop()
        q = _Query(qid, m, r.variant, batch, now, qos, now + self.query_timeout_s, list(r.inputs), view,
                   loop.create_future(), key)
        if key:
            self._idem[key] = q
            while len(self._idem) > self.idempotency_capacity:
                self._idem.popitem(last=False)
        self.accepted += 1
        self._queue[qid] = q
        q.timer = loop.call_later(self.query_timeout_s, self._expire, q)
        self._kick()
        try:
            return await asyncio.shield(q.future)
        except asyncio.CancelledError:
            # the client went away: without an idempotency key nobody can collect the answer
            if not key and (self._queue.pop(qid, None) or self._retry.pop(qid, None)):
                self._finish(q, (SC.CANCELLED, "client cancelled"))
            raise

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
        wviews = [WorkerView(w.instance_id, w.instance_type, w.busy_until, w.idle) for w in live]
        k = self.view_factor * len(live)
        views = [q.view for q in itertools.islice(itertools.chain(self._retry.values(), self._queue.values()), k)]
        if self.cfg.dispatcher.on_deadline == "drop":
            bad = infeasible(views, wviews, self.predictor, now, self.xi)
            if bad:
                for qid in bad:
                    q = self._retry.pop(qid, None) or self._queue.pop(qid)
                    self._finish(q, (SC.DEADLINE_EXCEEDED, f"waited {1000 * (now - q.arrival):.1f} ms: can no longer meet its {q.qos_ms:g} ms SLO"))
                badset = set(bad)
                views = [v for v in views if v.query_id not in badset]
        if not views:
            if self._queue or self._retry:
                self._kick()
            return
        for a in self.policy.match(views, wviews, now):
            w = self.workers.get(a.worker_id)
            q = self._retry.pop(a.query_id, None) or self._queue.pop(a.query_id, None)
            if q is None:
                continue
            if w is None or not w.idle or w.draining or w.removed:   # policy broke the contract: keep it queued
                self._retry[q.query_id] = q
                continue
            self._dispatch(q, w, now)

    def _dispatch(self, q: _Query, w: WorkerState, now: float) -> None:
        pred = self.predictor.predict_ms(q.model.profile_name, w.instance_type, q.batch)
        w.idle = False
        w.idle_event.clear()
        w.in_flight = q.query_id
        w.busy_until = now + pred / 1000.0
        q.dispatched_at = now
        q.gen += 1
        self._inflight[q.query_id] = q
        self._spawn(self._run(q, w, q.gen))

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
            self.predictor.observe(q.model.profile_name, w.instance_type, q.batch, service_ms)
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
                else:
                    self._requeue(q, f"worker {w.instance_id} returned {code.name if code else '?'}: {details}")
        self._kick()

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
        if q.timer is not None:
            q.timer.cancel()
        q.future.set_result(outcome)
        if isinstance(outcome, tuple):
            self.rejected[outcome[0].name] += 1
        else:
            self.served += 1
            self._recent.append(outcome.total_ms)

    # -- reporting ---------------------------------------------------------------------------------
    def window_snapshot(self) -> WindowSnapshot:
        return self.window.snapshot(self.clock())

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
            workers=len(self.workers))


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

    async def _unimplemented(self, context: grpc.aio.ServicerContext, name: str) -> None:
        await context.abort(SC.UNIMPLEMENTED, f"{name} is not implemented by this dispatcher yet")

    async def RegisterModel(self, request, context):  # type: ignore[no-untyped-def]
        await self._unimplemented(context, "RegisterModel")

    async def ListVariants(self, request, context):  # type: ignore[no-untyped-def]
        await self._unimplemented(context, "ListVariants")

    async def SubmitOffline(self, request, context):  # type: ignore[no-untyped-def]
        await self._unimplemented(context, "SubmitOffline")

    async def GetOfflineJob(self, request, context):  # type: ignore[no-untyped-def]
        await self._unimplemented(context, "GetOfflineJob")


class _ControlServicer(pbg.ControlServicer):
    def __init__(self, d: Dispatcher) -> None:
        self.d = d

    async def RegisterWorker(self, request: pb.RegisterWorkerRequest, context: grpc.aio.ServicerContext) -> pb.RegisterWorkerReply:
        return self.d.register(request)
