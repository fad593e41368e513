"""Scale-in parking (scaler.fleet.parking): hand-computed rounds and invariants over random pools."""
from __future__ import annotations

import math

from hypothesis import given, settings, strategies as st

from scaler.cloud.provider import ManagedInstance
from scaler.fleet.parking import ParkState, decide_parking
from scaler.fleet.transitions import plan_transition, replay

PRICES = {"g4dn.xlarge": 0.526, "r5n.large": 0.149, "c5n.2xlarge": 0.432}


def inst(iid: str, t: str, launched: float = 0.0, state: str = "running") -> ManagedInstance:
    return ManagedInstance(iid, t, state, launched)


POOL = [inst("i-g", "g4dn.xlarge", 1), inst("i-r1", "r5n.large", 2), inst("i-r2", "r5n.large", 3)]
ALL = frozenset({"i-g", "i-r1", "i-r2"})


def test_surplus_is_parked_then_retired_after_the_hold() -> None:
    target = {"g4dn.xlarge": 1}
    d, s = decide_parking(POOL, target, ALL, PRICES, 2.5, now=100.0, hold_s=10.0)
    assert d.park == ("i-r2", "i-r1")          # newest first
    assert d.target == {"g4dn.xlarge": 1, "r5n.large": 2} and d.retire == ()
    assert d.held == {"r5n.large": 2} and s.parked == {"i-r2": 100.0, "i-r1": 100.0}
    d, s = decide_parking(POOL, target, ALL, PRICES, 2.5, now=109.0, state=s, hold_s=10.0)
    assert d.park == () and d.retire == () and d.target == {"g4dn.xlarge": 1, "r5n.large": 2}
    d, s = decide_parking(POOL, target, ALL, PRICES, 2.5, now=110.0, state=s, hold_s=10.0)
    assert d.retire == ("i-r1", "i-r2") and d.target == {"g4dn.xlarge": 1}
    # retired ids stay in the state until they are gone: a failed termination is retried
    d, s = decide_parking(POOL, target, ALL, PRICES, 2.5, now=112.0, state=s, hold_s=10.0)
    assert d.retire == ("i-r1", "i-r2") and d.target == {"g4dn.xlarge": 1}
    d, s = decide_parking(POOL[:1], target, ALL, PRICES, 2.5, now=114.0, state=s, hold_s=10.0)
    assert d.retire == () and s.parked == {}


def test_a_retired_instance_whose_termination_failed_comes_back_when_needed() -> None:
    s = ParkState({"i-r1": 0.0}, ((0.0, 0.824),))
    d, s = decide_parking(POOL, {"g4dn.xlarge": 1, "r5n.large": 1}, ALL, PRICES, 2.5, now=61.0, state=s, hold_s=60.0)
    assert d.retire == ("i-r1",)
    # the terminate did not happen; load is back and the target wants both r5n
    d, s = decide_parking(POOL, {"g4dn.xlarge": 1, "r5n.large": 2}, ALL, PRICES, 2.5, now=62.0, state=s, hold_s=60.0)
    assert d.unpark == ("i-r1",) and d.retire == () and s.parked == {}


def test_registered_parked_instances_come_back_before_booting_ones() -> None:
    pool = POOL + [inst("i-r3", "r5n.large", 9, "pending")]
    s = ParkState({"i-r1": 0.0, "i-r3": 5.0}, ((0.0, 1.0),))
    d, s = decide_parking(pool, {"g4dn.xlarge": 1, "r5n.large": 2}, ALL, PRICES, 2.5, now=6.0, state=s, hold_s=60.0)
    assert d.unpark == ("i-r1",) and set(s.parked) == {"i-r3"}


def test_parked_instances_cost_no_more_than_the_dearest_recent_target() -> None:
    # the planner asked for g4dn + 1 r5n (0.675 $/hr) 3 s ago and for g4dn alone now: of the two
    # parked r5n one may stay warm, the older one goes (a planner alternating between pools does
    # not pay for both)
    s = ParkState({"i-r1": 0.0, "i-r2": 1.0}, ((2.0, 0.675),))
    d, s = decide_parking(POOL, {"g4dn.xlarge": 1}, ALL, PRICES, 2.5, now=5.0, state=s, hold_s=60.0)
    assert d.retire == ("i-r1",) and d.target == {"g4dn.xlarge": 1, "r5n.large": 1}
    assert s.parked == {"i-r1": -math.inf, "i-r2": 1.0}     # i-r1 retiring until it is gone
    # once that target is older than the hold, nothing above the current target stays (parked 32.5 s)
    s = ParkState({"i-r2": 30.0}, ((2.0, 0.675), (5.0, 0.526)))
    d, s = decide_parking(POOL[:1] + POOL[2:], {"g4dn.xlarge": 1}, ALL, PRICES, 2.5, now=62.5, state=s, hold_s=60.0)
    assert d.retire == ("i-r2",) and d.target == {"g4dn.xlarge": 1}


