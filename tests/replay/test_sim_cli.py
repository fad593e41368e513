"""``costscale simulate`` / ``costscale capacity``: JSON keys, human output, bad input -> exit 2."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from daemon.cli import main

CONFIG = """\
cluster: t
budget_per_hour: 2.5
models:
  - name: dien
    qos_ms: 35
  - name: nope
    qos_ms: 10
instance_types:
  - type: g4dn.xlarge
  - type: r5n.large
    price_per_hour: 0.2
launch:
  ami_id: ami-1
dispatcher:
  policy: fcfs
"""


@pytest.fixture()
def cfg(tmp_path: Path) -> str:
    p = tmp_path / "c.yaml"
    p.write_text(CONFIG)
    return str(p)


def run_json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict:
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    return json.loads(out)


def test_simulate_json(cfg: str, capsys: pytest.CaptureFixture[str]) -> None:
    d = run_json(capsys, ["simulate", cfg, "--model", "dien", "--pool", "g4dn.xlarge=1,r5n.large=2", "--policy", "first-idle",
                          "--rate", "100", "--duration", "5", "--json"])
    for k in ("served", "p50_ms", "p99_ms", "violation_ratio", "throughput_qps", "cost_per_hour", "utilization"):
        assert k in d
    assert d["cost_per_hour"] == pytest.approx(0.526 + 2 * 0.2)   # the config's price override
    assert d["served"] > 300 and 0 <= d["violation_ratio"] <= 1
    assert set(d["utilization"]) == {"g4dn.xlarge-0", "r5n.large-0", "r5n.large-1"}
    again = run_json(capsys, ["simulate", cfg, "--model", "dien", "--pool", "g4dn.xlarge=1,r5n.large=2", "--policy", "first-idle",
                              "--rate", "100", "--duration", "5", "--json"])
    assert again == d


def test_simulate_trace_and_text(cfg: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text("timestamp,model,batch_size\n0,dien,100\n0.001,dien,100\n0.5,other,3\n1.0,dien,1000\n")
    d = run_json(capsys, ["simulate", cfg, "--model", "dien", "--pool", "g4dn.xlarge=1", "--trace", str(trace), "--json"])
    assert d["served"] == 3 and d["queries"] == 3
    assert main(["simulate", cfg, "--model", "dien", "--pool", "g4dn.xlarge=1", "--rate", "50", "--duration", "2"]) == 0
    assert "p99" in capsys.readouterr().out


def test_capacity_json(cfg: str, capsys: pytest.CaptureFixture[str]) -> None:
    d = run_json(capsys, ["capacity", cfg, "--model", "dien", "--pool", "g4dn.xlarge=1,r5n.large=1", "--policy", "first-idle",
                          "--queries", "500", "--precision", "0.1", "--json"])
    for k in ("allowable_qps", "p99_ms", "cost_per_hour", "oracle_qps"):
        assert k in d
    assert 0 < d["allowable_qps"] <= d["oracle_qps"]
    assert d["p99_ms"] <= 35.0


@pytest.mark.parametrize("argv", [
    ["simulate", "{cfg}", "--model", "dien", "--pool", "g4dn.xlarge", "--rate", "10"],
    ["simulate", "{cfg}", "--model", "dien", "--pool", "g4dn.xlarge=x", "--rate", "10"],
    ["simulate", "{cfg}", "--model", "dien", "--pool", "nosuch.type=1", "--rate", "10"],
    ["simulate", "{cfg}", "--model", "dien", "--pool", "g4dn.xlarge=1,g4dn.xlarge=2", "--rate", "10"],
    ["simulate", "{cfg}", "--model", "dien", "--pool", "g4dn.xlarge=0", "--rate", "10"],
    ["simulate", "{cfg}", "--model", "dien", "--pool", "g4dn.xlarge=1", "--rate", "-5"],
    ["simulate", "{cfg}", "--model", "dien", "--pool", "g4dn.xlarge=1"],
    ["simulate", "{cfg}", "--model", "dien", "--pool", "g4dn.xlarge=1", "--rate", "10", "--policy", "bogus"],
    ["simulate", "{cfg}", "--model", "dien", "--pool", "g4dn.xlarge=1", "--rate", "10", "--model", "zzz"],
    ["simulate", "{cfg}", "--model", "dien", "--pool", "g4dn.xlarge=1", "--rate", "10", "--model", "nope"],
    ["simulate", "{cfg}", "--model", "dien", "--pool", "g4dn.xlarge=1", "--rate", "10", "--batch-dist", "weird"],
    ["simulate", "{cfg}", "--model", "dien", "--pool", "g4dn.xlarge=1", "--rate", "10", "--qos-ms", "0"],
    ["simulate", "{cfg}", "--model", "dien", "--pool", "g4dn.xlarge=1", "--rate", "10", "--profiles", "/no/such.csv"],
    ["simulate", "{cfg}", "--model", "dien", "--pool", "g4dn.xlarge=1", "--trace", "/no/such.csv"],
    ["simulate", "{cfg}", "--model", "dien", "--pool", "g4dn.xlarge=1", "--rate", "10", "--trace", "x.csv"],
    ["simulate", "/no/such.yaml", "--pool", "g4dn.xlarge=1", "--rate", "10"],
    # unbounded work from a flag (1e9 q/s for 1 s once grew to 24 GB): refused before any allocation
    ["simulate", "{cfg}", "--model", "dien", "--pool", "g4dn.xlarge=1", "--rate", "1e9", "--duration", "1"],
    ["capacity", "{cfg}", "--pool", "g4dn.xlarge=1", "--queries", "1000000000"],
    ["capacity", "{cfg}", "--pool", "g4dn.xlarge=1", "--precision", "2"],
    ["capacity", "{cfg}", "--pool", "bad"],
    ["capacity", "{cfg}"],
])
def test_bad_input_exits_2(cfg: str, argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([a.replace("{cfg}", cfg) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_a_pool_on_an_estimated_type_simulates_and_says_it_rests_on_an_estimate(
        cfg: str, capsys: pytest.CaptureFixture[str]) -> None:
    """dien was never measured on inf1.xlarge: a pool named there is a what-if on the type table's
    estimate (g4dn.xlarge x 6.4, config/type_estimates.csv), run and said on stderr in one line."""
    assert main(["simulate", cfg, "--model", "dien", "--pool", "inf1.xlarge=1", "--rate", "10"]) == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "inf1.xlarge runs at an estimated profile, not a measured one" in err and "x 6.4" in err

