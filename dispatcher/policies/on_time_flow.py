"""``kairos-strict``'s matching as a min-cost flow: which waiting queries go on time to which workers.

The problem (dispatcher/policies/kairos_strict.py; ours, on Kairos §5.1 Eq. 2, 5, 6-7): query i on
worker j of type t costs ``C[t]·(S[i, t] + busy[j]) + extra[i]`` (``extra``: the query's laxity)
where that completion time meets Eq. 5 (with the safeguard ξ) and a constant M otherwise, M above
min(m, n) × the largest on-time cost (the mask); min(m, n) pairs are matched (Eq. 6-7), so the
solver first serves as many queries on time as it can, then minimises their cost. The dense
``linear_sum_assignment`` on that m × n matrix is cubic (BENCHMARKS.md "match-scale"). Two facts
make it a small network instead:

- **Separable within a type.** An on-time pair's cost is a query part ``C[t]·S[i, t] + extra[i]``
  plus a worker part ``C[t]·busy[j]``; a late pair costs M whoever it joins.
- **On time is a prefix.** Query i meets Eq. 5 on worker j of type t iff ``busy[j] <= slack[i] −
  S[i, t]``: on the first ``p[i, t]`` workers of type t sorted by remaining time (``reach``, the
  dense matrix's own float sum).

The network (:func:`match_on_time`, :class:`_Network`): source → query i (capacity 1, cost
``extra[i] − M``) → its class (queries with equal service times and equal reach on every type are
interchangeable but for their extra) → type t's chain node at the class's reach ``p[r, t]`` (cost
``C[t]·S[r, t]``; an arc only where ``p[r, t] >= 1``) → chain arcs to the type's node at the next
smaller reach (cost 0) → the groups of workers a node owns (its positions from the next smaller
reach up to its own; a group is a run of workers of one type with equal remaining time, the idle
ones of a type are one) → sink (cost ``C[t]·busy``, capacity = the group's size). A flow of k
units costs the on-time pairs' total − k·M, and the assignment's total is that + M·min(m, n) (the
late pairs fill the rest at M each and are never dispatched): the objective of the dense solve.
The constraint matrix is a network matrix, totally unimodular, so HiGHS's simplex
(dispatcher/policies/transport_lp.py) returns an integral optimum. Its flows become pairs type by
type: the queries routed to a type, in increasing reach, take its workers in increasing remaining
time. That is feasible (flow conservation on the chain: no more queries of reach at most r than r
workers) and costs no more than the flow (it uses the type's least busy workers), so it is an
optimum of the dense problem (tests/dispatcher/test_on_time_flow.py: the same total as
``linear_sum_assignment`` on random rounds). On 2,000 waiting × 1,000 workers of 12 types the
network has some 650 classes and 230 chain nodes (BENCHMARKS.md "match-strict").
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import sparse

from dispatcher.policies.pair_costs import PairCosts, Pairs, by_type, equal_rows, reach
from dispatcher.policies.transport_lp import solve_integral


def match_on_time(pc: PairCosts) -> Pairs | None:
    """The on-time pairs (query rows, worker columns) of a min-cost assignment of ``pc`` whose late
    pairs all cost ``pc.late`` (one constant, the mask's M): an optimum of
    ``linear_sum_assignment(pc.dense())`` once the late pairs (any min(m, n) − k unmatched queries
    and workers) are added. None where the late cost is not one constant, or the solver proved no
    integral optimum (the caller then solves the dense problem)."""
    m, n = pc.shape
    empty = np.empty(0, dtype=np.intp)
    if m == 0 or n == 0:
        return empty, empty
    big = float(pc.late.flat[0]) if pc.late.size else 0.0
    if not bool((pc.late == big).all()):
        return None
    order, start, b = by_type(pc)
    p = reach(pc, b, start)
    net = _network(pc, p, b, start, big)
    if net is None:
        return empty, empty
    x = solve_integral(*net.lp())
    if x is None:
        return None
    return net.realise(x, p, order, start)


@dataclass(frozen=True)
class _Network:
    """The flow LP of one round. Rows: one per query class (queries with equal service times and
    reach: pieces in = arcs out), then one per chain node (a type's distinct reach: flow in = out).
    Columns: the pieces (one per query that is on time somewhere, at its ``extra − M``, at most 1),
    the class arcs (class r into type t's node at its reach, at ``C[t]·S[r, t]``), the chain arcs
    (node k to the next less busy node k − 1 of its type, free) and the sink arcs (each group of
    equal remaining time out of the node that owns it, at ``C[t]·busy``, at most its size)."""

    queries: np.ndarray      # the queries with a piece, by class
    qclass: np.ndarray       # their class
    arc_class: np.ndarray    # each class arc's class
    arc_type: np.ndarray     # and type
    A: sparse.csc_matrix
    c: np.ndarray
    col_hi: np.ndarray
    rows: int

    def lp(self) -> tuple[sparse.csc_matrix, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        zero = np.zeros(self.rows)
        return self.A, self.c, self.col_hi, zero, zero

    def realise(self, x: np.ndarray, p: np.ndarray, order: np.ndarray, start: np.ndarray) -> Pairs | None:
        """The flows as pairs: a class's queries with a unit on their piece take its arcs' units
        (they are interchangeable: equal service and reach), then :func:`_realise` per type."""
        Q, K = len(self.queries), len(self.arc_class)
        used = x[:Q] > 0
        qi = self.queries[used]                                 # by class (stable)
        units = x[Q:Q + K]
        qt = np.repeat(self.arc_type, units)                    # arcs are by class too
        if len(qt) != len(qi) or bool((np.repeat(self.arc_class, units) != self.qclass[used]).any()):
            return None
        return _realise(qi, qt, p[qi, qt], order, start)


def _network(pc: PairCosts, p: np.ndarray, b: np.ndarray, start: np.ndarray, big: float) -> _Network | None:
    """The round's flow network (:class:`_Network`), or None when no query is on time anywhere."""
    active = np.flatnonzero((p > 0).any(axis=1))
    if not active.size:
        return None
    # query classes: equal service times on every type and equal reach (then any member serves
    # where another does, at the same cost but for its extra)
    first, inv, _ = equal_rows(np.hstack([pc.S[active], p[active].astype(float)]))
    by_cls = np.argsort(inv, kind="stable")
    queries, qclass = active[by_cls], inv[by_cls]
    R = len(first)
    # chain nodes: per type, the distinct positive reaches, keyed t·(n + 1) + reach in one sorted
    # array (a node owns its type's positions from the previous node's reach up to its own)
    cls_rep = active[first]
    width = len(b) + 1
    ar, at = np.nonzero(p[cls_rep] > 0)                          # class arcs, by class
    arc_key = at * width + p[cls_rep[ar], at]
    nodes = np.unique(arc_key)
    arc_node = np.searchsorted(nodes, arc_key)
    ntype = nodes // width
    chain_from = np.flatnonzero(ntype[1:] == ntype[:-1]) + 1     # node k → k − 1 of its type
    gfirst, gtype = _groups(b, start)
    gsize = np.diff(np.append(gfirst, len(b)))
    gk = np.searchsorted(nodes, gtype * width + gfirst - start[gtype], side="right")
    owned = gk < len(nodes)
    owned[owned] = ntype[gk[owned]] == gtype[owned]              # below the type's largest reach
    sink_node = gk[owned]
    Q, K, D, G = len(queries), len(ar), len(chain_from), int(owned.sum())
    rows = np.concatenate([qclass, ar, R + arc_node, R + chain_from, R + chain_from - 1, R + sink_node])
    cols = np.concatenate([np.arange(Q), Q + np.arange(K), Q + np.arange(K), Q + K + np.arange(D),
                           Q + K + np.arange(D), Q + K + D + np.arange(G)])
    vals = np.concatenate([np.ones(Q), -np.ones(K), np.ones(K), -np.ones(D), np.ones(D), -np.ones(G)])
    n_rows = R + len(nodes)
    A = sparse.csc_matrix((vals, (rows, cols)), shape=(n_rows, Q + K + D + G))
    c = np.concatenate([pc.extra[queries] - big, pc.C[at] * pc.S[cls_rep[ar], at], np.zeros(D),
                        pc.C[gtype[owned]] * b[gfirst[owned]]])
    col_hi = np.concatenate([np.ones(Q), np.full(K + D, np.inf), gsize[owned].astype(float)])
    return _Network(queries, qclass, ar, at, A, c, col_hi, n_rows)


def _groups(b: np.ndarray, start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Runs of equal remaining time within a type, over the workers sorted by :func:`by_type`:
    (each group's first position, its type)."""
    n = len(b)
    first = np.zeros(n, dtype=bool)
    first[start[:-1][start[:-1] < n]] = True                     # each type's first worker
    first[1:] |= b[1:] != b[:-1]
    gfirst = np.flatnonzero(first)
    gtype = np.searchsorted(start, gfirst, side="right") - 1
    return gfirst, gtype


def _realise(qi: np.ndarray, qt: np.ndarray, qp: np.ndarray, order: np.ndarray, start: np.ndarray
             ) -> Pairs | None:
    """Per type, its queries in increasing reach (then index) take its workers in increasing
    remaining time. None if one would be late (cannot happen for a feasible flow)."""
    srt = np.lexsort((qi, qp, qt))
    qi, qt, qp = qi[srt], qt[srt], qp[srt]
    pos = np.arange(len(qi)) - np.searchsorted(qt, qt, side="left")
    if bool((pos >= qp).any()):
        return None
    return qi, order[start[qt] + pos]
