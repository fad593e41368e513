"""A replica that owns no worker forwards each Submit to a replica that does (issue #27,
deliverable 2c).

With dispatcher replicas only as many replicas own workers as keep >= 2 base-type workers each
(``scaler.replica_owning``); the others still receive queries from the balancer. The daemon sets
:attr:`Forwarder.target` (``daemon.replica_workers``: the owning replica, by its heartbeat address,
that rule 3 of ``replica_owning`` deals this replica to) while this replica holds no worker, and
clears it otherwise. A query then goes to the target over grpc.aio with the caller's remaining
deadline and its ``authorization`` metadata, marked so that the target never forwards it again;
the target's reply or typed status is the caller's (DESIGN invariant 4: a failure of the hop is
the caller's UNAVAILABLE). While no live replica owns a worker and this one holds none (the seconds
after the owning replica died, before the owners round gives its workers to the live ones),
:attr:`Forwarder.refusal` answers UNAVAILABLE at once, as a dispatcher without workers does.
Otherwise the query is admitted here as before.

Plaintext channels only: a replica whose port has TLS (``dispatcher.tls``) does not forward.
"""
from __future__ import annotations

import grpc

from dispatcher.proto import costscale_pb2 as pb, costscale_pb2_grpc as pbg

#: metadata key on a forwarded Submit: the receiving replica admits it itself
FORWARDED = "x-costscale-forwarded"
_PASSED = ("authorization",)


class Forwarder:
    """The forwarding target and its channel, and how many queries went through it."""

    def __init__(self) -> None:
        self.target: str | None = None
        self.refusal: str | None = None     # set: answer UNAVAILABLE with it (no owner is live)
        self.forwarded = 0          # answered by the target (a reply or its typed status)
        self.failed = 0             # the hop itself failed: UNAVAILABLE to the caller
        self._channels: dict[str, grpc.aio.Channel] = {}

    def target_for(self, metadata: object) -> str | None:
        """Where a Submit with this invocation metadata goes (None: admitted here)."""
        if self.target is None:
            return None
        if any(k == FORWARDED for k, _ in (metadata or ())):   # type: ignore[attr-defined]
            return None
        return self.target

    async def handle(self, request: pb.SubmitRequest, context: grpc.aio.ServicerContext) -> pb.SubmitReply | None:
        """The answer of a Submit this replica does not admit itself (forwarded, or UNAVAILABLE
        while nobody owns a worker); None: admit it here."""
        md = context.invocation_metadata()
        if any(k == FORWARDED for k, _ in (md or ())):
            return None
        if self.refusal is not None and self.target is None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, self.refusal)
        target = self.target_for(md)
        return await self.forward(target, request, context) if target is not None else None

    def _channel(self, address: str) -> grpc.aio.Channel:
        ch = self._channels.get(address)
        if ch is None:
            ch = self._channels[address] = grpc.aio.insecure_channel(address)
        return ch

    async def forward(self, target: str, request: pb.SubmitRequest, context: grpc.aio.ServicerContext) -> pb.SubmitReply:
        """``request`` answered by ``target`` within the caller's deadline."""
        md = [(k, v) for k, v in (context.invocation_metadata() or ()) if k in _PASSED]
        md.append((FORWARDED, "1"))
        try:
            reply: pb.SubmitReply = await pbg.InferenceStub(self._channel(target)).Submit(
                request, timeout=context.time_remaining(), metadata=md)
        except grpc.aio.AioRpcError as exc:
            if exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNKNOWN):
                self.failed += 1
                await context.abort(grpc.StatusCode.UNAVAILABLE, f"forwarded to replica {target}: {exc.details()}")
            self.forwarded += 1
            await context.abort(exc.code(), exc.details() or exc.code().name)
        self.forwarded += 1
        return reply

    def stats(self) -> dict[str, int]:
        return {"forwarded": self.forwarded, "forward_failed": self.failed}

    async def close(self) -> None:
        for ch in self._channels.values():
            await ch.close()
        self._channels.clear()


__all__ = ["FORWARDED", "Forwarder"]
