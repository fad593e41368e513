"""Which queries each owning replica matches in ``bench/replicas/shard_bench.py``'s owning rows
(``bench.replicas._shard_owning``; issue #27 deliverable 2): the balancer deals query ``i`` to replica
``i mod R``, a replica owning no worker forwards it (``scaler.replicas.owning_replicas`` rule 3: to every owner in turn)."""
from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings, strategies as st

from bench.replicas._shard_owning import canonical, owner_dealing, round_robin
from scaler.replicas.owning_replicas import arrival_shares


def test_four_replicas_two_owners_each_match_half_the_queries() -> None:
    # base 4 -> k = 2, period 8: r0 and r1 match their own (0, 4 and 1, 5); r2 sends its queries
    # 2, 6 to r0 then r1; r3 (one owner further) sends 3, 7 to r1 then r0
    d = owner_dealing(4, 4)
    assert d.owning.owners == ("r0", "r1") and d.period == 8
    assert d.residues == ((0, 2, 4, 7), (1, 3, 5, 6))
    assert d.shares == (Fraction(1, 2), Fraction(1, 2)) and d.forwarded == Fraction(1, 2)
    assert canonical(d.period, d.residues) == (8, d.residues)             # no shorter period


def test_four_replicas_three_owners_each_match_a_third() -> None:
    # base 7 (the 10 $/hr mtwnd pool) -> k = 3, period 12: r3 sends 3, 7, 11 to r0, r1, r2
    d = owner_dealing(4, 7)
    assert d.residues == ((0, 3, 4, 8), (1, 5, 7, 9), (2, 6, 10, 11))
    assert d.shares == (Fraction(1, 3),) * 3 and d.forwarded == Fraction(1, 4)


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
    assert d.period == replicas * len(d.owning.owners) and flat == list(range(d.period))
    assert dict(zip(d.owning.owners, d.shares)) == arrival_shares(d.owning)
    period, short = canonical(d.period, d.residues)
    assert d.period % period == 0
    assert all(set(r) == {x for x in range(d.period) if x % period in s} for r, s in zip(d.residues, short))
