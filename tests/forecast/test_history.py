"""The per-minute demand history (scaler.forecast.history): unknown minutes are NaN, not zero;
retention prunes exactly; the views are the minutes asked for."""
from __future__ import annotations

import math

import numpy as np
import pytest

from scaler.forecast.history import DemandHistory, minute_of


def test_a_minute_never_recorded_is_unknown_not_zero() -> None:
    h = DemandHistory()
    h.record(60.0, 4.0)          # minute 1
    h.record(3 * 60 + 59.9, 0.0)  # minute 3: a measured quiet minute
    assert h.first_minute == 1 and h.last_minute == 3 and len(h) == 3 and h.known == 2
    assert h.at(1) == 4.0 and math.isnan(h.at(2)) and h.at(3) == 0.0 and math.isnan(h.at(99))
    got = h.rates(0, 5)
    assert np.isnan(got[[0, 2, 4]]).all() and got[1] == 4.0 and got[3] == 0.0
    assert h.gaps() == [(2, 3)]


def test_a_minute_recorded_again_takes_the_new_rate_and_older_minutes_grow_the_front() -> None:
    h = DemandHistory.from_minutes([10, 11, 10], [1.0, 2.0, 3.0])
    assert h.at(10) == 3.0 and h.at(11) == 2.0
    h.record_minutes(np.array([5, 7]), np.array([0.5, 0.7]))
    assert h.first_minute == 5 and h.last_minute == 11
    assert h.gaps() == [(6, 7), (8, 10)]
    mins, rates = h.known_minutes()
    assert mins.tolist() == [5, 7, 10, 11] and rates.tolist() == [0.5, 0.7, 3.0, 2.0]


def test_retention_keeps_exactly_the_newest_minutes() -> None:
    h = DemandHistory(retention_s=86400.0)          # 1440 minutes
    h.record_minutes(np.arange(3000), np.ones(3000))
    assert h.first_minute == 3000 - 1440 and h.last_minute == 2999 and h.known == 1440
    h.record(4000 * 60.0, 2.0)                      # a later minute pushes the window on
    assert h.first_minute == 4000 - 1439 and h.known == 2999 - (4000 - 1439) + 1 + 1
    h.record(10.0 * 60, 9.0)                        # older than the retention: dropped
    assert h.first_minute == 4000 - 1439 and math.isnan(h.at(10))
    assert h.prune(5000 * 60.0 + 30) == 439         # minutes 3561 .. 5000 stay: of those held, 4000 alone
    assert h.known == 1 and h.first_minute == h.last_minute == 4000


def test_prune_counts_what_went() -> None:
    h = DemandHistory(retention_s=600.0)            # 10 minutes
    h.record_minutes(np.array([0, 1, 2, 5, 9]), np.array([1.0, 1.0, 1.0, 1.0, 1.0]))
    assert h.prune(12 * 60.0) == 3                  # keeps minutes 3 .. 12: 5 and 9
    assert h.first_minute == 5 and h.known == 2     # the first minute held is a measured one
    assert h.prune(100 * 60.0) == 2 and len(h) == 0 and h.first_minute is None


def test_rates_must_be_finite_and_not_negative() -> None:
    h = DemandHistory()
    for bad in (-1.0, math.nan, math.inf):
        with pytest.raises(ValueError):
            h.record(0.0, bad)
    assert len(h) == 0


def test_minutes_before_zero_are_the_replays_history() -> None:
    assert minute_of(-0.5) == -1 and minute_of(-60.0) == -1 and minute_of(-60.5) == -2
    h = DemandHistory.from_minutes([-2, -1], [1.0, 2.0])
    assert h.rates(-2, 1).tolist()[:2] == [1.0, 2.0] and math.isnan(h.rates(-2, 1)[2])


def test_the_view_is_read_only() -> None:
    h = DemandHistory.from_minutes([0, 1], [1.0, 2.0])
    v = h.view()
    with pytest.raises(ValueError):
        v[0] = 5.0
    h.record(0.0, 7.0)
    assert h.at(0) == 7.0
