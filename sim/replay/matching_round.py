"""The replay's routing round (Kairos §5.1, ``dispatcher.routing.RoutingRound.round``): which waiting
queries go to which worker when the query loop (:mod:`sim.replay.query_loop`) runs a round after an
event.

- the round looks at the workers taking queries (not draining, parked or leaving) and runs only
  when one of them is idle;
- it takes at most ``view_factor``·n of the oldest waiting queries, re-dispatched ones first;
- in ``drop`` mode, those that can no longer meet their SLO end (``dispatcher.policies.infeasible``,
  called only when a cheap scalar test with a margin says one may be, so skipping it never changes
  an outcome);
- then one ``policy.match(queries, workers, now)``: a matched idle worker takes its query (one
  query per worker at a time), ``busy_until`` the predicted finish, the completion scheduled at the
  actual service time; a match to a worker that is not idle and live is ignored (the query stays
  queued);
- with batching (``dispatcher.batching: work_conserving``), the waiting queries of the head's group
  that :func:`dispatcher.batch_join.followers` lets join ride in the same call.

:class:`MatchingRound` is the round's half of :class:`sim.replay.query_loop.QueryLoop`, which holds
the state it reads (declared below) and the events that call it.
"""
from __future__ import annotations

import heapq
import itertools
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

from dispatcher.batch_join import JOIN_SCAN, MAX_QUERIES, followers
from dispatcher.policies import infeasible
from dispatcher.policy import Policy, QueryView, WorkerView
from sim.replay.outcomes import DROPPED
from sim.service import ServiceTimes

#: the scalar infeasibility pre-test's margin: it errs towards calling ``infeasible``
INFEASIBLE_MARGIN_MS = 1e-6


@dataclass
class LoopWorker:
    """A worker registered with the query loop: its one call at a time (``query`` and the queries
    ``joined`` to it), when it is predicted free, and what it served since the last sample."""

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


class MatchingRound:
    """The routing round over the query loop's workers and queues (module docstring); the state is
    the :class:`sim.replay.query_loop.QueryLoop`'s, kept incrementally (its class docstring)."""

    # the query loop's state the round reads and writes (set by ``QueryLoop.__init__``)
    workers: dict[str, LoopWorker]
    policy: Policy
    times: ServiceTimes
    qos_ms: float
    xi: float
    view_factor: int
    drop: bool
    batching: bool
    calls: int
    policy_calls: int
    outcome: np.ndarray
    _arr: list[float]
    _bat: list[int]
    _queue: OrderedDict[int, QueryView]
    _retry: OrderedDict[int, QueryView]
    _heap: list[tuple[float, int, str, int]]
    _seq: Iterator[int]
    _live: list[LoopWorker] | None
    _idle_live: int
    _min_ms: list[float] | None
    _min_by_types: dict[frozenset[str], list[float]]
    _td: float | None

    def _refresh_live(self) -> list[LoopWorker]:
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
    def _views(live: list[LoopWorker]) -> list[WorkerView]:
        out = []
        for w in live:
            v = w.view
            if v is None:
                v = w.view = WorkerView(w.wid, w.itype, w.busy_until, w.idle)
            out.append(v)
        return out

    def _head(self, k: int) -> list[QueryView]:
        if not self._retry:
            return list(itertools.islice(self._queue.values(), k))
        return list(itertools.islice(itertools.chain(self._retry.values(), self._queue.values()), k))

    def _drop_infeasible(self, qs: list[QueryView], views: list[WorkerView], now: float) -> list[QueryView]:
        """``infeasible`` over the round's queries (called only when one may be); they end."""
        limit = self.xi * self.qos_ms - INFEASIBLE_MARGIN_MS
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

    def _call_for(self, head: QueryView, w: LoopWorker, now: float, reserved: set[str]) -> list[int]:
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

    def _service_s(self, w: LoopWorker, q: int, rows: int) -> float:
        """Seconds ``w`` takes for a call of ``rows`` led by query ``q`` (its draw)."""
        return self.times.actual_s(w.itype, q, rows)

    def _dispatch(self, q: int, w: LoopWorker, now: float, joined: list[int] | tuple = ()) -> None:
        rows = self._bat[q]
        if joined:
            w.joined = list(joined)
            rows += sum(self._bat[x] for x in joined)
        self.calls += 1
        w.idle, w.query, w.started, w.view = False, q, now, None
        w.busy_until = now + w.pred[rows] / 1000.0
        self._idle_live -= 1                  # w is live (``_round`` checked), so the count is current
        heapq.heappush(self._heap, (now + self._service_s(w, q, rows), next(self._seq), w.wid, q))


__all__ = ["INFEASIBLE_MARGIN_MS", "LoopWorker", "MatchingRound"]
