"""What the daemon does to the fleet outside the fleet tick, each under the fleet lock's rules:
the reconcile round (EC2 against the write-ahead intents, DESIGN invariant 3; fenced, the lease
lost or not renewed: one line; the dispatcher's view synced after) and ``on_shutdown: terminate``
(the whole pool retired, unless another daemon now holds it: then one line, and no terminate intent
is written)."""
from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable

from config.errors import UsageError
from scaler.fleet.actuator import FleetActuator
from scaler.replicas.lease_holder import Fenced

log = logging.getLogger("costscale")   # the daemon's own lines (as daemon.app logs them)


async def reconcile_round(actuator: FleetActuator, fleet_lock: asyncio.Lock,
                          sync_workers: Callable[[], Awaitable[None]]) -> None:
    """The reconcile tick's work: the actuator reconciles (a failure is logged: the next round
    retries), then the dispatcher's cloud view is synced, all under ``fleet_lock``."""
    async with fleet_lock:
        try:
            await asyncio.to_thread(actuator.reconcile)
        except UsageError as exc:   # fenced (the lease lost or not renewed): one line
            log.error("reconcile: %s", exc)
        except Exception:
            log.exception("reconcile failed")
        await sync_workers()


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


__all__ = ["reconcile_round", "terminate_fleet"]
