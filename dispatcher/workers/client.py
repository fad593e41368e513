"""Client side of the ``Worker`` service: one persistent grpc.aio channel per worker.

The dispatcher calls ``Infer`` (one query at a time per worker, Kairos §6), ``Health``, and
``LoadVariant``/``UnloadVariant`` (the model loop's placements). ``Infer`` goes over one
``InferStream`` per worker (:mod:`dispatcher.call_stream`, issue #41), or unary where the
worker does not offer it (or ``streams`` is off). Errors
surface as ``grpc.aio.AioRpcError``; :func:`is_worker_failure` says which codes mean the worker is
gone (its query is then re-dispatched elsewhere).
"""
from __future__ import annotations

import time

import grpc

from dispatcher.auth import TokenRing, as_ring, bearer_metadata
from dispatcher.credentials import PLAINTEXT, WorkerChannelSecurity
from dispatcher.proto import costscale_pb2 as pb, costscale_pb2_grpc as pbg
from dispatcher.call_stream import INFER_STREAM, CallStream, StreamUnsupported

# codes after which we consider the worker dead (connection refused / reset / server shut down)
WORKER_FAILURE_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED, grpc.StatusCode.UNKNOWN})

_OPTIONS = [
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1_000),
]


def _serialize(m: "pb.InferCall | pb.InferRequest") -> bytes:
    return m.SerializeToString()


def is_worker_failure(code: grpc.StatusCode | None) -> bool:
    return code in WORKER_FAILURE_CODES


class WorkerClient:
    """A persistent channel to one worker at ``address`` (HOST:PORT): TLS when ``security`` has
    credentials (``dispatcher.worker_tls``), and the cluster token, when there is one, as a bearer
    token on every call (a worker started with a token refuses calls without it). ``streams``: Infer
    over the worker's InferStream while it offers one (False: always unary)."""

    #: channels opened and not closed yet, in this process (the daemon's /metrics shows it: issue #40's soak)
    open_channels = 0

    def __init__(self, address: str, security: WorkerChannelSecurity = PLAINTEXT,
                 token: "str | TokenRing | None" = None, streams: bool = True) -> None:
        self.address = address
        options = _OPTIONS + list(security.options())
        if security.credentials is not None:
            self._channel = grpc.aio.secure_channel(address, security.credentials, options=options)
        else:
            self._channel = grpc.aio.insecure_channel(address, options=options)
        self._stub = pbg.WorkerStub(self._channel)
        self._ring = as_ring(token) if token else None      # the cluster token as it rotates
        self._sent: tuple[str, tuple[tuple[str, str], ...]] | None = None   # (token, its metadata), built once
        self.closed = False
        WorkerClient.open_channels += 1
        self.streams = streams              # False once the worker answered UNIMPLEMENTED
        self._stream: CallStream | None = None
        # unary Infer of a message that may be an InferCall (InferRequest's fields, same numbers)
        self._unary_infer = self._channel.unary_unary(
            "/costscale.v1.Worker/Infer", request_serializer=_serialize, response_deserializer=pb.InferReply.FromString)

    @property
    def _metadata(self) -> tuple[tuple[str, str], ...] | None:
        """The bearer metadata of every call: rebuilt only when the token presented changes."""
        if self._ring is None:
            return None
        token = self._ring.outbound()
        if self._sent is None or self._sent[0] != token:
            self._sent = (token, bearer_metadata(token))
        return self._sent[1]

    async def infer(self, request: "pb.InferCall | pb.InferRequest", timeout: float) -> "pb.InferResult | pb.InferReply":
        """One worker call: on the stream (an InferResult) or unary (an InferReply), the same fields."""
        timeout = max(timeout, 0.001)
        md = self._metadata
        if self.streams:
            if not isinstance(request, pb.InferCall):
                request = pb.InferCall.FromString(request.SerializeToString())
            t0 = time.monotonic()
            try:
                return await self._open_stream(md).call(request, timeout)
            except StreamUnsupported:
                self.streams = False      # the worker has no stream: unary from now on, within what is left
                timeout = max(timeout - (time.monotonic() - t0), 0.001)
        return await self._unary_infer(request, timeout=timeout, metadata=md)

    def _open_stream(self, md: tuple[tuple[str, str], ...] | None) -> CallStream:
        """The stream for calls presenting ``md``: a new one when there is none, it ended, or the
        token changed (the old one finishes its calls and closes: the token is checked at open)."""
        s = self._stream
        if s is not None and not s.ended and s.metadata is md:
            return s
        if s is not None and not s.ended:
            s.retire()
        s = self._stream = CallStream(self._channel, INFER_STREAM, pb.InferCall, pb.InferResult, md, self._stream_ended)
        return s

    def _stream_ended(self, s: CallStream) -> None:
        if self._stream is s:
            self._stream = None

    async def health(self, timeout: float) -> pb.HealthReply:
        return await self._stub.Health(pb.HealthRequest(), timeout=max(timeout, 0.001), metadata=self._metadata)

    async def load_variant(self, request: pb.VariantRequest, timeout: float) -> pb.VariantReply:
        return await self._stub.LoadVariant(request, timeout=max(timeout, 0.001), metadata=self._metadata)

    async def unload_variant(self, request: pb.VariantRequest, timeout: float) -> pb.VariantReply:
        return await self._stub.UnloadVariant(request, timeout=max(timeout, 0.001), metadata=self._metadata)

    async def close(self) -> None:
        if not self.closed:
            self.closed = True
            WorkerClient.open_channels -= 1
            if self._stream is not None:
                self._stream.close()
            await self._channel.close(grace=None)
