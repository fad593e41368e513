"""Exact Kairos §5.1 matching over classes of queries and groups of workers (issue #29).

The dense assignment (``linear_sum_assignment`` on the m × n matrix, Kairos §5.1 Eq. 1-8) is cubic:
567 ms at 2,000 waiting × 1,000 workers. But the pair cost (:class:`PairCosts`) depends on a
worker only through its type and its remaining busy time: idle workers of one type are identical
columns, and queries whose cost rows are equal are identical rows. This module solves the same
problem, with the same optimum, as a transportation problem between them:

1. **Columns.** Each type's workers sorted by remaining time. With fewer queries than workers
   (Eq. 6: every query is served) only each type's first m can be used: a busy worker costs at
   least what an idle (or less busy) worker of its type costs for every query, so a matched one
   with m such better columns could swap to a free one at no loss.
2. **Rows.** Queries with equal (service per type, penalty, extra, and for each type the number of
   its workers on which they meet Eq. 5) have equal rows: one class, supply = their count.
3. **Groups and a relaxation.** Workers of a type are cut into groups of consecutive remaining
   times: the idle ones (exact: all equal) and the busy ones. A class's cost on a group is a lower
   bound of its cost on each member (``_group_costs``): on time there when it is on time on the
   group's least busy member; when every worker is used (m >= n, Eq. 7) the members' C·busy is a
   constant and the late cost is counted with the group's largest C·busy taken off. That is a
   transportation LP (dispatcher/policies/transport_lp.py), integral.
4. **Realise and certify.** The LP's flows become pairs: in each group the on-time queries in
   increasing order of their on-time reach take the members in increasing remaining time, the late
   ones the top (``_realise``). Where every pair costs what the relaxation counted, the pairs'
   total is the relaxation's optimum, a lower bound of the true one: they are optimal. Where a
   group's pairs do not (a query would be late on the member it got, or a late query sits on a
   member other than the busiest), that group is cut in two and the LP solved again; a group of
   equal remaining times is exact, so this ends. After :data:`MAX_REFINEMENTS` cuts the caller
   solves the dense problem instead.
"""
from __future__ import annotations

import numpy as np

from dispatcher.policies.pair_costs import PairCosts, Pairs, by_type, equal_rows, reach
from dispatcher.policies.transport_lp import solve_transport

#: rounds of cutting failed worker groups before giving the round to the dense solve
MAX_REFINEMENTS = 6


def match_classes(pc: PairCosts) -> Pairs | None:
    """Rows and columns of a min-cost assignment of ``pc``'s queries to its workers (min(m, n)
    pairs, the optimum of ``linear_sum_assignment(pc.dense())``), or None where the relaxation is
    not certified (a late pair cheaper than an on-time one, or too many cuts)."""
    m, n = pc.shape
    if m == 0 or n == 0:
        return np.empty(0, dtype=np.intp), np.empty(0, dtype=np.intp)
    fill = m >= n                                   # Eq. 7: every worker gets a query
    order, start, b = by_type(pc)
    if not fill:                                    # step 1: at most m per type
        keep = np.arange(len(order)) - start[pc.tix[order]] < m
        order, b = order[keep], b[keep]
        start = np.searchsorted(pc.tix[order], np.arange(len(pc.C) + 1), side="left")
    p = reach(pc, b, start)
    if not _late_costs_more(pc, p, b, start):
        return None
    pieces = bool((pc.extra != pc.extra[0]).any())      # extras differ: the LP adds them as pieces
    gt, glo, ghi = _initial_groups(b, start)
    for _ in range(MAX_REFINEMENTS + 1):
        cls_first, members, cls_start, cnt, cls_of = _row_classes(pc, p, gt, glo, pieces)
        ext = pc.extra[members]
        cost, on = _group_costs(pc, p, b, start, cls_first, gt, glo, ghi, fill, not pieces)
        x = (solve_transport(cost, cnt, ghi - glo, fill, on, ext, cls_of) if pieces
             else solve_transport(cost, cnt, ghi - glo, fill))
        if x is None:
            return None
        rows, pos, ga, failed = _realise(p, b, start, members, cls_start, x, on, gt, glo, ghi, fill)
        if not failed.size:
            return rows, order[start[gt[ga]] + pos]
        split = _split(b, start, gt, glo, ghi, failed)
        if split is None:
            return None
        gt, glo, ghi = split
    return None


def _late_costs_more(pc: PairCosts, p: np.ndarray, b: np.ndarray, start: np.ndarray) -> bool:
    """The relaxation's premise: where a query is on time on a type's idlest worker, its late cost
    there is at least its on-time cost on the type's busiest one (Kairos: C·10·T_qos against
    C·(S + busy) <= C·(ξ·T_qos + busy))."""
    T = len(pc.C)
    bmax = np.array([b[start[t + 1] - 1] if start[t + 1] > start[t] else 0.0 for t in range(T)])
    worst = (pc.S + bmax) * pc.C + pc.extra[:, None]
    return not bool(((p > 0) & (worst > pc.late)).any())


