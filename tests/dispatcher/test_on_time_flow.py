"""``kairos-strict``'s large rounds as a min-cost flow (dispatcher/policies/on_time_flow.py) against
the dense ``linear_sum_assignment`` it replaces: the same optimum on random rounds, and a round
computed by hand."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from scipy.optimize import linear_sum_assignment

from dispatcher.policies import KairosStrictPolicy, kairos_strict as strict_mod
from dispatcher.policies.on_time_flow import match_on_time
from dispatcher.policies.pair_costs import PairCosts
from dispatcher.policy import QueryView, WorkerView
from tests.match_helpers import GridPredictor, assert_dispatchable, large_rounds, without_highspy

TYPES = ("A", "B", "D")
NOW = 100.0


@st.composite
def strict_rounds(draw: st.DrawFn) -> tuple[GridPredictor, list[QueryView], list[WorkerView]]:
    """Fewer, as many or more queries than workers; few service and busy values (ties within a
    type, equal rows), waits from none to past the SLO (hopeless queries)."""
    ntypes = draw(st.integers(1, 3))
    ms = st.sampled_from([1.0, 2.0, 3.0, 5.0, 7.5, 12.0])
    table = {t: draw(st.lists(ms, min_size=3, max_size=3)) for t in TYPES[:ntypes]}
    n = draw(st.integers(1, 12))
    shape = draw(st.sampled_from(["fewer", "equal", "more"]))
    m = {"fewer": draw(st.integers(1, n)), "equal": n, "more": draw(st.integers(n, 2 * n + 2))}[shape]
    waits = st.sampled_from([0.0, 0.002, 0.005, 0.0071, 0.01, 0.013, 0.03])
    queue = [QueryView(f"q{i}", "m", draw(st.integers(1, 3)), NOW - draw(waits), draw(st.sampled_from([10.0, 15.0, 25.0])))
             for i in range(m)]
    busy = st.one_of(st.just(0.0), st.sampled_from([0.5, 2.0, 4.0, 6.0]), st.floats(0.01, 20.0))
    workers = []
    for j in range(n):
        b = draw(busy)
        workers.append(WorkerView(f"w{j}", TYPES[draw(st.integers(0, ntypes - 1))],
                                  NOW + b / 1000.0 if b > 0 else NOW - 1.0, b == 0.0))
    return GridPredictor(table), queue, workers


def _restricted(case: tuple) -> tuple[KairosStrictPolicy, list[QueryView], list[WorkerView], PairCosts, bool]:
    """The round's policy, queue and workers, its restricted per-type costs and whether only
    on-time pairs are dispatched (False: every query hopeless, the best-effort round)."""
    pred, queue, workers = case
    pol = KairosStrictPolicy(pred, "A")
    pc, on_time_only = pol._restrict_pairs(pol.pair_costs(queue, workers, NOW))
    return pol, queue, workers, pc, on_time_only


def _dense(pol: KairosStrictPolicy, queue: list[QueryView], workers: list[WorkerView]
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The dense round: (masked cost matrix, on-time mask, its optimal pairs' costs)."""
    cost, allowed = pol._restrict(pol._terms(queue, workers, NOW))
    assert allowed is not None
    r, c = linear_sum_assignment(cost)
    return cost, allowed, np.stack([cost[r, c], allowed[r, c]])


@settings(max_examples=400, deadline=None)
@given(case=strict_rounds())
def test_the_flow_reaches_the_dense_optimum(case: tuple) -> None:
    pol, queue, workers, pc, on_time_only = _restricted(case)
    if not on_time_only:                  # every query hopeless: the class matching's case
        return
    cost, allowed, (opt_cost, opt_on) = _dense(pol, queue, workers)
    np.testing.assert_allclose(pc.dense(), cost, rtol=1e-12, atol=0)
    got = match_on_time(pc)
    assert got is not None
    rows, cols = got
    assert len(set(rows.tolist())) == len(rows) and len(set(cols.tolist())) == len(cols)
    assert allowed[rows, cols].all()                                   # only on-time pairs
    m, n = cost.shape
    big = float(pc.late.flat[0])
    total = float(cost[rows, cols].sum()) + big * (min(m, n) - len(rows))
    opt = float(opt_cost.sum())
    assert abs(total - opt) <= 1e-9 * max(1.0, abs(opt))
    # and the on-time part alone, where M does not hide a difference
    assert len(rows) == int(opt_on.sum())
    on = float(opt_cost[opt_on.astype(bool)].sum())
    assert abs(float(cost[rows, cols].sum()) - on) <= 1e-9 * max(1.0, on)


@settings(max_examples=150, deadline=None)
@given(case=strict_rounds())
def test_match_through_the_flow_dispatches_on_time_pairs_on_idle_workers(case: tuple) -> None:
    pred, queue, workers = case
    pol = KairosStrictPolicy(pred, "A")
    with large_rounds():
        got = pol.match(queue, workers, NOW)
    assert_dispatchable(pol, queue, workers, NOW, got)


