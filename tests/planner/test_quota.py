"""vCPU quotas as a planning constraint (issue #38 deliverable 6): hand-computed pools, the planner
against a brute force over small catalogs with the G-and-VT quota below the budget's best pool, the
search against the ranking under quotas, and the joint plan within the quotas."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from daemon.cli import main
from scaler.planner.base_aux import PlanError
from scaler.planner.choose import choose_pool
from config.profiles import load_profiles_csv
from scaler.planner.joint_plan import plan_joint
from scaler.planner.quota import VcpuQuota, binding_quotas, quota_for
from sim.slo_check import slo_check
from tests.planner.test_joint_plan import _cfg, _demand
from scaler.planner.similarity_pick import similarity_pick
from scaler.planner.upper_bound import enumerate_pools, upper_bounds
from scaler.planner.plan_inputs import PlanInputs, base_aux_of
from tests.planner.test_pool_search import catalogs, hand_inputs, outcome, searched

# hand_inputs: gpu Q_b = 500, Q_b^{30+} = 250; cpu s = 30, f = 0.75, Q_a = 375, so Eq. 15 is
# min(1000 u, 500 u + 250 v) (alpha = 250 / 0.25, beta = 375 x (1 - 0.25 x 500 / 250) / 0.75);
# gpu 1 $/hr in G and VT with 4 vCPUs, cpu 0.5 $/hr Standard with 2 vCPUs.
FAMILY = {"gpu": "g_vt", "cpu": "standard"}
VCPUS = {"gpu": 4, "cpu": 2}


def quota(**limits: int) -> VcpuQuota:
    return VcpuQuota(limits, FAMILY, VCPUS)


def test_the_budgets_best_pool_without_a_quota() -> None:
    plan = choose_pool(hand_inputs(3.0))
    assert (plan.chosen, plan.cost_per_hour, plan.upper_bound_qps, plan.pools_ranked) == \
        ({"gpu": 2, "cpu": 2}, 3.0, 1500.0, 15)


def test_a_g_and_vt_quota_of_one_gpu_picks_the_best_pool_with_one() -> None:
    # u <= 1: bound min(1000, 500 + 250 v) = 1000 from v = 2; the top three (1,2) (1,3) (1,4) share
    # the base count, and (1,2) gives way to (1,4), the maximal pool above it (no gpu fits the quota)
    plan = choose_pool(replace(hand_inputs(3.0), quota=quota(g_vt=4)))
    assert (plan.chosen, plan.cost_per_hour, plan.upper_bound_qps, plan.rule, plan.pools_ranked) == \
        ({"gpu": 1, "cpu": 4}, 3.0, 1000.0, "top3-same-base", 11)


def test_a_quota_above_the_best_pool_changes_nothing_but_the_count() -> None:
    plan = choose_pool(replace(hand_inputs(3.0), quota=quota(g_vt=8)))
    assert (plan.chosen, plan.upper_bound_qps, plan.pools_ranked) == ({"gpu": 2, "cpu": 2}, 1500.0, 14)


def test_two_quotas_make_a_smaller_pool_maximal() -> None:
    # gpu <= 1 and cpu <= 2: (1, 2) is maximal at 2 $/hr, 1 $/hr of the budget left unspent
    plan = choose_pool(replace(hand_inputs(3.0), quota=quota(g_vt=4, standard=4)))
    assert (plan.chosen, plan.cost_per_hour, plan.upper_bound_qps, plan.pools_ranked) == \
        ({"gpu": 1, "cpu": 2}, 2.0, 1000.0, 5)


def test_a_family_quota_of_zero_leaves_its_types_out_of_the_split() -> None:
    inp = replace(hand_inputs(3.0), quota=quota(g_vt=0))
    assert inp.allowed == ("cpu",)
    with pytest.raises(PlanError, match="no instance type meets the QoS target 10 ms .* among cpu$"):
        choose_pool(inp)            # cpu cannot serve the largest batch in 10 ms: no base type left


def test_binding_quotas_name_the_family_its_limit_and_what_the_best_pool_needs() -> None:
    best = choose_pool(hand_inputs(3.0)).chosen
    (b,) = binding_quotas(best, quota(g_vt=4, standard=8))
    assert (b.family, b.limit, b.needs) == ("g_vt", 4, 8)
    assert b.line() == ('quota binds, not the budget: g_vt on-demand vCPUs limit 4, the budget\'s best pool needs '
                        '8; raise "Running On-Demand G and VT instances" to 8 vCPUs')
    assert binding_quotas(best, quota(g_vt=8)) == []


# --- the brute force ---------------------------------------------------------------------------

def brute_ranking(inp: PlanInputs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every pool within budget (enumeration's own budget rule) and the quotas checked pool by pool
    in plain Python, ranked as the planner ranks: bound descending, cost ascending, enumeration order."""
    allowed = inp.allowed
    counts, cost = enumerate_pools([inp.prices[t] for t in allowed], inp.budget_per_hour,
                                   [inp.bounds.get(t, (0, None))[0] for t in allowed],
                                   [inp.bounds.get(t, (0, None))[1] for t in allowed], 10**7)
    q = inp.quota
    assert q is not None
    keep = []
    for row in counts:
        used: dict[str, int] = {}
        for t, n in zip(allowed, row):
            used[q.family[t]] = used.get(q.family[t], 0) + int(n) * q.vcpus[t]
        keep.append(all(v <= q.limits.get(f, 10**9) for f, v in used.items()))
    counts, cost = counts[np.array(keep, dtype=bool)], cost[np.array(keep, dtype=bool)]
    ba = base_aux_of(inp)
    col = {t: j for j, t in enumerate(allowed)}
    v = counts[:, [col[t] for t in ba.aux_types]] if ba.aux else np.zeros((len(counts), 0))
    bound = upper_bounds(counts[:, col[ba.base_type]], v, ba.params)
    order = sorted(range(len(counts)), key=lambda i: (-bound[i], cost[i], i))
    return counts[order], cost[order], bound[order]