def _row_classes(pc: PairCosts, p: np.ndarray, gt: np.ndarray, glo: np.ndarray, pieces: bool
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Queries the relaxation cannot tell apart (equal service, late cost, and on time on the
    same groups' least busy members; equal extra unless ``pieces``): (a member of each class,
    every query ordered by class, then extra, then the most slack first, then index; where each
    class starts in that order; class sizes; the class of each query in that order)."""
    parts = [pc.S, pc.late, (p[:, gt] > glo).astype(float)]
    if not pieces:
        parts.append(pc.extra[:, None])
    first, inv, cnt = equal_rows(np.hstack(parts))
    members = np.lexsort((np.arange(len(inv)), -pc.slack, pc.extra, inv))
    return first, members, np.concatenate([[0], np.cumsum(cnt)[:-1]]), cnt, inv[members]


def _initial_groups(b: np.ndarray, start: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per type: its idle workers (remaining time 0) and its busy ones, two groups."""
    gt, lo, hi = [], [], []
    for t in range(len(start) - 1):
        n_t = int(start[t + 1] - start[t])
        idle = int(np.searchsorted(b[start[t]:start[t + 1]], 0.0, side="right"))
        for a, z in ((0, idle), (idle, n_t)):
            if z > a:
                gt.append(t)
                lo.append(a)
                hi.append(z)
    return np.array(gt, dtype=np.intp), np.array(lo, dtype=np.intp), np.array(hi, dtype=np.intp)


def _group_costs(pc: PairCosts, p: np.ndarray, b: np.ndarray, start: np.ndarray, first: np.ndarray,
                 gt: np.ndarray, glo: np.ndarray, ghi: np.ndarray, fill: bool, with_extra: bool
                 ) -> tuple[np.ndarray, np.ndarray]:
    """R × G lower bounds of a class's cost on a group's members (step 3), and where the class is
    counted on time. ``with_extra``: the class's ``extra`` in its on-time costs (else the LP's
    pieces add it)."""
    S = pc.S[first][:, gt]
    C = pc.C[gt]
    on = p[first][:, gt] > glo
    extra = pc.extra[first][:, None] if with_extra else 0.0
    late = pc.late[first][:, gt]
    if fill:        # + C·busy of each member, the same total whichever query it gets
        return np.where(on, S * C + extra, late - C * b[start[gt] + ghi - 1]), on
    return np.where(on, (S + b[start[gt] + glo]) * C + extra, late), on


def _realise(p: np.ndarray, b: np.ndarray, start: np.ndarray, members: np.ndarray, cls_start: np.ndarray,
             x: np.ndarray, on_cell: np.ndarray, gt: np.ndarray, glo: np.ndarray, ghi: np.ndarray,
             fill: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The LP's flows as pairs (step 4): (query rows, member position within its type, group of
    each pair, the groups whose pairs cost more than the relaxation counted). A class's members
    in increasing extra go to its on-time groups first (the LP's cheapest pieces)."""
    r, g = np.nonzero(x)
    idle = b[start[gt] + glo] == 0.0                            # the busy groups first: most reach
    srt = np.lexsort((g, idle[g], ~on_cell[r, g], r))
    r, g = r[srt], g[srt]
    k = x[r, g]
    before = np.cumsum(k) - k                                   # flow of earlier (r, g) cells
    first_cell = np.searchsorted(r, r, side="left")             # r is sorted (row-major nonzero)
    offset = cls_start[r] + before - before[first_cell]
    total = int(k.sum())
    within = np.arange(total) - np.repeat(np.cumsum(k) - k, k)
    rows = members[np.repeat(offset, k) + within]
    ga = np.repeat(g, k)
    reach = p[rows, gt[ga]]
    on = reach > glo[ga]
    srt = np.lexsort((reach, ~on, ga))                          # by group, on time first, by reach
    rows, ga, reach, on = rows[srt], ga[srt], reach[srt], on[srt]
    gstart = np.searchsorted(ga, np.arange(len(gt)), side="left")
    pos = glo[ga] + np.arange(total) - gstart[ga]
    bpos = b[start[gt[ga]] + pos]
    if fill:   # on time where it sits; late ones only on the group's busiest remaining time
        ok = np.where(on, reach > pos, bpos == b[start[gt[ga]] + ghi[ga] - 1])
    else:      # on time only on members as idle as the group's least busy
        ok = ~on | (bpos == b[start[gt[ga]] + glo[ga]])
    return rows, pos, ga, np.unique(ga[~ok])


def _split(b: np.ndarray, start: np.ndarray, gt: np.ndarray, glo: np.ndarray, ghi: np.ndarray,
           failed: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Each failed group cut in two at the distinct remaining time nearest its middle; None when a
    failed group has a single remaining time (cannot happen: such a group is exact)."""
    cut = np.zeros(len(gt), dtype=np.intp)
    for g in failed.tolist():
        seg = b[start[gt[g]] + glo[g]:start[gt[g]] + ghi[g]]
        mid = len(seg) // 2
        left = int(np.searchsorted(seg, seg[mid], side="left"))
        right = int(np.searchsorted(seg, seg[mid], side="right"))
        at = left if left > 0 else right
        if at >= len(seg):
            return None
        cut[g] = glo[g] + at
    keep = cut == 0
    new_t = np.concatenate([gt, gt[~keep]])
    new_lo = np.concatenate([glo, cut[~keep]])
    new_hi = np.concatenate([np.where(keep, ghi, cut), ghi[~keep]])
    return new_t, new_lo, new_hi
