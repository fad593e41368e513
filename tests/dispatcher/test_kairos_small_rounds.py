"""Kairos's small rounds (issue #39, replay speed): a round of at most ``SMALL_PAIRS`` pairs builds
its cost matrix on Python floats (``KairosPolicy._small_cost``); it must be ``cost_matrix``'s cost
bit for bit, so every assignment stays the one the numpy path makes."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st
from scipy.optimize import linear_sum_assignment

from config.profiles import load_profiles_csv
from dispatcher.latency_model import LatencyModel
from dispatcher.policies import KairosPolicy, KairosStrictPolicy
from dispatcher.policies.kairos import SMALL_PAIRS
from dispatcher.policy import Assignment, QueryView, WorkerView

TYPES = ["g4dn.xlarge", "c5n.2xlarge", "r5n.large", "t3.xlarge"]
LM = LatencyModel.from_profiles(load_profiles_csv())


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(TYPES),
       st.lists(st.tuples(st.integers(0, 1300), st.floats(0, 0.5), st.sampled_from([35.0, 350.0, 2000.0])),
                min_size=1, max_size=12),
       st.lists(st.tuples(st.sampled_from(TYPES), st.floats(-0.1, 0.3)), min_size=1, max_size=16))
def test_small_round_cost_is_the_matrix_cost_bit_for_bit(base: str, qs: list[tuple[int, float, float]],
                                                         ws: list[tuple[str, float]]) -> None:
    pol = KairosPolicy(LM, base)
    now = 10.0
    queue = [QueryView(f"q{i}", "rm2", b, now - waited, qos) for i, (b, waited, qos) in enumerate(qs)]
    workers = [WorkerView(f"w{j}", t, now + rem, rem <= 0) for j, (t, rem) in enumerate(ws)]
    cost, _, _ = pol.cost_matrix(queue, workers, now)
    small = np.array(pol._small_cost(queue, workers, now), dtype=float)
    assert small.shape == cost.shape and np.array_equal(small, cost)
    if len(queue) * len(workers) <= SMALL_PAIRS:        # match_dense takes the small path: the same pairs
        rows, cols = linear_sum_assignment(cost)
        want = [Assignment(queue[i].query_id, workers[j].worker_id) for i, j in zip(rows, cols) if workers[j].idle]
        assert pol.match_dense(queue, workers, now) == want


def test_a_stricter_matching_keeps_its_own_restriction() -> None:
    """kairos-strict overrides the cost it minimises: its small rounds never take the plain path."""
    pol = KairosStrictPolicy(LM, "r5n.large")
    now = 10.0
    queue = [QueryView("late", "rm2", 1000, now - 0.3, 350.0), QueryView("ok", "rm2", 10, now, 350.0)]
    workers = [WorkerView("a", "t3.xlarge", now, True), WorkerView("b", "r5n.large", now, True)]
    cost, allowed = pol._restrict(pol._terms(queue, workers, now))
    rows, cols = linear_sum_assignment(cost)
    want = [Assignment(queue[i].query_id, workers[j].worker_id) for i, j in zip(rows, cols)
            if workers[j].idle and (allowed is None or allowed[i, j])]
    assert pol.match_dense(queue, workers, now) == want