def test_spike_unparks_the_newest_parked_before_anything_is_launched() -> None:
    d, s = decide_parking(POOL, {"g4dn.xlarge": 1}, ALL, PRICES, 2.5, now=0.0, hold_s=60.0)
    s = ParkState({"i-r1": 0.0, "i-r2": 5.0})
    # the target wants one r5n back: the most recently parked returns, the other stays parked
    d, s2 = decide_parking(POOL, {"g4dn.xlarge": 1, "r5n.large": 1}, ALL, PRICES, 2.5, now=6.0, state=s, hold_s=60.0)
    assert d.unpark == ("i-r2",) and d.park == () and s2.parked == {"i-r1": 0.0}
    assert d.target == {"g4dn.xlarge": 1, "r5n.large": 2}
    # a bigger spike: both come back and the rest is new (the actuator launches 2)
    d, s3 = decide_parking(POOL, {"g4dn.xlarge": 1, "r5n.large": 4}, ALL, PRICES, 2.5, now=6.0, state=s, hold_s=60.0)
    assert set(d.unpark) == {"i-r1", "i-r2"} and d.target == {"g4dn.xlarge": 1, "r5n.large": 4} and s3.parked == {}


def test_held_instances_give_way_to_the_budget() -> None:
    # target swaps r5n for c5n: 0.526 + 0.432 + 2 x 0.149 = 1.256 > budget 1.1: the parked r5n go now
    target = {"g4dn.xlarge": 1, "c5n.2xlarge": 1}
    pool = POOL + [inst("i-c", "c5n.2xlarge", 9)]
    ready = ALL | {"i-c"}
    s = ParkState({"i-r1": 0.0, "i-r2": 0.0})
    d, s = decide_parking(pool, target, ready, PRICES, 1.1, now=1.0, state=s, hold_s=60.0)
    assert d.target == {"g4dn.xlarge": 1, "c5n.2xlarge": 1} and set(d.retire) == {"i-r1", "i-r2"}
    # with room for one: one stays parked (cost 0.526 + 0.432 + 0.149 = 1.107 <= 1.2)
    s = ParkState({"i-r1": 0.0, "i-r2": 0.0})
    d, s = decide_parking(pool, target, ready, PRICES, 1.2, now=1.0, state=s, hold_s=60.0)
    assert d.target == {"g4dn.xlarge": 1, "c5n.2xlarge": 1, "r5n.large": 1} and d.retire == ("i-r1",)


def test_surplus_keeps_serving_while_the_target_boots() -> None:
    # the target swaps the r5n for a c5n that is still pending: the r5n serve until it is up
    pool = POOL + [inst("i-c", "c5n.2xlarge", 9, "pending")]
    target = {"g4dn.xlarge": 1, "c5n.2xlarge": 1}
    d, s = decide_parking(pool, target, ALL, PRICES, 2.5, now=1.0, hold_s=60.0)
    assert d.park == () and set(d.serving_surplus) == {"i-r1", "i-r2"} and s.parked == {}
    assert d.target == {"g4dn.xlarge": 1, "c5n.2xlarge": 1, "r5n.large": 2}
    # it registered: now they are parked
    d, s = decide_parking(pool, target, ALL | {"i-c"}, PRICES, 2.5, now=2.0, state=s, hold_s=60.0)
    assert set(d.park) == {"i-r1", "i-r2"} and d.serving_surplus == ()


def test_instances_that_serve_nothing_are_parked_first() -> None:
    pool = POOL + [inst("i-r3", "r5n.large", 1, "pending")]
    d, _ = decide_parking(pool, {"g4dn.xlarge": 1, "r5n.large": 2}, ALL, PRICES, 2.5, now=0.0, hold_s=60.0)
    assert d.park == ("i-r3",)


