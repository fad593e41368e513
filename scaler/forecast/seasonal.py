"""The seasonal-naive forecaster: the same minute yesterday and last week, scaled by today's level,
with an upper quantile from its own past errors (issue #39 deliverable 2, the baseline; pure).

For a minute ``t`` of the horizon, forecast at minute ``o`` (the one holding ``now``):

- ``day = x[t - 1 day] * level_day`` and ``week = x[t - 1 week] * level_week``, where ``level_P`` is
  the ratio of the last hour's measured rate (minutes ``o - 60 .. o - 1``) to the same hour a period
  earlier, over the minutes measured in both, clipped to :data:`LEVEL_BOUNDS` (a day twice as busy
  as yesterday is believed, a tenfold burst is the reactive path's to catch). No minute measured in
  both hours: level 1. The reference hour measured at 0 q/s: 1 if today's is 0 too, else the bound.
- the point is the mean of the two where both are known, the one known otherwise, and unknown
  where neither is (a missing day falls back to the week, a missing week to the day; both missing:
  no forecast, the fleet reacts).
- the forecast over the lead is the largest point of the horizon's ``k`` minutes (those overlapping
  ``[now, now + lead)``) plus the ``quantile`` of the residuals of ``k``-minute windows: each window's
  measured peak minute minus the peak of its points made at its start, over the windows of the last
  :data:`CALIBRATION_MIN` minutes (at least :data:`MIN_RESIDUALS` of them, else no margin; ``k`` at most
  :data:`MAX_WINDOW_MIN`), never below the point: the margin is clipped at 0. The margin is calibrated on
  the quantity forecast, the lead's peak minute: a one-minute residual's quantile on top of the peak of
  ``k`` points counted the scatter twice (the peak of ``k`` noisy points already stands above most
  minutes), and the fleet plans for the lead's peak. ``k = 1``: the one-step residual of each minute.

On a series that repeats exactly (a daily profile tiled) the levels are exactly 1, the residuals
exactly 0, and the forecast is yesterday's same minute, bit for bit.

Seasonal-naive is the standard benchmark of seasonal forecasting (Hyndman & Athanasopoulos,
*Forecasting: Principles and Practice*, 3rd ed., §5.2 "Some simple forecasting methods").
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from scaler.forecast.forecaster import check_request, fit_and_predict
from scaler.forecast.history import DAY_MIN, MINUTE_S, WEEK_MIN, DemandHistory, minute_of

#: today's level: the last hour against the same hour a season earlier
LEVEL_WINDOW_MIN = 60
#: the level is believed within these bounds (a ratio of rates)
LEVEL_BOUNDS = (0.5, 2.0)
#: residuals over the last week of minutes calibrate the upper quantile
CALIBRATION_MIN = WEEK_MIN
#: fewer residuals than this: no margin (the point alone)
MIN_RESIDUALS = 60
#: the two seasons, in minutes
SEASONS = (DAY_MIN, WEEK_MIN)
#: the window lengths a fit calibrates at once (a lead up to 7 minutes: a 300 s boot plus a fleet tick); a
#: longer one is calibrated on first use
FITTED_WINDOWS_MIN = 8
#: the margin of a lead longer than this many minutes is calibrated on windows this long (memory: a week of
#: windows times their minutes)
MAX_WINDOW_MIN = 60


def _bounded(cur: np.ndarray | float, ref: np.ndarray | float, known: np.ndarray | bool) -> np.ndarray:
    """The level ``cur / ref`` per window (module docstring's rules), vectorised."""
    cur, ref, known = np.asarray(cur, float), np.asarray(ref, float), np.asarray(known, bool)
    lo, hi = LEVEL_BOUNDS
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(ref > 0, cur / np.where(ref > 0, ref, 1.0), np.where(cur > 0, hi, 1.0))
    return np.where(known, np.clip(ratio, lo, hi), 1.0)


def level(history: DemandHistory, origin: int, period: int) -> float:
    """Today's level against ``period`` minutes earlier, read at minute ``origin`` (module docstring)."""
    cur = history.rates(origin - LEVEL_WINDOW_MIN, origin)
    ref = history.rates(origin - LEVEL_WINDOW_MIN - period, origin - period)
    both = ~np.isnan(cur) & ~np.isnan(ref)
    return float(_bounded(np.where(both, cur, 0.0).sum(), np.where(both, ref, 0.0).sum(), both.any()))


def _combine(day: np.ndarray, week: np.ndarray) -> np.ndarray:
    """The mean of the two seasons where both are known, the known one otherwise, NaN where neither."""
    both = ~np.isnan(day) & ~np.isnan(week)
    return np.where(both, (day + week) / 2.0, np.where(np.isnan(day), week, day))


def point_path(history: DemandHistory, origin: int, first: int, stop: int) -> np.ndarray:
    """The point forecast of minutes ``first .. stop - 1`` made at minute ``origin`` (NaN: none)."""
    if first - DAY_MIN >= origin or stop - 1 - DAY_MIN >= origin:
        raise ValueError("seasonal-naive forecasts at most one day ahead")
    day = history.rates(first - DAY_MIN, stop - DAY_MIN) * level(history, origin, DAY_MIN)
    week = history.rates(first - WEEK_MIN, stop - WEEK_MIN) * level(history, origin, WEEK_MIN)
    return _combine(day, week)


def residuals(history: DemandHistory, origin: int, span: int = CALIBRATION_MIN, window: int = 1) -> np.ndarray:
    """Measured minus point over ``window``-minute windows, for the windows of ``origin - span .. origin - 1``
    (each ending before ``origin``; sorted): the measured peak minute of minutes ``t .. t + window - 1``
    minus the peak of their points made at ``t`` (the levels read at ``t``), vectorised. ``window`` 1: the
    one-step residual of each minute."""
    return residuals_by_window(history, origin, window, span)[window]


def residuals_by_window(history: DemandHistory, origin: int, longest: int,
                        span: int = CALIBRATION_MIN) -> dict[int, np.ndarray]:
    """:func:`residuals` for every window of 1 .. ``longest`` minutes at once (one pass: each window's
    running peak; no minute at or after ``origin`` is read)."""
    w = LEVEL_WINDOW_MIN
    base = origin - span - w - WEEK_MIN
    x = np.concatenate([history.rates(base, origin), np.full(longest - 1, np.nan)])
    starts = np.arange(origin - span, origin) - base           # indices of each window's first minute
    cells = starts[:, None] + np.arange(longest)[None, :]      # its minutes
    seasonal = []
    for p in SEASONS:
        a, b = x[p:origin - base], x[:origin - base - p]        # a[i] = x[i + p], b[i] = x[i]
        m = ~np.isnan(a) & ~np.isnan(b)
        sa = sliding_window_view(np.where(m, a, 0.0), w).sum(axis=1)
        sb = sliding_window_view(np.where(m, b, 0.0), w).sum(axis=1)
        km = sliding_window_view(m, w).any(axis=1)
        # the window ending before minute t (minutes t - w .. t - 1) starts at a-index t - w - p
        k = starts - w - p
        lev = _bounded(sa[k], sb[k], km[k])
        seasonal.append(x[cells - p] * lev[:, None])
    points = np.fmax.accumulate(_combine(seasonal[0], seasonal[1]), axis=1)   # NaN only while none is known
    measured = np.fmax.accumulate(x[cells], axis=1)
    out = {}
    for n in range(1, longest + 1):
        last = starts.size - n + 1          # the windows of n minutes that end before origin
        err = measured[:last, n - 1] - points[:last, n - 1]
        out[n] = np.sort(err[~np.isnan(err)])
    return out


@dataclass(frozen=True)
class SeasonalFit:
    """The calibration at ``fitted_at``: its sorted one-minute residuals (empty: too few, no margin), and
    those of the lead's windows over the minutes before ``fitted_at`` (:func:`residuals_by_window`): up to
    :data:`FITTED_WINDOWS_MIN` minutes from the fit (off the fleet tick), a longer one on first use."""

    fitted_at: float
    residuals: np.ndarray
    windows: dict[int, np.ndarray] = field(default_factory=dict, repr=False, compare=False)

    def window_residuals(self, history: DemandHistory, window: int) -> np.ndarray:
        """The sorted residuals of ``window``-minute peaks as of ``fitted_at`` (1: :attr:`residuals`)."""
        window = min(window, MAX_WINDOW_MIN)
        if window <= 1:
            return self.residuals
        if window not in self.windows:   # one pass gives every shorter window too: kept with it
            self.windows.update(residuals_by_window(history, minute_of(self.fitted_at), window))
        return self.windows[window]

    def margin(self, quantile: float, history: DemandHistory | None = None, window: int = 1) -> float:
        r = self.residuals if history is None else self.window_residuals(history, window)
        if r.size < MIN_RESIDUALS:
            return 0.0
        return max(0.0, float(np.quantile(r, quantile)))

    def predict(self, history: DemandHistory, now: float, lead_s: float, quantile: float) -> float | None:
        check_request(lead_s, quantile)
        origin = minute_of(now)
        stop = min(int(math.ceil((now + lead_s) / MINUTE_S)), origin + DAY_MIN)   # yesterday is known up to now
        stop = max(stop, origin + 1)
        path = point_path(history, origin, origin, stop)
        if np.isnan(path).all():
            return None
        return max(0.0, float(np.nanmax(path))) + self.margin(quantile, history, stop - origin)


class SeasonalNaive:
    """The seasonal-naive forecaster (module docstring)."""

    name = "seasonal_naive"

    def fit(self, history: DemandHistory, now: float) -> SeasonalFit | None:
        if not history.known:
            return None
        by_window = residuals_by_window(history, minute_of(now), FITTED_WINDOWS_MIN)
        return SeasonalFit(float(now), by_window.pop(1), by_window)

    def forecast(self, history: DemandHistory, now: float, lead_s: float, quantile: float) -> float | None:
        return fit_and_predict(self, history, now, lead_s, quantile)


__all__ = ["CALIBRATION_MIN", "FITTED_WINDOWS_MIN", "LEVEL_BOUNDS", "LEVEL_WINDOW_MIN", "MAX_WINDOW_MIN", "MIN_RESIDUALS",
           "SeasonalFit", "SeasonalNaive", "level", "point_path", "residuals", "residuals_by_window"]
