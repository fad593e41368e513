"""Which queries each owning replica matches in ``bench/shard_bench.py``'s owning rows
(``bench._shard_owning``; issue #27 deliverable 2): the balancer deals query ``i`` to replica
``i mod R``, a replica owning no worker forwards it (``scaler.replica_owning`` rule 3)."""
from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings, strategies as st

from bench._shard_owning import canonical, owner_dealing, round_robin
from scaler.replica_owning import arrival_shares


def test_four_replicas_two_owners_match_the_even_and_the_odd_queries() -> None:
    # base 4 -> k = 2; r2 forwards to r0, r3 to r1: the same queries as 2 shards round robin
    d = owner_dealing(4, 4)
    assert d.owning.owners == ("r0", "r1") and d.residues == ((0, 2), (1, 3))
    assert d.shares == (Fraction(1, 2), Fraction(1, 2)) and d.forwarded == Fraction(1, 2)
    assert canonical(d.period, d.residues) == round_robin(2) == (2, ((0,), (1,)))


def test_four_replicas_three_owners_the_first_also_matches_the_forwarders_queries() -> None:
    # base 7 (the 10 $/hr mtwnd pool) -> k = 3; r3 forwards to r0
    d = owner_dealing(4, 7)
    assert d.residues == ((0, 3), (1,), (2,))
    assert d.shares == (Fraction(1, 2), Fraction(1, 4), Fraction(1, 4)) and d.forwarded == Fraction(1, 4)
    assert canonical(d.period, d.residues) == (4, ((0, 3), (1,), (2,)))   # no shorter period


def test_one_base_worker_leaves_one_owner_matching_every_query() -> None:
    d = owner_dealing(2, 1)
    assert d.residues == ((0, 1),) and d.forwarded == Fraction(1, 2)
    assert canonical(d.period, d.residues) == round_robin(1) == (1, ((0,),))


def test_a_dealing_that_misses_or_repeats_a_residue_is_refused() -> None:
    with pytest.raises(ValueError):
        canonical(4, ((0, 1), (2,)))
    with pytest.raises(ValueError):
        canonical(2, ((0, 1), (1,)))


@settings(max_examples=200, deadline=None)
@given(replicas=st.integers(1, 8), base=st.integers(0, 20))
def test_each_query_is_matched_by_one_owner_at_rule_three_shares(replicas: int, base: int) -> None:
    d = owner_dealing(replicas, base)
    flat = sorted(x for r in d.residues for x in r)
    assert flat == list(range(replicas))
    assert dict(zip(d.owning.owners, d.shares)) == arrival_shares(d.owning)
    period, short = canonical(d.period, d.residues)
    assert replicas % period == 0
    assert all(set(r) == {x for x in range(replicas) if x % period in s} for r, s in zip(d.residues, short))
