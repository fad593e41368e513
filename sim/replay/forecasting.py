"""The replay's part of planning ahead (issue #39): the demand history seeded from ``--history``
(:attr:`sim.replay.run.ReplaySpec.history`, minutes before the trace are negative), each model's
rate appended at every virtual minute boundary from its own window (as the daemon's
``daemon.loops.demand_minutes`` does each wall-clock minute), the forecasters refitted in line every
:data:`scaler.forecast.forecaster.DEFAULT_REFIT_S` of virtual time (the daemon refits in a thread as
often), and each worker's boot (registration minus launch) folded into the measured boot delays.

With ``forecast.mode: off`` none of it runs: the replay is the reactive one, bit for bit.
"""
from __future__ import annotations

from typing import Mapping, Sequence

from config.schema import Config
from dispatcher.window import DemandWindow
from scaler.forecast.history import MINUTE_S, DemandHistory, minute_of
from scaler.forecast.state import ForecastState, refit

#: the window's rate over this many seconds is a minute's rate (the daemon's, ``minute_rates``)
MINUTE_WINDOW_S = float(MINUTE_S)


def seeded(history: Mapping[str, DemandHistory] | None, models: Sequence[str], retention_s: float) -> dict[str, DemandHistory]:
    """Each model's history to start from: a copy of ``history``'s (the replay appends to its own), empty
    when it has none."""
    out = {}
    for m in models:
        src = (history or {}).get(m)
        h = DemandHistory(retention_s)
        if src is not None:
            minutes, rates = src.known_minutes()
            h.record_minutes(minutes, rates)
        out[m] = h
    return out


class ReplayForecast:
    """The history's upkeep on the replay's clock (module docstring)."""

    def __init__(self, cfg: Config, state: ForecastState, windows: Mapping[str, DemandWindow],
                 history: Mapping[str, DemandHistory] | None) -> None:
        self.cfg, self.state, self.windows = cfg, state, windows
        self.models = [m.name for m in cfg.models]
        self.retention_s = cfg.forecast.retention_days * 86400.0
        state.histories.update(seeded(history, self.models, self.retention_s))
        self.last = -1          # the last minute recorded (the trace starts at minute 0)
        self.enabled = cfg.forecast.mode != "off"
        #: per model, each minute's (forecast the fleet last read, rate measured): shadow's record
        self.scored: dict[str, list[tuple[float | None, float]]] = {m: [] for m in self.models}

    def upkeep(self, now: float, boots: list[tuple[str, float]] | None = None) -> None:
        """Each ended minute's rate recorded, the boots seen folded in, a refit when one is due."""
        if not self.enabled:
            return
        done = minute_of(now) - 1
        if done > self.last:
            for m in self.models:     # only the minute that just ended is in the window (one tick late at most)
                qps = self.windows[m].snapshot(now, MINUTE_WINDOW_S).steady_qps
                self.state.record(m, done, qps, self.retention_s)
                self.scored[m].append((self.state.last.get(m), qps))
            self.last = done
        if boots:
            b = self.state.boot
            for t, s in boots:
                b = b.observe(t, s)
            self.state.boot = b
            boots.clear()
        if self.state.refit_due(now):
            refit(self.state, self.models, now, self.cfg.forecast.forecasters)


    def shadow_summary(self, end: float) -> dict[str, float] | None:
        """``mode: shadow``: the planned dollars of the pools applied and of those planning ahead would
        have asked for (:class:`scaler.forecast.state.ShadowLedger`, summed to ``end``; None otherwise)."""
        if not self.enabled or self.cfg.forecast.mode != "shadow":
            return None
        led = self.state.shadow
        led.advance(end)
        extra = led.would_usd - led.applied_usd
        return {"planned_usd": round(led.applied_usd, 6), "ahead_planned_usd": round(led.would_usd, 6),
                "ahead_extra_pct": round(100.0 * extra / led.applied_usd, 3) if led.applied_usd > 0 else 0.0}

    def summary(self) -> dict[str, dict[str, float | int | str | None]] | None:
        """The forecast against what was measured, per model (``--json`` ``forecast``; None when off):
        the minutes with a forecast, the share of them measured at or below it (its upper quantile
        should cover about ``forecast.quantile`` of them), the mean forecast and the mean measured
        rate over those minutes, the forecaster planned with at the end, and the lead."""
        if not self.enabled:
            return None
        out: dict[str, dict[str, float | int | str | None]] = {}
        for m, pairs in self.scored.items():
            got = [(f, q) for f, q in pairs if f is not None]
            n = len(got)
            out[m] = {"minutes": len(pairs), "minutes_forecast": n,
                      "covered": round(sum(q <= f for f, q in got) / n, 4) if n else None,
                      "mean_forecast_qps": round(sum(f for f, _ in got) / n, 4) if n else None,
                      "mean_measured_qps": round(sum(q for _, q in got) / n, 4) if n else None,
                      "forecaster": self.state.chosen.get(m, "reactive"), "lead_s": round(self.state.lead_s, 3),
                      "mode": self.cfg.forecast.mode, "held_back": self.state.held_back}
        return out


__all__ = ["MINUTE_WINDOW_S", "ReplayForecast", "seeded"]
