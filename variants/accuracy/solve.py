"""The accuracy planner's three lexicographic steps within a 1 s budget (issue #29): the most
demand served, then the highest accuracy-weighted throughput, then the fewest swaps, as the
reference :func:`variants.accuracy.milp.lexicographic_counts` decides them (Proteus §4), solved
faster. Pure: options, worker counts and demand in, worker counts per (type, variant) out.

1. **Most served**, exact: each (type, model)'s fastest variant only (capped at the model's
   demand). Any placement serves at most what it serves with every worker on its model's fastest
   variant of its type, so the most served is the same, on a model of 72 options where the
   reference has 300 (40 workers x 50 variants x 9 models). Within :data:`SERVED_SHARE` of the
   budget; where it is not proven by then (far beyond what the pool serves), the local search of
   step 2 may still serve more, and step 2 holds whichever serves more.
2. **Most accurate** with that served demand held: an incumbent first, the better of step 1's
   placement and the current one, improved by :func:`variants.accuracy.search.improve` (a few
   tens of ms); then, on the MILP in level form with cover rows and no spare workers
   (:mod:`variants.accuracy.levels`), RINS from it (:func:`_rins`: the counts where the LP
   relaxation agrees with it fixed, the rest solved), then the whole MILP from the best found, on
   HiGHS with its heuristics at :data:`HIGHS_OPTIONS`. Each only replaces a better placement.
   When the cover rows restrict the problem (step 1 cannot serve every model) and that solve is
   proven optimal, the unrestricted level model is solved from its answer, and only that proof
   counts as optimal.
3. **Fewest swaps** with that accuracy held, as the reference's step 3, on the level model.

Each step gets a share of what is left of the budget; a step past the deadline keeps the previous
one's placement (``status`` "time_limit").
"""
from __future__ import annotations

import math
import time
from typing import Mapping, Sequence

from variants.accuracy import levels as lv
from variants.accuracy import milp as accuracy_milp
from variants.accuracy.milp import REL_TOL, Milp, Option, add_keeps, solve
from variants.accuracy.search import improve, placement_value, trimmed

#: Share of the budget step 1 may use: proven within tens of ms up to 4x the demand the pool serves
#: at full accuracy; beyond what the pool serves at all (8x-16x) it took 0.5-2.5 s to prove
#: (bench/variants/accuracy_bench.py). The served demand comes first, so it gets most of the budget there;
#: steps 2-3 get the rest, from the best placement step 1 found.
SERVED_SHARE = 0.7
#: Share of the time left after step 1 that the local search may use (it stops earlier when no
#: move helps, usually after a few tens of ms at 40 workers x 50 variants x 9 models).
SEARCH_SHARE = 0.15
#: Share of the time left that step 2's MILP may use; step 3 (fewest swaps) gets the rest.
ACCURACY_SHARE = 0.8
#: HiGHS options of steps 1-2: its heuristics at 0.3 of the effort (default 0.05), and without the
#: feasibility jump heuristic, which cost some 5 ms per solve here and found no placement the start
#: did not (trials at 40 workers x 50 variants x 9 models; their results moved with the machine's
#: load more than with these options).
HIGHS_OPTIONS: dict[str, object] = {"mip_heuristic_effort": 0.3, "mip_heuristic_run_feasibility_jump": False}
#: RINS rounds before step 2's MILP (:func:`_rins`), each within this share of step 2's time left.
RINS_ROUNDS = 4
RINS_SHARE = 0.4
#: A step starts only with at least this much of the budget left (s); step 1 always runs.
MIN_LEFT_S = 0.02


def fastest(options: Sequence[Option], demand: Mapping[str, float]) -> list[Option]:
    """Per (type, model) the option with the largest capacity capped at the demand (the most
    accurate of equals): enough for the most served (step 1)."""
    best: dict[tuple[str, str], Option] = {}
    for o in options:
        key = (o.itype, o.model)
        b = best.get(key)
        if b is None or (lv.capped(o, demand), o.accuracy, b.variant) > (lv.capped(b, demand), b.accuracy, o.variant):
            best[key] = o
    return [best[k] for k in sorted(best)]


def _left(deadline: float) -> float:
    return deadline - time.perf_counter()


def _gap(answer: accuracy_milp._Answer, accw: float) -> float:
    """How far (relative) ``accw`` may lie below the best, by the solver's bound."""
    if answer.proven:
        return 0.0
    if math.isnan(answer.bound):
        return answer.gap
    return max(0.0, answer.bound - accw) / answer.bound if answer.bound > 0 else math.inf


