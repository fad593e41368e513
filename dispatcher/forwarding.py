"""A replica that owns no worker forwards each Submit to a replica that does (issue #27,
deliverable 2c).

With dispatcher replicas only as many replicas own workers as keep >= 2 base-type workers each
(``scaler.replicas.owning_replicas``); the others still receive queries from the balancer. The daemon sets
:attr:`Forwarder.targets` (``daemon.replicas.shared_workers``: the owning replicas, by their heartbeat addresses,
that rule 3 of ``replica_owning`` deals this replica to) while this replica holds no worker, and
clears them otherwise. A query then goes to the next target in turn over grpc.aio (the others if
its hop fails), with the caller's remaining
deadline and its ``authorization`` metadata, marked so that the target never forwards it again;
the target's reply or typed status is the caller's.

When the hop itself fails (the target died: connection refused or reset) or no live replica owns
a worker (:attr:`Forwarder.refusal`: the seconds after the owning replica died, before its workers
move), the query is **held** and tried again every ``HOLD_STEP_S`` within the caller's deadline
(``HOLD_MAX_S`` without one): to the target then in force, or here once this replica owns workers
(the target cleared). So a failover costs the queries that reach a survivor latency, not an error,
as a worker that dies has its queries re-dispatched (DESIGN invariant 4); only a deadline too short
for the next try ends the query with UNAVAILABLE (its last reason), which a client retries. A query
whose hop failed after it was sent may have run on the dead replica's worker: it runs again here,
and is answered once. A held query is admitted **best effort** (here, or at the target: ``HELD``
in its metadata): its wait was the failover's, so ``on_deadline: drop`` does not refuse it for an
SLO it can no longer meet; it is served late rather than failed. Otherwise the query is admitted here as before.

Plaintext channels only: a replica whose port has TLS (``dispatcher.tls``) does not forward.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Callable

import grpc

from dispatcher.proto import costscale_pb2 as pb, costscale_pb2_grpc as pbg

#: metadata key on a forwarded Submit: the receiving replica admits it itself
FORWARDED = "x-costscale-forwarded"
_PASSED = ("authorization",)
#: seconds between the tries of a held query (module docstring)
HOLD_STEP_S = 0.25
#: the longest a query the caller gave no deadline is held (s)
HOLD_MAX_S = 30.0


#: metadata key on a forwarded Submit that was held (a failed hop, or no live owner): admitted best effort
HELD = "x-costscale-held"


@dataclass(frozen=True)
class Handled:
    """What :meth:`Forwarder.handle` did with a Submit: ``reply`` (the target's answer), or None:
    admit it here, with its arrival ``counted`` already in a replica's demand windows or not, and
    ``held`` (through a failover, here or at the replica that forwarded it: admitted best effort)."""

    reply: pb.SubmitReply | None = None
    counted: bool = False
    held: bool = False


class _HopFailed(Exception):
    """The hop to the target failed (UNAVAILABLE, UNKNOWN): the target is gone or unreachable."""


class Forwarder:
    """The forwarding target and its channel, and how many queries went through it."""

    def __init__(self) -> None:
        #: the owning replicas' addresses, queries sent to each in turn (empty: admit here)
        self.targets: tuple[str, ...] = ()
        self._turn = 0
        self.refusal: str | None = None     # set: answer UNAVAILABLE with it (no owner is live)
        self.forwarded = 0          # answered by the target (a reply or its typed status)
        self.failed = 0             # hops that failed (the target gone): the query held and tried again
        self.held = 0               # queries held at least once (a failed hop, or no live owner)
        #: told the target of each failed hop (``daemon.replicas.role``: is that replica's process gone?)
        self.on_hop_failed: Callable[[str], None] | None = None
        #: counts a query this replica forwards or holds in its demand windows (``Dispatcher.record_arrival``)
        self.on_arrival: Callable[[pb.SubmitRequest], bool] | None = None
        self._channels: dict[str, grpc.aio.Channel] = {}

    def _order(self) -> tuple[str, ...]:
        """The targets from the next one's turn on: each query starts one target further, and
        tries the others when its hop fails."""
        t = self.targets
        if not t:
            return ()
        i = self._turn % len(t)
        self._turn += 1
        return t[i:] + t[:i]

    async def handle(self, request: pb.SubmitRequest, context: grpc.aio.ServicerContext) -> Handled:
        """The answer of a Submit this replica does not admit itself (forwarded, or held while the
        target is gone or no owner is live), or what to admit here (module docstring), with
        whether its arrival is counted already in a replica's demand windows (a forwarded one by
        the replica it arrived at; one this replica forwarded or held, here by :attr:`on_arrival`),
        so that the replicas' windows, summed by the lease holder, count each query once and a
        replica's own arrivals stay in its window when the replica it forwarded to dies."""
        md = context.invocation_metadata() or ()
        if any(k == FORWARDED for k, _ in md):
            return Handled(counted=True, held=any(k == HELD for k, _ in md))
        start = time.monotonic()
        held = counted = False
        while True:
            targets, refusal = self._order(), self.refusal
            if not targets and refusal is None:
                return Handled(counted=counted, held=held)
            if not counted and self.on_arrival is not None:
                counted = self.on_arrival(request)
            reason = refusal or ""
            for target in targets:     # the next owner in turn, then the others if its hop fails
                try:
                    return Handled(await self.forward(target, request, context, held), counted, held)
                except _HopFailed as exc:
                    reason = str(exc)
            left = context.time_remaining()
            budget = HOLD_MAX_S - (time.monotonic() - start) if left is None else left
            if budget <= 2 * HOLD_STEP_S:    # no time left for another try: the caller may retry elsewhere
                await context.abort(grpc.StatusCode.UNAVAILABLE, reason)
            if not held:
                held = True
                self.held += 1
            await asyncio.sleep(HOLD_STEP_S)

    def _channel(self, address: str) -> grpc.aio.Channel:
        ch = self._channels.get(address)
        if ch is None:
            ch = self._channels[address] = grpc.aio.insecure_channel(address)
        return ch

    async def forward(self, target: str, request: pb.SubmitRequest, context: grpc.aio.ServicerContext,
                      held: bool = False) -> pb.SubmitReply:
        """``request`` answered by ``target`` within the caller's deadline (``held``: it was held
        here first, so the target admits it best effort)."""
        md = [(k, v) for k, v in (context.invocation_metadata() or ()) if k in _PASSED]
        md.append((FORWARDED, "1"))
        if held:
            md.append((HELD, "1"))
        try:
            reply: pb.SubmitReply = await pbg.InferenceStub(self._channel(target)).Submit(
                request, timeout=context.time_remaining(), metadata=md)
        except grpc.aio.AioRpcError as exc:
            if exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNKNOWN):
                self.failed += 1
                if self.on_hop_failed is not None:
                    self.on_hop_failed(target)
                raise _HopFailed(f"forwarded to replica {target}: {exc.details()}") from None
            self.forwarded += 1
            await context.abort(exc.code(), exc.details() or exc.code().name)
        self.forwarded += 1
        return reply

    def stats(self) -> dict[str, int]:
        return {"forwarded": self.forwarded, "forward_failed": self.failed, "forward_held": self.held}

    async def close(self) -> None:
        for ch in self._channels.values():
            await ch.close()
        self._channels.clear()


__all__ = ["FORWARDED", "Forwarder", "HELD", "Handled"]
