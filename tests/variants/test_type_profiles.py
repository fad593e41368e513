"""Per-type profiles of a user's model: emulation factors, estimates, probe rounds and costs, the
conservative pool, the SLO line, drift, validate's warning (hand-computed cases)."""
from __future__ import annotations

import numpy as np
import pytest

from config.checks import config_warnings
from config.emulation import derive_profile, emulation_factors, padded_service_ms
from config.profiles import LatencyProfile, ProfileTable, load_profiles_csv, profiles_from_rows, save_profiles_csv
from config.schema import Config
from scaler.fleet.probes import probe_cost, probe_rounds, probe_target
from variants.profiler import BatchLatency, VariantProfile
from variants.type_profiles import (
    ESTIMATE_PROVIDER, SloCheck, conservative_pool, default_batches, drift, estimate_types, is_estimate,
    missing_types, monotone, slo_verdict, types_for,
)


def _rows(model: str, itype: str, pts: list[tuple[int, float]]) -> list[dict[str, str]]:
    return [{"model": model, "instance_type": itype, "batch_size": str(b), "service_ms_mean": str(ms),
             "service_ms_p50": str(ms), "service_ms_p99": str(ms)} for b, ms in pts]


# two reference models on two types, batches 10 and 20
REF = profiles_from_rows(
    _rows("a", "T1", [(10, 2.0), (20, 4.0)]) + _rows("a", "T2", [(10, 6.0), (20, 4.0)])
    + _rows("b", "T1", [(10, 1.0), (20, 2.0)]) + _rows("b", "T2", [(10, 3.0), (20, 8.0)]))


def test_emulation_factor_is_the_median_slowdown_against_each_models_fastest_type() -> None:
    # T1 at 10: a 2/2, b 1/1; T2 at 10: a 6/2, b 3/1; at 20: T1 a 4/4, b 2/2; T2 a 4/4, b 8/2 -> median(1, 4)
    assert emulation_factors(REF, "T1", [1, 10, 15, 20]).tolist() == [1.0, 1.0, 1.0, 1.0]
    assert emulation_factors(REF, "T2", [1, 10, 15, 20]).tolist() == [3.0, 3.0, 2.5, 2.5]
    assert emulation_factors(REF, "T9", [1]) is None


def test_a_local_profile_becomes_each_type_by_its_factors() -> None:
    local = LatencyProfile("mine", "local", np.array([1.0, 15.0]), np.array([0.5, 1.0]), np.array([0.4, 0.9]),
                           np.array([0.6, 2.0]))
    t2 = derive_profile(local, "T2", REF)
    assert t2 is not None and t2.instance_type == "T2" and t2.model == "mine"
    assert t2.mean_ms.tolist() == [1.5, 2.5] and t2.p50_ms.tolist() == [pytest.approx(1.2), 2.25]
    assert t2.p99_ms.tolist() == [pytest.approx(1.8), 5.0]
    assert derive_profile(local, "T9", REF) is None


def test_the_worker_pads_an_unprofiled_model_by_the_same_factor() -> None:
    assert padded_service_ms(None, 15, 2.0, type_factor=2.5) == 5.0
    assert padded_service_ms(None, 15, 2.0) == 2.0


def test_estimates_are_marked_and_types_without_a_factor_are_named() -> None:
    local = VariantProfile("mine", "mine", "local", "CPUExecutionProvider",
                           (BatchLatency(1, 0.5, 0.4, 0.6, 5), BatchLatency(15, 1.0, 0.9, 2.0, 5)), 3.0, 1.0, "rss")
    est, skipped = estimate_types(local, ["T1", "T2", "T9"], REF)
    assert [p.instance_type for p in est] == ["T1", "T2"] and skipped == ["T9"]
    assert all(is_estimate(p) and p.provider == ESTIMATE_PROVIDER for p in est)
    assert [b.mean_ms for b in est[1].batches] == [1.5, 2.5] and est[1].load_ms == 3.0
    assert [b.runs for b in est[1].batches] == [5, 5]


