"""scaler.spot.market: the pure spot decisions (issue #28), on hand-computed cases (prices from the
shipped table: g4dn.xlarge 0.2158 / 0.2039 / 0.2043 $/hr in us-east-1a / c / d, on-demand 0.526;
r5n.large 0.0545 / 0.0585 / 0.0674, on-demand 0.149) and hypothesis invariants over random
markets, pools and prices: the budget holds at the prices billed now, nothing new goes into a zone
that is out, no market a type may not use."""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings, strategies as st

from scaler.cloud.provider import ManagedInstance
from scaler.spot.market import (DRAIN_LEAD_S, NOTICE_S, ZONE_COOLDOWN_S, SpotMarket, SpotState, after_apply,
                                after_notice, after_reprice, drains_due, overprovision, place, planning_prices, settle, zone_order)
from scaler.cloud.slots import base_type, is_spot, pool_by_type, slot_of, split_slot, typed

G, R, T = "g4dn.xlarge", "r5n.large", "t3.xlarge"
A, C, D = "us-east-1a", "us-east-1c", "us-east-1d"


def market(fallback: str = "on_demand", max_price: float | None = None, overprov: int = 1,
           r_market: str = "spot") -> SpotMarket:
    return SpotMarket({G: "both", R: r_market, T: "on_demand"}, {G: 0.526, R: 0.149, T: 0.1664},
                      {G: {A: 0.2158, C: 0.2039, D: 0.2043}, R: {A: 0.0545, C: 0.0585, D: 0.0674}},
                      (A, C, D), fallback, max_price, overprov)


def inst(iid: str, slot: str, state: str = "running", t: float = 0.0) -> ManagedInstance:
    return ManagedInstance(iid, slot, state, t)


def test_slots_name_the_market_and_zone() -> None:
    assert slot_of(G) == G and slot_of(G, A) == "g4dn.xlarge@us-east-1a"
    assert split_slot("g4dn.xlarge@us-east-1a") == (G, A) and split_slot(G) == (G, None)
    assert is_spot("r5n.large@us-east-1c") and not is_spot(R) and base_type("r5n.large@us-east-1c") == R
    assert pool_by_type({"g4dn.xlarge@us-east-1a": 2, G: 1, "r5n.large@us-east-1d": 1}) == {G: 3, R: 1}
    assert [i.instance_type for i in typed([inst("i1", "g4dn.xlarge@us-east-1a"), inst("i2", T)])] == [G, T]


def test_planning_prices_take_the_cheapest_open_zone_then_on_demand_then_nothing() -> None:
    m = market()
    v = planning_prices(m)
    assert v.prices == {G: 0.2039, R: 0.0545, T: 0.1664} and v.on_spot == {G, R} and not v.excluded
    v = planning_prices(m, {"g4dn.xlarge@us-east-1c"})
    assert v.prices[G] == 0.2043                    # c is out: the cheaper of a and d
    out = {slot_of(G, z) for z in (A, C, D)} | {slot_of(R, z) for z in (A, C, D)}
    v = planning_prices(m, out)
    assert v.prices == {G: 0.526, R: 0.149, T: 0.1664} and not v.on_spot     # both fall back (fallback on_demand)
    v = planning_prices(market(fallback="none"), out)
    assert v.prices == {G: 0.526, T: 0.1664} and v.excluded == {R}            # spot-only, no fallback: left out
    no_cd = {"g4dn.xlarge@us-east-1c", "g4dn.xlarge@us-east-1d"}
    assert planning_prices(m, no_cd).prices[G] == 0.2158
    assert planning_prices(market(max_price=0.21), no_cd).prices[G] == 0.526   # a (0.2158) is above max_price


