"""Which dispatcher replica owns each worker (issue #27, deliverable 2), pure: the owners
``scaler.replicas.owner_assignment.assign`` wants (balance by type, then in total, then the fewest moves,
against a brute force), and the two-step handoff of ``scaler.replicas.handoff`` that never lets two
replicas use one worker (hypothesis over join, leave, apply and heartbeat sequences)."""
from __future__ import annotations

import itertools
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scaler.replicas.owner_assignment import assign, moved, ownership
from scaler.replicas.handoff import Published, Release, next_published

KAIROS_POOL = [("g4dn-0", "g4dn.xlarge")] + [(f"r5n-{k:02d}", "r5n.large") for k in range(13)]


def counts(owner: dict[str, str], workers: list[tuple[str, str]]) -> Counter[tuple[str, str]]:
    return Counter((owner[w], t) for w, t in workers)


# -- hand-computed cases ----------------------------------------------------------------------------

def test_the_kairos_pool_over_two_replicas_splits_each_type_and_the_totals_evenly() -> None:
    owner = assign(KAIROS_POOL, ["A", "B"], {})
    # g4dn: 1 // 2 = 0 each, its one spare to A (names in order); r5n: 6 each, its spare to B (A holds the g4dn)
    assert counts(owner, KAIROS_POOL) == {("A", "g4dn.xlarge"): 1, ("A", "r5n.large"): 6, ("B", "r5n.large"): 7}
    assert owner == {"g4dn-0": "A", **{f"r5n-{k:02d}": "A" for k in range(6)}, **{f"r5n-{k:02d}": "B" for k in range(6, 13)}}


def test_the_spare_worker_stays_with_the_replica_that_has_it() -> None:
    owner = assign(KAIROS_POOL, ["A", "B"], {"g4dn-0": "B"})
    assert counts(owner, KAIROS_POOL) == {("B", "g4dn.xlarge"): 1, ("B", "r5n.large"): 6, ("A", "r5n.large"): 7}


def test_a_new_worker_goes_where_it_keeps_every_other_worker_in_place() -> None:
    # a greedy that deals type t1's spare first (to A, by name) would then have to move y from A to B
    assert assign([("x", "t1"), ("y", "t2")], ["A", "B"], {"y": "A"}) == {"x": "B", "y": "A"}


def test_a_dead_replicas_workers_are_dealt_to_the_live_ones_and_the_others_stay() -> None:
    workers = [("g0", "g"), ("g1", "g"), ("g2", "g"), ("r0", "r"), ("r1", "r"), ("r2", "r")]
    prev = {"g0": "A", "r0": "A", "g1": "B", "r1": "B", "g2": "C", "r2": "C"}
    owner = assign(workers, ["A", "B"], prev)
    assert {w: owner[w] for w in ("g0", "r0", "g1", "r1")} == {"g0": "A", "r0": "A", "g1": "B", "r1": "B"}
    assert counts(owner, workers) == {("A", "g"): 2, ("A", "r"): 1, ("B", "g"): 1, ("B", "r"): 2}
    assert moved(prev, owner, ["A", "B"]) == {}                       # C was dead: nothing drains


def test_a_joining_replica_takes_a_share_of_every_type() -> None:
    workers = [(f"g{k}", "g") for k in range(3)] + [(f"r{k}", "r") for k in range(6)]
    prev = assign(workers, ["A", "B"], {})
    owner = assign(workers, ["A", "B", "C"], prev)
    assert counts(owner, workers) == {(r, "g"): 1 for r in "ABC"} | {(r, "r"): 2 for r in "ABC"}
    assert set(moved(prev, owner, ["A", "B", "C"]).values()) <= {("A", "C"), ("B", "C")}
    assert len(moved(prev, owner, ["A", "B", "C"])) == 3               # exactly C's share moves


def test_no_live_replica_owns_nothing_and_a_worker_given_twice_is_refused() -> None:
    assert assign(KAIROS_POOL, [], {"g4dn-0": "A"}) == {}
    with pytest.raises(ValueError, match="worker ids given twice: w"):
        assign([("w", "g"), ("w", "r")], ["A"], {})


def test_status_gets_each_replicas_workers_by_type() -> None:
    owner = {"g0": "A", "r0": "A", "r1": "B"}
    assert ownership(owner, [("r1", "r"), ("g0", "g"), ("r0", "r"), ("x", "r")]) == {
        "A": {"g": ["g0"], "r": ["r0"]}, "B": {"r": ["r1"]}, "": {"r": ["x"]}}


# -- against a brute force ----------------------------------------------------------------------------

def balanced(owner: dict[str, str], workers: list[tuple[str, str]], replicas: list[str]) -> bool:
    c = counts(owner, workers)
    for t in {t for _, t in workers}:
        per = [c[(r, t)] for r in replicas]
        if max(per) - min(per) > 1:
            return False
    tot = Counter(owner[w] for w, _ in workers)
    per = [tot[r] for r in replicas]
    return max(per) - min(per) <= 1


def kept(owner: dict[str, str], prev: dict[str, str]) -> int:
    return sum(1 for w, r in owner.items() if prev.get(w) == r)


cases = st.tuples(
    st.lists(st.sampled_from(["g", "r", "t"]), max_size=7),
    st.lists(st.sampled_from(["A", "B", "C"]), min_size=1, max_size=3, unique=True),
    st.lists(st.sampled_from(["A", "B", "C", "D", None]), min_size=7, max_size=7),
)


