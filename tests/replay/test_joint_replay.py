"""The replay of several models on one clock and one budget (issue #24), and its command."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from config.profiles import load_profiles_csv
from config.schema import Config
from daemon.cli import main
from sim.replay.outcomes import SERVED
from sim.replay.run import ReplaySpec, replay
from sim.replay.report import report
from sim.workload import Workload
from tests.replay.test_replay import _cfg as replay_cfg

ROOT = Path(__file__).resolve().parents[2]
THREE = ROOT / "examples" / "replay-three.yaml"


def _cfg(tmp_path: Path) -> Config:
    """test_replay's config with dien listed first, then rm2, declared at 1 q/s each."""
    return replay_cfg(tmp_path, models=[{"name": "dien", "qos_ms": 35, "max_batch": 1000},
                                        {"name": "rm2", "qos_ms": 350, "max_batch": 1000}],
                      workload={"batch_dist": "deeprecsys", "expected_qps": 1})


def _poisson(rate: float, secs: float, seed: int, batch: int = 10) -> Workload:
    rng = np.random.default_rng(seed)
    arr = np.sort(rng.uniform(0.0, secs, rng.poisson(rate * secs)))
    return Workload(arr, np.full(arr.size, batch, dtype=np.int64))


def _steps(rates: list[tuple[float, float]], seed: int, batch: int = 200) -> Workload:
    rng = np.random.default_rng(seed)
    out, t0 = [], 0.0
    for rate, secs in rates:
        out.append(np.sort(rng.uniform(t0, t0 + secs, rng.poisson(rate * secs))))
        t0 += secs
    arr = np.concatenate(out)
    return Workload(arr, np.full(arr.size, batch, dtype=np.int64))


@pytest.fixture(scope="module")
def profiles():  # type: ignore[no-untyped-def]
    return load_profiles_csv(None)


def test_the_pool_follows_the_model_listed_second(tmp_path: Path, profiles) -> None:  # type: ignore[no-untyped-def]
    """dien (listed first) idles at 1 q/s; rm2 (second, batches of 200) steps from 5 to 40 q/s. rm2's workers grow
    with its load while dien keeps one worker, both models hold their SLOs, the budget holds."""
    cfg = _cfg(tmp_path)
    loads = {"dien": _poisson(1.0, 1200.0, 1), "rm2": _steps([(5.0, 600.0), (40.0, 600.0)], 2)}
    run = replay(cfg, profiles, loads, 1200.0, ReplaySpec())
    rep = report(run)
    assert set(rep["models"]) == {"dien", "rm2"} and rep["model"] == "dien+rm2"
    assert rep["models"]["rm2"]["queries"] == len(loads["rm2"]) and rep["queries"] == len(loads["rm2"]) + len(loads["dien"])
    assert rep["budget_violations"] == 0
    assert rep["models"]["dien"]["slo_attainment"] >= 0.99
    q = run.lanes["rm2"]                               # once the step's instances have booted (60 s)
    late = q.arr >= 700.0
    assert float(((q.outcome == SERVED) & (q.latency <= q.qos_ms))[late].mean()) >= 0.99
    before = [c for c in run.targets if c.at_s < 600.0][-1]
    after = run.targets[-1]
    rm2_before = sum(before.shares["rm2"].values())
    rm2_after = sum(after.shares["rm2"].values())
    assert rm2_after > rm2_before                      # the pool followed rm2
    assert sum(after.shares["dien"].values()) == 1     # dien's one worker, untouched
    # every rm2 query was served by a worker planned for rm2: dien's lane saw only dien's queries
    assert run.lanes["dien"].n == len(loads["dien"])


def test_one_model_in_a_two_model_config_is_a_filter(tmp_path: Path, profiles) -> None:  # type: ignore[no-untyped-def]
    cfg = _cfg(tmp_path)
    run = replay(cfg, profiles, {"rm2": _poisson(5.0, 300.0, 3)}, 300.0, ReplaySpec())
    rep = report(run)
    assert list(rep["models"]) == ["rm2"] and rep["model"] == "rm2" and rep["qos_ms"] == 350.0
    assert run.targets[0].shares["dien"]                # dien still holds its planned worker


