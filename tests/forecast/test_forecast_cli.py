"""``costscale forecast CONFIG [--model M] [--hours N]`` (issue #39 deliverable 4): per model the
history held, whether its day repeats, the forecaster it plans with and the next hours' forecast;
bad input is one line and exit 2."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from daemon.cli import main
from scaler.fleet.state import StateStore
from tests.config.test_config import GOOD


@pytest.fixture()
def config(tmp_path: Path) -> Path:
    f = tmp_path / "c.yaml"
    f.write_text(GOOD + f"state_path: {tmp_path / 'state.db'}\n")
    return f


def test_a_repeating_day_forecasts_yesterday(config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    now_min = int(time.time() // 60)
    fixed = now_min * 60.0 + 1.0          # the command's clock held in this minute (a minute may end meanwhile)
    monkeypatch.setattr(time, "time", lambda: fixed)
    minutes = np.arange(now_min - 8 * 1440, now_min)
    rates = 10.0 + 5.0 * np.sin(2 * np.pi * (minutes % 1440) / 1440)       # a day that repeats exactly
    with StateStore.open(tmp_path / "state.db") as s:
        s.record_demand("ncf", minutes, rates)
    assert main(["forecast", str(config), "--hours", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("forecast.mode off, quantile 0.9, candidates seasonal_naive, ets (reactive always)")
    assert out[1].startswith("ncf: 11,520 minutes held; daily shape repeats (day-to-day correlation 1.00, 0.6 needed); "
                             "plans with seasonal_naive; lead now ")
    # yesterday's next hour: the 61 minutes the hour from 1 s into this minute overlaps (the last by 1 s)
    hour0 = rates[(minutes >= now_min - 1440) & (minutes <= now_min - 1440 + 60)].max()
    assert out[2].endswith(f"q90 {hour0:.2f} q/s") and len(out) == 4


def test_no_history_is_reactive_and_bad_input_is_one_line(config: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["forecast", str(config)]) == 2
    assert capsys.readouterr().err.startswith(f"costscale: forecast: no state store at {tmp_path / 'state.db'} ")
    StateStore.open(tmp_path / "state.db").close()
    assert main(["forecast", str(config), "--model", "ncf"]) == 0
    assert capsys.readouterr().out.splitlines()[1] == "ncf: no history held: reactive (plans on the measured demand)"
    assert main(["forecast", str(config), "--model", "nope"]) == 2
    assert capsys.readouterr().err.startswith("costscale: forecast: --model 'nope' is not in the config")
    assert main(["forecast", str(config), "--hours", "0"]) == 2
    assert capsys.readouterr().err.strip() == "costscale: forecast: --hours must be 1 .. 23, got 0"
