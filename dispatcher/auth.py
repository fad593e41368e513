"""Client authentication on the dispatcher's port: a server interceptor that lets a call to a
guarded service (costscale's ``Inference``, the Open Inference Protocol) through only with
``authorization: Bearer <token>`` metadata equal to the configured token, compared in constant time
(:func:`hmac.compare_digest`); any other call gets UNAUTHENTICATED before its handler runs. Worker
registration (``Control``) carries the cluster token in its request instead, and health checks and
reflection stay open (they reveal no data).

Mutual TLS needs no interceptor: grpc refuses a client without a certificate during the handshake
(:mod:`dispatcher.credentials`). The token itself is never logged or echoed.
"""
from __future__ import annotations

import hmac
import time
from typing import Awaitable, Callable, Iterable

import grpc

#: the metadata key and scheme of a bearer token (RFC 6750 §2.1; gRPC metadata keys are lower case)
AUTHORIZATION = "authorization"
BEARER = "bearer "


def bearer_metadata(token: str) -> tuple[tuple[str, str], ...]:
    """The metadata a client sends with each call."""
    return ((AUTHORIZATION, f"Bearer {token}"),)


def presented_token(metadata: Iterable[tuple[str, str | bytes]] | None) -> str | None:
    """The bearer token in a call's metadata; None when there is none."""
    for key, value in metadata or ():
        if key.lower() == AUTHORIZATION:
            text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
            if text[:len(BEARER)].lower() == BEARER:
                return text[len(BEARER):].strip()
    return None


def token_matches(presented: str | None, expected: str) -> bool:
    """Constant-time comparison (no early exit on the first differing byte)."""
    return presented is not None and hmac.compare_digest(presented.encode(), expected.encode())


#: how long a rotated-out cluster token is still accepted (s): the dispatchers and the workers read
#: the token's parameter every :data:`TOKEN_REFRESH_S`, so each side knows the new one well inside it
TOKEN_GRACE_S = 600.0
TOKEN_REFRESH_S = 60.0


class TokenRing:
    """The cluster token as it rotates (issue #27: kept in SSM Parameter Store, read again every
    :data:`TOKEN_REFRESH_S` by each dispatcher and worker). After :meth:`set` brings a new token,
    the one before it is still accepted for ``grace_s`` and still *sent* for the first half of it:
    a peer that has not read the new token yet accepts the old one (its current), and one that has
    read it accepts the old one too (its previous), so no call between two sides is refused while
    they catch up (each reads within ``grace_s / 2`` when the refresh is at most that). Comparisons
    are constant time; the token is never logged."""

    def __init__(self, token: str, grace_s: float = TOKEN_GRACE_S, clock: Callable[[], float] = time.monotonic) -> None:
        if not token:
            raise ValueError("an empty token authenticates no one")
        self.current = token
        self.previous: str | None = None
        self.grace_s = grace_s
        self.clock = clock
        self.changed_at = float("-inf")

    def set(self, token: str) -> bool:
        """The token read now; True when it is a new one (the current becomes the previous)."""
        if not token or hmac.compare_digest(token.encode(), self.current.encode()):
            return False
        self.previous, self.current, self.changed_at = self.current, token, self.clock()
        return True

    def _since(self) -> float:
        return self.clock() - self.changed_at

    def accepts(self, presented: str | None) -> bool:
        """The current token, or the previous one within the grace period."""
        if token_matches(presented, self.current):
            return True
        return self.previous is not None and self._since() < self.grace_s and token_matches(presented, self.previous)

    def outbound(self) -> str:
        """The token to present: the previous one for the first half of the grace period."""
        return self.previous if self.previous is not None and self._since() < self.grace_s / 2 else self.current


def as_ring(token: "str | TokenRing") -> TokenRing:
    return token if isinstance(token, TokenRing) else TokenRing(token)


def _refusal(handler: grpc.RpcMethodHandler, message: str) -> grpc.RpcMethodHandler:
    """A handler of the same kind as ``handler`` that ends the call with UNAUTHENTICATED."""
    async def refuse(request_or_iterator, context: grpc.aio.ServicerContext):  # type: ignore[no-untyped-def]
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

    # the body is not read (not parsed: a malformed one is refused UNAUTHENTICATED as any other, issue #40)
    kw = {"request_deserializer": None, "response_serializer": handler.response_serializer}
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(refuse, **kw)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(refuse, **kw)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(refuse, **kw)
    return grpc.unary_unary_rpc_method_handler(refuse, **kw)


class BearerTokenInterceptor(grpc.aio.ServerInterceptor):
    """Requires the bearer token on every method of the services named in ``guarded`` (full service
    names, e.g. ``costscale.v1.Inference``)."""

    def __init__(self, token: "str | TokenRing", guarded: Iterable[str]) -> None:
        self._ring = as_ring(token)          # ValueError for an empty token
        self._prefixes = tuple(f"/{s}/" for s in guarded)

    async def intercept_service(
            self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
            details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None or not details.method.startswith(self._prefixes):
            return handler
        given = presented_token(details.invocation_metadata)
        if self._ring.accepts(given):
            return handler
        why = "missing bearer token (metadata 'authorization: Bearer <token>')" if given is None else "bad bearer token"
        return _refusal(handler, why)
