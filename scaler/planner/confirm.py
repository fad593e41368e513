"""Confirming the max_throughput pick by evaluation (Kairos §5.2 Algorithm 1, Kairos+; issue 16).

The similarity pick (``scaler.planner.choose``) is made from upper bounds alone; the bound is a fluid bound
and its order is not the measured order (Kairos §8.5, Fig. 13), and on some mixes (Gaussian batch
sizes) the pick measured below the homogeneous pool of the base type. :func:`confirm_pick`
measures a few candidates with ``evaluate(pool) -> allowable q/s`` (the caller passes the
simulator, ``sim.pick_eval.capacity_evaluator``; this module does no I/O) within an evaluation
budget, in this order:

1. the (undominated) similarity pick;
2. the homogeneous pool of the base type: as many base instances as the budget and bounds allow
   (Kairos §8.1), always evaluated, so the result is never below it *as measured*;
3. the pick with one more base instance: the maximal pool with the highest upper bound among
   those holding one more base instance than the pick (ours). The bound is a fluid bound: it
   ignores the queue of the queries only the base type serves in time, which is what decides the
   p99 at tight QoS, so the measured best often holds one base instance more than the bound's
   best (BENCHMARKS.md "kairos-repro": dien at 2.5 $/hr, 3 g4dn + 6 r5n over 2 + 9);
4. Kairos+ (Algorithm 1) over the maximal pools (those no pool within budget dominates) in
   descending upper bound, until the budget is spent or every bound is <= the best measured.

The best measured candidate wins; ties go to the earlier one (the similarity pick first). Only the
homogeneous pool may be dominated (when the evaluator measures it strictly above every maximal
pool evaluated, i.e. adding instances made it worse). ``costscale plan`` (``--confirm N``, default the
config's ``confirm_evaluations``), the repro bench and the fleet loop call it (through
``sim.pick_eval.confirmation``): the daemon in a background process (``daemon.loops.pick_confirmer``),
caching each answer per planning question (``scaler.planner.pick_cache``), the replay in line.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Iterator

import numpy as np

from config.budget import BUDGET_EPS
from scaler.planner import choose as _plan
from scaler.planner.choose import choose_pool, maximal_pools, rank_inputs
from scaler.planner.plan_inputs import Plan, PlanInputs, base_aux_of, pool_space
from scaler.planner.search.pool_count import count_pools
from scaler.planner.search.pool_search import SearchTooLarge, top_pools
from scaler.planner.search.pool_space import PoolSpace, in_space
from scaler.planner.upper_bound import DEFAULT_POOL_LIMIT, Ranking

Evaluate = Callable[[dict[str, int]], float]
#: evaluations a confirmation may spend by default (pick, homogeneous, one more base, Kairos+)
DEFAULT_EVALUATIONS = 4

Key = tuple[int, ...]       # a pool's counts over the allowed types


@dataclass(frozen=True)
class Confirmation:
    plan: Plan                                         # the confirmed pick (rule says which candidate won)
    pick_qps: float                                    # measured throughput of the confirmed pick
    similarity_qps: float                              # measured throughput of the similarity pick
    homogeneous: dict[str, int]                        # the homogeneous base pool evaluated
    homogeneous_qps: float
    evaluated: tuple[tuple[dict[str, int], float], ...]


def homogeneous_row(ranking: Ranking, base_type: str) -> int | None:
    """Row of the pool with only the base type, as many as fit (Kairos §8.1); None when bounds
    force other types in."""
    j = ranking.types.index(base_type)
    only = np.all(np.delete(ranking.counts, j, axis=1) == 0, axis=1) & (ranking.counts[:, j] > 0)
    rows = np.flatnonzero(only)
    if not rows.size:
        return None
    return int(rows[np.argmax(ranking.counts[rows, j])])


def more_base_row(ranking: Ranking, base_type: str, row: int, maximal: np.ndarray) -> int | None:
    """Row of the highest-bound maximal pool with one more instance of the base type than row
    ``row`` (ranked pools come in descending bound); None when there is none."""
    j = ranking.types.index(base_type)
    hit = np.flatnonzero(maximal & (ranking.counts[:, j] == ranking.counts[row, j] + 1))
    return int(hit[0]) if hit.size else None


class _Ranked:
    """The candidates from the ranked list of every pool."""

    def __init__(self, inputs: PlanInputs) -> None:
        _, self.ranking = rank_inputs(inputs)
        self.inputs = inputs
        self.maximal = maximal_pools(self.ranking, inputs)
        self.rows = {tuple(int(c) for c in r): i for i, r in enumerate(self.ranking.counts)}

    def info(self, key: Key) -> tuple[float, float]:
        i = self.rows[key]
        return float(self.ranking.cost[i]), float(self.ranking.bound[i])

    def homogeneous(self, base: str) -> Key | None:
        i = homogeneous_row(self.ranking, base)
        return None if i is None else tuple(int(c) for c in self.ranking.counts[i])

    def more_base(self, base: str, pick: Key) -> Key | None:
        i = more_base_row(self.ranking, base, self.rows[pick], self.maximal)
        return None if i is None else tuple(int(c) for c in self.ranking.counts[i])

    def maximal_in_order(self) -> Iterator[Key]:
        for i in np.flatnonzero(self.maximal).tolist():
            yield tuple(int(c) for c in self.ranking.counts[i])


class _Searched:
    """The same candidates from the pool search (``scaler.planner.search.pool_search``), for spaces too large to rank."""

    def __init__(self, space: PoolSpace) -> None:
        self.space = space
        self.known: dict[Key, tuple[float, float]] = {}

    def _note(self, counts: np.ndarray, cost: float, bound: float) -> Key:
        key = tuple(int(c) for c in counts)
        self.known[key] = (float(cost), float(bound))
        return key

    def info(self, key: Key) -> tuple[float, float]:
        if key not in self.known:
            vec = np.array([key])
            self._note(vec[0], float(in_space(self.space, vec)[1][0]), float(self.space.bounds(vec)[0]))
        return self.known[key]

    def homogeneous(self, base: str) -> Key | None:
        sp, j = self.space, self.space.types.index(base)
        if np.delete(sp.lo, j).any():
            return None
        n = int(min(sp.cap[j], np.floor((sp.budget + BUDGET_EPS) / sp.prices[j])))
        while n >= max(int(sp.lo[j]), 1):
            vec = np.zeros((1, len(sp.types)), dtype=np.int32)
            vec[0, j] = n
            ok, cost = in_space(sp, vec)
            if ok[0]:
                return self._note(vec[0], float(cost[0]), float(sp.bounds(vec)[0]))
            n -= 1
        return None

    def more_base(self, base: str, pick: Key) -> Key | None:
        sp, j = self.space, self.space.types.index(base)
        lo, cap = sp.lo.copy(), sp.cap.copy()
        lo[j] = cap[j] = pick[j] + 1
        if pick[j] + 1 > sp.cap[j]:
            return None
        hit = top_pools(sp, 1, lo=lo, cap=cap, maximal_only=True)
        return self._note(hit.counts[0], hit.cost[0], hit.bound[0]) if len(hit) else None

    def maximal_in_order(self) -> Iterator[Key]:
        k, seen = 8, 0
        while True:
            got = top_pools(self.space, k, maximal_only=True)
            for i in range(seen, len(got)):
                yield self._note(got.counts[i], got.cost[i], got.bound[i])
            if len(got) < k:
                return
            seen, k = len(got), 2 * k


def confirm_pick(inputs: PlanInputs, evaluate: Evaluate, max_evaluations: int = DEFAULT_EVALUATIONS,
                 top_k: int = 10, exhaustive: bool = False) -> Confirmation:
    """The max_throughput pick, confirmed by at most ``max_evaluations`` (>= 2) evaluations. The
    candidates come from the ranked list of every pool, or above ``scaler.planner.choose.SEARCH_ABOVE`` pools
    (unless ``exhaustive``) from the pool search: the same candidates in the same order."""
    if max_evaluations < 2:
        raise ValueError("max_evaluations must be >= 2 (the pick and the homogeneous pool)")
    ba = base_aux_of(inputs)
    space = pool_space(inputs, ba)
    n_pools = count_pools(space)
    if not exhaustive and n_pools > _plan.SEARCH_ABOVE:
        try:
            return _confirm(inputs, evaluate, max_evaluations, top_k, False, _Searched(space), ba.base_type)
        except SearchTooLarge:
            if n_pools > DEFAULT_POOL_LIMIT:
                raise
    return _confirm(inputs, evaluate, max_evaluations, top_k, True, None, ba.base_type)


def _confirm(inputs: PlanInputs, evaluate: Evaluate, max_evaluations: int, top_k: int, exhaustive: bool,
             searched: "_Searched | None", base_type: str) -> Confirmation:
    plan = choose_pool(inputs, "max_throughput", top_k=top_k, exhaustive=exhaustive)
    src: _Ranked | _Searched = searched if searched is not None else _Ranked(inputs)
    types = inputs.allowed
    measured: dict[Key, float] = {}
    order: list[Key] = []

    def measure(key: Key) -> float:
        if key not in measured:
            measured[key] = float(evaluate({t: c for t, c in zip(types, key) if c}))
            order.append(key)
        return measured[key]

    pick = tuple(plan.chosen.get(t, 0) for t in types)
    measure(pick)
    homo = src.homogeneous(base_type)
    if homo is not None:
        measure(homo)
    more = src.more_base(base_type, pick)
    if more is not None and len(measured) < max_evaluations:
        measure(more)
    # Kairos+ (Algorithm 1) over the maximal pools: none is a sub-pool of another, so only the
    # bound test prunes; already measured pools cost nothing
    for key in src.maximal_in_order():
        best = max(measured.values())
        if src.info(key)[1] <= best or (len(measured) >= max_evaluations and key not in measured):
            break
        measure(key)
    win = max(order, key=lambda k: (measured[k], -order.index(k)))
    rule = (plan.rule if win == pick else "homogeneous" if win == homo else "more-base" if win == more
            else "kairos+")
    chosen = {t: 0 for t in inputs.types}
    chosen.update(dict(zip(types, win)))
    cost, bound = src.info(win)
    confirmed = replace(plan, chosen=chosen, cost_per_hour=cost, upper_bound_qps=bound, rule=f"confirmed:{rule}")
    pool = lambda key: dict(zip(types, key))  # noqa: E731
    return Confirmation(
        plan=confirmed, pick_qps=measured[win], similarity_qps=measured[pick],
        homogeneous=pool(homo) if homo is not None else {},
        homogeneous_qps=measured[homo] if homo is not None else 0.0,
        evaluated=tuple((pool(k), measured[k]) for k in order),
    )
