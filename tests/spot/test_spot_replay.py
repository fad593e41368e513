"""Spot in the replay (issue #28, sim.replay.spot): an availability trace preempts spot instances
with a 2-minute notice, refuses spot launches in a zone while it is out, and no query is lost; a
spot price rise is answered at its instant within the budget at billed prices; a config without
spot, or with every type on-demand, replays exactly as before; hypothesis over random traces."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

import pytest
from hypothesis import given, settings, strategies as st

from config.profiles import load_profiles_csv
from config.schema import load_config
from daemon.cli import main
from sim.patterns import parse_pattern, pattern_workload
from sim.replay.run import ReplaySpec, replay
from sim.replay.report import report
from sim.replay.spot import SpotPriceStep
from sim.replay.spot_baselines import SPOTHEDGE_EXTRA, on_demand_only, run_spot_baseline
from sim.replay.spot_trace import read_spot_trace

ROOT = Path(__file__).resolve().parents[2]
SPOT_YAML = ROOT / "examples" / "replay-spot.yaml"
A, C, D = "us-east-1a", "us-east-1c", "us-east-1d"


@pytest.fixture(scope="module")
def setup():  # type: ignore[no-untyped-def]
    cfg = load_config(SPOT_YAML)
    return cfg, load_profiles_csv(cfg.profiles)


def flat(cfg, qps: float, seconds: float, seed: int = 0):  # type: ignore[no-untyped-def]
    return pattern_workload(parse_pattern(f"step:low={qps},high={qps}"), seconds, cfg.workload.batch_dist, seed=seed,
                            max_batch=1000)


def trace_file(tmp_path: Path, rows: list[tuple[float, str, int]], name: str = "t.csv") -> Path:
    p = tmp_path / name
    p.write_text("# test trace\ntimestamp_s,zone,instance_type,available\n"
                 + "".join(f"{t:g},{z},*,{a}\n" for t, z, a in rows))
    return p


def test_a_zone_that_goes_away_preempts_refuses_and_loses_no_query(setup, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Only us-east-1c has spot from 0; at 600 s it goes and d comes; c is back at 1200 s."""
    cfg, profiles = setup
    rows = [(0, A, 0), (0, C, 1), (0, D, 0), (600, C, 0), (600, D, 1), (1200, C, 1)]
    spec = ReplaySpec(spot_trace=read_spot_trace(trace_file(tmp_path, rows)))
    run = replay(cfg, profiles, flat(cfg, 8, 1500), 1500, spec)
    sp = run.spot
    assert sp is not None and sp["preemptions"] >= 1 and sp["preemptions_by_zone"] == {C: sp["preemptions"]}
    assert sp["queries_lost_to_preemption"] == 0 and run.ledger.violations == []
    assert sp["spot_hours_by_zone"].get(A, 0.0) == 0.0              # never available: never launched
    shares = {A: 0.0, C: round(900 / 1500, 6), D: round(900 / 1500, 6)}   # each type that may run spot: * rows
    assert sp["trace"]["available_share"] == {t.type: shares for t in cfg.instance_types}
    for at, slot, _ in run.launches:                                 # no spot launch where the trace says 0
        if slot.endswith("@" + C):
            assert not 600 <= at < 1200, (at, slot)
        if slot.endswith("@" + D):
            assert at >= 600, (at, slot)
    assert any(slot.endswith("@" + D) and 600 <= at < 610 for at, slot, _ in run.launches)   # replaced at once
    rep = report(run)
    assert rep["slo_attainment"] >= 0.99 and rep["spot"]["spot_share"] > 0.9


