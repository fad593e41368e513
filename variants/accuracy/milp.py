"""The accuracy planner's MILP as first linearised (Proteus §4; see :mod:`variants.accuracy.planner`)
and its three lexicographic solves: the most demand served, then the highest accuracy-weighted
throughput, then the fewest swaps. Pure: options, worker counts and demand in, worker counts per
(type, variant) out. Since issue #29 the planner solves the same problem within 1 s through
:mod:`variants.accuracy.solve` (the level form of :mod:`variants.accuracy.levels`); this one is
the reference the tests and the bench hold it to (``plan_accuracy(reference=True)``), and its
solver plumbing (:class:`Milp`, :func:`solve`) serves both and the pipeline planner.

The model is written once as plain columns and rows and handed to one of two solvers:

- **HiGHS** through ``highspy`` (the ``accuracy`` extra), the default where it is installed: at 40
  workers x 50 variants x 9 models its placements within 1 s are far more accurate than CBC's
  within 1 s, though not always as accurate as CBC's within 10 s (BENCHMARKS.md
  "accuracy-planner"); each step is warm-started from the previous step's answer;
- **CBC** through PuLP otherwise (and in the tests, both), without its MILP preprocessing and
  without a warm start: with either it reported wrong optima as proven (:data:`CBC_OPTIONS`).

Step 1 is solved to optimality (no gap: the served demand is never traded for speed); steps 2-3
also ask for optimality and stop at the deadline with the best placement found, whose distance
from the optimum the solver bounds (``gap``).
"""
from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from typing import Mapping, Protocol, Sequence

import pulp

try:  # the optional ``accuracy`` extra
    import highspy
except ImportError:  # pragma: no cover - exercised where highspy is not installed
    highspy = None

#: Relative tolerance (of the total demand) with which step 1's served rate and step 2's accuracy-
#: weighted throughput are held in the next step: above the solvers' feasibility tolerance (1e-7),
#: far below any difference a placement makes to real profiles.
REL_TOL = 1e-6
#: Integrality tolerance: the solvers' default (1e-6) lets a worker count of 1e-6 buy a sliver of a
#: fast variant's capacity; the plan rounds counts anyway, so ask for counts that round honestly.
INTEGER_TOL = 1e-9
#: The least a solve is given when the budget is spent (s): enough to read a warm start.
MIN_STEP_S = 0.05
#: Share of the time left that step 2 (most accurate) may use; step 3 (fewest swaps) gets the rest.
ACCURACY_SHARE = 0.75
#: CBC (the PuLP-bundled 2.10) reported wrong optima as proven on small pipeline plans
#: (tests/variants/test_pipelines.py): its MILP preprocessing (CglPreProcess) cut off a 0.61-accuracy variant
#: for a 0.60 one (CI, 2026-11-26), and with preprocessing off a warm start (``-mips``) came back as
#: "optimal" unchanged (a 200 ms latency budget for 150). So CBC runs without either: no start is
#: passed to it (:func:`_solve_cbc` ignores ``start``), and it then matched the brute force on 400
#: random trees. HiGHS takes the start.
CBC_OPTIONS = ("preprocess off",)
#: The solvers, fastest first; :data:`SOLVER` is the first one installed.
SOLVERS = ("highs", "cbc") if highspy is not None else ("cbc",)
SOLVER = SOLVERS[0]


class Option(Protocol):
    """A variant that may go on an instance type, and what it serves there."""

    itype: str
    variant: str
    model: str
    accuracy: float
    qps: float


@dataclass
class _Model:
    """A MILP as columns (bounds, integrality) and rows (coefficients, bounds), maximised."""

    lower: list[float] = field(default_factory=list)
    upper: list[float] = field(default_factory=list)
    integer: list[bool] = field(default_factory=list)
    rows: list[tuple[dict[int, float], float, float]] = field(default_factory=list)

    def column(self, lower: float, upper: float, integer: bool) -> int:
        self.lower.append(float(lower))
        self.upper.append(float(upper))
        self.integer.append(integer)
        return len(self.lower) - 1

    def row(self, coef: Mapping[int, float], lower: float, upper: float) -> None:
        self.rows.append((dict(coef), float(lower), float(upper)))


@dataclass(frozen=True)
class _Answer:
    values: list[float] | None     # None: no solution found
    proven: bool                   # proven optimal
    gap: float                     # relative distance from the solver's bound (0 when proven)
    bound: float = float("nan")    # the solver's bound on the objective (nan: none reported)


