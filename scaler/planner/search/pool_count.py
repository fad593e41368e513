"""How many pools ``scaler.planner.upper_bound.enumerate_pools`` lists, without listing them (issue #29;
pure): ``Plan.pools_ranked`` when the planner searches (:mod:`scaler.planner.search.pool_search`), and the check
``scaler.planner.choose.rank_inputs`` makes before it lists anything.

A dynamic programme over the types on the budget in units of ``10^-d`` $/hr: the smallest
``d <= 6`` that puts every price on the grid (to a relative 1e-12), with at most ``GRID_CELLS``
cells; per type, the number of pools of each cost is a sum over a window of the count range
(prefix sums per residue of the price). Exact there: a pool's cost is a whole number of grid
steps, so ``cost <= budget + 1e-9`` (enumeration's rule, in floats) and ``units <= floor((budget +
1e-9) 10^d)`` agree unless the budget sits within float noise of a grid point minus 1e-9. Prices
off every such grid are counted by enumeration's own loop over all but the last type, whose range
is counted (a PlanError line beyond ``WORK_LIMIT`` partial pools).
"""
from __future__ import annotations

import numpy as np

from config.budget import BUDGET_EPS
from scaler.planner.base_aux import PlanError
from scaler.planner.search.pool_search import WORK_LIMIT
from scaler.planner.search.pool_space import PoolSpace

#: the largest grid the programme runs on (cells of 10^-d $/hr up to the budget)
GRID_CELLS = 8_000_000


def count_pools(space: PoolSpace) -> int:
    """How many pools ``enumerate_pools`` lists for this space, without listing them (module doc)."""
    grid = _grid(space)
    if grid is None:
        return _count_by_listing(space)
    units, cells = grid
    dp: np.ndarray = np.zeros(cells + 1, dtype=np.int64)
    dp[0] = 1
    big = False
    for p, lo, hi in zip(units, space.lo.tolist(), space.cap.tolist()):
        est = _box(dp.astype(float), p, lo, hi)
        if not big and est.sum() > 2.0 ** 60:
            big = True
            dp = dp.astype(object)
        dp = _box(dp, p, lo, hi)
    total = int(sum(dp.tolist())) if big else int(dp.sum())
    return total - (1 if not space.lo.any() else 0)


def _box(dp: np.ndarray, p: int, lo: int, hi: int) -> np.ndarray:
    """``new[c] = sum_{n=lo..hi} dp[c - n p]`` (counts of pools by cost in grid units)."""
    cells = len(dp)
    if hi < lo:
        return np.zeros_like(dp)
    rows = -(-cells // p)
    a = np.zeros(rows * p, dtype=dp.dtype)
    a[:cells] = dp
    cs = np.cumsum(a.reshape(rows, p), axis=0)
    out = np.zeros_like(cs)
    if lo < rows:
        out[lo:] = cs[: rows - lo]
    if hi + 1 < rows:
        out[hi + 1:] -= cs[: rows - hi - 1]
    return out.reshape(-1)[:cells]


def _grid(space: PoolSpace) -> tuple[list[int], int] | None:
    for d in range(7):
        scale = 10.0 ** d
        units = np.round(space.prices * scale)
        if np.all(np.abs(space.prices * scale - units) <= 1e-12 * np.maximum(units, 1.0)) and units.min() >= 1:
            cells = int(np.floor((space.budget + BUDGET_EPS) * scale))
            if cells > GRID_CELLS:
                return None
            return [int(u) for u in units], max(cells, 0)
    return None


def _count_by_listing(space: PoolSpace) -> int:
    """Prices off the decimal grid: enumeration's own level loop over all but the last type (its
    float rule), the last type's range counted instead of listed."""
    reserve, t = space.reserve, len(space.types)
    cost = np.zeros(1)
    for k in range(t):
        room = space.budget + BUDGET_EPS - cost - reserve[k]
        top = np.minimum(np.floor(np.maximum(room, -1.0) / space.prices[k]), space.cap[k]).astype(np.int64)
        width = np.maximum(top - space.lo[k] + 1, 0)
        total = int(width.sum())
        if k == t - 1:
            break
        if total > WORK_LIMIT:
            raise PlanError(f"cannot count the pools within budget {space.budget:g} $/hr: the prices are on no "
                            f"10^-6 $/hr grid and the count is above {WORK_LIMIT:,}")
        par = np.repeat(np.arange(len(cost)), width)
        cnt = (np.arange(total) - np.repeat(np.cumsum(width) - width, width)).astype(np.int32) + np.int32(space.lo[k])
        cost = cost[par] + cnt * space.prices[k]
    return total - (1 if not space.lo.any() else 0)
