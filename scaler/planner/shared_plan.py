"""Design (b) of the many-models issue (#24), for comparison: one pool whose workers each host every
model, sized by the models' throughput bounds on the whole pool (pure).

A pool serves model ``m`` alone at up to ``U_m(pool)`` q/s (Kairos §5.2, Eq. 9-15, at ``m``'s batch
mix and QoS; :mod:`scaler.planner.upper_bound`). Shared by time (a worker runs one query at a time, of any
model), the pool holds demands ``d_m`` when the fractions of its time they take add up to at most
one: ``sum_m d_m / U_m(pool) <= 1`` (the fluid multiplexing bound; INFaaS §4.2 and Proteus §4 place
several models' variants on shared workers the same way, by capacity fractions). The cheapest pool
within the budget that meets it, with every ``d_m`` taken as ``need_m = demand_m x (1 + headroom)``,
is design (b)'s ``min_cost`` pick (:func:`shared_min_cost`), evaluated over every pool within the
budget at once.

It is an estimate from bounds, not a plan the daemon runs: the replay and the dispatcher serve
design (a) (:mod:`scaler.planner.joint_plan`). ``bench/planner/joint_bench.py`` compares the two in dollars.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from config.profiles import ProfileTable
from config.schema import Config
from scaler.planner.base_aux import split_base_aux
from scaler.planner.replan import DemandView
from scaler.planner.upper_bound import enumerate_pools, upper_bounds


@dataclass(frozen=True)
class SharedPick:
    """Design (b)'s pick: the pool, its $/hr, and the share of its time each model takes."""

    pool: dict[str, int]
    cost_per_hour: float
    load: dict[str, float]          # need_m / U_m(pool)
    covered: bool                   # False: no pool within the budget holds every need


def pool_bounds(cfg: Config, profiles: ProfileTable, demand: Mapping[str, DemandView], types: Sequence[str],
                counts: np.ndarray) -> dict[str, np.ndarray]:
    """Each model's upper bound (q/s) on every pool (rows of ``counts`` over ``types``)."""
    prices = cfg.prices()
    out = {}
    for m in cfg.models:
        profs = {t: profiles.get(m.profile_name, t) for t in types}
        ba = split_base_aux(profs, demand[m.name].mix, m.qos_ms, {t: prices[t] for t in types}, 0.98)
        col = {t: j for j, t in enumerate(types)}
        u = counts[:, col[ba.base_type]]
        v = counts[:, [col[t] for t in ba.aux_types]] if ba.aux else np.zeros((len(u), 0))
        out[m.name] = upper_bounds(u, v, ba.params)
    return out


def shared_min_cost(cfg: Config, profiles: ProfileTable, demand: Mapping[str, DemandView],
                    budget: float | None = None) -> SharedPick:
    """The cheapest pool within the budget (and the per-type bounds) whose time the models' needs
    fill at most once (module docstring); when none does, the pool within budget that leaves the
    least load over one, flagged not covered."""
    budget = float(budget if budget is not None else cfg.budget_per_hour)
    types = [t.type for t in cfg.instance_types]
    prices = cfg.prices()
    bounds = cfg.type_bounds()
    counts, cost = enumerate_pools([prices[t] for t in types], budget, [bounds[t][0] for t in types],
                                   [bounds[t][1] for t in types])
    ub = pool_bounds(cfg, profiles, demand, types, counts)
    need = {m.name: demand[m.name].qps * (1.0 + cfg.headroom) for m in cfg.models}
    with np.errstate(divide="ignore", invalid="ignore"):
        load = sum(np.where(ub[m] > 0, need[m] / ub[m], np.where(need[m] > 0, np.inf, 0.0)) for m in ub)
    ok = np.flatnonzero(load <= 1.0 + 1e-12)
    if ok.size:
        i = int(ok[np.lexsort((load[ok], np.round(cost[ok], 9)))][0])
        covered = True
    else:
        i = int(np.argmin(load))
        covered = False
    with np.errstate(divide="ignore", invalid="ignore"):
        per = {m: float(need[m] / ub[m][i]) if ub[m][i] > 0 else float("inf") for m in ub}
    return SharedPick({t: int(c) for t, c in zip(types, counts[i]) if c}, float(cost[i]), per, covered)


__all__ = ["SharedPick", "pool_bounds", "shared_min_cost"]