def _solve_highs(m: _Model, cost: Mapping[int, float], start: Sequence[float] | None, limit_s: float,
                 abs_gap: float, options: Mapping[str, object] | None = None) -> _Answer:
    # The core class, not highspy.Highs: the wrapper's constructor enables callbacks and so logs
    # HiGHS's banner to the process's stdout before any option can be set (ERGO-Code/HiGHS#1702),
    # which would corrupt `costscale accuracy plan --json`.
    h = highspy._core._Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("threads", 1)
    h.setOptionValue("time_limit", float(limit_s))
    h.setOptionValue("mip_rel_gap", 0.0)
    h.setOptionValue("mip_abs_gap", float(abs_gap))
    h.setOptionValue("mip_feasibility_tolerance", INTEGER_TOL)
    for name, value in (options or {}).items():
        h.setOptionValue(name, value)
    inf = highspy.kHighsInf
    ncol = len(m.lower)
    h.addVars(ncol, m.lower, [u if u != float("inf") else inf for u in m.upper])
    ints = [i for i in range(ncol) if m.integer[i]]
    if ints:
        h.changeColsIntegrality(len(ints), ints, [highspy.HighsVarType.kInteger] * len(ints))
    starts, index, value, lo, hi = [], [], [], [], []
    for coef, rlo, rhi in m.rows:
        starts.append(len(index))
        index.extend(coef)
        value.extend(coef.values())
        lo.append(rlo if rlo != -float("inf") else -inf)
        hi.append(rhi if rhi != float("inf") else inf)
    h.addRows(len(m.rows), lo, hi, len(index), starts, index, value)
    h.changeObjectiveSense(highspy.ObjSense.kMaximize)
    h.changeColsCost(len(cost), list(cost), list(cost.values()))
    if start is not None:
        h.setSolution(ncol, list(range(ncol)), list(start))
    h.run()
    status = h.getModelStatus()
    if status == highspy.HighsModelStatus.kSolveError and (options or {}).get("presolve") != "off":
        # HiGHS 1.16's MIP presolve fails some small models outright (kSolveError, no solution: seen
        # on a 15-column fewest-swaps step that solves at once without it): the same model is run
        # again, once, with presolve off, within what is left of the limit
        h.setOptionValue("presolve", "off")
        h.setOptionValue("time_limit", max(float(limit_s) - h.getRunTime(), 0.0))
        if start is not None:
            h.setSolution(ncol, list(range(ncol)), list(start))
        h.run()
        status = h.getModelStatus()
    info = h.getInfo()
    if info.primal_solution_status != 2:          # kSolutionStatusFeasible
        return _Answer(None, False, float("inf"))
    proven = status == highspy.HighsModelStatus.kOptimal
    return _Answer(list(h.getSolution().col_value), proven, 0.0 if proven else float(info.mip_gap),
                   float(info.mip_dual_bound))


def _solve_cbc(m: _Model, cost: Mapping[int, float], start: Sequence[float] | None, limit_s: float,
               abs_gap: float, options: Mapping[str, object] | None = None) -> _Answer:
    prob = pulp.LpProblem("proteus_accuracy", pulp.LpMaximize)
    x = [prob.add_variable(f"x{i}", lowBound=lo, upBound=(None if hi == float("inf") else hi),
                           cat="Integer" if integer else "Continuous")
         for i, (lo, hi, integer) in enumerate(zip(m.lower, m.upper, m.integer))]
    for j, (coef, lo, hi) in enumerate(m.rows):
        expr = pulp.lpSum(c * x[i] for i, c in coef.items())
        if hi != float("inf"):
            prob += expr <= hi, f"u{j}"
        if lo != -float("inf"):
            prob += expr >= lo, f"l{j}"
    prob.setObjective(pulp.lpSum(c * x[i] for i, c in cost.items()))
    with warnings.catch_warnings():  # PuLP 3.x deprecates PULP_CBC_CMD, the bundled CBC we use
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            prob.solve(pulp.PULP_CBC_CMD(msg=False, timeLimit=limit_s, warmStart=False,
                                         options=[f"integerTolerance {INTEGER_TOL}", f"allowableGap {abs_gap}",
                                                  *CBC_OPTIONS]))
        except pulp.PulpSolverError:
            # without preprocessing, CBC reports a model its bound tightening proves infeasible
            # ("tightenPrimalBounds") by writing no solution file, which PuLP raises on
            return _Answer(None, False, float("inf"))
    found = prob.sol_status in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible)
    if not found or prob.objective.value() is None:
        return _Answer(None, False, float("inf"))
    proven = prob.sol_status == pulp.LpSolutionOptimal
    return _Answer([v.varValue or 0.0 for v in x], proven, 0.0 if proven else float("nan"))


def _solve(m: _Model, cost: Mapping[int, float], start: Sequence[float] | None, deadline: float,
           abs_gap: float, solver: str, share: float = 1.0,
           highs_options: Mapping[str, object] | None = None) -> _Answer:
    """``highs_options``: HiGHS options beyond ours (CBC ignores them), e.g. its heuristics' effort."""
    limit = max(MIN_STEP_S, (deadline - time.perf_counter()) * share)
    if solver == "highs":
        return _solve_highs(m, cost, start, limit, abs_gap, highs_options)
    return _solve_cbc(m, cost, start, limit, abs_gap)


