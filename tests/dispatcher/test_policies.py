"""Query-distribution policies: Kairos matching (Kairos §5.1) and the §7 baselines."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from dispatcher.latency_model import LatencyModel
from dispatcher.policies import (POLICY_NAMES, ClockworkPolicy, DrsPolicy, FcfsPolicy, KairosPolicy, infeasible,
                                 make_policy, sweep_drs_threshold)
from dispatcher.policy import Assignment, Policy, QueryView, WorkerView

# Service times (ms) by instance type and batch size. "A" is the base type (fastest for big batches).
TABLE = {
    "A": {1: 2.0, 2: 3.0, 3: 4.0},
    "B": {1: 3.0, 2: 7.5, 3: 12.0},
    "D": {1: 5.0, 2: 7.0, 3: 10.0},
}


class TablePredictor:
    def predict_ms(self, model: str, instance_type: str, batch_size: float) -> float:
        return TABLE[instance_type][int(batch_size)]

    def predict_many(self, model: str, instance_type: str, batch_sizes: np.ndarray) -> np.ndarray:
        return np.array([TABLE[instance_type][int(b)] for b in batch_sizes], dtype=float)


P = TablePredictor()


def q(qid: str, batch: int, arrival: float = 0.0, qos: float = 1000.0) -> QueryView:
    return QueryView(qid, "m", batch, arrival, qos)


def w(wid: str, t: str, busy_until: float = 0.0) -> WorkerView:
    return WorkerView(wid, t, busy_until, busy_until <= 0.0)


def pairs(a: list[Assignment]) -> set[tuple[str, str]]:
    return {(x.query_id, x.worker_id) for x in a}


def test_kairos_3x2_exact_optimum() -> None:
    # C_B = 4/12 = 1/3. Costs C·L: A: q1 2, q2 3, q3 4; B: q1 1, q2 2.5, q3 4.
    # Best pair of distinct queries: q2→A + q1→B = 4 (q1→A + q2→B = 4.5, every other pair ≥ 5).
    pol = KairosPolicy(P, "A")
    cost, L, C = pol.cost_matrix([q("q1", 1), q("q2", 2), q("q3", 3)], [w("a", "A"), w("b", "B")], 0.0)
    np.testing.assert_allclose(C, [1.0, 1 / 3])
    np.testing.assert_allclose(cost, [[2, 1], [3, 2.5], [4, 4]])
    got = pol.match([q("q1", 1), q("q2", 2), q("q3", 3)], [w("a", "A"), w("b", "B")], 0.0)
    assert pairs(got) == {("q2", "a"), ("q1", "b")}


def test_kairos_2x3_with_a_busy_worker() -> None:
    # A busy for 1 ms more: A column +1. C_B = 1/3, C_D = 4/10. Costs: q1: A 3, B 1, D 2; q3: A 5, B 4, D 4.
    # Optimum q1→B + q3→D = 5 (unique); the busy A gets nothing.
    pol = KairosPolicy(P, "A")
    now = 10.0
    queue = [q("q1", 1, now), q("q3", 3, now)]
    workers = [w("a", "A", busy_until=now + 0.001), w("b", "B"), w("d", "D")]
    assert pairs(pol.match(queue, workers, now)) == {("q1", "b"), ("q3", "d")}


def test_kairos_query_matched_to_busy_worker_waits() -> None:
    # A busy 0.5 ms: q1: A 2.5, B 1; q3: A 4.5, B 4 → q1→B + q3→A = 5.5 beats 6.5. q3 waits for A.
    pol = KairosPolicy(P, "A")
    got = pol.match([q("q1", 1, 5.0), q("q3", 3, 5.0)], [w("a", "A", busy_until=5.0005), w("b", "B")], 5.0)
    assert pairs(got) == {("q1", "b")}


@pytest.mark.parametrize("queue", [[q("q1", 1, 5.0)], [q("q1", 1, 5.0), q("q2", 1, 5.0)]])
def test_a_worker_past_its_predicted_finish_never_ties_with_an_idle_one(queue: list[QueryView]) -> None:
    # "a" is still busy but its predicted finish (4.0) has passed, so its remaining time was 0 and
    # its cost tied with the idle "b" of the same type; the tie went to the first column, "a", and
    # the query waited for the busy worker while "b" stood idle (seen on a loaded machine).
    busy = WorkerView("a", "A", 4.0, False)
    for pol in (KairosPolicy(P, "A"), ClockworkPolicy(P, "A")):
        got = pol.match(queue, [busy, w("b", "A")], 5.0)
        assert [x.worker_id for x in got] == ["b"], pol.name     # one of the (equal) queries goes to b


def test_kairos_qos_penalty_steers_away_from_violations() -> None:
    queue_loose = [q("small", 1), q("big", 3)]
    workers = [w("a", "A"), w("b", "B")]
    pol = KairosPolicy(P, "A")
    # without a binding SLO: small→B (1) + big→A (4) = 5 beats small→A + big→B = 6
    assert pairs(pol.match(queue_loose, workers, 0.0)) == {("small", "b"), ("big", "a")}
    # small's SLO 2.5 ms: 3 ms on B exceeds ξ·2.5 = 2.45 → L := 10·2.5 = 25 (cost 25/3): small goes to A
    tight = [q("small", 1, qos=2.5), q("big", 3)]
    cost, L, C = pol.cost_matrix(tight, workers, 0.0)
    assert cost[0, 1] == pytest.approx(25 / 3) and L[0, 1] == pytest.approx(3.0)
    assert pairs(pol.match(tight, workers, 0.0)) == {("small", "a"), ("big", "b")}
    # the wait W counts: small waited 1 ms → even A (2 ms) violates ξ·2.5; both columns penalized
    cost, _, _ = pol.cost_matrix([q("small", 1, arrival=-0.001, qos=2.5), q("big", 3)], workers, 0.0)
    np.testing.assert_allclose(cost[0], [25.0, 25 / 3])


def _simulate(policy: Policy, arrivals: list[tuple[float, str, int]], workers: list[tuple[str, str]], qos: float) -> int:
    """Tiny discrete-event run on virtual time (ms): returns queries finished within ``qos``."""
    pending = sorted(arrivals)
    queue: list[QueryView] = []
    busy: dict[str, float] = {wid: 0.0 for wid, _ in workers}
    types = dict(workers)
    ontime, now = 0, 0.0
    while pending or queue:
        while pending and pending[0][0] <= now:
            t, qid, b = pending.pop(0)
            queue.append(QueryView(qid, "m", b, t / 1000, qos))
        views = [WorkerView(wid, types[wid], busy[wid] / 1000, busy[wid] <= now) for wid, _ in workers]
        for a in policy.match(queue, views, now / 1000):
            qq = next(x for x in queue if x.query_id == a.query_id)
            queue.remove(qq)
            busy[a.worker_id] = now + TABLE[types[a.worker_id]][qq.batch_size]
            ontime += busy[a.worker_id] - qq.arrival * 1000 <= qos + 1e-9
        future = [t for t in busy.values() if t > now] + ([pending[0][0]] if pending else [])
        now = min(future) if future else now
    return ontime


def test_fig5_matching_serves_four_where_fcfs_serves_three() -> None:
    """Kairos §5.1, Fig. 5: one GPU (base "A") and one CPU ("B"), QoS 10 ms; a small and a large
    query at t=0, a large and a small one at t=4 ms. FCFS puts the first small query on the GPU and
    the large one on the CPU (12 ms: late); matching sends the high-speedup large query to the GPU."""
    arrivals = [(0.0, "q1", 1), (0.0, "q2", 3), (4.0, "q3", 3), (4.0, "q4", 1)]
    workers = [("gpu", "A"), ("cpu", "B")]
    assert _simulate(FcfsPolicy(P, "A"), arrivals, workers, 10.0) == 3
    assert _simulate(KairosPolicy(P, "A"), arrivals, workers, 10.0) == 4


def test_kairos_bounds_the_queue_to_2n_earliest() -> None:
    pol = KairosPolicy(P, "A", max_queue_factor=2)
    queue = [q(f"late{i}", 1, arrival=1.0 + i) for i in range(5)] + [q("early", 3, arrival=0.0)]
    got = pol.match(queue, [w("a", "A")], 10.0)
    assert len(got) == 1 and got[0].query_id in {"early", "late0"}


def test_fcfs_prefers_base_then_fastest() -> None:
    pol = FcfsPolicy(P, "A")
    queue = [q("second", 3, arrival=2.0), q("first", 3, arrival=1.0), q("third", 3, arrival=3.0)]
    got = pol.match(queue, [w("b", "B"), w("d", "D"), w("a", "A")], 5.0)
    # oldest → base A; next → D (10 ms) over B (12 ms); third → what is left
    assert [(x.query_id, x.worker_id) for x in got] == [("first", "a"), ("second", "d"), ("third", "b")]
    # base busy: the oldest takes the fastest idle auxiliary
    got = pol.match(queue, [w("b", "B"), w("d", "D"), w("a", "A", busy_until=9.0)], 5.0)
    assert [(x.query_id, x.worker_id) for x in got] == [("first", "d"), ("second", "b")]


def test_drs_threshold_splits_by_batch_size() -> None:
    pol = DrsPolicy(P, "A", threshold=2)
    queue = [q("big", 3, 0.0), q("small", 1, 1.0), q("mid", 2, 2.0)]
    assert pairs(pol.match(queue, [w("a", "A"), w("b", "B")], 5.0)) == {("big", "a"), ("small", "b")}
    # auxiliary busy: a small query waits even though the base is idle
    assert pol.match([q("small", 1)], [w("a", "A"), w("b", "B", busy_until=9.0)], 5.0) == []
    # no auxiliary in the pool at all: small queries use the base
    assert pairs(pol.match([q("small", 1)], [w("a", "A")], 5.0)) == {("small", "a")}


def test_drs_default_threshold_is_what_the_fastest_auxiliary_serves_in_qos() -> None:
    lm = LatencyModel.from_profiles(__import__("config.profiles", fromlist=["x"]).load_profiles_csv())
    pol = DrsPolicy(lm, "g4dn.xlarge")
    t = pol.threshold_for("ncf", 5.0, ["c5n.2xlarge"])
    # c5n ncf: the largest profiled batch within 0.98·5 = 4.9 ms, rounded to the grid
    prof = lm.profiles.get("ncf", "c5n.2xlarge")
    assert t == prof.largest_batch_within(4.9)


def test_sweep_drs_threshold_picks_the_best() -> None:
    assert sweep_drs_threshold(lambda t: -(t - 300) ** 2, range(0, 1001, 50)) == 300
    assert sweep_drs_threshold(lambda t: 1.0, [30, 10, 20]) == 10
    with pytest.raises(ValueError):
        sweep_drs_threshold(lambda t: 1.0, [])


def test_clockwork_per_worker_queues_no_stealing() -> None:
    pol = ClockworkPolicy(P, "A")
    q1, q2 = q("q1", 3, 0.0, qos=100), q("q2", 3, 0.0, qos=100)
    # q1: finish A 4 < B 12 → A; q2: A ready at 4 → 8 < B 12 → queued behind q1 on A
    assert pairs(pol.match([q1, q2], [w("a", "A"), w("b", "B")], 0.0)) == {("q1", "a")}
    assert list(pol.queues["a"]) == ["q2"]
    # B is idle but does not steal q2
    assert pol.match([q2], [w("a", "A", busy_until=0.004), w("b", "B")], 0.001) == []
    assert pairs(pol.match([q2], [w("a", "A"), w("b", "B")], 0.004)) == {("q2", "a")}


def test_clockwork_places_within_qos_or_earliest() -> None:
    pol = ClockworkPolicy(P, "A")
    # A busy until 7 ms: q on A finishes at 11; B at 12 and D at 10 → D is earliest and within 11·0.98
    got = pol.match([q("q", 3, 0.0, qos=11)], [w("a", "A", busy_until=0.007), w("b", "B"), w("d", "D")], 0.0)
    assert pairs(got) == {("q", "d")}
    # a worker that disappears gives its queued queries back for placement
    pol2 = ClockworkPolicy(P, "A")
    pol2.match([q("x", 3, 0.0)], [w("a", "A", busy_until=1.0)], 0.0)
    assert list(pol2.queues["a"]) == ["x"]
    assert pairs(pol2.match([q("x", 3, 0.0)], [w("b", "B")], 0.0)) == {("x", "b")}


def test_infeasible_and_factory() -> None:
    queue = [q("ok", 3, 0.0, qos=10), q("late", 1, -0.009, qos=10), q("never", 3, 0.0, qos=3)]
    assert infeasible(queue, [w("a", "A"), w("b", "B", busy_until=5.0)], P, 0.0, 0.98) == ["late", "never"]
    assert infeasible(queue, [], P, 0.0) == []
    for name in POLICY_NAMES:
        assert make_policy(name, P, "A").name == name
    with pytest.raises(ValueError, match="unknown policy"):
        make_policy("random", P, "A")


@settings(max_examples=150, deadline=None)
@given(
    batches=st.lists(st.integers(1, 3), min_size=0, max_size=12),
    waits=st.lists(st.floats(0, 0.02), min_size=12, max_size=12),
    qos=st.lists(st.sampled_from([3.0, 10.0, 1000.0]), min_size=12, max_size=12),
    wtypes=st.lists(st.tuples(st.sampled_from("ABD"), st.sampled_from([0.0, 0.0, 0.003, 1.0])), min_size=0, max_size=8),
    name=st.sampled_from(POLICY_NAMES),
)
def test_any_policy_assigns_only_idle_workers_each_at_most_once(batches: list[int], waits: list[float], qos: list[float],
                                                               wtypes: list[tuple[str, float]], name: str) -> None:
    now = 1.0
    queue = [q(f"q{i}", b, now - waits[i], qos[i]) for i, b in enumerate(batches)]
    workers: Sequence[WorkerView] = [w(f"w{j}", t, (now + busy) if busy else 0.0) for j, (t, busy) in enumerate(wtypes)]
    pol = make_policy(name, P, "A", drs_threshold=2 if name == "drs" else None)
    got = pol.match(queue, workers, now)
    idle = {x.worker_id for x in workers if x.idle}
    qids = [a.query_id for a in got]
    wids = [a.worker_id for a in got]
    assert set(wids) <= idle
    assert len(set(wids)) == len(wids) and len(set(qids)) == len(qids)
    assert set(qids) <= {x.query_id for x in queue}
    if name in ("kairos", "fcfs"):
        assert len(got) <= min(len(queue), len(idle))
        if name == "fcfs":       # work-conserving
            assert len(got) == min(len(queue), len(idle))


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 1000), st.floats(0, 0.5), st.sampled_from([50.0, 350.0, 2000.0]),
       st.lists(st.tuples(st.sampled_from(["g4dn.xlarge", "c5n.2xlarge", "r5n.large", "t3.xlarge"]),
                          st.floats(-0.1, 0.3)), min_size=1, max_size=12))
def test_kairos_single_query_fast_path_equals_the_matrix_path(batch: int, waited: float, qos: float,
                                                              ws: list[tuple[str, float]]) -> None:
    """A round with one waiting query skips the matrix (argmin of its cost row): same assignment
    as linear_sum_assignment over cost_matrix, on the real profiles (ties: first minimum)."""
    from scipy.optimize import linear_sum_assignment

    from config.profiles import load_profiles_csv

    lm = LatencyModel.from_profiles(load_profiles_csv())
    pol = KairosPolicy(lm, "g4dn.xlarge")
    now = 10.0
    query = QueryView("q", "rm2", batch, now - waited, qos)
    workers = [WorkerView(f"w{j}", t, now + rem, rem <= 0) for j, (t, rem) in enumerate(ws)]
    got = pol.match([query], workers, now)
    cost, _, _ = pol.cost_matrix([query], workers, now)
    _, cols = linear_sum_assignment(cost)
    j = int(cols[0])
    assert got == ([Assignment("q", f"w{j}")] if workers[j].idle else [])


# ---------------------------------------------------------------- kairos-strict (ours, issue 16)

from dispatcher.policies import KairosStrictPolicy  # noqa: E402


def test_kairos_strict_holds_a_pair_that_misses_eq5_where_kairos_dispatches_it() -> None:
    # QoS 10 ms, ξ = 0.98: slack 9.8 ms. Two queries, one idle B: q3 on B takes 12 ms (misses),
    # q2 on B 7.5 ms (meets). A busy for 5 ms more: q3 on A = 5 + 4 = 9 ms (meets), q2 on A 8 ms.
    # C_B = 4/12. Costs C·L: A: q2 8, q3 9; B: q2 2.5, q3 10 (penalty 100 × 1/3 = 33.3).
    # Matching: q2→B + q3→A = 11.5 (q2→A + q3→B = 41.3): both policies dispatch q2 to B.
    queue = [q("q2", 2, 0.0, qos=10), q("q3", 3, 0.0, qos=10)]
    workers = [w("a", "A", busy_until=0.005), w("b", "B")]
    assert pairs(KairosPolicy(P, "A").match(queue, workers, 0.0)) == {("q2", "b")}
    assert pairs(KairosStrictPolicy(P, "A").match(queue, workers, 0.0)) == {("q2", "b")}
    # Three queries of batch 3 and one idle B: every pair with B misses (12 ms); Eq. 7 makes Kairos
    # dispatch one of them to B anyway, late; kairos-strict keeps them queued for A (9 ms, in time)
    queue3 = [q("x", 3, 0.0, qos=10), q("y", 3, 0.0, qos=10), q("z", 3, 0.0, qos=10)]
    assert len(KairosPolicy(P, "A").match(queue3, workers, 0.0)) == 1
    assert KairosStrictPolicy(P, "A").match(queue3, workers, 0.0) == []
    # one query alone (the scalar path) behaves the same
    assert KairosStrictPolicy(P, "A").match(queue3[:1], workers, 0.0) == []
    assert pairs(KairosPolicy(P, "A").match(queue3[:1], workers, 0.0)) == set()   # argmin is A (busy)


def test_kairos_strict_serves_queries_late_everywhere_as_kairos_does() -> None:
    # QoS 3 ms: batch 3 takes >= 4 ms on every type, hopeless: best effort, dispatched as by Kairos
    queue = [q("x", 3, 0.0, qos=3), q("y", 3, 0.0, qos=3)]
    workers = [w("a", "A"), w("b", "B")]
    assert pairs(KairosStrictPolicy(P, "A").match(queue, workers, 0.0)) == pairs(KairosPolicy(P, "A").match(queue, workers, 0.0))
    assert len(KairosStrictPolicy(P, "A").match(queue[:1], [w("b", "B")], 0.0)) == 1


class _SlowAux:
    """Base "A" and a slow auxiliary "B" (C_B = 9 / 150 = 0.06): the Eq. 8 penalty on B is cheap."""
    TABLE = {"A": {1: 1.0, 3: 9.0}, "B": {1: 9.0, 3: 150.0}}

    def predict_ms(self, model: str, instance_type: str, batch_size: float) -> float:
        return self.TABLE[instance_type][int(batch_size)]

    def predict_many(self, model: str, instance_type: str, batch_sizes: np.ndarray) -> np.ndarray:
        return np.array([self.TABLE[instance_type][int(b)] for b in batch_sizes], dtype=float)


def test_kairos_strict_masks_late_pairs_before_matching_so_the_late_query_is_served_in_time() -> None:
    # QoS 10 ms (slack 9.8, penalty 100). x (batch 3): A 9 (on time), B 150 (late: 100 × 0.06 = 6);
    # y (batch 1): A 1, B 9 × 0.06 = 0.54 (both on time). Paper's costs: x→B + y→A = 6 + 1 = 7 beats
    # x→A + y→B = 9.54, so Kairos dispatches x late to B; filtering that pair after the matching
    # (kairos-strict before the mask) leaves x waiting while A takes y. Masked: each row also gets
    # its laxity (x: 9.8 - 9 = 0.8, y: 9.8 - 1 = 8.8), x→B costs M = 1 + 2 × 9.8 = 20.6 > any
    # on-time pair: x→A + y→B = 9.8 + 9.34 = 19.14 < 20.6 + 9.8, both on time, both served.
    pred = _SlowAux()
    queue = [q("x", 3, qos=10), q("y", 1, qos=10)]
    workers = [w("a", "A"), w("b", "B")]
    pol = KairosStrictPolicy(pred, "A")
    cost, L, C = pol.cost_matrix(queue, workers, 0.0)
    np.testing.assert_allclose(C, [1.0, 0.06])
    np.testing.assert_allclose(cost, [[9.0, 6.0], [1.0, 0.54]])
    assert pairs(KairosPolicy(pred, "A").match(queue, workers, 0.0)) == {("x", "b"), ("y", "a")}
    masked, allowed = pol._restrict(pol._terms(queue, workers, 0.0))
    np.testing.assert_allclose(masked, [[9.8, 20.6], [9.8, 9.34]])
    assert allowed is not None and allowed.tolist() == [[True, False], [True, True]]
    assert pairs(pol.match(queue, workers, 0.0)) == {("x", "a"), ("y", "b")}
    # one query alone: the paper's argmin is B (6 < 9, late); ours is A, the on-time worker
    assert pairs(KairosPolicy(pred, "A").match(queue[:1], workers, 0.0)) == {("x", "b")}
    assert pairs(pol.match(queue[:1], workers, 0.0)) == {("x", "a")}
    # hopeless (QoS 0.5 ms: late everywhere even idle): best effort, the paper's choice
    lost = [q("x", 3, qos=0.5), q("y", 1, qos=0.5)]
    assert pairs(pol.match(lost, workers, 0.0)) == pairs(KairosPolicy(pred, "A").match(lost, workers, 0.0))
    assert pairs(pol.match(lost[:1], workers, 0.0)) == {("x", "b")}


@settings(max_examples=200, deadline=None)
@given(batches=st.lists(st.integers(1, 3), min_size=1, max_size=8),
       waits=st.lists(st.floats(0, 0.012), min_size=8, max_size=8),
       wtypes=st.lists(st.tuples(st.sampled_from("ABD"), st.sampled_from([0.0, 0.0, 0.002, 0.008])),
                       min_size=1, max_size=6))
def test_kairos_strict_dispatches_no_late_pair_and_matches_the_most_on_time_pairs(
        batches: list[int], waits: list[float], wtypes: list[tuple[str, float]]) -> None:
    """Unless every query in the view is hopeless, no dispatched pair misses Eq. 5, and the masked
    matching holds at least as many on-time pairs as the paper's; with one query the scalar path
    equals the matrix path (the argmin over the on-time workers)."""
    from scipy.optimize import linear_sum_assignment

    from dispatcher.policies._matrix import earliest, remaining_ms

    now = 1.0
    queue = [q(f"q{i}", b, now - waits[i], 10.0) for i, b in enumerate(batches)]
    workers = [w(f"w{j}", t, (now + busy) if busy else 0.0) for j, (t, busy) in enumerate(wtypes)]
    pol = KairosStrictPolicy(P, "A")
    view = earliest(queue, 2 * len(workers))
    cost, L, _ = pol.cost_matrix(view, workers, now)
    slack = np.array([0.98 * 10.0 - 1000.0 * (now - x.arrival) for x in view])[:, None]
    on_time = L <= slack
    hopeless = bool((L - remaining_ms(workers, now)[None, :] > slack).all())
    masked, allowed = pol._restrict(pol._terms(view, workers, now))
    got = pol.match(queue, workers, now)
    index = {x.query_id: i for i, x in enumerate(view)}
    wix = {x.worker_id: j for j, x in enumerate(workers)}
    if not hopeless:
        assert all(on_time[index[a.query_id], wix[a.worker_id]] for a in got)
        ours, paper = linear_sum_assignment(masked), linear_sum_assignment(cost)
        assert on_time[ours].sum() >= on_time[paper].sum()
    if len(queue) == 1:
        j = int(linear_sum_assignment(masked)[1][0])
        expect = [Assignment("q0", f"w{j}")] if workers[j].idle and (on_time[0, j] or hopeless) else []
        assert got == expect


def test_kairos_strict_serves_the_query_with_the_least_laxity_first() -> None:
    """One base worker A (QoS 10 ms, slack 9.8). "first" (batch 3) takes A at t=0 for 4 ms; "x"
    (batch 3, 4 ms) arrived at 0 and "y" (batch 2, 3 ms) at 2 ms wait for it. At t=4: x has 5.8 ms
    left, laxity 1.8; y 7.8 left, laxity 4.8. The paper's cost serves the shorter y first (3 < 4):
    y ends at 7, x starts late (waited 7 + 4 > 9.8), 2 of 3 on time. With the laxity x (4 + 1.8 =
    5.8) goes before y (3 + 4.8 = 7.8): x ends at 8, y at 11 (9 ms after it arrived), 3 of 3."""
    now = 0.004
    queue = [q("x", 3, 0.0, qos=10), q("y", 2, 0.002, qos=10)]
    assert pairs(KairosPolicy(P, "A").match(queue, [w("a", "A")], now)) == {("y", "a")}
    assert pairs(KairosStrictPolicy(P, "A").match(queue, [w("a", "A")], now)) == {("x", "a")}
    arrivals = [(0.0, "first", 3), (0.0, "x", 3), (2.0, "y", 2)]
    assert _simulate(KairosPolicy(P, "A"), arrivals, [("a", "A")], 10.0) == 2
    assert _simulate(KairosStrictPolicy(P, "A"), arrivals, [("a", "A")], 10.0) == 3
