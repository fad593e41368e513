"""The daemon records each model's rate per minute (daemon.loops.demand_minutes): the minute it
started in is skipped, each ended minute once, a minute no tick saw stays unknown, the holder of a
replicated cluster records the merged windows, and the store is pruned on the hour."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from config.schema import parse_config_text
from daemon.loops.demand_minutes import DemandMinutes, minute_rates
from scaler.fleet.state import StateStore
from tests.config.test_config import GOOD

CFG = parse_config_text(GOOD.replace("models:\n  - name: ncf\n    qos_ms: 5\n",
                                     "models:\n  - name: ncf\n    qos_ms: 5\n  - name: rm2\n    qos_ms: 350\n"))


@dataclass
class Snap:
    steady_qps: float


@dataclass
class Dispatcher:
    rates: dict[str, float]
    asked: list[tuple[str, float]] = field(default_factory=list)

    def window_snapshot(self, model: str | None = None, steady_s: float = 60.0) -> Snap:
        self.asked.append((str(model), steady_s))
        return Snap(self.rates.get(str(model), 0.0))


@dataclass
class Merged:
    windows: dict[str, Any]


@dataclass
class Replica:
    merged: Merged | None
    lead: bool

    def leading(self) -> bool:
        return self.lead


def test_each_ended_minute_once_and_not_the_one_it_started_in(tmp_path: Path) -> None:
    now = [600.0 * 60 + 20]                          # started 20 s into minute 600
    with StateStore.open(tmp_path / "s.db") as store:
        rec = DemandMinutes(store, 35, wall=lambda: now[0])
        assert rec.due() is None
        now[0] = 601 * 60 + 0.5                      # minute 600 ended, but was not watched whole
        assert rec.due() is None
        now[0] = 602 * 60 + 1.0
        assert rec.due() == 601 and rec.due() is None
        rec.write(601, {"ncf": 2.5, "rm2": 0.0})
        now[0] = 605 * 60 + 3.0                      # no tick during minutes 602 .. 603
        assert rec.due() == 604
        rec.write(604, {"ncf": 3.0, "rm2": 1.0})
        h = store.demand_history("ncf", 86400.0)
        assert (h.at(601), h.at(604), h.known) == (2.5, 3.0, 2) and math.isnan(h.at(602))
        assert store.demand_history("rm2", 86400.0).at(601) == 0.0      # a quiet minute is a measured 0


def test_the_store_is_pruned_on_the_hour(tmp_path: Path) -> None:
    with StateStore.open(tmp_path / "s.db") as store:
        rec = DemandMinutes(store, 1, wall=lambda: 0.0)                 # one day: 1440 minutes
        store.record_demand("ncf", range(0, 3000, 10), [1.0] * 300)
        rec.write(3001, {"ncf": 1.0})                                   # not on the hour: nothing pruned
        assert store.demand_history("ncf", 1e9).first_minute == 0
        rec.write(3060, {"ncf": 1.0})
        assert store.demand_history("ncf", 1e9).first_minute == 3060 - 1440 + 1 + 9   # 1630: the first kept that is held


def test_the_store_is_pruned_in_an_hour_whose_first_minute_no_tick_saw(tmp_path: Path) -> None:
    """A daemon held up across minute 3060 (or stopped, or its clock stepped) prunes at the next minute it
    writes in that hour: the soak bench's daemon, whose model tick sees one minute in two, kept every
    minute of its history until a tick happened to see one that started an hour (issue #40)."""
    with StateStore.open(tmp_path / "s.db") as store:
        rec = DemandMinutes(store, 1, wall=lambda: 0.0)
        store.record_demand("ncf", range(0, 3000, 10), [1.0] * 300)
        rec.write(3059, {"ncf": 1.0})
        rec.write(3061, {"ncf": 1.0})                                   # 3060 unseen
        assert store.demand_history("ncf", 1e9).first_minute == 3061 - 1440 + 1 + 8   # 1630
        store.record_demand("ncf", [1000], [1.0])
        rec.write(3119, {"ncf": 1.0})                                   # same hour: no second prune
        assert store.demand_history("ncf", 1e9).first_minute == 1000


def test_the_rates_are_the_last_minutes_or_the_replicas_merged() -> None:
    d = Dispatcher({"ncf": 4.0, "rm2": 1.5})
    assert minute_rates(CFG, d, None) == {"ncf": 4.0, "rm2": 1.5}
    assert d.asked == [("ncf", 60.0), ("rm2", 60.0)]
    merged = Merged({"ncf": Snap(9.0)})               # rm2: no replica published it, this daemon's own
    assert minute_rates(CFG, d, Replica(merged, lead=True)) == {"ncf": 9.0, "rm2": 1.5}
    assert minute_rates(CFG, d, Replica(merged, lead=False)) == {"ncf": 4.0, "rm2": 1.5}


def test_a_failing_store_leaves_the_minute_unknown(tmp_path: Path) -> None:
    store = StateStore.open(tmp_path / "s.db")
    rec = DemandMinutes(store, 35, wall=lambda: 0.0)
    store.close()
    rec.write(5, {"ncf": 1.0})                       # logged, not raised: the daemon keeps serving


def test_the_daemons_model_tick_records_the_minute_that_ended(tmp_path: Path) -> None:
    import asyncio

    from daemon.app import Daemon
    from scaler.cloud.fake import FakeCloud

    cfg = parse_config_text(GOOD + f"state_path: {tmp_path / 'state.db'}\npinned_pool:\n  r5n.large: 1\n")

    async def scenario() -> None:
        d = Daemon(cfg, None, cloud=FakeCloud("t"), listen="127.0.0.1:0", generate_variants=False)
        await d.start()
        try:
            assert d.minutes is not None and d.store is not None
            now = [d.minutes.last * 60.0 + 125.0]     # two minutes on: the one after the start ended
            d.minutes.wall = lambda: now[0]
            await d.model_tick()
            h = d.store.demand_history("ncf", 86400.0)
            assert h.known == 1 and h.at(d.minutes.last) == 0.0      # no queries: a measured 0 q/s
        finally:
            await d.stop(grace=0.0)

    asyncio.run(scenario())


def test_ended_minutes_feed_the_fleet_histories_and_refit_off_the_loop(tmp_path: Path, caplog) -> None:  # type: ignore[no-untyped-def]
    """Planning ahead (issue #39): the fleet's histories start from the store, each ended minute is
    appended to them and stored, a refit runs when due, and shadow/on log the forecast against the
    measured rate as an audit event."""
    import asyncio
    import logging

    from scaler.forecast.state import ForecastState
    cfg = CFG.model_copy(update={"forecast": CFG.forecast.model_copy(update={"mode": "shadow"})})
    now = [602 * 60 + 1.0]
    fc = ForecastState()
    with StateStore.open(tmp_path / "s.db") as store:
        store.record_demand("ncf", [590, 591], [1.0, 2.0])
        rec = DemandMinutes(store, 35, wall=lambda: now[0], forecast=fc, cfg=lambda: cfg)
        assert fc.histories["ncf"].known == 2 and fc.histories["rm2"].known == 0
        fc.last = {"ncf": 3.5}
        with caplog.at_level(logging.INFO, logger="costscale.audit"):
            asyncio.run(rec.ended(601, {"ncf": 2.5, "rm2": 0.0}))
        assert fc.histories["ncf"].at(601) == 2.5 and fc.histories["rm2"].at(601) == 0.0
        assert store.demand_history("ncf", 35 * 86400.0).at(601) == 2.5
        events = [r.audit for r in caplog.records if getattr(r, "audit", None)]
        assert [e["summary"] for e in events] == ["forecast / measured q/s: ncf 3.50 / 2.50, rm2 - / 0.00"]
        assert events[0]["models"]["ncf"] == {"forecast_qps": 3.5, "measured_qps": 2.5, "forecaster": "reactive"}
        # a history of a few minutes: the seasonal fit has a level but no day behind it; rm2 all 0
        assert fc.fitted_at == now[0] and set(fc.chosen) == {"ncf", "rm2"}