def test_hold_zero_retires_at_once_parked_ones_first() -> None:
    d, s = decide_parking(POOL, {"g4dn.xlarge": 1, "r5n.large": 1}, ALL, PRICES, 2.5, now=1.0, hold_s=0.0)
    assert d.target == {"g4dn.xlarge": 1, "r5n.large": 1} and d.retire == ("i-r2",) and d.unpark == ()
    # hold set to 0 while one (the older) is parked: that one goes, the serving one stays
    s = ParkState({"i-r1": 0.0})
    d, s = decide_parking(POOL, {"g4dn.xlarge": 1, "r5n.large": 1}, ALL, PRICES, 2.5, now=1.0, state=s, hold_s=0.0)
    assert d.retire == ("i-r1",) and d.unpark == ()


def test_the_actuator_retires_the_named_instances_first() -> None:
    steps = plan_transition({"r5n.large": [inst("i-a", "r5n.large", 1), inst("i-b", "r5n.large", 2)]},
                            {"r5n.large": 1}, PRICES, 2.5, retire_first=["i-a"])
    assert [s.instance_ids for s in steps if s.kind == "terminate"] == [("i-a",)]
    steps = plan_transition({"r5n.large": [inst("i-a", "r5n.large", 1), inst("i-b", "r5n.large", 2)]},
                            {"r5n.large": 1}, PRICES, 2.5)
    assert [s.instance_ids for s in steps if s.kind == "terminate"] == [("i-b",)]   # newest by default


TYPES = sorted(PRICES)


@st.composite
def rounds(draw):  # type: ignore[no-untyped-def]
    n = draw(st.integers(0, 8))
    pool = [inst(f"i-{k}", draw(st.sampled_from(TYPES)), float(draw(st.integers(0, 5))),
                 draw(st.sampled_from(["running", "running", "pending", "terminated"]))) for k in range(n)]
    ready = frozenset(i.instance_id for i in pool if draw(st.booleans()))
    target = {t: draw(st.integers(0, 3)) for t in TYPES}
    budget = draw(st.floats(0.5, 4.0))
    while sum(PRICES[t] * c for t, c in target.items()) > budget:
        t = max((t for t in target if target[t]), key=lambda t: PRICES[t])
        target[t] -= 1
    parked = {i.instance_id: float(draw(st.integers(0, 20))) for i in pool if draw(st.booleans())}
    recent = tuple((float(draw(st.integers(0, 40))), draw(st.floats(0.0, 4.0))) for _ in range(draw(st.integers(0, 3))))
    return pool, ready, target, budget, ParkState(parked, recent), float(draw(st.integers(0, 40))), float(draw(st.sampled_from([0, 5, 10])))


@settings(max_examples=300, deadline=None)
@given(rounds())
def test_invariants(case) -> None:  # type: ignore[no-untyped-def]
    pool, ready, target, budget, state, now, hold = case
    d, s = decide_parking(pool, target, ready, PRICES, budget, now, state, hold)
    live = {i.instance_id: i.instance_type for i in pool if i.live}
    count = {t: sum(1 for x in live.values() if x == t) for t in TYPES}
    # money: the held instances never push the asked-for pool over the budget
    assert sum(PRICES[t] * n for t, n in d.target.items()) <= budget + 1e-9
    for t in TYPES:
        want = {k: v for k, v in target.items() if v}.get(t, 0)
        got = d.target.get(t, 0)
        assert got >= want                                          # never below the planner
        assert got <= max(want, count[t])                           # holds only what is there
        if count[t] >= want:                                        # what goes is what is named
            assert count[t] - got == sum(1 for x in d.retire if live.get(x) == t)
    assert set(d.retire) <= set(live) and set(d.retire) <= set(s.parked)
    assert set(s.parked) <= set(live) and not set(d.park) & set(d.unpark)
    assert set(d.park) <= set(s.parked) and not set(d.unpark) & set(s.parked)
    # the actuator can carry it out within the budget, retiring the named ones
    cur = {t: [i for i in pool if i.live and i.instance_type == t] for t in TYPES}
    steps = plan_transition(cur, d.target, PRICES, max(budget, sum(PRICES[i.instance_type] for i in pool if i.live)),
                            retire_first=d.retire)
    gone = {x for st_ in steps if st_.kind == "terminate" for x in st_.instance_ids}
    assert gone == set(d.retire)
    assert replay({t: len(v) for t, v in cur.items()}, steps, PRICES).pool == {t: n for t, n in d.target.items() if n}
