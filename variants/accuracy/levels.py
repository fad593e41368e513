"""The accuracy planner's MILP in level form (ours): Proteus §4's placement problem with the same
optima as :func:`variants.accuracy.milp.lexicographic_counts` (the MILP as first linearised, kept as
the reference), written so that HiGHS finds good placements in a fraction of the time. Pure: it
builds models (:class:`variants.accuracy.milp.Milp`); :mod:`variants.accuracy.solve` solves them.

**Levels instead of served rates.** The reference has a served rate per (type, variant) and a row
z <= capacity x workers for each. A model's best rates for a placement are its fill (most
accurate first, up to the demand D), whose accuracy-weighted throughput is, by Abel summation over
the model's distinct accuracies a_1 > ... > a_L (a_{L+1} = 0),

    sum_l (a_l - a_{l+1}) min(D, C_l),   C_l = sum over its variants with accuracy >= a_l of
                                               capacity x workers,

and its served rate is min(D, C_L). So one column w_l <= min(D, C_l) per model and level (a row
w_l - C_l <= 0 that only integer counts enter), objective sum (a_l - a_{l+1}) w_l, and served =
w_L: as many optima and the same LP bound as the reference, with about 6 levels per model where
the reference has a rate per (type, variant).

**Cover rows.** When step 1 serves every model's whole demand, every placement that keeps the
served demand serves each model's demand too, so sum_(variants of m) capacity x workers >= D_m is
valid (implied by the rows above in the LP, but in integers only: HiGHS derives knapsack cover
cuts and finds feasible placements from it). When step 1 cannot serve all, :func:`add_covers`
takes the split of the incumbent, which models are served in full and which are short: the first
get their cover row, the short ones together one row, their capacity at least the rest of the
served demand. That split is a restriction (another split could be more accurate), which the
caller must lift to claim optimality.

**No spare workers.** A worker whose group takes none of its model's demand, or one more than its
group needs to take what it takes, can host nothing instead at the same served demand and
accuracy, so some optimum has none: there, every group but the last in fill order is used in full
and the last has fewer than one worker's capacity over what it takes, so a model's capacity is at
most its demand plus its largest worker capacity. :func:`add_no_spare` adds that row for step 2
(not step 3, where a worker left idle may keep what it hosts); a start must be trimmed to it
first (:func:`variants.accuracy.search.trimmed`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from variants.accuracy.milp import Milp, Option

INF = float("inf")


@dataclass
class LevelModel:
    """A level-form model: ``n[i]`` the column of option i's workers; ``served[m]`` the column of
    model m's served rate; ``accuracy_weighted`` the objective (column -> a_l - a_{l+1})."""

    milp: Milp
    n: list[int]
    served: dict[str, int]
    accuracy_weighted: dict[int, float]
    levels: dict[str, list[tuple[int, float]]] = field(default_factory=dict)   # model -> [(w column, a_l)]


def capped(o: Option, demand: Mapping[str, float]) -> float:
    """A worker's capacity counted toward its model's demand (never more than the demand)."""
    return min(o.qps, max(0.0, demand.get(o.model, 0.0)))


def build(options: Sequence[Option], type_counts: Mapping[str, int], demand: Mapping[str, float]) -> LevelModel:
    """Columns n (integer, per option) and w (per model and accuracy level); rows: the type's
    workers (Proteus Eq. 1 summed over a type), w_l <= C_l, w_l <= D (its bounds)."""
    m = Milp()
    n = [m.column(0, type_counts[o.itype], True) for o in options]
    for t in sorted(type_counts):
        row = {n[i]: 1.0 for i, o in enumerate(options) if o.itype == t}
        if row:
            m.row(row, -INF, type_counts[t])
    served: dict[str, int] = {}
    objective: dict[int, float] = {}
    levels: dict[str, list[tuple[int, float]]] = {}
    for model in sorted({o.model for o in options}):
        ids = [i for i, o in enumerate(options) if o.model == model]
        accs = sorted({options[i].accuracy for i in ids}, reverse=True)
        d = max(0.0, demand.get(model, 0.0))
        for k, a in enumerate(accs):
            w = m.column(0, d, False)
            m.row({w: 1.0, **{n[i]: -capped(options[i], demand) for i in ids if options[i].accuracy >= a}}, -INF, 0.0)
            objective[w] = a - (accs[k + 1] if k + 1 < len(accs) else 0.0)
            levels.setdefault(model, []).append((w, a))
        served[model] = levels[model][-1][0]
    return LevelModel(m, n, served, objective, levels)


def served_only(lm: LevelModel) -> dict[int, float]:
    """The objective of step 1: the served rate, every model alike."""
    return {w: 1.0 for w in lm.served.values()}


def start(lm: LevelModel, options: Sequence[Option], demand: Mapping[str, float],
          counts: Mapping[tuple[str, str], int]) -> list[float]:
    """A full start vector for per-type ``counts`` (the w at their values for those counts)."""
    x = [0.0] * len(lm.milp.lower)
    for i, o in enumerate(options):
        x[lm.n[i]] = float(counts.get((o.itype, o.variant), 0))
    for model, lv in lm.levels.items():
        for w, a in lv:
            cap = sum(capped(o, demand) * counts.get((o.itype, o.variant), 0)
                      for o in options if o.model == model and o.accuracy >= a)
            x[w] = min(max(0.0, demand.get(model, 0.0)), cap)
    return x


def counts_of(lm: LevelModel, options: Sequence[Option], values: Sequence[float]) -> dict[tuple[str, str], int]:
    return {(o.itype, o.variant): c for i, o in enumerate(options) if (c := int(round(values[lm.n[i]]))) > 0}


def value(cost: Mapping[int, float], values: Sequence[float]) -> float:
    return sum(c * values[j] for j, c in cost.items())


def add_served_floor(lm: LevelModel, served: float, tol: float) -> None:
    """Step 1's result held: the served rates sum to at least ``served`` - ``tol``."""
    lm.milp.row(served_only(lm), served - tol, INF)


def add_covers(lm: LevelModel, options: Sequence[Option], demand: Mapping[str, float], served: float,
               served_by_model: Mapping[str, float], tol: float) -> bool:
    """The cover rows (module docstring) for a served total ``served``; ``served_by_model``: the
    incumbent's. True when they restrict the problem (some model is short), False when valid."""
    total = sum(max(0.0, q) for q in demand.values())
    models = sorted({o.model for o in options if demand.get(o.model, 0.0) > 0})
    short = set() if served >= total - tol else {m for m in models if served_by_model.get(m, 0.0) < demand[m] - tol}
    for model in models:
        if model in short:
            continue
        row = {lm.n[i]: capped(o, demand) for i, o in enumerate(options) if o.model == model}
        lm.milp.row(row, demand[model] - tol, INF)
    if short:
        rest = served - sum(demand[m] for m in models if m not in short)
        row = {lm.n[i]: capped(o, demand) for i, o in enumerate(options) if o.model in short}
        lm.milp.row(row, rest - tol, INF)
    return bool(short)


def add_no_spare(lm: LevelModel, options: Sequence[Option], demand: Mapping[str, float]) -> None:
    """Per model with demand: its capacity <= its demand + its largest worker capacity (module
    docstring, "No spare workers")."""
    for model in sorted({o.model for o in options if demand.get(o.model, 0.0) > 0}):
        row = {lm.n[i]: capped(o, demand) for i, o in enumerate(options) if o.model == model}
        lm.milp.row(row, -INF, demand[model] + max(row.values()))


__all__ = ["LevelModel", "add_covers", "add_no_spare", "add_served_floor", "build", "capped", "counts_of", "served_only",
           "start", "value"]