def test_a_query_running_on_a_reclaimed_instance_is_re_run_on_another_worker(setup) -> None:  # type: ignore[no-untyped-def]
    """QueryLoop.remove_worker(lost=True): a reclaimed worker's query goes back to the queue even
    when the worker was draining (a plain removal lets a drained worker finish it), and is served."""
    from sim.replay.outcomes import SERVED
    from sim.replay.run import make_query_loop
    from sim.workload import Workload

    cfg, profiles = setup
    wl = Workload(np.asarray([0.0, 0.01]), np.asarray([200, 200], dtype=np.int64))
    q = make_query_loop(cfg, profiles, wl, ReplaySpec(), model="rm2")
    q.add_worker("w1", "g4dn.xlarge", 0.0)
    q.run_until(0.005)
    busy = q.workers["w1"].query
    assert busy == 0
    q.set_draining("w1", True, 0.005)
    assert q.remove_worker("w1", 0.006, lost=True) == [0]              # re-run, though draining
    assert q.remove_worker("w1", 0.006, lost=True) == []               # gone: nothing twice
    q.add_worker("w2", "g4dn.xlarge", 0.007)
    q.finish(5.0)
    assert list(q.outcome) == [SERVED, SERVED] and q.requeued == 1


def test_a_spot_price_rise_is_answered_at_its_instant_within_the_budget(setup) -> None:  # type: ignore[no-untyped-def]
    """Budget 0.30 $/hr: g4dn.xlarge in c (0.2039) and r5n.large in a (0.0545) hold 6 q/s for 0.2584.
    At 300 s r5n.large in a rises to 0.10 (0.3039 > 0.30): at that instant it moves to c (0.0585)."""
    cfg, profiles = setup
    tight = cfg.model_copy(update={"budget_per_hour": 0.30})
    spec = ReplaySpec(spot_price_steps=(SpotPriceStep(300.0, "r5n.large", A, 0.10),))
    run = replay(tight, profiles, flat(cfg, 6, 900), 900, spec)
    assert run.ledger.violations == []
    assert max(c for t, c in run.ledger.steps if t >= 300) <= 0.30 + 1e-9
    moved = [(t, s) for t, s, _ in run.launches if s.startswith("r5n.large@") and t >= 300]
    assert moved and moved[0][0] == 300.0 and not moved[0][1].endswith("@" + A)
    assert run.ledger.cost_by_slot.get("r5n.large@" + A, 0.0) <= 0.0545 * 300 / 3600 + 1e-9   # gone at 300 s


def test_without_spot_the_replay_is_unchanged(setup) -> None:  # type: ignore[no-untyped-def]
    """The spot config with every market on-demand, and the rm2 example, give the same figures."""
    cfg, profiles = setup
    plain = load_config(ROOT / "examples" / "replay-rm2.yaml")
    wl = flat(cfg, 6, 600)
    a = report(replay(on_demand_only(cfg), profiles, wl, 600))
    b = report(replay(plain.model_copy(update={"cluster": cfg.cluster, "state_path": cfg.state_path}), profiles, wl, 600))
    assert "spot" not in a and "spot" not in b
    for k in ("cost_usd", "slo_attainment", "served", "instance_hours", "plans", "decisions"):
        assert a[k] == b[k], k


def test_with_no_spot_anywhere_it_costs_what_on_demand_costs(setup, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cfg, profiles = setup
    spec = ReplaySpec(spot_trace=read_spot_trace(trace_file(tmp_path, [(0, z, 0) for z in (A, C, D)])))
    wl = flat(cfg, 8, 3600)
    spot = report(replay(cfg, profiles, wl, 3600, spec))
    od = report(run_spot_baseline("on_demand_only", cfg, profiles, wl, 3600, spec))
    assert spot["spot"]["spot_share"] == 0.0 and spot["spot"]["preemptions"] == 0
    assert abs(spot["cost_usd"] / od["cost_usd"] - 1) <= 0.02
    assert abs(spot["slo_attainment"] - od["slo_attainment"]) <= 0.02


def test_spothedge_holds_one_type_with_its_overprovision(setup, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cfg, profiles = setup
    spec = ReplaySpec(spot_trace=read_spot_trace(trace_file(tmp_path, [(0, A, 1), (0, C, 1), (0, D, 1)])))
    run = run_spot_baseline("spothedge", cfg, profiles, flat(cfg, 8, 900), 900, spec)
    sp = run.spot
    assert sp is not None and sp["policy"] == "spothedge" and SPOTHEDGE_EXTRA == 1
    types = {s.split("@")[0] for s in run.ledger.instance_hours}
    assert types == {sp["replica_type"]}                       # homogeneous
    assert run.ledger.violations == [] and sp["queries_lost_to_preemption"] == 0


@settings(max_examples=6, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 9), st.sampled_from((A, C, D)), st.integers(0, 1)), min_size=1, max_size=12),
       st.integers(0, 3))
