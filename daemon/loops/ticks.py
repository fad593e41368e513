"""When the daemon's loops run: the fleet tick (at once, then every ``intervals.fleet_s``), the model
tick and the reconcile tick as APScheduler interval jobs on the event loop, one instance each,
missed runs coalesced, and systemd's watchdog when it asks for one; a reload moves the ticks to
changed intervals (:func:`reschedule`)."""
from __future__ import annotations

import asyncio
import functools
import logging
from datetime import datetime
from typing import Awaitable, Callable, Protocol

from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.schedulers.base import BaseScheduler

from config.sections.loops import IntervalsSpec
from daemon.observe import sdnotify

log = logging.getLogger("costscale.daemon")

Tick = Callable[[], Awaitable[None]]

#: scheduler job id -> the ``intervals`` field it runs at (the ids :func:`schedule_loops` gives them)
TICKS = (("fleet", "fleet_s"), ("model", "model_s"), ("reconcile", "reconcile_s"))
#: the shortest watchdog ping interval (s)
MIN_WATCHDOG_S = 0.5


def schedule_loops(loop: asyncio.AbstractEventLoop, intervals: IntervalsSpec, fleet: Tick, model: Tick,
                   reconcile: Tick) -> AsyncIOScheduler:
    """A scheduler (not started) on ``loop`` with the three ticks and, under systemd's watchdog, its ping."""
    scheduler = AsyncIOScheduler(event_loop=loop)
    scheduler.add_job(fleet, "interval", seconds=intervals.fleet_s, next_run_time=datetime.now(),
                      max_instances=1, coalesce=True, id="fleet")
    scheduler.add_job(model, "interval", seconds=intervals.model_s, max_instances=1, coalesce=True, id="model")
    scheduler.add_job(reconcile, "interval", seconds=intervals.reconcile_s, max_instances=1, coalesce=True,
                      id="reconcile")
    wd = sdnotify.watchdog_interval()
    if wd:
        scheduler.add_job(lambda: sdnotify.notify("WATCHDOG=1"), "interval", seconds=max(wd, MIN_WATCHDOG_S),
                          id="watchdog")
    return scheduler


def reschedule(scheduler: BaseScheduler | None, old: IntervalsSpec, new: IntervalsSpec) -> None:
    """The fleet, model and reconcile ticks at the reloaded ``intervals`` (APScheduler keeps an
    interval job's trigger until told)."""
    if scheduler is None:
        return
    for job, field in TICKS:
        if getattr(new, field) != getattr(old, field):
            scheduler.reschedule_job(job, trigger="interval", seconds=getattr(new, field))
            log.info("reload: the %s tick now every %g s", job, getattr(new, field))


class Stoppable(Protocol):
    """What :func:`quiet_at_shutdown` asks of the object whose tick it wraps."""

    def stopping(self) -> bool: ...


def quiet_at_shutdown(tick: Callable[..., Awaitable[None]]) -> Callable[..., Awaitable[None]]:
    """A loop's tick cut short by shutdown (APScheduler cancels its task mid EC2 or worker call)
    returns quietly; a cancellation while running (``owner.stopping()`` false) still propagates."""
    @functools.wraps(tick)
    async def run(owner: Stoppable, *args: object) -> None:
        try:
            await tick(owner, *args)
        except asyncio.CancelledError:
            if not owner.stopping():
                raise
    return run


__all__ = ["Stoppable", "quiet_at_shutdown", "MIN_WATCHDOG_S", "TICKS", "reschedule", "schedule_loops"]
