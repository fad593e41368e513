"""scaler.fleet.transitions: the money invariant (DESIGN 1) holds at every step of a pool change."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from scaler.cloud.provider import ManagedInstance
from scaler.fleet.transitions import Step, client_token, plan_transition, replay

from scaler.planner.pools import pool_cost, pool_digest

PRICES = {"g4dn.xlarge": 0.526, "c5n.2xlarge": 0.432, "r5n.large": 0.149, "t3.xlarge": 0.1664}


def _kinds(steps: list[Step]) -> list[tuple[str, str, int]]:
    return [(s.kind, s.instance_type, s.count) for s in steps]


def test_pure_launch_into_headroom() -> None:
    steps = plan_transition({}, {"g4dn.xlarge": 2, "r5n.large": 1}, PRICES, 2.0, cluster="c", plan_id="p")
    assert _kinds(steps) == [("launch", "g4dn.xlarge", 2), ("launch", "r5n.large", 1)]
    assert [s.seq for s in steps] == [0, 1]
    assert steps[0].client_token == client_token("c", "p", pool_digest({"g4dn.xlarge": 2, "r5n.large": 1}), "g4dn.xlarge", 0)


def test_retire_first_when_headroom_short() -> None:
    # 3 × g4dn (1.578) running, budget 1.6; target 3 × c5n (1.296). Only 0.022 headroom, so one
    # g4dn must go before any c5n launch, and so on.
    cur = {"g4dn.xlarge": [ManagedInstance(f"i-{k}", "g4dn.xlarge", "running", launch_time=k) for k in range(3)]}
    steps = plan_transition(cur, {"c5n.2xlarge": 3}, PRICES, 1.6, cluster="c", plan_id="p")
    assert _kinds(steps) == [
        ("drain", "g4dn.xlarge", 1), ("terminate", "g4dn.xlarge", 1), ("launch", "c5n.2xlarge", 1),
        ("drain", "g4dn.xlarge", 1), ("terminate", "g4dn.xlarge", 1), ("launch", "c5n.2xlarge", 1),
        ("drain", "g4dn.xlarge", 1), ("terminate", "g4dn.xlarge", 1), ("launch", "c5n.2xlarge", 1),
    ]
    # newest first; the drain and terminate name the same instance
    assert [s.instance_ids for s in steps if s.kind == "terminate"] == [("i-2",), ("i-1",), ("i-0",)]
    assert [s.instance_ids for s in steps if s.kind == "drain"] == [("i-2",), ("i-1",), ("i-0",)]
    r = replay({"g4dn.xlarge": 3}, steps, PRICES)
    assert r.pool == {"c5n.2xlarge": 3}
    assert r.peak_cost <= 1.6 + 1e-9


def test_swap_types_make_before_break_when_room() -> None:
    # Plenty of budget: launch the new type first, retire the old one last.
    steps = plan_transition({"r5n.large": 2}, {"t3.xlarge": 2}, PRICES, 10.0)
    assert _kinds(steps) == [("launch", "t3.xlarge", 2), ("drain", "r5n.large", 2), ("terminate", "r5n.large", 2)]


def test_partial_headroom_launch_then_retire_then_rest() -> None:
    # budget 1.2, running 2 × g4dn (1.052): 0.148 headroom fits nothing; retire one g4dn
    # (headroom 0.674) → launch 4 × r5n (0.596), then retire the other, then launch the remaining 2.
    steps = plan_transition({"g4dn.xlarge": 2}, {"r5n.large": 6}, PRICES, 1.2)
    assert _kinds(steps) == [
        ("drain", "g4dn.xlarge", 1), ("terminate", "g4dn.xlarge", 1), ("launch", "r5n.large", 4),
        ("drain", "g4dn.xlarge", 1), ("terminate", "g4dn.xlarge", 1), ("launch", "r5n.large", 2),
    ]


def test_pending_retired_before_running() -> None:
    cur = {"r5n.large": [ManagedInstance("i-run", "r5n.large", "running", 5.0),
                         ManagedInstance("i-pend", "r5n.large", "pending", 1.0),
                         ManagedInstance("i-dead", "r5n.large", "terminated", 9.0)]}
    steps = plan_transition(cur, {"r5n.large": 1}, PRICES, 1.0)
    assert [s.instance_ids for s in steps if s.kind == "terminate"] == [("i-pend",)]


def test_target_over_budget_rejected() -> None:
    import pytest

    with pytest.raises(ValueError, match="over the budget"):
        plan_transition({}, {"g4dn.xlarge": 4}, PRICES, 2.0)


def test_client_token_bounded_and_distinct() -> None:
    long = "x" * 63
    a = client_token(long, "p" * 200, "d", "g4dn.xlarge", 123456)
    b = client_token(long, "p" * 200, "d", "g4dn.xlarge", 123457)
    assert len(a) <= 64 and len(b) <= 64 and a != b
    assert a == client_token(long, "p" * 200, "d", "g4dn.xlarge", 123456)
    assert client_token("c", "p", "d", "t", 0) != client_token("c", "p", "d", "t", 0, "terminate")


def test_seq_start_gives_fresh_tokens() -> None:
    a = plan_transition({}, {"r5n.large": 1}, PRICES, 1.0, cluster="c", plan_id="p")
    b = plan_transition({}, {"r5n.large": 1}, PRICES, 1.0, cluster="c", plan_id="p", seq_start=1)
    assert a[0].client_token != b[0].client_token and b[0].seq == 1


TYPES = sorted(PRICES)
pools = st.dictionaries(st.sampled_from(TYPES), st.integers(0, 6), max_size=4)


@settings(max_examples=300, deadline=None)
@given(current=pools, target=pools, slack=st.floats(0, 3), over=st.booleans())
def test_replay_never_exceeds_budget_and_reaches_target(current: dict[str, int], target: dict[str, int], slack: float, over: bool) -> None:
    budget = pool_cost(target, PRICES) + slack
    if budget <= 0:
        budget = 0.01
    # ``over``: sometimes current is given as instance lists instead of counts
    cur_arg: dict = current
    if over:
        cur_arg = {t: [ManagedInstance(f"{t}-{k}", t, "running", float(k)) for k in range(n)] for t, n in current.items()}
    steps = plan_transition(cur_arg, target, PRICES, budget, cluster="c", plan_id="p")
    r = replay(current, steps, PRICES)
    assert r.pool == {t: n for t, n in target.items() if n > 0}
    start = pool_cost(current, PRICES)
    # never above the budget, except that a pool already over the budget only goes down first
    for before, after in zip(r.costs, r.costs[1:]):
        assert after <= budget + 1e-9 or after <= before + 1e-9
    if start <= budget + 1e-9:
        assert r.peak_cost <= budget + 1e-9
    # every drain precedes its terminate and names the same ids
    for i, s in enumerate(steps):
        if s.kind == "terminate":
            assert any(d.kind == "drain" and d.instance_type == s.instance_type and d.instance_ids == s.instance_ids
                       for d in steps[:i])
    tokens = [s.client_token for s in steps if s.kind in ("launch", "terminate")]
    assert len(tokens) == len(set(tokens)) and all(len(t) <= 64 for t in tokens)
    if over:
        ids = [i for s in steps if s.kind == "terminate" for i in s.instance_ids]
        assert len(ids) == len(set(ids))
