"""The ETS forecaster (scaler.forecast.ets, statsmodels' Holt-Winters on 15-minute buckets): it
finds the next day's peak of a daily series, puts its quantile over its path, refuses to fit on too
little or too holey a history, and forecasts nothing past its path."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scaler.forecast.ets import BUCKET_MIN, PATH_S, Ets, EtsFit, fit_ets, filled
from scaler.forecast.forecaster import forecast_batch
from scaler.forecast.history import DAY_MIN, DemandHistory

DAY_S = 86400.0
T = np.arange(DAY_MIN)
#: a two-peak day: 15 q/s at 09:00, 45 q/s at 14:00, 5 q/s at night
PROFILE = 5 + 40 * np.exp(-0.5 * ((T - 14 * 60) / 90) ** 2) + 15 * np.exp(-0.5 * ((T - 9 * 60) / 60) ** 2)


def noisy_days(days: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.clip(np.tile(PROFILE, days) + rng.normal(0.0, 2.0, days * DAY_MIN), 0.0, None)


@pytest.fixture(scope="module")
def fitted() -> tuple[DemandHistory, np.ndarray]:
    x = noisy_days(15, seed=3)
    return DemandHistory.from_minutes(np.arange(14 * DAY_MIN), x[:14 * DAY_MIN]), x[14 * DAY_MIN:]


def test_it_forecasts_the_next_days_peak_within_five_percent(fitted: tuple[DemandHistory, np.ndarray]) -> None:
    h, tomorrow = fitted
    fit = fit_ets(h, 14 * DAY_S)
    assert fit is not None and fit.first_bucket == 14 * DAY_MIN // BUCKET_MIN
    buckets = tomorrow.reshape(-1, BUCKET_MIN).mean(axis=1)
    day = fit.path[:buckets.size]
    assert day.max() == pytest.approx(buckets.max(), rel=0.05)            # the height of the peak
    assert abs(int(day.argmax()) - int(buckets.argmax())) <= 1            # its time, within 15 minutes
    assert day.min() == pytest.approx(buckets.min(), abs=1.0)             # the night


def test_its_upper_quantile_covers_the_minutes_of_the_peak(fitted: tuple[DemandHistory, np.ndarray]) -> None:
    h, tomorrow = fitted
    got = Ets().forecast(h, 14 * DAY_S + 13.75 * 3600, 900.0, 0.99)       # the bucket 13:45 - 14:00
    minutes = tomorrow[int(13.75 * 60):int(14 * 60)]
    assert got is not None and got >= np.quantile(minutes, 0.9)


def test_no_fit_on_too_little_or_too_holey_a_history() -> None:
    x = noisy_days(8, seed=1)
    assert fit_ets(DemandHistory(), 8 * DAY_S) is None
    assert Ets().forecast(DemandHistory(), 8 * DAY_S, 300.0, 0.9) is None
    two_days = DemandHistory.from_minutes(np.arange(6 * DAY_MIN, 8 * DAY_MIN), x[6 * DAY_MIN:])
    assert fit_ets(two_days, 8 * DAY_S) is None                            # under MIN_DAYS
    mins = np.arange(8 * DAY_MIN)
    holey = DemandHistory.from_minutes(mins[(mins // 60) % 3 == 0], x[(mins // 60) % 3 == 0])
    assert fit_ets(holey, 8 * DAY_S) is None                               # two hours in three unmeasured
    some_gaps = DemandHistory.from_minutes(mins[(mins // 60) % 10 != 0], x[(mins // 60) % 10 != 0])
    assert fit_ets(some_gaps, 8 * DAY_S) is not None                       # one in ten: filled


def test_nothing_past_the_path(fitted: tuple[DemandHistory, np.ndarray]) -> None:
    h, _ = fitted
    fit = fit_ets(h, 14 * DAY_S)
    assert fit is not None
    assert fit.predict(h, 14 * DAY_S + PATH_S - 900.0, 900.0, 0.9) is not None
    assert fit.predict(h, 14 * DAY_S + PATH_S, 900.0, 0.9) is None
    assert fit.predict(h, 14 * DAY_S - 900.0, 900.0, 0.9) is None         # before the fit's first bucket


def test_a_missing_bucket_is_filled_from_the_day_before_then_the_day_after() -> None:
    per = DAY_MIN // BUCKET_MIN
    y = np.arange(3 * per, dtype=float)
    y[[5, per + 7]] = np.nan              # 5: no day before, taken from the day after; per + 7: from the day before
    got = filled(y)
    assert got[5] == per + 5 and got[per + 7] == 7


def test_the_batch_refits_hourly_and_forecasts_between(fitted: tuple[DemandHistory, np.ndarray]) -> None:
    h, _ = fitted
    nows = 14 * DAY_S + np.array([0.0, 900.0, 1800.0])
    got = forecast_batch(Ets(), h, nows, 900.0, 0.9)
    fit = fit_ets(h, 14 * DAY_S)
    assert fit is not None
    assert got.tolist() == [fit.predict(h, t, 900.0, 0.9) for t in nows]


@pytest.fixture(scope="module")
def fit(fitted: tuple[DemandHistory, np.ndarray]) -> EtsFit:
    got = fit_ets(fitted[0], 14 * DAY_S)
    assert got is not None
    return got


@settings(max_examples=50, deadline=None)
@given(at=st.floats(0.0, 30 * 3600.0), lead=st.floats(60.0, 6 * 3600.0), q=st.floats(0.5, 0.99))
def test_the_upper_quantile_is_never_below_the_point(fitted: tuple[DemandHistory, np.ndarray], fit: EtsFit,
                                                     at: float, lead: float, q: float) -> None:
    h, _ = fitted
    now = 14 * DAY_S + at
    got = fit.predict(h, now, lead, q)
    lo = int(np.floor(now / 900.0)) - fit.first_bucket
    hi = int(np.ceil((now + lead) / 900.0)) - fit.first_bucket
    assert got is not None and got >= fit.path[lo:max(hi, lo + 1)].max() >= 0.0