def _gap_to(bound: float, accw: float) -> float:
    return max(0.0, bound - accw) / bound if bound > 0 and math.isfinite(bound) else math.inf


def _rins(m2: lv.LevelModel, options: Sequence[Option], demand: Mapping[str, float],
          incumbent: dict[tuple[str, str], int], accw: float, most: float, tol: float, end: float,
          solver: str) -> tuple[dict[tuple[str, str], int], float, float]:
    """RINS (relaxation induced neighbourhood search; Danna, Rothberg, Le Pape 2005): fix every
    worker count where the LP relaxation is integral and agrees with the incumbent, solve the rest
    (small: a few dozen counts of 300 free); again from what it finds, up to :data:`RINS_ROUNDS`
    times or until it finds nothing better. (incumbent, its accuracy-weighted throughput, the LP
    bound). HiGHS runs its own RINS only after its root cuts, which at 40 workers x 50 variants x
    9 models took ~0.5 s (bench/variants/accuracy_bench.py)."""
    lp = Milp(list(m2.milp.lower), list(m2.milp.upper), [False] * len(m2.milp.integer), m2.milp.rows)
    rel = solve(lp, m2.accuracy_weighted, None, end, 0.0, solver, RINS_SHARE)
    if rel.values is None:
        return incumbent, accw, math.inf
    bound = lv.value(m2.accuracy_weighted, rel.values)
    for _ in range(RINS_ROUNDS):
        if end - time.perf_counter() < MIN_LEFT_S:
            break
        sub = Milp(list(m2.milp.lower), list(m2.milp.upper), list(m2.milp.integer), m2.milp.rows)
        free = 0
        for i, o in enumerate(options):
            j, c = m2.n[i], incumbent.get((o.itype, o.variant), 0)
            if abs(rel.values[j] - c) < 1e-6:
                sub.lower[j] = sub.upper[j] = float(c)
            else:
                free += 1
        if not free:
            break
        ans = solve(sub, m2.accuracy_weighted, lv.start(m2, options, demand, incumbent), end, tol / 10, solver,
                    RINS_SHARE, HIGHS_OPTIONS)
        if ans.values is None:
            break
        found = lv.counts_of(m2, options, ans.values)
        served, value, _ = placement_value(options, demand, found)
        if served < most - tol or value <= accw + tol:
            break
        incumbent, accw = found, value
    return incumbent, accw, bound


def kept(counts: Mapping[tuple[str, str], int], type_counts: Mapping[str, int],
         current_counts: Mapping[tuple[str, str | None], int]) -> dict[tuple[str, str | None], int]:
    """(type, variant) -> the workers hosting it now that can keep it under per-type ``counts``
    (variant None: an empty one stays empty where the type has workers the counts leave empty)."""
    empty = {t: n - sum(c for (tt, _), c in counts.items() if tt == t) for t, n in type_counts.items()}
    return {(t, v): min(cur, counts.get((t, v), 0) if v is not None else empty.get(t, 0))
            for (t, v), cur in current_counts.items()}


def keeps(counts: Mapping[tuple[str, str], int], type_counts: Mapping[str, int],
          current_counts: Mapping[tuple[str, str | None], int]) -> int:
    """Workers that can keep what they host under per-type ``counts`` (:func:`kept`, summed)."""
    return sum(kept(counts, type_counts, current_counts).values())


