"""Admission: whether a query is accepted, where it waits, and how it ends (DESIGN invariant 4).

A request is validated (model or application, batch, payload, SLO, accuracy; a model-less query
gets its variant from getVariant, INFaaS §4.1), refused when the dispatcher stops or the queue is
full, or -- in ``drop`` mode -- when it cannot meet its SLO on any live worker (Kairos §5.1). An
admitted query waits in the queue (re-dispatched ones in a retry queue served first) until the
routing round (:mod:`dispatcher.routing`) sends it to a worker.

A query is refused at once with UNAVAILABLE when no worker is registered and none is booting
(the daemon's cloud view, :mod:`dispatcher.workers`): waiting ``query_timeout_s`` would not help.
While instances are pending or registered workers are loading, queries wait as before.

Guarantees: every accepted query ends with a result or a typed gRPC error -- DEADLINE_EXCEEDED
(cannot meet its SLO in ``drop`` mode, or its overall deadline ``query_timeout_s`` passed),
RESOURCE_EXHAUSTED (queue full), UNAVAILABLE (its workers kept failing after ``max_retries``
re-dispatches, or the dispatcher stopped), INVALID_ARGUMENT (malformed). A deadline sweep (one
timer over a heap of deadlines) ends each query at its overall deadline, so nothing hangs.

:class:`Admission` is a mixin of :class:`dispatcher.server.Dispatcher`.
Owns: ``_queue``, ``_retry``, ``_inflight``, ``_idem``, ``_ids``, ``accepted``, ``served``,
``rejected``, ``_recent``, ``_deadlines``, ``_deadline_timer``, ``_deadline_at`` and the tunables
``query_timeout_s``, ``idempotency_capacity``.
Reads: ``cfg``, ``clock``, ``predictor``, ``xi``, ``window``, ``model_windows``, ``accuracy``, ``_loop``,
``_stopping`` (server); ``workers``, ``utilization_horizon_s``, ``cloud_view``, ``booting`` (workers);
``placement``, ``loaded_on`` and ``ensure_loaded`` (placement); ``_kick``, ``_round_catching``,
``_run``, ``_release``, ``_completed`` (routing).
"""
from __future__ import annotations

import asyncio
import collections
import functools
import heapq
import itertools
import math
from collections import Counter, OrderedDict, deque
from dataclasses import dataclass
from typing import Union

import grpc
import numpy as np

from config.schema import ModelSpec
from dispatcher import batch_join, modelless as ml
from dispatcher.policies import infeasible
from dispatcher.policy import QueryView, WorkerView
from dispatcher.proto import costscale_pb2 as pb
from dispatcher.proto.tensors import array_to_tensor
from dispatcher.window import DemandWindow
from variants.selection import Request as VariantRequest

SC = grpc.StatusCode
Outcome = Union[pb.SubmitReply, tuple[grpc.StatusCode, str]]
#: an offline chunk has no latency SLO (ms): it is never dropped for one
OFFLINE_QOS_MS = 1e9


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
    application: str = ""     # the application it named (routing by the accuracy plan)
    late: bool = False        # its variant is chosen when it is dispatched (SlackFit, dispatcher.accuracy_routing)
    min_accuracy: float = 0.0

    @functools.cached_property
    def sig(self) -> tuple | None:
        """What its inputs must match to stack with another query's (:func:`dispatcher.batch_join.signature`),
        computed once: the joins read it for every waiting query at every dispatch."""
        return batch_join.signature(self.inputs, self.batch)


