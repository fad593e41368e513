"""The query loop on a virtual clock over a pool that changes: the dispatcher's admission, routing
round and re-dispatch (``dispatcher.admission``, ``dispatcher.routing``, ``dispatcher.workers.registry``)
with workers joining and leaving as the fleet loop launches, parks and retires their instances.

:mod:`sim.engine` serves a fixed pool; this loop serves the pool of the moment and keeps the live
dispatcher's rules, calling the same functions it calls:

- admission: every arrival is recorded in the demand window (``record``, the fleet loop's
  ``dispatcher.window.DemandWindow``); a full queue rejects (RESOURCE_EXHAUSTED); in ``drop`` mode a
  query no live worker can serve within ξ·SLO is rejected at once (``dispatcher.policies.infeasible``);
- the routing round after every event (Kairos §5.1): at most ``view_factor``·n of the oldest
  waiting queries, re-dispatched ones first; in ``drop`` mode those that can no longer meet their SLO
  end (``infeasible``); then ``policy.match(queries, workers, now)`` on the workers that are not
  draining or parked, ``busy_until`` the predicted finish; one query per worker at a time;
- a query still unanswered ``query_timeout_s`` after its arrival ends (DEADLINE_EXCEEDED);
- a worker that leaves with a query in flight: a drained one (parked, or retired by the actuator,
  which drains first) finishes it; any other has it re-dispatched, at most ``max_retries`` times
  (DESIGN invariant 4).

``infeasible`` is called only when a cheap scalar test (the same inequality, with a margin) says a
query may be infeasible, so skipping it never changes an outcome. Service times: the profile mean,
or the lognormal of :class:`sim.service.ServiceModel` drawn once per query (``z``), times the
variant's speed factor (1.0: the base variant).
"""
from __future__ import annotations

import heapq
import itertools
import math
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Literal

import numpy as np

from dispatcher.batch_join import JOIN_SCAN, MAX_QUERIES, followers
from dispatcher.policies import infeasible
from dispatcher.policy import DISPATCH_VIEW_FACTOR, DISPATCH_XI, LatencyPredictor, Policy, QueryView, WorkerView
from sim.service import ServiceModel

#: outcome codes per query
PENDING, SERVED, REJECTED, DROPPED, EXPIRED, UNAVAILABLE = 0, 1, 2, 3, 4, 5
_MARGIN_MS = 1e-6      # the scalar pre-test errs towards calling ``infeasible``


@dataclass
class _Worker:
    wid: str
    itype: str
    idle: bool = True
    draining: bool = False          # parked or drained: no new queries
    leaving: bool = False           # forgotten while its drained query finishes
    busy_until: float = 0.0
    query: int = -1
    started: float = 0.0
    busy_s: float = 0.0             # service seconds completed since the last :meth:`QueryLoop.take_samples`
    samples: list[tuple[int, float]] = field(default_factory=list)   # (batch, service ms) since then
    tix: int = -1                   # index of ``itype`` in :attr:`QueryLoop.type_names`
    pred: list[float] = field(default_factory=list, repr=False)      # predicted ms by batch on ``itype``
    view: WorkerView | None = field(default=None, repr=False)        # the policy's view; None: stale
    variant: str = ""               # the variant it hosts (:mod:`sim.replay.variant_lane`; "": the lane's model)
    joined: list[int] = field(default_factory=list)   # queries that joined ``query``'s call (batching)


@dataclass
class ServiceTimes:
    """Predicted (the dispatcher's latency model) and actual service times per (type, batch)."""

    model: str
    predictor: LatencyPredictor
    service: ServiceModel
    z: np.ndarray | None = None                 # one standard normal per query ("sampled")
    speed: float = 1.0
    _pred: dict[str, list[float]] = field(default_factory=dict)
    _logn: dict[str, tuple[list[float], list[float]]] = field(default_factory=dict)
    _mean: dict[str, list[float]] = field(default_factory=dict)
    max_batch: int = 1000

    def pred_ms(self, itype: str) -> list[float]:
        tab = self._pred.get(itype)
        if tab is None:
            pred = self.predictor.predict_many(self.model, itype, self._grid().astype(float))
            tab = self._pred[itype] = [float(x) for x in pred]
        return tab

    def _grid(self) -> np.ndarray:
        b = np.arange(self.max_batch + 1)
        b[0] = 1
        return b

    def actual_s(self, itype: str, q: int, batch: int) -> float:
        """Service seconds of query ``q`` (batch ``batch``) on ``itype``."""
        if self.service.kind == "mean" or self.z is None:
            tab = self._mean.get(itype)
            if tab is None:
                tab = self._mean[itype] = self.service.predicted_ms(itype, self._grid()).tolist()
            return self.speed * tab[batch] / 1000.0
        par = self._logn.get(itype)
        if par is None:
            mu, sig = self.service.lognormal_params(itype, self._grid())
            par = self._logn[itype] = (mu.tolist(), sig.tolist())
        return self.speed * math.exp(par[0][batch] + par[1][batch] * float(self.z[q])) / 1000.0


