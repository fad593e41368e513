"""The simulator as Kairos+'s evaluator (Kairos §5.2 Algorithm 1, "eval = f(x)"; issue 16).

:func:`capacity_evaluator` returns ``evaluate(pool) -> allowable q/s``: the highest Poisson rate at
which the pool, served by the dispatcher's policy with the planner's base type, keeps p99 <= QoS
(``sim.capacity.pool_capacity``), on one seeded sequence of ``n_queries`` queries whose batch sizes
are drawn from the planner's batch mix (common random numbers: every pool sees the same queries,
deterministic per seed). ``scaler.planner.confirm.confirm_pick`` takes it as its ``evaluate``.

Cost: one evaluation is a bisection between half the pool's fluid LP bound and the bound itself
(``sim.oracle`` with drain = QoS bounds every policy on these queries, so the search needs no
bracketing), about 4-5 simulations of ``n_queries`` queries (1,000 by default), each stopped as
soon as more than 1% of the queries missed the QoS (the rate is then decided): a few hundred ms on
one core for a 10-20 instance pool.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from config.profiles import ProfileTable
from scaler.planner.batch_mix import BatchMix
from scaler.planner.confirm import DEFAULT_EVALUATIONS, Confirmation, confirm_pick
from scaler.planner.plan_inputs import Plan, PlanInputs, ToConfirm, base_aux_of
from sim.capacity import bisect_rate, pool_capacity
from sim.oracle import oracle_capacity
from sim.policies import policy_factory
from sim.slo_check import batches_from_mix, holds_p99
from sim.workload import Workload

#: queries per simulated rate, and the search's relative precision, of a planning evaluation
EVAL_QUERIES = 1000
EVAL_PRECISION = 0.05
#: the bisection's lower start, as a share of the fluid LP bound (measured picks reach 0.8-0.95 of it)
LOW_START = 0.7


def mix_workload(mix: BatchMix, n_queries: int, seed: int = 0) -> Workload:
    """``n_queries`` unit-rate Poisson arrivals ending at ``n_queries`` with batches from ``mix``."""
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(1.0, n_queries))
    t *= n_queries / t[-1]
    return Workload(t, batches_from_mix(mix, n_queries, rng))


def capacity_evaluator(model: str, profiles: ProfileTable, qos_ms: float, mix: BatchMix, *, policy: str,
                       base_type: str | None = None, n_queries: int = EVAL_QUERIES,
                       precision: float = EVAL_PRECISION, seed: int = 0) -> Callable[[dict[str, int]], float]:
    """``evaluate(pool)``: the pool's allowable throughput under ``policy`` (see module doc)."""
    wl = mix_workload(mix, n_queries, seed)

    def evaluate(pool: dict[str, int]) -> float:
        live = {t: int(c) for t, c in pool.items() if c > 0}
        if not live or any(not profiles.has(model, t) for t in live):
            return 0.0
        make = policy_factory(policy, profiles, model, live, base_type=base_type)

        def holds(rate: float) -> bool:
            return holds_p99(live, model, profiles, make(), wl.arrivals / rate, wl.batches, qos_ms, seed=seed)

        bound = oracle_capacity(live, model, profiles, qos_ms, wl.batches, drain_s=qos_ms / 1000.0).allowable_qps
        if bound <= 0:
            return 0.0
        lo = LOW_START * bound
        if not holds(lo):                  # far below the bound: the generic bracketing search
            return pool_capacity(live, model, profiles, qos_ms, make, workload=wl, seed=seed, precision=precision,
                                 start_qps=lo / 2).allowable_qps
        return bisect_rate(holds, lo, bound, precision)

    return evaluate



def confirmation(inputs: PlanInputs, policy: str, evaluations: int = DEFAULT_EVALUATIONS, top_k: int = 10,
                 base_type: str | None = None, exhaustive: bool = False) -> Confirmation:
    """The max_throughput pick for ``inputs`` confirmed by Kairos+ (``scaler.planner.confirm.confirm_pick``)
    with :func:`capacity_evaluator` under ``policy`` and the planner's base type (``costscale plan
    --confirm``, the daemon's confirmer in a process of its own, the replay in line: plain data in
    and out, so it pickles). ``exhaustive``: candidates from the ranked list of every pool, never
    the pool search."""
    if base_type is None:
        base_type = base_aux_of(inputs).base_type
    table = ProfileTable({(inputs.model, t): p for t, p in inputs.profiles.items()})
    evaluate = capacity_evaluator(inputs.model, table, inputs.qos_ms, inputs.mix, policy=policy, base_type=base_type)
    return confirm_pick(inputs, evaluate, evaluations, top_k=top_k, exhaustive=exhaustive)


def confirmed_plan(todo: ToConfirm) -> Plan:
    """The answer to a fleet decision's ``Plan.confirm``: :func:`confirmation`'s plan (what the fleet holds)."""
    return confirmation(todo.inputs, todo.policy, todo.evaluations, base_type=todo.base_type).plan
