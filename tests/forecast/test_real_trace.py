"""The real daily trace bench/forecast/real_traffic_bench.py scores (issue #39 goal "real daily traffic"): the
committed NASA-HTTP July 1995 per-minute file loads whole, and the bench's history CSV, scaling and query draw
give the rows and queries they state."""
from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from bench.forecast import real_traffic_bench as bench


@pytest.fixture(scope="module")
def trace() -> tuple[int, np.ndarray]:
    return bench.load_trace()


def test_the_committed_trace_is_27_whole_days_of_minutes(trace: tuple[int, np.ndarray]) -> None:
    t0, qps = trace
    assert t0 == 804571200                                  # 1995-07-01 00:00 EDT
    assert qps.size == 38880 == 27 * 1440
    assert bench.days_of(qps).shape == (27, 1440)
    counts = np.round(qps * 60).astype(np.int64)            # qps is the minute's requests / 60
    assert np.allclose(counts / 60, qps, rtol=0, atol=1e-5)
    assert counts[:3].tolist() == [42, 61, 57]
    assert int(counts.sum()) == 1864593
    assert int(counts.max()) == 405 and int(counts.argmax()) // 1440 == 12      # 13 July, the STS-70 launch
    assert round(float(bench.shape_correlations(qps)[24]), 2) == 0.97


def test_the_scaling_puts_the_scored_days_busiest_minute_at_the_peak(trace: tuple[int, np.ndarray]) -> None:
    _, qps = trace
    assert bench.scale_for(qps, 24, 40.0) == 40.0 / 2.25     # 25 July's busiest minute: 135 requests


def test_the_history_csv_is_the_7_days_before_scaled(trace: tuple[int, np.ndarray], tmp_path: Path) -> None:
    _, qps = trace
    path = tmp_path / "h.csv"
    bench.write_history(path, bench.history_rows(qps, 24, 2.0))
    with path.open(newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["timestamp", "model", "qps"]
    assert len(rows) == 1 + 7 * 1440
    # 18 July 00:00-00:02 held 23, 46, 44 requests; 24 July 23:59 held 14
    assert rows[1:4] == [["-604800", "rm2", "0.766666"], ["-604740", "rm2", "1.53333"], ["-604680", "rm2", "1.46667"]]
    assert rows[-1] == ["-60", "rm2", "0.466666"]
    later = bench.history_rows(qps, 24, 1.0, first=60)      # scored from 01:00: the history moves up an hour
    assert later[0] == (-604800, float(qps[17 * 1440 + 60])) and later[-1] == (-60, float(qps[24 * 1440 + 59]))


def test_a_day_without_a_week_before_it_has_no_history(trace: tuple[int, np.ndarray]) -> None:
    with pytest.raises(ValueError, match="fewer than 7 days"):
        bench.history_rows(trace[1], 6, 1.0)


def test_queries_fall_only_in_the_minutes_with_a_rate() -> None:
    wl = bench.scored_workload(bench.config("off", 90, 60), np.array([0.0, 5.0, 0.0, 2.0]), seed=3)
    assert wl.arrivals.size == wl.batches.size > 0
    minutes = set((wl.arrivals // 60).astype(int).tolist())
    assert minutes <= {1, 3} and 1 in minutes


def test_a_perfect_forecast_of_the_scored_day_costs_1_078x_hindsight(trace: tuple[int, np.ndarray]) -> None:
    """README "On real traffic": under the example's 10 % headroom and 300 s scale-in hold a perfect
    forecast of 25 July costs 1.034x / 1.078x hindsight's pools, so the goal's 1.02x is out of reach there
    and reacting (1.085x) is within 0.7 % of it."""
    from bench.forecast._config import perfect_forecast
    from config.profiles import load_profiles_csv
    _, qps = trace
    cfg = bench.config("on", 90, 60)
    rate = bench.scale_for(qps, 24, 40.0) * bench.days_of(qps)[24]
    pf = perfect_forecast(cfg, load_profiles_csv(None), bench.scored_workload(cfg, rate, 1), 86400.0)
    assert round(pf["hindsight_pools_usd"], 4) == 18.7951
    assert (round(pf["headroom"], 3), round(pf["headroom_and_hold"], 3)) == (1.034, 1.078)
