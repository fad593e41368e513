"""When the daemon's loops run: the fleet tick (at once, then every ``intervals.fleet_s``), the model
tick and the reconcile tick as APScheduler interval jobs on the event loop, one instance each,
missed runs coalesced, and systemd's watchdog when it asks for one; a reload moves the ticks to
changed intervals (:func:`reschedule`); a step of the wall clock leaves every job its interval
(:class:`WallSteps`)."""
from __future__ import annotations

import asyncio
import functools
import logging
import time
from datetime import datetime, timedelta, timezone
from typing import Awaitable, Callable, Protocol

from apscheduler.events import EVENT_SCHEDULER_SHUTDOWN
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
#: how often the wall clock is held against the monotonic one (s), and the jump that is a step (s):
#: NTP slews at most 0.5 ms/s, so a jump of a second within one check is a step (a VM resumed, an
#: operator's ``date -s``, NTP's step of an offset beyond 128 ms)
WALL_CHECK_S = 1.0
WALL_STEP_S = 1.0


class WallSteps:
    """APScheduler 3 times its interval jobs on the wall clock: a job's next run is its last run
    time plus the interval, and the scheduler waits until ``datetime.now()`` reaches it. Stepped
    back 10 minutes, the wall clock holds every job 10 minutes more (the fleet, model and reconcile
    ticks, the lease renewal, the replica heartbeat, systemd's watchdog ping: a lease lost, the
    daemon killed); stepped forward, every job is due at once and a run may be dropped as missed.

    This holds ``wall() - monotonic()`` on the event loop's own (monotonic) timer every
    :data:`WALL_CHECK_S` (the wall clock as APScheduler reads it, ``datetime.now``: a process whose
    ``time.time`` is replaced, as the soak bench's sped-up daemon, steps nothing here). On a jump
    beyond :data:`WALL_STEP_S` each job's next run time moves by the
    jump, so it keeps the monotonic wait it had, unless the scheduler already ran the job on the new
    clock (its next run changed since the last check and lies within one interval of now), and never
    beyond one interval from now. One line names the step."""

    def __init__(self, scheduler: BaseScheduler, loop: asyncio.AbstractEventLoop,
                 wall: Callable[[], float] = lambda: datetime.now(timezone.utc).timestamp(),
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.scheduler, self.loop, self.wall, self.monotonic = scheduler, loop, wall, monotonic
        self.offset = wall() - monotonic()
        self.steps: list[float] = []
        self._seen: dict[str, datetime | None] = {}
        self._handle = loop.call_later(WALL_CHECK_S, self.check)
        scheduler.add_listener(lambda _: self._handle.cancel(), EVENT_SCHEDULER_SHUTDOWN)

    def check(self) -> None:
        offset = self.wall() - self.monotonic()
        jump, self.offset = offset - self.offset, offset
        if abs(jump) > WALL_STEP_S:
            self.shift(jump)
        self._seen = {job.id: job.next_run_time for job in self.scheduler.get_jobs()}
        self._handle = self.loop.call_later(WALL_CHECK_S, self.check)

    def shift(self, jump: float) -> None:
        now = self.wall()
        for job in self.scheduler.get_jobs():
            nrt = job.next_run_time
            if nrt is None:
                continue
            at = nrt.timestamp()
            interval = getattr(job.trigger, "interval_length", None)
            fresh = interval is not None and now - WALL_STEP_S <= at <= now + interval + WALL_STEP_S
            if self._seen.get(job.id, nrt) == nrt or not fresh:
                at += jump
                if interval is not None:
                    at = min(max(at, now), now + interval)
                job.modify(next_run_time=datetime.fromtimestamp(at, nrt.tzinfo))
        self.steps.append(jump)
        log.warning("the wall clock stepped %+.1f s: every loop keeps its interval", jump)


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
    WallSteps(scheduler, loop)
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


__all__ = ["Stoppable", "quiet_at_shutdown", "MIN_WATCHDOG_S", "TICKS", "WALL_CHECK_S", "WALL_STEP_S", "WallSteps",
           "reschedule", "schedule_loops"]
