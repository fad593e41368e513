"""``costscale plan``: JSON shape for the five Kairos models at budget 2.5, flag errors exit 2."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from daemon.cli import main

QOS = {"ncf": 5, "rm2": 350, "wnd": 25, "mtwnd": 25, "dien": 35}
PRICES = {"g4dn.xlarge": 0.526, "c5n.2xlarge": 0.432, "r5n.large": 0.149, "t3.xlarge": 0.1664}
KEYS = ["model", "budget_per_hour", "base_type", "chosen", "cost_per_hour", "upper_bound_qps", "rule",
        "pools_ranked", "ranked", "models", "estimated", "estimated_picked", "estimates", "left_out_estimated"]


@pytest.fixture()
def cfg(tmp_path: Path) -> str:
    models = "\n".join(f"  - name: {m}\n    qos_ms: {q}" for m, q in QOS.items())
    types = "\n".join(f"  - type: {t}" for t in PRICES)
    p = tmp_path / "costscale.yaml"
    p.write_text(
        f"cluster: test\nbudget_per_hour: 2.5\nobjective: max_throughput\nmodels:\n{models}\n"
        f"instance_types:\n{types}\nlaunch:\n  ami_id: ami-0123456789abcdef0\n"
        "workload:\n  batch_dist: deeprecsys\n",
        encoding="utf-8",
    )
    return str(p)


@pytest.mark.parametrize("model", list(QOS))
def test_plan_json_each_model(cfg: str, model: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The similarity pick (``--confirm 0``: unconfirmed)."""
    assert main(["plan", cfg, "--model", model, "--qos-ms", str(QOS[model]), "--json", "--confirm", "0"]) == 0
    out = capsys.readouterr().out
    d = json.loads(out)  # exactly one object
    assert out.count("\n") == 1
    assert list(d) == KEYS
    assert d["model"] == model and d["budget_per_hour"] == 2.5
    assert d["base_type"] == "g4dn.xlarge"
    assert set(d["chosen"]) == set(PRICES)
    cost = sum(PRICES[t] * n for t, n in d["chosen"].items())
    assert cost <= 2.5 + 1e-9 and d["cost_per_hour"] == pytest.approx(cost, abs=1e-6)
    assert d["rule"] in ("top3-same-base", "min-sse-top10")
    assert len(d["ranked"]) == 10 and d["pools_ranked"] >= 10
    assert d["chosen"] in [r["pool"] for r in d["ranked"]]
    bounds = [r["upper_bound_qps"] for r in d["ranked"]]
    assert bounds == sorted(bounds, reverse=True) and bounds[0] > 0


def test_plan_overrides(cfg: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", cfg, "--model", "rm2", "--budget", "1.2", "--types", "g4dn.xlarge,r5n.large",
            "--batch-dist", "fixed:100", "--top", "3", "--json"]
    assert main(argv) == 0
    d = json.loads(capsys.readouterr().out)
    assert set(d["chosen"]) == {"g4dn.xlarge", "r5n.large"}
    assert d["budget_per_hour"] == 1.2 and d["cost_per_hour"] <= 1.2 + 1e-9 and len(d["ranked"]) == 3
    # fixed:100 fits r5n.large's QoS region and r5n is the better QPS per dollar: it becomes the base
    assert d["base_type"] == "r5n.large"


