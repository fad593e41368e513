"""The model-autoscaler ILP (INFaaS §4.2.1, "Formulation"), solved with PuLP/CBC.

Decision variable: delta_ij, the integer number of instances of variant j of architecture i to
load (>0: replicate, or upgrade/downgrade when the variant is not running yet) or unload (<0).

    minimise   sum_ij C_ij * (delta_ij + lambda * T_load_ij * max(delta_ij, 0))
    subject to (1) sum_j Q_ij (N_ij + delta_ij) >= L_i * (1 + headroom)   for each architecture i
               (2) delta_ij <= 0 where T_inf_ij > S_i     (only SLO-meeting variants are loaded)
               (3) sum_ij R^type_ij (N_ij + delta_ij) <= R^type_total     per hardware, per type
               (4) N_ij + delta_ij >= 0

max(delta, 0) is linearised with a continuous auxiliary u_ij >= delta_ij, u_ij >= 0 (the objective
weight C * lambda * T_load is non-negative, so u_ij = max(delta_ij, 0) at the optimum). The
"slack" of (1) is written as a fraction of the load, ``headroom``; headroom 0.05 is INFaaS's
slack-threshold 1.05 (§5). Resources are pooled per hardware class (one pool per worker when the
caller solves one worker's problem, as INFaaS does).

This module also holds the plain data shared with the greedy heuristic: the problem, the
Load/Unload decisions a worker applies, and the resulting plan.
"""
from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, field
from typing import Mapping, Union

import pulp

#: lambda (1/s) of the objective: weight of loading latency vs hardware cost. INFaaS leaves it
#: tunable (large for spiky load); ours: a 10 s load adds 10 % to the cost of the action.
DEFAULT_LAMBDA = 0.01
#: INFaaS §5: slack-threshold 1.05.
DEFAULT_HEADROOM = 0.05
#: Capacity tolerance (qps) when checking constraint (1): CBC accepts solutions within its own
#: feasibility tolerance (about 1e-5 absolute), so capacities within a thousandth of a query per
#: second of the load count as meeting it. The ILP itself asks for need - QPS_TOL / 2 (retrying at
#: need - 0.9 QPS_TOL when CBC rejects its own near-boundary solution), inside the check.
QPS_TOL = 1e-3


@dataclass(frozen=True)
class ScalingVariant:
    """A variant as the autoscaler sees it (INFaaS Table 2 columns + loading latency, resources)."""

    name: str
    model: str
    hardware: str
    latency_ms: float                 # T_inf: profiled inference latency
    saturation_qps: float             # Q: saturation throughput of one instance
    cost_per_second: float            # C: hardware cost of one instance, $/s
    load_latency_s: float = 0.0       # T_load
    resources: Mapping[str, float] = field(default_factory=dict)  # R^type per instance

    def __post_init__(self) -> None:
        if not self.saturation_qps > 0:
            raise ValueError(f"variant {self.name}: saturation_qps must be > 0")
        if self.cost_per_second < 0 or self.latency_ms < 0 or self.load_latency_s < 0:
            raise ValueError(f"variant {self.name}: latency, cost and load latency must be >= 0")


@dataclass(frozen=True)
class ScalingProblem:
    variants: tuple[ScalingVariant, ...]
    load_qps: Mapping[str, float]                   # L_i per architecture
    slo_ms: Mapping[str, float]                     # S_i per architecture
    running: Mapping[str, int] = field(default_factory=dict)                    # N_ij per variant
    capacity: Mapping[str, Mapping[str, float]] = field(default_factory=dict)   # hardware -> type -> total
    headroom: float = DEFAULT_HEADROOM
    lam: float = DEFAULT_LAMBDA

    def __post_init__(self) -> None:
        names = [v.name for v in self.variants]
        if len(set(names)) != len(names):
            raise ValueError("variant names must be unique")
        if self.headroom < 0 or self.lam < 0:
            raise ValueError("headroom and lam must be >= 0")

    def required(self, model: str) -> float:
        return self.load_qps.get(model, 0.0) * (1.0 + self.headroom)

    def models(self) -> list[str]:
        return sorted({v.model for v in self.variants} | set(self.load_qps))

    def meets_slo(self, v: ScalingVariant) -> bool:
        return v.latency_ms <= self.slo_ms.get(v.model, math.inf)


