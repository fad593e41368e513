"""Kairos+ (Kairos §5.2, Algorithm 1): upper-bound-guided search with as few evaluations as possible.

Visit pools in descending upper bound; evaluate each live one with ``evaluate(pool) -> allowable
QPS`` (measured by the simulator or live). After an improvement every pool whose bound is ``<=`` the
best measured is dropped (with the ranking sorted, that is: stop at the first pool whose bound is
``<=`` the best); after every evaluation all sub-pools (component-wise ``<=``) of the evaluated pool
are dropped, as they cannot do better. The search is exact when ``evaluate`` never exceeds the
bound and never drops when instances are added.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from scaler.planner.choose import rank_inputs
from scaler.planner.plan_inputs import PlanInputs
from scaler.planner.upper_bound import Ranking

Evaluate = Callable[[dict[str, int]], float]


@dataclass(frozen=True)
class SearchResult:
    best_pool: dict[str, int] | None
    best_qps: float
    evaluations: int
    space_size: int
    evaluated: tuple[tuple[dict[str, int], float], ...]


def kairos_plus(ranking: Ranking, evaluate: Evaluate, max_evaluations: int | None = None) -> SearchResult:
    """Algorithm 1 over a ranking (sorted by bound descending)."""
    n = len(ranking)
    alive = np.ones(n, dtype=bool)
    best_qps = 0.0
    best_i = -1
    evaluated: list[tuple[dict[str, int], float]] = []
    i = 0
    while i < n:
        if ranking.bound[i] <= best_qps and best_i >= 0:
            break
        if max_evaluations is not None and len(evaluated) >= max_evaluations:
            break
        pool = ranking.pool(i)
        qps = float(evaluate(pool))
        evaluated.append((pool, qps))
        if qps > best_qps or best_i < 0:
            best_qps, best_i = max(qps, best_qps), i
        alive &= ~np.all(ranking.counts <= ranking.counts[i], axis=1)
        rest = np.flatnonzero(alive[i + 1:])
        if rest.size == 0:
            break
        i = i + 1 + int(rest[0])
    return SearchResult(
        best_pool=ranking.pool(best_i) if best_i >= 0 else None,
        best_qps=best_qps,
        evaluations=len(evaluated),
        space_size=n,
        evaluated=tuple(evaluated),
    )


def kairos_plus_search(inputs: PlanInputs, evaluate: Evaluate, max_evaluations: int | None = None) -> SearchResult:
    """Rank the pools of ``inputs`` by upper bound and run Algorithm 1."""
    _, ranking = rank_inputs(inputs)
    return kairos_plus(ranking, evaluate, max_evaluations)
