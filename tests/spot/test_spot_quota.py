"""scaler.spot.quota_fit: spot placement within the Spot vCPU quota, on-demand within the On-Demand
one (issue #38 deliverable 6): a hand-computed case on the shipped prices (tests/spot/test_spot_market.py)
and hypothesis invariants over random markets, pools and quotas."""
from __future__ import annotations

import math

from hypothesis import given, settings, strategies as st

from config.quota_families import quota_family
from scaler.cloud.slots import is_spot, split_slot
from scaler.planner.quota import VcpuQuota
from scaler.spot.market import place
from scaler.spot.quota_fit import fit_quotas
from tests.spot.test_spot_market import TYPES, G, R, T, cases, market

VCPUS = {G: 4, R: 2, T: 4}
FAMILY = {t: quota_family(t) for t in VCPUS}


def q(market_name: str, **limits: int) -> VcpuQuota:
    return VcpuQuota(limits, FAMILY, VCPUS, market_name)


def test_a_spot_quota_of_two_gpus_moves_the_third_to_on_demand_within_its_quota() -> None:
    m = market()
    pl = place(m, {G: 3, R: 1, T: 1}, [], 2.5)        # three g4dn.xlarge on spot, one per zone
    fit = fit_quotas(m, pl, 2.5, q("spot", g_vt=8), None)
    # the dearest spot slot (us-east-1a, 0.2158 $/hr) gives its instance to on-demand (0.526 $/hr)
    assert fit.target == {"g4dn.xlarge@us-east-1c": 1, "g4dn.xlarge@us-east-1d": 1, "r5n.large@us-east-1a": 1,
                          T: 1, G: 1}
    assert fit.fallback == {G: 1} and not fit.short
    assert math.isclose(fit.cost(m), 0.2039 + 0.2043 + 0.0545 + 0.1664 + 0.526)
    none_od = fit_quotas(m, pl, 2.5, q("spot", g_vt=8), q("on_demand", g_vt=0))
    assert none_od.short == {G: 1} and G not in none_od.target


def test_without_quotas_the_placement_is_untouched() -> None:
    m = market()
    pl = place(m, {G: 3, R: 1, T: 1}, [], 2.5)
    assert fit_quotas(m, pl, 2.5, None, None) is pl


@settings(max_examples=300, deadline=None)
@given(cases(), st.one_of(st.none(), st.integers(0, 16)), st.one_of(st.none(), st.integers(0, 16)),
       st.one_of(st.none(), st.integers(0, 16)))
def test_spot_vcpus_stay_within_the_spot_quota_and_on_demand_within_its_own(case, spot_gvt, od_gvt,  # type: ignore[no-untyped-def]
                                                                           od_std) -> None:
    m, pool, doomed, unavailable, target, budget = case
    pl = place(m, target, pool, budget, unavailable=unavailable, doomed=doomed)
    sq = q("spot", g_vt=spot_gvt) if spot_gvt is not None else None
    limits = {k: v for k, v in (("g_vt", od_gvt), ("standard", od_std)) if v is not None}
    oq = q("on_demand", **limits) if limits else None
    fit = fit_quotas(m, pl, budget, sq, oq, unavailable)
    used = {True: {}, False: {}}        # type: dict[bool, dict[str, int]]
    for slot, n in fit.target.items():
        t, _ = split_slot(slot)
        used[is_spot(slot)][FAMILY[t]] = used[is_spot(slot)].get(FAMILY[t], 0) + n * VCPUS[t]
    for quota, spot in ((sq, True), (oq, False)):
        if quota is not None:
            assert all(v <= quota.limits[f] for f, v in used[spot].items() if f in quota.limits)
    assert fit.cost(m) <= max(budget, pl.cost(m)) + 1e-9
    for slot in fit.target:
        t, zone = split_slot(slot)
        assert t in TYPES and (zone is not None or m.on_demand_allowed(t))
    moved = sum(fit.target.values()) + sum(fit.short.values())
    assert moved == sum(pl.target.values()) + sum(pl.short.values())      # every instance placed or short
