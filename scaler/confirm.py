"""Confirming the max_throughput pick by evaluation (Kairos §5.2 Algorithm 1, Kairos+; issue 16).

The similarity pick (``scaler.plan``) is made from upper bounds alone; the bound is a fluid bound
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
``sim.pick_eval.confirmation``): the daemon in a background process (``daemon.pick_confirmer``),
caching each answer per planning question (``scaler.pick_cache``), the replay in line.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from scaler.plan import Plan, PlanInputs, choose_pool, maximal_pools, rank_inputs
from scaler.upper_bound import Ranking

Evaluate = Callable[[dict[str, int]], float]
#: evaluations a confirmation may spend by default (pick, homogeneous, one more base, Kairos+)
DEFAULT_EVALUATIONS = 4


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


def confirm_pick(inputs: PlanInputs, evaluate: Evaluate, max_evaluations: int = DEFAULT_EVALUATIONS,
                 top_k: int = 10) -> Confirmation:
    """The max_throughput pick, confirmed by at most ``max_evaluations`` (>= 2) evaluations."""
    if max_evaluations < 2:
        raise ValueError("max_evaluations must be >= 2 (the pick and the homogeneous pool)")
    plan = choose_pool(inputs, "max_throughput", top_k=top_k)
    ba, ranking = rank_inputs(inputs)
    measured: dict[int, float] = {}
    order: list[int] = []

    def measure(i: int) -> float:
        if i not in measured:
            measured[i] = float(evaluate({t: int(c) for t, c in zip(ranking.types, ranking.counts[i]) if c}))
            order.append(i)
        return measured[i]

    key = {t: plan.chosen.get(t, 0) for t in ranking.types}
    pick_i = int(np.flatnonzero(np.all(ranking.counts == np.array([key[t] for t in ranking.types]), axis=1))[0])
    measure(pick_i)
    homo_i = homogeneous_row(ranking, ba.base_type)
    if homo_i is not None:
        measure(homo_i)
    maximal = maximal_pools(ranking, inputs)
    more_i = more_base_row(ranking, ba.base_type, pick_i, maximal)
    if more_i is not None and len(measured) < max_evaluations:
        measure(more_i)
    # Kairos+ (Algorithm 1) over the maximal pools: none is a sub-pool of another, so only the
    # bound test prunes; already measured pools cost nothing
    for i in np.flatnonzero(maximal).tolist():
        best = max(measured.values())
        if ranking.bound[i] <= best or (len(measured) >= max_evaluations and i not in measured):
            break
        measure(i)
    win = max(order, key=lambda i: (measured[i], -order.index(i)))
    rule = (plan.rule if win == pick_i else "homogeneous" if win == homo_i else "more-base" if win == more_i
            else "kairos+")
    chosen = {t: 0 for t in inputs.types}
    chosen.update({t: int(c) for t, c in zip(ranking.types, ranking.counts[win])})
    confirmed = replace(plan, chosen=chosen, cost_per_hour=float(ranking.cost[win]),
                        upper_bound_qps=float(ranking.bound[win]), rule=f"confirmed:{rule}")
    return Confirmation(
        plan=confirmed, pick_qps=measured[win], similarity_qps=measured[pick_i],
        homogeneous=ranking.pool(homo_i) if homo_i is not None else {},
        homogeneous_qps=measured[homo_i] if homo_i is not None else 0.0,
        evaluated=tuple((ranking.pool(i), measured[i]) for i in order),
    )

