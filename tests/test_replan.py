from __future__ import annotations

import numpy as np

from scaler.batch_mix import BatchMix
from scaler.replan import DemandView, demand_for_planning, significant_change

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