@settings(max_examples=150, deadline=None)
@given(cases)
def test_assign_is_balanced_and_moves_the_fewest_workers_a_brute_force_finds(
        case: tuple[list[str], list[str], list[str | None]]) -> None:
    types, replicas, prev_of = case
    workers = [(f"w{k}", t) for k, t in enumerate(types)]
    prev = {w: p for (w, _), p in zip(workers, prev_of) if p is not None}
    owner = assign(workers, replicas, prev)
    assert set(owner) == {w for w, _ in workers} and set(owner.values()) <= set(replicas)
    assert balanced(owner, workers, replicas)
    best = max((kept(dict(zip([w for w, _ in workers], combo)), prev)
                for combo in itertools.product(replicas, repeat=len(workers))
                if balanced(dict(zip([w for w, _ in workers], combo)), workers, replicas)), default=0)
    assert kept(owner, prev) == best
    assert assign(workers, replicas, owner) == owner                    # a fixed point: nothing moves again


# -- the handoff: never two replicas on one worker ------------------------------------------------------

def test_a_worker_leaving_a_live_replica_is_released_first_and_granted_once_it_applied() -> None:
    p1 = Published(1, {"w": "A"}, {})
    p2 = next_published(p1, {"w": "B"}, ["A", "B"], {"A": 1, "B": 1})
    assert p2 == Published(2, {}, {"w": Release("A", 2, "B")})
    assert next_published(p2, {"w": "B"}, ["A", "B"], {"A": 1, "B": 2}) is p2    # A has not applied 2: wait
    assert next_published(p2, {"w": "B"}, ["A", "B"], {"A": 2, "B": 2}) == Published(3, {"w": "B"}, {})
    assert next_published(p2, {"w": "B"}, ["B"], {"B": 2}) == Published(3, {"w": "B"}, {})   # or A died
    assert next_published(p2, {"w": "A"}, ["A", "B"], {"A": 1}) == Published(3, {"w": "A"}, {})  # wanted back
    assert p2.intended() == {"w": "B"}


def test_a_dead_replicas_worker_and_a_new_worker_are_granted_at_once() -> None:
    p1 = Published(4, {"w": "C"}, {})
    assert next_published(p1, {"w": "A", "n": "B"}, ["A", "B"], {}) == Published(5, {"w": "A", "n": "B"}, {})


#: the steps of a run, drawn evenly from this list: the lease holder's round and the replicas'
#: applies and heartbeats weighted up (the interleavings that matter are between them), joins,
#: leaves and worker changes rarer
STEPS = ([("tick", "")] * 6 + [(op, r) for op in ("apply", "apply", "apply", "beat", "beat") for r in "ABCD"]
         + [(op, r) for op in ("join", "join", "leave") for r in "ABCD"] + [("add", "g"), ("add", "r")]
         + [("remove", str(k)) for k in range(4)])
ops = st.lists(st.sampled_from(STEPS), max_size=30)


@settings(max_examples=600, deadline=None)
@given(ops)
def test_no_worker_is_ever_in_use_by_two_replicas(sequence: list[tuple[str, str]]) -> None:
    """A replica uses the workers the version it applied gives it (and none after it dies or
    restarts); the lease holder sees the version each replica applied only through its heartbeats,
    which may lag. Whatever the order, a worker has at most one user, and once everyone applies
    and beats, the published owners reach what ``assign`` wants."""
    workers: dict[str, str] = {"w0": "g", "w1": "r", "w2": "r", "w3": "r"}
    live: set[str] = {"A", "B"}
    view: dict[str, Published | None] = {"A": None, "B": None}
    applied: dict[str, int] = {"A": 0, "B": 0}
    reported: dict[str, int] = {}
    pub = Published()
    made = 4

    def tick() -> None:
        nonlocal pub
        desired = assign(sorted(workers.items()), live, pub.intended())
        pub = next_published(pub, desired, live, {r: reported.get(r, 0) for r in live})

    def check() -> None:
        for w in workers:
            users = [r for r in live if (v := view[r]) is not None and v.owner.get(w) == r]
            assert len(users) <= 1, (w, users)

    for op, arg in sequence:
        if op == "join" and arg not in live:
            live.add(arg)
            view[arg], applied[arg], reported[arg] = None, 0, 0    # a new process: uses nothing yet
        elif op == "leave" and arg in live:
            live.discard(arg)
            view.pop(arg, None)
        elif op == "apply" and arg in live:
            view[arg], applied[arg] = pub, pub.version
        elif op == "beat" and arg in live:
            reported[arg] = applied[arg]
        elif op == "tick":
            tick()
        elif op == "add":
            workers[f"w{made}"] = arg
            made += 1
        elif op == "remove" and f"w{int(arg)}" in workers:
            del workers[f"w{int(arg)}"]
        check()
    for order in (sorted, lambda x: sorted(x, reverse=True), sorted):   # everyone applies and beats,
        tick()                                                          # one by one: the handoffs end
        for r in order(live):
            view[r], applied[r] = pub, pub.version
            check()
        for r in live:
            reported[r] = applied[r]
    if live:
        assert not pub.releasing
        assert dict(pub.owner) == assign(sorted(workers.items()), live, pub.owner)