def test_shipped_factors_make_the_types_differ() -> None:
    ref = load_profiles_csv()
    f = {t: emulation_factors(ref, t, [1, 1000]) for t in ref.types()}
    # at batch 1000 the GPU is the fastest type (factor 1) and t3.xlarge the slowest
    assert f["g4dn.xlarge"][1] == 1.0
    assert max(f, key=lambda t: f[t][1]) == "t3.xlarge"
    assert all(v.min() >= 1.0 for v in f.values())


def test_default_batches() -> None:
    assert default_batches(1000) == (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1000)
    assert default_batches(64) == (1, 2, 4, 8, 16, 32, 64)
    assert default_batches(1) == (1,)
    assert default_batches(5000)[-2:] == (512, 1024)


def test_types_for_and_missing_types() -> None:
    hw = {"g4dn.xlarge": "gpu", "c5n.2xlarge": "cpu", "r5n.large": "cpu"}
    types = ["g4dn.xlarge", "c5n.2xlarge", "r5n.large"]
    assert types_for("any", types, hw) == types
    assert types_for("cpu", types, hw) == ["c5n.2xlarge", "r5n.large"]
    assert types_for("gpu", types, hw) == ["g4dn.xlarge"]
    assert missing_types(REF, "a", ["T1", "T3", "T2"]) == ["T3"]


PRICES = {"g4dn.xlarge": 0.526, "c5n.2xlarge": 0.432, "r5n.large": 0.149, "t3.xlarge": 0.1664}


def test_probe_rounds_fit_the_room_left_by_the_pool_held() -> None:
    types = ["g4dn.xlarge", "c5n.2xlarge", "r5n.large", "t3.xlarge"]
    # dearest first, first fit in 0.851: g4dn .526 | c5n .432 (.958 too much: a second round) | t3 to
    # the first (.6924) | r5n to the first (.8414)
    assert probe_rounds(types, PRICES, 0.851) == ([["g4dn.xlarge", "r5n.large", "t3.xlarge"], ["c5n.2xlarge"]], [])
    # in 0.4 neither g4dn nor c5n fits alone; t3 .1664 + r5n .149 = .3154 share a round
    assert probe_rounds(types, PRICES, 0.4) == ([["r5n.large", "t3.xlarge"]], ["g4dn.xlarge", "c5n.2xlarge"])
    assert probe_rounds(types, PRICES, 0.2) == ([["t3.xlarge"], ["r5n.large"]], ["g4dn.xlarge", "c5n.2xlarge"])
    assert probe_rounds([], PRICES, 1.0) == ([], [])


def test_probe_target_and_cost() -> None:
    assert probe_target({"r5n.large": 1, "t3.xlarge": 0}, ["r5n.large", "g4dn.xlarge"]) == {"r5n.large": 2,
                                                                                            "g4dn.xlarge": 1}
    assert probe_cost(0.526, 10) == pytest.approx(0.526 * 60 / 3600)       # the 60 s minimum
    assert probe_cost(0.526, 120) == pytest.approx(0.526 * 120 / 3600)


def _table(p99: dict[str, float]) -> ProfileTable:
    rows = []
    for t, ms in p99.items():
        rows += _rows("m", t, [(64, ms)])
    return profiles_from_rows(rows)


def test_conservative_pool_is_the_cheapest_type_meeting_the_slo_at_the_largest_batch() -> None:
    check = slo_verdict(_table({"g4dn.xlarge": 10.0, "c5n.2xlarge": 20.0, "r5n.large": 40.0}),
                        "m", ["g4dn.xlarge", "c5n.2xlarge", "r5n.large", "t3.xlarge"], 25.0, 64)
    assert check.p99_ms == {"g4dn.xlarge": 10.0, "c5n.2xlarge": 20.0, "r5n.large": 40.0}
    assert sorted(check.meeting) == ["c5n.2xlarge", "g4dn.xlarge"] and check.line() is None
    pool, why = conservative_pool(check, PRICES, {"t3.xlarge": 1}, budget=1.0)
    assert pool == {"t3.xlarge": 1, "c5n.2xlarge": 1} and "c5n.2xlarge meets" in why
    # c5n does not fit beside the minimum: the next cheapest that meets does not either -> the minimums
    assert conservative_pool(check, PRICES, {"t3.xlarge": 1}, budget=0.5) == (
        {"t3.xlarge": 1}, "no type that meets it fits the budget: the configured minimum counts")