def _trace(path: Path, rows: list[tuple[float, str, int]]) -> Path:
    path.write_text("timestamp,model,batch_size\n" + "".join(f"{t},{m},{b}\n" for t, m, b in rows))
    return path


def test_the_command_replays_every_model_of_a_trace(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(5)
    rows = [(float(t), "recommend", 20) for t in np.sort(rng.uniform(0, 300, 1500))]
    rows += [(float(t), "wnd", 5) for t in np.sort(rng.uniform(0, 300, 3000))]
    csv = _trace(tmp_path / "two.csv", sorted(rows))
    assert main(["replay", str(THREE), "--trace", str(csv), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["models"]) == {"rm2", "wnd"}            # rows of the application 'recommend' are rm2's
    assert out["models"]["rm2"]["queries"] == 1500 and out["models"]["wnd"]["queries"] == 3000
    assert out["queries"] == 4500 and out["budget_violations"] == 0
    assert main(["replay", str(THREE), "--trace", str(csv), "--model", "wnd", "--json"]) == 0
    assert list(json.loads(capsys.readouterr().out)["models"]) == ["wnd"]


def test_bad_input_is_one_line(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    csv = _trace(tmp_path / "bad.csv", [(0.0, "ncf", 1)])
    assert main(["replay", str(THREE), "--trace", str(csv)]) == 2
    err = capsys.readouterr().err
    assert "model 'ncf' is not in the config" in err and "Traceback" not in err
    assert main(["replay", str(THREE), "--pattern", "step:low=1,high=2"]) == 2
    assert "add model=NAME to each pattern" in capsys.readouterr().err
    assert main(["replay", str(THREE), "--pattern", "step:low=1,high=2,model=nope"]) == 2
    assert "model 'nope' is not in the config" in capsys.readouterr().err
    for bad in ("0", "-1", "heavy"):
        cfg = tmp_path / f"w{bad}.yaml"
        cfg.write_text(THREE.read_text().replace("weight: 2 ", f"weight: {bad} "))
        assert main(["validate", str(cfg)]) == 2
        err = capsys.readouterr().err
        assert "weight" in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


# ---- costscale plan, every model at once ---------------------------------------------------------

def test_plan_prints_the_joint_plan_and_a_what_if(capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["plan", str(THREE), "--json", "--demand-qps", "rm2=200,wnd=600,dien=100"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["models"]) == {"rm2", "wnd", "dien"} and out["cost_per_hour"] <= 3.0 + 1e-9
    for m, s in out["models"].items():
        assert set(s) >= {"workers", "capacity_qps", "demand_qps", "short_qps"}
    assert out["models"]["wnd"]["demand_qps"] == 600.0 and set(out["short"]) == {"rm2", "wnd", "dien"}
    pool: dict[str, int] = {}
    for s in out["models"].values():
        for t, n in s["workers"].items():
            pool[t] = pool.get(t, 0) + n
    assert pool == out["pool"]
    assert main(["plan", str(THREE)]) == 0
    text = capsys.readouterr().out
    assert "joint plan of 3 models" in text and "rule joint-min-cost" in text and "short:" not in text
    assert main(["plan", str(THREE), "--model", "rm2", "--demand-qps", "40", "--json"]) == 0
    single = json.loads(capsys.readouterr().out)
    assert single["model"] == "rm2" and list(single["models"]) == ["rm2"] and "chosen" in single


def test_plan_refuses_an_ambiguous_demand(capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["plan", str(THREE), "--demand-qps", "5"]) == 2
    assert "give M=Q" in capsys.readouterr().err
    assert main(["plan", str(THREE), "--demand-qps", "ncf=5"]) == 2
    assert "'ncf' is not in the config" in capsys.readouterr().err
    assert main(["plan", str(THREE), "--demand-qps", "rm2=fast"]) == 2
    assert "not a number" in capsys.readouterr().err


def test_one_model_commands_ask_which_model(capsys) -> None:  # type: ignore[no-untyped-def]
    """simulate and capacity judge one model: with several configured, --model is needed instead of
    a silent "the first"."""
    for cmd in ("simulate", "capacity"):
        argv = [cmd, str(THREE), "--pool", "r5n.large=1"] + (["--rate", "5"] if cmd == "simulate" else [])
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "the config has 3 models (rm2, wnd, dien): name one with --model" in err
        assert len(err.strip().splitlines()) == 1