def test_zone_order_spreads_by_fewest_then_price_then_falls_back() -> None:
    m = market()
    assert zone_order(m, G, {}) == ["g4dn.xlarge@us-east-1c", "g4dn.xlarge@us-east-1d", "g4dn.xlarge@us-east-1a", G]
    assert zone_order(m, G, {"g4dn.xlarge@us-east-1c": 1}) == [
        "g4dn.xlarge@us-east-1d", "g4dn.xlarge@us-east-1a", "g4dn.xlarge@us-east-1c", G]
    assert zone_order(m, G, {"g4dn.xlarge@us-east-1c": 1}, {"g4dn.xlarge@us-east-1d"}) == [
        "g4dn.xlarge@us-east-1a", "g4dn.xlarge@us-east-1c", G]
    assert zone_order(m, R, {}, {slot_of(R, z) for z in (A, C)}) == ["r5n.large@us-east-1d", R]
    assert zone_order(market(fallback="none"), R, {}) == [f"{R}@{C}".replace(C, A), f"{R}@{C}", f"{R}@{D}"]
    assert zone_order(m, T, {}) == [T]
    assert zone_order(m, G, {}, {G, *(slot_of(G, z) for z in (A, C, D))}) == []   # every zone and on-demand out


def test_overprovision_adds_spot_of_the_largest_share_within_budget() -> None:
    prices = {G: 0.2158, R: 0.0674}
    target = {G: 2, R: 1}                        # 0.4316 + 0.0674 = 0.499 $/hr
    assert overprovision(market(overprov=2), target, prices, 1.0) == {G: 2}
    assert overprovision(market(overprov=2), target, prices, 0.75) == {G: 1}
    assert overprovision(market(overprov=2), target, prices, 0.7) == {}
    assert overprovision(market(overprov=0), target, prices, 9.0) == {}
    every_g = {slot_of(G, z) for z in (A, C, D)}
    assert overprovision(market(overprov=1), target, prices, 9.0, every_g) == {R: 1}    # g4dn has no open zone
    assert overprovision(market(overprov=1), {T: 3}, {T: 0.1664}, 9.0) == {}            # on-demand only


def test_place_spreads_new_spot_over_the_zones() -> None:
    pl = place(market(), {G: 3, R: 1, T: 1}, [], 2.5)
    assert pl.target == {"g4dn.xlarge@us-east-1c": 1, "g4dn.xlarge@us-east-1d": 1, "g4dn.xlarge@us-east-1a": 1,
                         "r5n.large@us-east-1a": 1, T: 1}
    assert not pl.short and not pl.fallback
    assert math.isclose(pl.cost(market()), 0.2158 + 0.2039 + 0.2043 + 0.0545 + 0.1664)


def test_on_demand_fallback_is_held_until_spot_runs_then_retired() -> None:
    m = market()
    od = [inst("o1", G), inst("o2", G)]
    pl = place(m, {G: 2}, od, 2.5)                 # spot came back: launch 2 spot, keep the 2 on-demand meanwhile
    assert pl.target == {"g4dn.xlarge@us-east-1c": 1, "g4dn.xlarge@us-east-1d": 1, G: 2} and pl.fallback == {G: 2}
    booting = [inst("s1", "g4dn.xlarge@us-east-1c", "pending"), inst("s2", "g4dn.xlarge@us-east-1d", "running")]
    assert place(m, {G: 2}, od + booting, 2.5).target == {"g4dn.xlarge@us-east-1c": 1, "g4dn.xlarge@us-east-1d": 1,
                                                          G: 1}          # one spot runs: one on-demand goes
    running = [inst("s1", "g4dn.xlarge@us-east-1c"), inst("s2", "g4dn.xlarge@us-east-1d")]
    assert place(m, {G: 2}, od + running, 2.5).target == {"g4dn.xlarge@us-east-1c": 1, "g4dn.xlarge@us-east-1d": 1}
    every_g = {slot_of(G, z) for z in (A, C, D)}
    pl = place(m, {G: 2}, [], 2.5, unavailable=every_g)      # no zone: on-demand (market both)
    assert pl.target == {G: 2} and pl.fallback == {G: 2}
    every_r = {slot_of(R, z) for z in (A, C, D)}
    pl = place(market(fallback="none"), {R: 2}, [], 2.5, unavailable=every_r)
    assert pl.target == {} and pl.short == {R: 2}            # market spot, fallback none: nothing to buy


