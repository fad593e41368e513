"""INFaaS §4.2.1-4.2.2: the model-autoscaler ILP and greedy heuristic, and the cheapest-combination
solvers. Hand cases for replicate / upgrade / scale-down-after-T_v, and properties over random
problems: every plan the ILP returns is feasible and never costlier than the greedy's; the greedy
is feasible whenever resources do not bind."""
from __future__ import annotations

import math

import pytest

from hypothesis import HealthCheck, given, settings, strategies as st

from variants.infaas.autoscale_greedy import fill_greedy, greedy_scale
from variants.infaas.autoscale_ilp import (QPS_TOL, LoadVariant, ScalingProblem, ScalingVariant, UnloadVariant, objective,
                                    solve_ilp, violations)
from variants.infaas.cheapest import NoCombination, cheapest

VA = ScalingVariant("A", "r50", "cpu", 200, 5, 1, load_latency_s=1.0, resources={"cores": 4})
VB = ScalingVariant("B", "r50", "inferentia", 20, 100, 3, load_latency_s=2.0, resources={"neuron_cores": 1})
VC = ScalingVariant("C", "r50", "gpu", 15, 800, 16, load_latency_s=5.0, resources={"gpus": 1})
ALL = (VA, VB, VC)


def problem(load: float, running: dict[str, int], slo: float = 300.0, **kw) -> ScalingProblem:
    return ScalingProblem(ALL, {"r50": load}, {"r50": slo}, running=running, **kw)


def test_replicate_running_variant() -> None:
    # 1 B serves 100 < 150 * 1.05: replicate B (3.06) beats upgrading to C (16.8 - 3) or 12 A.
    plan, _ = greedy_scale(problem(150, {"B": 1}), now=0.0)
    assert dict(plan.counts) == {"A": 0, "B": 2, "C": 0}
    assert plan.actions == (LoadVariant("B", "inferentia", 1),)
    assert math.isclose(plan.objective, 3 * (1 + 0.01 * 2.0))
    assert solve_ilp(problem(150, {"B": 1})).counts == plan.counts


def test_upgrade_replaces_running_variant() -> None:
    # 10 A (50 qps) at 100 qps: upgrading to 2 B (objective 6.12 - 10 < 0) beats 11 more A.
    plan, _ = greedy_scale(problem(100, {"A": 10}), now=0.0)
    assert dict(plan.counts) == {"A": 0, "B": 2, "C": 0}
    assert plan.actions == (UnloadVariant("A", "cpu", 10), LoadVariant("B", "inferentia", 2))
    # The ILP finds a cheaper mix the two greedy strategies do not consider: keep one A.
    ilp = solve_ilp(problem(100, {"A": 10}))
    assert dict(ilp.counts) == {"A": 1, "B": 1, "C": 0}
    assert math.isclose(ilp.objective, -9 + 3 * 1.02) and ilp.objective < plan.objective


def test_slo_blocks_loading_slow_variants() -> None:
    # SLO 50 ms: A (200 ms) may keep running but no new A is loaded (constraint 2).
    for plan in (greedy_scale(problem(100, {"A": 10}, slo=50), now=0.0)[0], solve_ilp(problem(100, {"A": 10}, slo=50))):
        assert plan.counts["A"] <= 10 and plan.feasible


def test_scale_down_waits_t_v() -> None:
    p = problem(150, {"B": 3})   # 300 qps for 157.5 needed: one B can go, T_v = B's 2 s load latency
    plan, st = greedy_scale(p, now=10.0)
    assert dict(plan.counts) == {"A": 0, "B": 3, "C": 0} and plan.actions == ()
    plan, st = greedy_scale(p, now=11.5, state=st)
    assert plan.actions == ()
    plan, st = greedy_scale(p, now=12.0, state=st)
    assert plan.actions == (UnloadVariant("B", "inferentia", 1),)
    assert st.down_since == {}
    # the ILP has no timer: it unloads at once
    assert solve_ilp(p).actions == (UnloadVariant("B", "inferentia", 1),)


def test_scale_down_timer_resets_when_load_returns() -> None:
    low, high = problem(150, {"B": 3}), problem(290, {"B": 3})
    _, st = greedy_scale(low, now=0.0)
    _, st = greedy_scale(high, now=1.0, state=st)      # 290 * 1.05 > 300: scale up, timer cleared
    assert st.down_since == {}
    plan, st = greedy_scale(low, now=2.5, state=st)
    assert plan.actions == () and st.down_since == {"r50": 2.5}


