"""What the daemon does to the fleet at shutdown, outside the fleet tick: ``on_shutdown: terminate``
(the whole pool retired, unless another daemon now holds it: then one line, and no terminate intent
is written). The reconcile round is the fleet tick's (:func:`scaler.fleet.tick.reconcile_tick`)."""
from __future__ import annotations

import asyncio
import logging
from typing import Callable

from scaler.fleet.actuator import FleetActuator
from scaler.replicas.lease_holder import Fenced

log = logging.getLogger("costscale")   # the daemon's own lines (as daemon.app logs them)


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


__all__ = ["terminate_fleet"]