class Admission:
    """Validation, admission, the queues and overall deadlines (see the module docstring)."""

    def _init_admission(self) -> None:
        self.query_timeout_s = 30.0
        self.idempotency_capacity = 10_000
        self._queue: dict[str, _Query] = {}
        self._retry: dict[str, _Query] = {}
        self._inflight: dict[str, _Query] = {}
        self._idem: OrderedDict[str, _Query] = OrderedDict()
        self._ids = itertools.count(1)
        self.accepted = 0
        self.served = 0
        self.rejected: Counter[str] = Counter()
        self._recent: deque[float] = deque(maxlen=10_000)
        # overall deadlines: a heap swept by one timer (not one timer per query)
        self._deadlines: list[tuple[float, int, str]] = []
        self._deadline_timer: asyncio.TimerHandle | None = None
        self._deadline_at = float("inf")

    def _reject(self, code: grpc.StatusCode, msg: str) -> tuple[grpc.StatusCode, str]:
        self.rejected[code.name] += 1
        return code, msg

    def _validate(self, r: pb.SubmitRequest) -> tuple[ModelSpec, int, float, str, ml.Route | None] | tuple[grpc.StatusCode, str]:
        """(model, batch, SLO ms, variant, getVariant's route or None) or an error (code, message).
        Starts nothing: a route that needs a load is loaded by the caller once the query is admitted."""
        p = self.placement
        variant = r.variant
        choice: ml.Route | None = None
        if variant and variant not in p.variant_meta:
            return SC.NOT_FOUND, f"unknown variant {variant!r}"
        if variant and r.model and p.variant_meta[variant].model != r.model:
            return SC.INVALID_ARGUMENT, f"variant {variant!r} is not a variant of model {r.model!r}"
        if variant and not r.model:
            m = p.models.get(p.variant_meta[variant].model)
            if m is None:
                return SC.NOT_FOUND, f"model of variant {variant!r} is not registered"
        elif r.model:
            m = p.models.get(r.model)
            if m is None:
                return SC.INVALID_ARGUMENT, f"unknown model {r.model!r} (known: {', '.join(sorted(p.models))})"
        elif r.application:
            m = p.apps.get(r.application)
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
        acc = max(acc, m.min_accuracy)      # the model's (application's) floor for queries that name less
        if not variant and r.application in self.accuracy.late_bound and (slo <= 0 or slo >= m.qos_ms):
            return m, batch, (slo if slo > 0 else m.qos_ms), "", None    # SlackFit: chosen at dispatch
        if not variant and r.application and (slo <= 0 or slo >= m.qos_ms):
            # an accuracy-scaled application: the variant the live accuracy plan routes it to
            planned = self.accuracy.route(r.application, acc)
            if planned is not None:
                m = p.models.get(p.variant_meta[planned].model, m)
                return m, batch, (slo if slo > 0 else m.qos_ms), planned, None
        if not variant and (r.application or acc > 0) and p.variant_meta:
            # model-less query (INFaaS §4.1 getVariant): pick the variant and where it runs
            req = VariantRequest(model=r.model or None, latency_slo_ms=slo if slo > 0 else float("inf"),
                                 min_accuracy=acc, batch=batch)
            metas = [p.variant_meta[n] for n in p.variants_for(r.application, r.model)]
            try:
                choice = ml.route(req, metas, self._route_workers(), p.grid, p.variant_states)  # type: ignore[arg-type]
            except ml.RouteError as exc:
                return getattr(SC, exc.code, SC.INVALID_ARGUMENT), str(exc)
            variant = choice.variant
            m = p.models.get(p.variant_meta[variant].model, m)
        return m, batch, (slo if slo > 0 else m.qos_ms), variant, choice

    def _route_workers(self) -> list[ml.RouteWorker]:
        """The live workers as getVariant sees them, each with its load (:func:`ml.routing_load`: recent
        busy time, the call under way, its share of the queries waiting for its variants)."""
        now = self.clock()
        live = [(w, frozenset(self.loaded_on(w))) for w in self.workers.values() if not w.draining and not w.removed]
        waiting = collections.Counter(q.variant for q in itertools.chain(self._retry.values(), self._queue.values())
                                      if q.variant)
        hosts = collections.Counter(v for _, vs in live for v in vs if v in waiting)
        p = self.placement
        out = []
        for w, vs in live:
            share = (ml.waiting_share_ms(vs, waiting, hosts, lambda v, t=w.instance_type:
                                         p.variant_ms(v, t, 1.0) if v in p.variant_meta else 0.0)
                     if waiting else 0.0)
            out.append(ml.RouteWorker(w.instance_id, w.hardware, w.instance_type,
                                      ml.routing_load(w.busy, now, self.utilization_horizon_s,
                                                      None if w.idle else w.busy_until, share), vs))
        return out

    def _start_load(self, choice: ml.Route | None) -> None:
        """Load the routed variant on its worker when getVariant chose an Inactive one."""
        if choice is not None and choice.needs_load and choice.worker is not None:
            self.ensure_loaded(choice.worker, choice.variant)

    def _live_views(self, model: str | None = None) -> list[WorkerView]:
        """Workers taking queries (of ``model``, when given: those the assignment gives it; with no
        assignment, one model or none planned per model, every one: no lookup per worker)."""
        serves = self.serves if model is not None else None
        return [WorkerView(w.instance_id, w.instance_type, w.busy_until, w.idle)
                for w in self.workers.values() if not w.draining
                and (not serves or serves.get(w.instance_id, model) == model)]

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
        if r.application:
            self.accuracy.record(r.application, batch, now)
        idle_fleet = self._nothing_serves(m)
        if idle_fleet is not None:
            return self._reject(SC.UNAVAILABLE, idle_fleet)
        if self.cfg.dispatcher.on_deadline == "drop":
            if infeasible([view], self._live_views(m.name), self.predictor, now, self.xi):
                return self._reject(SC.DEADLINE_EXCEEDED, f"batch {batch} of {m.name!r} cannot meet its {qos:g} ms SLO on any worker")
        self._start_load(choice)
        loop = asyncio.get_running_loop()
        q = _Query(qid, m, variant, batch, now, qos, now + self.query_timeout_s, list(r.inputs), view,
                   loop.create_future(), key, application=r.application,
                   late=not variant and r.application in self.accuracy.late_bound, min_accuracy=float(r.min_accuracy))
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
                # the client went away mid-call: free the worker; nobody can collect the answer.
                # Queries that joined its call go back to the queue
                if w.in_flight == qid:
                    self._abandon_call(w, "the call's head was cancelled", skip=q)
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

    def _nothing_serves(self, m: ModelSpec) -> str | None:
        """Why nothing can serve a query of ``m``: no worker is registered and the cloud view shows
        none booting (pending, or running but not registered yet). Any registered worker counts,
        also one loading or holding other models: getVariant and the model loop load variants onto
        it from the demand, which is recorded before this check. None (wait) without a cloud view."""
        if self.cloud_view is None or self.workers or self.booting():
            return None
        return f"no worker serves model {m.name!r} and none is starting"

    def enqueue_offline(self, model: ModelSpec, variant: str, rows: np.ndarray) -> asyncio.Future:
        """Queue one chunk of an offline job (:mod:`dispatcher.offline`) like any query, without a
        latency SLO; the returned future gets its outcome."""
        now = self.clock()
        qid = f"q{next(self._ids)}"
        qos = OFFLINE_QOS_MS
        n = int(rows.shape[0])
        q = _Query(qid, model, variant, n, now, qos, now + self.query_timeout_s, [array_to_tensor("", rows)],
                   QueryView(qid, model.profile_name, n, now, qos), asyncio.get_running_loop().create_future(),
                   offline=True)
        self._queue[qid] = q
        self._arm_deadline(q)
        self._kick()
        return q.future

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
