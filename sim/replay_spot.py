"""Spot capacity in the replay (issue #28): the fleet loop with spot markets, preemptions from an
availability trace, spot price steps, and the figures of the ``spot`` report.

:class:`SpotReplayFleet` is :class:`sim.replay_fleet.ReplayFleet` with the spot decisions of
:mod:`scaler.spot_market` in its hooks: the planner prices each type at what it can buy now
(:func:`scaler.spot_market.planning_prices`), the overprovision joins the target before parking, and
the actuator gets the slot target of :func:`scaler.spot_market.place` (placed again at once when a
zone refuses a launch, InsufficientCapacity marking it out for the cooldown). Instances are counted
by slot in the fake cloud, the actuator and the ledger, so the budget is checked at the price each
one is billed at.

:class:`SpotDriver` plays the world: a trace row taking a zone's capacity away makes the fake cloud
refuse spot launches there and gives every spot instance running there an interruption notice
(EC2's two minutes, :data:`scaler.spot_market.NOTICE_S`): the fleet marks the zone out, places a
replacement at once (``fleet_tick("spot interruption")``), drains the doomed worker shortly before
EC2 reclaims it, and a query still running then is re-run on another worker. A price step reprices
the slot in the ledger, the actuator and the market, and the fleet answers it at the same instant.

The fleet learns what the daemon would learn, no more: notices, and refused launches; a zone that
comes back is tried again when its cooldown ends.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Collection, Mapping, Protocol, Sequence

from config.catalog import InstanceType
from config.schema import Config
from scaler.actuator import ApplyReport
from scaler.cloud import CLUSTER_TAG, ManagedInstance
from scaler.joint_plan import JointPlan, ModelShare
from scaler.replan import DemandView
from scaler.spot_market import (DRAIN_LEAD_S, Placement, PlanningView, SpotMarket, SpotState, after_apply,
                                after_notice, overprovision, place, planning_prices, settle)
from scaler.spot_slots import base_type, is_spot, slot_of, split_slot, typed
from sim.ledger import CostLedger
from sim.replay_fleet import ReplayFleet
from sim.spot_trace import ANY_TYPE, SpotChange, SpotTrace

Schedule = Callable[[float, Callable[[], None]], None]


@dataclass(frozen=True)
class SpotPriceStep:
    """From ``at_s`` on, ``instance_type`` costs ``price`` $/hr on spot in ``zone``."""

    at_s: float
    instance_type: str
    zone: str
    price: float


class SpotPolicy(Protocol):
    """Where spot capacity goes: costscale's (:class:`CostscaleSpot`) or a baseline's."""

    name: str

    def extras(self, market: SpotMarket, target: Mapping[str, int], prices: Mapping[str, float], budget: float,
               unavailable: Collection[str]) -> dict[str, int]: ...

    def place(self, market: SpotMarket, target: Mapping[str, int], instances: Sequence[ManagedInstance],
              budget: float, *, unavailable: Collection[str], doomed: Collection[str],
              retire_first: Sequence[str], extra: Mapping[str, int]) -> Placement: ...


class CostscaleSpot:
    """costscale's spot decisions (:mod:`scaler.spot_market`)."""

    name = "costscale"

    def extras(self, market: SpotMarket, target: Mapping[str, int], prices: Mapping[str, float], budget: float,
               unavailable: Collection[str]) -> dict[str, int]:
        return overprovision(market, target, prices, budget, unavailable)

    def place(self, market: SpotMarket, target: Mapping[str, int], instances: Sequence[ManagedInstance],
              budget: float, *, unavailable: Collection[str], doomed: Collection[str],
              retire_first: Sequence[str], extra: Mapping[str, int]) -> Placement:
        return place(market, target, instances, budget, unavailable=unavailable, doomed=doomed,
                     retire_first=retire_first, extra=extra)


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


def _merge(a: ApplyReport, b: ApplyReport) -> ApplyReport:
    """Two applies of one tick as one report (the second placed again after a zone refused)."""
    for t, ids in b.launched.items():
        a.launched.setdefault(t, []).extend(ids)
    a.terminated += b.terminated
    a.errors += b.errors
    a.unavailable += [u for u in b.unavailable if u not in a.unavailable]
    a.target, a.shortfall, a.steps = b.target, b.shortfall, a.steps + b.steps
    return a


