"""Plan ahead, retire by what was measured (issue #39 deliverable 3): the fleet tick's forecast step.

The property (acceptance): with ``forecast.mode: on``, no instance is retired that the reactive loop
would keep at the same instant. Two ticks from one state, one with ``mode: off`` and one with
``mode: on``, over a planner that maps each demand to an arbitrary pool (drawn by hypothesis, the
same pool for the same demand in both ticks): for every type, the ``on`` target holds at least
``min(held, reactive target)``.
"""
from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from config.schema import Config
from scaler.fleet import ahead
from scaler.fleet.market_hooks import MarketHooks
from scaler.fleet.reports import ApplyReport
from scaler.fleet.tick import FleetPorts, FleetState, fleet_tick, replan_early_due
from scaler.forecast.history import DemandHistory
from scaler.forecast.lead import BootDelays
from scaler.forecast.state import REACTIVE, ForecastState, choose, refit
from scaler.planner.joint_plan import declared_demands
from scaler.planner.replan import DemandView

ROOT = Path(__file__).resolve().parents[2]
TYPES = ("g4dn.xlarge", "c5n.2xlarge", "r5n.large", "t3.xlarge")


def cfg_for(mode: str, **forecast: Any) -> Config:
    raw = yaml.safe_load((ROOT / "examples" / "replay-rm2.yaml").read_text())
    raw["forecast"] = {"mode": mode, **forecast}
    return Config.model_validate(raw)


MIX = declared_demands(cfg_for("off"))["rm2"].mix


class FixedFit:
    """A fit whose forecast is one number."""

    fitted_at = 0.0

    def __init__(self, value: float | None) -> None:
        self.value = value

    def predict(self, history: DemandHistory, now: float, lead_s: float, quantile: float) -> float | None:
        return self.value


class _Actuator:
    budget = 1000.0
    catalog: dict = {}
    store = None

    def clock(self) -> float:
        return 0.0

    def unavailable_types(self) -> set[str]:
        return set()

    def price(self, instance_type: str) -> float:
        return 1.0

    def apply(self, target, plan_id, retire_first=(), instances=None) -> ApplyReport:  # type: ignore[no-untyped-def]
        return ApplyReport(plan_id, dict(target))


class _Workers:
    def ready(self) -> frozenset[str]:
        return frozenset()

    def serves(self) -> Mapping[str, str]:
        return {}

    async def unpark_all(self, ids) -> None:  # type: ignore[no-untyped-def]
        pass

    def mark_parked(self, instance_id: str) -> None:
        pass

    async def park_all(self, ids) -> None:  # type: ignore[no-untyped-def]
        pass

    def set_base_types(self, plan) -> None:  # type: ignore[no-untyped-def]
        pass

    async def synced(self, listed, typed, assignment) -> None:  # type: ignore[no-untyped-def]
        pass


class _Audit:
    def __init__(self) -> None:
        self.results: list[Any] = []

    def event(self, *a: Any) -> None:
        pass

    def applied(self, result: Any) -> None:
        self.results.append(result)

    def failed(self, error: str, expected: bool) -> None:
        raise AssertionError(error)

    def list_failed(self, exc: Exception) -> None:
        pass

    def reconciled(self, report: Any) -> None:
        pass

    def reconcile_failed(self, exc: Exception) -> None:
        pass


class _Cloud:
    async def list_managed(self) -> list:  # type: ignore[type-arg]
        return []


async def _in_line(fn, *args):  # type: ignore[no-untyped-def]
    return fn(*args)


class _ReplanOnce(MarketHooks):
    """A market whose first apply runs a type out of capacity: the tick decides again at once."""

    def __init__(self) -> None:
        super().__init__(_Actuator())
        self.asked = 0

    def replan_now(self, plan, target) -> bool:  # type: ignore[no-untyped-def]
        self.asked += 1
        return self.asked == 1


