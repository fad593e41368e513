"""Spot placement within the account's vCPU quotas (issue #38 deliverable 6; pure).

AWS counts running Spot vCPUs against the Spot quota of the instance's family and On-Demand vCPUs
against the On-Demand one, separately (EC2 User Guide, "Spot Instance quotas",
https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/using-spot-limits.html, and "On-Demand
Instance quotas", https://docs.aws.amazon.com/ec2/latest/instancetypes/ec2-instance-quotas.html;
families in :mod:`config.quota_families`). :func:`fit_quotas` takes
:func:`scaler.spot.market.place`'s placement and keeps it within both:

1. while a family's spot slots take more vCPUs than its Spot quota, the dearest spot slot of that
   family gives up one instance: to the type's on-demand slot when the type may run on demand, the
   slot is not out of capacity and the On-Demand quota and the budget have room (a fallback), else
   the instance is short;
2. while a family's on-demand slots take more than its On-Demand quota, the dearest on-demand slot
   gives up one instance (short).

Both steps only remove or move instances to a slot within budget, so the placement stays within
the budget. No quota (None): the placement as it is.
"""
from __future__ import annotations

from typing import Collection

from config.budget import BUDGET_EPS
from scaler.cloud.slots import base_type, is_spot
from scaler.planner.quota import VcpuQuota
from scaler.spot.market import Placement, SpotMarket


def _types(target: dict[str, int], spot: bool) -> dict[str, int]:
    out: dict[str, int] = {}
    for s, n in target.items():
        if is_spot(s) == spot and n > 0:
            out[base_type(s)] = out.get(base_type(s), 0) + n
    return out


def _over(quota: VcpuQuota | None, target: dict[str, int], spot: bool) -> str | None:
    """A family whose ``spot`` (or on-demand) slots take more vCPUs than its quota, or None."""
    if quota is None:
        return None
    used = quota.used(_types(target, spot))
    over = sorted(f for f, v in used.items() if f in quota.limits and v > quota.limits[f])
    return over[0] if over else None


def fit_quotas(market: SpotMarket, pl: Placement, budget: float, spot_quota: VcpuQuota | None,
               od_quota: VcpuQuota | None, unavailable: Collection[str] = ()) -> Placement:
    """``pl`` within the Spot and On-Demand vCPU quotas (module docstring)."""
    if spot_quota is None and od_quota is None:
        return pl
    out, short, fallback = dict(pl.target), dict(pl.short), dict(pl.fallback)
    cost = sum(market.price(s) * n for s, n in out.items())
    quotas = [q for q in (spot_quota, od_quota) if q is not None]
    fam = {t: q.family[t] for q in quotas for t in q.family}
    while (f := _over(spot_quota, out, True)) is not None:
        slot = max((s for s, n in out.items() if n > 0 and is_spot(s) and fam.get(base_type(s)) == f),
                   key=lambda s: (market.price(s), s))
        t = base_type(slot)
        out[slot] -= 1
        cost -= market.price(slot)
        trial = dict(out)
        trial[t] = trial.get(t, 0) + 1
        if market.on_demand_allowed(t) and t not in unavailable and _over(od_quota, trial, False) is None \
                and cost + market.on_demand[t] <= budget + BUDGET_EPS:
            out, cost = trial, cost + market.on_demand[t]
            fallback[t] = fallback.get(t, 0) + 1
        else:
            short[t] = short.get(t, 0) + 1
    while (f := _over(od_quota, out, False)) is not None:
        slot = max((s for s, n in out.items() if n > 0 and not is_spot(s) and fam.get(s) == f),
                   key=lambda s: (market.price(s), s))
        out[slot] -= 1
        if fallback.get(slot):
            fallback[slot] -= 1
        short[slot] = short.get(slot, 0) + 1
    return Placement({s: n for s, n in out.items() if n > 0}, pl.retire_first,
                     {t: n for t, n in short.items() if n > 0}, {t: n for t, n in fallback.items() if n > 0})


__all__ = ["fit_quotas"]
