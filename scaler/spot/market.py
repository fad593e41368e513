"""Spot capacity inside the budget (issue #28): the pure decisions the fleet tick takes about spot,
shared by the replay now and the daemon later.

The planner (Kairos §5.2) plans a pool of instance types; these decisions say what each type costs
to plan with and where its instances run:

1. :func:`planning_prices`: a type that may run spot and has a zone open to it is planned at the
   cheapest open zone's spot price (the planned pool fits the budget there; the placement spreads
   it and, where the spread costs more than the budget, moves instances to the cheaper zones);
   one with no open zone at its on-demand price when it may fall back, else it is left out
   (SpotHedge, EuroSys '25, §4.3 "dynamic fallback"; a heterogeneous planner re-plans the pool at
   the prices it can buy now instead of replacing one replica type with its on-demand twin).
2. :func:`overprovision`: ``spot.overprovision`` spot instances beyond the plan, of the type the
   pool holds most of, only within the budget (SpotHedge §4.2: ``N_extra`` spot replicas absorb a
   preemption while its replacement boots).
3. :func:`zone_order`: which zone next for a new spot instance of a type: the open zones, fewest of
   its instances first, then cheapest, then the on-demand fallback (SpotHedge §4.1 "spread": the
   active zones without a replica first).
4. :func:`place`: the slot target (:mod:`scaler.cloud.slots`) for a type target: running instances
   stay where they are; spot first, spread by :func:`zone_order`; on-demand covers what spot cannot
   get and, already running, what spot has not yet got running (make-before-break, §4.3); held
   instances under an interruption notice serve until they are reclaimed; the whole target within
   the budget at the prices billed now (a spot price rise that breaks it retires or moves the
   dearest capacity at once).
5. :func:`after_notice`, :func:`after_apply`, :func:`settle`, :func:`drains_due`: an interruption
   notice (EC2 gives two minutes, :data:`NOTICE_S`) dooms the instance: its zone is out for
   :data:`ZONE_COOLDOWN_S` and suspect until a launch there succeeds (:class:`SpotState`), a
   replacement is placed at once, the doomed worker stops taking queries :data:`DRAIN_LEAD_S` before
   it goes, and a query it still runs then is re-run elsewhere. A refused launch makes its zone
   suspect the same way; so does a slot priced only later (:func:`after_reprice`) in a zone that
   has not given a spot instance yet.

Pure: no I/O, no clock (the caller passes ``now``, the prices and the instances).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Mapping, Sequence

from config.budget import BUDGET_EPS
from config.sections.spot import Market
from scaler.cloud.provider import ManagedInstance
from scaler.cloud.slots import base_type, is_spot, slot_of, split_slot

#: EC2's spot interruption notice: the instance is reclaimed this long after it (s)
NOTICE_S = 120.0
#: a doomed worker takes no new query this long before it is reclaimed (s; a query runs < 1 s here)
DRAIN_LEAD_S = 5.0
#: a zone interrupted (or out of capacity) is not tried again for this long (s): the actuator's
#: capacity cooldown, and the availability traces' 300 s tick (SpotHedge artifact)
ZONE_COOLDOWN_S = 300.0
#: s: float noise in a doomed instance's drain time (a time, not money)
_DRAIN_EPS_S = 1e-9


@dataclass(frozen=True)
class SpotMarket:
    """What the spot decisions know: each allowed type's market and on-demand $/hr, the spot $/hr
    now per type and zone (configured zones with a known price), and the ``spot`` settings."""

    markets: Mapping[str, Market]
    on_demand: Mapping[str, float]
    spot: Mapping[str, Mapping[str, float]]
    zones: tuple[str, ...] = ()
    fallback: str = "on_demand"
    max_price: float | None = None
    overprovision: int = 0

    @classmethod
    def from_config(cls, cfg: Any, spot_prices: Mapping[str, Mapping[str, float]]) -> "SpotMarket":
        """The market of ``cfg`` (a ``config.schema.Config``) with ``spot_prices`` (type -> zone ->
        $/hr: ``scaler.pricing.spot`` or the shipped table); a type or zone without a price gets no
        spot slot."""
        spec = cfg.spot
        zones = tuple(spec.zones) if spec is not None else ()
        markets = {t.type: t.market for t in cfg.instance_types}
        spot = {t: {z: float(spot_prices[t][z]) for z in zones if z in spot_prices.get(t, {})}
                for t, m in markets.items() if m != "on_demand"}
        return cls(markets, cfg.prices(allowed_only=True), spot, zones,
                   spec.fallback if spec is not None else "none",
                   spec.max_price if spec is not None else None, spec.overprovision if spec is not None else 0)

    @property
    def enabled(self) -> bool:
        """Some type may run spot."""
        return any(m != "on_demand" for m in self.markets.values())

    def spot_allowed(self, itype: str) -> bool:
        return self.markets.get(itype, "on_demand") != "on_demand"

    def on_demand_allowed(self, itype: str) -> bool:
        m = self.markets.get(itype, "on_demand")
        return m in ("on_demand", "both") or self.fallback == "on_demand"

    def cap(self, itype: str) -> float:
        """The most paid for one spot instance-hour of ``itype``."""
        return self.max_price if self.max_price is not None else float(self.on_demand[itype])

    def price(self, slot: str) -> float:
        """$/hr billed now for an instance in ``slot``."""
        itype, zone = split_slot(slot)
        return float(self.on_demand[itype]) if zone is None else float(self.spot[itype][zone])

    def slot_prices(self) -> dict[str, float]:
        """Every slot's $/hr: each type's on-demand slot and its priced spot slots."""
        out = {t: float(p) for t, p in self.on_demand.items()}
        for t, by_zone in self.spot.items():
            out.update({slot_of(t, z): float(p) for z, p in by_zone.items()})
        return out

    def keepable(self, slot: str) -> bool:
        """An instance in ``slot`` may stay: an on-demand one while the type may run on-demand, a spot
        one while its zone is configured and priced within :meth:`cap`."""
        itype, zone = split_slot(slot)
        if zone is None:
            return self.on_demand_allowed(itype)
        p = self.spot.get(itype, {}).get(zone)
        return self.spot_allowed(itype) and p is not None and p <= self.cap(itype) + BUDGET_EPS

    def open_zones(self, itype: str, unavailable: Collection[str] = ()) -> list[str]:
        """The zones a new spot instance of ``itype`` may be launched in now: priced within
        :meth:`cap`, its slot not in ``unavailable`` (interrupted or out of capacity, in cooldown)."""
        if not self.spot_allowed(itype):
            return []
        return [z for z in self.zones if self.keepable(slot_of(itype, z)) and slot_of(itype, z) not in unavailable]

    def with_price(self, itype: str, zone: str, price: float) -> "SpotMarket":
        """The market after ``itype``'s spot price in ``zone`` moved to ``price``."""
        spot = {t: dict(z) for t, z in self.spot.items()}
        spot.setdefault(itype, {})[zone] = float(price)
        return SpotMarket(self.markets, self.on_demand, spot, self.zones, self.fallback, self.max_price,
                          self.overprovision)

    def on_demand_only(self) -> "SpotMarket":
        """The same types with every market on-demand (the ``on_demand_only`` baseline)."""
        return SpotMarket({t: "on_demand" for t in self.markets}, self.on_demand, {}, self.zones, "none", None, 0)


