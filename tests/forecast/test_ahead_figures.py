"""The figures README "Forecasting" quotes for planning ahead, held by a test (issue #39 acceptance):
bench/forecast/ahead_bench.py's gentle day (rm2, examples/replay-rm2.yaml, 06:00-12:00 of a two-peak
day after 7 days of history from the same generator), reactive and planning ahead against the
hindsight reference, and the shuffled history planning as reactive."""
from __future__ import annotations

from pathlib import Path

import pytest

from bench.forecast import ahead_bench as bench
from bench.forecast._config import perfect_forecast
from config.profiles import load_profiles_csv
from daemon.commands.history import replay_history
from sim.replay.baselines import run_baseline
from sim.replay.report import report
from sim.replay.run import ReplaySpec, replay

DUR = bench.HOURS * 3600.0


def _fig(run) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    r = report(run)
    return round(float(r["cost_usd"]), 4), round(100 * float(r["slo_attainment"]), 2)


@pytest.mark.slow
def test_the_two_peak_day_figures(tmp_path: Path) -> None:
    profiles = load_profiles_csv(None)
    off, on = bench.config("off", 90, 60), bench.config("on", 90, 60)
    wl = bench.scored_workload(off, 40.0, 1)
    hist, shuf = tmp_path / "h.csv", tmp_path / "s.csv"
    bench.write_history(hist, bench.history_rows(40.0, 1, False))
    bench.write_history(shuf, bench.history_rows(40.0, 1, True))
    hind = _fig(run_baseline("hindsight", off, profiles, wl, DUR, ReplaySpec()))
    reactive = _fig(replay(off, profiles, wl, DUR, ReplaySpec()))
    ahead = _fig(replay(on, profiles, wl, DUR, ReplaySpec(history=replay_history(str(hist), on))))
    shuffled = _fig(replay(on, profiles, wl, DUR, ReplaySpec(history=replay_history(str(shuf), on))))
    assert hind == (5.4034, 99.41)
    assert reactive == (5.8069, 99.59) and round(reactive[0] / hind[0], 3) == 1.075
    assert ahead == (5.6915, 99.54) and round(ahead[0] / hind[0], 3) == 1.053
    assert shuffled == reactive


def test_a_perfect_forecast_under_the_examples_rules_costs_more_than_the_goal() -> None:
    """README "What it does on the example": on this config no forecaster reaches 1.03x hindsight,
    since a perfect one pays the 10 % headroom (1.034x) and the 300 s scale-in hold (1.046x)."""
    on = bench.config("on", 90, 60)
    pf = perfect_forecast(on, load_profiles_csv(None), bench.scored_workload(on, 40.0, 1), DUR)
    assert round(pf["hindsight_pools_usd"], 4) == 5.4034
    assert (round(pf["headroom"], 3), round(pf["headroom_and_hold"], 3)) == (1.034, 1.046)
    half = perfect_forecast(bench.config("on", 90, 60, headroom=0.05), load_profiles_csv(None),
                                  bench.scored_workload(on, 40.0, 1), DUR)
    assert (round(half["headroom"], 3), round(half["headroom_and_hold"], 3)) == (1.014, 1.025)
