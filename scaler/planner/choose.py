"""The fleet planner: which pool (count per instance type) to hold within the budget.

One pure entry point, ``choose_pool(inputs, objective, demand_qps, headroom, top_k)``, used by the
daemon's fleet loop, ``costscale plan`` and the simulator.

- ``max_throughput`` (Kairos §5.2): rank every pool within budget by its throughput upper bound
  (Eq. 9-15, ``scaler.planner.upper_bound``), then the similarity pick: if the top-3 pools have the same
  base count take the top one ("top3-same-base"); otherwise, among the top 10, the pool with the
  least sum of squared Euclidean distances (over count vectors) to the other nine ("min-sse-top10").
  The pick is then never *dominated* (issue 16): when another pool within the budget and the
  per-type bounds holds at least as many instances of every type, the highest-bound such pool that
  is maximal (no instance fits beside it) replaces it, provided its bound is no lower
  (:func:`undominated`); the rule keeps its name. A pick of bound 0 where some pool bounds more (a
  budget of a base instance or two, the top ten mostly pools without one) gives way to the highest
  bound ("max-bound"). ``scaler.planner.confirm`` checks the pick by simulation.
- ``min_cost`` (INFaaS §4.2.3 style): the cheapest pool whose estimated capacity (its upper bound)
  covers ``demand_qps * (1 + headroom)`` ("min-cost"); if none does, the pool with the highest upper
  bound within the budget, flagged ``demand_unmet`` ("min-cost-unmet").

Above ``SEARCH_ABOVE`` (200,000) pools within budget the planner does not list them: the same
decision (pick, rule, the top pools, the count) comes from an exact branch and bound on the bound
(``scaler.planner.search.pool_search``, driven by ``scaler.planner.choose_by_search``); ``exhaustive=True`` (``costscale plan
--exhaustive``) ranks every pool as before, and :func:`rank_inputs` refuses more than
``DEFAULT_POOL_LIMIT`` pools in one line, counting them first.

``Plan.chosen`` and the pools in ``Plan.ranked`` list **every** type of the inputs (count 0 where
unused, and for excluded types), in the inputs' order, so consumers see a full target per type.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

from config.budget import BUDGET_EPS
from scaler.planner.base_aux import BaseAux, PlanError
from scaler.planner.plan_inputs import Meets, Objective, Plan, PlanInputs, base_aux_of, no_pool_fits, pool_space
from scaler.planner.choose_by_search import choose_searched
from scaler.planner.search.pool_count import count_pools
from scaler.planner.search.pool_search import SearchTooLarge
from scaler.planner.quota import cap_bounds
from scaler.planner.similarity_pick import similarity_pick
from scaler.planner.upper_bound import DEFAULT_POOL_LIMIT, Ranking, enumerate_pools, rank_pools, upper_bounds

#: choose_pool searches (``scaler.planner.choose_by_search``) instead of ranking every pool above this many pools
#: within budget (the ranking takes about 0.1 s at 200,000 pools on one core, the search some 15 ms)
SEARCH_ABOVE = 200_000


def rank_inputs(inputs: PlanInputs, limit: int = DEFAULT_POOL_LIMIT) -> tuple[BaseAux, Ranking]:
    """Base/auxiliary split and every pool within budget ranked by upper bound (Kairos §5.2).
    Pools' columns are ``inputs.allowed`` (excluded types never appear). Raises PlanError (one
    line) before listing anything when there are more than ``limit`` pools (counted first)."""
    ba = base_aux_of(inputs)
    return ba, _ranking(inputs, ba, count_pools(pool_space(inputs, ba)), limit)


def _ranking(inputs: PlanInputs, ba: BaseAux, n: int, limit: int = DEFAULT_POOL_LIMIT) -> Ranking:
    """:func:`rank_inputs`'s ranking, given the split and the count (``n`` pools) already made."""
    allowed = inputs.allowed
    if n > limit:
        raise PlanError(f"{n:,} pools within budget {inputs.budget_per_hour:g} $/hr over {len(allowed)} types: too "
                        f"many to list (limit {limit:,}); set per-type max counts or fewer types")
    bounds = cap_bounds(inputs.bounds, allowed, inputs.quota)    # a family's quota caps each type alone
    mins = [bounds[t][0] for t in allowed]
    maxs = [bounds[t][1] for t in allowed]
    counts, cost = enumerate_pools([inputs.prices[t] for t in allowed], inputs.budget_per_hour, mins, maxs, limit)
    if inputs.quota is not None:        # the pools within the budget *and* the vCPU quotas
        keep = inputs.quota.within(counts, allowed)
        counts, cost = counts[keep], cost[keep]
    col = {t: j for j, t in enumerate(allowed)}
    u = counts[:, col[ba.base_type]]
    v = counts[:, [col[t] for t in ba.aux_types]] if ba.aux else np.zeros((len(u), 0))
    bound = upper_bounds(u, v, ba.params)
    return rank_pools(allowed, counts, cost, bound)


