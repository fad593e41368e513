"""A request body that is not its method's protobuf message is answered INVALID_ARGUMENT (issue #40,
fault (f): the port flooded with malformed requests).

gRPC Python parses a request with the method's deserializer before the handler runs, and a parse
error there ends the call UNKNOWN and logs a traceback per call: an untyped answer, and a log any
client can fill. :class:`MalformedIsInvalidArgument`, a server interceptor on every service of the
dispatcher's port, takes each unary request as bytes and parses it itself: a body that does not
parse ends INVALID_ARGUMENT in one short detail, nothing logged. It runs after client
authentication (``dispatcher.auth``), whose refusal reads no body: an unauthenticated caller's bytes
are never parsed. Streaming requests (reflection) and a body over ``grpc.max_receive_message_length``
(RESOURCE_EXHAUSTED, refused by gRPC before any handler) are left as they are.
"""
from __future__ import annotations

import inspect
from typing import Any, Awaitable, Callable

import grpc


class MalformedIsInvalidArgument(grpc.aio.ServerInterceptor):
    """Every unary-request handler parses its own bytes: a parse error is INVALID_ARGUMENT."""

    async def intercept_service(
            self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
            details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None or handler.request_streaming or handler.request_deserializer is None:
            return handler
        return parsing_handler(handler, details.method)


def parsing_handler(handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
    """``handler`` taking raw bytes: parsed by its own deserializer, INVALID_ARGUMENT when they do not
    parse."""
    parse = handler.request_deserializer
    refusal = f"malformed request body for {method}: not its protobuf message"

    async def parsed(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
        try:
            request = parse(raw)
        except Exception:  # noqa: BLE001 - protobuf's DecodeError, or any other parse failure
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, refusal)
        return request

    kw = {"request_deserializer": None, "response_serializer": handler.response_serializer}
    if handler.response_streaming:
        inner_stream = handler.unary_stream

        async def stream(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
            out = inner_stream(await parsed(raw, context), context)
            if inspect.isasyncgen(out):
                async for item in out:
                    yield item
            elif inspect.isawaitable(out):
                await out
        return grpc.unary_stream_rpc_method_handler(stream, **kw)
    inner = handler.unary_unary

    async def unary(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
        out = inner(await parsed(raw, context), context)
        return await out if inspect.isawaitable(out) else out
    return grpc.unary_unary_rpc_method_handler(unary, **kw)


__all__ = ["MalformedIsInvalidArgument", "parsing_handler"]