def test_resource_limits_and_vm_hint() -> None:
    # one GPU, 2 neuron cores, 8 cores: at most 800 + 200 + 10 qps
    caps = {"gpu": {"gpus": 1}, "inferentia": {"neuron_cores": 2}, "cpu": {"cores": 8}}
    ok = problem(1000, {}, headroom=0.0, capacity=caps)
    assert dict(solve_ilp(ok).counts) == {"A": 0, "B": 2, "C": 1}
    too_much = problem(2000, {}, headroom=0.0, capacity=caps)
    ilp = solve_ilp(too_much)
    assert not ilp.feasible and ilp.actions == () and math.isclose(ilp.unmet_qps["r50"], 2000)
    greedy, _ = greedy_scale(too_much, now=0.0)
    assert not greedy.feasible and greedy.counts["C"] == 1 and greedy.counts["B"] == 2
    assert greedy.counts["A"] == 2 and math.isclose(greedy.unmet_qps["r50"], 2000 - 1010)


def test_fill_greedy_hand_case() -> None:
    counts, left = fill_greedy([VA, VB, VC], 1000.0)
    assert counts == {"B": 2, "C": 1} and left == 0.0


# ---------------------------------------------------------------- properties

HW = ("cpu", "gpu", "inferentia")


@st.composite
def problems(draw: st.DrawFn, limited: bool) -> ScalingProblem:
    n_models = draw(st.integers(1, 3))
    variants: list[ScalingVariant] = []
    loads, slos, running = {}, {}, {}
    for m in range(n_models):
        model = f"m{m}"
        for j in range(draw(st.integers(1, 5))):
            hw = draw(st.sampled_from(HW))
            v = ScalingVariant(
                name=f"{model}v{j}", model=model, hardware=hw,
                latency_ms=draw(st.floats(5, 300)), saturation_qps=draw(st.floats(1, 900)),
                cost_per_second=draw(st.floats(0.01, 20)), load_latency_s=draw(st.floats(0, 10)),
                resources={"units": draw(st.integers(1, 4))})
            variants.append(v)
            running[v.name] = draw(st.integers(0, 3))
        loads[model] = draw(st.floats(0, 3000))
        slos[model] = draw(st.floats(5, 400))
    caps = {hw: {"units": draw(st.integers(0, 60))} for hw in HW} if limited else {}
    return ScalingProblem(tuple(variants), loads, slos, running=running, capacity=caps,
                          headroom=draw(st.sampled_from([0.0, 0.05, 0.1])), lam=draw(st.sampled_from([0.0, 0.01, 0.1])))


def _servable(p: ScalingProblem) -> bool:
    return all(p.load_qps[m] == 0 or any(v.model == m and p.meets_slo(v) for v in p.variants) for m in p.load_qps)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems(limited=False), st.floats(0, 100))
def test_unlimited_greedy_feasible_and_ilp_never_costlier(p: ScalingProblem, now: float) -> None:
    greedy, _ = greedy_scale(p, now=now)
    ilp = solve_ilp(p)
    if _servable(p):
        assert greedy.feasible and violations(p, greedy.counts) == []
    if greedy.feasible:
        assert ilp.feasible
    if ilp.feasible:
        assert violations(p, ilp.counts) == []
        assert math.isclose(ilp.objective, objective(p, ilp.counts))
    if greedy.feasible:
        assert ilp.objective <= greedy.objective + 1e-6 * max(1.0, abs(greedy.objective))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems(limited=True))
def test_limited_ilp_never_costlier_than_feasible_greedy(p: ScalingProblem) -> None:
    greedy, _ = greedy_scale(p, now=0.0)
    ilp = solve_ilp(p)
    assert greedy.feasible == (violations(p, greedy.counts) == [])
    for plan in (greedy, ilp):  # actions move running counts to the plan's counts
        moved = dict(p.running)
        for a in plan.actions:
            moved[a.variant] = moved.get(a.variant, 0) + (a.count if isinstance(a, LoadVariant) else -a.count)
            assert a.count > 0
        assert {k: v for k, v in moved.items()} == dict(plan.counts)
    if ilp.feasible:
        assert violations(p, ilp.counts) == []
    if greedy.feasible:
        assert ilp.feasible
        assert ilp.objective <= greedy.objective + 1e-6 * max(1.0, abs(greedy.objective))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(1, 300), st.floats(0.5, 900), st.floats(0.01, 20)), min_size=1, max_size=8),
       st.floats(0, 5000), st.floats(5, 400), st.sampled_from([0.0, 0.05, 0.2]))
