"""Admission: whether a query is accepted, where it waits, and how it ends (DESIGN invariant 4).

A request is validated (model or application, batch, payload, SLO, accuracy; a model-less query
gets its variant from getVariant, INFaaS §4.1), refused when the dispatcher stops or the queue is
full, or -- in ``drop`` mode -- when it cannot meet its SLO on any live worker (Kairos §5.1). An
admitted query waits in the queue (re-dispatched ones in a retry queue served first) until the
routing round (:mod:`dispatcher.routing`) sends it to a worker.

A query is refused at once with UNAVAILABLE when no worker is registered and none is booting
(the daemon's cloud view, :mod:`dispatcher.workers.registry`): waiting ``query_timeout_s`` would not help.
While instances are pending or registered workers are loading, queries wait as before.

Guarantees: every accepted query ends with a result or a typed gRPC error -- DEADLINE_EXCEEDED
(cannot meet its SLO in ``drop`` mode, or its overall deadline ``query_timeout_s`` passed),
RESOURCE_EXHAUSTED (queue full; or overloaded: too many calls wait in gRPC for a handler, or they wait
past half the query's SLO, :mod:`dispatcher.overload`), UNAVAILABLE (its workers kept failing after ``max_retries``
re-dispatches, or the dispatcher stopped), INVALID_ARGUMENT (malformed). The query book
(:mod:`dispatcher.queries`) holds the admitted queries and ends each one, at its overall deadline
at the latest, so nothing hangs.

:class:`Admission` is a part of :class:`dispatcher.server.Dispatcher` (``d.admission``). Owns: the
demand windows (``window``, all queries; ``model_windows``, per model after routing). Takes: the
dispatcher's spec (payload and queue limits, ``on_deadline``), the
:class:`dispatcher.runtime.Runtime` (clock, stopping), the round trigger, the query book (where an
admitted query waits and how it ends), the worker registry (the live workers, the assignment, the
cloud view), placement (models, variants, getVariant's grid, loads), accuracy routing (a planned or
late-bound application), the routing round (an arrival's own round, whose dispatch of the query
this coroutine serves itself), the latency model and the matching's tunables (ξ).
"""
from __future__ import annotations

import asyncio
import collections
import math

import grpc
import numpy as np

from config.schema import ModelSpec
from config.sections.dispatcher import DispatcherSpec
from dispatcher import modelless as ml
from dispatcher.accuracy.routing import AccuracyRouting
from dispatcher.latency_model import LatencyModel
from dispatcher.overload import CoreBacklog
from dispatcher.workers.placement import VariantPlacement
from dispatcher.policies import infeasible
from dispatcher.policy import QueryView, WorkerView
from dispatcher.proto import costscale_pb2 as pb
from dispatcher.proto.tensors import array_to_tensor
from dispatcher.queries import SC, Outcome, Query, QueryBook
from dispatcher.routing import RoutingRound
from dispatcher.runtime import MatchTunables, RoundTrigger, Runtime
from dispatcher.window import DemandWindow
from dispatcher.workers.registry import WorkerRegistry
from variants.infaas.selection import Request as VariantRequest, Utilization

#: an offline chunk has no latency SLO (ms): it is never dropped for one
OFFLINE_QOS_MS = 1e9
#: what validation gives: (model, batch, SLO ms, variant, getVariant's route or None), or an error
Validated = tuple[ModelSpec, int, float, str, ml.Route | None] | tuple[grpc.StatusCode, str]


