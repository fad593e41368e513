"""What the parts of one dispatcher share at run time, and nothing more: the one clock, the event
loop it serves on, its background tasks, whether it is stopping, the coalesced request for a
matching round, and the matching's tunables.

Kairos §5.1 runs a matching round at every event (a query arrives, a query completes or fails, a
worker joins, leaves or starts draining, a variant finishes loading). The parts that see those
events ask for a round with :meth:`RoundTrigger.kick`; requests within one event-loop iteration
make one round, which the routing round (:mod:`dispatcher.routing`) runs.

The parts take these objects (and each other: the query book, the worker registry, placement), never
the :class:`Dispatcher` that composes them, so a shard of a dispatcher can be built from the same
parts (issue #27).
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Callable, Coroutine

from dispatcher.policy import DISPATCH_VIEW_FACTOR, DISPATCH_XI

# The routing round's tuning numbers (dispatcher.routing, dispatcher.call_outcome), one home each:
#: with several models on their own workers, a round looks this far into the queue for each
#: model's head (dispatcher.routing.RoutingRound._heads_by_model)
HEAD_SCAN = 2048
#: weight of the newest call in a worker's smoothed call overhead (an EWMA over calls)
OVERHEAD_EWMA = 0.1
#: measured service times fed to the latency model at once (RoutingRound.observe_batch's default)
OBSERVE_BATCH = 32
#: s: the longest a measurement waits for its batch (RoutingRound.observe_delay_s's default)
OBSERVE_DELAY_S = 0.05
#: s: a policy breaking its contract is logged at most once per this (with the count since)
CONTRACT_LOG_INTERVAL_S = 60.0
#: a worker call running this many times its predicted time (and at least STALL_FLOOR_S) has the
#: worker probed: a worker that stopped answering without dying (SIGSTOP, a hung host) keeps its TCP
#: connection open, so nothing else would free its queries before the health loop drops it (2-3 s)
STALL_FACTOR = 3.0
#: s: the least a call runs before its worker is probed (a fast model's calls are a few ms)
STALL_FLOOR_S = 0.25
#: s: a stalled call's worker that gives no Health reply within this is removed, its call's queries
#: re-dispatched at once (a live worker answers Health on its event loop while it computes)
STALL_PROBE_TIMEOUT_S = 0.5


class Runtime:
    """The clock, the event loop (set when the dispatcher starts), the tasks it started and its
    stopping flag (set when it stops: no new work is taken)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.loop: asyncio.AbstractEventLoop | None = None
        self.tasks: set[asyncio.Task] = set()
        self.stopping = False

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task:
        """Run ``coro`` as a task the dispatcher cancels when it stops."""
        t = self.create_task(coro)
        self.tasks.add(t)
        t.add_done_callback(self.tasks.discard)
        return t

    def create_task(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task:
        """Run ``coro`` as a task on the dispatcher's loop (the running one before start), not
        cancelled at stop (an offline job ends itself when it sees ``stopping``)."""
        return (self.loop or asyncio.get_running_loop()).create_task(coro)

    def off_loop(self) -> bool:
        """True when called from a thread other than the dispatcher's event loop."""
        if self.loop is None:
            return False
        try:
            return asyncio.get_running_loop() is not self.loop
        except RuntimeError:
            return True

    def cancel_tasks(self) -> None:
        for t in list(self.tasks):
            t.cancel()


def _no_round() -> None:
    return None


class RoundTrigger:
    """Requests for a matching round, coalesced: the first :meth:`kick` of an event-loop iteration
    schedules one round, the others wait for it. The routing round attaches itself
    (:meth:`attach`) and says when a round starts (:meth:`started`), so a kick after that start
    schedules the next one."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.pending = False
        self._round: Callable[[], None] = _no_round

    def attach(self, round_fn: Callable[[], None]) -> None:
        self._round = round_fn

    def kick(self) -> None:
        if self.pending or self.rt.loop is None:
            return
        self.pending = True
        self.rt.loop.call_soon(self._fire)

    def _fire(self) -> None:
        self._round()

    def started(self) -> None:
        self.pending = False


@dataclass
class MatchTunables:
    """The matching's tunables that admission, the routing round and SlackFit's binding read at each
    decision (settable on the Dispatcher after construction): ``xi`` (ξ, Kairos §5.1's safeguard: the
    share of a query's SLO a placement may use) and ``view_factor`` (a round looks at
    ``view_factor`` × the workers that may receive work of the oldest waiting queries)."""

    xi: float = DISPATCH_XI
    view_factor: int = DISPATCH_VIEW_FACTOR


__all__ = ["CONTRACT_LOG_INTERVAL_S", "HEAD_SCAN", "MatchTunables", "OBSERVE_BATCH", "OBSERVE_DELAY_S", "OVERHEAD_EWMA",
           "RoundTrigger", "Runtime", "STALL_FACTOR", "STALL_FLOOR_S", "STALL_PROBE_TIMEOUT_S"]
