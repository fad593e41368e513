"""How many replicas own workers and where the others forward (``scaler.replicas.owning_replicas``; issue
#27 deliverable 2): hand-computed cases, hypothesis invariants, and each owner's base workers as
``scaler.replicas.owner_assignment.assign`` deals them."""
from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings, strategies as st

from scaler.replicas.owner_assignment import assign
from scaler.replicas.owning_replicas import MIN_BASE_PER_OWNER, OwningReplicas, arrival_shares, owner_count, owning_replicas


def test_one_base_worker_makes_the_holder_the_only_owner_and_the_others_forward_to_it() -> None:
    # the 2.5 $/hr rm2 pool (1 g4dn 13 r5n): two shards kept 0.087x of one (BENCHMARKS shard-matching)
    assert owning_replicas(["c", "a", "b"], "b", 1) == OwningReplicas(("b",), {"a": ("b",), "c": ("b",)})


def test_no_base_worker_still_leaves_one_owner() -> None:
    assert owning_replicas(["a", "b"], "b", 0) == OwningReplicas(("b",), {"a": ("b",)})


def test_four_base_workers_make_two_owners_the_holder_first_then_the_sticky_one() -> None:
    # 4 // 2 = 2 owners of 3 live replicas: the holder, then "c" that owns workers now
    assert owning_replicas(["a", "b", "c"], "b", 4, current_owners=["c", "gone"]) == \
        OwningReplicas(("b", "c"), {"a": ("b", "c")})


def test_five_base_workers_over_four_replicas_make_two_owners_without_a_live_holder() -> None:
    # 5 // 2 = 2; the holder "x" is not live: the current owner "d", then "a" by id
    assert owning_replicas(["a", "b", "c", "d"], "x", 5, current_owners=["d"]) == \
        OwningReplicas(("d", "a"), {"b": ("a", "d"), "c": ("a", "d")})


def test_every_replica_owns_when_the_base_count_allows_it() -> None:
    assert owning_replicas(["a", "b"], "a", 8) == OwningReplicas(("a", "b"), {})
    assert owner_count(2, 8) == 2 and owner_count(3, 7) == 3 and owner_count(3, 5) == 2 and owner_count(0, 9) == 0


def test_no_live_replica_owns_nothing() -> None:
    assert owning_replicas([], "a", 4) == OwningReplicas(())


def test_min_base_below_one_is_refused() -> None:
    with pytest.raises(ValueError):
        owner_count(2, 4, min_base=0)


names = st.lists(st.sampled_from([f"r{i}" for i in range(8)]), min_size=0, max_size=8, unique=True)


@settings(max_examples=300, deadline=None)
@given(live=names, holder=st.one_of(st.none(), st.sampled_from([f"r{i}" for i in range(9)])),
       base=st.integers(0, 20), current=names)
def test_owners_and_forwarders_partition_the_live_replicas(live: list[str], holder: str | None, base: int,
                                                           current: list[str]) -> None:
    out = owning_replicas(live, holder, base, current)
    owners = set(out.owners)
    assert len(owners) == len(out.owners) and owners <= set(live)
    assert owners.isdisjoint(out.forward_to) and owners | set(out.forward_to) == set(live)
    assert all(t == tuple(sorted(owners)) for t in out.forward_to.values())   # every owner, in id order
    if live:
        assert 1 <= len(owners) and (len(owners) == 1 or len(owners) * MIN_BASE_PER_OWNER <= base)
        assert len(owners) == min(len(live), max(1, base // MIN_BASE_PER_OWNER))   # as many as allowed
        if holder in live:
            assert out.owners[0] == holder


@settings(max_examples=150, deadline=None)
@given(live=names.filter(bool), base=st.integers(0, 12), aux=st.integers(0, 20))
def test_each_owner_gets_at_least_two_base_workers_from_the_assignment(live: list[str], base: int, aux: int) -> None:
    workers = [(f"g{i}", "g4dn.xlarge") for i in range(base)] + [(f"r{i}", "r5n.large") for i in range(aux)]
    out = owning_replicas(live, live[0], base)
    owner = assign(workers, out.owners, {})
    per = {o: sum(1 for w, t in workers if t == "g4dn.xlarge" and owner[w] == o) for o in out.owners}
    if len(out.owners) > 1:
        assert min(per.values()) >= MIN_BASE_PER_OWNER
    assert sum(per.values()) == base


def test_four_replicas_two_owners_each_owner_receives_half_the_queries() -> None:
    # R = 4, base 4 -> k = 2: owners r0, r1; r2 and r3 forward to both in turn: 1/4 + 2 x 1/8 each
    out = owning_replicas(["r0", "r1", "r2", "r3"], "r0", 4)
    assert out == OwningReplicas(("r0", "r1"), {"r2": ("r0", "r1"), "r3": ("r0", "r1")})
    assert arrival_shares(out) == {"r0": Fraction(1, 2), "r1": Fraction(1, 2)}


def test_three_replicas_two_owners_each_receive_half() -> None:
    # R = 3, base 5 -> k = 2: the one forwarder r2 spreads its third over both: 1/3 + 1/6 each
    out = owning_replicas(["r0", "r1", "r2"], "r0", 5)
    assert arrival_shares(out) == {"r0": Fraction(1, 2), "r1": Fraction(1, 2)}


def test_four_replicas_three_owners_each_receive_a_third() -> None:
    # R = 4, base 7 -> k = 3 (the 10 $/hr mtwnd pool, 7 g4dn): r3 spreads its quarter: 1/4 + 1/12
    assert arrival_shares(owning_replicas(["r0", "r1", "r2", "r3"], "r0", 7)) == \
        {"r0": Fraction(1, 3), "r1": Fraction(1, 3), "r2": Fraction(1, 3)}


def test_one_owner_receives_every_query_and_nothing_owned_has_no_shares() -> None:
    assert arrival_shares(owning_replicas(["a", "b"], "b", 1)) == {"b": Fraction(1)}
    assert arrival_shares(OwningReplicas(())) == {}


@settings(max_examples=200, deadline=None)
@given(live=names.filter(bool), base=st.integers(0, 20), current=names)
def test_arrival_shares_are_one_over_k_each(live: list[str], base: int, current: list[str]) -> None:
    out = owning_replicas(live, live[-1], base, current)
    shares = arrival_shares(out)
    assert set(shares) == set(out.owners) and sum(shares.values()) == 1
    assert set(shares.values()) == {Fraction(1, len(out.owners))}
