"""The replay's part of planning ahead (issue #39): the demand history seeded from ``--history``
(:attr:`sim.replay.run.ReplaySpec.history`, minutes before the trace are negative), each model's
rate appended at every virtual minute boundary from its own window (as the daemon's
``daemon.loops.demand_minutes`` does each wall-clock minute), and each pipeline's from a window of
its queries where they enter (the pipeline's workload fed to it up to the clock, as the daemon's
``dispatcher.pipeline_exec.PipelineRunner.windows`` records them; recorded, not forecast), the forecasters refitted in line every
:data:`scaler.forecast.forecaster.DEFAULT_REFIT_S` of virtual time (the daemon refits in a thread as
often), and each worker's boot (registration minus launch) folded into the measured boot delays.

With ``forecast.mode: shadow`` each ended minute also goes to the served estimate
(:class:`scaler.forecast.served.ServedLedger`: the measured rate against each pool's capacity),
reported in ``forecast_shadow`` beside the shadow dollars.

With ``forecast.mode: off`` none of it runs: the replay is the reactive one, bit for bit.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from config.schema import Config
from dispatcher.window import DemandWindow
from scaler.forecast.history import MINUTE_S, DemandHistory, minute_of
from scaler.forecast.served import POOLS
from scaler.forecast.state import ForecastState, refit
from sim.workload import Workload

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
                 history: Mapping[str, DemandHistory] | None,
                 pipeline_loads: Mapping[str, Workload] | None = None) -> None:
        self.cfg, self.state, self.windows = cfg, state, windows
        self.models = [m.name for m in cfg.models]
        self.retention_s = cfg.forecast.retention_days * 86400.0
        #: each pipeline's queries at its entry: its workload, fed to its window up to the clock
        self.entries = {p.name: (DemandWindow(), (pipeline_loads or {}).get(p.name)) for p in cfg.pipelines}
        self.fed = {p: 0 for p in self.entries}
        state.histories.update(seeded(history, self.models + list(self.entries), self.retention_s))
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
            for p, qps in self._entry_rates(now).items():
                self.state.record(p, done, qps, self.retention_s)
            if self.cfg.forecast.mode == "shadow":
                self.state.served_minute(done, {m: self.scored[m][-1][1] for m in self.models},
                                         self.cfg.intervals.fleet_s)
            self.last = done
        if boots:
            b = self.state.boot
            for t, s in boots:
                b = b.observe(t, s)
            self.state.boot = b
            boots.clear()
        if self.state.refit_due(now):
            refit(self.state, self.models, now, self.cfg.forecast.forecasters)

    def _entry_rates(self, now: float) -> dict[str, float]:
        """Each pipeline's rate over the last minute at its entry (its window fed its arrivals up to ``now``)."""
        out = {}
        for p, (w, wl) in self.entries.items():
            if wl is not None:
                i, stop = self.fed[p], int(np.searchsorted(wl.arrivals, now, side="right"))
                for t, b in zip(wl.arrivals[i:stop].tolist(), wl.batches[i:stop].tolist()):
                    w.record(int(b), t)
                self.fed[p] = stop
            out[p] = w.snapshot(now, MINUTE_WINDOW_S).steady_qps
        return out

    def shadow_summary(self, end: float) -> dict[str, Any] | None:
        """``mode: shadow``: the planned dollars of the pools applied and of those planning ahead would
        have asked for (:class:`scaler.forecast.state.ShadowLedger`, summed to ``end``), and the capacity
        estimate of the share of arrivals each would have served within SLO, overall and per model
        (:class:`scaler.forecast.served.ServedLedger`, percent; None where no minute was counted);
        None when not in shadow."""
        if not self.enabled or self.cfg.forecast.mode != "shadow":
            return None
        led, sv = self.state.shadow, self.state.served
        led.advance(end)
        extra = led.would_usd - led.applied_usd
        return {"planned_usd": round(led.applied_usd, 6), "ahead_planned_usd": round(led.would_usd, 6),
                "ahead_extra_pct": round(100.0 * extra / led.applied_usd, 3) if led.applied_usd > 0 else 0.0,
                "applied_served_pct": sv.percent("applied"), "ahead_served_pct": sv.percent("ahead"),
                "served_minutes": {p: sum(s.minutes for s in sv.sums[p].values()) for p in POOLS},
                "served_by_model": {m: {p: sv.percent(p, m) for p in POOLS} for m in self.models}}

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


def shadow_line(sh: Mapping[str, Any]) -> str:
    """``costscale replay``'s shadow line: the planned dollars, then the capacity estimate of the share served."""
    text = (f"shadow: planning ahead would have planned ${sh['ahead_planned_usd']:.4f} against "
            f"${sh['planned_usd']:.4f} planned ({sh['ahead_extra_pct']:+.2f} %)")
    if "applied_served_pct" not in sh:
        return text
    got = [f"{p} {'-' if sh[f'{p}_served_pct'] is None else format(sh[f'{p}_served_pct'], '.2f') + ' %'}"
           for p in ("ahead", "applied")]
    return text + "; served within SLO by capacity (estimate): " + ", ".join(got)


__all__ = ["MINUTE_WINDOW_S", "ReplayForecast", "seeded", "shadow_line"]
