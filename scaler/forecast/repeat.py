"""Does a model's traffic repeat from one day to the next? (issue #39: a forecaster must tell daily
traffic, whose hourly shape correlates 0.6-0.98 with the day before, from traffic that does not,
such as an aggregate of Azure Functions minutes at about 0; pure.)

Each of the last ``days`` whole days before ``now`` (days counted back from ``now``, not from
midnight) becomes its hourly profile: the mean measured rate of each of its 24 hours, an hour with
fewer than half its minutes measured unknown. Each day is compared with the day before it (Pearson's
correlation over the hours known in both, at least :data:`MIN_HOURS` of them, neither flat);
:func:`shape_correlation` is the median over those pairs, None without one. :func:`shape_repeats`
says whether that median reaches :data:`REPEATS_AT`, the low end of the range the issue cites for
daily traffic: the chooser of a forecaster (issue #39 deliverable 2) can skip the forecasters on a
history that does not repeat.
"""
from __future__ import annotations

import numpy as np

from scaler.forecast.history import DAY_MIN, DemandHistory, minute_of

HOUR_MIN = 60
#: a day pair is compared over at least this many hours known in both
MIN_HOURS = 12
#: the median day-to-day correlation from which a history's daily shape repeats
REPEATS_AT = 0.6
#: the days compared by default (a week)
DEFAULT_DAYS = 7


def hourly_profiles(history: DemandHistory, now: float, days: int = DEFAULT_DAYS) -> np.ndarray:
    """``days`` x 24 hourly mean rates of the last ``days`` whole days before ``now``, oldest first
    (NaN: an hour with under half its minutes measured)."""
    end = minute_of(now)
    x = history.rates(end - days * DAY_MIN, end).reshape(days, 24, HOUR_MIN)
    n = (~np.isnan(x)).sum(axis=2)
    s = np.where(np.isnan(x), 0.0, x).sum(axis=2)
    return np.where(n * 2 >= HOUR_MIN, s / np.maximum(n, 1), np.nan)


def day_correlations(history: DemandHistory, now: float, days: int = DEFAULT_DAYS) -> list[float]:
    """Each day's correlation with the day before it, for the pairs that can be compared."""
    prof = hourly_profiles(history, now, days)
    out = []
    for a, b in zip(prof[:-1], prof[1:]):
        both = ~np.isnan(a) & ~np.isnan(b)
        if both.sum() < MIN_HOURS:
            continue
        x, y = a[both], b[both]
        if np.ptp(x) == 0 or np.ptp(y) == 0:
            continue
        out.append(float(np.corrcoef(x, y)[0, 1]))
    return out


def shape_correlation(history: DemandHistory, now: float, days: int = DEFAULT_DAYS) -> float | None:
    """The median day-to-day correlation of the hourly profiles (None: no day pair to compare)."""
    got = day_correlations(history, now, days)
    return float(np.median(got)) if got else None


def shape_repeats(history: DemandHistory, now: float, days: int = DEFAULT_DAYS) -> bool | None:
    """Whether the daily shape repeats (median correlation >= :data:`REPEATS_AT`; None: unknown)."""
    c = shape_correlation(history, now, days)
    return None if c is None else c >= REPEATS_AT


__all__ = ["DEFAULT_DAYS", "MIN_HOURS", "REPEATS_AT", "day_correlations", "hourly_profiles", "shape_correlation",
           "shape_repeats"]
