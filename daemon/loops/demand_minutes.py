"""The daemon's part of the demand history (issue #39 deliverable 1): when a wall-clock minute has
ended, each model's and each pipeline's arrival rate over it goes into the state store (``StateStore.record_demand``,
table ``demand_minutes``), pruned to ``forecast.retention_days`` once an hour.

The model tick (about every second) asks :meth:`DemandMinutes.due`; the first tick of a new minute
gets the minute that ended and reads each model's rate on the event loop (:func:`minute_rates`: the
window's rate over the last 60 s, one model tick late at most), then writes it in a thread. Only the
daemon leading the fleet records, and with replicas it records the merged windows (every live
replica's published rate summed: ``scaler.replicas.demand.merge_demand``, over the fleet's steady
horizon), so the history is the cluster's demand, as the holder plans for it. The minute the daemon
started in was not watched whole and is not recorded; a minute no tick saw (a stopped daemon) stays
unknown, never zero (:mod:`scaler.forecast.history`).

Planning ahead (issue #39 deliverable 3): given the fleet's :class:`scaler.forecast.state.ForecastState`,
the recorder seeds its histories from the store at start, appends each ended minute to them (on the
event loop, :meth:`DemandMinutes.ended`), and with ``forecast.mode`` shadow or on refits the
forecasters in a thread once :data:`scaler.forecast.forecaster.DEFAULT_REFIT_S` has passed (off the
fleet tick), and once a day chooses each model's forecaster by replayed dollars in a child process
(:mod:`daemon.loops.forecast_chooser`). With ``shadow`` or ``on`` each ended minute is also one audit
event ``forecast``: per model, the forecast the fleet tick last read against the rate measured over
the minute; with ``shadow`` also each model's capacity in the applied pool and in the pool planning
ahead would have held, and the share of arrivals each would have served within it so far
(:mod:`scaler.forecast.served`). A pipeline's series is recorded (its queries counted where they
enter) but not forecast: its tasks' models are, each from its own series.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable, Mapping, Protocol

from config.schema import Config
from daemon.loops.forecast_chooser import DailyChooser
from daemon.observe import audit
from scaler.fleet.state import StateStore
from scaler.forecast.history import MINUTE_S, minute_of, series_names
from scaler.forecast.served import POOLS
from scaler.forecast.state import ForecastState, choose, fits_for

log = logging.getLogger("costscale.history")

#: prune the store's history once an hour: at the first minute written in each hour after the one the
#: daemon first wrote in (not only on a minute that starts an hour: a daemon stopped or held up across
#: that minute, or its clock stepped, skipped it and kept every minute until the next such one)
PRUNE_EVERY_MIN = 60


class Windows(Protocol):
    """The dispatcher as the recorder reads it."""

    def window_snapshot(self, model: str | None = None, steady_s: float = ...) -> Any: ...


class Replica(Protocol):
    merged: Any

    def leading(self) -> bool: ...


def minute_rates(cfg: Config, dispatcher: Windows, replica: Replica | None) -> dict[str, float]:
    """Each model's and pipeline's arrival rate over the last minute: this daemon's window, or the
    replicas' merged one (a pipeline's window counts its queries where they enter,
    ``dispatcher.pipeline_exec.PipelineRunner.windows``; replicas publish it beside the models')."""
    merged = replica.merged if replica is not None and replica.leading() else None
    out = {}
    for name in series_names(cfg):
        w = merged.windows.get(name) if merged is not None else None
        out[name] = float((w if w is not None else dispatcher.window_snapshot(name, steady_s=MINUTE_S)).steady_qps)
    return out