def test_the_overprovision_goes_on_spot_or_not_at_all() -> None:
    m = market()
    pl = place(m, {G: 3}, [], 2.5, extra={G: 1})
    assert pl.target == {"g4dn.xlarge@us-east-1c": 1, "g4dn.xlarge@us-east-1d": 1, "g4dn.xlarge@us-east-1a": 1}
    every_g = {slot_of(G, z) for z in (A, C, D)}
    pl = place(m, {G: 3}, [], 2.5, unavailable=every_g, extra={G: 1})
    assert pl.target == {G: 2} and not pl.short            # no zone: the plan's 2 on-demand, no on-demand extra


def test_a_spot_launch_that_would_retire_a_serving_on_demand_instance_waits_instead() -> None:
    """Two on-demand g4dn.xlarge serve (1.052 $/hr) and spot is back; at a 1.3 $/hr budget both spot
    launches beside them (+0.4082) do not fit: the dearer one (d, 0.2043) waits for a later tick, the
    two on-demand keep serving (1.052 + 0.2039 = 1.2559)."""
    od = [inst("o1", G), inst("o2", G)]
    pl = place(market(), {G: 2}, od, 1.3)
    assert pl.target == {"g4dn.xlarge@us-east-1c": 1, G: 2} and not pl.short
    pl = place(market(), {G: 2}, od, 1.1)                   # nothing fits beside them: they serve on
    assert pl.target == {G: 2} and not pl.short


def test_a_suspect_zone_is_tried_by_the_placement_but_not_priced_by_the_planner() -> None:
    m = market()
    s, _ = after_notice(SpotState(), "x", "g4dn.xlarge@us-east-1a", 0.0)
    s = after_apply(s, [], ["g4dn.xlarge@us-east-1c"])
    assert s.suspect == {"g4dn.xlarge@us-east-1a", "g4dn.xlarge@us-east-1c"}
    assert planning_prices(m, s.suspect).prices[G] == 0.2043                 # only d is trusted
    assert zone_order(m, G, {})[0] == "g4dn.xlarge@us-east-1c"              # the placement may try c again
    s = after_apply(s, ["g4dn.xlarge@us-east-1c", G], [])
    assert s.suspect == {"g4dn.xlarge@us-east-1a"} and settle(s, set()).suspect == s.suspect
    start = SpotState.initial(m)                                            # nothing known: all suspect
    assert start.suspect == {slot_of(t, z) for t in (G, R) for z in (A, C, D)}
    assert planning_prices(m, start.suspect).prices == {G: 0.526, R: 0.149, T: 0.1664}
    s = after_apply(start, ["r5n.large@us-east-1d"], ["g4dn.xlarge@us-east-1a"])   # d gave one: d trusted
    assert s.suspect == {slot_of(t, z) for t in (G, R) for z in (A, C)}


def test_a_slot_priced_only_later_is_suspect_unless_its_zone_gave_a_spot_instance() -> None:
    m = market()
    before = SpotMarket(m.markets, m.on_demand, {G: {A: 0.2158}, R: {A: 0.0545, C: 0.0585}}, m.zones, m.fallback,
                        m.max_price, m.overprovision)
    s = after_apply(SpotState.initial(before), ["r5n.large@us-east-1c"], [])   # c gave one: c trusted, a not
    assert s.suspect == {"g4dn.xlarge@us-east-1a", "r5n.large@us-east-1a"}
    later = after_reprice(s, before, m)                                     # g4dn c, both d priced now
    assert later.suspect == s.suspect | {"g4dn.xlarge@us-east-1d", "r5n.large@us-east-1d"}   # c: trusted zone
    assert planning_prices(m, later.suspect).prices == {G: 0.2039, R: 0.0585, T: 0.1664}
    assert after_reprice(later, m, m.with_price(G, A, 0.3)) is later        # a price move: nothing new


