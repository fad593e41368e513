"""What the daemon does to the fleet outside the fleet tick: ``on_shutdown: terminate`` (the whole
pool retired, unless another daemon now holds it: then one line, and no terminate intent is
written), and the state store pruned every ``state_retention.every_s`` (:class:`StorePruner`: the
closed history older than ``state_retention.days`` forgotten, at most ``max_rows`` rows a run,
never an open intent; :mod:`scaler.fleet.retention`). The reconcile round is the fleet tick's
(:func:`scaler.fleet.tick.reconcile_tick`)."""
from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime, timedelta
from typing import Callable

from apscheduler.schedulers.base import BaseScheduler

from config.sections.retention import StateRetentionSpec
from scaler.fleet.actuator import FleetActuator
from scaler.fleet.retention import PruneReport
from scaler.fleet.state import StateStore
from scaler.replicas.lease_holder import Fenced

log = logging.getLogger("costscale")   # the daemon's own lines (as daemon.app logs them)

#: the first prune this long after start (s): the start-up reconcile and the first ticks go first
FIRST_PRUNE_AFTER_S = 60.0
DAY_S = 86400.0


async def terminate_fleet(actuator: FleetActuator, plan_id: Callable[[], str], left: str | None) -> None:
    """``on_shutdown: terminate``: the pool to nothing under ``plan_id()``; ``left`` (why the fleet is
    someone else's now, :func:`daemon.replicas.role.fleet_left_to_others` or the lease lost) is one line
    instead (the fence refuses, and the daemon holding the lease now owns the instances)."""
    if left is not None:
        log.warning("%s", left)
        return
    try:
        await asyncio.to_thread(actuator.apply, {}, plan_id())
    except Fenced as exc:   # lost or not renewable while terminating
        log.warning("on_shutdown: terminate refused, instances left running: %s", exc)
    except Exception:
        log.exception("terminating the fleet at shutdown failed")


class StorePruner:
    """One prune of the state store per run, in a thread (``days`` and ``max_rows`` as the running
    config says at each run: a reload changes them)."""

    def __init__(self, store: StateStore, spec: Callable[[], StateRetentionSpec],
                 wall: Callable[[], float] = time.time) -> None:
        self.store, self.spec, self.wall = store, spec, wall
        self.last: PruneReport | None = None

    async def run(self) -> PruneReport | None:
        spec = self.spec()
        try:
            rep = await asyncio.to_thread(self.store.prune, self.wall() - spec.days * DAY_S, spec.max_rows)
        except Exception as exc:  # noqa: BLE001 - a full disk or a closed store: the next run tries again
            log.warning("state store: prune failed: %s: %s", type(exc).__name__, exc)
            return None
        self.last = rep
        if rep.rows:
            log.info("state store: forgot %s older than %g days%s", rep.summary(), spec.days,
                     " (the row cap: more at the next run)" if rep.rows >= spec.max_rows else "")
        return rep


def schedule_pruning(scheduler: BaseScheduler, store: StateStore, spec: Callable[[], StateRetentionSpec],
                     wall: Callable[[], float] = time.time) -> StorePruner:
    """The prune job (id ``prune``) every ``spec().every_s`` (restart-only), the first
    :data:`FIRST_PRUNE_AFTER_S` after start."""
    pruner = StorePruner(store, spec, wall)
    scheduler.add_job(pruner.run, "interval", seconds=spec().every_s, max_instances=1, coalesce=True, id="prune",
                      next_run_time=datetime.now() + timedelta(seconds=FIRST_PRUNE_AFTER_S))
    return pruner


__all__ = ["FIRST_PRUNE_AFTER_S", "StorePruner", "schedule_pruning", "terminate_fleet"]