def brute_pick(inp: PlanInputs) -> dict[str, int]:
    """The similarity pick over the brute-force ranking, given way to the highest-bound maximal pool
    above it (a pool no instance fits beside: budget, per-type maxima, quotas), as choose_pool does."""
    counts, cost, bound = brute_ranking(inp)
    allowed = list(inp.allowed)
    ba = base_aux_of(inp)
    q = inp.quota
    assert q is not None

    def fits(row: np.ndarray, c: float) -> bool:
        for j, t in enumerate(allowed):
            hi = inp.bounds.get(t, (0, None))[1]
            if hi is not None and row[j] + 1 > hi or c + inp.prices[t] > inp.budget_per_hour + 1e-9:
                continue
            used = sum(int(n) * q.vcpus[u] for u, n in zip(allowed, row) if q.family[u] == q.family[t])
            if q.family[t] not in q.limits or used + q.vcpus[t] <= q.limits[q.family[t]]:
                return True
        return False

    def above(i: int) -> int:
        if not fits(counts[i], cost[i]):
            return i
        for k in range(len(counts)):
            if not fits(counts[k], cost[k]) and np.all(counts[k] >= counts[i]) and bound[k] >= bound[i]:
                return k
        return i
    idx, _ = similarity_pick(counts, allowed.index(ba.base_type))
    idx = above(idx)
    if bound[idx] <= 0 < bound[0]:
        idx = above(0)
    got = {t: int(n) for t, n in zip(allowed, counts[idx])}
    return {t: got.get(t, 0) for t in inp.types}


