"""Demand window: the last N queries' batch sizes and arrival times."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from dispatcher.window import DemandWindow
from scaler.planner.batch_mix import mix_from_batches


def test_empty_window() -> None:
    w = DemandWindow(5)
    assert w.arrival_rate(10.0) == 0.0
    s = w.snapshot(10.0)
    assert (s.count, s.total, s.arrival_qps, s.mean_batch) == (0, 0, 0.0, 0.0)
    assert len(s.mix.sizes) == 0


def test_ring_keeps_the_last_n_and_rates_over_the_window() -> None:
    w = DemandWindow(4)
    for i, b in enumerate([5, 15, 25, 35, 45, 55]):
        w.record(b, float(i))
    assert w.batches().tolist() == [25, 35, 45, 55]
    assert w.arrivals().tolist() == [2.0, 3.0, 4.0, 5.0]
    assert w.arrival_rate(6.0) == pytest.approx(4 / 4.0)
    s = w.snapshot(6.0)
    assert (s.count, s.total, s.span_s, s.mean_batch) == (4, 6, 4.0, 40.0)
    assert s.mix.sizes.tolist() == [30, 40, 50, 60] and s.mix.fractions.tolist() == [0.25] * 4


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(1, 1000), min_size=1, max_size=60), st.integers(1, 20))
def test_window_matches_the_tail_of_the_stream(batches: list[int], cap: int) -> None:
    w = DemandWindow(cap)
    for i, b in enumerate(batches):
        w.record(b, 0.5 * i)
    assert w.batches().tolist() == batches[-cap:]
    assert w.mix().fractions.sum() == pytest.approx(1.0)
    assert np.all(np.diff(w.arrivals()) > 0)
    # the mix and mean kept as queries come and go are exactly those of the window's contents
    ref = mix_from_batches(np.array(batches[-cap:]), w.granularity)
    snap = w.snapshot(0.5 * len(batches))
    assert snap.mix.sizes.tolist() == ref.sizes.tolist() and snap.mix.sizes.dtype == ref.sizes.dtype
    assert snap.mix.fractions.tolist() == ref.fractions.tolist()
    assert snap.mean_batch == float(np.mean(batches[-cap:]))


def test_arrival_rate_horizon_sees_a_step() -> None:
    from dispatcher.window import DemandWindow

    w = DemandWindow(capacity=10_000)
    t = 0.0
    for _ in range(100):        # 10 q/s for 10 s
        t += 0.1
        w.record(100, t)
    for _ in range(300):        # then 30 q/s for 10 s
        t += 1 / 30
        w.record(100, t)
    assert w.arrival_rate(t, horizon_s=None) == pytest.approx(400 / (t - 0.1))
    assert w.arrival_rate(t, horizon_s=5.0) == pytest.approx(150 / 5.0, rel=0.02)


def test_a_young_window_counts_over_the_whole_horizon() -> None:
    """Three queries 0.1 s after the start are 0.3 q/s over the 10 s horizon, not 30 q/s (issue #12:
    the live demo once bought a $2.34/hr pool for an 8 q/s trace from such a reading)."""
    w = DemandWindow(100)
    for t in (0.0, 0.05, 0.1):
        w.record(10, t)
    assert w.arrival_rate(0.1) == pytest.approx(3 / 10.0)
    assert w.arrival_rate(12.0) == pytest.approx(0.0)           # all older than the horizon
    # a step from nothing is seen within seconds once it is a rate: 24 queries over 2 s are 12 q/s
    v = DemandWindow(100)
    for i in range(24):
        v.record(10, 100.0 + i / 12.0)
    assert v.arrival_rate(102.0) == pytest.approx(24 / 2.0)


def test_snapshot_has_the_steady_rate_over_60_s() -> None:
    w = DemandWindow(10_000)
    for i in range(600):            # 10 q/s for 60 s, then 30 q/s for 10 s
        w.record(10, 0.05 + i / 10.0)
    for i in range(300):
        w.record(10, 60.0 + (i + 1) / 30.0)
    s = w.snapshot(70.0)
    assert s.arrival_qps == pytest.approx(300 / 10.0)
    assert s.steady_qps == pytest.approx((500 + 300) / 60.0)   # arrivals after 10.0 s
