"""Calls as messages on one bidirectional gRPC stream (issue #41): the dispatcher's one
``InferStream`` per worker (:class:`dispatcher.workers.client.WorkerClient`), and a client's
``SubmitStream`` to the dispatcher (:class:`dispatcher.api.submit_client.InferenceClient`), instead
of one unary call (one HTTP/2 stream, its metadata, its deadline) each.

Each call gets an id (``call_id``); the peer answers with a result carrying it (``code``, 0 OK, and
``message``), in any order. A result for an id nobody waits for (its call timed out or was
cancelled) is dropped and counted (:attr:`CallStream.unknown`). Each call keeps its own deadline
(``timeout_ms``, and a timer here that ends the wait with DEADLINE_EXCEEDED and tells the peer to
cancel it); a caller that is cancelled tells the peer too (a message with ``cancel``). The bearer
token goes once, when the stream opens (the peer's interceptor checks it there, not per message).

A stream that ends while calls are pending (the peer died, reset the connection, or closed the
stream) ends each pending call with the stream's status (UNAVAILABLE when it ended cleanly): the
codes a failed unary call gives, so for a worker :func:`dispatcher.workers.client.is_worker_failure`
and the routing round re-dispatch each of them once, as before. A peer that does not offer the
stream answers UNIMPLEMENTED: the pending calls end with :class:`StreamUnsupported`, and the
caller sends them, and every later call, unary.

The serving side is :func:`serve_calls` (the worker's InferStream, the dispatcher's SubmitStream):
it sends :data:`ACCEPTED` as its initial metadata at once, and the caller writes only after it (a
refusal comes instead: grpc/grpc#36066 ends a write to a refused stream INTERNAL half of the time);
each call runs as its own task (as a unary call does), within its ``timeout_ms`` (DEADLINE_EXCEEDED
after it), until a ``cancel`` message for its id ends it without a result; a call refused with
:class:`Refused` gets a result with that code, what a unary call would have ended with. When the
caller half-closes the stream, the calls still running finish and the stream ends OK; when the
stream breaks, they are cancelled.

The Kairos rule (one query per worker at a time) is the routing round's: a stream carries the
calls it makes, it adds none.
"""
from __future__ import annotations

import asyncio
import itertools
from typing import Any, Awaitable, Callable

import grpc
from google.protobuf.message import Message

#: the initial metadata a peer accepting a stream sends (before it, the caller writes nothing)
ACCEPTED = ("x-costscale-stream", "accepted")
#: the worker's stream of calls (InferCall -> InferResult)
INFER_STREAM = "/costscale.v1.Worker/InferStream"
#: the dispatcher's stream of queries (SubmitCall -> SubmitResult)
SUBMIT_STREAM = "/costscale.v1.Inference/SubmitStream"
_SC_BY_VALUE = {c.value[0]: c for c in grpc.StatusCode}


class Refused(Exception):
    """A call refused with the status a unary call would end with (the serving side)."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


class StreamUnsupported(Exception):
    """The peer does not offer the stream (UNIMPLEMENTED): send the call unary."""


def rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    """A call's failure in the shape a unary call raises (``code()``, ``details()``)."""
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details=details)


def status_code(value: int) -> grpc.StatusCode:
    """The grpc.StatusCode of an ``InferResult.code`` (UNKNOWN for a value gRPC does not define)."""
    return _SC_BY_VALUE.get(value, grpc.StatusCode.UNKNOWN)


def _serialize(m: Message) -> bytes:
    return m.SerializeToString()


