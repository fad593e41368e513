"""Which model each live instance serves (pure; issue #24, design (a): a sub-pool per model).

The joint plan (:mod:`scaler.planner.joint_plan`) says how many instances of each type every model gets;
the actuator launches and retires by type only. :func:`assign_workers` maps the live instances to
the models, and keeps an instance on the model it serves whenever it can, since moving one swaps
the model it has loaded (a load, and queries it cannot take meanwhile):

1. an instance keeps its model while that model still wants an instance of its type;
2. the instances left go, in id order, to the models still short of instances of their type, in
   the config's model order;
3. an instance beyond every model's want (parked, surplus the fleet is about to park or retire, or
   an instance still booting for a plan that moved) keeps its model, else goes to the model with the
   most instances of its type wanted, else to the model with the most demand.

With one model, every instance serves it. :func:`fallback_shares` splits a pool that was not
planned per model (a pinned pool, a baseline's pool, the conservative pool of an unprofiled model)
over the models, round robin per type in the order of their demand.
"""
from __future__ import annotations

from typing import Collection, Mapping, Sequence


def fallback_shares(pool: Mapping[str, int], models: Sequence[str],
                    demand_qps: Mapping[str, float]) -> dict[str, dict[str, int]]:
    """``pool`` dealt over ``models``: per type, one instance at a time to each model in turn, the
    models taken in decreasing demand (ties: the given order), so each model holds some workers
    when the pool has as many instances as there are models."""
    order = sorted(models, key=lambda m: (-demand_qps.get(m, 0.0), models.index(m)))
    out: dict[str, dict[str, int]] = {m: {} for m in models}
    k = 0
    for t in sorted(pool):
        for _ in range(int(pool[t])):
            m = order[k % len(order)]
            out[m][t] = out[m].get(t, 0) + 1
            k += 1
    return out


def assign_workers(instances: Sequence[tuple[str, str]], shares: Mapping[str, Mapping[str, int]],
                   previous: Mapping[str, str], demand_qps: Mapping[str, float] | None = None,
                   parked: Collection[str] = ()) -> dict[str, str]:
    """Instance id → model for ``instances`` ((id, type), the live ones), given each model's wanted
    count per type (``shares``, in the config's model order) and the assignment held now
    (``previous``). ``parked`` instances (:mod:`scaler.fleet.parking`, chosen by type alone) serve no
    model's share: they are surplus, so a model whose instance was parked gets another one of the
    type. See the module docstring for the rules."""
    models = list(shares)
    if not models:
        return {}
    if len(models) == 1:
        return {iid: models[0] for iid, _ in instances}
    want = {m: dict(shares[m]) for m in models}
    out: dict[str, str] = {}
    ordered = sorted(i for i in instances if i[0] not in parked)
    for iid, t in ordered:                       # 1. keep
        m = previous.get(iid)
        if m in want and want[m].get(t, 0) > 0:
            want[m][t] -= 1
            out[iid] = m
    for iid, t in ordered:                       # 2. fill
        if iid in out:
            continue
        for m in models:
            if want[m].get(t, 0) > 0:
                want[m][t] -= 1
                out[iid] = m
                break
    demand = demand_qps or {}
    busiest = max(models, key=lambda m: (demand.get(m, 0.0), -models.index(m)))
    for iid, t in sorted(instances):             # 3. surplus (and parked)
        if iid in out:
            continue
        m = previous.get(iid)
        if m not in shares:
            wanted = [x for x in models if shares[x].get(t, 0) > 0]
            m = max(wanted, key=lambda x: (shares[x].get(t, 0), -models.index(x))) if wanted else busiest
        out[iid] = m
    return out


def shares_for(plan: object | None, target: Mapping[str, int], models: Sequence[str],
               demand_qps: Mapping[str, float]) -> dict[str, dict[str, int]]:
    """Each model's pool under ``target``: the joint plan's (``scaler.planner.joint_plan.JointPlan``), else
    ``target`` dealt over the models (:func:`fallback_shares`: a pinned pool, a baseline's, the
    conservative pool of an unprofiled model)."""
    per_model = getattr(plan, "models", None)
    if per_model:
        return {m: dict(s.pool) for m, s in per_model.items()}
    return fallback_shares(target, list(models), demand_qps)


def released(instances: Sequence[tuple[str, str]], shares: Mapping[str, Mapping[str, int]],
             assignment: Mapping[str, str], ready: Collection[str] = ()) -> set[str]:
    """The instances their model no longer wants: of each model's instances of a type, those beyond
    its new share. The model keeps the ``ready`` ones (registered, serving) first, then the lowest
    ids; so an instance still booting is released before a warm one (releasing the warm one left the
    model one booting worker short while its demand was at the step that launched it: issue #24's
    live test, 5 of 335 queries). The fleet parks and retires these first
    (:func:`scaler.fleet.parking.decide_parking`'s ``prefer``), so a model that keeps its share keeps its
    workers and no model swaps for nothing."""
    mine: dict[tuple[str, str], list[str]] = {}
    for iid, t in instances:
        m = assignment.get(iid)
        if m is not None:
            mine.setdefault((m, t), []).append(iid)
    out: set[str] = set()
    for (m, t), ids in mine.items():
        keep = int(shares.get(m, {}).get(t, 0))
        out.update(sorted(ids, key=lambda i: (i not in ready, i))[keep:])
    return out


__all__ = ["assign_workers", "fallback_shares", "released", "shares_for"]
