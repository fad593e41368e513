from __future__ import annotations

import numpy as np

from scaler.planner.batch_mix import BatchMix
from scaler.planner.replan import DemandView, demand_for_planning, significant_change

MIX_A = BatchMix(np.array([100, 200]), np.array([0.5, 0.5]))   # mean 150
MIX_B = BatchMix(np.array([100, 400]), np.array([0.5, 0.5]))   # mean 250


def test_declared_until_enough_samples() -> None:
    d = demand_for_planning(5.0, MIX_B, 10, 20.0, MIX_A)
    assert d == DemandView(20.0, MIX_A, False)
    d = demand_for_planning(30.0, MIX_B, 500, 20.0, MIX_A)
    assert d.qps == 30.0 and d.mix is MIX_B and d.measured


def test_significant_change_rules() -> None:
    base = DemandView(20.0, MIX_A, True)
    assert significant_change(None, base)
    assert not significant_change(base, DemandView(24.0, MIX_A, True))      # +20%: below 25%
    assert significant_change(base, DemandView(26.0, MIX_A, True))          # +30%
    assert not significant_change(DemandView(2.0, MIX_A, True), DemandView(3.5, MIX_A, True))  # < 2 q/s delta
    assert significant_change(base, DemandView(20.0, MIX_B, True))          # mean batch +67%


def test_planning_rate_is_the_steady_rate_unless_the_short_one_is_a_rise() -> None:
    from scaler.planner.replan import planning_rate

    # 27 q/s steady expects 270 queries in 10 s, σ = √270 = 16.43: a rise needs more than 4σ, 335.7
    assert planning_rate(33.5, 27.0) == 27.0        # 335 queries: noise
    assert planning_rate(33.6, 27.0) == 33.6        # 336 queries: a rise, planned for at once
    assert planning_rate(20.0, 27.0) == 27.0        # a short dip is not planned for either
    # a step from 27 to 108 q/s, two seconds in: 8 × 27 + 2 × 108 = 432 queries in 10 s, the steady
    # rate (58 × 27 + 2 × 108) / 60 = 29.7 expects 297 (4σ = 68.9)
    assert planning_rate(43.2, 29.7) == 43.2
    # nothing expected: σ is taken as 1 query, so 5 queries in 10 s are a rise and 4 are not
    assert planning_rate(0.5, 0.0) == 0.5 and planning_rate(0.4, 0.0) == 0.0