def maximal_pools(ranking: Ranking, inputs: PlanInputs) -> np.ndarray:
    """Mask of the ranked pools beside which no further instance of any allowed type fits (budget,
    per-type maxima and vCPU quotas): exactly the pools no other pool within them dominates."""
    if len(ranking) == 0:
        return np.zeros(0, dtype=bool)
    price = np.array([inputs.prices[t] for t in ranking.types], dtype=float)
    cap = np.array([inputs.bounds.get(t, (0, None))[1] for t in ranking.types], dtype=object)
    hi = np.array([np.inf if c is None else float(c) for c in cap], dtype=float)
    room = ranking.counts < hi[None, :]
    if inputs.quota is not None:        # and within its family's vCPU quota
        room &= inputs.quota.room(ranking.counts, ranking.types)
    add = np.where(room, price[None, :], np.inf).min(axis=1)
    return ranking.cost + add > inputs.budget_per_hour + BUDGET_EPS


def undominated(ranking: Ranking, inputs: PlanInputs, idx: int, maximal: np.ndarray | None = None) -> int:
    """Row of the highest-bound maximal pool holding at least row ``idx``'s count of every type
    with a bound no lower than row ``idx``'s (row ``idx`` itself when it is maximal or none is)."""
    mask = maximal_pools(ranking, inputs) if maximal is None else maximal
    if mask[idx]:
        return idx
    hit = np.flatnonzero(mask & np.all(ranking.counts >= ranking.counts[idx], axis=1)
                         & (ranking.bound >= ranking.bound[idx]))
    return int(hit[0]) if hit.size else idx


def _full_pool(inputs: PlanInputs, ranking: Ranking, i: int) -> dict[str, int]:
    got = ranking.pool(i)
    return {t: got.get(t, 0) for t in inputs.types}


def _checked_min_cost(ranking: Ranking, ok: np.ndarray, meets: Meets, max_checks: int, inputs: PlanInputs,
                      base_type: str) -> tuple[int, str, bool]:
    """Cheapest candidate that ``meets`` accepts (see choose_pool); ties by higher bound."""
    order = ok[np.lexsort((-ranking.bound[ok], np.round(ranking.cost[ok], 9)))]
    failed: list[np.ndarray] = []
    checks = 0
    for i in order:
        counts = ranking.counts[i]
        if any(bool(np.all(counts <= f)) for f in failed):
            continue
        if checks >= max_checks:
            break
        checks += 1
        if meets(_full_pool(inputs, ranking, int(i)), base_type):
            return int(i), "min-cost-checked", False
        failed.append(counts)
    # No candidate verified within the checks: the largest-bound pool within budget, flagged.
    return 0, "min-cost-unmet", True


KEEP_WITHIN = 0.10


def _memo(meets: Meets) -> Meets:
    """``meets`` answering each (pool, base type) once."""
    seen: dict[tuple[tuple[tuple[str, int], ...], str], bool] = {}

    def check(pool: dict[str, int], base: str) -> bool:
        key = (tuple(sorted((t, n) for t, n in pool.items() if n)), base)
        if key not in seen:
            seen[key] = meets(pool, base)
        return seen[key]
    return check


def _keep_current(ranking: Ranking, current: Mapping[str, int], need: float, max_cost: float, idx: int) -> int | None:
    """Row of ``current`` in the ranking when it differs from row ``idx``, covers ``need`` by its
    bound, costs at most ``max_cost`` and row ``idx`` is no part of it (reaching the pick would
    launch an instance); None otherwise (also when it is not a ranked pool)."""
    cols = {t: j for j, t in enumerate(ranking.types)}
    if any(n > 0 and t not in cols for t, n in current.items()):
        return None
    vec = np.zeros(len(ranking.types), dtype=ranking.counts.dtype)
    for t, n in current.items():
        if n > 0:
            vec[cols[t]] = n
    rows = np.flatnonzero(np.all(ranking.counts == vec, axis=1))
    if not rows.size or int(rows[0]) == idx:
        return None
    r = int(rows[0])
    if bool(np.all(ranking.counts[idx] <= vec)):
        return None     # the pick is a part of the pool held: retiring the rest launches nothing
    if ranking.bound[r] >= need and ranking.bound[r] > 0 and ranking.cost[r] <= max_cost + BUDGET_EPS:
        return r
    return None