class DemandMinutes:
    """Which minute to record next, and the write (module docstring)."""

    def __init__(self, store: StateStore, retention_days: int, wall: Callable[[], float] = time.time,
                 forecast: ForecastState | None = None, cfg: Callable[[], Config] | None = None,
                 chooser: DailyChooser | None = None) -> None:
        self.store, self.wall = store, wall
        self.retention_min = int(retention_days) * 1440
        self.last = minute_of(wall())       # the minute it started in: not watched whole
        self.hour: int | None = None        # the hour (minute // PRUNE_EVERY_MIN) written in last
        self.forecast, self.cfg, self.chooser = forecast, cfg, chooser
        if forecast is not None and cfg is not None:   # the fleet's histories start from the store's
            for name in series_names(cfg()):
                forecast.histories[name] = store.demand_history(name, self.retention_min * 60.0)

    def due(self) -> int | None:
        """The minute that ended since the last call that returned one (None: none yet)."""
        done = minute_of(self.wall()) - 1
        if done <= self.last:
            return None
        self.last = done
        return done

    def write(self, minute: int, rates: Mapping[str, float]) -> None:
        """Each series' rate of ``minute`` into the store; once an hour, the minutes past the retention pruned."""
        try:
            for model, qps in rates.items():
                self.store.record_demand(model, [minute], [max(0.0, qps)])
            hour = minute // PRUNE_EVERY_MIN
            if self.hour is not None and hour != self.hour:
                self.store.prune_demand(minute - self.retention_min + 1)
            self.hour = hour
        except Exception as exc:  # noqa: BLE001 - keep serving: the minute stays unknown
            log.warning("demand history: minute %d not recorded: %s: %s", minute, type(exc).__name__, exc)

    async def ended(self, minute: int, rates: Mapping[str, float]) -> None:
        """An ended minute: into the fleet's histories (here, on the event loop), the store (in a
        thread), the forecast against it to the audit log, and a refit when one is due (in a thread)."""
        fc, cfg = self.forecast, self.cfg() if self.cfg is not None else None
        if fc is not None:
            for model, qps in rates.items():
                fc.record(model, minute, qps, self.retention_min * 60.0)
        await asyncio.to_thread(self.write, minute, rates)
        if fc is None or cfg is None or cfg.forecast.mode == "off":
            return
        rates = {m.name: rates[m.name] for m in cfg.models if m.name in rates}    # the pipelines' are not forecast
        served = fc.served
        if cfg.forecast.mode == "shadow":     # what each pool would have served, by capacity (scaler.forecast.served)
            fc.served_minute(minute, rates, cfg.intervals.fleet_s)
        audit.emit("forecast", "forecast / measured q/s: " + ", ".join(
            f"{m} {'-' if fc.last.get(m) is None else f'{fc.last[m]:.2f}'} / {q:.2f}" for m, q in rates.items()),
            f"over a {fc.lead_s:.0f} s lead ({cfg.forecast.mode})", minute=minute, lead_s=fc.lead_s,
            mode=cfg.forecast.mode, models={m: {"forecast_qps": fc.last.get(m), "measured_qps": round(q, 4),
                                                "forecaster": fc.chosen.get(m, "reactive")} for m, q in rates.items()},
            shadow_usd_per_hr={"ahead": fc.shadow.would_usd_per_hr, "applied": fc.shadow.applied_usd_per_hr}
            if fc.shadow.would_usd_per_hr is not None else None,
            shadow_capacity_qps={p: {m: served.last[p].get(m) for m in rates} for p in POOLS}
            if cfg.forecast.mode == "shadow" else None,
            shadow_served_pct={p: served.percent(p) for p in POOLS} if cfg.forecast.mode == "shadow" else None)
        now = self.wall()
        if fc.refit_due(now):
            await refit_off_loop(fc, [m.name for m in cfg.models], now, cfg.forecast.forecasters)
        if self.chooser is not None:    # once a day, in a child process (daemon.loops.forecast_chooser)
            self.chooser.maybe_start(cfg, fc, now)


async def refit_off_loop(fc: ForecastState, models: list[str], now: float, forecasters: list[str]) -> None:
    """:func:`scaler.forecast.state.refit` with the fits computed in a thread (0.86 s for 50 models x
    35 days, BENCHMARKS "forecast-refit"): the histories only grow between minutes, on the loop."""
    chosen = {m: choose(fc.histories.get(m), now, forecasters, fc.picked.get(m)) for m in models}
    try:
        fits = await asyncio.to_thread(fits_for, fc.histories, chosen, now)
    except Exception as exc:  # noqa: BLE001 - keep planning on the old fits; the next minute retries
        log.warning("forecast refit failed: %s: %s", type(exc).__name__, exc)
        return
    fc.chosen, fc.fits, fc.fitted_at = chosen, fits, now
    fc.clear_cache()


__all__ = ["DailyChooser", "DemandMinutes", "refit_off_loop", "PRUNE_EVERY_MIN", "minute_rates"]