class QueryLoop:
    """Queries ``arrivals``/``batches`` (sorted) served by the workers present at each instant.

    Kept incrementally rather than rebuilt per event (none of it changes an outcome): the workers
    taking queries (``_live``, rebuilt after a pool change), how many of them are idle, each
    worker's :class:`WorkerView` (rebuilt after its dispatch or completion), the least predicted
    time per batch over the live types, and the next deadline (recomputed after a queue change)."""

    def __init__(self, arrivals: np.ndarray, batches: np.ndarray, *, model: str, qos_ms: float, policy: Policy,
                 times: ServiceTimes, on_deadline: Literal["drop", "best_effort"] = "drop", xi: float = DISPATCH_XI,
                 view_factor: int = DISPATCH_VIEW_FACTOR, query_timeout_s: float = 30.0, queue_limit: int = 10_000,
                 max_retries: int = 2, record: Callable[[int, float], None] | None = None,
                 model_name: str | None = None, batching: bool = False) -> None:
        self.arr = np.asarray(arrivals, dtype=float)
        self.bat = np.minimum(np.asarray(batches, dtype=np.int64), times.max_batch)
        self._arr = self.arr.tolist()
        self._bat = self.bat.tolist()
        self.n = len(self._arr)
        self.model, self.qos_ms, self.policy, self.times = model, float(qos_ms), policy, times
        self.model_name = model_name or model     # the config model's name (``model``: its profile's)
        self.drop = on_deadline == "drop"
        self.xi, self.view_factor, self.timeout_s = xi, view_factor, query_timeout_s
        self.queue_limit, self.max_retries = queue_limit, max_retries
        self.record = record
        self.batching = batching      # ``dispatcher.batching: work_conserving`` (dispatcher.batch_join)
        self.calls = 0                # worker calls made (fewer than queries served when they join)
        self.latency = np.full(self.n, np.inf)
        self.outcome = np.zeros(self.n, dtype=np.int8)
        self.worker_type = np.full(self.n, -1, dtype=np.int16)     # index into type_names of the server
        self.type_names: list[str] = []
        self._queue: OrderedDict[int, QueryView] = OrderedDict()
        self._retry: OrderedDict[int, QueryView] = OrderedDict()
        self._attempts: dict[int, int] = {}
        self._heap: list[tuple[float, int, str, int]] = []
        self._seq = itertools.count()
        self.workers: dict[str, _Worker] = {}
        self.i = 0
        self.now = 0.0
        self.busy_s = 0.0           # service seconds completed (utilisation for target tracking)
        self.on_served: Callable[[int, float], None] | None = None   # (query, at) for each one served
        self.qos_of: dict[int, float] = {}   # a query's own SLO (ms) where it is not the model's (a pipeline step)
        self.policy_calls = 0
        self.requeued = 0
        self._sampled_at = 0.0
        # derived state (class doc): None means "recompute"
        self._live: list[_Worker] | None = None
        self._idle_live = 0
        self._min_ms: list[float] | None = None      # least predicted ms by batch over the live types
        self._min_by_types: dict[frozenset[str], list[float]] = {}
        self._td: float | None = None                # the next deadline

    # -- the pool ------------------------------------------------------------------------------
    def add_worker(self, wid: str, itype: str, now: float, draining: bool = False) -> None:
        """A worker registers (its instance runs and its model is loaded)."""
        if wid in self.workers:
            return
        pred = self.times.pred_ms(itype)
        if itype not in self.type_names:
            self.type_names.append(itype)
        self.workers[wid] = _Worker(wid, itype, draining=draining, tix=self.type_names.index(itype), pred=pred)
        self._live = None
        self._round(now)

    def set_draining(self, wid: str, on: bool, now: float) -> None:
        """Park/drain (no new queries; a running one finishes) or unpark."""
        w = self.workers.get(wid)
        if w is not None and not w.leaving and w.draining != on:
            w.draining = on
            self._live = None
            self._round(now)

    def remove_worker(self, wid: str, now: float, lost: bool = False) -> list[int]:
        """The instance is gone: a drained worker finishes its query, another (or any, when ``lost``:
        reclaimed, issue #28) has it re-dispatched; returns the queries re-dispatched."""
        w = self.workers.get(wid)
        if w is None or (w.leaving and not lost):
            return []
        if w.query >= 0 and w.draining and not lost:
            w.leaving = True
            return []
        del self.workers[wid]
        self._live = None
        again = [w.query, *w.joined] if w.query >= 0 else []
        for x in again:
            self._requeue(x)
        self._round(now)
        return again

    def registered(self) -> frozenset[str]:
        """Ids of the workers registered now (parked ones included, as ``Dispatcher.workers``)."""
        return frozenset(wid for wid, w in self.workers.items() if not w.leaving)

    def serving(self) -> dict[str, int]:
        """Instance types of the workers that take queries now, counted."""
        out: dict[str, int] = {}
        for w in self.workers.values():
            if not w.draining and not w.leaving:
                out[w.itype] = out.get(w.itype, 0) + 1
        return out

    def take_samples(self, now: float) -> dict[str, tuple[float, list[tuple[int, float]]]]:
        """Per worker taking queries: (busy seconds, [(batch, service ms)]) since the last call
        (``Dispatcher.take_samples`` and the busy intervals behind ``Dispatcher.utilization``); a
        query in flight counts its busy time up to ``now``."""
        out: dict[str, tuple[float, list[tuple[int, float]]]] = {}
        for wid, w in self.workers.items():
            busy = w.busy_s
            if w.query >= 0:
                busy += now - max(w.started, self._sampled_at)
            if not w.draining and not w.leaving:
                out[wid] = (busy, w.samples)
            w.busy_s, w.samples = 0.0, []
        self._sampled_at = now
        return out

    def set_base_type(self, base_type: str) -> None:
        """``Dispatcher.set_base_type``: the planner's base type for the matching's C_j."""
        if hasattr(self.policy, "base_type"):
            self.policy.base_type = base_type  # type: ignore[attr-defined]

    # -- derived state -------------------------------------------------------------------------
    def _refresh_live(self) -> list[_Worker]:
        """The workers taking queries (registry order), their idle count and least predicted times."""
        live = self._live = [w for w in self.workers.values() if not w.draining and not w.leaving]
        self._idle_live = sum(1 for w in live if w.idle)
        if not live:
            self._min_ms = None
            return live
        types = frozenset(w.itype for w in live)
        mins = self._min_by_types.get(types)
        if mins is None:
            tabs = self._pred_tables(types)
            mins = self._min_by_types[types] = [min(col) for col in zip(*tabs)]
        self._min_ms = mins
        return live

    def _pred_tables(self, types: frozenset[str]) -> list[list[float]]:
        """Predicted ms by batch that a query may be served at on ``types`` (the least bounds the
        infeasibility pre-test)."""
        return [self.times.pred_ms(t) for t in types]

    @staticmethod
    def _views(live: list[_Worker]) -> list[WorkerView]:
        out = []
        for w in live:
            v = w.view
            if v is None:
                v = w.view = WorkerView(w.wid, w.itype, w.busy_until, w.idle)
            out.append(v)
        return out

    def _next_deadline(self) -> float:
        """The earlier arrival of the two queues' heads plus the timeout (``_expire`` adds the same)."""
        queue, retry, arr = self._queue, self._retry, self._arr
        if queue:
            first = arr[next(iter(queue))]
            if retry:
                first = min(first, arr[next(iter(retry))])
        elif retry:
            first = arr[next(iter(retry))]
        else:
            return math.inf
        return first + self.timeout_s

    # -- events --------------------------------------------------------------------------------
    def run_until(self, t_end: float) -> None:
        """Process every query event strictly before ``t_end`` (completions first at equal times)."""
        arr, heap, n, inf = self._arr, self._heap, self.n, math.inf
        expire, complete, arrive = self._expire, self._complete, self._arrive
        while True:
            tc = heap[0][0] if heap else inf
            ta = arr[self.i] if self.i < n else inf
            td = self._td
            if td is None:
                td = self._td = self._next_deadline()
            if td <= tc and td <= ta:
                if td >= t_end:
                    break
                self.now = td
                expire(td)
            elif tc <= ta:
                if tc >= t_end:
                    break
                self.now = tc
                complete(tc)
            else:
                if ta >= t_end:
                    break
                self.now = ta
                arrive(ta)

    def _expire(self, now: float) -> None:
        self._td = None
        for d in (self._retry, self._queue):
            while d:
                q = next(iter(d))
                if self._arr[q] + self.timeout_s > now:   # the same sum as _next_deadline (no FP gap)
                    break
                del d[q]
                self.outcome[q] = EXPIRED

    def _complete(self, now: float) -> None:
        _, _, wid, q = heapq.heappop(self._heap)
        w = self.workers.get(wid)
        if w is None or w.query != q:        # re-dispatched when its worker left
            return
        started = w.started
        rows = 0
        for x in (q, *w.joined):
            self.latency[x] = (now - self._arr[x]) * 1000.0
            self.outcome[x] = SERVED
            self.worker_type[x] = w.tix
            rows += self._bat[x]
            if self.on_served is not None:
                self.on_served(x, now)
        self.busy_s += now - started
        w.busy_s += now - max(started, self._sampled_at)
        w.samples.append((rows, (now - started) * 1000.0))
        w.query, w.idle, w.busy_until, w.view = -1, True, now, None
        if w.joined:
            w.joined = []
        if w.leaving:
            del self.workers[wid]
            self._live = None
        elif not w.draining and self._live is not None:
            self._idle_live += 1
        if self._queue or self._retry:
            self._round(now)

    def _arrive(self, now: float) -> None:
        q = self.i
        self.i += 1
        b = self._bat[q]
        if self.record is not None:
            self.record(b, now)
        if len(self._queue) + len(self._retry) >= self.queue_limit:
            self.outcome[q] = REJECTED
            return
        view = self._view(q, b, now)
        if self.drop:
            live = self._live if self._live is not None else self._refresh_live()
            if live and self._min_ms[b] > self.xi * self.qos_ms - _MARGIN_MS:  # type: ignore[index]
                if infeasible([view], self._views(live), self.times.predictor, now, self.xi):
                    self.outcome[q] = REJECTED
                    return
        self._queue[q] = view
        self._td = None
        self._round(now)

    def _requeue(self, q: int) -> None:
        a = self._attempts[q] = self._attempts.get(q, 0) + 1
        if a > self.max_retries:
            self.outcome[q] = UNAVAILABLE
            return
        self.requeued += 1
        self._retry[q] = self._view(q, self._bat[q], self._arr[q])
        self._td = None

    def _view(self, q: int, batch: int, arrival: float) -> QueryView:
        """Query ``q``'s view for the policy (its model: the one whose latency predicts it)."""
        return QueryView(str(q), self.model, batch, arrival, self.qos_of.get(q, self.qos_ms))

    def _head(self, k: int) -> list[QueryView]:
        if not self._retry:
            return list(itertools.islice(self._queue.values(), k))
        return list(itertools.islice(itertools.chain(self._retry.values(), self._queue.values()), k))

    def _drop_infeasible(self, qs: list[QueryView], views: list[WorkerView], now: float) -> list[QueryView]:
        """``infeasible`` over the round's queries (called only when one may be); they end."""
        limit = self.xi * self.qos_ms - _MARGIN_MS
        mins = self._min_ms
        for v in qs:
            if 1000.0 * (now - v.arrival) + mins[v.batch_size] > limit:  # type: ignore[index]
                break
        else:
            return qs
        bad = set(infeasible(qs, views, self.times.predictor, now, self.xi))
        if not bad:
            return qs
        self._td = None
        for qid in bad:
            q = int(qid)
            if self._retry.pop(q, None) is None:
                del self._queue[q]
            self.outcome[q] = DROPPED
        return [v for v in qs if v.query_id not in bad]

    def _round(self, now: float) -> None:
        """The dispatcher's matching round (``dispatcher.routing.RoutingRound.round``)."""
        queue, retry = self._queue, self._retry
        if not (queue or retry):
            return
        live = self._live
        if live is None:
            live = self._refresh_live()
        if not self._idle_live:
            return
        views = self._views(live)
        k = self.view_factor * len(live)
        while True:
            qs = self._head(k)
            if self.drop:
                qs = self._drop_infeasible(qs, views, now)
            if qs or not (queue or retry):
                break
        if not qs:
            return
        self._match(qs, views, now)

    def _match(self, qs: list[QueryView], views: list[WorkerView], now: float) -> None:
        """One ``policy.match`` of the round's queries over the live workers, and the dispatches."""
        self.policy_calls += 1
        workers = self.workers
        queue, retry = self._queue, self._retry
        matches = self.policy.match(qs, views, now)
        reserved = {a.query_id for a in matches} if self.batching else None
        for a in matches:
            w = workers.get(a.worker_id)
            q = int(a.query_id)
            if w is None or not w.idle or w.draining or w.leaving:
                continue                      # the policy broke the contract: the query stays queued
            view = retry.pop(q, None) or queue.pop(q, None)
            if view is None:
                continue
            self._td = None
            if reserved is None:
                self._dispatch(q, w, now)
            else:
                self._dispatch(q, w, now, self._call_for(view, w, now, reserved))

    def _call_for(self, head: QueryView, w: _Worker, now: float, reserved: set[str]) -> list[int]:
        """The queries that join ``head``'s call on ``w`` (only with batching; ``reserved``: those
        this round matched), taken off the queues: ``dispatcher.routing.RoutingRound._join``, the
        head's group still waiting that :func:`dispatcher.batch_join.followers` lets join."""
        waiting = self._waiting_like(head, reserved)
        if not waiting:
            return []
        picks = followers(head, (), [(x, ()) for x in waiting], w.itype, self.times.predictor, now,
                          self.times.max_batch, self.xi)
        return self._take([int(waiting[i].query_id) for i in picks])

    def _take(self, qs: list[int]) -> list[int]:
        """``qs`` off the queues (they join a call)."""
        for x in qs:
            if self._retry.pop(x, None) is None:
                del self._queue[x]
        return qs

    def _waiting_like(self, head: QueryView, reserved: set[str]) -> list[QueryView]:
        """``RoutingRound._waiting_like``: the head's group still waiting, in queue order, among the
        first ``JOIN_SCAN`` (at most ``MAX_QUERIES``), not matched in this round."""
        scan = itertools.islice(itertools.chain(self._retry.values(), self._queue.values()), JOIN_SCAN)
        return list(itertools.islice((x for x in scan if x.model == head.model and x.query_id not in reserved),
                                     MAX_QUERIES))

    def _service_s(self, w: _Worker, q: int, rows: int) -> float:
        """Seconds ``w`` takes for a call of ``rows`` led by query ``q`` (its draw)."""
        return self.times.actual_s(w.itype, q, rows)

    def _dispatch(self, q: int, w: _Worker, now: float, joined: list[int] | tuple = ()) -> None:
        rows = self._bat[q]
        if joined:
            w.joined = list(joined)
            rows += sum(self._bat[x] for x in joined)
        self.calls += 1
        w.idle, w.query, w.started, w.view = False, q, now, None
        w.busy_until = now + w.pred[rows] / 1000.0
        self._idle_live -= 1                  # w is live (``_round`` checked), so the count is current
        heapq.heappush(self._heap, (now + self._service_s(w, q, rows), next(self._seq), w.wid, q))

    def set_arrival(self, q: int, t: float, batch: int) -> None:
        """Slot ``q`` (a placeholder at +inf, after every arrival already set) arrives at ``t``: a
        pipeline step made when its parent finished (:mod:`sim.replay.pipelines`)."""
        self._arr[q] = self.arr[q] = t
        self._bat[q] = self.bat[q] = min(int(batch), self.times.max_batch)

    def trim(self, n: int) -> None:
        """Keep the first ``n`` queries (the placeholders past them never arrived)."""
        self.n = n
        del self._arr[n:], self._bat[n:]
        self.arr, self.bat = self.arr[:n], self.bat[:n]
        self.latency, self.outcome, self.worker_type = self.latency[:n], self.outcome[:n], self.worker_type[:n]

    def finish(self, t_end: float) -> None:
        """Run the events before ``t_end``; queries still waiting or in flight at the end stay
        PENDING (counted as misses by the metrics, like drops)."""
        self.run_until(t_end)
        self.now = t_end


__all__ = ["QueryLoop", "ServiceTimes", "PENDING", "SERVED", "REJECTED", "DROPPED", "EXPIRED", "UNAVAILABLE"]
