"""Profiles for the catalog types nobody measured (issue #29 deliverable 5): the cited table's
estimates (hand-computed from the shipped Kairos rows), a measurement always winning, the planner
using them only where allowed, and every place a plan shows them tagging them."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from config.catalog import load_catalog
from config.checks import config_warnings
from config.emulation import emulation_factors, reference_profiles
from config.profiles import Estimate, LatencyProfile, ProfileTable, load_profiles_csv, profiles_from_rows, save_profiles_csv
from config.schema import Config, load_config
from config.type_estimates import TypeRule, parse_type_rules, sibling_estimates, type_rules, with_type_estimates
from daemon.cli import main
from scaler.planner.base_aux import PlanError
from scaler.planner.estimate_gate import estimates_line, planned_types, share_estimates, split_types

RM2 = "examples/replay-rm2.yaml"
UNMEASURED = {"g4dn.2xlarge", "g5.xlarge", "inf1.xlarge", "inf2.xlarge", "c5.2xlarge", "c6i.2xlarge", "m5.xlarge",
              "r5.large"}
KAIROS = {"g4dn.xlarge", "c5n.2xlarge", "r5n.large", "t3.xlarge"}


def _rows(model: str, itype: str, pts: list[tuple[int, float]], source: str = "") -> list[dict[str, str]]:
    return [{"model": model, "instance_type": itype, "batch_size": str(b), "service_ms_mean": str(ms),
             "service_ms_p50": str(ms), "service_ms_p99": str(2 * ms), "source": source} for b, ms in pts]


# ---- the table ----------------------------------------------------------------------------------

def test_the_table_covers_exactly_the_eight_unmeasured_catalog_types_from_measured_siblings() -> None:
    rules = type_rules()
    assert set(rules) == UNMEASURED and set(load_catalog()) == UNMEASURED | KAIROS
    assert {r.sibling for r in rules.values()} <= KAIROS and set(reference_profiles().types()) == KAIROS
    assert {t: r.sibling for t, r in rules.items()} == {
        "g4dn.2xlarge": "g4dn.xlarge", "g5.xlarge": "g4dn.xlarge", "inf1.xlarge": "g4dn.xlarge",
        "inf2.xlarge": "g4dn.xlarge", "c5.2xlarge": "c5n.2xlarge", "c6i.2xlarge": "c5n.2xlarge",
        "m5.xlarge": "t3.xlarge", "r5.large": "r5n.large"}
    # never a speed-up; only inf1 (50 GB/s of device memory against the T4's 320 GB/s) is slower
    assert {t: r.latency_factor for t, r in rules.items() if r.latency_factor != 1.0} == {"inf1.xlarge": 6.4}
    assert all(r.source.startswith("https://") and r.evidence and r.why for r in rules.values())


@pytest.mark.parametrize("row, needle", [
    ("g5.xlarge,g4dn.xlarge,0.5,w,e,s", "below 1"),
    ("g5.xlarge,g4dn.xlarge,fast,w,e,s", "not a number"),
    ("g5.xlarge,m5.xlarge,1,w,e,s\nm5.xlarge,t3.xlarge,1,w,e,s", "estimated itself"),
    ("x9.huge,g4dn.xlarge,1,w,e,s", "not in the instance catalog"),
])
def test_a_bad_table_row_is_one_line(row: str, needle: str) -> None:
    text = "# comment\ninstance_type,sibling,latency_factor,why,evidence,source\n" + row
    with pytest.raises(ValueError, match=needle) as err:
        parse_type_rules(text, load_catalog())
    assert "\n" not in str(err.value)


# ---- the estimates ------------------------------------------------------------------------------

def test_shipped_estimates_are_the_sibling_rows_times_the_factor_by_hand() -> None:
    t = with_type_estimates(load_profiles_csv())
    # rm2 on g4dn.xlarge, batch 10: mean 5.3984, p99 5.5861; batch 1000: mean 260.7843 (the shipped CSV)
    inf1 = t.get("rm2", "inf1.xlarge")
    assert inf1.latency_ms(10).item() == pytest.approx(34.54976, abs=1e-9)             # 6.4 x 5.3984
    assert inf1.latency_ms(10, "p99").item() == pytest.approx(35.75104, abs=1e-9)      # 6.4 x 5.5861
    assert inf1.latency_ms(1000).item() == pytest.approx(1669.01952, abs=1e-9)         # 6.4 x 260.7843
    assert t.get("rm2", "g5.xlarge").latency_ms(10).item() == 5.3984
    # ncf on c5n.2xlarge, batch 20: mean 0.3831 -> c5.2xlarge and c6i.2xlarge the same
    assert t.get("ncf", "c5.2xlarge").latency_ms(20).item() == 0.3831 == t.get("ncf", "c6i.2xlarge").latency_ms(20).item()
    assert t.get("rm2", "m5.xlarge").latency_ms(1000).item() == 885.713      # t3.xlarge's
    e = t.estimate("rm2", "inf1.xlarge")
    assert e == Estimate("estimate: g4dn.xlarge x 6.4 (Inferentia memory 50 GB/s vs T4 320 GB/s; "
                         "config/type_estimates.csv)", "g4dn.xlarge")
    # every (model, unmeasured type) estimated, every shipped row still a measurement
    assert set(t.estimated) == {(m, u) for m in t.models() for u in UNMEASURED}
    assert all(t.estimate(m, k) is None for m in t.models() for k in KAIROS)


RULE = {"T9": TypeRule("T9", "T1", 2.0, "why", "evidence", "https://x")}


def test_a_measurement_on_the_type_always_wins_over_the_estimate() -> None:
    table = profiles_from_rows(_rows("a", "T1", [(1, 1.0), (8, 3.0)]) + _rows("a", "T9", [(1, 7.0)]))
    out = with_type_estimates(table, RULE)
    assert out.get("a", "T9") is table.get("a", "T9") and out.estimate("a", "T9") is None
    assert sibling_estimates(table, RULE).profiles == {}


def test_a_stored_estimate_is_derived_again_from_the_siblings_current_profile() -> None:
    # T9 stored as an estimate (from a local run); T1 now measured: T9 = T1 x 2, marked, from a measurement
    table = profiles_from_rows(_rows("a", "T1", [(1, 1.5), (8, 3.0)]) + _rows("a", "T9", [(1, 100.0)], "estimate: old"))
    out = with_type_estimates(table, RULE)
    assert out.get("a", "T9").mean_ms.tolist() == [3.0, 6.0] and out.get("a", "T9").p99_ms.tolist() == [6.0, 12.0]
    assert out.estimate("a", "T9") == Estimate("estimate: T1 x 2 (why; config/type_estimates.csv)", "T1")
    # the sibling itself an estimate: said so
    est_sib = profiles_from_rows(_rows("a", "T1", [(1, 1.5)], "estimate: local"))
    assert with_type_estimates(est_sib, RULE).estimate("a", "T9").basis.startswith("estimate: T1 (itself an estimate) x 2")
    # no sibling in the table: the stored estimate stays, marked with the sibling it stands for
    alone = profiles_from_rows(_rows("b", "T9", [(1, 4.0)], "estimate: old"))
    assert with_type_estimates(alone, RULE).estimate("b", "T9") == Estimate("estimate: old", "T1")


@settings(max_examples=60, deadline=None)
@given(means=st.lists(st.floats(0.01, 500.0), min_size=1, max_size=6), factor=st.floats(1.0, 10.0),
       measured=st.booleans())
def test_estimates_are_never_faster_than_the_sibling_and_never_replace_a_measurement(
        means: list[float], factor: float, measured: bool) -> None:
    rule = {"T9": TypeRule("T9", "T1", factor, "w", "e", "s")}
    sizes = list(range(1, len(means) + 1))
    rows = _rows("m", "T1", list(zip(sizes, sorted(means))))
    if measured:
        rows += _rows("m", "T9", [(1, 0.001)])
    out = with_type_estimates(profiles_from_rows(rows), rule)
    t9 = out.get("m", "T9")
    if measured:
        assert out.estimate("m", "T9") is None and t9.mean_ms.tolist() == [0.001]
    else:
        t1 = out.get("m", "T1")
        assert np.all(t9.mean_ms >= t1.mean_ms) and np.allclose(t9.p99_ms, t1.p99_ms * factor)
        assert out.estimate("m", "T9").sibling == "T1" and out.estimate("m", "T1") is None


def test_merged_and_update_keep_the_marks_and_a_measurement_clears_one() -> None:
    est = profiles_from_rows(_rows("a", "T9", [(1, 2.0)], "estimate: x"))
    meas = profiles_from_rows(_rows("a", "T9", [(1, 1.0)]))
    assert est.merged(meas).estimate("a", "T9") is None and meas.merged(est).estimate("a", "T9") == Estimate("estimate: x")
    live = profiles_from_rows(_rows("a", "T9", [(1, 2.0)], "estimate: x") + _rows("a", "T1", [(1, 1.0)]))
    live.update(meas)
    assert live.estimate("a", "T9") is None and live.get("a", "T9").mean_ms.tolist() == [1.0]


def test_a_profile_csv_keeps_saying_which_rows_are_estimates(tmp_path: Path) -> None:
    t = with_type_estimates(profiles_from_rows(_rows("a", "T1", [(1, 1.0), (8, 3.0)])), RULE)
    p = tmp_path / "p.csv"
    save_profiles_csv(p, t.profiles.values(), t.estimated)
    back = load_profiles_csv(p)
    assert back.estimate("a", "T9") == Estimate(t.estimate("a", "T9").basis) and back.estimate("a", "T1") is None
    assert back.get("a", "T9").mean_ms.tolist() == [2.0, 6.0]
    save_profiles_csv(p, t.profiles.values())        # no marks given: the columns as before
    assert p.read_text().splitlines()[0] == "model,instance_type,batch_size,service_ms_mean,service_ms_p50,service_ms_p99"


def test_emulation_factor_of_an_unmeasured_type_is_its_siblings_times_its_factor() -> None:
    ref, rules = reference_profiles(), type_rules()
    b = [1, 10, 100, 1000]
    assert emulation_factors(ref, "inf1.xlarge", b) is None          # without the table: none, as before
    np.testing.assert_array_equal(emulation_factors(ref, "inf1.xlarge", b, rules=rules),
                                  emulation_factors(ref, "g4dn.xlarge", b) * 6.4)
    np.testing.assert_array_equal(emulation_factors(ref, "m5.xlarge", b, rules=rules), emulation_factors(ref, "t3.xlarge", b))


def test_a_local_measurement_estimates_the_unmeasured_types_tagged_with_the_rule() -> None:
    from variants.profiler import BatchLatency, VariantProfile
    from variants.type_profiles import ESTIMATE_PROVIDER, estimate_types, is_estimate

    local = VariantProfile("mine", "mine", "local", "CPUExecutionProvider",
                           (BatchLatency(1, 0.5, 0.4, 0.6, 5), BatchLatency(10, 1.0, 0.9, 2.0, 5)), 3.0, 1.0, "rss")
    est, skipped = estimate_types(local, ["g4dn.xlarge", "inf1.xlarge", "x9.none"], reference_profiles(), type_rules())
    assert skipped == ["x9.none"] and [p.instance_type for p in est] == ["g4dn.xlarge", "inf1.xlarge"]
    g4, inf1 = est
    assert g4.provider == ESTIMATE_PROVIDER and is_estimate(inf1)
    assert inf1.provider == type_rules()["inf1.xlarge"].basis(sibling_estimated=True)
    assert [b.mean_ms for b in inf1.batches] == pytest.approx([6.4 * b.mean_ms for b in g4.batches], rel=1e-12)


# ---- the gate -------------------------------------------------------------------------------------

def _cfg(**allow: bool) -> Config:
    types = ["g4dn.xlarge", "r5n.large", "r5.large", "g5.xlarge"]
    return Config.model_validate({"cluster": "c", "budget_per_hour": 2.5, "launch": {"ami_id": "ami-1"},
                                  "models": [{"name": "rm2", "qos_ms": 350}, {"name": "mine", "onnx": "/m.onnx",
                                                                               "qos_ms": 50}],
                                  "instance_types": [{"type": t, "allow_estimates": allow.get(t.split(".")[0], False)}
                                                     for t in types]})


def _table() -> ProfileTable:
    t = with_type_estimates(load_profiles_csv())
    # 'mine': a local estimate on g4dn.xlarge (a reference type) and, from it, g5.xlarge
    return with_type_estimates(t.merged(profiles_from_rows(_rows("mine", "g4dn.xlarge", [(1, 2.0)], "estimate: local"))))


def test_estimates_by_the_table_are_left_out_unless_allowed_local_ones_are_planned() -> None:
    t, cfg = _table(), _cfg()
    split = split_types(t, "rm2", ["g4dn.xlarge", "r5n.large", "r5.large", "g5.xlarge"], frozenset())
    assert split.planned == ["g4dn.xlarge", "r5n.large"] and set(split.left_out) == {"r5.large", "g5.xlarge"}
    assert planned_types(cfg, t, "rm2", None) == ["g4dn.xlarge", "r5n.large"]
    assert planned_types(_cfg(r5=True), t, "rm2", None) == ["g4dn.xlarge", "r5n.large", "r5.large"]
    # nothing left out: the types exactly as given (the planner's inputs, and so its picks, unchanged)
    given_types = ["g4dn.xlarge", "r5n.large"]
    assert planned_types(cfg, t, "rm2", given_types) is given_types and planned_types(cfg, t, "rm2", None) is not None
    # the local estimate on g4dn.xlarge is planned on; g5.xlarge (from it, by the table) is not
    assert planned_types(cfg, t, "mine", ["g4dn.xlarge", "g5.xlarge"]) == ["g4dn.xlarge"]
    with pytest.raises(PlanError, match=r"'rm2': its profiles on g5.xlarge are estimates .*allow_estimates: true") as e:
        planned_types(cfg, t, "rm2", ["g5.xlarge"])
    assert "\n" not in str(e.value)


def test_a_plans_workers_on_estimates_are_named_with_their_basis() -> None:
    t = _table()
    est = share_estimates(_cfg(), t, {"rm2": {"g4dn.xlarge": 1, "r5.large": 3, "g5.xlarge": 0}, "mine": {"g4dn.xlarge": 2}})
    assert {m: sorted(per) for m, per in est.items()} == {"rm2": ["r5.large"], "mine": ["g4dn.xlarge"]}
    assert estimates_line(est) == ("rests on estimated profiles, not measurements: mine on g4dn.xlarge (estimate: local); "
                                   "rm2 on r5.large (estimate: r5n.large x 1 (2 vCPUs and 16 GiB, same Intel Xeon "
                                   "family; config/type_estimates.csv))")
    assert estimates_line({}) == ""


def test_validate_says_which_types_are_left_out_and_which_are_planned_on_estimates() -> None:
    cfg = Config.model_validate({"cluster": "c", "budget_per_hour": 2.5, "launch": {"ami_id": "ami-1"},
                                 "models": [{"name": "rm2", "qos_ms": 350}],
                                 "instance_types": [{"type": "g4dn.xlarge"}, {"type": "g5.xlarge"},
                                                    {"type": "m5.xlarge", "allow_estimates": True}]})
    warns = config_warnings(cfg, path="c.yaml")
    assert len(warns) == 2
    assert warns[0].startswith("instance_types: g5.xlarge: model 'rm2' has only an estimate there (estimate: "
                               "g4dn.xlarge x 1 (") and "left out of rm2's plans" in warns[0]
    assert "costscale profile c.yaml --model rm2 --types g5.xlarge" in warns[0]
    assert warns[1].startswith("instance_types: m5.xlarge: model 'rm2' is planned there from an estimate, not a "
                               "measurement (estimate: t3.xlarge x 1 (")


# ---- where plans show -----------------------------------------------------------------------------

TYPES3 = "g4dn.xlarge,r5n.large,r5.large"


def test_plan_whose_pick_includes_an_estimated_type_is_tagged_in_table_and_json(
        capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", RM2, "--types", TYPES3, "--estimates", "--objective", "max_throughput", "--confirm", "0", "--top", "3"]
    assert main(argv + ["--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    # r5.large: r5n.large's profile at 0.126 instead of 0.149 $/hr, so the pick takes it
    assert d["chosen"] == {"g4dn.xlarge": 1, "r5n.large": 0, "r5.large": 15}
    assert d["estimated"] == d["estimated_picked"] == ["r5.large"] == d["models"]["rm2"]["estimated"]
    assert d["estimates"]["r5.large"].startswith("estimate: r5n.large x 1 (") and d["left_out_estimated"] == {}
    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].split() == ["#", "g4dn.xlarge", "r5n.large", "r5.large~", "$/hr", "QPS", "bound"]
    assert out[5].startswith("pick: g4dn.xlarge x1, r5.large~ x15  (2.4160 $/hr")
    assert "~ r5.large: estimate: r5n.large x 1 (2 vCPUs and 16 GiB, same Intel Xeon family; config/type_estimates.csv)" in out
    assert "this pick rests on estimated profiles, not measurements: r5.large (measure them: costscale profile CONFIG " \
           "--model rm2 --types r5.large)" in out


def test_plan_without_the_opt_in_leaves_estimated_types_out_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", RM2, "--types", TYPES3, "--objective", "max_throughput", "--confirm", "0", "--top", "3"]
    assert main(argv + ["--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert set(d["chosen"]) == {"g4dn.xlarge", "r5n.large"} and d["estimated"] == [] == d["estimated_picked"]
    assert list(d["left_out_estimated"]) == ["r5.large"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "r5.large~" not in out and "rests on estimated" not in out
    assert out.splitlines()[-1].startswith("left out (only an estimate there, not allowed): r5.large (estimate: r5n.large")
    assert main(["plan", RM2, "--types", "r5.large"]) == 2      # nothing else to plan on: one line
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "are estimates" in err and "Traceback" not in err


def test_a_measured_profile_of_the_type_wins_over_the_estimate_in_plan(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    shipped = load_profiles_csv()
    r5 = shipped.get("rm2", "r5n.large")
    mine = LatencyProfile("rm2", "r5.large", r5.batch_sizes, r5.mean_ms * 2, r5.p50_ms * 2, r5.p99_ms * 2)
    p = tmp_path / "measured.csv"
    save_profiles_csv(p, [*shipped.profiles.values(), mine])     # a measurement of rm2 on r5.large
    argv = ["plan", RM2, "--types", TYPES3, "--profiles", str(p), "--objective", "max_throughput", "--confirm", "0",
            "--json"]
    assert main(argv) == 0
    d = json.loads(capsys.readouterr().out)
    assert "r5.large" in d["chosen"] and d["estimated"] == [] and d["left_out_estimated"] == {}   # planned, untagged
    # half the speed at 0.126 vs 0.149 $/hr: the measurement, not the estimate, decides
    assert d["chosen"]["r5.large"] == 0


def test_a_joint_plan_tags_each_models_estimated_workers(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "examples/replay-three.yaml", "--types", TYPES3, "--estimates", "--json"]
    assert main(argv) == 0
    d = json.loads(capsys.readouterr().out)
    picked = {m: s["estimated_picked"] for m, s in d["models"].items()}
    assert d["estimated_picked"] == sorted({t for ts in picked.values() for t in ts}) and d["estimated"] == ["r5.large"]
    for m, s in d["models"].items():
        assert s["estimated_picked"] == sorted(t for t in s["workers"] if t == "r5.large")
        assert s["estimated"] == ["r5.large"]


def test_measured_only_never_counts_an_estimate() -> None:
    from daemon.profiling.model_profiles import measured_only
    from variants.registry import VariantRegistry

    reg = VariantRegistry(":memory:")
    try:
        t = _table()
        kept = measured_only(t, reg)
        assert not any(k in kept.profiles for k in t.estimated) and kept.has("rm2", "g4dn.xlarge")
        assert not kept.has("mine", "g4dn.xlarge") and not kept.has("rm2", "g5.xlarge")
    finally:
        reg.close()


def test_a_measurement_in_the_daemon_replaces_the_estimate_and_moves_the_siblings() -> None:
    from daemon.profiling.self_profiling import SelfProfiler, profile_sink

    live = _table()
    prof = SelfProfiler.__new__(SelfProfiler)
    prof.profiles, prof.sink = live, profile_sink(None, None)   # no latency model, no routing to tell
    assert live.estimate("mine", "g5.xlarge").basis.startswith("estimate: g4dn.xlarge (itself an estimate) x 1")
    prof._add(profiles_from_rows(_rows("mine", "g4dn.xlarge", [(1, 5.0)])))       # a probe measured g4dn.xlarge
    assert live.estimate("mine", "g4dn.xlarge") is None and live.get("mine", "g4dn.xlarge").mean_ms.tolist() == [5.0]
    assert live.get("mine", "g5.xlarge").mean_ms.tolist() == [5.0]                 # derived again from the measurement
    assert live.estimate("mine", "g5.xlarge").basis.startswith("estimate: g4dn.xlarge x 1 (")
    prof._add(profiles_from_rows(_rows("mine", "g5.xlarge", [(1, 3.0)])))         # and then g5.xlarge itself
    assert live.estimate("mine", "g5.xlarge") is None and live.get("mine", "g5.xlarge").mean_ms.tolist() == [3.0]


def test_a_worker_standing_for_an_unmeasured_type_pads_to_its_estimate(tmp_path: Path) -> None:
    from worker.padding import padding_profile, padding_table
    from worker.options import WorkerOptions

    opts = WorkerOptions(instance_id="i-1", instance_type="inf1.xlarge", emulate_profile="rm2")
    p = padding_profile(opts, padding_table(opts))
    assert p is not None and p.latency_ms(10).item() == pytest.approx(34.54976, abs=1e-9)
    csv = tmp_path / "only.csv"                    # rm2 measured on r5n.large alone: no sibling for inf1
    save_profiles_csv(csv, [load_profiles_csv().get("rm2", "r5n.large")])
    opts = WorkerOptions(instance_id="i-1", instance_type="inf1.xlarge", emulate_profile="rm2", profiles_path=csv)
    with pytest.raises(ValueError, match="no latency profile for model 'rm2' on 'inf1.xlarge'"):
        padding_profile(opts, padding_table(opts))


def test_the_replay_names_each_models_workers_on_estimates() -> None:
    from daemon.commands.replay import replay_estimates

    cfg, t = _cfg(), _table()
    targets = [SimpleTarget({"rm2": {"g4dn.xlarge": 1}}), SimpleTarget({"rm2": {"r5.large": 2}, "mine": {"g4dn.xlarge": 1}})]
    assert replay_estimates(cfg, t, targets) == {
        "mine": {"g4dn.xlarge": "estimate: local"},
        "rm2": {"r5.large": "estimate: r5n.large x 1 (2 vCPUs and 16 GiB, same Intel Xeon family; config/type_estimates.csv)"}}
    assert replay_estimates(cfg, t, targets[:1]) == {}


class SimpleTarget:
    def __init__(self, shares: dict[str, dict[str, int]]) -> None:
        self.shares = shares


def test_the_daemons_plan_log_line_and_fleet_view_name_the_estimates() -> None:
    from daemon.observe.fleet_status import plan_estimates, tick_line
    from scaler.planner.joint_plan import plan_joint
    from sim.slo_check import slo_check

    cfg = load_config(RM2)
    cfg = cfg.model_copy(update={"instance_types": [t.model_copy(update={"type": "r5.large", "allow_estimates": True})
                                                    if t.type == "r5n.large" else t for t in cfg.instance_types],
                                 "objective": "max_throughput", "confirm_evaluations": 0})
    t = with_type_estimates(load_profiles_csv())
    plan = plan_joint(cfg, t, {}, slo_check=slo_check)
    est = plan_estimates(cfg, t, plan)
    assert plan.pool.get("r5.large", 0) > 0 and list(est) == ["rm2"] and list(est["rm2"]) == ["r5.large"]
    line = tick_line("interval", {}, plan.pool, plan, False, "nothing to do", est)
    assert line.endswith("; nothing to do; rests on estimated profiles, not measurements: rm2 on r5.large (estimate: "
                         "r5n.large x 1 (2 vCPUs and 16 GiB, same Intel Xeon family; config/type_estimates.csv))")
    assert plan_estimates(cfg, t, None) == {}


def test_the_plan_decision_in_status_says_it_rests_on_estimates() -> None:
    from daemon.observe.decision_log import DecisionLog, PlanDecisions
    from scaler.planner.joint_plan import plan_joint
    from sim.slo_check import slo_check

    cfg = load_config(RM2).model_copy(update={"state_path": ":memory:", "objective": "max_throughput",
                                              "confirm_evaluations": 0})
    cfg = cfg.model_copy(update={"instance_types": [*cfg.instance_types,
                                                    cfg.instance_types[0].model_copy(update={"type": "r5.large",
                                                                                             "allow_estimates": True})]})
    t = with_type_estimates(load_profiles_csv())
    plan = plan_joint(cfg, t, {}, slo_check=slo_check)
    feed = PlanDecisions(DecisionLog(clock=lambda: 0.0), lambda: cfg, t, price=lambda _: 0.0)   # no actuator: $0
    feed.planned(dict(plan.pool), plan, None)
    (d,) = feed.log.decisions
    assert d.kind == "plan" and "r5.large" in plan.pool
    assert d.reason.endswith("; rests on estimated profiles, not measurements: rm2 on r5.large (estimate: r5n.large x 1 "
                             "(2 vCPUs and 16 GiB, same Intel Xeon family; config/type_estimates.csv))")


def test_the_conservative_pool_never_rests_on_a_type_estimate_the_config_does_not_allow(tmp_path: Path) -> None:
    """A user's model profiled at start with r5.large allowed but not its estimates: r5.large (r5n.large's
    estimate at 0.126 instead of 0.149 $/hr) would be the cheapest meeting the SLO; the pool is r5n.large."""
    import asyncio

    from daemon.app import Daemon
    from scaler.cloud.fake import FakeCloud
    from tests.byom_helpers import KAIROS_TYPES, build_user_model, user_config
    from tests.dispatcher.test_dispatcher_live import run

    onnx_path = build_user_model(tmp_path / "mymodel.onnx")
    raw = user_config(tmp_path, onnx_path, dispatcher={"listen": "127.0.0.1:0"},
                      launch={"ami_id": "ami-1", "pending_timeout_s": 300}, intervals={"fleet_s": 3600, "reconcile_s": 3600})
    raw["instance_types"] = [{"type": t, "max": 2} for t in (*KAIROS_TYPES, "r5.large")]
    cfg = Config.model_validate(raw)

    async def body() -> tuple[dict[str, int], str, bool]:
        d = Daemon(cfg, None, cloud=FakeCloud(cfg.cluster), listen="127.0.0.1:0")
        await d.start()
        try:
            prof = d.profiling
            assert prof is not None and prof._task is not None
            while not prof.hold():
                assert not prof._task.done(), prof._task
                await asyncio.sleep(0.05)
            (pool, why), = prof.held.values()
            return pool, why, d.profiles.estimate(raw["models"][0]["name"], "r5.large") is not None
        finally:
            await d.stop(grace=0.0)

    pool, why, estimated = run(body, timeout=120)
    assert estimated                                   # r5.large has an estimate (from r5n.large's local one) ...
    assert pool == {"r5n.large": 1} and why.startswith("r5n.large meets p99 <= 50 ms")   # ... but is not held on it


def test_a_stored_estimate_on_an_unmeasured_type_names_its_sibling() -> None:
    from config.type_estimates import estimate_of

    assert estimate_of("estimate: x", "g5.xlarge") == Estimate("estimate: x", "g4dn.xlarge")
    assert estimate_of("estimate: x", "t3.xlarge") == Estimate("estimate: x", None)
