"""``mode: shadow``'s capacity estimate of what each pool would have served (issue #39 deliverable 4,
scaler/forecast/served.py): hand-computed shares, capacities that rise a boot delay late and fall at
once, the ledger's sums and pruning, the /metrics families and the daemon's audit fields."""
from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from scaler.fleet.state import StateStore
from scaler.forecast.served import (ServedLedger, effective_capacity, minute_capacity, plan_capacities,
                                    served_share)
from scaler.forecast.state import ForecastState
from tests.forecast.test_demand_minutes import CFG


def test_the_share_served_is_the_arrivals_within_capacity_over_the_arrivals() -> None:
    # 10 of 10, 40 of 50, 30 of 30: 80 of 90
    assert served_share([10.0, 50.0, 30.0], [40.0, 40.0, 40.0]) == 80.0 / 90.0
    # a minute with no capacity known is left out: 10 of 10 and 20 of 30
    assert served_share([10.0, 50.0, 30.0], [40.0, None, 20.0]) == 30.0 / 40.0
    assert served_share([10.0, 50.0, 30.0], [60.0, 60.0, 60.0]) == 1.0
    assert served_share([0.0, 0.0], [5.0, 5.0]) is None and served_share([3.0], [None]) is None


def test_a_rise_serves_a_boot_delay_late_and_a_fall_at_once() -> None:
    rise = [(0.0, 10.0), (90.0, 40.0)]                   # asked for at 90 s, boots in 30 s
    assert effective_capacity(rise, 100.0, 30.0) == 10.0 and effective_capacity(rise, 120.0, 30.0) == 40.0
    assert effective_capacity(rise, 10.0, 30.0) is None   # the first pool not booted yet
    assert minute_capacity(rise, 0, 30.0) is None
    assert minute_capacity(rise, 1, 30.0) == 10.0         # [60, 120): the rise serves from 120 s
    assert minute_capacity(rise, 2, 30.0) == 40.0
    fall = [(0.0, 40.0), (75.0, 10.0)]                   # 15 s at 40, then 45 s at 10
    assert minute_capacity(fall, 1, 30.0) == (15 * 40.0 + 45 * 10.0) / 60.0 == 17.5
    mid = [(0.0, 10.0), (40.0, 70.0)]                    # serves from 70 s: 10 s at 10, 50 s at 70
    assert minute_capacity(mid, 1, 30.0) == 60.0
    assert minute_capacity([(0.0, 10.0), (70.0, None)], 1, 0.0) is None   # a tick with no plan


def test_the_ledger_sums_each_pool_per_model_and_keeps_only_the_notes_still_read() -> None:
    led = ServedLedger()
    led.note(0.0, {"applied": {"rm2": 40.0}, "ahead": {"rm2": 60.0}}, ["rm2", "wnd"])
    for minute, qps in zip((1, 2, 3), (10.0, 50.0, 30.0)):
        led.minute(minute, {"rm2": qps, "wnd": 1.0}, 0.0)
    assert led.share("applied") == 80.0 / 90.0 and led.share("ahead") == 1.0
    assert led.share("applied", "wnd") is None           # no capacity known for wnd: never counted
    assert led.totals("applied") == (90.0 * 60, 80.0 * 60) and led.sums["applied"]["rm2"].minutes == 3
    assert led.last == {"applied": {"rm2": 40.0, "wnd": None}, "ahead": {"rm2": 60.0, "wnd": None}}

    led = ServedLedger()
    for t, c in ((0.0, 40.0), (100.0, 20.0), (200.0, 30.0)):
        led.note(t, {"applied": {"rm2": c}, "ahead": None}, ["rm2"])
    led.minute(3, {"rm2": 25.0}, 30.0)                   # [180, 240): 20 q/s, 30 from 230 s (asked at 200)
    assert led.notes["applied"]["rm2"] == [(200.0, 30.0)]    # the next minute reads from 210 s on
    assert led.sums["applied"]["rm2"].within == (50 * 20.0 + 10 * 30.0) / 60.0      # min(25, 21.67)
    led.minute(4, {"rm2": 25.0}, 30.0)
    assert led.sums["applied"]["rm2"].minutes == 2 and led.share("ahead") is None


def test_plan_capacities_are_the_joint_plans_shares() -> None:
    from types import SimpleNamespace
    plan = SimpleNamespace(models={"rm2": SimpleNamespace(capacity_qps=54.25), "wnd": SimpleNamespace(capacity_qps=0)})
    assert plan_capacities(plan) == {"rm2": 54.25, "wnd": 0.0} and plan_capacities(None) is None


