"""The dispatcher's one ``InferStream`` per worker (issue #41): worker calls as messages on a
bidirectional gRPC stream instead of one unary ``Infer`` (one HTTP/2 stream, its metadata, its
deadline) each.

Each call gets an id (``InferCall.call_id``); the worker answers with an ``InferResult`` carrying it,
in any order. A result for an id nobody waits for (its call timed out or was cancelled) is dropped
and counted (:attr:`InferStream.unknown`). Each call keeps its own deadline (``timeout_ms``, and a
timer here that ends the wait with DEADLINE_EXCEEDED and tells the worker to cancel it); a caller
that is cancelled tells the worker too. The bearer token goes once, when the stream opens (the
worker's interceptor checks it there, not per message).

A stream that ends while calls are pending (the worker died, reset the connection, or closed the
stream) ends each pending call with the stream's status (UNAVAILABLE when it ended cleanly): the
same codes a failed unary call gives, so :func:`dispatcher.workers.client.is_worker_failure` and the
routing round re-dispatch each of them once, as today. A worker that does not offer the stream
answers UNIMPLEMENTED: the pending calls end with :class:`StreamUnsupported`, and the client
(:class:`dispatcher.workers.client.WorkerClient`) sends them, and every later call, unary.

The Kairos rule (one query per worker at a time) is the routing round's: the stream carries the
calls it makes, it adds none.
"""
from __future__ import annotations

import asyncio
import itertools
from typing import Callable

import grpc

from dispatcher.proto import costscale_pb2 as pb

#: the full method name of the worker's stream
METHOD = "/costscale.v1.Worker/InferStream"
_SC_BY_VALUE = {c.value[0]: c for c in grpc.StatusCode}


class StreamUnsupported(Exception):
    """The worker does not offer InferStream (UNIMPLEMENTED): send the call unary."""


def rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    """A call's failure in the shape a unary call raises (``code()``, ``details()``)."""
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details=details)


def status_code(value: int) -> grpc.StatusCode:
    """The grpc.StatusCode of an ``InferResult.code`` (UNKNOWN for a value gRPC does not define)."""
    return _SC_BY_VALUE.get(value, grpc.StatusCode.UNKNOWN)


def _serialize(m: pb.InferCall) -> bytes:
    return m.SerializeToString()


class InferStream:
    """One open InferStream to a worker (see the module docstring); ``on_end`` is told when it ends."""

    def __init__(self, channel: grpc.aio.Channel, metadata: tuple[tuple[str, str], ...] | None,
                 on_end: Callable[["InferStream"], None]) -> None:
        self.metadata = metadata
        self._call = channel.stream_stream(METHOD, request_serializer=_serialize,
                                           response_deserializer=pb.InferResult.FromString)(metadata=metadata)
        self._pending: dict[int, asyncio.Future[pb.InferResult]] = {}
        self._ids = itertools.count(1)
        self._write_lock = asyncio.Lock()
        self._on_end = on_end
        self.ended = False
        self.unknown = 0                 # results for calls nobody waits for (dropped)
        self._retired = False            # no new calls: half-closed once its pending calls are answered
        self._reader = asyncio.get_running_loop().create_task(self._read())

    @property
    def pending(self) -> int:
        return len(self._pending)

    async def call(self, msg: pb.InferCall, timeout: float) -> pb.InferResult:
        """Send ``msg`` (its ``call_id`` and ``timeout_ms`` set here) and await its result; raises
        grpc.aio.AioRpcError as a unary call would, or StreamUnsupported."""
        if self.ended:
            raise rpc_error(grpc.StatusCode.UNAVAILABLE, "worker stream closed")
        cid = next(self._ids)
        msg.call_id = cid
        msg.timeout_ms = timeout * 1000.0
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[pb.InferResult] = loop.create_future()
        self._pending[cid] = fut
        timer = loop.call_later(timeout, self._expire, cid)
        try:
            await self._write(msg)
            res = await fut
        except asyncio.CancelledError:
            if self._pending.pop(cid, None) is not None:      # the caller went away: the worker stops it
                self._cancel_remote(cid)
            raise
        finally:
            timer.cancel()
        if res.code:
            raise rpc_error(status_code(res.code), res.message)
        return res

    async def _write(self, msg: pb.InferCall) -> None:
        try:
            async with self._write_lock:
                await self._call.write(msg)
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - the stream is over: its reader ends the pending calls with its status
            await self._reader_done()

    async def _reader_done(self) -> None:
        await asyncio.shield(self._reader)

    def _expire(self, cid: int) -> None:
        fut = self._pending.pop(cid, None)
        if fut is not None and not fut.done():
            fut.set_exception(rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded"))
            self._cancel_remote(cid)
        self._maybe_half_close()

    def _cancel_remote(self, cid: int) -> None:
        if not self.ended:
            asyncio.get_running_loop().create_task(self._send_cancel(cid))

    async def _send_cancel(self, cid: int) -> None:
        try:
            async with self._write_lock:
                await self._call.write(pb.InferCall(call_id=cid, cancel=True))
        except Exception:  # noqa: BLE001 - the stream is over: nothing to cancel there
            pass

    async def _read(self) -> None:
        code, details = grpc.StatusCode.UNAVAILABLE, "worker stream closed"
        try:
            while True:
                res = await self._call.read()
                if res is grpc.aio.EOF:
                    break
                fut = self._pending.pop(res.call_id, None)
                if fut is None or fut.done():
                    self.unknown += 1
                    continue
                fut.set_result(res)
                if self._retired:
                    self._maybe_half_close()
        except grpc.aio.AioRpcError as exc:
            code, details = exc.code(), exc.details() or ""
        except asyncio.CancelledError:
            code, details = grpc.StatusCode.CANCELLED, "worker channel closed"
        except Exception as exc:  # noqa: BLE001 - any failure of the stream is the worker's
            code, details = grpc.StatusCode.UNKNOWN, repr(exc)
        self._end(code, details)

    def _end(self, code: grpc.StatusCode, details: str) -> None:
        self.ended = True
        pending, self._pending = self._pending, {}
        n = len(pending)
        for fut in pending.values():
            if fut.done():
                continue
            if code == grpc.StatusCode.UNIMPLEMENTED:
                fut.set_exception(StreamUnsupported(details))
            else:
                fut.set_exception(rpc_error(code, f"worker stream ended with {n} call(s) pending: {details}"))
        self._on_end(self)

    def retire(self) -> None:
        """No new calls on this stream (the token it opened with rotated out): it half-closes once
        its pending calls are answered, and the worker ends it."""
        self._retired = True
        self._maybe_half_close()

    def _maybe_half_close(self) -> None:
        if self._retired and not self._pending and not self.ended:
            asyncio.get_running_loop().create_task(self._half_close())

    async def _half_close(self) -> None:
        try:
            async with self._write_lock:
                await self._call.done_writing()
        except Exception:  # noqa: BLE001 - already over
            pass

    def close(self) -> None:
        """End the stream now (the channel closes): pending calls end CANCELLED."""
        self._call.cancel()


__all__ = ["InferStream", "METHOD", "StreamUnsupported", "rpc_error", "status_code"]