class SpotReplayFleet(ReplayFleet):
    """The replay's fleet loop with spot markets (module docstring)."""

    def __init__(self, *args: Any, market: SpotMarket, policy: SpotPolicy | None = None, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.market = market
        self.policy: SpotPolicy = policy or CostscaleSpot()
        self.state = SpotState.initial(market)
        self.placement: Placement | None = None
        self.extra: dict[str, int] = {}
        self._spot_planned: frozenset[str] | None = None    # the types the last plan priced at spot
        self.actuator.catalog.update(slot_catalog(self.cfg, market))

    def decide(self, demand: Mapping[str, DemandView],
               keep: Mapping[str, ModelShare] | None = None) -> tuple[dict[str, int], JointPlan | None]:
        self._spot_planned = self._view().on_spot
        return super().decide(demand, keep)

    def _fell_back(self) -> bool:
        """A type the plan priced at spot has no trusted zone left (refusals, notices)."""
        return self._spot_planned is not None and not self._spot_planned <= self._view().on_spot

    def replan_now(self, plan: JointPlan | None, target: dict[str, int]) -> bool:
        """Also when a type the plan priced at spot has no zone left: the pool is planned again at
        what it can buy now before on-demand is bought for a plan priced at spot."""
        return super().replan_now(plan, target) or self._fell_back()

    def _trusted_out(self) -> set[str]:
        """Slots the planner and the overprovision leave aside: out for now, or suspect."""
        return self.actuator.unavailable_types() | set(self.state.suspect)

    def _view(self) -> PlanningView:
        return planning_prices(self.market, self._trusted_out())

    def planning(self) -> tuple[Config, set[str]]:
        v = self._view()
        return priced_config(self.cfg, v.prices), set(v.excluded)

    def plan_key(self) -> frozenset[str]:
        v = self._view()
        return frozenset(v.excluded) | frozenset(f"{t}={p:.6f}" for t, p in v.prices.items())

    def typed(self, instances: list[ManagedInstance]) -> list[ManagedInstance]:
        return typed(instances)

    def type_price(self, instance_type: str) -> float:
        return self._view().prices.get(instance_type, float(self.market.on_demand[instance_type]))

    def extend_target(self, target: dict[str, int]) -> dict[str, int]:
        v = self._view()
        self.extra = self.policy.extras(self.market, target, v.prices, self.actuator.budget, self._trusted_out())
        return {t: target.get(t, 0) + self.extra.get(t, 0) for t in sorted(set(target) | set(self.extra))}

    def actuate(self, target: dict[str, int], plan_id: str, retire: list[str],
                listed: list[ManagedInstance]) -> ApplyReport:
        merged: ApplyReport | None = None
        for _ in range(len(self.market.zones) + 2):
            self.state = settle(self.state, {i.instance_id for i in listed if i.live})
            pl = self.policy.place(self.market, target, listed, self.actuator.budget,
                                   unavailable=self.actuator.unavailable_types(), doomed=set(self.state.doomed),
                                   retire_first=retire, extra=self.extra)
            self.placement = pl
            rep = self.actuator.apply(pl.target, plan_id, list(pl.retire_first), listed)
            self.state = after_apply(self.state, [s for s, ids in rep.launched.items() if ids], rep.unavailable)
            merged = rep if merged is None else _merge(merged, rep)
            if not rep.unavailable or self._fell_back():      # fell back: fleet_tick plans again at once
                break
            listed = self.cloud.list_managed()
        assert merged is not None
        return merged

    def notice(self, instance_id: str, slot: str) -> float:
        """An interruption notice: the instance is doomed, its zone out for the cooldown; returns
        when EC2 reclaims it."""
        self.state, (s, until) = after_notice(self.state, instance_id, slot, self.clock.now())
        self.store.mark_unavailable(s, until, "spot interruption notice")
        return self.state.doomed[instance_id]


@dataclass
class SpotDriver:
    """The spot world of one replay (module docstring) and its tally."""

    cfg: Config
    market: SpotMarket
    trace: SpotTrace | None = None
    price_steps: tuple[SpotPriceStep, ...] = ()
    notices: list[tuple[float, str, str]] = field(default_factory=list)     # (at, instance id, slot)
    reclaimed: list[tuple[float, str]] = field(default_factory=list)
    re_run: dict[str, set[int]] = field(default_factory=dict)               # model -> queries re-dispatched
    fleet: SpotReplayFleet | None = None
    ledger: CostLedger | None = None

    def attach(self, fleet: SpotReplayFleet, ledger: CostLedger, schedule: Schedule) -> None:
        self.fleet, self.ledger = fleet, ledger
        by_time: dict[float, list[SpotChange]] = {}
        for ch in (self.trace.changes() if self.trace is not None else []):
            by_time.setdefault(ch.at_s, []).append(ch)
        for at, chs in by_time.items():        # one instant's rows at once: every zone moves, then notices
            schedule(at, lambda chs=chs: self._availability(chs))
        for st in self.price_steps:
            schedule(st.at_s, lambda st=st: self._price(st))
        self._schedule = schedule

    def _mine(self) -> list[ManagedInstance]:
        assert self.fleet is not None
        return [i for i in self.fleet.cloud.all_instances() if i.tags.get(CLUSTER_TAG) == self.cfg.cluster and i.live]

    def _availability(self, changes: Sequence[SpotChange]) -> None:
        fleet = self.fleet
        assert fleet is not None and self.trace is not None
        now = fleet.clock.now()
        gone: list[str] = []
        for t in self.market.spot:
            for z in sorted({ch.zone for ch in changes if ch.instance_type in (t, ANY_TYPE)}):
                if z not in self.market.zones:
                    continue
                up = self.trace.available(z, t, now)
                fleet.cloud.fail_capacity(slot_of(t, z), not up)
                if not up:
                    gone.append(slot_of(t, z))
        noticed = False
        for slot in gone:
            for inst in self._mine():
                if inst.instance_type == slot and inst.instance_id not in fleet.state.doomed:
                    at = fleet.notice(inst.instance_id, slot)
                    self.notices.append((now, inst.instance_id, slot))
                    self._schedule(max(now, at - DRAIN_LEAD_S), lambda i=inst.instance_id: self._drain(i))
                    self._schedule(at, lambda i=inst.instance_id: self._reclaim(i))
                    noticed = True
        if noticed:
            fleet.fleet_tick("spot interruption")

    def _drain(self, iid: str) -> None:
        if self.fleet is not None and self.fleet.workers is not None:
            self.fleet.workers.drain(iid)

    def _reclaim(self, iid: str) -> None:
        fleet = self.fleet
        assert fleet is not None
        now = fleet.clock.now()
        if not fleet.cloud.reclaim(iid):
            return                                        # the fleet had retired it first
        self.reclaimed.append((now, iid))
        w = fleet.workers
        if w is not None:
            model = w.joined.get(iid)
            if model is not None:
                again = w.lanes[model].remove_worker(iid, now, lost=True)
                self.re_run.setdefault(model, set()).update(again)
            w.forget(iid)

    def _price(self, st: SpotPriceStep) -> None:
        fleet = self.fleet
        assert fleet is not None and self.ledger is not None
        slot = slot_of(st.instance_type, st.zone)
        self.market = self.market.with_price(st.instance_type, st.zone, st.price)
        fleet.market = self.market
        fleet.actuator.catalog[slot] = replace(fleet.actuator.catalog[slot], price_per_hour=float(st.price))
        self.ledger.reprice(fleet.clock.now(), {slot: float(st.price)})
        fleet.fleet_tick("spot price")

    # ---- the report ------------------------------------------------------------------------
    def report(self, lanes: Mapping[str, Any], ledger: CostLedger, duration_s: float) -> dict[str, Any]:
        """The ``spot`` section of the replay report (README "Spot")."""
        from sim.query_loop import SERVED

        hours = ledger.instance_hours
        cost = ledger.cost_by_slot
        total_h = sum(hours.values())
        by_type: dict[str, dict[str, float]] = {}
        by_zone: dict[str, float] = {}
        market_h = {"spot": 0.0, "on_demand": 0.0}
        market_usd = {"spot": 0.0, "on_demand": 0.0}
        for slot, h in hours.items():
            t, zone = split_slot(slot)
            m = "spot" if zone else "on_demand"
            market_h[m] += h
            market_usd[m] += cost.get(slot, 0.0)
            by_type.setdefault(t, {"on_demand": 0.0, "spot": 0.0})[m] += h
            if zone:
                by_zone[zone] = by_zone.get(zone, 0.0) + h
        fallback_h = sum(v["on_demand"] for t, v in by_type.items() if self.market.spot_allowed(t))
        lost = sum(int((lanes[m].outcome[sorted(qs)] != SERVED).sum()) for m, qs in self.re_run.items() if qs)
        out: dict[str, Any] = {
            "policy": self.fleet.policy.name if self.fleet is not None else "costscale",
            "preemptions": len(self.notices),
            "preemptions_by_zone": {z: sum(1 for _, _, s in self.notices if split_slot(s)[1] == z)
                                    for z in sorted({split_slot(s)[1] for _, _, s in self.notices})},
            "reclaimed": len(self.reclaimed),
            "queries_re_run": sum(len(q) for q in self.re_run.values()),
            "queries_lost_to_preemption": lost,
            "spot_share": round(market_h["spot"] / total_h, 6) if total_h else 0.0,
            "fallback_hours": round(fallback_h, 6),
            "instance_hours": {m: round(h, 6) for m, h in market_h.items()},
            "cost_usd": {m: round(c, 6) for m, c in market_usd.items()},
            "instance_hours_by_type": {t: {m: round(h, 6) for m, h in v.items()} for t, v in sorted(by_type.items())},
            "spot_hours_by_zone": {z: round(h, 6) for z, h in sorted(by_zone.items())},
            "zones": list(self.market.zones),
        }
        if self.trace is not None:      # the share of the run each zone had spot (for the first spot type)
            first = next(iter(self.market.spot), ANY_TYPE)
            out["trace"] = {"source": self.trace.source, "available_share": {
                z: round(self.trace.available_share(z, first, duration_s), 6) for z in self.market.zones}}
        return out


def spot_prices_for(cfg: Config, override: Mapping[str, Mapping[str, float]] | None = None) -> dict[str, dict[str, float]]:
    """The spot prices a replay bills at: ``override`` (type -> zone -> $/hr) over the shipped table."""
    from config.spot_catalog import load_spot_table

    table = load_spot_table(cfg.region)
    for t, zones in (override or {}).items():
        table.setdefault(t, {}).update({z: float(p) for z, p in zones.items()})
    return table


__all__ = ["CostscaleSpot", "SpotDriver", "SpotPolicy", "SpotPriceStep", "SpotReplayFleet", "priced_config",
           "slot_catalog", "spot_prices_for"]