class CallStream:
    """One open stream of calls (see the module docstring) on ``method``: ``call_type`` messages out
    (``call_id``, ``timeout_ms``, ``cancel``), ``result_type`` back (``call_id``, ``code``,
    ``message``); ``on_end`` is told when it ends."""

    def __init__(self, channel: grpc.aio.Channel, method: str, call_type: type[Message], result_type: type[Message],
                 metadata: tuple[tuple[str, str], ...] | None, on_end: Callable[["CallStream"], None]) -> None:
        self.metadata = metadata
        self._call_type = call_type
        self._call = channel.stream_stream(method, request_serializer=_serialize,
                                           response_deserializer=result_type.FromString)(metadata=metadata)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._ids = itertools.count(1)
        self._write_lock = asyncio.Lock()
        self._on_end = on_end
        self.ended = False
        self.unknown = 0                 # results for calls nobody waits for (dropped)
        self._retired = False            # no new calls: half-closed once its pending calls are answered
        loop = asyncio.get_running_loop()
        #: True once the peer accepted the stream (its initial metadata says so), False when it ended first
        self._accepted: asyncio.Future[bool] = loop.create_future()
        self._reader = loop.create_task(self._read())

    @property
    def pending(self) -> int:
        return len(self._pending)

    async def call(self, msg: Any, timeout: float | None) -> Any:
        """Send ``msg`` (its ``call_id`` and ``timeout_ms`` set here) and await its result; raises
        grpc.aio.AioRpcError as a unary call would, or StreamUnsupported."""
        if self.ended:
            raise rpc_error(grpc.StatusCode.UNAVAILABLE, "stream closed")
        cid = next(self._ids)
        msg.call_id = cid
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        self._pending[cid] = fut
        timer = None
        if timeout is not None:
            msg.timeout_ms = timeout * 1000.0
            timer = loop.call_later(timeout, self._expire, cid)
        try:
            await self._write(msg)
            res = await fut
        except asyncio.CancelledError:
            if self._pending.pop(cid, None) is not None:      # the caller went away: the worker stops it
                self._cancel_remote(cid)
            raise
        finally:
            if timer is not None:
                timer.cancel()
        if res.code:
            raise rpc_error(status_code(res.code), res.message)
        return res

    async def _write(self, msg: Message) -> None:
        """Send ``msg`` once the peer accepted the stream. Nothing is sent to a stream that ended or
        was refused (UNIMPLEMENTED, UNAUTHENTICATED): the reader ends the call with the stream's
        status (a write to a refused stream may end it INTERNAL instead, grpc/grpc#36066), or its
        timer does."""
        try:
            async with self._write_lock:
                if await self._accepted:
                    await self._call.write(msg)
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - the stream is over: the reader ends the pending calls with its status
            self._call.cancel()

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
                await self._call.write(self._call_type(call_id=cid, cancel=True))
        except Exception:  # noqa: BLE001 - the stream is over: nothing to cancel there
            pass

    async def _read(self) -> None:
        code, details = grpc.StatusCode.UNAVAILABLE, "stream closed"
        try:
            md = await self._call.initial_metadata()
            if not self._accepted.done():
                self._accepted.set_result(any(k == ACCEPTED[0] for k, _ in md))
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
            code, details = grpc.StatusCode.CANCELLED, "channel closed"
        except Exception as exc:  # noqa: BLE001 - any failure of the stream is the peer's
            code, details = grpc.StatusCode.UNKNOWN, repr(exc)
        self._end(code, details)

    def _end(self, code: grpc.StatusCode, details: str) -> None:
        if self.ended:
            return
        self.ended = True
        if not self._accepted.done():
            self._accepted.set_result(False)
        pending, self._pending = self._pending, {}
        n = len(pending)
        for fut in pending.values():
            if fut.done():
                continue
            if code == grpc.StatusCode.UNIMPLEMENTED:
                fut.set_exception(StreamUnsupported(details))
            else:
                fut.set_exception(rpc_error(code, f"stream ended with {n} call(s) pending: {details}"))
        self._on_end(self)

    def retire(self) -> None:
        """No new calls on this stream (the token it opened with rotated out): it half-closes once
        its pending calls are answered, and the peer ends it."""
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
        self._reader.cancel()
        self._end(grpc.StatusCode.CANCELLED, "channel closed")


async def serve_calls(context: grpc.aio.ServicerContext, run_one: Callable[[Any], Awaitable[Any]],
                      result_type: type[Message]) -> None:
    """A stream handler's body (see the module docstring): read calls until the caller half-closes,
    run each with ``run_one`` (its result message, or :class:`Refused`), write each result with its
    ``call_id``."""
    tasks: dict[int, asyncio.Task[None]] = {}
    lock = asyncio.Lock()
    loop = asyncio.get_running_loop()

    async def one(call: Any) -> None:
        cid = call.call_id
        try:
            if call.timeout_ms > 0:
                async with asyncio.timeout(call.timeout_ms / 1000.0):
                    res = await run_one(call)
            else:      # no deadline: no timer either
                res = await run_one(call)
        except Refused as exc:
            res = result_type(code=exc.code.value[0], message=exc.message)
        except TimeoutError:
            res = result_type(code=grpc.StatusCode.DEADLINE_EXCEEDED.value[0], message="Deadline Exceeded")
        except asyncio.CancelledError:     # cancelled by the caller, or the stream is over
            tasks.pop(cid, None)
            raise
        except Exception as exc:  # noqa: BLE001 - what a unary handler's exception would end with
            res = result_type(code=grpc.StatusCode.UNKNOWN.value[0], message=f"{type(exc).__name__}: {exc}")
        tasks.pop(cid, None)
        res.call_id = cid
        try:
            async with lock:
                await context.write(res)
        except Exception:  # noqa: BLE001 - the stream is over: nobody to answer
            pass

    await context.send_initial_metadata((ACCEPTED,))     # the stream is accepted: the caller may write
    try:
        while True:
            call = await context.read()
            if call is grpc.aio.EOF:
                break
            if call.cancel:
                t = tasks.pop(call.call_id, None)
                if t is not None:
                    t.cancel()
                continue
            tasks[call.call_id] = loop.create_task(one(call))
        if tasks:      # half-closed: the calls still running finish and are answered
            await asyncio.gather(*tasks.values(), return_exceptions=True)
    finally:
        for t in list(tasks.values()):
            t.cancel()


__all__ = ["ACCEPTED", "Refused", "serve_calls", "CallStream", "INFER_STREAM", "SUBMIT_STREAM", "StreamUnsupported", "rpc_error", "status_code"]