def test_metrics_show_the_served_estimate() -> None:
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from daemon.observe.forecast_metrics import ForecastCollector
    fc = ForecastState(lead_s=120.0)
    reg = CollectorRegistry(auto_describe=False)
    reg.register(ForecastCollector(lambda: fc))

    def samples() -> dict[tuple[str, str], float]:
        return {(s.name, s.labels.get("pool", "")): s.value
                for fam in text_string_to_metric_families(generate_latest(reg).decode()) for s in fam.samples
                if "served" in s.name or "queries_total" in s.name}
    assert samples() == {}                               # nothing counted yet: no family
    fc.served.note(0.0, {"applied": {"rm2": 40.0}, "ahead": {"rm2": 60.0}}, ["rm2"])
    for minute, qps in zip((1, 2, 3), (10.0, 50.0, 30.0)):
        fc.served.minute(minute, {"rm2": qps}, 0.0)
    assert samples() == {("costscale_forecast_shadow_arrived_queries_total", "applied"): 5400.0,
                         ("costscale_forecast_shadow_arrived_queries_total", "ahead"): 5400.0,
                         ("costscale_forecast_shadow_within_capacity_queries_total", "applied"): 4800.0,
                         ("costscale_forecast_shadow_within_capacity_queries_total", "ahead"): 5400.0,
                         ("costscale_forecast_shadow_served_ratio", "applied"): 80.0 / 90.0,
                         ("costscale_forecast_shadow_served_ratio", "ahead"): 1.0}


def test_the_daemons_forecast_event_carries_each_pools_capacity_and_share(tmp_path: Path, caplog) -> None:  # type: ignore[no-untyped-def]
    from daemon.loops.demand_minutes import DemandMinutes
    cfg = CFG.model_copy(update={"forecast": CFG.forecast.model_copy(update={"mode": "shadow", "choose_days": 0})})
    fc = ForecastState()
    fc.served.note(601 * 60 - 5.0, {"applied": {"ncf": 2.0}, "ahead": {"ncf": 3.0}}, ["ncf", "rm2"])
    with StateStore.open(tmp_path / "s.db") as store:
        rec = DemandMinutes(store, 35, wall=lambda: 602 * 60 + 1.0, forecast=fc, cfg=lambda: cfg)
        with caplog.at_level(logging.INFO, logger="costscale.audit"):
            asyncio.run(rec.ended(601, {"ncf": 2.5, "rm2": 0.0}))
    ev = [r.audit for r in caplog.records if getattr(r, "audit", None)][0]
    assert ev["shadow_capacity_qps"] == {"applied": {"ncf": 2.0, "rm2": None}, "ahead": {"ncf": 3.0, "rm2": None}}
    assert ev["shadow_served_pct"] == {"applied": 80.0, "ahead": 100.0}    # 2 of 2.5 q/s; all of it


def test_shadow_decides_again_when_the_demand_on_would_plan_for_moves() -> None:
    """Between the ticks that plan, a forecast rise alone makes shadow decide for it (scaler.fleet.ahead.shadow_due):
    the ahead pool is noted when ``on`` would have launched it, not at the next measured move."""
    from scaler.fleet.ahead import shadow_due, shadow_note
    from scaler.planner.batch_mix import mix_from_dist
    from scaler.planner.replan import DemandView
    fc = ForecastState()
    mix = mix_from_dist(CFG.workload.batch_dist, max_batch=8)
    measured = {"ncf": DemandView(10.0, mix, True), "rm2": DemandView(5.0, mix, True)}
    assert shadow_due(CFG, fc, measured, {}, 0.0, False)                 # never decided: due
    asked: list[float] = []

    async def decide(d):  # type: ignore[no-untyped-def]
        asked.append(d["ncf"].qps)
        return {"r5n.large": 2}, None
    asyncio.run(shadow_note(fc, 0.0, 0.0, measured, {"ncf": 10.2}, {"r5n.large": 1}, None, decide, lambda t: 0.149))
    assert asked == [10.2] and fc.shadow.decided_at == 0.0
    assert not shadow_due(CFG, fc, measured, {"ncf": 10.4}, 30.0, False)  # within the plan's band: not again
    assert shadow_due(CFG, fc, measured, {"ncf": 14.0}, 30.0, False)      # the forecast rose: decide for it
    assert shadow_due(CFG, fc, measured, {"ncf": 10.2}, 30.0, True)       # a type out of capacity: as a plan