def ports_for(qps: float, pools: dict[float, dict[str, int]], draw, audit: _Audit,  # type: ignore[no-untyped-def]
              replan: bool = False) -> FleetPorts:
    """The tick's ports: the measured demand ``qps``; a planner that gives each demand a pool drawn once
    (``replan``: the market asks for a second decision after the first apply, as on InsufficientCapacity)."""
    async def decide(demand, keep):  # type: ignore[no-untyped-def]
        q = round(demand["rm2"].qps, 6)
        if q not in pools:
            pools[q] = draw(st.fixed_dictionaries({t: st.integers(0, 6) for t in TYPES}))
        return {t: n for t, n in pools[q].items() if n}, None
    mix = MIX
    return FleetPorts(clock=lambda: 1000.0, cloud=_Cloud(), market=_ReplanOnce() if replan else MarketHooks(_Actuator()),
                      workers=_Workers(),
                      demand=lambda: {"rm2": DemandView(qps, mix, True)}, decide=decide, audit=audit,
                      offload=_in_line, wall=lambda: 5000.0)


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.new_event_loop().run_until_complete(coro)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(held=st.fixed_dictionaries({t: st.integers(0, 6) for t in TYPES}),
       measured=st.floats(0.0, 200.0), forecast=st.one_of(st.none(), st.floats(0.0, 400.0)),
       planned=st.floats(0.0, 200.0), replan=st.booleans(), data=st.data())
def test_mode_on_never_retires_what_the_reactive_tick_keeps(held, measured, forecast, planned, replan,  # type: ignore[no-untyped-def]
                                                           data) -> None:
    """Also through the replan after an apply (a type out of capacity): that second decision is held
    to the measured floor too."""
    state = FleetState()
    state.target = {t: n for t, n in held.items() if n}
    state.demand = {"rm2": DemandView(planned, MIX, True)}
    state.planned_at = 0.0      # an old plan (PLAN_MAX_AGE_S): every tick plans
    state.forecast.histories["rm2"] = DemandHistory()
    state.forecast.fits["rm2"] = FixedFit(forecast)  # type: ignore[assignment]
    pools: dict[float, dict[str, int]] = {}
    off_state, on_state = copy.deepcopy(state), copy.deepcopy(state)
    a_off, a_on = _Audit(), _Audit()
    run(fleet_tick(cfg_for("off"), off_state, ports_for(measured, pools, data.draw, a_off, replan)))
    run(fleet_tick(cfg_for("on"), on_state, ports_for(measured, pools, data.draw, a_on, replan)))
    reactive, on = a_off.results[0].target, a_on.results[0].target
    for t, n in state.target.items():
        assert on.get(t, 0) >= min(n, reactive.get(t, 0)), (t, state.target, reactive, on)
    # the scale-in window holds what was measured, never the forecast
    assert [d.qps for _, d in on_state.history["rm2"]] == [measured]
    if forecast is None or forecast <= measured:      # no raise: the reactive tick's target, exactly
        assert on == reactive


def test_off_reads_no_forecast_and_shadow_plans_reactively() -> None:
    fc = ForecastState(histories={"rm2": DemandHistory()}, fits={"rm2": FixedFit(50.0)})  # type: ignore[dict-item]
    d = {"rm2": DemandView(10.0, MIX, True)}
    out, got = ahead.ahead_demands(cfg_for("off"), fc, d, 0.0, {})
    assert out == d and got == {} and fc.last == {}
    out, got = ahead.ahead_demands(cfg_for("shadow"), fc, d, 0.0, {"rm2": 1.5})
    assert out == d and got == {"rm2": 75.0} and fc.last == {"rm2": 75.0}
    out, got = ahead.ahead_demands(cfg_for("on"), fc, d, 0.0, {})
    assert out["rm2"].qps == 50.0 and out["rm2"].measured is True


def test_lead_is_the_slowest_type_plus_a_fleet_tick() -> None:
    cfg = cfg_for("on", boot_delay_s={"gpu": 200, "cpu": 60})
    assert ahead.forecast_lead(cfg, BootDelays()) == 200.0 + 30.0
    measured = BootDelays().observe("g4dn.xlarge", 40.0)
    assert ahead.forecast_lead(cfg, measured) == 60.0 + 30.0     # the CPU types' 60 s is now the slowest
    assert ahead.forecast_lead(cfg, measured.observe("t3.xlarge", 150.0)) == 150.0 + 30.0


