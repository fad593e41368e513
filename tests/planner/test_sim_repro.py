"""The Kairos reproduction's pure helpers (bench/planner/kairos_repro.py): §8.1 homogeneous pool sizing,
the DRS threshold search start and candidates, the baselines' candidate pools, and the DRS
regression on rm2 with Gaussian batch sizes (the latency-region default threshold starves the pool)."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "planner"))

import kairos_repro as kr  # noqa: E402

from scaler.planner.batch_mix import BatchMix, mix_from_batches  # noqa: E402
from config.profiles import load_profiles_csv, profiles_from_rows  # noqa: E402
from scaler.planner.upper_bound import Ranking  # noqa: E402
from sim.capacity import pool_capacity  # noqa: E402
from sim.policies import policy_factory  # noqa: E402
from sim.workload import unit_poisson_workload  # noqa: E402

MIX4 = BatchMix(np.array([10, 20, 30, 40]), np.full(4, 0.25))


def flat(ms: dict[str, float], p99: dict[str, float] | None = None):
    rows = []
    for t, v in ms.items():
        for b in range(10, 1001, 10):
            rows.append({"model": "m", "instance_type": t, "batch_size": str(b), "service_ms_mean": str(v),
                         "service_ms_p50": str(v), "service_ms_p99": str((p99 or ms)[t])})
    return profiles_from_rows(rows)


def test_homogeneous_pool_is_max_nodes_within_budget() -> None:
    prof = load_profiles_csv()
    mix = mix_from_batches(unit_poisson_workload(5000, "deeprecsys", seed=2).batches)
    pools = kr.homogeneous_pools(prof, "rm2", mix, 350.0, kr.PRICES, 2.5)
    # only g4dn.xlarge meets 350 ms up to batch 1000 (Kairos §7); floor(2.5 / 0.526) = 4
    assert pools == {"g4dn.xlarge": {"g4dn.xlarge": 4}}
    assert kr.homogeneous_pools(prof, "rm2", mix, 350.0, kr.PRICES, 10.0) == {"g4dn.xlarge": {"g4dn.xlarge": 19}}


def test_homogeneous_pool_exact_budget_multiple_and_infeasible_types() -> None:
    prof = flat({"a": 10.0, "b": 5.0}, p99={"a": 10.0, "b": 50.0})
    pools = kr.homogeneous_pools(prof, "m", MIX4, 20.0, {"a": 0.5, "b": 0.1}, 1.5)
    assert pools == {"a": {"a": 3}}          # 1.5 / 0.5 = 3 exactly (no float floor to 2); b misses QoS


def test_fluid_drs_threshold_hand_computed() -> None:
    prof = flat({"fast": 10.0, "slow": 20.0})
    # one slow aux: aux load 5, 10, 15, 20; base load 7.5, 5, 2.5, 0 -> max minimal (7.5) at tau = 10
    assert kr.fluid_drs_threshold(MIX4, {"fast": 1, "slow": 1}, "fast", prof, "m", cap=1000) == 10
    # two slow aux: aux load 2.5, 5, 7.5, 10 -> balanced at tau = 20 (5 and 5)
    assert kr.fluid_drs_threshold(MIX4, {"fast": 1, "slow": 2}, "fast", prof, "m", cap=1000) == 20
    # never above the cap; no auxiliary -> the cap
    assert kr.fluid_drs_threshold(MIX4, {"fast": 1, "slow": 9}, "fast", prof, "m", cap=20) == 20
    assert kr.fluid_drs_threshold(MIX4, {"fast": 2}, "fast", prof, "m", cap=30) == 30
    # aux much faster than base: everything to the aux (tau = 40)
    prof2 = flat({"base": 100.0, "aux": 1.0})
    assert kr.fluid_drs_threshold(MIX4, {"base": 1, "aux": 1}, "base", prof2, "m", cap=1000) == 40


def test_drs_candidates_are_a_handful_below_the_cap() -> None:
    c = kr.drs_candidates(MIX4, start=20, cap=30)
    # CDF 0.5 at 20: shifts -0.1 -> 0.4 (size 20), -0.05 -> 0.45 (20), +0.05 -> 0.55 (30); plus start and cap
    assert c == [20, 30]
    c = kr.drs_candidates(MIX4, start=10, cap=40, steps=(-0.3, 0.3))
    assert c == [0, 10, 30, 40]
    assert all(t <= 40 for t in c) and len(c) <= 5


def test_baseline_candidates_add_pools_with_more_base_instances() -> None:
    counts = np.array([[1, 5], [1, 4], [2, 3], [3, 1], [2, 2]], dtype=np.int32)
    rk = Ranking(types=("b", "a"), counts=counts, cost=np.zeros(5), bound=np.array([9.0, 8, 7, 6, 5]))
    got = kr.baseline_candidates(rk, "b", {"b": 1, "a": 5}, [{"b": 4}, {}], top=2)
    assert got == [{"b": 1, "a": 5}, {"b": 4}, {"b": 1, "a": 4}, {"b": 2, "a": 3}, {"b": 3, "a": 1}]


@pytest.mark.timeout(120)
def test_drs_on_rm2_gaussian_pick_needs_the_swept_threshold() -> None:
    """The bench's old DRS = 0 for rm2 / Gaussian: on 14 r5n + 1 t3 (base r5n) the default threshold,
    t3's latency region (380), sends ~90% of the queries to the single t3. The fluid-balanced start
    sends far fewer there and the pool serves tens of times more."""
    prof = load_profiles_csv()
    pool = {"r5n.large": 14, "t3.xlarge": 1}
    wl = unit_poisson_workload(600, "gaussian", seed=1)
    mix = mix_from_batches(unit_poisson_workload(5000, "gaussian", seed=2).batches)
    default = policy_factory("drs", prof, "rm2", pool)().threshold_for("rm2", 350.0, ["t3.xlarge"])
    assert default == 380 and mix.cdf(default) > 0.85
    start = kr.fluid_drs_threshold(mix, pool, "r5n.large", prof, "rm2", default)
    assert mix.cdf(start) < 0.15

    def cap(thr: int) -> float:
        f = policy_factory("drs", prof, "rm2", pool, drs_threshold=thr)
        return pool_capacity(pool, "rm2", prof, 350.0, f, workload=wl, precision=0.1, seed=1).allowable_qps

    assert cap(start) > 20 * cap(default)
