"""The daemon's part of the demand history (issue #39 deliverable 1): when a wall-clock minute has
ended, each model's arrival rate over it goes into the state store (``StateStore.record_demand``,
table ``demand_minutes``), pruned to ``forecast.retention_days`` once an hour.

The model tick (about every second) asks :meth:`DemandMinutes.due`; the first tick of a new minute
gets the minute that ended and reads each model's rate on the event loop (:func:`minute_rates`: the
window's rate over the last 60 s, one model tick late at most), then writes it in a thread. Only the
daemon leading the fleet records, and with replicas it records the merged windows (every live
replica's published rate summed: ``scaler.replicas.demand.merge_demand``, over the fleet's steady
horizon), so the history is the cluster's demand, as the holder plans for it. The minute the daemon
started in was not watched whole and is not recorded; a minute no tick saw (a stopped daemon) stays
unknown, never zero (:mod:`scaler.forecast.history`).
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable, Mapping, Protocol

from config.schema import Config
from scaler.fleet.state import StateStore
from scaler.forecast.history import MINUTE_S, minute_of

log = logging.getLogger("costscale.history")

#: prune the store's history on the minutes that start an hour
PRUNE_EVERY_MIN = 60


class Windows(Protocol):
    """The dispatcher as the recorder reads it."""

    def window_snapshot(self, model: str | None = None, steady_s: float = ...) -> Any: ...


class Replica(Protocol):
    merged: Any

    def leading(self) -> bool: ...


def minute_rates(cfg: Config, dispatcher: Windows, replica: Replica | None) -> dict[str, float]:
    """Each model's arrival rate over the last minute: this daemon's window, or the replicas' merged one."""
    merged = replica.merged if replica is not None and replica.leading() else None
    out = {}
    for m in cfg.models:
        w = merged.windows.get(m.name) if merged is not None else None
        out[m.name] = float((w if w is not None else dispatcher.window_snapshot(m.name, steady_s=MINUTE_S)).steady_qps)
    return out


class DemandMinutes:
    """Which minute to record next, and the write (module docstring)."""

    def __init__(self, store: StateStore, retention_days: int, wall: Callable[[], float] = time.time) -> None:
        self.store, self.wall = store, wall
        self.retention_min = int(retention_days) * 1440
        self.last = minute_of(wall())       # the minute it started in: not watched whole

    def due(self) -> int | None:
        """The minute that ended since the last call that returned one (None: none yet)."""
        done = minute_of(self.wall()) - 1
        if done <= self.last:
            return None
        self.last = done
        return done

    def write(self, minute: int, rates: Mapping[str, float]) -> None:
        """Each model's rate of ``minute`` into the store; on the hour, the minutes past the retention pruned."""
        try:
            for model, qps in rates.items():
                self.store.record_demand(model, [minute], [max(0.0, qps)])
            if minute % PRUNE_EVERY_MIN == 0:
                self.store.prune_demand(minute - self.retention_min + 1)
        except Exception as exc:  # noqa: BLE001 - keep serving: the minute stays unknown
            log.warning("demand history: minute %d not recorded: %s: %s", minute, type(exc).__name__, exc)


__all__ = ["DemandMinutes", "PRUNE_EVERY_MIN", "minute_rates"]
