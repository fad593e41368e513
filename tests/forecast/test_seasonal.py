"""The seasonal-naive forecaster on hand-computed histories (issue #39 acceptance): a pure daily
sine gives yesterday's same minute exactly; a step scales by today's level within its bounds; a
missing yesterday falls back to last week, both missing to reacting; no history, no forecast."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scaler.forecast.forecaster import Reactive, forecast_batch
from scaler.forecast.history import DAY_MIN, WEEK_MIN, DemandHistory
from scaler.forecast.seasonal import FITTED_WINDOWS_MIN, SeasonalNaive, level, point_path, residuals

DAY_S = 86400.0
PROFILE = 20.0 + 10.0 * np.sin(2 * np.pi * np.arange(DAY_MIN) / DAY_MIN)   # one day's sine, per minute


def daily(days: int) -> DemandHistory:
    return DemandHistory.from_minutes(np.arange(days * DAY_MIN), np.tile(PROFILE, days))


@pytest.mark.parametrize("days", [2, 8, 14])      # yesterday alone; yesterday and last week
@pytest.mark.parametrize("minute", [0, 1, 359, 360, 777, 1080, 1439])
def test_a_pure_daily_sine_forecasts_yesterdays_same_minute_exactly(days: int, minute: int) -> None:
    h = daily(days)
    now = days * DAY_S + minute * 60.0
    got = SeasonalNaive().forecast(h, now, 60.0, 0.9)
    assert got == PROFILE[minute]                   # level 1, residuals 0: bit for bit
    assert SeasonalNaive().forecast(h, now, 60.0, 0.5) == PROFILE[minute]


def test_over_a_longer_lead_it_is_yesterdays_largest_minute_of_the_horizon() -> None:
    h = daily(8)
    now = 8 * DAY_S + 300 * 60.0                    # minute 300, rising toward the peak at 360
    assert SeasonalNaive().forecast(h, now, 15 * 60.0, 0.9) == PROFILE[300:315].max()
    assert SeasonalNaive().forecast(h, now + 30.0, 60.0, 0.9) == PROFILE[300:302].max()   # overlaps two minutes
    assert SeasonalNaive().forecast(h, now + 30.0, DAY_S, 0.9) == PROFILE.max()           # a whole day ahead


def flat_then(days: int, today: float, step_min: int = 60) -> DemandHistory:
    """10 q/s for ``days`` days, then ``today`` q/s for the last ``step_min`` minutes."""
    x = np.full(days * DAY_MIN, 10.0)
    x[-step_min:] = today
    return DemandHistory.from_minutes(np.arange(x.size), x)


def test_a_step_scales_yesterday_by_todays_level() -> None:
    h = flat_then(8, 20.0)
    now = 8 * DAY_S
    assert level(h, 8 * DAY_MIN, DAY_MIN) == 2.0 and level(h, 8 * DAY_MIN, WEEK_MIN) == 2.0
    assert SeasonalNaive().forecast(h, now, 120.0, 0.9) == 20.0      # 10 x 2 (the step's residuals: under 1 %)


def test_a_step_beyond_the_bound_is_the_reactive_paths() -> None:
    assert SeasonalNaive().forecast(flat_then(8, 50.0), 8 * DAY_S, 60.0, 0.9) == 20.0   # 10 x 2, not 10 x 5
    assert SeasonalNaive().forecast(flat_then(8, 1.0), 8 * DAY_S, 60.0, 0.9) == 5.0     # 10 x 0.5, not 10 x 0.1


def hand_made(yesterday: bool, last_week: bool) -> DemandHistory:
    """At minute o = 8 days: 5 q/s over the hour before o, the same hour yesterday and last week
    (levels 1); the minute o was 3 q/s yesterday and 7 q/s last week, unless left out."""
    o = 8 * DAY_MIN
    mins, rates = [], []
    for back in (0, DAY_MIN, WEEK_MIN):
        mins += list(range(o - back - 60, o - back))
        rates += [5.0] * 60
    if yesterday:
        mins.append(o - DAY_MIN)
        rates.append(3.0)
    if last_week:
        mins.append(o - WEEK_MIN)
        rates.append(7.0)
    return DemandHistory.from_minutes(mins, rates)


@pytest.mark.parametrize("yesterday,last_week,expect", [
    (True, True, 5.0),        # the mean of 3 and 7
    (False, True, 7.0),       # yesterday missing: last week
    (True, False, 3.0),       # last week missing: yesterday
    (False, False, None),     # both missing: no forecast, the fleet reacts
])
def test_a_gap_falls_back_to_the_other_season_then_to_reacting(yesterday: bool, last_week: bool,
                                                               expect: float | None) -> None:
    assert SeasonalNaive().forecast(hand_made(yesterday, last_week), 8 * DAY_S, 60.0, 0.9) == expect


def test_an_unmeasured_last_hour_leaves_the_level_at_one() -> None:
    x = np.tile(PROFILE, 8) * 2.0
    mins = np.arange(x.size)
    keep = mins < 8 * DAY_MIN - 60                  # the daemon was down for the last hour
    h = DemandHistory.from_minutes(mins[keep], x[keep])
    assert level(h, 8 * DAY_MIN, DAY_MIN) == 1.0
    assert SeasonalNaive().forecast(h, 8 * DAY_S, 60.0, 0.9) == 2.0 * PROFILE[0]


def test_with_no_history_every_forecaster_reacts() -> None:
    for f in (SeasonalNaive(), Reactive()):
        assert f.forecast(DemandHistory(), 1e9, 300.0, 0.9) is None
    assert Reactive().forecast(daily(8), 8 * DAY_S, 300.0, 0.9) is None
    assert np.isnan(forecast_batch(SeasonalNaive(), DemandHistory(), [0.0, 60.0], 60.0, 0.9)).all()


def test_it_reads_no_minute_at_or_after_now() -> None:
    h = daily(8)
    now = 8 * DAY_S + 100 * 60.0
    before = SeasonalNaive().forecast(h, now, 600.0, 0.9)
    h.record_minutes(np.arange(8 * DAY_MIN + 100, 8 * DAY_MIN + 200), np.full(100, 1000.0))
    assert SeasonalNaive().forecast(h, now, 600.0, 0.9) == before


def test_the_batch_is_the_forecast_at_each_instant() -> None:
    h = daily(8)
    nows = 7 * DAY_S + np.arange(0, 5 * 3600, 600.0)
    got = forecast_batch(SeasonalNaive(), h, nows, 300.0, 0.9)
    want = [SeasonalNaive().forecast(h, t, 300.0, 0.9) for t in nows]
    assert got.tolist() == want


def test_the_residuals_put_a_calibrated_margin_over_the_point() -> None:
    rng = np.random.default_rng(7)
    x = np.tile(PROFILE, 15) + rng.normal(0.0, 2.0, 15 * DAY_MIN)
    h = DemandHistory.from_minutes(np.arange(x.size), np.clip(x, 0, None))
    fit = SeasonalNaive().fit(h, 15 * DAY_S)
    assert fit is not None
    # the point (mean of two seasons) errs by N(0, 2) minus the mean of two N(0, 2): sd 2 x sqrt(1.5)
    assert fit.margin(0.9) == pytest.approx(1.2816 * 2.0 * math.sqrt(1.5), rel=0.1)
    assert fit.margin(0.99) > fit.margin(0.9) > fit.margin(0.5) >= 0.0


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), holes=st.floats(0.0, 0.9), q=st.floats(0.5, 0.99),
       lead_min=st.integers(1, 240), at=st.integers(0, DAY_MIN - 1))
def test_the_upper_quantile_is_never_below_the_point(seed: int, holes: float, q: float, lead_min: int,
                                                     at: int) -> None:
    rng = np.random.default_rng(seed)
    n = 9 * DAY_MIN
    x = rng.gamma(2.0, 5.0, n)
    keep = rng.random(n) >= holes
    h = DemandHistory.from_minutes(np.arange(n)[keep], x[keep])
    now = (8 * DAY_MIN + at) * 60.0
    o = 8 * DAY_MIN + at
    path = point_path(h, o, o, o + lead_min)
    got = SeasonalNaive().forecast(h, now, lead_min * 60.0, q)
    if np.isnan(path).all():
        assert got is None
    else:
        assert got is not None and got >= float(np.nanmax(path))
        assert SeasonalNaive().forecast(h, now, lead_min * 60.0, min(q + 0.005, 0.999)) >= got


def three_busy_minutes() -> DemandHistory:
    """10 q/s for 8 days, except the last three minutes before o = 8 days: 12, 15 and 11 q/s."""
    x = np.full(8 * DAY_MIN, 10.0)
    x[-3:] = (12.0, 15.0, 11.0)
    return DemandHistory.from_minutes(np.arange(x.size), x)


def test_the_residuals_of_a_window_are_its_peak_against_its_points_peak() -> None:
    """By hand, at o = 8 days over the last 3 minutes (yesterday's and last week's are 10 q/s):
    - one minute each: o-3: 12 - 10 = 2 (level 1); o-2: the hour before it holds the 12, level
      (59 x 10 + 12) / 600, so 15 - 10 x 602/600; o-1: level 607/600, 11 - 10 x 607/600;
    - two-minute windows (those ending before o): from o-3: max(12, 15) - max(10, 10) = 5; from o-2:
      max(15, 11) - 10 x 602/600 (the level read at the window's start)."""
    h, o = three_busy_minutes(), 8 * DAY_MIN
    assert residuals(h, o, span=3).tolist() == pytest.approx(sorted([2.0, 15 - 10 * 602 / 600, 11 - 10 * 607 / 600]))
    assert residuals(h, o, span=3, window=2).tolist() == pytest.approx([15 - 10 * 602 / 600, 5.0])
    assert residuals(h, o, span=3, window=3).tolist() == pytest.approx([5.0])   # one window: max(12, 15, 11) - 10


def test_the_margin_is_calibrated_on_the_leads_window() -> None:
    """Over the lead's minutes the margin is the quantile of those windows' peak residuals, not of single
    minutes' (noise N(0, 2) around a repeating day: a window's peak errs less than its worst minute)."""
    rng = np.random.default_rng(7)
    x = np.tile(PROFILE, 15) + rng.normal(0.0, 2.0, 15 * DAY_MIN)
    h = DemandHistory.from_minutes(np.arange(x.size), np.clip(x, 0, None))
    now = 15 * DAY_S
    fit = SeasonalNaive().fit(h, now)
    assert fit is not None
    o = 15 * DAY_MIN
    for lead_min in (1, 3, 5):
        want = float(np.quantile(residuals(h, o, window=lead_min), 0.9))
        path = point_path(h, o, o, o + lead_min)
        assert fit.predict(h, now, lead_min * 60.0, 0.9) == pytest.approx(float(path.max()) + max(0.0, want))
    assert fit.margin(0.9, h, 5) < fit.margin(0.9)       # the peak of 5 points already stands above most minutes


def test_the_fit_holds_each_windows_residuals_as_residuals_gives_them() -> None:
    """One pass over the week for windows of 1 .. FITTED_WINDOWS_MIN minutes: the same arrays, holes and all."""
    rng = np.random.default_rng(3)
    n = 9 * DAY_MIN
    x = rng.gamma(2.0, 5.0, n)
    keep = rng.random(n) >= 0.3
    h = DemandHistory.from_minutes(np.arange(n)[keep], x[keep])
    fit = SeasonalNaive().fit(h, 9 * DAY_S - 17 * 60.0)
    assert fit is not None and sorted(fit.windows) == list(range(2, FITTED_WINDOWS_MIN + 1))
    o = 9 * DAY_MIN - 17
    for k in range(1, FITTED_WINDOWS_MIN + 2):      # the last one past the fit's: computed on first use
        assert np.array_equal(fit.window_residuals(h, k), residuals(h, o, window=k))