def choose_pool(
    inputs: PlanInputs,
    objective: Objective = "max_throughput",
    demand_qps: float = 0.0,
    headroom: float = 0.1,
    top_k: int = 10,
    meets: Meets | None = None,
    max_checks: int = 12,
    current: Mapping[str, int] | None = None,
    keep_within: float = KEEP_WITHIN,
    exhaustive: bool = False,
) -> Plan:
    """The planner's decision for one model (pure). Raises PlanError / NoFeasibleBase.

    ``meets`` (min_cost only) verifies a candidate under the planner's base type (the base the
    dispatcher will use): True when the pool holds the SLO at
    ``demand_qps * (1 + headroom)`` (the daemon passes a short simulation, ``sim.slo_check``). The
    upper bound is a fluid bound without queueing, so without a check a pool run near its bound
    misses a p99 target. Candidates (bound >= need) are checked cheapest first; a sub-pool of a pool
    that failed is skipped unchecked (capacity grows with instances); at most ``max_checks`` checks.

    ``current`` (min_cost): the pool held now. It is kept (rule ``min-cost-kept``) when it still
    covers the demand (bound, and ``meets`` when given) and costs at most ``keep_within`` (10 %)
    more than the pick: swapping instance types for a small saving costs launches, boot time and
    churn, and a demand estimate moving by a few percent would otherwise flip between pools. A pick
    that is part of the pool held (fewer instances, no new type) is never passed over for it: the
    move only retires instances (no launch, no boot), and past seven r5n.large one of them is under
    10 % of the pool's cost, so a falling load kept it until the pick was two instances smaller.

    Above ``SEARCH_ABOVE`` pools within budget the same decision is made by the exact pool search
    (``scaler.planner.choose_by_search``) instead of ranking every pool (and by the ranking after all, up to
    ``DEFAULT_POOL_LIMIT`` pools, should a search pass exceed its work limit); ``exhaustive``
    forces the ranking.
    """
    if objective not in ("max_throughput", "min_cost"):
        raise PlanError(f"unknown objective {objective!r}")
    if meets is not None:
        meets = _memo(meets)   # the held pool may be checked twice (a simulation each)
    if not exhaustive:
        ba = base_aux_of(inputs)
        space = pool_space(inputs, ba)
        n_pools = count_pools(space)
        if n_pools > SEARCH_ABOVE:
            try:
                return choose_searched(inputs, ba, space, n_pools, objective, demand_qps, headroom, top_k, meets,
                                       max_checks, current, keep_within)
            except SearchTooLarge:
                if n_pools > DEFAULT_POOL_LIMIT:
                    raise           # neither way: one line
                # a search past its work limit where ranking every pool still can: rank them
        ranking = _ranking(inputs, ba, n_pools)        # the split and the count made once
    else:
        ba, ranking = rank_inputs(inputs)
    if len(ranking) == 0:
        raise no_pool_fits(inputs)
    demand_unmet = False
    if objective == "max_throughput":
        idx, rule = similarity_pick(ranking.counts, ranking.types.index(ba.base_type))
        idx = undominated(ranking, inputs, idx)
        if ranking.bound[idx] <= 0 < ranking.bound[0]:
            # a budget of a base instance or two: the top ten are mostly pools without one (bound 0,
            # they serve none of the mix within QoS); the pick is then the highest bound
            idx, rule = undominated(ranking, inputs, 0), "max-bound"
    else:
        need = demand_qps * (1.0 + headroom)
        ok = np.flatnonzero((ranking.bound >= need) & (ranking.bound > 0))
        if not ok.size:
            idx, rule, demand_unmet = 0, "min-cost-unmet", True
        elif meets is None:
            idx, rule = int(ok[np.argmin(np.round(ranking.cost[ok], 9))]), "min-cost"
        else:
            idx, rule, demand_unmet = _checked_min_cost(ranking, ok, meets, max_checks, inputs, ba.base_type)
        if current is not None and not demand_unmet:
            kept = _keep_current(ranking, current, need, float(ranking.cost[idx]) * (1.0 + keep_within), idx)
            if kept is not None and (meets is None or meets(_full_pool(inputs, ranking, kept), ba.base_type)):
                idx, rule = kept, "min-cost-kept"
    k = max(int(top_k), 0)
    return Plan(
        model=inputs.model,
        budget_per_hour=inputs.budget_per_hour,
        base_type=ba.base_type,
        chosen=_full_pool(inputs, ranking, idx),
        cost_per_hour=float(ranking.cost[idx]),
        upper_bound_qps=float(ranking.bound[idx]),
        rule=rule,
        pools_ranked=len(ranking),
        ranked=[(_full_pool(inputs, ranking, i), float(ranking.cost[i]), float(ranking.bound[i]))
                for i in range(min(k, len(ranking)))],
        aux={a.instance_type: {"s": a.s, "f": a.f} for a in ba.aux},
        demand_unmet=demand_unmet,
    )


__all__ = ["KEEP_WITHIN", "SEARCH_ABOVE", "choose_pool", "maximal_pools", "rank_inputs", "undominated"]