@st.composite
def quota_below_the_best(draw: st.DrawFn) -> tuple[PlanInputs, PlanInputs]:
    """A small catalog (tests/planner/test_pool_search.py), t0 and t1 in G and VT, the rest Standard,
    vCPUs 2-8, and a G-and-VT quota below what the budget's best pool runs there."""
    inp = draw(catalogs())
    fam = {t: "g_vt" if t in ("t0", "t1") else "standard" for t in inp.types}
    vcpus = {t: draw(st.sampled_from([2, 4, 8])) for t in inp.types}
    best = outcome(choose_pool, inp)
    assume(not isinstance(best, tuple))
    need = sum(n * vcpus[t] for t, n in best.chosen.items() if fam[t] == "g_vt")
    assume(need > 0)
    limit = draw(st.integers(0, need - 1))
    std = draw(st.one_of(st.none(), st.integers(0, 40)))
    limits = {"g_vt": limit} if std is None else {"g_vt": limit, "standard": std}
    return inp, replace(inp, quota=VcpuQuota(limits, fam, vcpus))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(case=quota_below_the_best())
def test_with_the_g_and_vt_quota_below_the_best_pool_the_plan_is_the_best_pool_within_it(
        case: tuple[PlanInputs, PlanInputs]) -> None:
    """The plan stays within the quota and is the planner's pick over the pools within budget and
    quota found by brute force: the same top pools (bounds and costs), the same pick."""
    _, inp = case
    got = outcome(choose_pool, inp)
    if isinstance(got, tuple):          # no pool within the budget and the quotas, or no base type left
        brute = outcome(brute_ranking, inp) if inp.allowed else ("PlanError", "every type excluded")
        assert brute[0] == "PlanError" if isinstance(brute[0], str) else len(brute[0]) == 0
        return
    q = inp.quota
    assert q is not None
    assert all(v <= q.limits[f] for f, v in q.used(got.chosen).items() if f in q.limits)
    counts, cost, bound = brute_ranking(inp)
    assert got.pools_ranked == len(counts)
    assert [round(b, 6) for _, _, b in got.ranked] == [round(float(b), 6) for b in bound[:len(got.ranked)]]
    assert [round(c, 6) for _, c, _ in got.ranked] == [round(float(c), 6) for c in cost[:len(got.ranked)]]
    assert got.upper_bound_qps == pytest.approx(float(bound.max()), rel=1e-9) or got.rule != "max-bound"
    assert got.chosen == brute_pick(inp)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(case=quota_below_the_best(), objective=st.sampled_from(["max_throughput", "min_cost"]),
       frac=st.floats(0.0, 1.3))
def test_the_search_gives_the_rankings_plan_within_the_quotas(case: tuple[PlanInputs, PlanInputs], objective: str,
                                                               frac: float) -> None:
    """Above SEARCH_ABOVE pools the branch and bound decides: under quotas it gives the ranking's
    pick, cost, bound, rule and top pools (``pools_ranked`` aside: the search counts the pools within
    the budget and each type's quota alone, an upper bound)."""
    _, inp = case
    top = outcome(choose_pool, inp, exhaustive=True)
    peak = 0.0 if isinstance(top, tuple) else top.upper_bound_qps
    kw = dict(objective=objective, demand_qps=frac * peak, headroom=0.1)
    want = outcome(choose_pool, inp, exhaustive=True, **kw)
    got = outcome(searched, inp, **kw)
    if isinstance(want, tuple) or isinstance(got, tuple):
        assert isinstance(want, tuple) and isinstance(got, tuple)
        return
    assert replace(got, pools_ranked=0) == replace(want, pools_ranked=0)


def test_the_min_cost_pick_is_the_cheapest_pool_within_the_quota_that_covers_the_need() -> None:
    inp = replace(hand_inputs(3.0), quota=quota(g_vt=4))
    plan = choose_pool(inp, objective="min_cost", demand_qps=1000 / 1.1)
    assert (plan.chosen, plan.cost_per_hour, plan.rule) == ({"gpu": 1, "cpu": 2}, 2.0, "min-cost")
    short = choose_pool(inp, objective="min_cost", demand_qps=1200 / 1.1)     # 1500 needs two gpus
    assert short.rule == "min-cost-unmet" and short.chosen["gpu"] <= 1


# --- the joint plan --------------------------------------------------------------------------

