"""``choose_pool`` without the enumeration (issue #29; pure): the same decision as
:func:`scaler.planner.choose.choose_pool` makes on the ranked list of every pool, asked of the exact pool
search (:mod:`scaler.planner.search.pool_search`) instead, for spaces too large to list.

Each step of the enumerated decision, and the question it becomes:

- the top-K pools of the ranking (``Plan.ranked``, the similarity pick's top 10, the max-bound
  pool): :func:`~scaler.planner.search.pool_search.top_pools` (bound descending, cost ascending, then the counts
  in enumeration order);
- :func:`scaler.planner.choose.undominated`: the first maximal pool in ranking order holding at least the
  pick's counts with a bound no lower: ``top_pools(k=1, lo=pick, maximal_only, at_least=bound)``;
- ``min_cost``: the candidates (bound >= need, > 0) cheapest first (cost to 9 decimals, then bound
  descending, then ranking order): :func:`~scaler.planner.search.pool_search.cheapest_pools`, as many as the
  checks need (``meets``: a sub-pool of a failed pool skipped unchecked, at most ``max_checks``);
- the pool held (``current``): its bound and cost computed directly;
- ``Plan.pools_ranked``: :func:`~scaler.planner.search.pool_search.count_pools`.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

from config.budget import BUDGET_EPS
from scaler.planner.base_aux import BaseAux
from scaler.planner.plan_inputs import Meets, Objective, Plan, PlanInputs, no_pool_fits
from scaler.planner.similarity_pick import SIMILARITY_TOP, similarity_pick
from scaler.planner.search.pool_search import cheapest_pools, top_pools
from scaler.planner.search.pool_space import Pools, PoolSpace, in_space, maximal

_Row = tuple[np.ndarray, float, float]      # counts over the space's types, $/hr, bound


def _row(p: Pools, i: int) -> _Row:
    return p.counts[i].copy(), float(p.cost[i]), float(p.bound[i])


def _full(inputs: PlanInputs, space: PoolSpace, counts: np.ndarray) -> dict[str, int]:
    got = {t: int(c) for t, c in zip(space.types, counts)}
    return {t: got.get(t, 0) for t in inputs.types}


def undominated_row(space: PoolSpace, row: _Row) -> _Row:
    """:func:`scaler.planner.choose.undominated` for one pool."""
    counts, cost, bound = row
    if bool(maximal(space, counts[None, :], np.array([cost]))[0]):
        return row
    hit = top_pools(space, 1, lo=counts, maximal_only=True, at_least=bound)
    return _row(hit, 0) if len(hit) else row


def _checked(space: PoolSpace, need: float, meets: Meets, max_checks: int, inputs: PlanInputs,
             base_type: str) -> _Row | None:
    """``scaler.planner.choose._checked_min_cost`` over the candidates in order, fetched as needed."""
    want = max(max_checks, 0) + 1
    while True:
        cands = cheapest_pools(space, need, want)
        failed: list[np.ndarray] = []
        checks = 0
        for i in range(len(cands)):
            counts = cands.counts[i]
            if any(bool(np.all(counts <= f)) for f in failed):
                continue
            if checks >= max_checks:
                return None
            checks += 1
            if meets(_full(inputs, space, counts), base_type):
                return _row(cands, i)
            failed.append(counts)
        if len(cands) < want:
            return None         # every candidate seen
        want *= 2               # the skipped ones used up the list: ask for more (meets is memoised)


def _held(space: PoolSpace, current: Mapping[str, int], need: float, max_cost: float, pick: _Row) -> _Row | None:
    """``scaler.planner.choose._keep_current`` for the pool held, its cost and bound computed directly."""
    cols = {t: j for j, t in enumerate(space.types)}
    if any(n > 0 and t not in cols for t, n in current.items()):
        return None
    vec = np.zeros(len(space.types), dtype=np.int32)
    for t, n in current.items():
        if n > 0:
            vec[cols[t]] = n
    ok, cost = in_space(space, vec[None, :])
    if not bool(ok[0]) or np.array_equal(vec, pick[0]):
        return None
    if bool(np.all(pick[0] <= vec)):
        return None     # the pick is a part of the pool held: retiring the rest launches nothing
    bound = float(space.bounds(vec[None, :])[0])
    if bound >= need and bound > 0 and float(cost[0]) <= max_cost + BUDGET_EPS:
        return vec, float(cost[0]), bound
    return None


def choose_searched(inputs: PlanInputs, ba: BaseAux, space: PoolSpace, n_pools: int, objective: Objective,
                    demand_qps: float, headroom: float, top_k: int, meets: Meets | None, max_checks: int,
                    current: Mapping[str, int] | None, keep_within: float) -> Plan:
    """:func:`scaler.planner.choose.choose_pool`'s decision over the search (``meets`` already memoised)."""
    if n_pools == 0:
        raise no_pool_fits(inputs)
    k = max(int(top_k), 0)
    head = top_pools(space, max(k, SIMILARITY_TOP))
    if not len(head):       # pools within the budget, none within the vCPU quotas
        raise no_pool_fits(inputs)
    demand_unmet = False
    if objective == "max_throughput":
        idx, rule = similarity_pick(head.counts, space.base_col)
        pick = undominated_row(space, _row(head, idx))
        if pick[2] <= 0 < head.bound[0]:
            pick, rule = undominated_row(space, _row(head, 0)), "max-bound"
    else:
        need = demand_qps * (1.0 + headroom)
        if not (head.bound[0] >= need and head.bound[0] > 0):
            pick, rule, demand_unmet = _row(head, 0), "min-cost-unmet", True
        elif meets is None:
            pick, rule = _row(cheapest_pools(space, need, 1), 0), "min-cost"
        else:
            got = _checked(space, need, meets, max_checks, inputs, ba.base_type)
            pick, rule = (got, "min-cost-checked") if got is not None else (_row(head, 0), "min-cost-unmet")
            demand_unmet = got is None
        if current is not None and not demand_unmet:
            kept = _held(space, current, need, pick[1] * (1.0 + keep_within), pick)
            if kept is not None and (meets is None or meets(_full(inputs, space, kept[0]), ba.base_type)):
                pick, rule = kept, "min-cost-kept"
    return Plan(
        model=inputs.model,
        budget_per_hour=inputs.budget_per_hour,
        base_type=ba.base_type,
        chosen=_full(inputs, space, pick[0]),
        cost_per_hour=pick[1],
        upper_bound_qps=pick[2],
        rule=rule,
        pools_ranked=n_pools,
        ranked=[(_full(inputs, space, head.counts[i]), float(head.cost[i]), float(head.bound[i]))
                for i in range(min(k, len(head)))],
        aux={a.instance_type: {"s": a.s, "f": a.f} for a in ba.aux},
        demand_unmet=demand_unmet,
    )