@dataclass(frozen=True)
class LoadVariant:
    variant: str
    hardware: str
    count: int


@dataclass(frozen=True)
class UnloadVariant:
    variant: str
    hardware: str
    count: int


Action = Union[LoadVariant, UnloadVariant]


@dataclass(frozen=True)
class ScalingPlan:
    actions: tuple[Action, ...]
    counts: Mapping[str, int]          # N + delta for every variant
    cost_per_second: float             # sum C (N + delta)
    objective: float                   # sum C (delta + lambda T_load max(delta, 0))
    feasible: bool
    unmet_qps: Mapping[str, float]     # architecture -> capacity still missing (VM-autoscaler hint)
    solver: str
    solve_ms: float = 0.0


def objective(problem: ScalingProblem, counts: Mapping[str, int]) -> float:
    total = 0.0
    for v in problem.variants:
        d = counts.get(v.name, 0) - problem.running.get(v.name, 0)
        total += v.cost_per_second * (d + problem.lam * v.load_latency_s * max(d, 0))
    return total


def violations(problem: ScalingProblem, counts: Mapping[str, int]) -> list[str]:
    """Constraints (1)-(4) that ``counts`` breaks (empty: feasible)."""
    out: list[str] = []
    cap: dict[str, float] = {}
    used: dict[tuple[str, str], float] = {}
    for v in problem.variants:
        n = counts.get(v.name, 0)
        d = n - problem.running.get(v.name, 0)
        if n < 0:
            out.append(f"(4) {v.name}: negative count {n}")
        if d > 0 and not problem.meets_slo(v):
            out.append(f"(2) {v.name}: loaded but {v.latency_ms:g} ms > SLO {problem.slo_ms.get(v.model)} ms")
        cap[v.model] = cap.get(v.model, 0.0) + v.saturation_qps * n
        for r, amount in v.resources.items():
            used[(v.hardware, r)] = used.get((v.hardware, r), 0.0) + amount * n
    for m in problem.models():
        need = problem.required(m)
        if cap.get(m, 0.0) < need - QPS_TOL:
            out.append(f"(1) {m}: capacity {cap.get(m, 0.0):g} < {need:g} qps")
    for (hw, r), u in used.items():
        total = problem.capacity.get(hw, {}).get(r)
        if total is not None and u > total + 1e-9:
            out.append(f"(3) {hw}/{r}: {u:g} > {total:g}")
    return out


def plan_from_counts(problem: ScalingProblem, counts: Mapping[str, int], solver: str, solve_ms: float = 0.0,
                     feasible: bool | None = None) -> ScalingPlan:
    """Turn target counts into Load/Unload actions (unloads first, so resources free up first)."""
    full = {v.name: int(counts.get(v.name, 0)) for v in problem.variants}
    unloads: list[Action] = []
    loads: list[Action] = []
    for v in problem.variants:
        d = full[v.name] - problem.running.get(v.name, 0)
        if d < 0:
            unloads.append(UnloadVariant(v.name, v.hardware, -d))
        elif d > 0:
            loads.append(LoadVariant(v.name, v.hardware, d))
    cap: dict[str, float] = {}
    for v in problem.variants:
        cap[v.model] = cap.get(v.model, 0.0) + v.saturation_qps * full[v.name]
    unmet = {m: problem.required(m) - cap.get(m, 0.0) for m in problem.models()
             if cap.get(m, 0.0) < problem.required(m) - QPS_TOL}
    return ScalingPlan(
        actions=tuple(unloads + loads),
        counts=full,
        cost_per_second=sum(v.cost_per_second * full[v.name] for v in problem.variants),
        objective=objective(problem, full),
        feasible=(not violations(problem, full)) if feasible is None else feasible,
        unmet_qps=unmet,
        solver=solver,
        solve_ms=solve_ms,
    )


