"""``forecast.mode: shadow``'s price of planning ahead (issue #39 deliverable 4): the pool the forecast
would have planned, decided without being applied, and both pools' planned dollars over time."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Mapping

from scaler.fleet.ahead import ShadowPrice, pool_usd, shadow_price
from scaler.forecast.state import ShadowLedger
from scaler.planner.replan import DemandView

PRICES = {"g4dn.xlarge": 0.526, "r5n.large": 0.149}


def test_pool_usd_hand_computed() -> None:
    assert pool_usd({"g4dn.xlarge": 2, "r5n.large": 3, "t3.xlarge": 0}, PRICES.__getitem__) == 2 * 0.526 + 3 * 0.149


def test_ledger_sums_piecewise_between_planning_ticks() -> None:
    led = ShadowLedger()
    led.note(0.0, 1.0, 0.5)           # from t=0: 1.0 $/hr would, 0.5 applied
    led.note(1800.0, 2.0, 2.0)        # half an hour later both at 2.0
    led.advance(3600.0)
    assert led.would_usd == 0.5 * 1.0 + 0.5 * 2.0 and led.applied_usd == 0.5 * 0.5 + 0.5 * 2.0
    assert (led.would_usd_per_hr, led.applied_usd_per_hr) == (2.0, 2.0)


def test_shadow_price_decides_only_for_a_raised_demand() -> None:
    asked: list[dict[str, float]] = []
    plan = SimpleNamespace(models={"rm2": SimpleNamespace(capacity_qps=40.0), "wnd": SimpleNamespace(capacity_qps=9.5)})
    held = SimpleNamespace(models={"rm2": SimpleNamespace(capacity_qps=15.0), "wnd": SimpleNamespace(capacity_qps=9.5)})

    async def decide(d: Mapping[str, DemandView]) -> tuple[dict[str, int], object]:
        asked.append({m: v.qps for m, v in d.items()})
        return {"g4dn.xlarge": 3}, plan

    measured = {"rm2": DemandView(10.0, None, True), "wnd": DemandView(5.0, None, True)}
    applied = {"g4dn.xlarge": 1, "r5n.large": 1}
    got = asyncio.run(shadow_price(measured, {"rm2": 25.0, "wnd": 4.0}, applied, decide, PRICES.__getitem__, held))
    assert got == ShadowPrice(3 * 0.526, 0.526 + 0.149, {"rm2": 40.0, "wnd": 9.5}, {"rm2": 15.0, "wnd": 9.5})
    assert asked == [{"rm2": 25.0, "wnd": 5.0}]        # raised where the forecast is above, never lowered
    got = asyncio.run(shadow_price(measured, {"rm2": 9.0, "wnd": None}, applied, decide, PRICES.__getitem__, held))
    assert got == ShadowPrice(0.526 + 0.149, 0.526 + 0.149, {"rm2": 15.0, "wnd": 9.5}, {"rm2": 15.0, "wnd": 9.5})
    assert len(asked) == 1                             # nothing raised: the applied pool, its capacities
    got = asyncio.run(shadow_price(measured, {"rm2": 9.0}, applied, decide, PRICES.__getitem__, None))
    assert (got.would_capacity, got.applied_capacity) == (None, None)     # no plan (a pinned or held pool)