@dataclass(frozen=True)
class PlanningView:
    """What the planner sees (:func:`planning_prices`): $/hr per plannable type, the types it must
    leave out, and which are planned at a spot price."""

    prices: dict[str, float]
    excluded: frozenset[str]
    on_spot: frozenset[str]


def planning_prices(market: SpotMarket, unavailable: Collection[str] = ()) -> PlanningView:
    """Step 1 of the module docstring, over every allowed type."""
    prices: dict[str, float] = {}
    excluded: set[str] = set()
    on_spot: set[str] = set()
    for t in market.markets:
        zones = market.open_zones(t, unavailable)
        if zones:
            prices[t] = min(market.spot[t][z] for z in zones)
            on_spot.add(t)
        elif market.on_demand_allowed(t) and t not in unavailable:
            prices[t] = float(market.on_demand[t])
        else:
            excluded.add(t)
    return PlanningView(prices, frozenset(excluded), frozenset(on_spot))


def zone_order(market: SpotMarket, itype: str, placed: Mapping[str, int], unavailable: Collection[str] = ()) -> list[str]:
    """Step 3: the slots a new instance of ``itype`` goes to, best first (``placed``: its instances
    per slot so far): open spot zones by fewest instances, then price, then name; then its
    on-demand slot when it may fall back (and that slot is not out of capacity)."""
    zones = market.open_zones(itype, unavailable)
    spots = sorted((slot_of(itype, z) for z in zones),
                   key=lambda s: (placed.get(s, 0), market.price(s), s))
    if market.on_demand_allowed(itype) and itype not in unavailable:
        spots.append(itype)
    return spots


