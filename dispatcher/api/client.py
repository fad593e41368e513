"""The Python client of the dispatcher's ``Inference`` service for asyncio programs (the demos'
load, the benchmarks, a high-rate client): a unary ``submit`` and, for high rates, ``stream``, which
sends the query on the client's one ``SubmitStream`` (issue #41: one HTTP/2 stream for all its
queries, the bearer token sent once when it opens; each query with its own deadline, answered by
its id in any order).

Both answer the same way: the ``SubmitReply``, or ``grpc.aio.AioRpcError`` with the code a unary
Submit ends with (the same admission, SLO policy and auth). A dispatcher without SubmitStream
(UNIMPLEMENTED: one from before issue #41) gets the query, and every later one, unary. A stream
that breaks ends each query on it with UNAVAILABLE (or the stream's code): a retry is the caller's,
as for a unary call.

::

    async with grpc.aio.insecure_channel("127.0.0.1:50051") as ch:
        client = InferenceClient(ch, token=None)
        reply = await client.stream(pb.SubmitRequest(model="rm2", batch_size=4), timeout=1.0)
"""
from __future__ import annotations

import grpc

from dispatcher.auth import bearer_metadata
from dispatcher.call_stream import SUBMIT_STREAM, CallStream, StreamUnsupported
from dispatcher.proto import costscale_pb2 as pb, costscale_pb2_grpc as pbg


class InferenceClient:
    """Queries to one dispatcher over ``channel`` (its TLS is the channel's), with ``token`` as the
    bearer token when given (``dispatcher.auth_token_file``)."""

    def __init__(self, channel: grpc.aio.Channel, token: str | None = None) -> None:
        self._channel = channel
        self._stub = pbg.InferenceStub(channel)
        self.metadata = bearer_metadata(token) if token else None
        self._stream: CallStream | None = None
        self.streams = True            # False once the dispatcher answered UNIMPLEMENTED

    async def submit(self, request: pb.SubmitRequest, timeout: float | None = None) -> pb.SubmitReply:
        """One unary Submit."""
        return await self._stub.Submit(request, timeout=timeout, metadata=self.metadata)

    async def stream(self, request: pb.SubmitRequest, timeout: float | None = None) -> pb.SubmitReply:
        """The query on this client's SubmitStream (opened on first use, again after it ended)."""
        if self.streams:
            s = self._stream
            if s is None or s.ended:
                s = self._stream = CallStream(self._channel, SUBMIT_STREAM, pb.SubmitCall, pb.SubmitResult,
                                              self.metadata, self._ended)
            try:
                return (await s.call(pb.SubmitCall(request=request), timeout)).reply
            except StreamUnsupported:
                self.streams = False
        return await self.submit(request, timeout)

    def _ended(self, s: CallStream) -> None:
        if self._stream is s:
            self._stream = None

    @property
    def unknown_results(self) -> int:
        """Results of the open stream for queries nobody waited for any more (timed out, cancelled)."""
        return self._stream.unknown if self._stream is not None else 0

    async def close(self) -> None:
        """Half-close the stream: the queries on it are still answered, then it ends."""
        if self._stream is not None:
            self._stream.retire()


__all__ = ["InferenceClient"]
