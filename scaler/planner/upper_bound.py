"""Throughput upper bound QPS_max of every pool within budget (Kairos §5.2, Eq. 9-15), vectorized.

A *pool* is a count per instance type. ``enumerate_pools`` lists every non-empty pool whose summed
$/hr is within the budget and whose counts respect the per-type (min, max) — one numpy expansion
per type, never a Python loop per pool. ``upper_bounds`` evaluates Eq. 15 (which contains Eq. 9,
11, 12, 13 as the one-auxiliary special cases) for all pools at once; ``upper_bound_one`` is the
same formula for one pool in plain Python (the reference the vectorized code is tested against,
and the benchmark's baseline).

Eq. 15, with u base nodes, v^i nodes of auxiliary type i, f' = max f^i over the auxiliary types
present (v^i > 0) and Q_a^i, Q_b^{s+} taken over the region of that type:
    C = sum_i v^i Q_a^i (1 - f') / f'                                         (Eq. 14)
    QPS_max = u Q_b^{s+} / (1 - f')                          if u Q_b^{s+} <= C
            = sum_i v^i Q_a^i / f' + (u Q_b^{s+} - C) / (u Q_b^{s+}) * u Q_b   otherwise
Limits the paper leaves implicit, taken as the formula's limits: no auxiliary present, or f' = 0
(the auxiliaries serve nothing within QoS) → u Q_b; f' = 1 (an auxiliary serves the whole mix,
C = 0) → sum_i v^i Q_a^i + u Q_b. A pool with u = 0 and f' < 1 gets 0: some queries can be served
by nobody within QoS.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from config.budget import BUDGET_EPS
from scaler.planner.base_aux import BoundParams, PlanError

DEFAULT_POOL_LIMIT = 50_000_000


def upper_bounds(u: np.ndarray, v: np.ndarray, p: BoundParams) -> np.ndarray:
    """QPS_max (Eq. 9-15) for N pools: ``u`` (N,) base counts, ``v`` (N, n) auxiliary counts in
    ``p``'s auxiliary order. Returns (N,) float. Per-region constants are precomputed (n values) and
    gathered per pool; the few special rows (no auxiliary, f' in {0, 1}) are patched afterwards."""
    uf = np.asarray(u, dtype=float)
    n_pools = uf.shape[0]
    uq_b = uf * p.q_b
    n_aux = len(p.f)
    if n_aux == 0 or n_pools == 0:
        return uq_b
    v = np.asarray(v).reshape(n_pools, n_aux)
    present = v > 0
    any_aux = present.any(axis=1)
    # index of the present auxiliary with the largest region = last present in (ascending-s) order
    jstar = n_aux - 1 - np.argmax(present[:, ::-1], axis=1)
    f = p.f
    mid = (f > 0) & (f < 1)
    fs = np.where(mid, f, 0.5)
    ratio = (1.0 - fs) / fs                     # (1-f')/f'        per region
    inv_f = 1.0 / fs                            # 1/f'
    inv_1mf = 1.0 / (1.0 - fs)                  # 1/(1-f')
    # sum_i v^i Q_a^i over region j*, added in i order as upper_bound_one does: a pool's bound is the
    # same float whichever other pools share the call (a matrix product's sums are not)
    sum_vqa = np.zeros(n_pools)
    for i in range(n_aux):
        sum_vqa = sum_vqa + v[:, i] * p.q_a[jstar, i]
    ub = uf * p.q_b_splus[jstar]
    c = sum_vqa * ratio[jstar]                                            # Eq. 14
    with np.errstate(divide="ignore", invalid="ignore"):
        slack = (ub - c) / ub * uq_b                                      # Eq. 10 (n base nodes)
    out = np.where(ub <= c, ub * inv_1mf[jstar], sum_vqa * inv_f[jstar] + slack)   # Eq. 15
    if not mid.all():
        one = (f >= 1)[jstar] & any_aux
        out[one] = sum_vqa[one] + uq_b[one]
        zero = (f <= 0)[jstar]
        out[zero] = uq_b[zero]
    none = ~any_aux
    out[none] = uq_b[none]
    return out


def upper_bound_one(u: int, v: Sequence[int], p: BoundParams) -> float:
    """Eq. 9-15 for one pool, in plain Python (reference implementation and benchmark baseline)."""
    n = len(p.f)
    jstar = -1
    for i in range(n):
        if v[i] > 0:
            jstar = i
    uq_b = u * p.q_b
    if jstar < 0:
        return uq_b
    fp = float(p.f[jstar])
    sum_vqa = 0.0
    for i in range(n):
        sum_vqa += v[i] * float(p.q_a[jstar, i])
    if fp <= 0:
        return uq_b
    if fp >= 1:
        return sum_vqa + uq_b
    ub = u * float(p.q_b_splus[jstar])
    c = sum_vqa * (1.0 - fp) / fp
    if ub <= c:
        return ub / (1.0 - fp)
    return sum_vqa / fp + (ub - c) / ub * uq_b


def enumerate_pools(
    prices: Sequence[float],
    budget: float,
    mins: Sequence[int] | None = None,
    maxs: Sequence[int | None] | None = None,
    limit: int = DEFAULT_POOL_LIMIT,
) -> tuple[np.ndarray, np.ndarray]:
    """Every non-empty pool with ``counts @ prices <= budget`` and ``mins <= counts <= maxs``.

    Returns ``(counts (N, T) int32, cost (N,) float)`` in lexicographic order of the counts.
    Vectorized: one ``np.repeat`` expansion per type. Raises PlanError when more than ``limit``
    pools would be produced, or a type has a non-positive price.
    """
    pr = np.asarray(prices, dtype=float)
    t = len(pr)
    lo = np.zeros(t, dtype=np.int64) if mins is None else np.asarray(mins, dtype=np.int64)
    hi_cap = [None] * t if maxs is None else list(maxs)
    if (pr <= 0).any():
        raise PlanError("every instance type needs a positive price")
    # cost of the minimum counts of the types after k: reserved while choosing type k
    min_cost = lo * pr
    reserve = np.concatenate([np.cumsum(min_cost[::-1])[::-1][1:], [0.0]]) if t else np.zeros(0)
    if t == 0:
        return np.zeros((0, 0), dtype=np.int32), np.zeros(0)
    parents: list[np.ndarray] = []
    cnts: list[np.ndarray] = []
    cost = np.zeros(1)
    for k in range(t):
        room = budget + BUDGET_EPS - cost - reserve[k]
        top = np.floor(np.maximum(room, -1.0) / pr[k]).astype(np.int64)
        if hi_cap[k] is not None:
            top = np.minimum(top, int(hi_cap[k]))
        width = np.maximum(top - lo[k] + 1, 0)
        total = int(width.sum())
        if total > limit:
            raise PlanError(f"more than {limit} pools within budget {budget:g} $/hr; set per-type max counts")
        parent = np.repeat(np.arange(len(cost), dtype=np.int32 if len(cost) < 2**31 else np.int64), width)
        starts = np.cumsum(width) - width
        cnt = (np.arange(total, dtype=np.int64) - np.repeat(starts, width)).astype(np.int32) + np.int32(lo[k])
        parents.append(parent)
        cnts.append(cnt)
        cost = cost[parent] + cnt * pr[k]
    # resolve each level's count through the chain of parents (one gather per level)
    n = len(cost)
    counts = np.empty((n, t), dtype=np.int32)
    idx: np.ndarray | None = None
    for k in range(t - 1, -1, -1):
        counts[:, k] = cnts[k] if idx is None else cnts[k][idx]
        idx = parents[k] if idx is None else parents[k][idx]
    # lexicographic order: the only possible empty pool is the first row
    if n and not counts[0].any():
        counts, cost = counts[1:], cost[1:]
    return counts, cost


@dataclass(frozen=True)
class Ranking:
    """All pools within budget, sorted by upper bound descending (ties: cheaper first, then
    enumeration order). ``counts[:, j]`` is the count of ``types[j]``."""

    types: tuple[str, ...]
    counts: np.ndarray
    cost: np.ndarray
    bound: np.ndarray

    def __len__(self) -> int:
        return int(self.counts.shape[0])

    def pool(self, i: int) -> dict[str, int]:
        return {t: int(c) for t, c in zip(self.types, self.counts[i])}


def rank_pools(types: Sequence[str], counts: np.ndarray, cost: np.ndarray, bound: np.ndarray) -> Ranking:
    """Sort pools by upper bound descending, then cost ascending, then enumeration order — the
    order of ``np.lexsort((cost, -bound))``, computed as one stable argsort plus a lexsort of the
    rows that tie on the bound only."""
    order = np.argsort(-bound, kind="stable")
    bs = bound[order]
    if len(bs) > 1:
        new_block = np.empty(len(bs), dtype=bool)
        new_block[0] = True
        np.not_equal(bs[1:], bs[:-1], out=new_block[1:])
        if not new_block.all():
            block = np.cumsum(new_block) - 1
            tied = np.flatnonzero(np.bincount(block)[block] > 1)
            sub = order[tied]
            order[tied] = sub[np.lexsort((cost[sub], block[tied]))]
    return Ranking(types=tuple(types), counts=counts[order], cost=cost[order], bound=bound[order])
