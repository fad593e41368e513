"""The worker's side of ``InferStream`` (issue #41): the dispatcher's calls as messages on one
bidirectional stream, each answered by its ``call_id`` when it is done (in any order).

Each call runs as its own task (as a unary ``Infer`` does), so the worker's one-query-at-a-time lock
(Kairos §5.1) orders them as before; a call's ``timeout_ms`` ends it with DEADLINE_EXCEEDED, and a
``cancel`` message for its id ends it without a result (the dispatcher stopped waiting). A call the
worker refuses (:class:`InferRefused`: NOT_FOUND, INVALID_ARGUMENT, ...) gets a result with that
code, what a unary call would have ended with. When the dispatcher half-closes the stream, the
calls still running finish and the stream ends OK; when the stream breaks, they are cancelled.

The bearer token was checked once, when the stream opened (the worker's interceptor).
"""
from __future__ import annotations

import asyncio
from typing import Awaitable, Callable

import grpc

from dispatcher.proto import costscale_pb2 as pb

#: one call of the stream: its result (code 0), or InferRefused
InferOne = Callable[[pb.InferCall], Awaitable[pb.InferResult]]


class InferRefused(Exception):
    """A call the worker refuses, with the status a unary Infer would end with."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


def refused_result(code: grpc.StatusCode, message: str) -> pb.InferResult:
    return pb.InferResult(code=code.value[0], message=message)


async def serve_infer_stream(context: grpc.aio.ServicerContext, infer_one: InferOne) -> None:
    """The InferStream handler's body: read calls until the dispatcher half-closes, run each, write
    each result (see the module docstring)."""
    tasks: dict[int, asyncio.Task[None]] = {}
    lock = asyncio.Lock()
    loop = asyncio.get_running_loop()

    async def one(call: pb.InferCall) -> None:
        cid = call.call_id
        try:
            async with asyncio.timeout(call.timeout_ms / 1000.0 if call.timeout_ms > 0 else None):
                res = await infer_one(call)
        except InferRefused as exc:
            res = refused_result(exc.code, exc.message)
        except TimeoutError:
            res = refused_result(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")
        except asyncio.CancelledError:     # cancelled by the dispatcher, or the stream is over
            tasks.pop(cid, None)
            raise
        except Exception as exc:  # noqa: BLE001 - what a unary handler's exception would end with
            res = refused_result(grpc.StatusCode.UNKNOWN, f"{type(exc).__name__}: {exc}")
        tasks.pop(cid, None)
        res.call_id = cid
        try:
            async with lock:
                await context.write(res)
        except Exception:  # noqa: BLE001 - the stream is over: nobody to answer
            pass

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


__all__ = ["InferOne", "InferRefused", "refused_result", "serve_infer_stream"]