def test_keeps_measured() -> None:
    assert ahead.keeps_measured({"a": 2}, {"a": 3}, {"a": 2})
    assert not ahead.keeps_measured({"a": 1}, {"a": 3}, {"a": 2})
    assert ahead.keeps_measured({"b": 4}, {"a": 3}, {"b": 1})      # the reactive plan retires the a's too


def _daily(days: int, shuffled: bool = False) -> DemandHistory:
    rng = np.random.default_rng(0)
    day = 10 + 9 * np.sin(np.arange(1440) * 2 * np.pi / 1440)
    x = np.concatenate([day.reshape(24, 60)[rng.permutation(24)].reshape(-1) if shuffled else day
                        for _ in range(days)])
    return DemandHistory.from_minutes(np.arange(-days * 1440, 0), x)


def test_choose_reactive_without_a_repeating_day() -> None:
    assert choose(None, 0.0, ["seasonal_naive"], None) == REACTIVE
    assert choose(_daily(8), 0.0, ["seasonal_naive", "ets"], None) == "seasonal_naive"
    assert choose(_daily(8), 0.0, ["seasonal_naive", "ets"], "ets") == "ets"
    assert choose(_daily(8, shuffled=True), 0.0, ["seasonal_naive"], "ets") == REACTIVE


def test_refit_then_predict_yesterday() -> None:
    fc = ForecastState(histories={"rm2": _daily(8)})
    refit(fc, ["rm2"], 0.0, ["seasonal_naive"])
    assert fc.chosen == {"rm2": "seasonal_naive"} and fc.fitted_at == 0.0
    day = 10 + 9 * np.sin(np.arange(1440) * 2 * np.pi / 1440)
    # over minutes 0 .. 2 (a lead of 150 s from 0): yesterday's largest, the series repeats exactly
    assert fc.predict("rm2", 0.0, 150.0, 0.9) == pytest.approx(float(day[:3].max()))


def test_early_replan_check_uses_the_raise() -> None:
    """With mode on, the model tick's check compares the raised demand with the raised plan (else a
    forecast above the measured rate would look like a fall every model tick)."""
    state = FleetState()
    state.demand = {"rm2": DemandView(50.0, MIX, True)}
    state.forecast.histories["rm2"] = DemandHistory()
    state.forecast.fits["rm2"] = FixedFit(50.0)  # type: ignore[assignment]
    now = lambda: {"rm2": DemandView(20.0, MIX, True)}  # noqa: E731
    assert not replan_early_due(cfg_for("on"), state, 0.0, now, 0.0)
    assert replan_early_due(cfg_for("off"), state, 0.0, now, 0.0)


def test_daemon_observes_boots_from_pending_to_registered() -> None:
    from daemon.loops.fleet_ports import observe_boots
    from scaler.cloud.provider import ManagedInstance
    fc = ForecastState()
    old = ManagedInstance("i-old", "g4dn.xlarge", "running", launch_time=0.0)
    new = ManagedInstance("i-new", "g4dn.xlarge", "pending", launch_time=1000.0)
    observe_boots(fc, [old, new], frozenset(), 1010.0)
    assert fc.booting == {"i-new"}                     # the running one was adopted, not booted here
    observe_boots(fc, [old, ManagedInstance("i-new", "g4dn.xlarge", "running", launch_time=1000.0)],
                  frozenset({"i-old"}), 1060.0)
    assert fc.boot.mean_s == {} and fc.booting == {"i-new"}     # running, not registered yet
    observe_boots(fc, [old, ManagedInstance("i-new", "g4dn.xlarge@us-east-1a", "running", launch_time=1000.0)],
                  frozenset({"i-old", "i-new"}), 1120.0)
    assert fc.boot.mean_s == {"g4dn.xlarge": 120.0} and fc.booting == set()


