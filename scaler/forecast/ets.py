"""The ETS (Holt-Winters) forecaster: statsmodels' exponential smoothing with a daily season on a
coarsened series (issue #39 deliverable 2; pure: no I/O, no clock).

Fit (slow, off the fleet tick): the last :data:`FIT_DAYS` days of minutes before ``now`` averaged into
:data:`BUCKET_S` buckets (a 1440-period seasonal fit on minutes is slow; 96 buckets a day fit in tens of
milliseconds), a bucket without a measured minute filled from the same bucket a day earlier (else a
day later, else by interpolation), then
``statsmodels.tsa.holtwinters.ExponentialSmoothing(trend=None, seasonal="add", seasonal_periods=96)``
(additive: a rate may be 0, which a multiplicative season cannot hold). From the fit it keeps the
path of the next :data:`PATH_S` (clipped at 0) and the residuals of the minutes of the last
:data:`CALIBRATION_DAYS` days against their bucket's one-step-ahead fitted value: the spread of a
minute's rate around the bucket's level is what the upper quantile must cover.

Forecast (cheap, every tick): the largest path value over the buckets overlapping
``[now, now + lead)`` plus the residuals' ``quantile`` (clipped at 0), or None past the path (a fit
that was never renewed).

No fit (None, so the fleet reacts) under :data:`MIN_DAYS` days of buckets, with more than
:data:`MAX_MISSING` of them unmeasured, or when statsmodels fails on the series.

Holt-Winters: Hyndman & Athanasopoulos, *Forecasting: Principles and Practice*, 3rd ed., §8.3; the
statsmodels class: https://www.statsmodels.org/stable/generated/statsmodels.tsa.holtwinters.ExponentialSmoothing.html
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

from scaler.forecast.forecaster import check_request, fit_and_predict
from scaler.forecast.history import DAY_MIN, MINUTE_S, DemandHistory, minute_of

#: the coarsened series' bucket (15 minutes: 96 a day)
BUCKET_S = 900
BUCKET_MIN = BUCKET_S // MINUTE_S
PER_DAY = DAY_MIN // BUCKET_MIN
#: the fit reads this many days before now (14 daily cycles per seasonal index; the refit of 50 models
#: within 2 s, bench/forecast/refit_bench.py)
FIT_DAYS = 14
#: fewer days of buckets: no fit
MIN_DAYS = 3
#: more unmeasured buckets than this share: no fit
MAX_MISSING = 0.2
#: the path kept from a fit (a day and a half: an hourly refit that stalls for a day still forecasts)
PATH_S = 36 * 3600
#: the minutes whose residuals calibrate the upper quantile
CALIBRATION_DAYS = 7


@dataclass(frozen=True)
class EtsFit:
    """A fit at ``fitted_at``: the path from bucket ``first_bucket`` on and the sorted minute residuals."""

    fitted_at: float
    first_bucket: int
    path: np.ndarray
    residuals: np.ndarray

    def predict(self, history: DemandHistory, now: float, lead_s: float, quantile: float) -> float | None:
        check_request(lead_s, quantile)
        lo = int(math.floor(now / BUCKET_S)) - self.first_bucket
        hi = int(math.ceil((now + lead_s) / BUCKET_S)) - self.first_bucket
        if lo < 0 or hi > self.path.size:
            return None
        margin = max(0.0, float(np.quantile(self.residuals, quantile))) if self.residuals.size else 0.0
        return float(self.path[lo:max(hi, lo + 1)].max()) + margin


def buckets(history: DemandHistory, first_bucket: int, stop_bucket: int) -> np.ndarray:
    """The mean measured rate of each bucket ``first_bucket .. stop_bucket - 1`` (NaN: none measured)."""
    x = history.rates(first_bucket * BUCKET_MIN, stop_bucket * BUCKET_MIN).reshape(-1, BUCKET_MIN)
    n = (~np.isnan(x)).sum(axis=1)
    s = np.where(np.isnan(x), 0.0, x).sum(axis=1)
    return np.where(n > 0, s / np.maximum(n, 1), np.nan)


def filled(y: np.ndarray) -> np.ndarray:
    """``y`` with each unknown bucket taken from a day earlier, else a day later, else interpolated."""
    y = y.copy()
    for shift in (PER_DAY, -PER_DAY):
        for _ in range(max(1, y.size // PER_DAY)):
            gap = np.isnan(y)
            if not gap.any():
                return y
            src = np.roll(y, shift)
            if shift > 0:
                src[:shift] = np.nan
            else:
                src[shift:] = np.nan
            y = np.where(gap, src, y)
    gap = np.isnan(y)
    if gap.any():
        idx = np.arange(y.size)
        y[gap] = np.interp(idx[gap], idx[~gap], y[~gap])
    return y


def fit_ets(history: DemandHistory, now: float) -> EtsFit | None:
    """The fit at ``now`` from the minutes before it (module docstring), or None."""
    stop = minute_of(now) // BUCKET_MIN     # the bucket holding now: those before it are wholly in the past
    first_known = history.first_minute
    if first_known is None:
        return None
    first = max(stop - FIT_DAYS * PER_DAY, -(-first_known // BUCKET_MIN))
    if stop - first < MIN_DAYS * PER_DAY:
        return None
    y = buckets(history, first, stop)
    if np.isnan(y).mean() > MAX_MISSING:
        return None
    from statsmodels.tsa.holtwinters import ExponentialSmoothing

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")     # convergence notes on flat or short series
            res = ExponentialSmoothing(filled(y), trend=None, seasonal="add", seasonal_periods=PER_DAY,
                                       initialization_method="heuristic").fit()
            path = np.clip(np.asarray(res.forecast(PATH_S // BUCKET_S), dtype=float), 0.0, None)
            fitted = np.asarray(res.fittedvalues, dtype=float)
    except (ValueError, np.linalg.LinAlgError, FloatingPointError):
        return None
    if not (np.isfinite(path).all() and np.isfinite(fitted).all()):
        return None
    cal = min(CALIBRATION_DAYS * PER_DAY, stop - first)
    minutes = history.rates((stop - cal) * BUCKET_MIN, stop * BUCKET_MIN)
    err = minutes - np.repeat(fitted[-cal:], BUCKET_MIN)
    return EtsFit(float(now), stop, path, np.sort(err[~np.isnan(err)]))


class Ets:
    """The ETS forecaster (module docstring)."""

    name = "ets"

    def fit(self, history: DemandHistory, now: float) -> EtsFit | None:
        return fit_ets(history, now)

    def forecast(self, history: DemandHistory, now: float, lead_s: float, quantile: float) -> float | None:
        return fit_and_predict(self, history, now, lead_s, quantile)


__all__ = ["BUCKET_S", "CALIBRATION_DAYS", "Ets", "EtsFit", "FIT_DAYS", "MAX_MISSING", "MIN_DAYS", "PATH_S",
           "buckets", "filled", "fit_ets"]
