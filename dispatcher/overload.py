"""Overload: a query the dispatcher cannot take in time is refused at once, typed and counted,
before gRPC's core cancels it unseen (issue #40: the soak's 0.33 % CANCELLED).

Where that CANCELLED came from. gRPC Python's asyncio server takes calls from gRPC's core one at a
time per method (``grpc._cython`` ``AioServer``: request a call, await it, start its handler, request
the next), and each take costs the event loop a few of its iterations. Offered more than that, the
core holds the calls that arrive in its pending queue (``src/core/server/server.cc``,
``RealRequestMatcher::MatchOrQueue``). Past ``grpc.server.max_pending_requests`` calls waiting
(default 1000) it drops new ones at random, and past ``grpc.server.max_pending_requests_hard_limit``
(default 3000) every one (``pending_backlog_protector_``, random early detection): it ends them
CANCELLED (``FailCallCreation`` -> ``KillZombie``), 0.1-0.3 ms after they arrive, before any handler
runs, so the dispatcher neither answers them with a status of its own nor counts them.
``maximum_concurrent_rpcs`` does not help: the asyncio server enforces it by taking no call from the
core while that many run, so the excess waits in the same queue.

What this module does instead. :class:`CoreBacklog` knows how many calls wait in that queue:
channelz's counts for the dispatcher's server (calls started less calls succeeded and failed: every
call the core holds) less the calls a handler holds (counted by this interceptor, the first of the
port: from the moment the server takes a call until the task serving it ends), and about how long
they wait (that count over the rate the server took calls at while calls waited: Little's law).
:class:`dispatcher.admission.Admission` refuses a query it takes with RESOURCE_EXHAUSTED
"dispatcher overloaded" at once, counted as every outcome (``costscale_queries_total``), while
more than ``dispatcher.overload_pending_calls`` calls wait (default 1000, the core's own soft
limit), or, for a query its SLO may drop (``on_deadline: drop``), while 64 or more wait longer than
half its SLO (a query taken then is answered late; the SLO rule of :mod:`dispatcher.routing` sees only
its wait inside the dispatcher). A refusal costs the loop less than a served query, so the server
takes calls faster than they arrive and the queue drains before the core's own limit, which
``dispatcher.max_pending_calls`` sets (both of the core's limits, default 3000: no random drop
below it). Offered more than the dispatcher can even refuse (a refusal still pays gRPC's per-call
cost: ``bench/faults/overload_bench.py``), the queue still grows to that limit and the core cancels
past it: run more dispatcher capacity (processes, replicas) than the offered rate needs.

Channelz is read through ``grpc._cython.cygrpc`` (what the ``grpcio-channelz`` service itself
calls), at most every ``sample_s``: where it is missing or off (``grpc.enable_channelz`` 0) the
backlog reads 0 and nothing is refused for it (the log says so once).
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any, Awaitable, Callable

import grpc

log = logging.getLogger(__name__)

#: how often the core's counts are read at most (s): a read costs about 0.1 ms
SAMPLE_S = 0.005
#: the span over which the rate the server takes calls at is measured, while calls wait (s)
RATE_WINDOW_S = 0.02
#: a query is refused when calls wait longer than this share of its SLO in gRPC (``on_deadline: drop``)
SLO_SHARE = 0.5
#: ... and at least this many wait: fewer are calls in transit, or a burst the server clears in tens of
#: ms, and while the server is not kept busy the rate it takes calls at understates what it can take
WAIT_FLOOR_CALLS = 64


def _cygrpc() -> Any:
    try:
        from grpc._cython import cygrpc
    except ImportError:          # pragma: no cover - every grpcio wheel has it
        return None
    return cygrpc if hasattr(cygrpc, "channelz_get_server") else None


def server_ids() -> set[int]:
    """The channelz ids of this process's gRPC servers (empty when channelz cannot be read)."""
    cz = _cygrpc()
    if cz is None:
        return set()
    ids: set[int] = set()
    start = 0
    while True:
        page = json.loads(cz.channelz_get_servers(start))
        got = [int(s["ref"]["serverId"]) for s in page.get("server", [])]
        ids.update(got)
        if page.get("end", True) or not got:
            return ids
        start = max(got) + 1


def server_options(max_pending_calls: int) -> list[tuple[str, int]]:
    """The core's pending-call limits, both at ``max_pending_calls`` (no random drop below it)."""
    return [("grpc.server.max_pending_requests", max_pending_calls),
            ("grpc.server.max_pending_requests_hard_limit", max_pending_calls)]


