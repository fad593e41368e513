"""The queries one dispatcher holds, and how each of them ends (DESIGN invariant 4).

An admitted query waits in the queue, a re-dispatched one in the retry queue (served first), and a
dispatched one is in flight until its worker answers. Every query ends exactly once
(:meth:`QueryBook.finish`): with a result, or with a typed error -- DEADLINE_EXCEEDED at its
overall deadline ``query_timeout_s`` (a deadline sweep: one timer over a heap of deadlines, so
nothing hangs), UNAVAILABLE after ``max_retries`` re-dispatches (:meth:`QueryBook.requeue`: a
query whose worker failed goes back to the head of the queue, Kairos §6) or when the dispatcher
stops, and the errors admission and the routing round answer.

:class:`QueryBook` is the part admission (:mod:`dispatcher.admission`), the routing round
(:mod:`dispatcher.routing`), the worker registry (a removed worker's call) and accuracy routing
(the queries waiting) share. It takes the :class:`dispatcher.runtime.Runtime` (clock, loop) and
the :class:`dispatcher.runtime.RoundTrigger` (a requeued query asks for a round).
"""
from __future__ import annotations

import asyncio
import functools
import heapq
import itertools
from collections import Counter, OrderedDict, deque
from dataclasses import dataclass
from typing import Iterator, Union

import grpc

from config.schema import ModelSpec
from dispatcher import batch_join
from dispatcher.policy import QueryView
from dispatcher.proto import costscale_pb2 as pb
from dispatcher.runtime import RoundTrigger, Runtime
from dispatcher.workers.registry import WorkerState

SC = grpc.StatusCode
Outcome = Union[pb.SubmitReply, tuple[grpc.StatusCode, str]]


@dataclass(eq=False)
class Query:
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
    late: bool = False        # its variant is chosen when it is dispatched (SlackFit, dispatcher.accuracy.routing)
    min_accuracy: float = 0.0
    best_effort: bool = False  # served however late, never dropped for its SLO (held through a replica failover)

    @functools.cached_property
    def sig(self) -> tuple | None:
        """What its inputs must match to stack with another query's (:func:`dispatcher.batch_join.signature`),
        computed once: the joins read it for every waiting query at every dispatch."""
        return batch_join.signature(self.inputs, self.batch)


