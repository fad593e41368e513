"""The query loop on a virtual clock over a pool that changes: the dispatcher's admission, routing
round and re-dispatch (``dispatcher.admission``, ``dispatcher.routing``, ``dispatcher.workers.registry``)
with workers joining and leaving as the fleet loop launches, parks and retires their instances.

:mod:`sim.engine` serves a fixed pool; this loop serves the pool of the moment and keeps the live
dispatcher's rules, calling the same functions it calls. This module decides when each event
happens and how a query ends outside the round (:mod:`sim.replay.outcomes`):

- admission: every arrival is recorded in the demand window (``record``, the fleet loop's
  ``dispatcher.window.DemandWindow``); a full queue rejects (RESOURCE_EXHAUSTED); in ``drop`` mode a
  query no live worker can serve within ξ·SLO is rejected at once (``dispatcher.policies.infeasible``,
  behind the same scalar pre-test as the round's);
- the routing round after every event (Kairos §5.1; :mod:`sim.replay.matching_round`: which
  waiting queries end as infeasible, which worker takes which, which join its call);
- a query still unanswered ``query_timeout_s`` after its arrival ends (DEADLINE_EXCEEDED);
- a worker that leaves with a query in flight: a drained one (parked, or retired by the actuator,
  which drains first) finishes it; any other has it re-dispatched, at most ``max_retries`` times
  (DESIGN invariant 4).

Service times: :class:`sim.service.ServiceTimes` (the profile mean, or the lognormal of
:class:`sim.service.ServiceModel` drawn once per query, times the variant's speed factor).
"""
from __future__ import annotations

import heapq
import itertools
import math
from collections import OrderedDict
from typing import Callable, Literal

import numpy as np

from dispatcher.policies import infeasible
from dispatcher.policy import DISPATCH_VIEW_FACTOR, DISPATCH_XI, Policy, QueryView
from sim.replay.matching_round import INFEASIBLE_MARGIN_MS, LoopWorker, MatchingRound
from sim.replay.outcomes import EXPIRED, REJECTED, SERVED, UNAVAILABLE
from sim.service import ServiceTimes


class QueryLoop(MatchingRound):
    """Queries ``arrivals``/``batches`` (sorted) served by the workers present at each instant.

    Kept incrementally rather than rebuilt per event (none of it changes an outcome): the workers
    taking queries (``_live``, rebuilt after a pool change), how many of them are idle, each
    worker's :class:`WorkerView` (rebuilt after its dispatch or completion), the least predicted
    time per batch over the live types, and the next deadline (recomputed after a queue change).
    The routing round run after each event is :class:`MatchingRound`'s."""

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
        self.workers: dict[str, LoopWorker] = {}
        self.i = 0
        self.now = 0.0
        self.busy_s = 0.0           # service seconds completed (utilisation for target tracking)
        self.on_served: Callable[[int, float], None] | None = None   # (query, at) for each one served
        self.qos_of: dict[int, float] = {}   # a query's own SLO (ms) where it is not the model's (a pipeline step)
        self.policy_calls = 0
        self.requeued = 0
        self._sampled_at = 0.0
        # derived state (class doc): None means "recompute"
        self._live: list[LoopWorker] | None = None
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
        self.workers[wid] = LoopWorker(wid, itype, draining=draining, tix=self.type_names.index(itype), pred=pred)
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

    # -- the next deadline ---------------------------------------------------------------------
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
            if live and self._min_ms[b] > self.xi * self.qos_ms - INFEASIBLE_MARGIN_MS:  # type: ignore[index]
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


__all__ = ["QueryLoop"]
