"""The shipped configuration that plans ahead (examples/replay-rm2-ahead.yaml) meets issue #39's single-model goal
on bench/forecast/ahead_bench.py's gentle day (rm2, 06:00-12:00 of a two-peak day after 7 days of history from the
same generator, seed 1): <= 1.03x the hindsight reference at >= 99.5 % within SLO (README "Forecasting", BENCHMARKS
"forecast-ahead", "A configuration that plans ahead": reacting under the same settings, 1.010x at 99.48 %, is left to
the bench to keep this test cheap: about 25 s of one core)."""
from __future__ import annotations

from pathlib import Path

import pytest

from bench.forecast import ahead_bench as bench
from config.profiles import load_profiles_csv
from daemon.commands.history import replay_history
from sim.replay.baselines import run_baseline
from sim.replay.run import ReplaySpec, replay
from tests.forecast.test_ahead_figures import DUR, _fig

EXAMPLE = "replay-rm2-ahead.yaml"


@pytest.mark.slow
def test_the_ahead_example_meets_the_single_model_goal(tmp_path: Path) -> None:
    profiles = load_profiles_csv(None)
    off, on = bench.config("off", 90, 60, example=EXAMPLE), bench.config("on", 90, 60, example=EXAMPLE)
    assert (on.headroom, on.intervals.scale_in_s, on.model_scaling.vm_park_s, on.dispatcher.batching) == \
        (0.05, 60.0, 30.0, "work_conserving")
    wl = bench.scored_workload(off, 40.0, 1)
    hist = tmp_path / "h.csv"
    bench.write_history(hist, bench.history_rows(40.0, 1, False))
    hind = _fig(run_baseline("hindsight", off, profiles, wl, DUR, ReplaySpec()))
    ahead = _fig(replay(on, profiles, wl, DUR, ReplaySpec(history=replay_history(str(hist), on))))
    assert hind == (5.4034, 99.46)
    assert ahead == (5.5172, 99.51) and round(ahead[0] / hind[0], 3) == 1.021     # the goal: met