def overprovision(market: SpotMarket, target: Mapping[str, int], prices: Mapping[str, float], budget: float,
                  unavailable: Collection[str] = ()) -> dict[str, int]:
    """Step 2: extra spot instances for ``target`` (type -> count, planned at ``prices``): up to
    ``market.overprovision`` of the type the target holds most of among those with an open zone
    (ties: the cheaper), each only while the target and the extras cost at most ``budget``."""
    cands = [t for t, n in target.items() if n > 0 and market.open_zones(t, unavailable)]
    if market.overprovision <= 0 or not cands:
        return {}
    pick = min(cands, key=lambda t: (-target[t], prices[t], t))
    cost = sum(prices[t] * n for t, n in target.items())
    room = budget - cost
    k = 0
    while k < market.overprovision and room + BUDGET_EPS >= prices[pick]:
        room -= prices[pick]
        k += 1
    return {pick: k} if k else {}


@dataclass(frozen=True)
class Placement:
    """Where the type target runs: ``target`` slot -> count (held doomed instances included),
    ``retire_first``: ids the actuator takes first where a slot shrinks, ``short``: type ->
    instances no slot could take (no open zone, no fallback, or the budget), ``fallback``: type ->
    on-demand instances held for a type that may run spot."""

    target: dict[str, int]
    retire_first: tuple[str, ...] = ()
    short: dict[str, int] = field(default_factory=dict)
    fallback: dict[str, int] = field(default_factory=dict)

    def cost(self, market: SpotMarket) -> float:
        return sum(market.price(s) * n for s, n in self.target.items())


def drop_order(market: SpotMarket, first: Mapping[str, int]) -> Callable[[ManagedInstance], tuple[Any, ...]]:
    """Sort key of instances, first to go first: the caller's retire-first ids (parked ones), then
    the dearest slot, then pending before running, then the newest, then by id."""
    def key(i: ManagedInstance) -> tuple[Any, ...]:
        return (first.get(i.instance_id, len(first)), -market.price(i.instance_type), i.state != "pending",
                -i.launch_time, i.instance_id)
    return key


def keep_n(instances: Sequence[ManagedInstance], n: int,
           key: Callable[[ManagedInstance], tuple[Any, ...]]) -> list[ManagedInstance]:
    """The ``n`` instances to keep: those last in the drop order."""
    if n <= 0:
        return []
    return sorted(instances, key=key)[-n:] if len(instances) > n else list(instances)


