"""Open-loop load for the end-to-end tests: Poisson arrivals in real time, each one a task."""
from __future__ import annotations

import asyncio
import time
from typing import Awaitable, Callable

import numpy as np


async def poisson_phase(send: Callable[[int], Awaitable[None]], rate: float, duration: float,
                        rng: np.random.Generator, until: Callable[[], bool] | None = None,
                        max_duration: float = 0.0, tick_s: float = 0.05) -> int:
    """Call ``send(i)`` (i = 0, 1, ...) at Poisson arrivals of ``rate`` per second for ``duration``
    seconds; with ``until``, go on (up to ``max_duration``) until it returns True. Waits for the
    calls still running (15 s at most); returns how many were sent."""
    pending: set[asyncio.Task] = set()
    start = time.monotonic()
    next_t = 0.0
    sent = 0
    while True:
        el = time.monotonic() - start
        if el >= duration and (until is None or until() or el >= max_duration):
            break
        if el >= next_t:
            t = asyncio.create_task(send(sent))
            pending.add(t)
            t.add_done_callback(pending.discard)
            sent += 1
            next_t += float(rng.exponential(1.0 / rate))
            continue
        await asyncio.sleep(min(next_t - el, tick_s))
    if pending:
        await asyncio.wait(pending, timeout=15.0)
    return sent