class CoreBacklog(grpc.aio.ServerInterceptor):
    """Calls gRPC's core holds that no handler has taken yet and about how long they wait (see the
    module docstring), and the refusal of a query while more than ``limit`` wait or they wait too long
    for its SLO (:meth:`refusal`)."""

    def __init__(self, limit: int, clock: Callable[[], float] = time.monotonic, sample_s: float = SAMPLE_S) -> None:
        self.limit = limit
        self.clock = clock
        self.sample_s = sample_s
        #: calls a handler holds: taken from the core, their task not ended
        self.taken = 0
        #: calls taken since the start
        self.taken_total = 0
        #: queries refused for the backlog
        self.refused = 0
        #: the most calls seen waiting at once
        self.peak = 0
        self._server_id: int | None = None
        self._read_at = float("-inf")
        self._pending = 0
        #: calls taken per second while calls waited (smoothed); 0: not measured yet
        self._rate = 0.0
        self._mark = (float("-inf"), 0)   # (time, taken_total) at the start of the rate's window

    def follow(self, build: Callable[[], grpc.aio.Server]) -> grpc.aio.Server:
        """The server ``build`` makes, whose calls this reads from now on: the one channelz server
        that is new after it (none or several: nothing is read, and the log says so once)."""
        known = server_ids()
        server = build()
        new = server_ids() - known
        if len(new) == 1:
            self._server_id = new.pop()
        else:
            log.warning("overload: cannot read gRPC's pending calls (channelz: %s new servers); "
                        "dispatcher.overload_pending_calls is not applied", len(new))
        return server

    async def intercept_service(
            self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
            details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        task = asyncio.current_task()
        if task is not None:         # the task serving this call: it ends once its status is sent
            self.taken += 1
            self.taken_total += 1
            task.add_done_callback(self._ended)
        return await continuation(details)

    def _ended(self, _task: asyncio.Task[Any]) -> None:
        self.taken -= 1

    def held(self) -> int | None:
        """Every call the core holds for the server followed (channelz: started less succeeded and
        failed), or None when it cannot be read (none followed; channelz gone: not read again)."""
        if self._server_id is None:
            return None
        try:
            data = json.loads(_cygrpc().channelz_get_server(self._server_id))["server"]["data"]
        except Exception as exc:  # noqa: BLE001 - the server gone, or channelz changed: stop reading it
            log.warning("overload: channelz stopped answering (%s); dispatcher.overload_pending_calls "
                        "no longer applied", exc)
            self._server_id = None
            return None
        return int(data.get("callsStarted", 0)) - int(data.get("callsSucceeded", 0)) - int(data.get("callsFailed", 0))

    def pending(self) -> int:
        """Calls waiting in the core for a handler, read at most every ``sample_s``."""
        now = self.clock()
        if now - self._read_at < self.sample_s:
            return self._pending
        self._read_at = now
        held = self.held()
        if held is None:
            self._pending = 0
            return 0
        waited = self._pending > 0
        self._pending = max(0, held - self.taken)
        self.peak = max(self.peak, self._pending)
        t0, n0 = self._mark
        if not waited:                       # calls wait from now on (or still none): the window starts here
            self._mark = (now, self.taken_total)
        elif now - t0 >= RATE_WINDOW_S:      # calls waited through the window: the server took them as fast as it can
            rate = (self.taken_total - n0) / (now - t0)
            self._rate = rate if self._rate <= 0 else 0.5 * (self._rate + rate)
            self._mark = (now, self.taken_total)
        return self._pending

    def wait_s(self) -> float:
        """About how long a call arriving now waits in the core for a handler (s): the calls waiting
        over the rate the server took calls at while calls waited (Little's law); 0 before that
        rate is measured."""
        n = self.pending()
        return n / self._rate if n and self._rate > 0 else 0.0

    def refusal(self, slo_s: float | None = None) -> str | None:
        """Why a query taken now is refused (RESOURCE_EXHAUSTED), or None: it is not. Refused while
        more than ``limit`` calls wait, or, given its SLO ``slo_s`` (a query its SLO may drop), while
        at least :data:`WAIT_FLOOR_CALLS` wait longer than :data:`SLO_SHARE` of it (a query taken then
        is served late)."""
        n = self.pending()
        if n > self.limit:
            why = f"{n} calls wait in gRPC for a handler (dispatcher.overload_pending_calls {self.limit})"
        elif slo_s is not None and n >= WAIT_FLOOR_CALLS and (w := self.wait_s()) > SLO_SHARE * slo_s:
            why = f"calls wait about {1000 * w:.0f} ms in gRPC for a handler, over half its {1000 * slo_s:g} ms SLO"
        else:
            return None
        self.refused += 1
        return f"dispatcher overloaded: {why}; retry later or on another replica"


__all__ = ["RATE_WINDOW_S", "SAMPLE_S", "SLO_SHARE", "WAIT_FLOOR_CALLS", "CoreBacklog", "server_ids", "server_options"]