def add_keeps(m: _Model, n: Sequence[int], options: Sequence[Option], type_counts: Mapping[str, int],
              current_counts: Mapping[tuple[str, str | None], int]) -> dict[int, tuple[str, str | None]]:
    """Step 3's columns on ``m`` (``n[i]``: option i's worker-count column): keep_{t,v} (integer) <=
    the type's workers hosting v now and <= n_{t,v}; v = None: keep <= the type's workers the
    placement leaves empty. A variant that may not stay gets none (it swaps whatever happens).
    Column -> the (type, variant) it keeps; step 3 maximises their sum."""
    keeps: dict[int, tuple[str, str | None]] = {}
    for (t, v), cur in sorted(current_counts.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
        idx = [n[i] for i, o in enumerate(options) if o.itype == t and o.variant == v]
        if v is not None and not idx:
            continue                                  # hosts a variant that may not stay: a swap
        k = m.column(0, cur, True)
        if v is not None:                             # keep <= n_{t,v}
            m.row({k: 1.0, idx[0]: -1.0}, -float("inf"), 0.0)
        else:                                         # keep <= the type's workers hosting nothing
            on_t = [n[i] for i, o in enumerate(options) if o.itype == t]
            m.row({k: 1.0, **{j: 1.0 for j in on_t}}, -float("inf"), type_counts[t])
        keeps[k] = (t, v)
    return keeps


def lexicographic_counts(options: Sequence[Option], type_counts: Mapping[str, int], demand: Mapping[str, float],
                         current_counts: Mapping[tuple[str, str | None], int], deadline: float,
                         solver: str | None = None) -> tuple[dict[tuple[str, str], int], str, float]:
    """(type, variant) -> workers, the status ("optimal": every step proven; "time_limit": the best
    placement found by ``deadline`` (perf_counter); "no_solution") and step 2's relative gap.

    Columns n_{t,v} (integer, workers of type t hosting v) and z_{t,v} (q/s of v's model that they
    serve); rows: z <= min(P_{t,v}, D_m) n (Eq. 3-5, linearised; a worker never serves more than
    its model's demand, a tighter big-M), Σ_v n_{t,v} <= N_t (Eq. 1 summed over a type's workers),
    Σ_{v of m} z <= D_m (Eq. 2, 6)."""
    solver = solver or SOLVER
    m = _Model()
    n = [m.column(0, type_counts[o.itype], True) for o in options]
    z = [m.column(0, float("inf"), False) for _ in options]
    for i, o in enumerate(options):
        m.row({z[i]: 1.0, n[i]: -min(o.qps, max(0.0, demand.get(o.model, 0.0)))}, -float("inf"), 0.0)
    for t in sorted(type_counts):
        m.row({n[i]: 1.0 for i, o in enumerate(options) if o.itype == t}, -float("inf"), type_counts[t])
    for model, want in sorted(demand.items()):
        m.row({z[i]: 1.0 for i, o in enumerate(options) if o.model == model}, -float("inf"), max(0.0, want))
    tol = REL_TOL * max(1.0, sum(max(0.0, d) for d in demand.values()))
    served = {j: 1.0 for j in z}
    acc_weighted = {z[i]: o.accuracy for i, o in enumerate(options)}             # Σ_q a_q, linear

    def counts(values: Sequence[float]) -> dict[tuple[str, str], int]:
        return {(o.itype, o.variant): int(round(values[n[i]])) for i, o in enumerate(options)}

    def value(values: Sequence[float], cost: Mapping[int, float]) -> float:
        return sum(c * values[j] for j, c in cost.items())

    first = _solve(m, served, None, deadline, tol / 10, solver)                    # 1. serve the most
    if first.values is None:
        return {}, "no_solution", float("inf")
    m.row(served, value(first.values, served) - tol, float("inf"))
    second = _solve(m, acc_weighted, first.values, deadline, tol / 10, solver, ACCURACY_SHARE)  # 2. most accurate
    if second.values is None:
        return counts(first.values), "time_limit", float("inf")
    best, proven, gap = second.values, first.proven and second.proven, second.gap
    m.row(acc_weighted, value(best, acc_weighted) - tol, float("inf"))
    keep = dict.fromkeys(add_keeps(m, n, options, type_counts, current_counts), 1.0)   # 3. fewest swaps
    if keep:
        # no warm start here on HiGHS: given step 2's placement as a start, HiGHS 1.16 returned it
        # as optimal with every keep at 0 where a worker could keep its variant (two swaps for one;
        # found by the brute-force test). CBC is never warm-started (CBC_OPTIONS).
        third = _solve(m, keep, None, deadline, 0.5, solver)
        if third.values is not None:
            best, proven = third.values, proven and third.proven
        else:
            proven = False
    return counts(best), "optimal" if proven else "time_limit", gap


#: The model builder and the solve, for the other planners written on them (the pipeline planner).
Milp = _Model
solve = _solve