class Admission:
    """Validation, admission and the arrival's own round (see the module docstring)."""

    def __init__(self, spec: DispatcherSpec, rt: Runtime, trigger: RoundTrigger, book: QueryBook,
                 registry: WorkerRegistry, placement: VariantPlacement, accuracy: AccuracyRouting,
                 routing: RoutingRound, predictor: LatencyModel, tunables: MatchTunables) -> None:
        self.spec = spec
        self.rt = rt
        self.trigger = trigger
        self.book = book
        self.registry = registry
        self.placement = placement
        self.accuracy = accuracy
        self.routing = routing
        self.predictor = predictor
        self.tunables = tunables
        #: the calls gRPC holds for a handler (the server's first interceptor): while too many wait, or wait
        #: too long, a query is refused at once (dispatcher.overload)
        self.backlog = CoreBacklog(spec.overload_pending_calls, rt.clock)
        self.window = DemandWindow()
        #: per model (after routing): the model loop sizes each model's variant instances from its own load
        self.model_windows: dict[str, DemandWindow] = {}

    def validate(self, r: pb.SubmitRequest) -> Validated:
        """(model, batch, SLO ms, variant, getVariant's route or None) or an error (code, message).
        Starts nothing: a route that needs a load is loaded by the caller once the query is admitted
        (:meth:`start_load`)."""
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
        if size > self.spec.max_payload_bytes:
            return SC.INVALID_ARGUMENT, f"payload of {size} bytes exceeds max_payload_bytes {self.spec.max_payload_bytes}"
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
            names = p.variants_for(r.application, r.model)
            workers, util = self.lazy_route_workers()
            try:
                choice = p.router(names, workers).route(req, workers, p.variant_states, util=util)  # type: ignore[arg-type]
            except ml.RouteError as exc:
                return getattr(SC, exc.code, SC.INVALID_ARGUMENT), str(exc)
            variant = choice.variant
            m = p.models.get(p.variant_meta[variant].model, m)
        return m, batch, (slo if slo > 0 else m.qos_ms), variant, choice

    def route_workers(self) -> list[ml.RouteWorker]:
        """The live workers as getVariant sees them, each with its load (:func:`ml.routing_load`: recent
        busy time, the call under way, its share of the queries waiting for its variants)."""
        workers, util = self.lazy_route_workers()
        return [w._replace(utilization=util(w.worker)) for w in workers]

    def lazy_route_workers(self) -> tuple[list[ml.RouteWorker], Utilization]:
        """:meth:`route_workers` with each load computed when getVariant first asks for it
        (``Router.route``'s ``util``: most queries rank only the workers holding an Active instance
        that serves them) and kept; the workers' own ``utilization`` is NaN. The function reads the
        clock, the registry and the queue as they are now: use it within this query's routing."""
        now = self.rt.clock()
        p = self.placement
        live = [(w, frozenset(p.loaded_on(w))) for w in self.registry.workers.values() if not w.draining and not w.removed]
        waiting = collections.Counter(q.variant for q in self.book.waiting() if q.variant)
        hosts = collections.Counter(v for _, vs in live for v in vs if v in waiting)
        horizon = self.registry.utilization_horizon_s
        by_id = {w.instance_id: (w, vs) for w, vs in live}
        got: dict[str, float] = {}

        def util(wid: str) -> float:
            load = got.get(wid)
            if load is None:
                w, vs = by_id[wid]
                share = (ml.waiting_share_ms(vs, waiting, hosts, lambda v, t=w.instance_type:
                                             p.variant_ms(v, t, 1.0) if v in p.variant_meta else 0.0)
                         if waiting else 0.0)
                load = got[wid] = ml.routing_load(w.busy, now, horizon, None if w.idle else w.busy_until, share)
            return load

        return [ml.RouteWorker(w.instance_id, w.hardware, w.instance_type, math.nan, vs) for w, vs in live], util

    def start_load(self, choice: ml.Route | None) -> None:
        """Load the routed variant on its worker when getVariant chose an Inactive one."""
        if choice is not None and choice.needs_load and choice.worker is not None:
            self.placement.ensure_loaded(choice.worker, choice.variant)

    def _live_views(self, model: str | None = None) -> list[WorkerView]:
        """Workers taking queries (of ``model``, when given: those the assignment gives it; with no
        assignment, one model or none planned per model, every one: no lookup per worker)."""
        serves = self.registry.serves if model is not None else None
        return [WorkerView(w.instance_id, w.instance_type, w.busy_until, w.idle)
                for w in self.registry.workers.values() if not w.draining
                and (not serves or serves.get(w.instance_id, model) == model)]

    def _record(self, m: ModelSpec, application: str, batch: int, now: float) -> None:
        """An arrival in the demand windows: all queries', its model's, its application's."""
        self.window.record(batch, now)
        mw = self.model_windows.get(m.name)
        if mw is None:
            mw = self.model_windows[m.name] = DemandWindow(capacity=self.window.capacity)
        mw.record(batch, now)
        if application:
            self.accuracy.record(application, batch, now)

    def record_arrival(self, r: pb.SubmitRequest) -> bool:
        """Count ``r``'s arrival in the demand windows without admitting it (a dispatcher replica
        that forwards it: ``dispatcher.forwarding``); False when it is not a valid query here."""
        v = self.validate(r)
        if isinstance(v[0], grpc.StatusCode):
            return False
        self._record(v[0], r.application, v[1], self.rt.clock())   # type: ignore[arg-type]
        return True

    async def submit(self, r: pb.SubmitRequest, record: bool = True, best_effort: bool = False) -> Outcome:
        """Admit one query and await its outcome (the servicer turns an error tuple into a status);
        ``record``: count its arrival in the demand windows (False: a replica that forwarded it to
        this one counted it); ``best_effort``: never dropped for its SLO (``on_deadline: drop``
        spares it), for a query a dispatcher replica held through a failover
        (``dispatcher.forwarding``): its wait was ours, so it is served late rather than refused."""
        book = self.book
        if self.rt.stopping:
            return book.reject(SC.UNAVAILABLE, "dispatcher is shutting down")
        key = r.idempotency_key
        if key:
            prior = book.recall(key)
            if prior is not None:
                return await asyncio.shield(prior.future)
        v = self.validate(r)
        if isinstance(v[0], grpc.StatusCode):
            return book.reject(v[0], v[1])  # type: ignore[arg-type]
        m, batch, qos, variant, choice = v  # type: ignore[misc]
        # gRPC holds too many calls, or holds them past the SLO (dispatcher.overload)
        overloaded = self.backlog.refusal(qos / 1000.0 if self.spec.on_deadline == "drop" and not best_effort else None)
        if overloaded is not None:
            return book.reject(SC.RESOURCE_EXHAUSTED, overloaded)
        if book.waiting_count() >= self.spec.queue_limit:
            return book.reject(SC.RESOURCE_EXHAUSTED, f"queue full ({self.spec.queue_limit} waiting)")
        now = self.rt.clock()
        qid = book.new_id()
        view = QueryView(qid, m.profile_name, batch, now, qos)
        if record:
            self._record(m, r.application, batch, now)
        idle_fleet = self._nothing_serves(m)
        if idle_fleet is not None:
            return book.reject(SC.UNAVAILABLE, idle_fleet)
        if self.spec.on_deadline == "drop" and not best_effort:
            if infeasible([view], self._live_views(m.name), self.predictor, now, self.tunables.xi):
                return book.reject(SC.DEADLINE_EXCEEDED, f"batch {batch} of {m.name!r} cannot meet its {qos:g} ms SLO on any worker")
        self.start_load(choice)
        loop = asyncio.get_running_loop()
        q = Query(qid, m, variant, batch, now, qos, now + book.query_timeout_s, list(r.inputs), view,
                  loop.create_future(), key, application=r.application,
                  late=not variant and r.application in self.accuracy.late_bound, min_accuracy=float(r.min_accuracy),
                  best_effort=best_effort)
        if key:
            book.remember(key, q)
        book.admit(q)
        if key:
            # a retry with the same key may collect the answer: the client going away must not
            # cancel the query's future
            self.trigger.kick()
            return await asyncio.shield(q.future)
        return await self._serve_own(q)

    async def _serve_own(self, q: Query) -> Outcome:
        """The arrival event's matching round, run now: when it sends ``q`` to a worker, this
        coroutine makes the worker call itself (no task and no wake-up per query); then ``q``'s
        outcome."""
        routing, book = self.routing, self.book
        caught = routing.round_catching(q)
        if caught is not None:
            _, w, gen = caught
            try:
                await routing.run(q, w, gen)
            except asyncio.CancelledError:
                # the client went away mid-call: free the worker; nobody can collect the answer.
                # Queries that joined its call go back to the queue
                if w.in_flight == q.query_id:
                    book.abandon_call(w, "the call's head was cancelled", skip=q)
                routing.release(w, q.query_id)
                book.drop_cancelled(q)
                self.trigger.kick()
                raise
            routing.completed(w)
        if q.future.done():
            return q.future.result()
        try:
            return await q.future
        except asyncio.CancelledError:
            # the client went away and nobody else can collect the answer: a waiting query leaves
            # the queue; one in flight finishes on its worker and its result is discarded
            book.drop_cancelled(q)
            raise

    def _nothing_serves(self, m: ModelSpec) -> str | None:
        """Why nothing can serve a query of ``m``: no worker is registered and the cloud view shows
        none booting (pending, or running but not registered yet). Any registered worker counts,
        also one loading or holding other models: getVariant and the model loop load variants onto
        it from the demand, which is recorded before this check. None (wait) without a cloud view."""
        reg = self.registry
        if reg.cloud_view is None or reg.workers or reg.booting():
            return None
        return f"no worker serves model {m.name!r} and none is starting"

    def enqueue_offline(self, model: ModelSpec, variant: str, rows: np.ndarray) -> asyncio.Future:
        """Queue one chunk of an offline job (:mod:`dispatcher.offline`) like any query, without a
        latency SLO; the returned future gets its outcome."""
        book = self.book
        now = self.rt.clock()
        qid = book.new_id()
        qos = OFFLINE_QOS_MS
        n = int(rows.shape[0])
        q = Query(qid, model, variant, n, now, qos, now + book.query_timeout_s, [array_to_tensor("", rows)],
                  QueryView(qid, model.profile_name, n, now, qos), asyncio.get_running_loop().create_future(),
                  offline=True)
        book.enqueue(q)
        self.trigger.kick()
        return q.future


__all__ = ["OFFLINE_QOS_MS", "Admission", "Validated"]