class QueryBook:
    """The queues, the calls in flight, the idempotency cache, the deadlines and the counters (see
    the module docstring). Tunables: ``query_timeout_s`` (30), ``idempotency_capacity`` (10,000),
    ``max_retries`` (2 re-dispatches)."""

    def __init__(self, rt: Runtime, trigger: RoundTrigger) -> None:
        self.rt = rt
        self.trigger = trigger
        self.query_timeout_s = 30.0
        self.idempotency_capacity = 10_000
        self.max_retries = 2
        self.queue: dict[str, Query] = {}
        self.retry: dict[str, Query] = {}
        self.inflight: dict[str, Query] = {}
        self.idem: OrderedDict[str, Query] = OrderedDict()
        self._ids = itertools.count(1)
        self.accepted = 0
        self.served = 0
        self.redispatched = 0
        self.rejected: Counter[str] = Counter()
        self.recent: deque[float] = deque(maxlen=10_000)
        # overall deadlines: a heap swept by one timer (not one timer per query)
        self.deadlines: list[tuple[float, int, str]] = []
        self._deadline_timer: asyncio.TimerHandle | None = None
        self._deadline_at = float("inf")

    # -- what waits --------------------------------------------------------------------------------
    def new_id(self) -> str:
        return f"q{next(self._ids)}"

    def waiting(self) -> Iterator[Query]:
        """The waiting queries in the order a round serves them: re-dispatched ones first."""
        return itertools.chain(self.retry.values(), self.queue.values())

    def waiting_count(self) -> int:
        return len(self.queue) + len(self.retry)

    def take_waiting(self, query_id: str) -> Query | None:
        """The waiting query ``query_id``, taken off its queue (None when it waits no more)."""
        return self.retry.pop(query_id, None) or self.queue.pop(query_id, None)

    def find(self, query_id: str) -> Query | None:
        return self.queue.get(query_id) or self.retry.get(query_id) or self.inflight.get(query_id)

    def admit(self, q: Query) -> None:
        """``q`` is accepted (counted) and waits."""
        self.accepted += 1
        self.enqueue(q)

    def enqueue(self, q: Query) -> None:
        """``q`` waits from now on, until its overall deadline at the latest."""
        self.queue[q.query_id] = q
        self._arm_deadline(q)

    # -- idempotency -------------------------------------------------------------------------------
    def recall(self, key: str) -> Query | None:
        """The query admitted earlier under idempotency ``key`` (kept as the most recent)."""
        prior = self.idem.get(key)
        if prior is not None:
            self.idem.move_to_end(key)
        return prior

    def remember(self, key: str, q: Query) -> None:
        self.idem[key] = q
        while len(self.idem) > self.idempotency_capacity:
            self.idem.popitem(last=False)

    # -- how a query ends --------------------------------------------------------------------------
    def reject(self, code: grpc.StatusCode, msg: str) -> tuple[grpc.StatusCode, str]:
        """A request refused before it was admitted, counted under its code."""
        self.rejected[code.name] += 1
        return code, msg

    def finish(self, q: Query, outcome: Outcome) -> None:
        if q.future.done():
            return
        q.inputs = []          # the payload is not needed any more (an idempotency entry may keep q)
        q.future.set_result(outcome)
        if isinstance(outcome, tuple):
            self.rejected[outcome[0].name] += 1
        else:
            self.served += 1
            self.recent.append(outcome.total_ms)

    def drop_cancelled(self, q: Query) -> None:
        """The client of ``q`` went away: it leaves the queues (its result, if it comes, is dropped)."""
        qid = q.query_id
        if self.queue.pop(qid, None) or self.retry.pop(qid, None) or self.inflight.pop(qid, None):
            q.gen += 1
            self.rejected[SC.CANCELLED.name] += 1
            q.inputs = []

    def requeue(self, q: Query, reason: str) -> None:
        """``q`` goes back to the head of the queue (the retry queue), at most ``max_retries`` times;
        then it ends with UNAVAILABLE."""
        q.attempts += 1
        q.gen += 1
        self.inflight.pop(q.query_id, None)
        if q.attempts > self.max_retries:
            self.finish(q, (SC.UNAVAILABLE, f"gave up after {q.attempts} attempts: {reason}"))
            return
        self.redispatched += 1
        self.retry[q.query_id] = q
        self.trigger.kick()

    def requeue_call(self, members: list[tuple[Query, int]], reason: str) -> None:
        """Back to the queue: the queries of a call that will not answer them, those still current."""
        for m, g in members:
            if m.gen != g:
                continue                    # requeued already, perhaps in flight elsewhere now
            if m.future.done():
                self.inflight.pop(m.query_id, None)
            else:
                self.requeue(m, reason)

    def abandon_call(self, w: WorkerState, reason: str, skip: Query | None = None) -> None:
        """``w``'s call will not answer: its queries (but ``skip``) back to the queue, the call forgotten."""
        if w.call is not None:
            self.requeue_call([m for m in w.call[0] if m[0] is not skip], reason)
        w.call = None

    def end_all(self, reason: str) -> None:
        """Every query still held ends with UNAVAILABLE (the dispatcher stops); the sweep stops."""
        for q in list(self.queue.values()) + list(self.retry.values()) + list(self.inflight.values()):
            self.finish(q, (SC.UNAVAILABLE, reason))
        self.queue.clear()
        self.retry.clear()
        self.inflight.clear()
        self.deadlines.clear()
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
            self._deadline_timer = None

    # -- overall deadlines -------------------------------------------------------------------------
    def _arm_deadline(self, q: Query) -> None:
        # the heap holds (deadline, seq, query id) only: finished queries are not kept alive by it
        heapq.heappush(self.deadlines, (q.deadline, next(self._ids), q.query_id))
        if q.deadline < self._deadline_at:
            self._schedule_sweep()

    def _schedule_sweep(self) -> None:
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
            self._deadline_timer = None
        self._deadline_at = self.deadlines[0][0] if self.deadlines else float("inf")
        if self.deadlines and self.rt.loop is not None:
            delay = max(self._deadline_at - self.rt.clock(), 0.001)
            self._deadline_timer = self.rt.loop.call_later(delay, self._sweep_deadlines)

    def _sweep_deadlines(self) -> None:
        """End every query whose overall deadline has passed (DEADLINE_EXCEEDED), then re-arm."""
        self._deadline_timer = None
        now = self.rt.clock()
        while self.deadlines and self.deadlines[0][0] <= now:
            qid = heapq.heappop(self.deadlines)[2]
            q = self.find(qid)
            if q is not None:
                self._expire(q)
        self._schedule_sweep()

    def _expire(self, q: Query) -> None:
        if q.future.done():
            return
        self.queue.pop(q.query_id, None)
        self.retry.pop(q.query_id, None)
        self.inflight.pop(q.query_id, None)
        q.gen += 1
        self.finish(q, (SC.DEADLINE_EXCEEDED, f"no result within {self.query_timeout_s:g} s"))


__all__ = ["Outcome", "Query", "QueryBook", "SC"]
