"""Kairos §5.2 upper bound: hand-computed Eq. 9-15, the base/auxiliary split, pool enumeration."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scaler.planner.base_aux import (
    BoundParams,
    NoFeasibleBase,
    heterogeneity_coefficients,
    qos_region,
    split_base_aux,
    throughput_qps,
)
from scaler.planner.batch_mix import BatchMix, mix_from_dist
from config.profiles import LatencyProfile, load_profiles_csv
from scaler.planner.upper_bound import enumerate_pools, upper_bound_one, upper_bounds


def prof(name: str, mean: list[float], p99: list[float] | None = None) -> LatencyProfile:
    sizes = np.arange(1, len(mean) + 1, dtype=float) * 10
    m = np.array(mean, dtype=float)
    return LatencyProfile("m", name, sizes, m, m, np.array(p99 if p99 is not None else mean, dtype=float))


def one_aux(q_b: float, q_bs: float, f: float, q_a: float) -> BoundParams:
    return BoundParams(q_b=q_b, f=np.array([f]), q_b_splus=np.array([q_bs]), q_a=np.array([[q_a]]))


def ub(params: BoundParams, u: int, v: list[int]) -> float:
    vec = float(upper_bounds(np.array([u]), np.array([v]), params)[0])
    assert vec == pytest.approx(upper_bound_one(u, v, params), rel=1e-12)
    return vec


# --- Eq. 9-13: one base, one auxiliary -------------------------------------------------------

def test_eq11_aux_is_bottleneck() -> None:
    # (1-f)/f*Qa = 0.25*20 = 5 < Qb^{s+} = 40  ->  Qa/f + (40-5)/40*Qb = 25 + 87.5
    assert ub(one_aux(100, 40, 0.8, 20), 1, [1]) == pytest.approx(112.5)


def test_eq9_base_is_bottleneck() -> None:
    # 0.25*200 = 50 >= 40  ->  Qb^{s+}/(1-f) = 40/0.2
    assert ub(one_aux(100, 40, 0.8, 200), 1, [1]) == pytest.approx(200.0)


def test_eq13_u_v_greater_than_one() -> None:
    # u=2, v=3: vQa=60, C=15 < uQb^{s+}=80  ->  60/0.8 + (80-15)/80*200 = 75 + 162.5
    assert ub(one_aux(100, 40, 0.8, 20), 2, [3]) == pytest.approx(237.5)


def test_eq12_u_v_greater_than_one() -> None:
    # u=2, v=3: vQa=600, C=150 >= 80  ->  80/0.2
    assert ub(one_aux(100, 40, 0.8, 200), 2, [3]) == pytest.approx(400.0)


def test_limits_no_aux_f_zero_f_one_no_base() -> None:
    p = one_aux(100, 40, 0.8, 20)
    assert ub(p, 3, [0]) == pytest.approx(300.0)          # base only: u*Qb
    assert ub(p, 0, [5]) == 0.0                           # queries beyond s have nowhere to go
    assert ub(one_aux(100, 0, 1.0, 20), 2, [3]) == pytest.approx(60 + 200)   # aux serves the whole mix
    assert ub(one_aux(100, 100, 0.0, 0), 2, [3]) == pytest.approx(200.0)     # aux serves nothing


# --- Eq. 14-15: three auxiliary types -----------------------------------------------------------

def three_aux() -> BoundParams:
    # aux order = ascending region; f' of a pool = f of its last present aux
    q_a = np.array([[30.0, 60.0, 45.0],
                    [20.0, 40.0, 30.0],
                    [10.0, 20.0, 15.0]])
    return BoundParams(q_b=100.0, f=np.array([0.5, 0.6, 0.8]), q_b_splus=np.array([70.0, 55.0, 40.0]), q_a=q_a)


def test_eq15_three_aux_case2() -> None:
    # all present: f'=0.8, row 2: sum vQa = 1*10 + 2*20 + 2*15 = 80, C = 80*0.2/0.8 = 20 < 40
    # -> 80/0.8 + (40-20)/40*100 = 100 + 50
    assert ub(three_aux(), 1, [1, 2, 2]) == pytest.approx(150.0)


def test_eq15_three_aux_case1() -> None:
    # u=1, v=(4,4,4): sum vQa = 40+80+60 = 180, C = 45 >= 40 -> 40/0.2
    assert ub(three_aux(), 1, [4, 4, 4]) == pytest.approx(200.0)


def test_eq15_uses_region_of_largest_present_aux() -> None:
    # aux 2 absent: f'=0.6 (row 1): sum vQa = 2*20 + 1*40 = 80, C = 80*0.4/0.6 = 53.33 < 2*55 = 110
    # -> 80/0.6 + (110-53.33)/110*200
    c = 80 * 0.4 / 0.6
    assert ub(three_aux(), 2, [2, 1, 0]) == pytest.approx(80 / 0.6 + (110 - c) / 110 * 200)


# --- definitions from profiles and the mix ---------------------------------------------------

MIX = BatchMix(np.array([10, 20, 40]), np.array([0.5, 0.25, 0.25]))


def test_split_base_aux_hand_case() -> None:
    base = prof("gpu", [1, 2, 3, 4])
    aux = prof("cpu", [2, 4, 8, 16])
    ba = split_base_aux({"gpu": base, "cpu": aux}, MIX, qos_ms=10, prices={"gpu": 1.0, "cpu": 0.5}, xi=1.0)
    assert ba.base_type == "gpu"
    assert ba.q_b == pytest.approx(1000 / (0.5 * 1 + 0.25 * 2 + 0.25 * 4))       # 500
    (a,) = ba.aux
    assert (a.instance_type, a.s, a.f) == ("cpu", 30, 0.75)
    assert a.q_a == pytest.approx(1000 / ((0.5 * 2 + 0.25 * 4) / 0.75))           # 375
    assert ba.params.q_b_splus[0] == pytest.approx(1000 / 4)                      # 250
    # u=v=1: C = 375*0.25/0.75 = 125 < 250 -> 375/0.75 + (250-125)/250*500 = 750
    assert ub(ba.params, 1, [1]) == pytest.approx(750.0)
    # v=2: C = 250 = uQb^{s+} -> Eq. 12: 250/0.25
    assert ub(ba.params, 1, [2]) == pytest.approx(1000.0)


def test_xi_safeguard_shrinks_region() -> None:
    aux = prof("cpu", [2, 4, 9.9, 16])
    assert qos_region(aux, 1.0 * 10) == 30
    assert qos_region(aux, 0.98 * 10) == 20


def test_region_is_a_prefix() -> None:
    assert qos_region(prof("x", [1, 20, 5, 30]), 10) == 10
    assert qos_region(prof("x", [11, 1, 1, 1]), 10) == 0
    assert qos_region(prof("x", [1, 1, 1, 1]), 10) == 40


def test_base_is_best_throughput_per_dollar_among_feasible() -> None:
    fast = prof("fast", [0.5, 1, 1.5, 2])   # Q = 1000 / 1.0 = 1000 at $3 -> 333/$
    slow = prof("slow", [1, 2, 3, 4])       # Q = 500 at $1 -> 500/$
    cpu = prof("cpu", [1, 2, 30, 40])       # infeasible at batch 40, however cheap
    ba = split_base_aux({"fast": fast, "slow": slow, "cpu": cpu}, MIX, 10, {"fast": 3.0, "slow": 1.0, "cpu": 0.01})
    assert ba.base_type == "slow"
    assert ba.aux_types == ("cpu", "fast")  # ascending region: cpu s=20, fast s=40
    assert [a.f for a in ba.aux] == [0.75, 1.0]


def test_no_feasible_base() -> None:
    with pytest.raises(NoFeasibleBase, match="QoS target 3 ms"):
        split_base_aux({"cpu": prof("cpu", [1, 2, 8, 16])}, MIX, 3, {"cpu": 1.0})


def test_throughput_empty_selection_is_zero() -> None:
    assert throughput_qps(prof("x", [1, 2, 3, 4]), MIX, np.zeros(3)) == 0.0


def test_heterogeneity_coefficients_paper_example() -> None:
    assert heterogeneity_coefficients({"i1": 100, "i2": 200, "i3": 500}) == pytest.approx({"i1": 1, "i2": 0.5, "i3": 0.2})


# --- pool enumeration ------------------------------------------------------------------------

def test_enumerate_pools_hand_case() -> None:
    counts, cost = enumerate_pools([1.0, 0.5], 2.0)
    got = sorted(map(tuple, counts.tolist()))
    assert got == [(0, 1), (0, 2), (0, 3), (0, 4), (1, 0), (1, 1), (1, 2), (2, 0)]
    assert np.allclose(cost, counts @ np.array([1.0, 0.5]))
    counts, _ = enumerate_pools([1.0, 0.5], 2.0, mins=[1, 0], maxs=[None, 1])
    assert sorted(map(tuple, counts.tolist())) == [(1, 0), (1, 1), (2, 0)]


@settings(max_examples=60, deadline=None)
@given(
    prices=st.lists(st.floats(0.1, 1.5), min_size=1, max_size=4),
    budget=st.floats(0.05, 4.0),
    data=st.data(),
)
def test_enumerate_matches_brute_force(prices: list[float], budget: float, data: st.DataObject) -> None:
    t = len(prices)
    mins = data.draw(st.lists(st.integers(0, 2), min_size=t, max_size=t))
    maxs = data.draw(st.lists(st.one_of(st.none(), st.integers(0, 6)), min_size=t, max_size=t))
    maxs = [None if m is None else max(m, lo) for m, lo in zip(maxs, mins)]
    counts, cost = enumerate_pools(prices, budget, mins, maxs)
    ranges = [range(lo, (hi if hi is not None else int(budget / p) + 1) + 1) for lo, hi, p in zip(mins, maxs, prices)]
    want = {c for c in itertools.product(*ranges)
            if sum(c) > 0 and sum(n * p for n, p in zip(c, prices)) <= budget + 1e-9}
    assert set(map(tuple, counts.tolist())) == want
    assert len(counts) == len(want)
    assert np.all(cost <= budget + 1e-9)


@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_vectorized_equals_scalar(data: st.DataObject) -> None:
    n = data.draw(st.integers(0, 4))
    fs = sorted(data.draw(st.lists(st.sampled_from([0.0, 0.1, 0.37, 0.5, 0.9, 1.0]), min_size=n, max_size=n)))
    pos = st.floats(1.0, 1000.0)
    params = BoundParams(
        q_b=data.draw(pos),
        f=np.array(fs, dtype=float),
        q_b_splus=np.array(data.draw(st.lists(pos, min_size=n, max_size=n)), dtype=float),
        q_a=np.array(data.draw(st.lists(pos, min_size=n * n, max_size=n * n)), dtype=float).reshape(n, n),
    )
    pools = data.draw(st.lists(st.lists(st.integers(0, 5), min_size=n + 1, max_size=n + 1), min_size=1, max_size=20))
    arr = np.array(pools)
    vec = upper_bounds(arr[:, 0], arr[:, 1:], params)
    for row, got in zip(pools, vec):
        want = upper_bound_one(row[0], row[1:], params)
        assert got == pytest.approx(want, rel=1e-9, abs=1e-9)
        assert got >= 0


@pytest.mark.parametrize("model,qos", [("ncf", 5), ("rm2", 350), ("wnd", 25), ("mtwnd", 25), ("dien", 35)])
def test_bound_grows_with_base_and_widest_aux_on_real_profiles(model: str, qos: float) -> None:
    table = load_profiles_csv()
    types = table.types(model)
    prices = {"g4dn.xlarge": 0.526, "c5n.2xlarge": 0.432, "r5n.large": 0.149, "t3.xlarge": 0.1664}
    ba = split_base_aux({t: table.get(model, t) for t in types}, mix_from_dist("deeprecsys"), qos, prices)
    assert ba.base_type == "g4dn.xlarge"
    rng = np.random.default_rng(1)
    u = rng.integers(0, 5, 200)
    v = rng.integers(0, 6, (200, len(ba.aux)))
    b0 = upper_bounds(u, v, ba.params)
    assert np.all(upper_bounds(u + 1, v, ba.params) >= b0 - 1e-9)
    v2 = v.copy()
    v2[:, -1] += 1  # one more of the widest-region auxiliary: f' unchanged or larger only if it was absent
    had = v[:, -1] > 0
    assert np.all(upper_bounds(u, v2, ba.params)[had] >= b0[had] - 1e-9)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 3)), min_size=1, max_size=60))
def test_rank_order_is_bound_desc_then_cost(rows: list[tuple[int, int]]) -> None:
    from scaler.planner.upper_bound import rank_pools

    bound = np.array([r[0] for r in rows], dtype=float)
    cost = np.array([r[1] for r in rows], dtype=float) * 0.1
    counts = np.arange(len(rows))[:, None]
    ranking = rank_pools(["a"], counts, cost, bound)
    assert ranking.counts[:, 0].tolist() == np.lexsort((cost, -bound)).tolist()
