"""The replay (issue #12): exact dollars, the budget invariant over random traces, the same
decision functions as the daemon, baselines, and the command's bad input."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from config.profiles import load_profiles_csv
from config.schema import Config
from daemon.cli import main
from scaler.fleet import step as fleet_step
from scaler.planner.joint_plan import declared_demand
from scaler.planner.replan import DemandView
from sim.patterns import parse_pattern, pattern_workload, peak_minute_rate
from sim.replay.outcomes import EXPIRED, SERVED
from sim.replay.run import ReplaySpec, make_query_loop, replay
from sim.replay.baselines import BASELINE_NAMES, PoolPlanner, minute_peaks, run_baseline
from sim.replay.report import report
from sim.slo_check import slo_check
from sim.workload import Workload

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "replay-rm2.yaml"


def _cfg(tmp_path: Path, **over: object) -> Config:
    raw: dict[str, object] = {
        "cluster": "replay-test", "budget_per_hour": 2.5, "objective": "min_cost", "headroom": 0.1,
        "models": [{"name": "rm2", "onnx": "builtin:mlp", "qos_ms": 350, "max_batch": 1000}],
        "instance_types": [{"type": t} for t in ("g4dn.xlarge", "c5n.2xlarge", "r5n.large", "t3.xlarge")],
        "launch": {"ami_id": "ami-0123456789abcdef0"},
        "dispatcher": {"listen": "127.0.0.1:0", "policy": "kairos", "on_deadline": "drop"},
        "workload": {"batch_dist": "deeprecsys", "expected_qps": 5},
        "intervals": {"fleet_s": 30, "model_s": 1, "reconcile_s": 60},
        "state_path": str(tmp_path / "state.db"),
    }
    raw.update(over)
    return Config.model_validate(raw)


@pytest.fixture(scope="module")
def profiles():  # type: ignore[no-untyped-def]
    return load_profiles_csv(None)


def _steps(rates: list[tuple[float, float]], seed: int = 0) -> Workload:
    """Poisson arrivals at ``rate`` for ``seconds``, one phase after another; batches of 10."""
    rng = np.random.default_rng(seed)
    out, t0 = [], 0.0
    for rate, secs in rates:
        n = rng.poisson(rate * secs)
        out.append(np.sort(rng.uniform(t0, t0 + secs, n)))
        t0 += secs
    arr = np.concatenate(out)
    return Workload(arr, np.full(arr.size, 10, dtype=np.int64))


# ---- dollars -------------------------------------------------------------------------------------

def test_pinned_pool_costs_price_times_hours(tmp_path: Path, profiles) -> None:  # type: ignore[no-untyped-def]
    """Two load steps on a pinned g4dn.xlarge + 2 r5n.large for 2 h: 2 x (0.526 + 2 x 0.149) = $1.648."""
    cfg = _cfg(tmp_path, pinned_pool={"g4dn.xlarge": 1, "r5n.large": 2})
    wl = _steps([(2.0, 3600.0), (6.0, 3600.0)])
    run = replay(cfg, profiles, wl, 7200.0, ReplaySpec())
    rep = report(run)
    assert rep["cost_usd"] == pytest.approx(1.648, abs=1e-9)
    assert rep["instance_hours"] == {"g4dn.xlarge": pytest.approx(2.0), "r5n.large": pytest.approx(4.0)}
    assert rep["peak_cost_per_hour"] == pytest.approx(0.824)
    assert rep["queries"] == len(wl) and rep["served"] == rep["within_slo"] == len(wl)
    assert rep["slo_attainment"] == 1.0 and rep["budget_violations"] == 0


def test_pool_switch_is_billed_from_the_tick(tmp_path: Path, profiles) -> None:  # type: ignore[no-untyped-def]
    """g4dn.xlarge alone for 30 min, then + 2 r5n.large from the fleet tick at 1800 s: a launched
    instance is billed while pending: 0.526 x 1 h + 2 x 0.149 x 0.5 h = $0.675."""
    cfg = _cfg(tmp_path)

    def decide(now: float, demand: DemandView):  # type: ignore[no-untyped-def]
        return ({"g4dn.xlarge": 1} if now < 1800 else {"g4dn.xlarge": 1, "r5n.large": 2}), None
    run = replay(cfg, profiles, _steps([(1.0, 1800.0), (3.0, 1800.0)]), 3600.0, ReplaySpec(), decide_fn=decide)
    assert report(run)["cost_usd"] == pytest.approx(0.675, abs=1e-9)
    assert [(t, it, n) for t, it, n in run.launches] == [(0.0, "g4dn.xlarge", 1), (1800.0, "r5n.large", 2)]


def test_cold_start_boots_before_serving(tmp_path: Path, profiles) -> None:  # type: ignore[no-untyped-def]
    """--cold: nothing serves before the GPU's 90 s boot (+1 s load); queries older than the 30 s
    deadline by then expired. Billing starts at launch (pending counts)."""
    cfg = _cfg(tmp_path, pinned_pool={"g4dn.xlarge": 1})
    wl = Workload(np.array([10.0, 50.0, 95.0]), np.array([10, 10, 10]))
    run = replay(cfg, profiles, wl, 3600.0, ReplaySpec(warm_start=False))
    assert list(run.qloop.outcome) == [EXPIRED, EXPIRED, 1]
    assert report(run)["cost_usd"] == pytest.approx(0.526, abs=1e-9)


def test_expiry_terminates_at_float_boundaries(tmp_path: Path, profiles) -> None:  # type: ignore[no-untyped-def]
    """arrival + 30 s rounds below the deadline for such times: the loop once spun forever there."""
    cfg = _cfg(tmp_path)
    wl = Workload(np.array([0.1, 0.7, 3.3]), np.array([1, 1, 1]))
    q = make_query_loop(cfg, profiles, wl, ReplaySpec())
    q.run_until(100.0)
    assert list(q.outcome) == [EXPIRED] * 3


@settings(max_examples=16, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rates=st.lists(st.floats(1.0, 60.0), min_size=2, max_size=4), budget=st.sampled_from([0.8, 1.5, 2.5]),
       seed=st.integers(0, 5), two=st.booleans())
def test_budget_holds_at_every_instant(tmp_path: Path, profiles, rates: list[float], budget: float,
                                       seed: int, two: bool) -> None:  # type: ignore[no-untyped-def]
    """DESIGN invariant 1 under the replayed loops: the pool's $/hr never passes the budget, whatever
    the demand asks (the ledger checks every change), with one model or two on the one budget (the
    second, dien at 35 ms, at half the first's rates in the reverse order)."""
    models = [{"name": "rm2", "onnx": "builtin:mlp", "qos_ms": 350, "max_batch": 1000}]
    if two:
        models.append({"name": "dien", "onnx": "builtin:mlp", "qos_ms": 35, "max_batch": 1000})
    cfg = _cfg(tmp_path, budget_per_hour=budget, models=models,
               intervals={"fleet_s": 10, "model_s": 1, "reconcile_s": 30})
    wl = _steps([(r, 120.0) for r in rates], seed)
    loads = {"rm2": wl, **({"dien": _steps([(r / 2, 120.0) for r in reversed(rates)], seed + 1)} if two else {})}
    run = replay(cfg, profiles, loads, 120.0 * len(rates), ReplaySpec(boot_s={"gpu": 20.0, "cpu": 10.0}))
    assert run.ledger.violations == []
    assert run.ledger.peak_cost_per_hour <= budget + 1e-9


# ---- the daemon's decisions ----------------------------------------------------------------------

def test_replay_and_daemon_call_the_same_decisions(tmp_path: Path, profiles, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The fleet step's decisions are module functions that both the daemon and the replay look up
    at call time: replace them once and both see it (a second implementation would not)."""
    from daemon.app import Daemon

    seen: dict[str, set[str]] = {"replay": set(), "daemon": set()}
    who = {"now": "replay"}
    for name in ("planning_demand", "stabilized_demand", "fleet_target", "plan_joint", "plan_due", "park_round",
                 "next_generation"):
        real = getattr(fleet_step, name)

        def spy(*a, _real=real, _name=name, **k):  # type: ignore[no-untyped-def]
            seen[who["now"]].add(_name)
            return _real(*a, **k)
        monkeypatch.setattr(fleet_step, name, spy)
    cfg = _cfg(tmp_path)
    replay(cfg, profiles, _steps([(5.0, 120.0)]), 120.0, ReplaySpec())
    who["now"] = "daemon"
    import asyncio

    from scaler.cloud.fake import FakeCloud

    async def daemon_ticks() -> None:     # the real daemon's fleet tick, on a fake cloud
        dcfg = _cfg(tmp_path, state_path=str(tmp_path / "d.db"), model_scaling={"generate_variants": False})
        d = Daemon(dcfg, None, cloud=FakeCloud(dcfg.cluster), listen="127.0.0.1:0", generate_variants=False)
        await d.start()
        try:
            await d.fleet_tick("interval")
            await d.fleet_tick("interval")
            assert d.status.plan is not None and d.status.target == d.status.plan.pool
        finally:
            await d.stop(grace=0.0)
    asyncio.run(daemon_ticks())
    every = {"planning_demand", "stabilized_demand", "fleet_target", "plan_joint", "plan_due", "park_round",
             "next_generation"}
    assert every <= seen["replay"]
    assert every <= seen["daemon"]


def test_replay_and_daemon_call_the_same_fleet_tick(tmp_path: Path, profiles, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """One fleet tick (issue 37): ``Daemon.fleet_tick`` and ``ReplayFleet.fleet_tick`` both run
    ``scaler.fleet.tick.fleet_tick``, and both reconcile ticks ``scaler.fleet.tick.reconcile_tick``,
    looked up at call time (replace them and both see it), and no other module orchestrates a tick:
    the tick's own steps are called from ``scaler.fleet.tick`` only."""
    import asyncio
    import re

    from daemon.app import Daemon
    from scaler.fleet import tick as fleet_tick
    from scaler.cloud.fake import FakeCloud

    ran: dict[str, list[str]] = {"replay": [], "daemon": []}
    who = {"now": "replay"}
    real = fleet_tick.fleet_tick

    async def spy(cfg, state, ports, reason="interval"):  # type: ignore[no-untyped-def]
        ran[who["now"]].append(reason)
        return await real(cfg, state, ports, reason)
    monkeypatch.setattr(fleet_tick, "fleet_tick", spy)
    real_reconcile = fleet_tick.reconcile_tick

    async def spy_reconcile(cfg, state, ports, reconcile):  # type: ignore[no-untyped-def]
        ran[who["now"]].append("reconcile")
        return await real_reconcile(cfg, state, ports, reconcile)
    monkeypatch.setattr(fleet_tick, "reconcile_tick", spy_reconcile)
    cfg = _cfg(tmp_path)
    run = replay(cfg, profiles, _steps([(5.0, 120.0)]), 120.0, ReplaySpec())
    assert run.plans >= 1 and ran["replay"].count("interval") >= 2     # every fleet interval, through the one tick
    assert ran["replay"].count("reconcile") == int((120.0 - 1e-9) // cfg.intervals.reconcile_s)   # and every reconcile
    who["now"] = "daemon"

    async def daemon_ticks() -> None:     # the real daemon's fleet tick, on a fake cloud
        dcfg = _cfg(tmp_path, state_path=str(tmp_path / "d.db"), model_scaling={"generate_variants": False})
        d = Daemon(dcfg, None, cloud=FakeCloud(dcfg.cluster), listen="127.0.0.1:0", generate_variants=False)
        await d.start()
        try:
            n = len(ran["daemon"])
            await d.fleet_tick("interval")
            await d.reconcile_tick()
            got = ran["daemon"][n:]   # (the daemon's scheduler may tick on its own meanwhile)
            assert "interval" in got and got[-1] == "reconcile" and d.status.plan is not None
        finally:
            await d.stop(grace=0.0)
    asyncio.run(daemon_ticks())
    # the tick's steps have one caller: a second implementation of the tick would call them again
    steps = ("park_round", "next_generation", "plan_due", "unmoved_shares", "planned_demands", "stabilized_demands",
             "replan_early", "hint_replan", "worker_models", "model_shares")
    root = Path(__file__).resolve().parents[2]
    callers = {str(f.relative_to(root)) for pkg in ("daemon", "sim", "scaler", "dispatcher", "variants")
               for f in (root / pkg).rglob("*.py")
               if re.search(r"\b(" + "|".join(steps) + r")\(", f.read_text())}
    # (ahead.py: shadow asks plan_due whether `on` would plan now, for the demand it would plan for; not a tick)
    assert callers <= {"scaler/fleet/step.py", "scaler/fleet/tick.py", "daemon/app.py", "sim/replay/fleet.py",
                       "scaler/fleet/ahead.py"}, callers
    for src in ("daemon/app.py", "sim/replay/fleet.py"):   # shares for decide/Status only, never a tick's step
        text = (root / src).read_text()
        assert not re.search(r"\b(" + "|".join(s for s in steps if s != "model_shares") + r")\(", text), src


def test_replay_plans_like_costscale_plan(tmp_path: Path, profiles) -> None:  # type: ignore[no-untyped-def]
    """The first fleet tick plans the declared demand with the planner `costscale plan` prints."""
    from scaler.planner.model_plan import plan_fleet

    cfg = _cfg(tmp_path)
    run = replay(cfg, profiles, _steps([(5.0, 60.0)]), 60.0, ReplaySpec())
    d = declared_demand(cfg, "rm2")
    plan = plan_fleet(cfg, profiles, d.mix, d.qps, slo_check=slo_check, model="rm2")
    assert run.targets[0].at_s == 0.0
    assert run.targets[0].target == {t: n for t, n in plan.chosen.items() if n}


# ---- fleet-step rules ----------------------------------------------------------------------------

def test_stabilized_demand_keeps_the_window_peak() -> None:
    mix = declared_demand(_cfg(Path("/tmp")), "rm2").mix
    h: list[tuple[float, DemandView]] = []
    d, h = fleet_step.stabilized_demand(h, 0.0, DemandView(30.0, mix, True), 300.0)
    assert d.qps == 30.0
    d, h = fleet_step.stabilized_demand(h, 100.0, DemandView(10.0, mix, True), 300.0)
    assert d.qps == 30.0                      # a dip within the window plans for its peak
    d, h = fleet_step.stabilized_demand(h, 301.0, DemandView(12.0, mix, True), 300.0)
    assert d.qps == 12.0 and [t for t, _ in h] == [100.0, 301.0]
    d, h = fleet_step.stabilized_demand(h, 302.0, DemandView(40.0, mix, True), 300.0)
    assert d.qps == 40.0                      # a rise counts at once


def test_the_steady_rate_is_never_counted_over_more_than_the_scale_in_window(tmp_path: Path) -> None:
    assert fleet_step.steady_horizon(_cfg(tmp_path)) == 60.0                  # scale_in_s 300 (default)
    iv = {"fleet_s": 30, "model_s": 1, "reconcile_s": 60}
    assert fleet_step.steady_horizon(_cfg(tmp_path, intervals={**iv, "scale_in_s": 30})) == 30.0
    assert fleet_step.steady_horizon(_cfg(tmp_path, intervals={**iv, "scale_in_s": 2})) == 10.0   # the short one


def test_plan_due_only_when_the_plan_went_stale(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)                      # headroom 0.1: a rise past 5 % (and 1 q/s) replans
    mix = declared_demand(cfg, "rm2").mix
    planned = {"rm2": DemandView(20.0, mix, True)}
    due = lambda q, at=0.0, now=60.0, gone=False: fleet_step.plan_due(  # noqa: E731
        cfg, planned, at, {"rm2": DemandView(q, mix, True)}, now, gone)
    assert not due(20.9) and due(21.1) and not due(19.1) and due(18.9)    # a fall: 3 % and 1 q/s
    high = {"rm2": DemandView(100.0, mix, True)}
    assert not fleet_step.plan_due(cfg, high, 0.0, {"rm2": DemandView(97.1, mix, True)}, 60.0, False)
    assert fleet_step.plan_due(cfg, high, 0.0, {"rm2": DemandView(96.9, mix, True)}, 60.0, False)
    assert due(20.0, now=fleet_step.PLAN_MAX_AGE_S) and due(20.0, gone=True)
    assert fleet_step.plan_due(cfg, None, None, planned, 0.0, False)


# ---- baselines and patterns ---------------------------------------------------------------------

def test_baselines_run_and_static_budget_is_the_dearest(tmp_path: Path, profiles) -> None:  # type: ignore[no-untyped-def]
    cfg = _cfg(tmp_path)
    spec = parse_pattern("macroburst:low=5,high=20,low_s=300,high_s=300")
    wl = pattern_workload(spec, 1200.0, cfg.workload.batch_dist, seed=1)
    planner = PoolPlanner(cfg, profiles, slo_check)
    reps = {b: report(run_baseline(b, cfg, profiles, wl, 1200.0, ReplaySpec(), planner=planner))
            for b in BASELINE_NAMES}
    assert reps["static_budget"]["cost_usd"] >= max(r["cost_usd"] for r in reps.values()) - 1e-9
    assert all(r["budget_violations"] == 0 for r in reps.values())
    peak = float(minute_peaks(wl.arrivals, 1200.0).max())
    assert peak == pytest.approx(peak_minute_rate(wl.arrivals, 1200.0))
    # the static pool covers the peak: it is the min_cost pool at the peak minute's rate
    held = planner.pool("min_cost", {"rm2": peak})
    assert reps["static_peak"]["instance_hours"] == {t: pytest.approx(n * 1200 / 3600) for t, n in held.items()}


def test_patterns_are_deterministic_and_shaped() -> None:
    a = pattern_workload(parse_pattern("diurnal:peak=10,trough=1,period_h=1"), 3600.0, seed=3)
    b = pattern_workload(parse_pattern("diurnal:peak=10,trough=1,period_h=1"), 3600.0, seed=3)
    assert np.array_equal(a.arrivals, b.arrivals) and np.array_equal(a.batches, b.batches)
    per_min = minute_peaks(a.arrivals, 3600.0)
    # peaks at 11/24 and 20/24 of the period, the trough at night
    assert per_min[int(60 * 11 / 24)] > 5 * per_min[int(60 * 3 / 24)]
    m = pattern_workload(parse_pattern("macroburst:low=2,high=20,low_s=600,high_s=600"), 2400.0, seed=0)
    mp = minute_peaks(m.arrivals, 2400.0)
    assert mp[:10].mean() < 4 and mp[10:20].mean() > 16


# ---- the command --------------------------------------------------------------------------------

def test_replay_json_has_the_fields(capsys, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    rc = main(["replay", str(EXAMPLE), "--pattern", "step:low=3,high=9", "--hours", "0.1", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    for key in ("cost_usd", "hours", "queries", "served", "within_slo", "slo_attainment", "p99_ms",
                "peak_cost_per_hour", "budget_per_hour", "instance_hours", "decisions", "accuracy", "wall_s"):
        assert key in out
    assert set(out["decisions"]) == {"launch", "terminate", "park", "unpark", "variant_load", "variant_unload"}
    assert out["hours"] == pytest.approx(0.1) and out["queries"] > 0


def test_replay_warns_of_what_it_does_not_replay(capsys, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Accuracy scaling with no application to scale: one warning line on stderr, the JSON on
    stdout untouched; none for the example config (off), none for live batching or SlackFit mode
    (replayed since issue #25)."""
    rc = main(["replay", str(EXAMPLE), "--pattern", "step:low=3,high=9", "--hours", "0.02", "--json"])
    assert rc == 0 and "warning" not in capsys.readouterr().err
    cfg = tmp_path / "c.yaml"
    import yaml

    raw = yaml.safe_load(EXAMPLE.read_text())
    raw.setdefault("model_scaling", {})["accuracy_scaling"] = {"enabled": True}
    raw.setdefault("dispatcher", {})["batching"] = "work_conserving"
    cfg.write_text(yaml.safe_dump(raw))
    rc = main(["replay", str(cfg), "--pattern", "step:low=3,high=9", "--hours", "0.02", "--json"])
    cap = capsys.readouterr()
    assert rc == 0 and json.loads(cap.out)["queries"] > 0
    lines = cap.err.strip().splitlines()
    warned = [ln for ln in lines if ln.startswith("costscale: warning: replay: ")]
    assert len(warned) == 1 and "no model names a variant family" in warned[0]
    raw["model_scaling"]["accuracy_scaling"]["mode"] = "slackfit"
    cfg.write_text(yaml.safe_dump(raw))
    rc = main(["replay", str(cfg), "--pattern", "step:low=3,high=9", "--hours", "0.02", "--json"])
    warned = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("costscale: warning: replay: ")]
    assert rc == 0 and len(warned) == 1 and "no model names a variant family" in warned[0]


def test_replay_trace_by_application_and_plot(capsys, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    trace = tmp_path / "t.csv"
    rows = "".join(f"{100 + i * 0.5},{'rm2' if i % 2 else 'recommend'},{1 + i % 50}\n" for i in range(400))
    trace.write_text("timestamp,model,batch_size\n" + rows)
    png = tmp_path / "t.png"
    rc = main(["replay", str(EXAMPLE), "--trace", str(trace), "--json", "--plot", str(png)])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["queries"] == 400 and png.stat().st_size > 10_000
    assert out["hours"] == pytest.approx((199.5 + 1.0) / 3600.0, abs=1e-6)   # the span, to one second past the last


@pytest.mark.parametrize("args, msg", [
    (["--pattern", "sine"], "unknown pattern 'sine'"),
    (["--pattern", "step:low=x"], "step: low must be a number"),
    (["--pattern", "step", "--hours", "-1"], "--hours must be > 0"),
    (["--trace", "BAD"], "line 3: bad timestamp or batch_size"),
    (["--trace", "OTHER"], "model 'nosuch' is not in the config"),
    (["--trace", "MISSING"], "cannot read trace"),
    (["--pattern", "step", "--outage", "p9.huge@0"], "'p9.huge' is not an allowed type"),
    (["--pattern", "step", "--outage", "r5n.large@50-10"], "need 0 <= START < END"),
    (["--pattern", "step", "--throttle", "x@1"], "give N@T"),
])
def test_replay_bad_input_is_one_line_exit_2(capsys, tmp_path: Path, args: list[str], msg: str) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "bad.csv"
    bad.write_text("timestamp,model,batch_size\n1,rm2,4\nx,rm2,4\n")
    other = tmp_path / "other.csv"
    other.write_text("timestamp,model,batch_size\n1,nosuch,4\n")
    subst = {"BAD": str(bad), "OTHER": str(other), "MISSING": str(tmp_path / "none.csv")}
    rc = main(["replay", str(EXAMPLE)] + [subst.get(a, a) for a in args])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and msg in err[0], err
    assert not err[0].startswith(("Traceback", "  File ")), err


# ---- injected faults -----------------------------------------------------------------------------

def test_capacity_outage_replans_without_the_type(tmp_path: Path, profiles) -> None:  # type: ignore[no-untyped-def]
    """g4dn.xlarge out of capacity from 0 to 900 s: the first plan needs it, its launch fails, the
    fleet replans at once without it (no g4dn-hours while the outage lasts), and it comes back after."""
    from sim.replay.run import Fault

    cfg = _cfg(tmp_path)
    spec = ReplaySpec(faults=(Fault(0.0, "capacity", "g4dn.xlarge"), Fault(900.0, "capacity_end", "g4dn.xlarge")))
    # after the outage the batches grow to 900, which only g4dn.xlarge serves within 350 ms: the
    # type must come back then
    small = _steps([(10.0, 1200.0)])
    big = _steps([(3.0, 600.0)], seed=1)
    wl = Workload(np.concatenate([small.arrivals, big.arrivals + 1200.0]),
                  np.concatenate([small.batches, np.full(big.batches.size, 900, dtype=np.int64)]))
    run = replay(cfg, profiles, wl, 1800.0, spec)
    first_g4dn = min((t for t, it, _ in run.launches if it == "g4dn.xlarge"), default=None)
    # replanned at once without it: the declared mix (batches to 1000) then fits no CPU type, which
    # the tick records; the next interval plans the measured mix on CPU types
    assert run.errors[0][0] == 0.0 and "no instance type meets the QoS" in run.errors[0][1]
    assert "g4dn.xlarge" not in run.targets[0].target
    assert first_g4dn is not None and 1200.0 <= first_g4dn <= 1200.0 + 60.0    # back when the big batches come
    assert not any(0.0 < t < 900.0 and "g4dn" in str(c.target) for t, c in ((c.at_s, c) for c in run.targets))
    assert run.ledger.violations == []
    q = run.qloop
    served = q.outcome == SERVED
    early, late = q.arr < 1200.0, q.arr >= 1200.0 + 120.0      # the g4dn's 90 s boot after the step
    assert served[early].mean() > 0.9        # nothing served for the first 30 s + 60 s boot
    g4dn = q.type_names.index("g4dn.xlarge")
    assert (q.worker_type[late & served] == g4dn).mean() > 0.9      # the big batches go to it


def test_throttled_calls_are_retried_by_the_next_tick(tmp_path: Path, profiles) -> None:  # type: ignore[no-untyped-def]
    """The first 3 cloud calls are throttled: the first tick fails, a later tick launches the pool;
    nothing is lost and the error is recorded, not raised."""
    from sim.replay.run import Fault

    cfg = _cfg(tmp_path, pinned_pool={"r5n.large": 2})
    run = replay(cfg, profiles, _steps([(2.0, 600.0)]), 600.0,
                 ReplaySpec(faults=(Fault(0.0, "throttle", count=3),), warm_start=False))
    assert run.errors and run.launches and run.launches[0][0] > 0.0
    assert report(run)["instance_hours"] == {"r5n.large": pytest.approx(2 * (600.0 - run.launches[0][0]) / 3600)}
