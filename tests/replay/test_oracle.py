"""The Kairos §7 oracle (fluid-bound LP): hand-computed values, and never below any policy's
allowable throughput on the same pool and the same queries."""
from __future__ import annotations

import numpy as np
import pytest

from config.profiles import load_profiles_csv, profiles_from_rows
from sim.capacity import allowable_throughput, pool_capacity
from sim.oracle import oracle_capacity
from sim.policies import policy_factory
from sim.workload import unit_poisson_workload

PROFILES = load_profiles_csv()


def grid_profiles(ms: dict[str, callable]):  # type: ignore[valid-type]
    rows = []
    for t, f in ms.items():
        for b in range(10, 1001, 10):
            v = str(f(b))
            rows.append({"model": "m", "instance_type": t, "batch_size": str(b), "service_ms_mean": v,
                         "service_ms_p50": v, "service_ms_p99": v})
    return profiles_from_rows(rows)


def test_single_type_fixed_batch_is_service_rate() -> None:
    prof = grid_profiles({"a": lambda b: 4.0})
    o = oracle_capacity({"a": 3}, "m", prof, 10.0, np.full(500, 10))
    # 1% may be left unserved (nearest-rank p99): 495 of 500 queries at 4 ms on 3 instances
    assert o.allowable_qps == pytest.approx(3 * 1000 / 4.0 * 500 / 495)
    assert o.utilization["a"] == pytest.approx(1.0)


def test_two_types_hand_computed_lp() -> None:
    # fast: 1 ms for everything; slow: 4 ms up to batch 10, 100 ms above (misses the 50 ms QoS)
    prof = grid_profiles({"fast": lambda b: 1.0, "slow": lambda b: 4.0 if b <= 10 else 100.0})
    batches = np.array([10] * 50 + [1000] * 50)
    o = oracle_capacity({"fast": 1, "slow": 1}, "m", prof, 50.0, batches)
    # 99 of 100 must be served: fast takes 49 big + s small, slow 50 - s small: 49 + s = 4 (50 - s) -> T = 79.2 ms
    assert o.allowable_qps == pytest.approx(100 / 0.0792, rel=1e-6)
    assert o.served_fraction == pytest.approx(0.99)
    # the large queries go to the fast (base) type only
    assert o.share_by_type["slow"] == pytest.approx((50 - 30.2) / 100, rel=1e-6)


def test_infeasible_when_too_few_queries_can_meet_qos() -> None:
    prof = grid_profiles({"slow": lambda b: 4.0 if b <= 10 else 100.0})
    o = oracle_capacity({"slow": 2}, "m", prof, 50.0, np.array([10] * 90 + [1000] * 10))
    assert o.allowable_qps == 0.0


def test_allowable_throughput_bisection() -> None:
    # p99 grows with the rate: 10 ms + rate/10 ms; QoS 50 ms -> exactly 400 q/s
    r = allowable_throughput(lambda rate: 10 + rate / 10, 50.0, 37.0, precision=0.01)
    assert 400 * 0.99 <= r.allowable_qps <= 400
    assert r.p99_ms <= 50.0
    assert allowable_throughput(lambda rate: 99.0, 50.0, 10.0).allowable_qps == 0.0


POOLS = [
    ("dien", 35.0, {"g4dn.xlarge": 1, "r5n.large": 2}),
    ("wnd", 25.0, {"g4dn.xlarge": 1, "c5n.2xlarge": 1}),
    ("rm2", 350.0, {"g4dn.xlarge": 1, "t3.xlarge": 1}),
    ("mtwnd", 25.0, {"g4dn.xlarge": 2}),
]


def _policies() -> list[str]:
    try:
        import dispatcher.policies  # noqa: F401
    except ImportError:
        return ["first-idle"]
    return ["first-idle", "kairos", "fcfs", "clockwork"]


@pytest.mark.parametrize("model,qos,pool", POOLS, ids=[p[0] for p in POOLS])
def test_oracle_never_below_any_policy(model: str, qos: float, pool: dict[str, int]) -> None:
    wl = unit_poisson_workload(1500, "deeprecsys", seed=1)
    bound = oracle_capacity(pool, model, PROFILES, qos, wl.batches, drain_s=qos / 1000).allowable_qps
    assert bound > 0
    for name in _policies():
        cap = pool_capacity(pool, model, PROFILES, qos, policy_factory(name, PROFILES, model, pool), workload=wl,
                            precision=0.05, start_qps=bound / 4)
        assert cap.allowable_qps <= bound, name
        if name == "kairos":
            assert cap.allowable_qps > 0


# ---------------------------------------------------------------- the paper's ORCL (Kairos §7)

from sim.paper_oracle import best_paper_oracle, paper_oracle  # noqa: E402

# gpu (base): 1 + b/100 ms; cpu: b/10 + 0.5 ms, within the 20 ms QoS up to batch 100 only
HAND = grid_profiles({"gpu": lambda b: 1 + b / 100, "cpu": lambda b: b / 10 + 0.5})
SIX = np.array([200, 10, 500, 30, 100, 20])


def test_paper_oracle_hand_computed_two_types_six_queries() -> None:
    # sorted: 10 20 30 100 200 500. t=0: gpu takes 500 (6 ms, free at 6), cpu takes 10 (1.5 -> 1.5),
    # then 20 (2.5 -> 4.0), then 30 (3.5 -> 7.5); t=6: gpu takes the largest left, 200 (3 -> 9);
    # t=7.5: cpu takes the smallest left, 100 (10.5 -> 18); nothing left: 6 queries in 18 ms
    o = paper_oracle({"gpu": 1, "cpu": 1}, "m", HAND, 20.0, SIX)
    assert o.base_type == "gpu"
    assert o.makespan_s == pytest.approx(0.018)
    assert o.allowable_qps == pytest.approx(6 / 0.018)
    assert o.served_fraction == 1.0
    assert o.share_by_type == {"gpu": pytest.approx(2 / 6), "cpu": pytest.approx(4 / 6)}


def test_paper_oracle_never_runs_a_query_past_qos() -> None:
    # cpu alone: 200 (20.5 ms) and 500 (50.5 ms) miss the 20 ms QoS and never run;
    # 10, 20, 30, 100 back to back: 1.5 + 2.5 + 3.5 + 10.5 = 18 ms
    o = paper_oracle({"cpu": 1}, "m", HAND, 20.0, SIX, percentile=50.0)
    assert o.served_fraction == pytest.approx(4 / 6)
    assert o.allowable_qps == pytest.approx(4 / 0.018)
    # at p99 (the default), 2 of 6 unserved is too many: allowable throughput 0
    assert paper_oracle({"cpu": 1}, "m", HAND, 20.0, SIX).allowable_qps == 0.0
    # the gpu alone serves all six largest first: 6 + 3 + 2 + 1.3 + 1.2 + 1.1 = 14.6 ms
    g = paper_oracle({"gpu": 1}, "m", HAND, 20.0, SIX)
    assert g.allowable_qps == pytest.approx(6 / 0.0146)


def test_best_paper_oracle_is_the_max_over_pools() -> None:
    pools = [{"cpu": 1}, {"gpu": 1}, {"gpu": 1, "cpu": 1}, {"gpu": 2}]
    # two gpus: 500 | 200, then 100 (2 ms) on the one free at 3, ... = max(6 + 1.2, 3 + 2 + 1.3 + 1.1) = 7.4 ms
    q, pool = best_paper_oracle(pools, "m", HAND, 20.0, SIX)
    assert pool == {"gpu": 2}
    assert q == pytest.approx(6 / 0.0074)