@settings(max_examples=60, deadline=None)
@given(case=strict_rounds())
def test_the_best_effort_round_keeps_the_papers_cost(case: tuple) -> None:
    # every query hopeless: kairos-strict matches on the paper's penalised cost, every pair
    pol, queue, workers, pc, on_time_only = _restricted(case)
    if on_time_only:
        return
    cost, allowed = pol._restrict(pol._terms(queue, workers, NOW))
    assert allowed is None
    got = pol._large_round(pc, on_time_only)
    assert got is not None
    r, c = linear_sum_assignment(cost)
    opt = float(cost[r, c].sum())
    assert len(got[0]) == min(cost.shape)
    assert abs(float(cost[got].sum()) - opt) <= 1e-9 * max(1.0, opt)


def _hand_round() -> tuple[KairosStrictPolicy, list[QueryView], list[WorkerView]]:
    # batch 1 everywhere: S_A = 2, S_B = 3 ms, base A, so C_A = 1 and C_B = 2/3 (Definition 1);
    # SLO 10 ms, ξ = 0.98: slack = 9.8 − waited.
    pred = GridPredictor({"A": [2.0, 3.0, 4.0], "B": [3.0, 7.5, 12.0]})
    waited_ms = {"q0": 5.0, "q1": 0.0, "q2": 2.0, "q3": 7.0}       # slack 4.8, 9.8, 7.8, 2.8
    queue = [QueryView(q, "m", 1, NOW - w / 1000.0, 10.0) for q, w in waited_ms.items()]
    workers = [WorkerView("a0", "A", NOW - 1.0, True),              # idle A
               WorkerView("a1", "A", NOW + 0.006, False),           # A busy for 6 ms more
               WorkerView("b0", "B", NOW - 1.0, True)]              # idle B
    return KairosStrictPolicy(pred, "A"), queue, workers


def test_a_hand_computed_round() -> None:
    # On time: a0 (2 ms) for all four; a1 (6 + 2 = 8 ms) for q1 only; b0 (3 ms) for q0, q1, q2.
    # Laxity = slack − 2: q0 2.8, q1 7.8, q2 5.8, q3 0.8. On-time costs C·L + laxity: a0: 2 + lax,
    # a1: 8 + lax, b0: 2 + lax. Three pairs on time only with q1 → a1 (15.8); then q3, on time on
    # a0 alone, takes it (2.8), and b0 goes to the less lax of q0 and q2: q0 (4.8). Total 23.4,
    # every other choice leaves a pair late (M).
    pol, queue, workers = _hand_round()
    pc, on_time_only = pol._restrict_pairs(pol.pair_costs(queue, workers, NOW))
    assert on_time_only
    rows, cols = match_on_time(pc)
    assert {(queue[i].query_id, workers[j].worker_id) for i, j in zip(rows.tolist(), cols.tolist())} == {
        ("q1", "a1"), ("q3", "a0"), ("q0", "b0")}
    cost, _ = pol._restrict(pol._terms(queue, workers, NOW))
    assert float(cost[rows, cols].sum()) == pytest.approx(23.4, rel=1e-12)


def test_the_hand_round_through_match_sends_only_the_idle_pairs(monkeypatch: pytest.MonkeyPatch) -> None:
    # q1's worker a1 is busy: it waits for it; q2 waits for the next round. The dense solve agrees.
    pol, queue, workers = _hand_round()
    monkeypatch.setattr(strict_mod, "STRICT_DENSE_MAX_PAIRS_SATURATED", 0)
    monkeypatch.setattr(strict_mod, "STRICT_DENSE_MAX_PAIRS_WIDE", 0)

    def no_dense(*_: object) -> list:
        raise AssertionError("a round above the thresholds went to the dense solve")

    want = {("q3", "a0"), ("q0", "b0")}
    assert {(a.query_id, a.worker_id) for a in pol.match_dense(queue, workers, NOW)} == want
    monkeypatch.setattr(pol, "match_dense", no_dense)
    assert {(a.query_id, a.worker_id) for a in pol.match(queue, workers, NOW)} == want


@settings(max_examples=40, deadline=None)
@given(case=strict_rounds())
def test_scipy_highs_gives_the_same_flow_optimum_where_highspy_is_missing(case: tuple) -> None:
    pol, queue, workers, pc, on_time_only = _restricted(case)
    if not on_time_only:
        return
    with without_highspy():
        got = match_on_time(pc)
    assert got is not None
    cost, _, (opt_cost, opt_on) = _dense(pol, queue, workers)
    assert len(got[0]) == int(opt_on.sum())
    on = float(opt_cost[opt_on.astype(bool)].sum())
    assert abs(float(cost[got].sum()) - on) <= 1e-9 * max(1.0, on)
