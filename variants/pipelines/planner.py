"""The pipeline planner (Loki §4, issue #26): hardware scaling first, accuracy scaling when the
workers run out. Pure: the pipeline, each task's variants and profiles, the workers and the demand
come in; a :class:`PipelinePlan` goes out.

**Workers and batches.** A worker hosts one variant of one task. On instance type t, variant k of
task i may run batch b when its latency there is at most half the pipeline's SLO; it then serves
b / latency queries per second (Loki Eq. 5; Proteus's capacity rule). Loki plans homogeneous
servers; here the pool is heterogeneous, so the unit of the plan is (task, variant, type, batch):
X workers of that kind (integer), each serving q(i, k, t, b).

**Latency** (Loki Eq. 4-7, with the SLO halved for queueing as the paper does). Each task gets a
latency budget l_i, one of its kinds' latencies (a binary per level, one chosen), and runs only the
(variant, type, batch) kinds whose latency is within it (X_k <= N_t Σ_{l >= latency_k} y_{i,l}: the
cumulative form, whose relaxation is tighter than a binary per kind with l_i >= latency x W: step
2's accuracy solve on 20 workers of two resnet-family tasks went from 1.4 to 0.7 s on HiGHS); along every root-to-leaf path of the tree the
budgets sum to at most SLO/2. This constrains the task tree's paths, each with its slowest kind in
use; Loki constrains each augmented path that carries traffic. The two agree when each task runs
one variant (step 1) and ours is the more cautious otherwise (a slow variant on a path that carries
nothing still counts). The budgets are what early dropping checks against (Loki §4.2, §5.2).

**Routing** (Loki Eq. 1-2, 12): c(π) >= 0 is the fraction of root queries routed along prefix π of
the augmented graph (:mod:`config.sections.pipeline_graph`); at each task the prefixes' traffic is split
over the child's variants (Σ_k' c(π + (j, k')) = c(π) for every child j), and the rate a variant
receives, D Σ c(π) m(π) over the prefixes ending at it, is at most what its workers serve.

**The two steps** (Loki §4.1), each a MILP solved with PuLP/CBC or HiGHS (:mod:`variants.accuracy.milp`):

1. *Hardware scaling*: every task on its most accurate variant, all demand served, the fewest
   workers. When that fits the workers, it is the plan (``step = "hardware"``).
2. *Accuracy scaling*, otherwise, over every variant: lexicographically, the most demand served
   (Loki assumes it all is; past what the pool can serve at any accuracy we serve what we can),
   then the highest end-to-end accuracy (Σ_p c(p) Â(p), Â the product of the path's accuracies,
   the tree's leaves weighted alike), as Loki's step 2; it runs only when the pool is short, so it
   does not look for fewer workers (that third solve doubled its time for plans that use every
   worker anyway). Step 1 then takes, among plans with its fewest workers, the smallest latency
   budgets (lower latency; slack for queueing and early dropping). A path whose end-to-end accuracy is
   below the pipeline's ``min_accuracy`` carries nothing.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Mapping, Sequence

from variants.accuracy.milp import REL_TOL, Milp, solve
from variants.accuracy.planner import VariantProfile
from variants.accuracy import milp as accuracy_milp
from config.sections.pipeline_graph import Pipeline

Prefix = tuple[tuple[str, str], ...]
#: (task, variant, instance type, batch)
Kind = tuple[str, str, str, int]
DEFAULT_TIME_LIMIT_S = 10.0
#: Step 2 stops within this much of the best end-to-end accuracy (a fraction: 1e-4 is 0.01 points):
#: proving the last hundredth of a point took most of a solve's time (bench/variants/pipeline_bench.py)
ACCURACY_GAP = 1e-4
#: How much of the served fraction and of the end-to-end accuracy (both per root query, at most 1)
#: the later steps may give up: the solvers' feasibility tolerance, far below what a placement changes
HOLD_TOL = 1e-7


@dataclass(frozen=True)
class PipelinePlan:
    """``step``: "hardware" (step 1 fitted) or "accuracy" (step 2); ``workers``: kind -> count;
    ``routing``: prefix -> fraction of root queries; ``served``: fraction of the root demand served;
    ``accuracy``: end-to-end accuracy over the served queries (None: nothing served);
    ``budgets_ms``: each task's latency budget; ``task_qps``: the requests each task receives."""

    step: str
    workers: dict[Kind, int]
    routing: dict[Prefix, float]
    served: float
    accuracy: float | None
    budgets_ms: dict[str, float]
    task_qps: dict[str, float]
    status: str
    solve_ms: float

    @property
    def total_workers(self) -> int:
        return sum(self.workers.values())

    def by_type(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for (_, _, t, _), n in self.workers.items():
            out[t] = out.get(t, 0) + n
        return out


def _kinds(pipe: Pipeline, variants: Mapping[str, Sequence[VariantProfile]], pool: Mapping[str, int]
           ) -> list[tuple[Kind, float, float]]:
    """(kind, latency ms, q/s) for every batch within SLO/2 on a type of the pool."""
    out = []
    for task in pipe.tasks:
        for v in variants[task]:
            for t in sorted(pool):
                fits = [(float(lat), b * 1000.0 / lat, int(b)) for b, lat in v.latency_ms.get(t, {}).items()
                        if pool[t] > 0 and 0 < lat <= pipe.slo_ms / 2.0]
                # a batch another batch beats on both latency and throughput is never needed (exact)
                for lat, q, b in sorted(fits):
                    if not any((l2 <= lat and q2 >= q) and (l2, q2) != (lat, q) for l2, q2, _ in fits):
                        out.append(((task, v.variant, t, b), lat, q))
    return out


def top_variants(variants: Mapping[str, Sequence[VariantProfile]]) -> dict[str, str]:
    """Each task's most accurate variant (ties: the first by name)."""
    return {t: min(vs, key=lambda v: (-v.accuracy, v.variant)).variant for t, vs in variants.items()}


def _path_accuracy(prefix: Prefix, acc: Mapping[tuple[str, str], float]) -> float:
    return math.prod(acc[tv] for tv in prefix)


def _solve_step(pipe: Pipeline, variants: Mapping[str, Sequence[VariantProfile]], pool: Mapping[str, int],
                root_qps: float, allowed: Mapping[str, Sequence[str]], hardware: bool, deadline: float,
                solver: str, accuracy_gap: float = 0.0, split: Mapping[str, Mapping[str, int]] | None = None
                ) -> tuple[dict[Kind, int], dict[Prefix, float], str] | None:
    acc = {(t, v.variant): v.accuracy for t, vs in variants.items() for v in vs}
    kinds = [k for k in _kinds(pipe, variants, pool) if k[0][1] in allowed[k[0][0]]]
    prefixes = list(pipe.prefixes(allowed))
    leaves = pipe.leaves()
    m = Milp()
    x = [m.column(0, pool[k[2]], True) for k, _, _ in kinds]
    # each task's budget is one of its kinds' latencies (or 0: no worker), y_{i,l} = 1 for the one
    # chosen; a kind may have workers only when its latency is within the chosen level (the
    # cumulative form: X_k <= N_t Σ_{l >= lat_k} y_{i,l}, tighter than one binary per kind)
    levels = {t: sorted({0.0} | {lat for k, lat, _ in kinds if k[0] == t}) for t in pipe.tasks}
    y = {(t, lv): m.column(0, 1, True) for t in pipe.tasks for lv in levels[t]}
    budget = {t: {y[(t, lv)]: lv for lv in levels[t]} for t in pipe.tasks}
    for t in pipe.tasks:
        m.row({y[(t, lv)]: 1.0 for lv in levels[t]}, 1.0, 1.0)
    full = {p: p[-1][0] in leaves and _path_accuracy(p, acc) < pipe.min_accuracy - 1e-12 for p in prefixes}
    c = {p: m.column(0, 0.0 if full[p] else 1.0, False) for p in prefixes}
    for i, (k, lat, _) in enumerate(kinds):                                     # X <= N_t Σ_{l >= lat} y
        m.row({x[i]: 1.0, **{y[(k[0], lv)]: -float(pool[k[2]]) for lv in levels[k[0]] if lv >= lat}}, -math.inf, 0.0)
    for leaf in leaves:                                                          # Σ l_i <= SLO/2
        row: dict[int, float] = {}
        for t in pipe.path_to(leaf):
            row.update(budget[t])
        m.row(row, -math.inf, pipe.slo_ms / 2.0)
    for t in sorted(pool):
        idx = {x[i]: 1.0 for i, (k, _, _) in enumerate(kinds) if k[2] == t}
        if idx:
            m.row(idx, -math.inf, pool[t])
    for task, by_type in (split or {}).items():                                  # each task's own workers
        for t in sorted(pool):
            idx = {x[i]: 1.0 for i, (k, _, _) in enumerate(kinds) if k[0] == task and k[2] == t}
            if idx:
                m.row(idx, -math.inf, float(by_type.get(t, 0)))
    for p in prefixes:                                                           # conservation
        task = p[-1][0]
        for e in pipe.edges.get(task, ()):
            m.row({c[p]: -1.0, **{c[p + ((e.child, v),)]: 1.0 for v in allowed[e.child]}}, 0.0, 0.0)
    for task in pipe.tasks:                                                      # capacity (Eq. 2)
        for v in allowed[task]:
            coef: dict[int, float] = {c[p]: root_qps * pipe.multiplier(p) for p in prefixes if p[-1] == (task, v)}
            for i, (k, _, q) in enumerate(kinds):
                if k[0] == task and k[1] == v:
                    coef[x[i]] = coef.get(x[i], 0.0) - q
            m.row(coef, -math.inf, 0.0)
    roots = {c[p]: 1.0 for p in prefixes if len(p) == 1}
    m.row(roots, -math.inf, 1.0)
    fewest = {j: -1.0 for j in x}
    quickest = {j: -lv for t in pipe.tasks for j, lv in budget[t].items()}
    tol = REL_TOL

    def then_quickest(best: list[float], proven: bool) -> tuple[list[float], bool]:
        """With the workers held, the smallest latency budgets (the slack early dropping keeps)."""
        m.row(fewest, sum(-best[j] for j in x) - 0.5, math.inf)
        ans = solve(m, quickest, None if solver == "highs" else best, deadline, 1e-6, solver)
        return (ans.values, proven and ans.proven) if ans.values is not None else (best, False)

    if hardware:
        m.row(roots, 1.0, 1.0)                          # all demand served
        ans = solve(m, fewest, None, deadline, 0.5, solver)
        if ans.values is None:
            return None
        best, proven = then_quickest(ans.values, ans.proven)
        status = "optimal" if proven else "time_limit"
    else:
        first = solve(m, roots, None, deadline, tol / 10, solver)                 # a. serve the most
        if first.values is None:
            return None
        served = sum(first.values[j] for j in roots)
        m.row(roots, 1.0 if served >= 1.0 - tol else served - HOLD_TOL, math.inf)   # all of it: exactly
        e2e = {c[p]: _path_accuracy(p, acc) / len(leaves) for p in prefixes if p[-1][0] in leaves}
        second = solve(m, e2e, first.values, deadline, max(accuracy_gap, tol / 10), solver,
                       accuracy_milp.ACCURACY_SHARE)                                # b. most accurate
        best, proven = (second.values, first.proven and second.proven) if second.values is not None else (first.values, False)
        status = "optimal" if proven else "time_limit"
    workers = {k: int(round(best[x[i]])) for i, (k, _, _) in enumerate(kinds) if round(best[x[i]]) > 0}
    routing = {p: max(0.0, best[c[p]]) for p in prefixes if best[c[p]] > 1e-9}
    return workers, routing, status


def plan_pipeline(pipe: Pipeline, variants: Mapping[str, Sequence[VariantProfile]], pool: Mapping[str, int],
                  root_qps: float, time_limit_s: float = DEFAULT_TIME_LIMIT_S, solver: str | None = None,
                  accuracy_gap: float = ACCURACY_GAP, split: Mapping[str, Mapping[str, int]] | None = None
                  ) -> PipelinePlan:
    """Loki's two steps over ``pool`` ({type: workers}) for ``root_qps`` entering the root. ValueError
    for a task with no variant, a demand that is not a finite number >= 0, or an empty pool.
    ``accuracy_gap``: how far below the best end-to-end accuracy step 2 may stop (0: proven best).
    ``split`` (task -> type -> workers): each task may use at most its own workers (the plan that
    moves none between tasks)."""
    t0 = time.perf_counter()
    for task in pipe.tasks:
        if not variants.get(task):
            raise ValueError(f"task {task!r} of pipeline {pipe.name!r} has no variant")
    if not (math.isfinite(root_qps) and root_qps >= 0):
        raise ValueError(f"demand must be a finite number >= 0, got {root_qps!r}")
    if not any(n > 0 for n in pool.values()):
        raise ValueError("the pool has no worker")
    solver = solver or accuracy_milp.SOLVER
    deadline = t0 + time_limit_s
    tops = top_variants(variants)
    step = "hardware"
    out = _solve_step(pipe, variants, pool, root_qps, {t: [v] for t, v in tops.items()}, True, deadline, solver,
                      split=split)
    if out is None:
        step = "accuracy"
        out = _solve_step(pipe, variants, pool, root_qps, {t: [v.variant for v in vs] for t, vs in variants.items()},
                          False, deadline, solver, accuracy_gap, split)
    if out is None:
        return PipelinePlan("accuracy", {}, {}, 0.0, None, {}, {t: 0.0 for t in pipe.tasks}, "no_solution",
                            (time.perf_counter() - t0) * 1000.0)
    workers, routing, status = out
    acc = {(t, v.variant): v.accuracy for t, vs in variants.items() for v in vs}
    lat = {k: lt for k, lt, _ in _kinds(pipe, variants, pool)}
    budgets = {t: max((lat[k] for k in workers if k[0] == t), default=0.0) for t in pipe.tasks}
    served = sum(f for p, f in routing.items() if len(p) == 1)
    leaves = pipe.leaves()
    e2e = sum(f * _path_accuracy(p, acc) for p, f in routing.items() if p[-1][0] in leaves) / len(leaves)
    task_qps = {t: root_qps * sum(f * pipe.multiplier(p) for p, f in routing.items() if p[-1][0] == t)
                for t in pipe.tasks}
    return PipelinePlan(step, workers, routing, served, (e2e / served if served > 0 else None), budgets, task_qps,
                        status, (time.perf_counter() - t0) * 1000.0)


__all__ = ["DEFAULT_TIME_LIMIT_S", "Kind", "PipelinePlan", "Prefix", "plan_pipeline", "top_variants"]
