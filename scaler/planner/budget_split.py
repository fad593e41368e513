"""One budget shared by several models: which part of it each model's pool gets (pure).

Design (a) of the many-models issue (#24): every model gets a Kairos sub-pool of its own, and the
budget is split over the models' cost → allowable-throughput frontiers. A model's frontier is the
list of pools within the budget, cheapest first, each with a higher upper bound (Kairos §5.2,
Eq. 9-15, :mod:`scaler.planner.upper_bound`) than every cheaper one: no other pool buys more throughput
for the money.

The split maximises the smallest *score* over the models (max-min fairness), then spends what is
left on the models with the lowest scores first. A model's score at a pool of upper bound ``b``:

- ``capped`` (``min_cost`` when the budget cannot buy every model its need): the weighted
  shortfall ``1 - w * (1 - min(b / need, 1))``. At the optimum the models short of their need are
  short in inverse proportion to their weights: a model of weight 2 is half as far short, in
  relative terms, as one of weight 1. A covered model scores 1 and is given nothing more.
- uncapped (``max_throughput``): ``(b / target) / w``, the served fraction of the model's demand
  per unit of weight; equal scores give each model capacity in proportion to weight x demand.

A model with no demand at all scores as covered once it holds one worker (so that its first
queries find someone) and as 0 served before.

What the max-min leaves is spent a row at a time on the model of the lowest score (water filling),
so a budget too small to give every model a worker still serves as many models as it can.

The max-min is exact: the scores along a frontier rise with cost, so whether a score ``s`` can be
reached by every model within the budget is monotone in ``s``; a binary search over every
frontier point's score finds the highest one, each model then holding the cheapest point that
reaches it (:func:`split_budget`). A dynamic programme over the budget in cents gives the same
maximum at far more work; the tests check the search against a brute force over every
combination of frontier points. Per-type maxima (``instance_types[].max``) bind the models' pools
together: a threshold whose cheapest points add up to more than a maximum counts as out of reach
(conservative: another combination might fit; the planner then settles on a lower score).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from config.budget import BUDGET_EPS
from scaler.planner.pools import pool_sum
from scaler.planner.upper_bound import Ranking

@dataclass(frozen=True)
class Frontier:
    """A model's cost → throughput frontier: ``counts[k]`` (over ``types``) costs ``cost[k]`` $/hr
    and bounds ``bound[k]`` q/s; cost and bound strictly rise with ``k``. Row 0 is the empty pool
    (a model may get nothing when the budget is short)."""

    model: str
    types: tuple[str, ...]
    counts: np.ndarray
    cost: np.ndarray
    bound: np.ndarray

    def __len__(self) -> int:
        return int(self.cost.shape[0])

    def pool(self, k: int) -> dict[str, int]:
        return {t: int(c) for t, c in zip(self.types, self.counts[k]) if c}


def frontier(model: str, ranking: Ranking, types: Sequence[str] | None = None) -> Frontier:
    """The frontier of a model's ranked pools (:func:`scaler.planner.choose.rank_inputs`), its counts over
    ``types`` (default: the ranking's, which excludes the excluded types)."""
    cols = tuple(types) if types is not None else ranking.types
    order = np.lexsort((-ranking.bound, np.round(ranking.cost, 9)))
    cost, bound = ranking.cost[order], ranking.bound[order]
    best_before = np.maximum.accumulate(np.concatenate([[0.0], bound]))[:-1]
    keep = order[bound > best_before + 1e-12]
    at = {t: j for j, t in enumerate(ranking.types)}
    counts = np.zeros((len(keep) + 1, len(cols)), dtype=np.int64)      # row 0: the empty pool
    for j, t in enumerate(cols):
        if t in at:
            counts[1:, j] = ranking.counts[keep, at[t]]
    return Frontier(model, cols, counts, np.concatenate([[0.0], ranking.cost[keep]]),
                    np.concatenate([[0.0], ranking.bound[keep]]))


def scores(bound: np.ndarray, target: float, weight: float, capped: bool) -> np.ndarray:
    """A model's score at each upper bound (the module docstring); nondecreasing in ``bound``."""
    b = np.asarray(bound, dtype=float)
    if target <= 0:
        frac = np.where(b > 0, math.inf, 0.0)
    else:
        frac = b / target
    if capped:
        return 1.0 - weight * (1.0 - np.minimum(frac, 1.0))
    return frac / weight


@dataclass(frozen=True)
class Split:
    """The split: the frontier row each model holds, its score, and the smallest score."""

    rows: dict[str, int]
    scores: dict[str, float]
    min_score: float
    cost_per_hour: float


def _fits(frontiers: Sequence[Frontier], rows: Sequence[int], budget: float,
          maxima: Mapping[str, int | None]) -> bool:
    cost = sum(float(f.cost[r]) for f, r in zip(frontiers, rows))
    if cost > budget + BUDGET_EPS:
        return False
    if not any(v is not None for v in maxima.values()):
        return True
    total = pool_sum(f.pool(r) for f, r in zip(frontiers, rows))
    return all(maxima.get(t) is None or n <= maxima[t] for t, n in total.items())  # type: ignore[operator]


def split_budget(frontiers: Sequence[Frontier], targets: Mapping[str, float], weights: Mapping[str, float],
                 budget: float, *, capped: bool, maxima: Mapping[str, int | None] | None = None) -> Split:
    """The max-min split of ``budget`` over ``frontiers`` (one per model; see the module doc).
    ``targets``: each model's need (capped) or demand (uncapped) in q/s; ``weights``: > 0."""
    maxima = dict(maxima or {})
    sc = [scores(f.bound, float(targets.get(f.model, 0.0)), float(weights.get(f.model, 1.0)), capped)
          for f in frontiers]
    cand = np.unique(np.concatenate(sc)) if sc else np.zeros(0)
    cand = cand[np.isfinite(cand)] if np.isfinite(cand).any() else cand

    def rows_for(s: float) -> list[int] | None:
        out = []
        for s_m in sc:
            k = int(np.searchsorted(s_m, s, side="left"))
            if k >= len(s_m):
                return None
            out.append(k)
        return out

    lo, hi = 0, len(cand) - 1
    best = [0] * len(frontiers)
    if len(cand) and (r0 := rows_for(float(cand[0]))) is not None and _fits(frontiers, r0, budget, maxima):
        best = r0
        while lo < hi:               # the highest reachable candidate: feasibility is monotone in s
            mid = (lo + hi + 1) // 2
            r = rows_for(float(cand[mid]))
            if r is not None and _fits(frontiers, r, budget, maxima):
                lo, best = mid, r
            else:
                hi = mid - 1
    rows = list(best)
    # spend what is left, a step at a time (water filling): the model of the lowest score (ties: the
    # heavier weight, the cheaper step, then the name) moves to its next row of a higher score that fits
    while True:
        best: tuple[float, float, float, str, int, int] | None = None
        for i, f in enumerate(frontiers):
            here = float(sc[i][rows[i]])
            k = int(np.searchsorted(sc[i], here, side="right"))     # the first row scoring higher
            if k >= len(f) or not _fits(frontiers, rows[:i] + [k] + rows[i + 1:], budget, maxima):
                continue
            cand = (here, -float(weights.get(f.model, 1.0)), float(f.cost[k] - f.cost[rows[i]]), f.model, i, k)
            if best is None or cand[:4] < best[:4]:
                best = cand
        if best is None:
            break
        rows[best[4]] = best[5]
    got = {f.model: float(sc[i][rows[i]]) for i, f in enumerate(frontiers)}
    return Split(rows={f.model: rows[i] for i, f in enumerate(frontiers)}, scores=got,
                 min_score=min(got.values()) if got else math.inf,
                 cost_per_hour=float(sum(f.cost[rows[i]] for i, f in enumerate(frontiers))))


__all__ = ["Frontier", "Split", "frontier", "scores", "split_budget"]
