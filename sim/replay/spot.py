"""Spot capacity in the replay (issue #28): the fleet loop with spot markets, preemptions from an
availability trace, spot price steps, and the figures of the ``spot`` report.

:class:`SpotReplayFleet` is :class:`sim.replay.fleet.ReplayFleet` with the spot decisions of
:mod:`scaler.spot.market` in its hooks: the planner prices each type at what it can buy now
(:func:`scaler.spot.market.planning_prices`), the overprovision joins the target before parking, and
the actuator gets the slot target of :func:`scaler.spot.market.place` (placed again at once when a
zone refuses a launch, InsufficientCapacity marking it out for the cooldown). Instances are counted
by slot in the fake cloud, the actuator and the ledger, so the budget is checked at the price each
one is billed at.

:class:`SpotDriver` plays the world: a trace row taking a zone's capacity away makes the fake cloud
refuse spot launches there and gives every spot instance running there an interruption notice
(EC2's two minutes, :data:`scaler.spot.market.NOTICE_S`): the fleet marks the zone out, places a
replacement at once (``fleet_tick("spot interruption")``), drains the doomed worker shortly before
EC2 reclaims it, and a query still running then is re-run on another worker. A price step reprices
the slot in the ledger, the actuator and the market, and the fleet answers it at the same instant.

The fleet learns what the daemon would learn, no more: notices, and refused launches; a zone that
comes back is tried again when its cooldown ends.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from config.schema import Config
from scaler.cloud.provider import CLUSTER_TAG, ManagedInstance
from scaler.fleet.market_hooks import MarketHooks
from scaler.spot.fleet import SpotFleet, SpotPolicy
from scaler.spot.market import DRAIN_LEAD_S, Placement, SpotMarket, SpotState
from scaler.cloud.slots import slot_of, split_slot
from sim.replay.ledger import CostLedger
from sim.replay.fleet import ReplayFleet
from sim.replay.spot_trace import ANY_TYPE, SpotChange, SpotTrace

Schedule = Callable[[float, Callable[[], None]], None]


@dataclass(frozen=True)
class SpotPriceStep:
    """From ``at_s`` on, ``instance_type`` costs ``price`` $/hr on spot in ``zone``."""

    at_s: float
    instance_type: str
    zone: str
    price: float


class SpotReplayFleet(ReplayFleet):
    """The replay's fleet loop with spot markets (module docstring): its hooks are
    :class:`scaler.spot.fleet.MarketHooks` over a :class:`scaler.spot.fleet.SpotFleet`, the very
    ones the daemon calls."""

    def __init__(self, *args: Any, market: SpotMarket, policy: SpotPolicy | None = None, **kw: Any) -> None:
        self._market, self._policy = market, policy
        super().__init__(*args, **kw)

    def _market_hooks(self) -> MarketHooks:
        self.spot = SpotFleet(self.cfg, self._market, self.actuator, self.cloud.list_managed, self._policy)
        return MarketHooks(self.actuator, self.spot)

    @property
    def market(self) -> SpotMarket:
        return self.spot.market

    @property
    def policy(self) -> SpotPolicy:
        return self.spot.policy

    @property
    def state(self) -> SpotState:
        return self.spot.state

    @property
    def placement(self) -> Placement | None:
        return self.spot.placement

    @property
    def extra(self) -> dict[str, int]:
        return self.spot.extra

    def notice(self, instance_id: str, slot: str) -> float:
        """An interruption notice: the instance is doomed, its zone out for the cooldown; returns
        when EC2 reclaims it."""
        return self.spot.notice(instance_id, slot, self.clock.now())


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
        if self.fleet is not None:
            self.fleet.workers.drain(iid)

    def _reclaim(self, iid: str) -> None:
        fleet = self.fleet
        assert fleet is not None
        now = fleet.clock.now()
        if not fleet.cloud.reclaim(iid):
            return                                        # the fleet had retired it first
        self.reclaimed.append((now, iid))
        w = fleet.workers
        model = w.joined.get(iid)
        if model is not None:
            again = w.lanes[model].remove_worker(iid, now, lost=True)
            self.re_run.setdefault(model, set()).update(again)
        w.forget(iid)

    def _price(self, st: SpotPriceStep) -> None:
        fleet = self.fleet
        assert fleet is not None and self.ledger is not None
        self.market = self.market.with_price(st.instance_type, st.zone, st.price)
        fleet.spot.reprice(self.market)                   # the market and the actuator's slot prices
        self.ledger.reprice(fleet.clock.now(), {slot_of(st.instance_type, st.zone): float(st.price)})
        fleet.fleet_tick("spot price")

    # ---- the report ------------------------------------------------------------------------
    def report(self, lanes: Mapping[str, Any], ledger: CostLedger, duration_s: float) -> dict[str, Any]:
        """The ``spot`` section of the replay report (README "Spot")."""
        from sim.replay.outcomes import SERVED

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
        if self.trace is not None:      # the share of the run each zone had spot, for each type that may run spot
            out["trace"] = {"source": self.trace.source, "available_share": {
                t: {z: round(self.trace.available_share(z, t, duration_s), 6) for z in self.market.zones}
                for t in sorted(self.market.spot)}}
        return out


def spot_prices_for(cfg: Config, override: Mapping[str, Mapping[str, float]] | None = None) -> dict[str, dict[str, float]]:
    """The spot prices a replay bills at: ``override`` (type -> zone -> $/hr) over the shipped table."""
    from config.spot_catalog import load_spot_table

    table = load_spot_table(cfg.region)
    for t, zones in (override or {}).items():
        table.setdefault(t, {}).update({z: float(p) for z, p in zones.items()})
    return table


__all__ = ["SpotDriver", "SpotPriceStep", "SpotReplayFleet", "spot_prices_for"]
