"""When a registered worker registers again: after hearing from no dispatcher for a while.

A worker registers once through its ``--dispatcher`` address (with replicas, the balancer in front
of them, README "High availability: replicas"). The replica that accepted it then calls it: a
health check every ``health_interval_s`` (:data:`dispatcher.workers.registry.HEALTH_INTERVAL_S`, 1 s), its
queries, its variant loads. When the worker hears none of these for :data:`REJOIN_AFTER_S`
(3 × that interval: the registry itself drops a worker after two failed checks), the replica it
registered with is gone (died, stopped, or forgot it after a failover), so it registers again
through the same address, and a live replica picks it up within seconds (issue #27).

:func:`rejoin_due` is the rule (pure); :class:`Hearing` records the last call heard, as a server
interceptor on the ``Worker`` service (with a cluster token, only a call presenting it counts); :func:`keep_registered` is the loop on a given clock and sleep, so a test
drives it with a virtual clock.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable

import grpc

from dispatcher.auth import TokenRing, presented_token
from dispatcher.workers.registry import HEALTH_INTERVAL_S

log = logging.getLogger(__name__)

#: silence after which a registered worker registers again: 3 dispatcher health intervals (one
#: missed check is noise; the registry drops a worker after 2 failed ones)
REJOIN_AFTER_S = 3 * HEALTH_INTERVAL_S


def rejoin_due(last_heard: float, now: float, silence_s: float) -> bool:
    """True once nothing was heard for ``silence_s`` seconds (``now - last_heard >= silence_s``)."""
    return now - last_heard >= silence_s


class Hearing(grpc.aio.ServerInterceptor):
    """The time (on ``clock``) of the last call a dispatcher made to ``service`` (Infer, Health,
    Load/UnloadVariant): a gRPC server interceptor; ``heard()`` also marks a registration. With a
    cluster token (``ring``), only a call presenting it counts (anyone can reach the port)."""

    def __init__(self, clock: Callable[[], float], service: str, ring: TokenRing | None = None) -> None:
        self.clock = clock
        self.prefix = f"/{service}/"
        self.ring = ring
        self.last = clock()

    def heard(self) -> None:
        self.last = self.clock()

    async def intercept_service(self, continuation: Callable[[Any], Awaitable[Any]],
                                handler_call_details: grpc.HandlerCallDetails) -> Any:
        if handler_call_details.method.startswith(self.prefix) and (
                self.ring is None or self.ring.accepts(presented_token(handler_call_details.invocation_metadata))):
            self.heard()
        return await continuation(handler_call_details)


async def keep_registered(register: Callable[[], Awaitable[object]], hearing: Hearing, silence_s: float,
                          sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
    """Forever: wait until :func:`rejoin_due`, then ``register()`` again (it retries until a
    dispatcher answers). A refusal (the replica reached does not know this instance yet) is logged
    and tried again after another ``silence_s``; the registration counts as hearing either way."""
    while True:
        now = hearing.clock()
        if not rejoin_due(hearing.last, now, silence_s):
            await sleep(hearing.last + silence_s - now)
            continue
        log.warning("no dispatcher called for %.1f s: registering again", now - hearing.last)
        try:
            await register()
        except RuntimeError as exc:     # RegistrationRefused / RegistrationFailed
            log.warning("registering again failed (%s); next try in %.1f s", exc, silence_s)
        hearing.heard()
