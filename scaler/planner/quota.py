"""The account's running-vCPU quotas as a planning constraint, like the budget (issue #38
deliverable 6; pure).

AWS caps the vCPUs of running instances per family (EC2 User Guide, "Amazon EC2 instance quotas",
https://docs.aws.amazon.com/ec2/latest/instancetypes/ec2-instance-quotas.html; the families in
:mod:`config.quota_families`). A pool is *within the quotas* when, for every family with a quota,
the sum over its types of count x vCPUs is at most the family's limit. The planner treats that as
it treats the budget: the ranking (:mod:`scaler.planner.choose`) lists only pools within it, the
search (:mod:`scaler.planner.search.pool_search`) prunes partial pools over it, "maximal" means no
instance fits beside the pool within budget *and* quota, and the joint plan
(:mod:`scaler.planner.joint_plan`) gives each model what the models before it left.

:func:`binding_quotas` says which quota, not the budget, kept the plan from the budget's best pool
(``costscale plan``).

``Plan.pools_ranked`` under quotas: the ranking counts the pools within the budget and the quotas;
above ``SEARCH_ABOVE`` the search reports :mod:`scaler.planner.search.pool_count`'s count within the budget
and each type's quota alone (an upper bound: the count does not apply a family's sum). The pick,
its cost and bound and the top pools are the same either way (tests/planner/test_quota.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from config.budget import BUDGET_EPS
from config.quota_families import FAMILY_TITLES, SPOT_TITLES, quota_family
from scaler.cloud.slots import base_type, market_of


@dataclass(frozen=True)
class VcpuQuota:
    """Running-vCPU limits per family (``limits``; a family absent is unlimited), and each planned
    type's family and vCPUs."""

    limits: Mapping[str, int]
    family: Mapping[str, str]
    vcpus: Mapping[str, int]
    market: str = "on_demand"

    def matrix(self, types: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(A, b): one row per limited family some of ``types`` belong to; a pool ``c`` (over
        ``types``) is within the quotas iff ``A @ c <= b``."""
        fams = sorted({self.family[t] for t in types if self.family.get(t) in self.limits})
        a = np.array([[self.vcpus[t] if self.family.get(t) == f else 0 for t in types] for f in fams],
                     dtype=np.int64).reshape(len(fams), len(types))
        return a, np.array([self.limits[f] for f in fams], dtype=np.int64)

    def within(self, counts: np.ndarray, types: Sequence[str]) -> np.ndarray:
        """Mask of the rows of ``counts`` (pools over ``types``) within every quota."""
        a, b = self.matrix(types)
        c = np.asarray(counts, dtype=np.int64).reshape(-1, len(types))
        if not len(b):
            return np.ones(len(c), dtype=bool)
        return np.all(c @ a.T <= b[None, :], axis=1)

    def room(self, counts: np.ndarray, types: Sequence[str]) -> np.ndarray:
        """(N, T) mask: one more instance of each type fits its family's quota beside each pool."""
        a, b = self.matrix(types)
        c = np.asarray(counts, dtype=np.int64).reshape(-1, len(types))
        if not len(b):
            return np.ones(c.shape, dtype=bool)
        left = b[None, :] - c @ a.T                          # (N, F) vCPUs left per family
        need = a                                             # (F, T) vCPUs one instance takes
        return np.all((need[None, :, :] == 0) | (need[None, :, :] <= left[:, :, None]), axis=1)

    def type_cap(self, t: str) -> int | None:
        """The most instances of ``t`` its family's quota allows alone (None: unlimited)."""
        f = self.family.get(t)
        if f not in self.limits:
            return None
        return int(self.limits[f]) // max(int(self.vcpus[t]), 1)

    def used(self, pool: Mapping[str, int]) -> dict[str, int]:
        """vCPUs of ``pool`` per family (every family its types belong to)."""
        out: dict[str, int] = {}
        for t, n in pool.items():
            if n and t in self.family:
                out[self.family[t]] = out.get(self.family[t], 0) + int(n) * int(self.vcpus[t])
        return out

    def less(self, pool: Mapping[str, int]) -> "VcpuQuota":
        """The quotas left beside ``pool`` (for the next model of a joint plan)."""
        used = self.used(pool)
        return VcpuQuota({f: max(int(v) - used.get(f, 0), 0) for f, v in self.limits.items()},
                         self.family, self.vcpus, self.market)

    def key(self, types: Sequence[str]) -> tuple[tuple[str, int], ...]:
        """The limits that touch ``types`` (a planning question's cache key)."""
        fams = {self.family.get(t) for t in types}
        return tuple(sorted((f, int(v)) for f, v in self.limits.items() if f in fams))


def cap_bounds(bounds: Mapping[str, tuple[int, int | None]], types: Sequence[str],
               quota: VcpuQuota | None) -> dict[str, tuple[int, int | None]]:
    """Per-type (min, max) with each max no above what the type's family quota allows alone (the
    same pools within the quota; fewer listed before the quota filter)."""
    out = {t: bounds.get(t, (0, None)) for t in types}
    if quota is None:
        return out
    for t in types:
        cap = quota.type_cap(t)
        if cap is not None:
            lo, hi = out[t]
            out[t] = (lo, cap if hi is None else min(hi, cap))
    return out


def type_markets(cfg: Any, market: str) -> set[str]:
    """The quota markets a configured type of ``market`` (on_demand, spot, both) may run in:
    on-demand unless spot-only (or with ``spot.fallback: on_demand`` anyway), spot unless on-demand-only."""
    fallback_od = cfg.spot is not None and cfg.spot.fallback == "on_demand"
    return ({"on_demand"} if market != "spot" or fallback_od else set()) | ({"spot"} if market != "on_demand" else set())


def quota_markets(cfg: Any) -> dict[str, set[str]]:
    """Each quota family the configured types belong to, and the markets they may run in there
    (:func:`type_markets`)."""
    markets: dict[str, set[str]] = {}
    for t in cfg.instance_types:
        markets.setdefault(quota_family(t.type), set()).update(type_markets(cfg, t.market))
    return markets


def budget_peaks(cfg: Any) -> dict[tuple[str, str], tuple[int, str]]:
    """(vCPUs, the pool) of the most each (market, family) quota the types touch may be asked for at
    the budget: one type of the family alone, ``floor(budget / on-demand price) x vCPUs``, the best
    type. The budget is the pool's only fixed bound (the pick moves with demand and profiles), so a
    quota whose headroom holds this never binds (``costscale doctor``'s quota check; pure)."""
    catalog = cfg.catalog()
    out: dict[tuple[str, str], tuple[int, str]] = {}
    for market, family in wanted_quotas(cfg):
        best = (0, "")
        for t in cfg.instance_types:
            if quota_family(t.type) != family or market not in type_markets(cfg, t.market):
                continue
            it = catalog[t.type]
            n = math.floor(cfg.budget_per_hour / it.price_per_hour + BUDGET_EPS) if it.price_per_hour > 0 else 0
            best = max(best, (n * int(it.vcpu), f"{n} x {t.type}"))
        out[(market, family)] = best
    return out


def wanted_quotas(cfg: Any) -> list[tuple[str, str]]:
    """The (market, family) quotas the configured types touch: the ones the daemon reads from
    Service Quotas, and ``costscale doctor`` checks."""
    return sorted((m, f) for f, ms in quota_markets(cfg).items() for m in ms)


def lowered_quotas(refused: Sequence[str], live: Sequence[str], vcpus: Mapping[str, int]) -> dict[tuple[str, str], int]:
    """A launch of each slot of ``refused`` was refused for the vCPU quota (``VcpuLimitExceeded``;
    spot: ``MaxSpotInstanceCountExceeded``): the quota of its family in its market, as known until
    the next read, is the vCPUs of that family and market running now (``live``: the slots of the
    cluster's live instances; ``vcpus``: by type). The account's other instances use the rest of
    the quota: what this cluster runs is what it may hold (pure)."""
    out: dict[tuple[str, str], int] = {}
    for slot in refused:
        key = _quota_key(slot)
        if key is not None:
            out[key] = sum(int(vcpus.get(base_type(s), 0)) for s in live if _quota_key(s) == key)
    return out


def _quota_key(slot: str) -> tuple[str, str] | None:
    """(market, family) of a slot; None for a type no family lists."""
    try:
        return market_of(slot), quota_family(base_type(slot))
    except ValueError:
        return None


def _plan_limits(cfg: Any) -> dict[str, int]:
    """A family's cap on the planned pool: the On-Demand quota where its configured types run on
    demand, plus the Spot quota where they may run spot (a market the types use without a quota:
    unlimited). The placement (:mod:`scaler.spot.quota_fit`) then splits the pool between the two."""
    spec = cfg.quotas
    markets = quota_markets(cfg)
    out: dict[str, int] = {}
    for f in set(spec.on_demand) | set(spec.spot):
        used = markets.get(f, {"on_demand"})
        limits = [(spec.on_demand if m == "on_demand" else spec.spot).get(f) for m in sorted(used)]
        if all(v is not None for v in limits):
            out[f] = int(sum(limits))
    return out


def quota_for(cfg: Any, types: Sequence[str], market: str = "plan") -> VcpuQuota | None:
    """The config's ``quotas`` over ``types`` (their vCPUs from the catalog) for ``market``:
    ``on_demand``, ``spot``, or ``plan`` (the planned pool's cap, :func:`_plan_limits`: the On-Demand
    quota alone unless a type may run spot); None when no family of those types has a quota (the
    planner then plans exactly as without quotas)."""
    spec = getattr(cfg, "quotas", None)
    if spec is None:
        return None
    if market == "plan":
        limits = _plan_limits(cfg)
    else:
        limits = dict(spec.spot if market == "spot" else spec.on_demand)
    catalog = cfg.full_catalog()
    family = {t: quota_family(t) for t in types}
    if not any(f in limits for f in family.values()):
        return None
    return VcpuQuota(limits, family, {t: int(catalog[t].vcpu) for t in types},
                     "on_demand" if market == "plan" else market)


@dataclass(frozen=True)
class QuotaBind:
    """A quota that kept the plan from the budget's best pool: the family, its limit, what the
    budget's best pool needs, and the AWS quota's name to raise."""

    family: str
    limit: int
    needs: int
    market: str = "on_demand"

    @property
    def title(self) -> str:
        return (SPOT_TITLES if self.market == "spot" else FAMILY_TITLES)[self.family]

    def line(self) -> str:
        return (f"quota binds, not the budget: {self.family} {self.market.replace('_', '-')} vCPUs limit "
                f"{self.limit}, the budget's best pool needs {self.needs}; raise \"{self.title}\" to "
                f"{self.needs} vCPUs")

    def to_dict(self) -> dict[str, Any]:
        return {"family": self.family, "market": self.market, "limit": self.limit, "needs": self.needs,
                "quota": self.title}


def binding_quotas(best_pool: Mapping[str, int], quota: VcpuQuota | None) -> list[QuotaBind]:
    """The quotas ``best_pool`` (the plan without quotas) is over: those that bind, not the budget."""
    if quota is None:
        return []
    used = quota.used(best_pool)
    return [QuotaBind(f, int(quota.limits[f]), used[f], quota.market)
            for f in sorted(used) if f in quota.limits and used[f] > quota.limits[f]]


__all__ = ["QuotaBind", "VcpuQuota", "binding_quotas", "budget_peaks", "cap_bounds", "type_markets", "lowered_quotas", "quota_for", "quota_markets",
           "wanted_quotas"]
