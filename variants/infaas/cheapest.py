"""Cheapest combination of variants for a load and an SLO (INFaaS §2.2, Tables 2-3): integer
replica counts n_j minimising sum_j C_j n_j subject to sum_j Q_j n_j >= qps (1 + headroom), using
only variants with latency_ms <= slo_ms (and optional resource limits).

It is the model-autoscaler problem of INFaaS §4.2.1 for one architecture with nothing running,
so both solvers are the autoscaler's own: :func:`variants.infaas.autoscale_ilp.solve_ilp` (exact) and
:func:`variants.infaas.autoscale_greedy.fill_greedy` (the greedy fill). Used by ``costscale variants plan``.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Literal, Mapping, Sequence

from variants.infaas.autoscale_greedy import fill_greedy
from variants.infaas.autoscale_ilp import QPS_TOL, ScalingProblem, ScalingVariant, solve_ilp

Solver = Literal["ilp", "greedy"]
_MODEL = "model"
_POOL = "pool"


@dataclass(frozen=True)
class Combination:
    counts: Mapping[str, int]          # every variant, 0 when unused
    cost_per_second: float             # sum C n
    capacity_qps: float                # sum Q n
    solver: str
    solve_ms: float = 0.0


class NoCombination(ValueError):
    """No combination meets the SLO and load (one line: names the reason)."""


def cheapest(
    variants: Sequence[ScalingVariant],
    qps: float,
    slo_ms: float,
    headroom: float = 0.0,
    solver: Solver = "ilp",
    limits: Mapping[str, float] | None = None,
    lam: float = 0.0,
) -> Combination:
    """The cheapest replica counts (``solver`` "ilp": optimal; "greedy": the greedy fill).

    ``limits`` caps the summed ``resources`` of the chosen replicas (e.g. {"gpu": 2}); ``lam``
    adds INFaaS's loading-latency weight C lambda T_load per replica to the objective (the
    reported cost stays sum C n)."""
    if qps < 0 or not math.isfinite(qps):
        raise ValueError("qps must be a finite number >= 0")
    if headroom < 0:
        raise ValueError("headroom must be >= 0")
    names = [v.name for v in variants]
    if len(set(names)) != len(names):
        raise ValueError("variant names must be unique")
    pooled = tuple(replace(v, model=_MODEL, hardware=_POOL) for v in variants)
    ok = [v for v in pooled if v.latency_ms <= slo_ms]
    if not ok:
        fastest = min(variants, key=lambda v: (v.latency_ms, v.name), default=None)
        hint = f" (fastest: {fastest.name} at {fastest.latency_ms:g} ms)" if fastest else ""
        raise NoCombination(f"no variant meets the SLO of {slo_ms:g} ms{hint}")
    problem = ScalingProblem(
        variants=pooled, load_qps={_MODEL: qps}, slo_ms={_MODEL: slo_ms},
        capacity={_POOL: dict(limits)} if limits else {}, headroom=headroom, lam=lam)
    t0 = time.perf_counter()
    if solver == "ilp":
        plan = solve_ilp(problem)
        if not plan.feasible:
            raise NoCombination(f"no combination within the resource limits reaches "
                                f"{problem.required(_MODEL):g} qps")
        counts = dict(plan.counts)
    elif solver == "greedy":
        got, left = fill_greedy(ok, problem.required(_MODEL), problem.capacity, lam)
        if left > QPS_TOL:
            raise NoCombination(f"the greedy fill cannot reach {problem.required(_MODEL):g} qps "
                                f"within the resource limits ({left:g} qps short)")
        counts = {v.name: got.get(v.name, 0) for v in variants}
    else:
        raise ValueError(f"unknown solver {solver!r}")
    ms = (time.perf_counter() - t0) * 1000.0
    return Combination(
        counts={v.name: int(counts.get(v.name, 0)) for v in variants},
        cost_per_second=sum(v.cost_per_second * counts.get(v.name, 0) for v in variants),
        capacity_qps=sum(v.saturation_qps * counts.get(v.name, 0) for v in variants),
        solver=solver,
        solve_ms=ms,
    )
