"""The worker's cluster token as it rotates (issue #27): read from its SSM parameter at start (by
``costscale worker --token-parameter``, with the instance profile) and again every
:data:`dispatcher.auth.TOKEN_REFRESH_S`, so a token overwritten in the parameter is picked up
without a restart; :class:`dispatcher.auth.TokenRing` keeps the old one valid meanwhile, both for
the dispatcher's calls to this worker and for the token it presents. A read that fails is logged
(never the value) and the token held is kept."""
from __future__ import annotations

import asyncio
import logging
from typing import Callable

from dispatcher.auth import TOKEN_REFRESH_S, TokenRing

log = logging.getLogger("costscale.worker")


class TokenKeeper:
    """``ring`` refreshed from ``fetch`` (the parameter's value, None when it is gone)."""

    def __init__(self, ring: TokenRing, fetch: Callable[[], str | None], every_s: float = TOKEN_REFRESH_S) -> None:
        self.ring, self.fetch, self.every_s = ring, fetch, every_s

    async def refresh(self) -> bool:
        """Read the token now; True when it changed."""
        try:
            value = await asyncio.to_thread(self.fetch)
        except Exception as exc:  # noqa: BLE001 - any SDK failure: keep the token held, say why once
            log.warning("cluster token parameter not read (%s): keeping the token held", type(exc).__name__)
            return False
        if value and self.ring.set(value):
            log.info("cluster token rotated: using the new one (the old one stays valid for %.0f s)", self.ring.grace_s)
            return True
        return False

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.every_s)
            await self.refresh()


__all__ = ["TokenKeeper"]