def test_random_traces_lose_no_query_and_never_exceed_the_budget(setup, tmp_path_factory, rows, seed) -> None:  # type: ignore[no-untyped-def]
    cfg, profiles = setup
    path = trace_file(tmp_path_factory.mktemp("t"), [(k * 120.0, z, a) for k, z, a in rows])
    run = replay(cfg, profiles, flat(cfg, 10, 1200, seed=seed), 1200, ReplaySpec(spot_trace=read_spot_trace(path)))
    assert run.spot is not None and run.spot["queries_lost_to_preemption"] == 0
    assert run.ledger.violations == [] and run.ledger.peak_cost_per_hour <= cfg.budget_per_hour + 1e-9


def _cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = main(args)
    except SystemExit as exc:
        code = int(exc.code or 0)
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def test_cli_spot_trace_json_has_spot_and_on_demand_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = trace_file(tmp_path, [(0, A, 1), (0, C, 1), (0, D, 0), (300, A, 0)])
    code, out, _ = _cli(["replay", str(SPOT_YAML), "--pattern", "step:low=6,high=6", "--hours", "0.15",
                         "--spot-trace", str(path), "--json"], capsys)
    assert code == 0
    o = json.loads(out)
    assert {"preemptions", "spot_share", "fallback_hours", "queries_lost_to_preemption"} <= set(o["spot"])
    assert o["spot"]["queries_lost_to_preemption"] == 0
    assert set(o["on_demand_only"]) >= {"cost_usd", "slo_attainment", "served"}
    assert o["spot"]["cost_vs_on_demand_only"] == round(o["cost_usd"] / o["on_demand_only"]["cost_usd"], 6)


@pytest.mark.parametrize("rows, cfg_name, msg", [
    ("timestamp_s,zone,instance_type,available\n0,us-west-2a,*,1\n", "replay-spot.yaml",
     "zone us-west-2a is not in spot.zones (us-east-1a, us-east-1c, us-east-1d)"),
    ("timestamp_s,zone,instance_type,available\n0,us-east-1a,p3.2xlarge,1\n", "replay-spot.yaml",
     "instance type p3.2xlarge is not allowed"),
    ("timestamp_s,zone,instance_type,available\n0,us-east-1a,*,2\n", "replay-spot.yaml",
     "line 2: available must be 0 or 1, not '2'"),
    ("time,zone\n0,us-east-1a\n", "replay-spot.yaml", "line 1: expected the header timestamp_s,zone,instance_type,"),
    ("timestamp_s,zone,instance_type,available\n-5,us-east-1a,*,1\n", "replay-spot.yaml",
     "line 2: timestamp_s must be a finite number >= 0"),
    ("timestamp_s,zone,instance_type,available\n0,us-east-1a,*,1\n", "replay-rm2.yaml",
     "--spot-trace: no instance type may run spot"),
])
def test_cli_a_bad_spot_trace_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], rows: str,
                                                 cfg_name: str, msg: str) -> None:
    p = tmp_path / "bad.csv"
    p.write_text(rows)
    code, out, err = _cli(["replay", str(ROOT / "examples" / cfg_name), "--pattern", "step", "--hours", "0.01",
                           "--spot-trace", str(p)], capsys)
    lines = [ln for ln in err.splitlines() if ln.strip() and "warning" not in ln]
    assert code == 2 and len(lines) == 1 and msg in lines[0] and "Traceback" not in err


def test_the_committed_real_traces_parse_and_name_their_source() -> None:
    for day, share in (("18", 0.0), ("31", 0.618), ("40", 0.833), ("50", 0.347)):
        path = ROOT / "examples" / "traces" / f"spot-aws3-day{day}.csv"
        t = read_spot_trace(path)
        assert t.zones == [A, C, D] and t.types == ["*"] and len(t.rows) == 3 * 288
        assert "spothedge_ae" in path.read_text().splitlines()[1]
        ticks = {r.at_s for r in t.rows}
        some = sum(1 for at in ticks if any(t.available(z, "g4dn.xlarge", at) for z in (A, C, D))) / len(ticks)
        assert round(some, 3) == share