def test_a_spot_price_rise_that_breaks_the_budget_moves_the_dearest_capacity_at_once() -> None:
    """Three g4dn.xlarge spot, one per zone (0.2158 + 0.2039 + 0.2043 = 0.624 $/hr within 0.7); us-east-1a
    rises to 0.30: 0.7082 > 0.7. The a instance moves to c (0.2039 + 0.2039 + 0.2043 = 0.6121), or at a
    0.61 $/hr budget, where the moves do not fit (0.6121, then d to c 0.6117), one is retired."""
    pool = [inst("ia", "g4dn.xlarge@us-east-1a"), inst("ic", "g4dn.xlarge@us-east-1c"),
            inst("id", "g4dn.xlarge@us-east-1d")]
    m = market()
    assert place(m, {G: 3}, pool, 0.7).target == {"g4dn.xlarge@us-east-1a": 1, "g4dn.xlarge@us-east-1c": 1,
                                                  "g4dn.xlarge@us-east-1d": 1}
    risen = m.with_price(G, A, 0.30)
    pl = place(risen, {G: 3}, pool, 0.7)
    assert pl.target == {"g4dn.xlarge@us-east-1c": 2, "g4dn.xlarge@us-east-1d": 1} and not pl.short
    assert math.isclose(pl.cost(risen), 0.6121)
    pl = place(risen, {G: 3}, pool, 0.61)          # a and then d move to c (0.6117), still over: one retired
    assert pl.target == {"g4dn.xlarge@us-east-1c": 2} and pl.short == {G: 1}
    assert math.isclose(pl.cost(risen), 0.4078)
    assert planning_prices(risen, {"g4dn.xlarge@us-east-1c", "g4dn.xlarge@us-east-1d"}).prices[G] == 0.30
    # above max_price the a instance is not kept at all (EC2 would interrupt it): it moves
    pl = place(market(max_price=0.25).with_price(G, A, 0.30), {G: 3}, pool, 2.5)
    assert pl.target == {"g4dn.xlarge@us-east-1c": 2, "g4dn.xlarge@us-east-1d": 1}


def test_a_doomed_instance_serves_until_reclaimed_while_its_replacement_fits_the_budget() -> None:
    m = market()
    pool = [inst("x", "g4dn.xlarge@us-east-1a")]
    out = {"g4dn.xlarge@us-east-1a"}
    pl = place(m, {G: 1}, pool, 2.5, unavailable=out, doomed={"x"})
    assert pl.target == {"g4dn.xlarge@us-east-1c": 1, "g4dn.xlarge@us-east-1a": 1}   # replacement in c, x held
    pl = place(m, {G: 1}, pool, 0.3, unavailable=out, doomed={"x"})   # 0.2039 + 0.2158 > 0.3: x goes first
    assert pl.target == {"g4dn.xlarge@us-east-1c": 1} and pl.retire_first[0] == "x"
    assert place(m, {}, pool, 2.5, doomed={"x"}).target == {}          # nothing wants it: retired at once


def test_notice_state_reclaim_time_cooldown_and_drain() -> None:
    s, mark = after_notice(SpotState(), "x", "g4dn.xlarge@us-east-1a", 1000.0)
    assert s.doomed == {"x": 1000.0 + NOTICE_S} and mark == ("g4dn.xlarge@us-east-1a", 1000.0 + ZONE_COOLDOWN_S)
    assert s.suspect == {"g4dn.xlarge@us-east-1a"}
    s2, _ = after_notice(s, "x", "g4dn.xlarge@us-east-1a", 1050.0)
    assert s2.doomed == {"x": 1120.0}                                  # a second notice does not move it
    assert drains_due(s, 1120.0 - DRAIN_LEAD_S - 1) == [] and drains_due(s, 1120.0 - DRAIN_LEAD_S) == ["x"]
    assert settle(s, {"y"}).doomed == {} and settle(s, {"x"}).doomed == s.doomed


