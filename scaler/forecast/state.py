"""What the fleet keeps of the forecasts between ticks (issue #39 deliverable 3; pure): each series'
demand history, each model's chosen forecaster and its fit, the boot delays measured, and the last
forecast per model (what ``shadow`` shows against what was measured).

The fit is the slow half of a forecaster (:mod:`scaler.forecast.forecaster`): :func:`refit` runs it
off the fleet tick (the daemon: in a thread once an hour, ``daemon.loops.demand_minutes``; the replay:
in line every :data:`scaler.forecast.forecaster.DEFAULT_REFIT_S` of virtual time), the tick only
calls :meth:`ForecastState.predict` (a few milliseconds for 50 models, BENCHMARKS "forecast-refit").

Which forecaster a model plans with (``chosen``): the chooser's pick when it has made one
(``chosen_by``: "replay"), else the first of ``forecast.forecasters``; and ``reactive`` (no forecast)
whenever the model's daily shape is known not to repeat (:func:`scaler.forecast.repeat.shape_repeats`
False: a week of days whose hourly profiles do not correlate with the day before), so a traffic
without a daily shape plans exactly as the reactive loop.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from scaler.forecast.forecaster import DEFAULT_REFIT_S, Fit
from scaler.forecast.history import DemandHistory, minute_of
from scaler.forecast.lead import BootDelays
from scaler.forecast.registry import make_forecaster
from scaler.forecast.repeat import shape_repeats
from scaler.forecast.served import ServedLedger

#: no forecast: the fleet plans on what it measured
REACTIVE = "reactive"


@dataclass
class ShadowLedger:
    """``mode: shadow``'s price of planning ahead (``scaler.fleet.ahead.shadow_price``): the pool the
    forecast would have planned and the pool applied, each in $/hr as the last planning tick priced
    them, and each integrated over time (piecewise constant between ticks, on the fleet's clock).
    Planned pools, not bills: an instance still booting counts from the tick that asked for it."""

    would_usd_per_hr: float | None = None
    applied_usd_per_hr: float | None = None
    would_usd: float = 0.0
    applied_usd: float = 0.0
    since: float | None = None
    demand: object = None                 # the raised demand last decided for (scaler.fleet.ahead.shadow_due)
    decided_at: float | None = None       # ... and when (fleet clock)

    def note(self, now: float, would: float, applied: float) -> None:
        """A planning tick at ``now`` priced both pools: the time since the last one is summed at the old prices."""
        self.advance(now)
        self.would_usd_per_hr, self.applied_usd_per_hr = would, applied

    def advance(self, now: float) -> None:
        if self.since is not None and self.would_usd_per_hr is not None and self.applied_usd_per_hr is not None:
            hours = max(0.0, now - self.since) / 3600.0
            self.would_usd += self.would_usd_per_hr * hours
            self.applied_usd += self.applied_usd_per_hr * hours
        self.since = now


@dataclass
class ForecastState:
    """The forecasts' part of the fleet state (module docstring)."""

    histories: dict[str, DemandHistory] = field(default_factory=dict)
    fits: dict[str, Fit] = field(default_factory=dict)            # model -> the chosen forecaster's fit
    chosen: dict[str, str] = field(default_factory=dict)           # model -> forecaster name (default: reactive)
    picked: dict[str, str] = field(default_factory=dict)           # model -> the chooser's pick (by replayed dollars)
    boot: BootDelays = field(default_factory=BootDelays)
    fitted_at: float | None = None                                 # the last refit (history clock)
    last: dict[str, float | None] = field(default_factory=dict)    # model -> the last tick's forecast (q/s)
    lead_s: float = 0.0                                            # the last tick's lead
    held_back: int = 0     # plans for a forecast given up: they retired what the reactive plan keeps
    booting: set[str] = field(default_factory=set)   # instances seen before their worker registered (daemon)
    shadow: ShadowLedger = field(default_factory=ShadowLedger)   # mode shadow: what planning ahead would cost
    served: ServedLedger = field(default_factory=ServedLedger)   # ... and serve, by capacity (scaler.forecast.served)
    _cache: dict[str, tuple[int, float, float | None]] = field(default_factory=dict, repr=False)
    #: the lead last computed, with the config and boot delays it is for (``scaler.fleet.ahead.forecast_lead``
    #: reads the catalog: every model tick's early-replan check asks for it)
    lead_memo: tuple[object, object, float] | None = field(default=None, repr=False, compare=False)

    def record(self, series: str, minute: int, qps: float, retention_s: float) -> None:
        """``series``' measured rate of ``minute`` (a new series gets a history of ``retention_s``)."""
        h = self.histories.get(series)
        if h is None:
            h = self.histories[series] = DemandHistory(retention_s)
        h.record_minutes(np.array([minute], dtype=np.int64), np.array([max(0.0, float(qps))]))
        self._cache.pop(series, None)

    def clear_cache(self) -> None:
        self._cache.clear()

    def refit_due(self, now: float, every_s: float = DEFAULT_REFIT_S) -> bool:
        return self.fitted_at is None or now - self.fitted_at >= every_s

    def served_minute(self, minute: int, rates: Mapping[str, float], fleet_s: float) -> None:
        """``mode: shadow``: an ended minute's measured rates into the served estimate
        (:meth:`scaler.forecast.served.ServedLedger.minute`), a rise in capacity counted one boot
        delay late: the lead less the fleet tick in it (``scaler.fleet.ahead.forecast_lead``)."""
        self.served.minute(minute, rates, max(0.0, self.lead_s - fleet_s))

    def predict(self, model: str, now: float, lead_s: float, quantile: float) -> float | None:
        """The chosen forecaster's upper ``quantile`` of ``model``'s rate over ``[now, now + lead_s)``
        (None: reactive, no fit, or nothing to say); one computation per model, minute and lead."""
        fit = self.fits.get(model)
        h = self.histories.get(model)
        if fit is None or h is None:
            return None
        key = minute_of(now)
        got = self._cache.get(model)
        if got is not None and got[0] == key and got[1] == lead_s:
            return got[2]
        value = fit.predict(h, now, lead_s, quantile)
        self._cache[model] = (key, lead_s, value)
        return value


def choose(history: DemandHistory | None, now: float, forecasters: Sequence[str], picked: str | None) -> str:
    """The forecaster a model plans with (module docstring): reactive without a history or when its
    daily shape does not repeat; else the chooser's pick, else the first configured."""
    if history is None or not history.known or shape_repeats(history, now) is False:
        return REACTIVE
    if picked is not None:
        return picked
    return forecasters[0] if forecasters else REACTIVE


def fits_for(histories: Mapping[str, DemandHistory], chosen: Mapping[str, str], now: float) -> dict[str, Fit]:
    """Each model's chosen forecaster fitted at ``now`` (the slow half; none for reactive)."""
    out: dict[str, Fit] = {}
    for m, name in chosen.items():
        h = histories.get(m)
        if name == REACTIVE or h is None:
            continue
        fit = make_forecaster(name).fit(h, now)
        if fit is not None:
            out[m] = fit
    return out


def refit(state: ForecastState, models: Sequence[str], now: float, forecasters: Sequence[str]) -> None:
    """Choose and fit every model's forecaster at ``now`` (:func:`choose`, :func:`fits_for`), in place."""
    chosen = {m: choose(state.histories.get(m), now, forecasters, state.picked.get(m)) for m in models}
    fits = fits_for(state.histories, chosen, now)
    state.chosen, state.fits, state.fitted_at = chosen, fits, now
    state.clear_cache()


__all__ = ["REACTIVE", "ForecastState", "ShadowLedger", "choose", "fits_for", "refit"]