def plan_counts(options: Sequence[Option], type_counts: Mapping[str, int], demand: Mapping[str, float],
                current_counts: Mapping[tuple[str, str | None], int], deadline: float,
                solver: str | None = None) -> tuple[dict[tuple[str, str], int], str, float]:
    """(type, variant) -> workers, the status ("optimal": every step proven; "time_limit": the best
    placement found by ``deadline`` (perf_counter); "no_solution") and step 2's relative gap
    (0 proven; inf: no bound, the served split was fixed; nan: CBC gives none). Same arguments
    and answer as :func:`variants.accuracy.milp.lexicographic_counts`."""
    solver = solver or accuracy_milp.SOLVER
    tol = REL_TOL * max(1.0, sum(max(0.0, d) for d in demand.values()))
    placeable = {(o.itype, o.variant) for o in options}

    # 1. serve the most: each (type, model)'s fastest option is enough
    quick = fastest(options, demand)
    m1 = lv.build(quick, type_counts, demand)
    first = solve(m1.milp, lv.served_only(m1), None, deadline, tol / 10, solver, SERVED_SHARE, HIGHS_OPTIONS)
    if first.values is None:
        return {}, "no_solution", math.inf
    most = lv.value(lv.served_only(m1), first.values)
    proven = first.proven

    # 2. the most accurate at that: an incumbent, searched, then the level MILP from it
    incumbent = lv.counts_of(m1, quick, first.values)
    now = {k: c for k, c in current_counts.items() if k[1] is not None and k in placeable and c > 0}
    served_now, accw_now, _ = placement_value(options, demand, now)
    if served_now >= most - tol and accw_now > placement_value(options, demand, incumbent)[1]:
        incumbent = now
    incumbent = trimmed(options, demand, improve(options, type_counts, demand, incumbent, tol,
                                                 time.perf_counter() + max(0.0, _left(deadline)) * SEARCH_SHARE))
    served_inc, best_accw, by_model = placement_value(options, demand, incumbent)
    most = max(most, served_inc)                           # the search serves more where step 1 stopped early
    best = incumbent
    gap = math.inf
    if _left(deadline) < MIN_LEFT_S:
        return best, "time_limit", gap
    m2 = lv.build(options, type_counts, demand)
    lv.add_served_floor(m2, most, tol)
    restricted = lv.add_covers(m2, options, demand, most, by_model, tol)
    lv.add_no_spare(m2, options, demand)
    step_end = time.perf_counter() + max(0.0, _left(deadline)) * ACCURACY_SHARE
    best, best_accw, lp_bound = _rins(m2, options, demand, best, best_accw, most, tol, step_end, solver)
    second = solve(m2.milp, m2.accuracy_weighted, lv.start(m2, options, demand, best), step_end, tol / 10,
                   solver, 1.0, HIGHS_OPTIONS)
    proven2 = False
    if second.values is not None:
        found = lv.counts_of(m2, options, second.values)
        served, accw, _ = placement_value(options, demand, found)
        if served >= most - tol and accw >= best_accw - tol:
            best, best_accw = found, max(accw, best_accw)
        proven2 = second.proven and not restricted
        gap = math.inf if restricted else min(_gap(second, best_accw), _gap_to(lp_bound, best_accw))
    if restricted and second.proven and _left(deadline) >= MIN_LEFT_S:
        m2 = lv.build(options, type_counts, demand)       # lift the split: is it optimal without?
        lv.add_served_floor(m2, most, tol)
        lv.add_no_spare(m2, options, demand)
        best = trimmed(options, demand, best)
        again = solve(m2.milp, m2.accuracy_weighted, lv.start(m2, options, demand, best), deadline, tol / 10,
                      solver, ACCURACY_SHARE, HIGHS_OPTIONS)
        if again.values is not None:
            found = lv.counts_of(m2, options, again.values)
            served, accw, _ = placement_value(options, demand, found)
            if served >= most - tol and accw > best_accw + tol:
                best, best_accw = found, accw
            proven2, gap = again.proven, _gap(again, best_accw)
    proven = proven and proven2

    # 3. the fewest swaps at that accuracy
    if _left(deadline) < MIN_LEFT_S:
        return best, "time_limit", gap
    m3 = lv.build(options, type_counts, demand)
    lv.add_served_floor(m3, most, tol)
    if most >= sum(max(0.0, d) for d in demand.values()) - tol:
        lv.add_covers(m3, options, demand, most, {}, tol)     # valid: every model is served in full
    m3.milp.row(m3.accuracy_weighted, best_accw - tol, lv.INF)
    keep = add_keeps(m3.milp, m3.n, options, type_counts, current_counts)   # column -> (type, variant)
    if keep:
        x = lv.start(m3, options, demand, best)
        held = kept(best, type_counts, current_counts)
        for k, key in keep.items():                   # the start keeps what ``best`` lets keep
            x[k] = float(held.get(key, 0))
        third = solve(m3.milp, dict.fromkeys(keep, 1.0), x if solver == "highs" else None, deadline, 0.5, solver)
        if third.values is not None:
            found = lv.counts_of(m3, options, third.values)
            served, accw, _ = placement_value(options, demand, found)
            if (served >= most - tol and accw >= best_accw - tol
                    and keeps(found, type_counts, current_counts) >= keeps(best, type_counts, current_counts)):
                best = found
            proven = proven and third.proven
        else:
            proven = False
    return best, "optimal" if proven else "time_limit", gap


__all__ = ["ACCURACY_SHARE", "HIGHS_OPTIONS", "MIN_LEFT_S", "SEARCH_SHARE", "SERVED_SHARE", "fastest", "kept", "keeps",
           "plan_counts"]
