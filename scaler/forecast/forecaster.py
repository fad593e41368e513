"""What a forecaster is, the reactive one, and the names the config knows (issue #39 deliverable 2;
pure).

A forecaster gives an **upper quantile of a model's arrival rate over the next ``lead_s`` seconds**
from its demand history (:class:`scaler.forecast.history.DemandHistory`), or None when it has
nothing to say: then the fleet plans on the reactive estimate, exactly as without a forecast. It is
split in two so the fleet tick stays cheap:

- ``fit(history, now) -> Fit | None``: the slow part (a statsmodels fit, the residuals' calibration),
  run off the tick, say hourly;
- ``Fit.predict(history, now, lead_s, quantile) -> float | None``: the cheap part, every tick.

``forecast(history, now, lead_s, quantile)`` is both at once (the forecasters by name:
:mod:`scaler.forecast.registry`); :func:`forecast_batch` runs one over
many instants as a replay needs, refitting every ``refit_s`` on what was known then. Neither reads a
minute at or after ``now`` (no look-ahead): a replay's forecast at ``t`` is the one the daemon would
have made at ``t``.
"""
from __future__ import annotations

import math
from typing import Protocol, Sequence

import numpy as np

from scaler.forecast.history import DemandHistory

#: how often a replay's batch refits (the daemon's background refit runs as often)
DEFAULT_REFIT_S = 3600.0


class Fit(Protocol):
    """A forecaster's fit at ``fitted_at``: the cheap per-tick forecast."""

    fitted_at: float

    def predict(self, history: DemandHistory, now: float, lead_s: float, quantile: float) -> float | None: ...


class Forecaster(Protocol):
    name: str

    def fit(self, history: DemandHistory, now: float) -> Fit | None: ...

    def forecast(self, history: DemandHistory, now: float, lead_s: float, quantile: float) -> float | None: ...


def check_request(lead_s: float, quantile: float) -> None:
    """A forecast asks for 0 < lead <= one day and a quantile in [0.5, 1) (ValueError otherwise)."""
    if not (math.isfinite(lead_s) and 0 < lead_s <= 86400):
        raise ValueError(f"lead must be in (0, 86400] s, got {lead_s}")
    if not (0.5 <= quantile < 1):
        raise ValueError(f"quantile must be in [0.5, 1), got {quantile}")


def fit_and_predict(f: Forecaster, history: DemandHistory, now: float, lead_s: float,
                    quantile: float) -> float | None:
    """``f.fit`` then its ``predict``: what ``forecast`` does for every forecaster."""
    check_request(lead_s, quantile)
    fit = f.fit(history, now)
    return None if fit is None else fit.predict(history, now, lead_s, quantile)


class Reactive:
    """No forecast: the fleet plans on what it measured (today's loop)."""

    name = "reactive"

    def fit(self, history: DemandHistory, now: float) -> Fit | None:
        return None

    def forecast(self, history: DemandHistory, now: float, lead_s: float, quantile: float) -> float | None:
        check_request(lead_s, quantile)
        return None


def forecast_batch(f: Forecaster, history: DemandHistory, nows: Sequence[float] | np.ndarray, lead_s: float,
                   quantile: float, refit_s: float = DEFAULT_REFIT_S) -> np.ndarray:
    """The forecast at each of ``nows`` (ascending), NaN where there is none: fitted at the first
    instant and again once ``refit_s`` has passed since the last fit, as the daemon refits in the
    background."""
    check_request(lead_s, quantile)
    times = np.asarray(nows, dtype=float)
    if times.size > 1 and np.any(np.diff(times) < 0):
        raise ValueError("the instants must be ascending")
    out = np.full(times.size, np.nan)
    fit: Fit | None = None
    fitted_at = -math.inf
    for i, now in enumerate(times):
        if now - fitted_at >= refit_s:
            fit, fitted_at = f.fit(history, float(now)), float(now)
        if fit is not None:
            got = fit.predict(history, float(now), lead_s, quantile)
            if got is not None:
                out[i] = got
    return out


__all__ = ["DEFAULT_REFIT_S", "Fit", "Forecaster", "Reactive", "check_request", "fit_and_predict", "forecast_batch"]