# ---- hypothesis: invariants over random markets, pools, targets and prices --------------------
TYPES = ("g4dn.xlarge", "r5n.large", "t3.xlarge")
ZS = ("us-east-1a", "us-east-1c", "us-east-1d")


@st.composite
def cases(draw):  # type: ignore[no-untyped-def]
    markets = {t: draw(st.sampled_from(["on_demand", "spot", "both"])) for t in TYPES}
    od = {t: draw(st.floats(0.05, 1.5)) for t in TYPES}
    spot = {t: {z: draw(st.floats(0.01, 1.0)) for z in ZS if draw(st.booleans())} for t in TYPES if markets[t] != "on_demand"}
    m = SpotMarket(markets, od, spot, ZS, draw(st.sampled_from(["on_demand", "none"])),
                   draw(st.one_of(st.none(), st.floats(0.05, 1.0))), draw(st.integers(0, 2)))
    slots = list(m.slot_prices())
    n = draw(st.integers(0, 8))
    pool = [inst(f"i{k}", draw(st.sampled_from(slots)), draw(st.sampled_from(["pending", "running"])), float(k))
            for k in range(n)]
    doomed = {i.instance_id for i in pool if draw(st.booleans()) and is_spot(i.instance_type)}
    unavailable = {s for s in slots if draw(st.integers(0, 3)) == 0}
    target = {t: draw(st.integers(0, 4)) for t in TYPES}
    budget = draw(st.floats(0.1, 6.0))
    return m, pool, doomed, unavailable, target, budget


@settings(max_examples=300, deadline=None)
@given(cases())
def test_place_never_breaks_the_budget_nor_launches_where_it_may_not(case) -> None:  # type: ignore[no-untyped-def]
    m, pool, doomed, unavailable, target, budget = case
    extra = {t: min(1, n) for t, n in target.items()}
    pl = place(m, target, pool, budget, unavailable=unavailable, doomed=doomed, extra=extra)
    assert pl.cost(m) <= budget + 1e-9
    live = {}
    for i in pool:
        live[i.instance_type] = live.get(i.instance_type, 0) + 1
    for slot, n in pl.target.items():
        t, zone = split_slot(slot)
        if slot in unavailable:                    # out of capacity: keep what runs, launch nothing there
            assert n <= live.get(slot, 0)
        if zone is None:
            assert m.on_demand_allowed(t)
        else:
            assert m.spot_allowed(t) and m.spot[t][zone] <= m.cap(t) + 1e-9
    for t in TYPES:
        mine = {s: n for s, n in pl.target.items() if base_type(s) == t}
        held = sum(1 for i in pool if i.instance_id in doomed and base_type(i.instance_type) == t)
        on_spot = sum(n for s, n in mine.items() if is_spot(s))
        assert on_spot <= target[t] + held and mine.get(t, 0) <= target[t]


@settings(max_examples=200, deadline=None)
@given(cases())
def test_with_room_and_a_fallback_every_type_gets_its_count(case) -> None:  # type: ignore[no-untyped-def]
    m, pool, doomed, unavailable, target, _ = case
    m = SpotMarket(m.markets, m.on_demand, m.spot, m.zones, "on_demand", m.max_price, m.overprovision)
    unavailable = {s for s in unavailable if is_spot(s)}      # on-demand capacity is there
    pl = place(m, target, pool, 1e6, unavailable=unavailable, doomed=doomed)
    assert not pl.short
    for t in TYPES:
        serving = sum(n for s, n in pl.target.items() if base_type(s) == t)
        held = sum(1 for i in pool if i.instance_id in doomed and base_type(i.instance_type) == t and target[t]
                   and m.keepable(i.instance_type))
        assert serving - held >= target[t]