@pytest.mark.parametrize("objective", ["min_cost", "max_throughput"])
@pytest.mark.parametrize("limits", [{"g_vt": 4}, {"g_vt": 8}, {"standard": 8}, {"g_vt": 4, "standard": 4}])
def test_the_joint_plan_holds_every_models_share_within_each_familys_quota(objective: str,
                                                                           limits: dict[str, int]) -> None:
    """rm2 and dien at 20 q/s each on 3 $/hr: the shares together within each quota; a quota the
    plan without quotas already fits moves nothing."""
    profiles = load_profiles_csv(None)
    models = [{"name": "rm2", "qos_ms": 350}, {"name": "dien", "qos_ms": 35}]
    free_cfg = _cfg(models, budget_per_hour=3.0, objective=objective)
    cfg = _cfg(models, budget_per_hour=3.0, objective=objective, quotas={"on_demand": limits})
    demand = _demand(cfg, {"rm2": 20.0, "dien": 20.0})
    free = plan_joint(free_cfg, profiles, demand, slo_check=slo_check)
    joint = plan_joint(cfg, profiles, demand, slo_check=slo_check)
    q = quota_for(cfg, list(cfg.full_catalog()))
    assert q is not None
    used = q.used(joint.pool)
    assert all(used.get(f, 0) <= v for f, v in limits.items())
    assert joint.cost_per_hour <= 3.0 + 1e-9
    if not binding_quotas(free.pool, q):
        assert {m: s.pool for m, s in joint.models.items()} == {m: s.pool for m, s in free.models.items()}


def test_a_g_and_vt_quota_of_one_gpu_gives_it_to_the_first_model() -> None:
    """Hand-checked: both models' picks hold a g4dn.xlarge (1.35 $/hr together); one G-and-VT
    instance's quota leaves dien, the second model, none (it cannot serve 35 ms on the CPU types)."""
    profiles = load_profiles_csv(None)
    cfg = _cfg([{"name": "rm2", "qos_ms": 350}, {"name": "dien", "qos_ms": 35}], budget_per_hour=3.0,
               quotas={"on_demand": {"g_vt": 4}})
    joint = plan_joint(cfg, profiles, _demand(cfg, {"rm2": 20.0, "dien": 20.0}), slo_check=slo_check)
    assert joint.rule == "joint-split"
    assert {m: s.pool for m, s in joint.models.items()} == {"rm2": {"g4dn.xlarge": 1, "r5n.large": 1}, "dien": {}}
    assert joint.short == {"dien": 22.0}


# --- costscale plan --------------------------------------------------------------------------

RM2 = str(Path(__file__).resolve().parents[2] / "examples" / "replay-rm2.yaml")
PLAN = ["plan", RM2, "--objective", "max_throughput", "--confirm", "0"]


def test_plan_says_which_quota_binds_and_what_to_raise_it_to(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*PLAN, "--quota", "standard=16"]) == 0
    out = capsys.readouterr().out
    # without the quota: g4dn.xlarge x1, r5n.large x13 (2.4630 $/hr, 145.3 q/s), 26 Standard vCPUs
    assert "pick: g4dn.xlarge x2, r5n.large x8  (2.2440 $/hr, upper bound 110.5 QPS" in out
    assert "vCPU quotas: standard 16/16\n" in out
    assert ("quota binds, not the budget: standard on-demand vCPUs limit 16, the budget's best pool needs 26; "
            "raise \"Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances\" to 26 vCPUs") in out
    assert main([*PLAN, "--quota", "standard=16", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["quotas"] == {"within": {"standard": {"vcpus": 16, "limit": 16}}, "binds": True,
                           "binding": [{"family": "standard", "market": "on_demand", "limit": 16, "needs": 26,
                                        "quota": "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances"}]}


def test_plan_says_when_the_budget_binds_and_not_the_quota(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*PLAN, "--quota", "g_vt=4"]) == 0
    out = capsys.readouterr().out
    assert "pick: g4dn.xlarge x1, r5n.large x13  (2.4630 $/hr, upper bound 145.3 QPS" in out
    assert "vCPU quotas: g_vt 4/4 (the budget binds, not a quota)" in out
    assert main(PLAN) == 0
    assert "vCPU quotas" not in capsys.readouterr().out        # no quota configured: no quota line