def test_the_daemon_plans_for_its_forecast_on_the_wall_clock(tmp_path: Path) -> None:
    """The daemon (fake cloud, no workers, no queries): its histories start from the state store
    (epoch minutes), a refit off the loop, then its fleet tick plans for the forecast over the lead,
    read at the wall clock (the tick's own clock is monotonic)."""
    import time

    from daemon.app import Daemon
    from daemon.loops.demand_minutes import refit_off_loop
    from scaler.cloud.fake import FakeCloud
    from scaler.fleet.state import StateStore

    raw = yaml.safe_load((ROOT / "examples" / "replay-rm2.yaml").read_text())
    raw.update({"state_path": str(tmp_path / "s.db"), "forecast": {"mode": "on"},
                "model_scaling": {"generate_variants": False}})
    raw["dispatcher"]["listen"] = "127.0.0.1:0"
    cfg = Config.model_validate(raw)
    now_min = int(time.time() // 60)
    minutes = np.arange(now_min - 8 * 1440, now_min)
    with StateStore.open(tmp_path / "s.db") as s:     # 30 q/s every day from this minute on for an hour, else 3
        s.record_demand("rm2", minutes, np.where(np.mod(minutes - now_min, 1440) < 60, 30.0, 3.0))

    async def body() -> None:
        d = Daemon(cfg, None, cloud=FakeCloud(cfg.cluster), listen="127.0.0.1:0", generate_variants=False)
        await d.start()
        try:
            fc = d.status.forecast
            assert fc.histories["rm2"].known == 8 * 1440
            await refit_off_loop(fc, ["rm2"], time.time(), ["seasonal_naive"])
            assert fc.chosen == {"rm2": "seasonal_naive"}
            await d.fleet_tick("test")
            assert fc.lead_s == 90.0 + 30.0 and fc.last["rm2"] == pytest.approx(30.0)
            assert d.status.demand is not None and d.status.demand["rm2"].qps == pytest.approx(30.0)
            assert d.status_feed is not None and d.status_feed.forecast is not None
            assert d.status_feed.forecast() is fc       # what /metrics reads (daemon.observe.forecast_metrics)
        finally:
            await d.stop(grace=0.0)
    asyncio.run(asyncio.wait_for(body(), timeout=120))


def test_metrics_show_the_forecast() -> None:
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from daemon.observe.forecast_metrics import ForecastCollector
    fc = ForecastState(last={"rm2": 41.25, "wnd": None}, chosen={"rm2": "seasonal_naive"}, lead_s=120.0, held_back=2)
    reg = CollectorRegistry(auto_describe=False)
    reg.register(ForecastCollector(lambda: fc))
    got = {(s.name, tuple(sorted(s.labels.items()))): s.value
           for fam in text_string_to_metric_families(generate_latest(reg).decode()) for s in fam.samples}
    assert got == {("costscale_forecast_queries_per_second", (("forecaster", "seasonal_naive"), ("model", "rm2"))): 41.25,
                   ("costscale_forecast_lead_seconds", ()): 120.0, ("costscale_forecast_held_back_total", ()): 2.0}


def test_metrics_show_shadows_price() -> None:
    """``shadow`` priced: the pool planning ahead would hold against the one applied, per hour and summed."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from daemon.observe.forecast_metrics import ForecastCollector
    fc = ForecastState(lead_s=120.0)
    fc.shadow.note(0.0, 1.578, 1.052)
    fc.shadow.note(1800.0, 1.052, 1.052)
    reg = CollectorRegistry(auto_describe=False)
    reg.register(ForecastCollector(lambda: fc))
    got = {(s.name, tuple(sorted(s.labels.items()))): s.value
           for fam in text_string_to_metric_families(generate_latest(reg).decode()) for s in fam.samples}
    assert got[("costscale_forecast_shadow_dollars_per_hour", (("pool", "ahead"),))] == 1.052
    assert got[("costscale_forecast_shadow_dollars_total", (("pool", "ahead"),))] == 1.578 / 2
    assert got[("costscale_forecast_shadow_dollars_total", (("pool", "applied"),))] == 1.052 / 2
