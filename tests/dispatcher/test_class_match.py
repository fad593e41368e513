"""The exact class matching (dispatcher/policies/class_match.py, issue #29) against the dense
Kairos §5.1 assignment it replaces for large rounds: the same optimum on every random round."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from scipy.optimize import linear_sum_assignment

from dispatcher.policies import KairosPolicy, KairosStrictPolicy, kairos as kairos_mod
from dispatcher.policies.class_match import match_classes
from dispatcher.policy import QueryView, WorkerView
from tests.match_helpers import GridPredictor, assert_dispatchable, large_rounds, without_highspy

TYPES = ("A", "B", "D", "E")


@st.composite
def rounds(draw: st.DrawFn) -> tuple[GridPredictor, list[QueryView], list[WorkerView], float]:
    ntypes = draw(st.integers(1, 4))
    ms = st.sampled_from([1.0, 2.0, 3.0, 5.0, 7.5, 12.0, 20.0])          # few values: many ties
    table = {t: draw(st.lists(ms, min_size=4, max_size=4)) for t in TYPES[:ntypes]}
    now = 100.0
    m = draw(st.integers(1, 14))
    n = draw(st.integers(1, 14))
    queue = [QueryView(f"q{i}", "m", draw(st.integers(1, 4)),
                       now - draw(st.sampled_from([0.0, 0.005, 0.01, 0.02, 0.0123])),
                       draw(st.sampled_from([15.0, 25.0, 40.0]))) for i in range(m)]
    busy_ms = st.one_of(st.just(0.0), st.sampled_from([0.5, 2.0, 4.0]), st.floats(0.01, 30.0))
    workers = []
    for j in range(n):
        b = draw(busy_ms)
        workers.append(WorkerView(f"w{j}", TYPES[draw(st.integers(0, ntypes - 1))],
                                  now + b / 1000.0 if b > 0 else now - 1.0, b == 0.0))
    return GridPredictor(table), queue, workers, now


def _dense_optimum(cost: np.ndarray) -> float:
    r, c = linear_sum_assignment(cost)
    return float(cost[r, c].sum())


@pytest.mark.parametrize("policy", [KairosPolicy, KairosStrictPolicy])
@settings(max_examples=300, deadline=None)
@given(case=rounds())
def test_class_matching_reaches_the_dense_optimum(policy: type[KairosPolicy], case: tuple) -> None:
    pred, queue, workers, now = case
    pol = policy(pred, "A")
    pc, _ = pol._restrict_pairs(pol.pair_costs(queue, workers, now))
    cost, _ = pol._restrict(pol._terms(queue, workers, now))
    np.testing.assert_allclose(pc.dense(), cost, rtol=1e-12, atol=0)     # the same matrix
    got = match_classes(pc)
    if got is None:     # only where kairos-strict's M is below a late pair's optimistic bound (tiny rounds)
        assert policy is KairosStrictPolicy
        return
    rows, cols = got
    m, n = cost.shape
    assert len(rows) == min(m, n)
    assert len(set(rows.tolist())) == len(rows) and len(set(cols.tolist())) == len(cols)
    opt = _dense_optimum(cost)
    assert abs(float(cost[rows, cols].sum()) - opt) <= 1e-9 * max(1.0, abs(opt))


def _grid() -> GridPredictor:
    return GridPredictor({"A": [2.0, 3.0, 4.0, 5.0], "B": [3.0, 7.5, 12.0, 16.0], "D": [5.0, 7.0, 10.0, 13.0]})


def test_the_paper_example_through_the_class_path(monkeypatch: pytest.MonkeyPatch) -> None:
    # tests/dispatcher/test_policies.py's 3 × 2 case (C_B = 1/3): q2→A + q1→B = 4 is the unique optimum.
    monkeypatch.setattr(kairos_mod, "DENSE_MAX_PAIRS", 0)
    pol = KairosPolicy(_grid(), "A")
    queue = [QueryView(f"q{b}", "m", b, 0.0, 1000.0) for b in (1, 2, 3)]
    workers = [WorkerView("a", "A", -1.0, True), WorkerView("b", "B", -1.0, True)]
    got = pol.match(queue, workers, 0.0)
    assert {(a.query_id, a.worker_id) for a in got} == {("q2", "a"), ("q1", "b")}


def test_identical_idle_workers_collapse_into_one_group_and_busy_ones_are_not_dispatched(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # 6 queries of batch 1 on 4 idle A and 2 busy A: every worker gets one, only the idle 4 are
    # dispatched, each to a distinct query, the 2 left for the busy ones wait.
    monkeypatch.setattr(kairos_mod, "DENSE_MAX_PAIRS", 0)
    pol = KairosPolicy(_grid(), "A")
    queue = [QueryView(f"q{i}", "m", 1, 0.0, 1000.0) for i in range(6)]
    workers = [WorkerView(f"w{j}", "A", -1.0, True) for j in range(4)]
    workers += [WorkerView(f"z{j}", "A", 0.002 * (j + 1), False) for j in range(2)]
    got = pol.match(queue, workers, 0.0)
    assert sorted(a.worker_id for a in got) == ["w0", "w1", "w2", "w3"]
    assert len({a.query_id for a in got}) == 4


@pytest.mark.parametrize("policy", [KairosPolicy, KairosStrictPolicy])
@settings(max_examples=100, deadline=None)
@given(case=rounds())
def test_match_dispatches_only_idle_workers_once_each(policy: type[KairosPolicy], case: tuple,
                                                       ) -> None:
    pred, queue, workers, now = case
    pol = policy(pred, "A")
    with large_rounds():
        got = pol.match(queue, workers, now)
    assert_dispatchable(pol, queue, workers, now, got)


@settings(max_examples=40, deadline=None)
@given(case=rounds())
def test_scipy_highs_gives_the_same_optimum_where_highspy_is_missing(case: tuple) -> None:
    pred, queue, workers, now = case
    pol = KairosPolicy(pred, "A")
    pc = pol.pair_costs(queue, workers, now)
    cost, _ = pol._restrict(pol._terms(queue, workers, now))
    with without_highspy():
        got = match_classes(pc)
    assert got is not None
    opt = _dense_optimum(cost)
    assert abs(float(cost[got].sum()) - opt) <= 1e-9 * max(1.0, abs(opt))