def test_a_model_no_type_serves_in_time_gets_one_line_and_the_minimum_counts() -> None:
    check = slo_verdict(_table({"g4dn.xlarge": 10.0, "r5n.large": 40.0}), "m", ["g4dn.xlarge", "r5n.large"],
                        5.0, 64, model="mine")
    line = check.line()
    assert line == ("model 'mine' cannot meet its SLO (p99 <= 5 ms) at its largest batch 64 on any of "
                    "g4dn.xlarge, r5n.large: the best is g4dn.xlarge at 10.0 ms; lower its max_batch or raise its qos_ms")
    assert conservative_pool(check, PRICES, {}, 1.0) == ({}, "no type meets the SLO by the local estimate: "
                                                              "the configured minimum counts")
    assert SloCheck("m", 5.0, 64, {}).line() is None


def test_drift_is_a_slowdown_beyond_the_ratio_in_buckets_with_enough_queries() -> None:
    prof = _table({"T1": 10.0}).get("m", "T1")
    assert drift(prof, {10: (20, 16.0), 20: (20, 17.0)}) == pytest.approx(1.65)   # median(1.6, 1.7)
    assert drift(prof, {10: (20, 12.0), 20: (20, 14.0)}) is None           # 1.3x: within the ratio
    assert drift(prof, {10: (3, 50.0)}) is None                             # too few queries
    assert drift(prof, {10: (20, 2.0)}) is None                             # faster: never a refresh


def test_profile_csv_round_trip(tmp_path) -> None:  # noqa: ANN001
    path = tmp_path / "p.csv"
    save_profiles_csv(path, REF.profiles.values())
    back = load_profiles_csv(path)
    assert sorted(back.profiles) == sorted(REF.profiles)
    assert back.get("b", "T2").p99_ms.tolist() == [3.0, 8.0]
    assert REF.merged(back).get("a", "T1").mean_ms.tolist() == [2.0, 4.0]


def _cfg(model: dict) -> Config:
    return Config.model_validate({"cluster": "c", "budget_per_hour": 1.0, "models": [model],
                                  "instance_types": [{"type": "r5n.large"}, {"type": "t3.xlarge"}],
                                  "launch": {"ami_id": "ami-1"}})


def test_validate_warns_about_a_model_without_profiles_and_names_the_fix() -> None:
    warns = config_warnings(_cfg({"name": "mine", "onnx": "/m.onnx", "qos_ms": 5}), path="c.yaml")
    assert len(warns) == 1 and "'mine' has no latency profile on any allowed type" in warns[0]
    assert "costscale profile c.yaml" in warns[0]
    assert config_warnings(_cfg({"name": "rm2", "qos_ms": 350})) == []
    stored = profiles_from_rows(_rows("mine", "r5n.large", [(1, 1.0)]))
    assert "on t3.xlarge" in config_warnings(_cfg({"name": "mine", "onnx": "/m.onnx", "qos_ms": 5}), stored)[0]


def test_profiles_are_made_monotone_in_the_batch_size() -> None:
    noisy = VariantProfile("mine", "mine", "T1", "CPUExecutionProvider",
                           (BatchLatency(64, 4.0, 1.2, 5.0, 5), BatchLatency(1, 2.0, 1.0, 3.0, 5),
                            BatchLatency(8, 1.0, 1.5, 2.0, 5)), 0.0, 0.0, "rss")
    got = monotone(noisy)
    assert [(b.batch_size, b.mean_ms, b.p50_ms, b.p99_ms) for b in got.batches] == [
        (1, 2.0, 1.0, 3.0), (8, 2.0, 1.5, 3.0), (64, 4.0, 1.5, 5.0)]
    # past the largest batch the last segment (8 -> 64: +2 ms) goes on rising, never below zero
    assert float(got.to_latency_profile().latency_ms(1000)) == pytest.approx(4.0 + 2.0 / 56 * 936)