def place(market: SpotMarket, target: Mapping[str, int], instances: Sequence[ManagedInstance], budget: float, *,
          unavailable: Collection[str] = (), doomed: Collection[str] = (), retire_first: Sequence[str] = (),
          extra: Mapping[str, int] | None = None) -> Placement:
    """Step 4 of the module docstring. ``target``: type -> count (parking's, the overprovision
    included; ``extra``: how many of a type's count are that overprovision, placed on spot or not
    at all); ``instances``: the managed ones by slot; ``unavailable``: slots out for now (a type
    name: its on-demand slot); ``doomed``: ids under an interruption notice; ``retire_first``:
    parked ids."""
    key = drop_order(market, {iid: k for k, iid in enumerate(retire_first)})
    live = [i for i in instances if i.live]
    by_type: dict[str, list[ManagedInstance]] = {}
    existing: dict[str, int] = {}
    for i in live:
        by_type.setdefault(base_type(i.instance_type), []).append(i)
        existing[i.instance_type] = existing.get(i.instance_type, 0) + 1
    out: dict[str, int] = {}
    short: dict[str, int] = {}
    fallback: dict[str, int] = {}
    overlap: dict[str, int] = {}
    held: list[ManagedInstance] = []
    for t in sorted(set(target) | set(by_type)):
        n = int(target.get(t, 0))
        x = min(int((extra or {}).get(t, 0)), n)          # spot or nothing
        mine = by_type.get(t, [])
        held += [i for i in mine if i.instance_id in doomed and n > 0 and market.keepable(i.instance_type)]
        alive = [i for i in mine if i.instance_id not in doomed and market.keepable(i.instance_type)]
        od_alive = [i for i in alive if not is_spot(i.instance_type)]
        spot_keep = keep_n([i for i in alive if is_spot(i.instance_type)], n, key) if market.spot_allowed(t) else []
        placed: dict[str, int] = {}
        for i in spot_keep:
            placed[i.instance_type] = placed.get(i.instance_type, 0) + 1
        for _ in range(n - len(spot_keep)):
            order = [s for s in zone_order(market, t, placed, unavailable) if is_spot(s)]
            if not order:
                break
            placed[order[0]] = placed.get(order[0], 0) + 1
        on_spot = sum(placed.values())
        running = sum(1 for i in spot_keep if i.state == "running")
        od_need = max(n - x - on_spot, 0)
        if market.on_demand_allowed(t) and (t not in unavailable or od_alive):
            hold = max(od_need, min(len(od_alive), n - x - running))
            if t in unavailable:          # out of on-demand capacity: keep what runs, launch nothing
                hold = min(hold, len(od_alive))
            if hold:
                placed[t] = hold
            if hold > od_need:
                overlap[t] = hold - od_need
            if hold and market.spot_allowed(t):
                fallback[t] = hold
            if hold < od_need:
                short[t] = od_need - hold
        elif od_need > 0:
            short[t] = od_need
        for s, k in placed.items():
            out[s] = out.get(s, 0) + k
    return within_budget(market, out, held, short, fallback, budget, unavailable, retire_first, overlap, existing)


def within_budget(market: SpotMarket, out: dict[str, int], held: list[ManagedInstance], short: dict[str, int],
                  fallback: dict[str, int], budget: float, unavailable: Collection[str],
                  retire_first: Sequence[str], overlap: Mapping[str, int] | None = None,
                  existing: Mapping[str, int] | None = None) -> Placement:
    """The last step of :func:`place`, while the target costs more than ``budget`` at the prices
    now: a spot launch meant to replace a running on-demand instance (``overlap``: type -> such
    instances; ``existing``: slot -> live instances) waits for a later tick, the dearest first, so
    that instance keeps serving; the doomed instances (``held``) are held, cheapest first, only while
    they fit; then one instance at a time moves to an open, cheaper slot of its type, the move that
    saves most first (a replacement: the capacity whose price rose moves), or, with no cheaper slot
    left, the dearest instance is dropped (retired)."""
    cost = sum(market.price(s) * n for s, n in out.items())
    have = existing or {}
    lag = dict(overlap or {})
    while cost > budget + BUDGET_EPS:
        new = [s for s, n in out.items() if is_spot(s) and n > have.get(s, 0) and lag.get(base_type(s), 0) > 0]
        if not new:
            break
        s = max(new, key=lambda s: (market.price(s), s))
        out[s] -= 1
        cost -= market.price(s)
        lag[base_type(s)] -= 1
    released: list[str] = []
    for i in sorted(held, key=lambda i: (market.price(i.instance_type), i.instance_id)):
        p = market.price(i.instance_type)
        if cost + p <= budget + BUDGET_EPS:
            out[i.instance_type] = out.get(i.instance_type, 0) + 1
            cost += p
        else:
            released.append(i.instance_id)
    while cost > budget + BUDGET_EPS:
        moves = [(market.price(s) - market.price(to), s, to) for s, n in out.items() if n > 0
                 for to in zone_order(market, base_type(s), out, unavailable)
                 if market.price(to) < market.price(s) - BUDGET_EPS]
        if moves:                       # replace: the move that saves most (the capacity whose price rose)
            _, slot, to = max(moves, key=lambda m: (m[0], m[1], m[2]))
        else:                           # retire: the dearest instance
            slot, to = max((s for s, n in out.items() if n > 0), key=lambda s: (market.price(s), s)), None
        t = base_type(slot)
        out[slot] -= 1
        cost -= market.price(slot)
        if not is_spot(slot) and fallback.get(t):
            fallback[t] -= 1
        if to is None:
            short[t] = short.get(t, 0) + 1
            continue
        out[to] = out.get(to, 0) + 1
        cost += market.price(to)
        if not is_spot(to):
            fallback[t] = fallback.get(t, 0) + 1
    return Placement({s: n for s, n in out.items() if n > 0}, tuple(released) + tuple(retire_first),
                     {t: n for t, n in short.items() if n > 0}, {t: n for t, n in fallback.items() if n > 0})