def test_cheapest_ilp_feasible_and_not_costlier_than_greedy(rows, qps: float, slo: float, headroom: float) -> None:
    vs = [ScalingVariant(f"v{i}", "m", "any", lat, q, c) for i, (lat, q, c) in enumerate(rows)]
    try:
        ilp = cheapest(vs, qps, slo, headroom=headroom, solver="ilp")
    except NoCombination:
        assert all(v.latency_ms > slo for v in vs)
        return
    greedy = cheapest(vs, qps, slo, headroom=headroom, solver="greedy")
    for combo in (ilp, greedy):
        assert combo.capacity_qps >= qps * (1 + headroom) - QPS_TOL
        assert all(combo.counts[v.name] == 0 for v in vs if v.latency_ms > slo)
        assert all(n >= 0 for n in combo.counts.values())
    assert ilp.cost_per_second <= greedy.cost_per_second + 1e-6 * max(1.0, greedy.cost_per_second)


def test_greedy_scales_down_cheap_instances_in_dollars_per_second() -> None:
    """Regression: a scale-down saving less than 5e-4 $/s (any instance under $1.8/hr) was ignored."""
    from variants.infaas.autoscale_greedy import GreedyState, greedy_scale
    from variants.infaas.autoscale_ilp import ScalingProblem, ScalingVariant

    v = ScalingVariant("cpu", "m", "cpu", latency_ms=10.0, saturation_qps=10.0, cost_per_second=0.149 / 3600)
    problem = ScalingProblem((v,), load_qps={"m": 5.0}, slo_ms={"m": 100.0}, running={"cpu": 4}, headroom=0.0)
    plan, state = greedy_scale(problem, now=0.0, state=GreedyState())
    plan, _ = greedy_scale(problem, now=1e6, state=state)   # long after T_v
    assert plan.counts["cpu"] == 1


@st.composite
def small_problems(draw) -> ScalingProblem:  # type: ignore[no-untyped-def]
    """At most 4 variants over 1-2 models, each needing at most 5 instances of any variant (load x
    (1 + headroom) <= 22 q/s, every saturation >= 5 q/s; unloading only lowers the cost): the
    optimum lies among counts 0..5, which a brute force enumerates."""
    variants, loads, slos, running = [], {}, {}, {}
    n_models = draw(st.integers(1, 2))
    for m in range(n_models):
        model = f"m{m}"
        for j in range(draw(st.integers(1, 4 // n_models))):
            v = ScalingVariant(f"{model}v{j}", model, draw(st.sampled_from(HW)), latency_ms=draw(st.floats(5, 300)),
                               saturation_qps=draw(st.floats(5, 50)), cost_per_second=draw(st.floats(0.01, 20)),
                               load_latency_s=draw(st.floats(0, 10)), resources={"units": draw(st.integers(1, 3))})
            variants.append(v)
            running[v.name] = draw(st.integers(0, 2))
        loads[model] = draw(st.floats(0, 20))
        slos[model] = draw(st.floats(5, 400))
    caps = {hw: {"units": draw(st.integers(0, 12))} for hw in HW} if draw(st.booleans()) else {}
    return ScalingProblem(tuple(variants), loads, slos, running=running, capacity=caps,
                          headroom=draw(st.sampled_from([0.0, 0.05, 0.1])), lam=draw(st.sampled_from([0.0, 0.01, 0.1])))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_problems())
def test_ilp_reaches_the_brute_force_optimum_on_small_cases(p: ScalingProblem) -> None:
    """The INFaaS ILP (§4.2.1) against every count vector 0..5: the same optimum (objective), and
    feasible exactly when some vector is (issue #30: the properties above only compared with greedy)."""
    import itertools

    names = [v.name for v in p.variants]
    best = None
    for combo in itertools.product(range(6), repeat=len(names)):
        counts = dict(zip(names, combo))
        if not violations(p, counts):
            o = objective(p, counts)
            best = o if best is None or o < best else best
    ilp = solve_ilp(p)
    if best is None:
        assert not ilp.feasible
        return
    assert ilp.feasible and violations(p, ilp.counts) == []
    assert ilp.objective == pytest.approx(best, rel=1e-6, abs=1e-9)