def _build(problem: ScalingProblem, margin: float) -> tuple[pulp.LpProblem, dict[str, pulp.LpVariable]] | None:
    """The ILP with constraint (1) asking for ``need - margin``; None when some architecture with
    load has no variant at all."""
    prob = pulp.LpProblem("infaas_model_autoscaler", pulp.LpMinimize)
    delta: dict[str, pulp.LpVariable] = {}
    terms = []
    for k, v in enumerate(problem.variants):
        n = int(problem.running.get(v.name, 0))
        if problem.meets_slo(v):
            # More than ceil(required / Q) new instances of one variant is never needed.
            ub = n + math.ceil(problem.required(v.model) / v.saturation_qps)
            for r, amount in v.resources.items():
                total = problem.capacity.get(v.hardware, {}).get(r)
                if total is not None and amount > 0:
                    ub = min(ub, int(math.floor(total / amount + 1e-9)))
            ub = max(ub - n, 0)
        else:
            ub = 0  # constraint (2)
        d = prob.add_variable(f"d{k}", lowBound=-n, upBound=ub, cat="Integer")  # (4)
        delta[v.name] = d
        terms.append(v.cost_per_second * d)
        w = v.cost_per_second * problem.lam * v.load_latency_s
        if w > 0 and ub > 0:
            u = prob.add_variable(f"u{k}", lowBound=0)  # u >= max(delta, 0)
            prob += u >= d
            terms.append(w * u)
    prob += pulp.lpSum(terms)
    for mi, m in enumerate(problem.models()):
        vs = [v for v in problem.variants if v.model == m]
        need = problem.required(m) - sum(v.saturation_qps * problem.running.get(v.name, 0) for v in vs)
        if not vs:
            if need > QPS_TOL:
                return None
            continue
        prob += pulp.lpSum(v.saturation_qps * delta[v.name] for v in vs) >= need - margin, f"load{mi}"  # (1)
    pools: dict[tuple[str, str], list[ScalingVariant]] = {}
    for v in problem.variants:
        for r in v.resources:
            if r in problem.capacity.get(v.hardware, {}):
                pools.setdefault((v.hardware, r), []).append(v)
    for ri, ((hw, r), vs) in enumerate(sorted(pools.items())):
        used = sum(v.resources[r] * problem.running.get(v.name, 0) for v in vs)
        prob += (pulp.lpSum(v.resources[r] * delta[v.name] for v in vs)
                 <= problem.capacity[hw][r] - used), f"res{ri}"  # (3)
    return prob, delta


def solve_ilp(problem: ScalingProblem, time_limit_s: float | None = None) -> ScalingPlan:
    """Solve INFaaS's model-autoscaler ILP exactly (CBC). Infeasible (not enough resources for
    the load): a plan with ``feasible=False``, no actions, and ``unmet_qps`` = capacity missing
    beyond what is running, for the VM autoscaler."""
    t0 = time.perf_counter()
    for margin in (0.5 * QPS_TOL, 0.9 * QPS_TOL):
        built = _build(problem, margin)
        if built is None:
            break
        prob, delta = built
        with warnings.catch_warnings():  # PuLP 3.x deprecates PULP_CBC_CMD, the bundled CBC we use
            warnings.simplefilter("ignore", DeprecationWarning)
            status = pulp.LpStatus[prob.solve(pulp.PULP_CBC_CMD(msg=False, timeLimit=time_limit_s))]
        if status == "Optimal":
            counts = {v.name: int(problem.running.get(v.name, 0)) + int(round(delta[v.name].varValue or 0.0))
                      for v in problem.variants}
            return plan_from_counts(problem, counts, solver="ilp", solve_ms=(time.perf_counter() - t0) * 1000.0)
    running = {v.name: int(problem.running.get(v.name, 0)) for v in problem.variants}
    return plan_from_counts(problem, running, solver="ilp", solve_ms=(time.perf_counter() - t0) * 1000.0,
                            feasible=False)