@dataclass(frozen=True)
class SpotState:
    """What the fleet learnt about spot: instances under an interruption notice (id -> when EC2
    reclaims it), and suspect slots: not known to have capacity (every slot at the start,
    :meth:`initial`), interrupted, or refused, and not launched into since. The placement tries a
    suspect slot (once its cooldown, if any, is over); the planner prices the pool with trusted
    slots only, so a zone that stays out costs a refused launch now and then, never a pool planned
    at a spot price it cannot buy."""

    doomed: Mapping[str, float] = field(default_factory=dict)
    suspect: frozenset[str] = frozenset()

    @classmethod
    def initial(cls, market: SpotMarket) -> "SpotState":
        """Nothing known yet: every spot slot suspect."""
        return cls({}, frozenset(s for s in market.slot_prices() if is_spot(s)))


def after_notice(state: SpotState, instance_id: str, slot: str, now: float,
                 reclaim_at: float | None = None) -> tuple[SpotState, tuple[str, float]]:
    """An interruption notice for ``instance_id`` in ``slot`` at ``now``: the new state (it is
    reclaimed at ``reclaim_at``, the notice's own time when it gives one, else ``now + NOTICE_S``;
    its slot suspect) and the mark to record, (slot, out until)."""
    doomed = dict(state.doomed)
    doomed.setdefault(instance_id, now + NOTICE_S if reclaim_at is None else min(reclaim_at, now + NOTICE_S))
    return SpotState(doomed, state.suspect | {slot}), (slot, now + ZONE_COOLDOWN_S)


def after_apply(state: SpotState, launched: Collection[str], refused: Collection[str]) -> SpotState:
    """After the actuator acted: a zone that gave a spot instance is trusted for every type (spot
    capacity comes and goes by zone: the availability traces move per zone), a slot that refused a
    launch (InsufficientCapacity) is suspect."""
    zones = {split_slot(s)[1] for s in launched if is_spot(s)}
    return SpotState(state.doomed, frozenset(s for s in state.suspect if split_slot(s)[1] not in zones) | set(refused))


def after_reprice(state: SpotState, before: SpotMarket, after: SpotMarket) -> SpotState:
    """New spot prices (a refresh, a reload, a price step): a slot priced now that was not before
    is suspect, as every slot is at the start (:meth:`SpotState.initial`), unless its zone already
    gave a spot instance (a slot of that zone is trusted: :func:`after_apply` trusts by zone)."""
    old = {s for s in before.slot_prices() if is_spot(s)}
    trusted = {split_slot(s)[1] for s in old if s not in state.suspect}
    new = {s for s in after.slot_prices() if is_spot(s) and s not in old and split_slot(s)[1] not in trusted}
    return SpotState(state.doomed, state.suspect | new) if new else state


def settle(state: SpotState, live_ids: Collection[str]) -> SpotState:
    """Forget the doomed instances that are gone."""
    return SpotState({i: t for i, t in state.doomed.items() if i in live_ids}, state.suspect)


def drains_due(state: SpotState, now: float) -> list[str]:
    """The doomed instances whose worker stops taking queries now (:data:`DRAIN_LEAD_S` before reclaim)."""
    return sorted(i for i, t in state.doomed.items() if now + _DRAIN_EPS_S >= t - DRAIN_LEAD_S)


__all__ = ["DRAIN_LEAD_S", "NOTICE_S", "Placement", "PlanningView", "SpotMarket", "SpotState", "ZONE_COOLDOWN_S",
           "after_apply", "after_notice", "after_reprice", "drains_due", "drop_order", "keep_n", "overprovision", "place",
           "planning_prices", "settle", "within_budget", "zone_order"]
