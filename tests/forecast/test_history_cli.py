"""``costscale history import|show`` and ``costscale replay --history`` (issue #39 deliverable 1):
the CSV seeds the state store; a bad row, an unknown model, a time after now, an unreadable file or
a held store is one line and exit 2, nothing written."""
from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from config.schema import load_config
from daemon.cli import main
from daemon.commands.history import replay_history
from scaler.fleet.state import StateStore
from tests.config.test_config import GOOD

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def config(tmp_path: Path) -> Path:
    f = tmp_path / "c.yaml"
    f.write_text(GOOD + f"state_path: {tmp_path / 'state.db'}\nforecast:\n  retention_days: 2\n")
    return f


def _when(minute: int) -> str:
    return datetime.fromtimestamp(minute * 60, tz=timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def test_import_then_show(config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = int(time.time() // 60) - 100            # a minute 100 minutes ago
    csv = tmp_path / "h.csv"
    rows = ["timestamp,model,qps"]
    rows += [f"{base * 60},ncf,2", f"{base * 60 + 30},ncf,4"]               # two rows in one minute: their mean
    rows += [f"{(base + 1) * 60 + 5},ncf,1.5", f"{(base + 5) * 60},ncf,0"]  # minutes 2..4 unmeasured
    rows += [f"{(base - 3 * 1440) * 60},ncf,9"]                             # past the 2-day retention
    csv.write_text("\n".join(rows) + "\n")
    assert main(["history", "import", str(csv), "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert out.strip() == (f"imported 5 rows into {tmp_path / 'state.db'}: 3 minutes of 1 series; 1 minute(s) older "
                           "than the 2-day retention dropped")
    with StateStore.open(tmp_path / "state.db", lock=False) as s:
        h = s.demand_history("ncf", 2 * 86400.0)
        assert (h.at(base), h.at(base + 1), h.at(base + 5), h.known) == (3.0, 1.5, 0.0, 3)
    assert main(["history", "show", "--config", str(config)]) == 0
    assert capsys.readouterr().out.strip() == (
        f"ncf: 3 minutes measured over 0.00 days ({_when(base)} .. {_when(base + 6)}); 1 gap(s), 3 minutes "
        f"unmeasured, the longest 3 minutes from {_when(base + 2)}")


def test_negative_timestamps_are_seconds_before_now(config: Path, tmp_path: Path) -> None:
    csv = tmp_path / "h.csv"
    csv.write_text("model,qps,timestamp\nncf,5,-3600\n")                  # columns in any order
    before = time.time()
    assert main(["history", "import", str(csv), "--config", str(config)]) == 0
    with StateStore.open(tmp_path / "state.db", lock=False) as s:
        h = s.demand_history("ncf", 86400.0)
        assert h.known == 1 and int((before - 3600) // 60) <= h.first_minute <= int((time.time() - 3600) // 60)


@pytest.mark.parametrize("text,expect", [
    ("timestamp,model,qps\n-60,ncf,abc\n", "h.csv line 2: qps 'abc' is not a number"),
    ("timestamp,model,qps\n-60,ncf,1\n-120,dien,2\n", "h.csv line 3: model 'dien' is not in the config (known: ncf)"),
    ("timestamp,model,qps\n-60,ncf,-1\n", "h.csv line 2: qps -1 is negative"),
    ("timestamp,model,qps\n-60,ncf,nan\n", "h.csv line 2: qps 'nan' is not finite"),
    ("timestamp,model,qps\nsoon,ncf,1\n", "h.csv line 2: timestamp 'soon' is not a number"),
    ("timestamp,model,qps\n-60,ncf\n", "h.csv line 2: expected 3 columns, got 2"),
    ("timestamp,model,qps\n-60,,1\n", "h.csv line 2: the model is empty"),
    ("timestamp,model,qps\n99999999999,ncf,1\n", "h.csv line 2: timestamp 99999999999 is not before now"),
    ("time,model,qps\n-60,ncf,1\n", "h.csv line 1: the header needs the columns timestamp,model,qps (missing timestamp)"),
    ("", "h.csv: empty file"),
])
def test_a_bad_csv_is_one_line_exit_2_and_nothing_written(text: str, expect: str, config: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    csv = tmp_path / "h.csv"
    csv.write_text(text)
    assert main(["history", "import", str(csv), "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert expect in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "state.db").exists()


def test_an_unreadable_file_or_a_held_store_is_one_line(config: Path, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["history", "import", str(tmp_path / "none.csv"), "--config", str(config)]) == 2
    assert capsys.readouterr().err.strip() == f"costscale: history import: {tmp_path / 'none.csv'}: no such file"
    csv = tmp_path / "h.csv"
    csv.write_text("timestamp,model,qps\n-60,ncf,1\n")
    with StateStore.open(tmp_path / "state.db"):          # a running daemon holds the store
        assert main(["history", "import", str(csv), "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "another costscale daemon" in err and len(err.strip().splitlines()) == 1


def test_show_refuses_an_unknown_model_and_a_missing_store(config: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["history", "show", "--model", "dien", "--config", str(config)]) == 2
    assert "history show: --model 'dien' is not in the config (known: ncf)" in capsys.readouterr().err
    assert main(["history", "show", "--config", str(config)]) == 2
    assert f"no state store at {tmp_path / 'state.db'}" in capsys.readouterr().err
    with StateStore.open(tmp_path / "state.db"):
        pass
    assert main(["history", "show", "--model", "ncf", "--config", str(config)]) == 0
    assert capsys.readouterr().out.strip() == "ncf: nothing held"


def test_history_imports_its_own_module_alone() -> None:
    from daemon.cli import COMMANDS, command_modules

    assert "history" in COMMANDS and command_modules(["history", "show"]) == ("history",)


def test_the_replays_history_is_before_the_trace(config: Path, tmp_path: Path) -> None:
    csv = tmp_path / "h.csv"
    csv.write_text("timestamp,model,qps\n-86400,ncf,3\n-86370,ncf,5\n-60,ncf,1\n")
    got = replay_history(str(csv), load_config(config))
    h = got["ncf"]
    assert list(got) == ["ncf"] and (h.first_minute, h.last_minute, h.known) == (-1440, -1, 2)
    assert h.at(-1440) == 4.0 and h.at(-1) == 1.0


def test_replay_history_refuses_a_row_in_the_trace_and_hands_the_rest_over(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    csv = tmp_path / "h.csv"
    csv.write_text("timestamp,model,qps\n-120,rm2,3\n0,rm2,5\n")
    cmd = ["replay", str(ROOT / "examples/replay-rm2.yaml"), "--pattern", "step:low=2,high=4,at_s=60",
           "--hours", "0.05", "--json", "--history", str(csv)]
    assert main(cmd) == 2
    err = capsys.readouterr().err
    assert "replay --history: " in err and "h.csv line 3: timestamp 0 is not before the trace's start" in err
    assert len(err.strip().splitlines()) == 1
    csv.write_text("timestamp,model,qps\n-120,rm2,3\n-60,rm2,5\n")
    assert main(cmd) == 0
    assert json.loads(capsys.readouterr().out)["history_minutes"] == {"rm2": 2}
