"""Each model's forecaster chosen by replayed dollars (issue #39 deliverable 2): a day that does not
repeat is reactive without a replay; otherwise the cheapest candidate at equal or better attainment
than reactive; the daemon takes the picks of its daily child process."""
from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from config.profiles import load_profiles_csv
from config.schema import Config
from daemon.cli import main
from daemon.loops.forecast_chooser import DailyChooser, apply_picks
from scaler.fleet.state import StateStore
from scaler.forecast.history import DemandHistory
from scaler.forecast.state import ForecastState
from sim.replay.chooser import Candidate, Choice, choose_by_replay, minute_workload, shifted

ROOT = Path(__file__).resolve().parents[2]


def cfg_for(tmp_path: Path, mode: str = "on") -> Config:
    raw = yaml.safe_load((ROOT / "examples" / "replay-rm2.yaml").read_text())
    raw["state_path"] = str(tmp_path / "state.db")
    raw["forecast"] = {"mode": mode}
    return Config.model_validate(raw)


def daily(days: int, end_min: int, shuffled: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Minutes ``end - days x 1440 .. end - 1`` of a day rising from 2 to 12 q/s and back."""
    minutes = np.arange(end_min - days * 1440, end_min)
    rates = 2.0 + 10.0 * np.exp(-0.5 * (((minutes % 1440) - 600) / 90.0) ** 2)
    if shuffled:
        rng = np.random.default_rng(0)
        rates = np.concatenate([d.reshape(24, 60)[rng.permutation(24)].reshape(-1) for d in rates.reshape(days, 1440)])
    return minutes, rates


def test_minute_workload_and_shift() -> None:
    wl = minute_workload(np.array([1.0, np.nan, 0.0, 2.0]), 0, "deeprecsys", 1000)
    per = np.bincount((wl.arrivals // 60).astype(int), minlength=4)
    assert per[1] == 0 and per[2] == 0 and wl.arrivals.size == per[0] + per[3] and np.all(np.diff(wl.arrivals) >= 0)
    h = DemandHistory.from_minutes([10, 11, 12], [1.0, 2.0, 3.0])
    s = shifted(h, 11, 13)
    assert (s.first_minute, s.last_minute, s.at(-2), s.at(-1)) == (-2, -1, 2.0, 3.0)


def test_a_day_that_does_not_repeat_is_reactive_without_a_replay(tmp_path: Path) -> None:
    h = DemandHistory.from_minutes(*daily(8, 0, shuffled=True))
    c = choose_by_replay(cfg_for(tmp_path), load_profiles_csv(None), "rm2", h, 0.0)
    assert c == Choice("rm2", "reactive", (), "its daily shape does not repeat") and c.saving() is None


def test_the_cheapest_at_equal_or_better_attainment(tmp_path: Path) -> None:
    h = DemandHistory.from_minutes(*daily(8, 0))
    c = choose_by_replay(cfg_for(tmp_path), load_profiles_csv(None), "rm2", h, -12 * 60.0 * 60,  # before the rise
                         candidates=["seasonal_naive"], span_min=90)
    assert [x.name for x in c.candidates] == ["reactive", "seasonal_naive"]
    base, sn = c.candidates
    want = "seasonal_naive" if sn.attainment >= base.attainment and sn.usd < base.usd else "reactive"
    assert c.picked == want and c.reason.startswith("cheapest at equal or better attainment over the last 0.0625 day")
    assert Choice("m", "ets", (Candidate("reactive", 2.0, 0.99), Candidate("ets", 1.5, 0.995)), "").saving() == 0.25


def test_the_daemon_takes_the_picks(caplog: pytest.LogCaptureFixture) -> None:
    fc = ForecastState(picked={"wnd": "ets"}, fitted_at=5.0)
    with caplog.at_level(logging.INFO, logger="costscale.audit"):
        apply_picks(fc, {"rm2": {"picked": "seasonal_naive", "saving": 0.031, "reason": "r", "candidates": {}},
                         "wnd": {"picked": "reactive", "saving": None, "reason": "does not repeat"}})
    assert fc.picked == {"rm2": "seasonal_naive"} and fc.fitted_at is None
    ev = [r.audit for r in caplog.records if getattr(r, "audit", None)]
    assert [(e["event"], e["model"], e["summary"]) for e in ev] == [
        ("forecaster", "rm2", "rm2 plans with seasonal_naive (replayed saving 3.10 % over reactive)"),
        ("forecaster", "wnd", "wnd plans with reactive")]


def test_the_daily_child_runs_costscale_forecast_choose(tmp_path: Path) -> None:
    cfg = cfg_for(tmp_path)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(json.loads(cfg.model_dump_json(exclude_unset=True))))
    now_min = int(time.time() // 60)
    with StateStore.open(tmp_path / "state.db") as s:
        s.record_demand("rm2", *daily(8, now_min, shuffled=True))
    fc = ForecastState(picked={"rm2": "ets"})

    async def go() -> None:
        ch = DailyChooser(None)
        assert not ch.maybe_start(cfg, fc, 0.0)                        # no config file: none
        ch = DailyChooser(path)
        assert not ch.maybe_start(cfg_for(tmp_path, "off"), fc, 0.0)   # mode off: none
        assert ch.maybe_start(cfg, fc, 0.0) and not ch.maybe_start(cfg, fc, 10.0)
        assert ch.task is not None
        await ch.task
        assert not ch.maybe_start(cfg, fc, 86399.0) and ch.maybe_start(cfg, fc, 86400.0)
        ch.task.cancel()
    asyncio.run(go())
    assert fc.picked == {}          # the history's days do not repeat: reactive, the old pick forgotten
