"""The spot hooks of one fleet tick (issue #28), shared by the daemon (``daemon/aws/spot_wiring.py``)
and the replay (``sim/replay/spot.py``): one copy of what a fleet tick asks the spot decisions of
:mod:`scaler.spot.market`, around the actuator.

The fleet tick (``scaler.fleet.step``; ``Daemon.fleet_tick``, ``ReplayFleet.fleet_tick``) calls its
market hooks, :class:`MarketHooks` (the daemon's ``FleetMarket`` is one): on-demand only, what the
tick did before spot; with spot, in order: :meth:`SpotFleet.planning` (the config priced at what each type can buy now, SpotHedge §4.3,
and the types left out), :meth:`SpotFleet.plan_key` (a change of those plans again),
:meth:`SpotFleet.typed` and :meth:`SpotFleet.type_price` (parking and worker assignment see types),
:meth:`SpotFleet.extend_target` (the overprovision, SpotHedge §4.2), :meth:`SpotFleet.actuate` (the
slot placement, applied; placed again at once when a zone refuses: the next zone, then on-demand,
by :func:`scaler.spot.market.zone_order`) and :meth:`SpotFleet.replan_now`. An interruption notice
goes through :meth:`SpotFleet.notice` (:func:`scaler.spot.market.after_notice`).

This module holds state (the spot state, the last placement) and calls the actuator it is given;
the decisions themselves stay pure in :mod:`scaler.spot.market`.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Mapping, Protocol, Sequence

from config.catalog import InstanceType
from config.schema import Config
from scaler.fleet.market_hooks import Actuator
from scaler.fleet.reports import ApplyReport
from scaler.cloud.provider import ManagedInstance
from scaler.fleet.step import replan_without_unavailable
from scaler.planner.joint_plan import JointPlan
from scaler.planner.quota import VcpuQuota, quota_for
from scaler.spot.market import (Placement, PlanningView, SpotMarket, SpotState, after_apply, after_notice,
                                after_reprice, overprovision, place, planning_prices, settle)
from scaler.cloud.slots import base_type, is_spot, typed
from scaler.spot.quota_fit import fit_quotas


class SpotPolicy(Protocol):
    """Where spot capacity goes: costscale's (:class:`CostscaleSpot`) or a baseline's."""

    name: str

    def extras(self, market: SpotMarket, target: Mapping[str, int], prices: Mapping[str, float], budget: float,
               unavailable: Any) -> dict[str, int]: ...

    def place(self, market: SpotMarket, target: Mapping[str, int], instances: Sequence[ManagedInstance],
              budget: float, *, unavailable: Any, doomed: Any, retire_first: Sequence[str],
              extra: Mapping[str, int]) -> Placement: ...


class CostscaleSpot:
    """costscale's spot decisions (:mod:`scaler.spot.market`), the placement within the vCPU
    quotas (:mod:`scaler.spot.quota_fit`; ``quotas``: (spot, on-demand), None: unlimited)."""

    name = "costscale"

    def __init__(self, quotas: tuple[VcpuQuota | None, VcpuQuota | None] = (None, None)) -> None:
        self.quotas = quotas

    def extras(self, market: SpotMarket, target: Mapping[str, int], prices: Mapping[str, float], budget: float,
               unavailable: Any) -> dict[str, int]:
        return overprovision(market, target, prices, budget, unavailable)

    def place(self, market: SpotMarket, target: Mapping[str, int], instances: Sequence[ManagedInstance],
              budget: float, *, unavailable: Any, doomed: Any, retire_first: Sequence[str],
              extra: Mapping[str, int]) -> Placement:
        pl = place(market, target, instances, budget, unavailable=unavailable, doomed=doomed,
                   retire_first=retire_first, extra=extra)
        return fit_quotas(market, pl, budget, self.quotas[0], self.quotas[1], unavailable)


def priced_config(cfg: Config, prices: Mapping[str, float]) -> Config:
    """``cfg`` with the allowed types priced at ``prices`` (the planner's view; a YAML price override
    is the type's on-demand price, which ``prices`` already accounts for)."""
    types = [t.model_copy(update={"price_per_hour": None}) if t.type in prices else t for t in cfg.instance_types]
    return cfg.model_copy(update={"instance_types": types}).with_region_prices(
        {**cfg.prices(), **{t: float(p) for t, p in prices.items()}})


def slot_catalog(cfg: Config, market: SpotMarket) -> dict[str, InstanceType]:
    """The actuator's catalog: each allowed type (its on-demand slot) and each priced spot slot."""
    cat = cfg.catalog()
    out = dict(cat)
    for slot, p in market.slot_prices().items():
        if is_spot(slot):
            out[slot] = replace(cat[base_type(slot)], name=slot, price_per_hour=p)
    return out


def merge_reports(a: ApplyReport, b: ApplyReport) -> ApplyReport:
    """Two applies of one tick as one report (the second placed again after a zone refused)."""
    for t, ids in b.launched.items():
        a.launched.setdefault(t, []).extend(ids)
    a.terminated += b.terminated
    a.errors += b.errors
    a.unavailable += [u for u in b.unavailable if u not in a.unavailable]
    a.quota_refused += [u for u in b.quota_refused if u not in a.quota_refused]
    a.target, a.shortfall, a.steps = b.target, b.shortfall, a.steps + b.steps
    return a


class SpotFleet:
    """The spot hooks of the fleet tick (module docstring) over ``actuator``; ``list_managed`` lists
    the cloud again after a refused launch."""

    def __init__(self, cfg: Config, market: SpotMarket, actuator: Actuator,
                 list_managed: Callable[[], list[ManagedInstance]], policy: SpotPolicy | None = None) -> None:
        self.cfg, self.market, self.actuator, self.list_managed = cfg, market, actuator, list_managed
        types = [t.type for t in cfg.instance_types]
        self.policy: SpotPolicy = policy or CostscaleSpot((quota_for(cfg, types, "spot"),
                                                           quota_for(cfg, types, "on_demand")))
        self.state = SpotState.initial(market)
        self.placement: Placement | None = None
        self.extra: dict[str, int] = {}
        self.spot_planned: frozenset[str] | None = None    # the types the last plan priced at spot
        self.actuator.catalog.update(slot_catalog(cfg, market))

    def requota(self, cfg: Config) -> None:
        """The vCPU quotas of ``cfg`` (read again, lowered, reloaded) for costscale's placement."""
        self.cfg = cfg
        if isinstance(self.policy, CostscaleSpot):
            types = [t.type for t in cfg.instance_types]
            self.policy.quotas = (quota_for(cfg, types, "spot"), quota_for(cfg, types, "on_demand"))

    def reprice(self, market: SpotMarket) -> None:
        """New spot prices (a refresh, a reload, a price step): the market, the actuator's slot prices,
        and a newly priced slot suspect (:func:`scaler.spot.market.after_reprice`)."""
        self.state = after_reprice(self.state, self.market, market)
        self.market = market
        self.actuator.catalog.update(slot_catalog(self.cfg, market))

    def trusted_out(self) -> set[str]:
        """Slots the planner and the overprovision leave aside: out for now, or suspect."""
        return self.actuator.unavailable_types() | set(self.state.suspect)

    def view(self) -> PlanningView:
        return planning_prices(self.market, self.trusted_out())

    def decided(self) -> None:
        """A plan is being made now: remember which types it prices at spot."""
        self.spot_planned = self.view().on_spot

    def fell_back(self) -> bool:
        """A type the plan priced at spot has no trusted zone left (refusals, notices)."""
        return self.spot_planned is not None and not self.spot_planned <= self.view().on_spot

    def planning(self) -> tuple[Config, set[str]]:
        v = self.view()
        return priced_config(self.cfg, v.prices), set(v.excluded)

    def plan_key(self) -> frozenset[str]:
        v = self.view()
        return frozenset(v.excluded) | frozenset(f"{t}={p:.6f}" for t, p in v.prices.items())

    def replan_now(self, plan: JointPlan | None, target: Mapping[str, int]) -> bool:
        """A type of the target is left out now, or a type the plan priced at spot has no zone left:
        the pool is planned again at what it can buy now before on-demand is bought for it."""
        return replan_without_unavailable(plan, dict(target), set(self.view().excluded)) or self.fell_back()

    def typed(self, instances: list[ManagedInstance]) -> list[ManagedInstance]:
        return typed(instances)

    def parking_view(self, instances: list[ManagedInstance]) -> list[ManagedInstance]:
        """What parking counts against the target: the typed instances but the doomed ones (they
        leave within two minutes: their replacement is not surplus, and parking it would have the
        placement launch yet another)."""
        return [i for i in typed(instances) if i.instance_id not in self.state.doomed]

    def type_price(self, instance_type: str) -> float:
        return self.view().prices.get(instance_type, float(self.market.on_demand[instance_type]))

    def extend_target(self, target: Mapping[str, int]) -> dict[str, int]:
        v = self.view()
        self.extra = self.policy.extras(self.market, target, v.prices, self.actuator.budget, self.trusted_out())
        return {t: target.get(t, 0) + self.extra.get(t, 0) for t in sorted(set(target) | set(self.extra))}

    def actuate(self, target: Mapping[str, int], plan_id: str, retire: Sequence[str],
                listed: list[ManagedInstance]) -> ApplyReport:
        """The slot placement of the type ``target``, applied; a zone that refuses a launch is out for
        the cooldown and the placement runs again (the next zone, then on-demand)."""
        merged: ApplyReport | None = None
        for _ in range(len(self.market.zones) + 2):
            self.state = settle(self.state, {i.instance_id for i in listed if i.live})
            pl = self.policy.place(self.market, target, listed, self.actuator.budget,
                                   unavailable=self.actuator.unavailable_types(), doomed=set(self.state.doomed),
                                   retire_first=list(retire), extra=self.extra)
            self.placement = pl
            rep = self.actuator.apply(pl.target, plan_id, list(pl.retire_first), listed)
            self.state = after_apply(self.state, [s for s, ids in rep.launched.items() if ids], rep.unavailable)
            merged = rep if merged is None else merge_reports(merged, rep)
            if not rep.unavailable or self.fell_back():      # fell back: the fleet tick plans again at once
                break
            listed = self.list_managed()
        assert merged is not None
        return merged

    def notice(self, instance_id: str, slot: str, now: float, reclaim_at: float | None = None) -> float:
        """An interruption notice at ``now`` (EC2 reclaims the instance at ``reclaim_at``, default
        :data:`scaler.spot.market.NOTICE_S` later): the instance is doomed, its zone out for the
        cooldown; returns when it is reclaimed."""
        self.state, (s, until) = after_notice(self.state, instance_id, slot, now, reclaim_at)
        # the out-until mark on the actuator's own clock (the daemon's ``now`` is monotonic, EC2's epoch)
        self.actuator.store.mark_unavailable(s, self.actuator.clock() + (until - now), "spot interruption notice")
        return self.state.doomed[instance_id]


__all__ = ["CostscaleSpot", "SpotFleet", "SpotPolicy", "merge_reports", "priced_config", "slot_catalog"]