def test_plan_human_output(cfg: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", cfg, "--model", "wnd", "--top", "4"]) == 0
    out = capsys.readouterr().out
    assert "base type: g4dn.xlarge" in out and "rule " in out and "pick:" in out
    for t in ("c5n.2xlarge", "r5n.large", "t3.xlarge"):
        assert f"auxiliary {t}: s = " in out


def test_plan_min_cost(cfg: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", cfg, "--model", "ncf", "--objective", "min_cost", "--demand-qps", "100000", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rule"] == "min-cost-unmet"


@pytest.mark.parametrize("extra,needle", [
    (["--model", "nope"], "unknown model"),
    (["--types", "g4dn.xlarge,x9.huge"], "unknown instance type"),
    (["--types", "m5.xlarge"], "instance_types[].allow_estimates: true"),
    (["--types", "t3.xlarge"], "QoS target"),
    (["--budget", "-1"], "--budget"),
    (["--budget", "abc"], "--budget"),
    (["--qos-ms", "0"], "--qos-ms"),
    (["--batch-dist", "weird"], "batch distribution"),
    (["--top", "0"], "--top"),
    (["--budget", "0.1"], "no pool fits"),
    (["--bogus"], "unrecognized"),
])
def test_plan_bad_flags_exit_2(cfg: str, extra: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", cfg, *extra]) == 2
    cap = capsys.readouterr()
    assert cap.out == ""
    assert needle in cap.err and len(cap.err.strip().splitlines()) == 1 and "Traceback" not in cap.err


def test_plan_model_without_profiles(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "c.yaml"
    p.write_text("cluster: t\nbudget_per_hour: 2.5\nmodels:\n  - {name: bert, qos_ms: 50}\n"
                 "instance_types:\n  - {type: g4dn.xlarge}\nlaunch: {ami_id: ami-1}\n", encoding="utf-8")
    assert main(["plan", str(p)]) == 2
    assert "no latency profiles for 'bert'" in capsys.readouterr().err


def test_plan_missing_config(tmp_path: Path) -> None:
    assert main(["plan", str(tmp_path / "none.yaml")]) == 2


def test_plan_confirm_json_and_the_issue_16_case(cfg: str, capsys: pytest.CaptureFixture[str]) -> None:
    # issue 16: budget 1, g4dn + r5n, 10 ms, fixed:64 used to pick r5n x3 ($0.447) though r5n x6 fits
    argv = ["plan", cfg, "--model", "ncf", "--budget", "1", "--types", "g4dn.xlarge,r5n.large", "--qos-ms", "10",
            "--batch-dist", "fixed:64", "--json"]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["chosen"] == {"g4dn.xlarge": 0, "r5n.large": 6}
    assert main(argv + ["--confirm", "2"]) == 0
    d = json.loads(capsys.readouterr().out)
    c = d["confirmation"]
    # the pick is the homogeneous base pool itself: one simulation answers both
    assert d["rule"].startswith("confirmed:") and len(c["evaluated"]) == 1
    assert c["homogeneous"] == {"g4dn.xlarge": 0, "r5n.large": 6} == c["evaluated"][0]["pool"]
    assert c["pick_qps"] >= c["homogeneous_qps"] > 0
    assert main(["plan", cfg, "--confirm", "1"]) == 2


def test_plan_confirms_by_default_as_the_daemon_does(cfg: str, capsys: pytest.CaptureFixture[str]) -> None:
    """max_throughput: the pool the daemon holds is the pick confirmed with the config's
    confirm_evaluations (4), never measured below the homogeneous base pool; --confirm 0 is the
    similarity pick; min_cost confirms nothing."""
    argv = ["plan", cfg, "--model", "rm2", "--batch-dist", "gaussian", "--json"]
    assert main(argv) == 0
    d = json.loads(capsys.readouterr().out)
    c = d["confirmation"]
    assert d["rule"].startswith("confirmed:") and 2 <= len(c["evaluated"]) <= 4
    assert c["pick_qps"] >= c["homogeneous_qps"] > 0 and c["pick_qps"] == max(e["qps"] for e in c["evaluated"])
    assert main(argv + ["--confirm", "0"]) == 0
    assert "confirmation" not in json.loads(capsys.readouterr().out)
    assert main(argv + ["--objective", "min_cost"]) == 0
    assert "confirmation" not in json.loads(capsys.readouterr().out)


def test_plan_exhaustive_is_the_same_plan(cfg: str, capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """--exhaustive ranks every pool; the default searches above scaler.planner.choose.SEARCH_ABOVE pools (set
    to 0 here so that it searches): the same JSON, for both objectives."""
    import scaler.planner.choose as plan_mod
    for extra in (["--model", "dien"], ["--model", "wnd", "--objective", "min_cost", "--demand-qps", "400"]):
        argv = ["plan", cfg, *extra, "--budget", "4", "--json", "--confirm", "0"]
        assert main([*argv, "--exhaustive"]) == 0
        ranked = json.loads(capsys.readouterr().out)
        monkeypatch.setattr(plan_mod, "SEARCH_ABOVE", 0)
        assert main(argv) == 0
        assert json.loads(capsys.readouterr().out) == ranked and ranked["pools_ranked"] == 3378
        monkeypatch.undo()


def test_plan_over_the_whole_catalog_at_20_per_hour(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every catalog type at 20 $/hr (the 8 without a Kairos profile: scaled copies of a measured
    type in a profile CSV of their own): the search plans it; --exhaustive refuses in one line."""
    from dataclasses import replace
    from config.catalog import load_catalog
    from config.profiles import load_profiles_csv, save_profiles_csv
    scaled = {"g4dn.2xlarge": ("g4dn.xlarge", 0.95), "g5.xlarge": ("g4dn.xlarge", 0.55),
              "inf1.xlarge": ("g4dn.xlarge", 2.4), "inf2.xlarge": ("g4dn.xlarge", 0.75),
              "c5.2xlarge": ("c5n.2xlarge", 1.05), "c6i.2xlarge": ("c5n.2xlarge", 0.92),
              "m5.xlarge": ("t3.xlarge", 1.0), "r5.large": ("r5n.large", 1.03)}
    table = load_profiles_csv()
    catalog = list(load_catalog())
    rows = []
    for t in catalog:
        src, k = scaled.get(t, (t, 1.0))
        p = table.get("dien", src)
        rows.append(replace(p, instance_type=t, mean_ms=p.mean_ms * k, p50_ms=p.p50_ms * k, p99_ms=p.p99_ms * k))
    save_profiles_csv(tmp_path / "p.csv", rows)
    types = "\n".join(f"  - type: {t}" for t in catalog)
    c = tmp_path / "c.yaml"
    c.write_text(f"cluster: t\nbudget_per_hour: 20\nmodels:\n  - {{name: dien, qos_ms: 35}}\ninstance_types:\n{types}\n"
                 f"launch: {{ami_id: ami-1}}\nprofiles: {tmp_path / 'p.csv'}\nworkload:\n  batch_dist: deeprecsys\n",
                 encoding="utf-8")
    assert main(["plan", str(c), "--json", "--confirm", "0"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["pools_ranked"] == 16_576_648_012_014 and len(d["ranked"]) == 10
    assert d["cost_per_hour"] <= 20 + 1e-9 and d["upper_bound_qps"] > 0
    assert main(["plan", str(c), "--json", "--confirm", "0", "--exhaustive"]) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and len(cap.err.strip().splitlines()) == 1
    assert "plan: 16,576,648,012,014 pools within budget 20 $/hr over 12 types: too many to list" in cap.err
