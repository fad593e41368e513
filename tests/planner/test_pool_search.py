"""The exact pool search (issue #29): the bound's monotonicity where it holds and where it does
not, the pruning bound on a hand-computed case and against every completion, and the search
against the enumeration: same pick, rule, top-K, count, for both objectives."""
from __future__ import annotations

import zlib
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

import scaler.planner.choose as plan_mod
import scaler.planner.search.pool_count as pool_count
import scaler.planner.search.pool_search as ps
from config.catalog import load_catalog
from config.profiles import LatencyProfile, load_profiles_csv
from scaler.planner.base_aux import NoFeasibleBase, PlanError
from scaler.planner.batch_mix import BatchMix, mix_from_dist
from scaler.planner.confirm import confirm_pick
from scaler.planner.choose import choose_pool, rank_inputs, undominated
from scaler.planner.plan_inputs import PlanInputs, base_aux_of, pool_space
from scaler.planner.search.pool_space import NO_CAP, PoolSpace, maximal
from scaler.planner.choose_by_search import undominated_row
from scaler.planner.upper_bound import enumerate_pools, upper_bound_one, upper_bounds

QOS = {"ncf": 5, "rm2": 350, "wnd": 25, "mtwnd": 25, "dien": 35}
TABLE = load_profiles_csv()
CATALOG = load_catalog()
REAL = TABLE.types()
MIX = BatchMix(np.array([10, 20, 40]), np.array([0.5, 0.25, 0.25]))


def small(name: str, mean: list[float]) -> LatencyProfile:
    m = np.array(mean, dtype=float)
    return LatencyProfile("m", name, np.array([10.0, 20, 30, 40]), m, m, m)


def hand_inputs(budget: float = 3.0) -> PlanInputs:
    # gpu: Q_b = 500, Q_b^{30+} = 250; cpu: s = 30, f = 0.75, Q_a = 375 (tests/planner/test_upper_bound.py)
    return PlanInputs(model="m", profiles={"gpu": small("gpu", [1, 2, 3, 4]), "cpu": small("cpu", [2, 4, 8, 16])},
                      mix=MIX, qos_ms=10, budget_per_hour=budget, prices={"gpu": 1.0, "cpu": 0.5}, xi=1.0)


def real_inputs(model: str, dist: str, budget: float, types: list[str] | None = None, qos_scale: float = 1.0,
                **kw: object) -> PlanInputs:
    types = types or REAL
    return PlanInputs(model=model, profiles={t: TABLE.get(model, t) for t in types}, mix=mix_from_dist(dist, seed=0),
                      qos_ms=QOS[model] * qos_scale, budget_per_hour=budget,
                      prices={t: CATALOG[t].price_per_hour for t in types}, **kw)


def searched(inp: PlanInputs, *a: object, decide=choose_pool, **kw: object):  # type: ignore[no-untyped-def]
    """``decide`` (choose_pool, confirm_pick) with the search forced: every space is above the threshold."""
    old = plan_mod.SEARCH_ABOVE
    plan_mod.SEARCH_ABOVE = -1
    try:
        return decide(inp, *a, **kw)
    finally:
        plan_mod.SEARCH_ABOVE = old


def outcome(f, *a, **kw):  # type: ignore[no-untyped-def]
    try:
        return f(*a, **kw)
    except PlanError as exc:
        return ("PlanError", str(exc))


# --- the bound: monotone for a fixed j*, not in general ------------------------------------------

def test_adding_an_instance_can_lower_the_bound_on_real_profiles() -> None:
    """The issue's premise does not hold: one more r5n.large (a larger region than t3.xlarge's)
    lowers wnd's bound, so pruning on "every free type at its maximum" would be wrong."""
    inp = real_inputs("wnd", "deeprecsys", 10.0)
    ba = base_aux_of(inp)
    assert ba.base_type == "g4dn.xlarge" and ba.aux_types == ("t3.xlarge", "r5n.large", "c5n.2xlarge")
    before = upper_bounds(np.array([5]), np.array([[8, 0, 0]]), ba.params)[0]
    after = upper_bounds(np.array([5]), np.array([[8, 1, 0]]), ba.params)[0]
    assert before == pytest.approx(1764.615, abs=1e-3) and after == pytest.approx(1760.134, abs=1e-3)


@settings(max_examples=60, deadline=None)
@given(model=st.sampled_from(sorted(QOS)), dist=st.sampled_from(["deeprecsys", "gaussian", "lognormal"]),
       qos_scale=st.sampled_from([0.7, 1.0, 1.5, 3.0]), seed=st.integers(0, 2**31 - 1))
def test_the_bound_is_monotone_while_the_largest_region_present_stays(model: str, dist: str, qos_scale: float,
                                                                      seed: int) -> None:
    """One more base instance, or one more of an auxiliary type whose region is no larger than the
    largest present (j*), never lowers the bound: random pools, every shipped model."""
    try:
        ba = base_aux_of(real_inputs(model, dist, 5.0, qos_scale=qos_scale))
    except NoFeasibleBase:
        assume(False)
        return
    rng = np.random.default_rng(seed)
    n = len(ba.aux)
    u = rng.integers(0, 30, 400)
    v = rng.integers(0, 30, (400, n)) * (rng.random((400, n)) < 0.6)
    b0 = upper_bounds(u, v, ba.params)
    assert np.all(upper_bounds(u + 1, v, ba.params) >= b0 - 1e-9 * np.maximum(b0, 1))
    present = v > 0
    jstar = np.where(present.any(axis=1), n - 1 - np.argmax(present[:, ::-1], axis=1), -1)
    for i in range(n):
        v2 = v.copy()
        v2[:, i] += 1
        stay = jstar >= i
        assert np.all(upper_bounds(u, v2, ba.params)[stay] >= b0[stay] - 1e-9 * np.maximum(b0[stay], 1))


@settings(max_examples=40, deadline=None)
@given(model=st.sampled_from(sorted(QOS)), dist=st.sampled_from(["deeprecsys", "gaussian"]), seed=st.integers(0, 2**31 - 1))
def test_a_pools_bound_is_the_same_float_whatever_shares_the_call(model: str, dist: str, seed: int) -> None:
    """The search evaluates pools in other batches than the enumeration (one held pool alone, a
    pass's survivors): upper_bounds gives each row the same bits either way."""
    ba = base_aux_of(real_inputs(model, dist, 5.0, qos_scale=1.5))
    rng = np.random.default_rng(seed)
    u = rng.integers(0, 40, 300)
    v = rng.integers(0, 40, (300, len(ba.aux))) * (rng.random((300, len(ba.aux))) < 0.5)
    together = upper_bounds(u, v, ba.params)
    alone = [upper_bounds(u[i:i + 1], v[i:i + 1], ba.params)[0] for i in range(0, 300, 7)]
    assert together[::7].tolist() == alone
    assert together[::7].tolist() == pytest.approx([upper_bound_one(int(u[i]), v[i].tolist(), ba.params)
                                                    for i in range(0, 300, 7)], rel=1e-12)


# --- the pruning bound ---------------------------------------------------------------------------

def _prune_bound(space: PoolSpace, fixed: dict[int, int], money: float) -> float:
    """The search's pruning bound of the partial pool ``fixed`` (column -> count), the rest free."""
    rx = ps._relax(space.params)
    free = {j for j in range(len(space.types)) if j not in fixed}
    lv = ps._level(space, free, rx)
    counts = space.lo.astype(np.int32).copy()
    for j, c in fixed.items():
        counts[j] = c
    spent = sum(c * space.prices[j] for j, c in fixed.items()) + sum(space.lo[j] * space.prices[j] for j in free)
    return float(ps._optimistic(space, rx, lv, counts[None, :], np.array([money - spent]))[0])


def test_pruning_bound_hand_computed() -> None:
    """gpu base (Q_b 500, Q_b^{30+} 250, $1), cpu auxiliary (f 0.75, Q_a 375, $0.5). Eq. 15 is
    min(alpha u, Q_b u + beta v) with alpha = 250 / 0.25 = 1000 and beta = 375 (1 - 0.25 * 500 / 250)
    / 0.75 = 250: (1,1) 750, (2,2) 1500. The relaxation at budget 3 with nothing fixed: x $ on gpu,
    3 - x on cpu at 500 q/s per $: min(1000 x, 500 x + 1500) -> 1500 at x = 1.5 (the true best,
    (2,2) and (3,0), is 1500). gpu fixed at 1: min(1000, 500 + 2 x 500) = 1000 = (1,2). gpu at 0:
    0 (no base, f < 1). gpu at 3: no money for a cpu, u Q_b = 1500. At budget 2.6: the crossing at
    x = 1.3 gives 1300 (the best pool, (2,1), bounds 1250: the relaxation is not always tight)."""
    inp = hand_inputs()
    ba = base_aux_of(inp)
    space = pool_space(inp, ba)
    g, c = space.types.index("gpu"), space.types.index("cpu")
    assert upper_bounds(np.array([1, 2]), np.array([[1], [2]]), ba.params).tolist() == pytest.approx([750, 1500])
    assert _prune_bound(space, {}, 3.0) == pytest.approx(1500)
    assert _prune_bound(space, {g: 1}, 3.0) == pytest.approx(1000)
    assert _prune_bound(space, {g: 0}, 3.0) == pytest.approx(0)
    assert _prune_bound(space, {g: 3}, 3.0) == pytest.approx(1500)
    assert _prune_bound(space, {g: 1, c: 1}, 3.0) == pytest.approx(750)       # everything fixed: the bound
    assert _prune_bound(space, {}, 2.6) == pytest.approx(1300)
    best = max(upper_bounds(np.array([u]), np.array([[v]]), ba.params)[0]
               for u in range(3) for v in range(6) if u + 0.5 * v <= 2.6)
    assert best == pytest.approx(1250)


@settings(max_examples=60, deadline=None)
@given(model=st.sampled_from(sorted(QOS)), dist=st.sampled_from(["deeprecsys", "gaussian", "lognormal"]),
       qos_scale=st.sampled_from([0.7, 1.0, 1.5]), budget=st.floats(0.5, 3.0), data=st.data())
def test_pruning_bound_covers_every_completion(model: str, dist: str, qos_scale: float, budget: float,
                                               data: st.DataObject) -> None:
    """For random partial pools on the real profiles, the pruning bound is at least the bound of
    every pool within budget that completes them (brute force over the completions)."""
    try:
        inp = real_inputs(model, dist, budget, qos_scale=qos_scale)
        ba = base_aux_of(inp)
    except NoFeasibleBase:
        assume(False)
        return
    space = pool_space(inp, ba)
    counts, cost = enumerate_pools(space.prices, budget)
    assume(len(counts) > 0)
    bound = space.bounds(counts)
    cols = data.draw(st.lists(st.integers(0, 3), unique=True, max_size=3))
    row = counts[data.draw(st.integers(0, len(counts) - 1))]
    fixed = {j: int(row[j]) for j in cols}
    sub = np.all([counts[:, j] == n for j, n in fixed.items()], axis=0) if fixed else np.ones(len(counts), bool)
    assert _prune_bound(space, fixed, budget + 1e-9) >= bound[sub].max() - 1e-7 * max(1.0, bound[sub].max())


# --- the count -----------------------------------------------------------------------------------

@settings(max_examples=80, deadline=None)
@given(prices=st.lists(st.integers(50, 2000), min_size=1, max_size=5), budget=st.integers(0, 6000),
       off_grid=st.booleans(), data=st.data())
def test_count_equals_the_enumeration(prices: list[int], budget: int, off_grid: bool, data: st.DataObject) -> None:
    """count_pools (a DP on the cents grid, or listing all but one type off the grid) is the number
    of pools enumerate_pools lists, with per-type minimums and maximums."""
    t = len(prices)
    pr = [p / 1000 + (1e-7 * (j + 1) if off_grid else 0.0) for j, p in enumerate(prices)]
    mins = data.draw(st.lists(st.integers(0, 2), min_size=t, max_size=t))
    maxs = data.draw(st.lists(st.one_of(st.none(), st.integers(0, 6)), min_size=t, max_size=t))
    b = budget / 1000
    try:
        want = len(enumerate_pools(pr, b, mins, maxs)[0])
    except PlanError:
        assume(False)
        return
    params = base_aux_of(hand_inputs()).params
    space = PoolSpace(tuple(f"t{j}" for j in range(t)), np.array(pr), np.array(mins, dtype=np.int64),
                         np.array([NO_CAP if m is None else m for m in maxs], dtype=np.int64), b, params, 0,
                         np.zeros(0, dtype=np.int64))
    assert pool_count.count_pools(space) == want
    assert (pool_count._grid(space) is None) == off_grid


def test_count_of_the_whole_catalog_at_20_per_hour() -> None:
    """12 types at 20 $/hr: the count the DP gives, checked against a slower independent count
    (per type, a convolution over whole cents with Python integers)."""
    prices = [CATALOG[t].price_per_hour for t in CATALOG]
    cents = [round(p * 10_000) for p in prices]
    ways = [1] + [0] * 200_000
    for c in cents:
        for x in range(c, 200_001):
            ways[x] += ways[x - c]
    params = base_aux_of(hand_inputs()).params
    space = PoolSpace(tuple(CATALOG), np.array(prices), np.zeros(12, dtype=np.int64),
                         np.full(12, NO_CAP, dtype=np.int64), 20.0, params, 0, np.zeros(0, dtype=np.int64))
    assert pool_count.count_pools(space) == sum(ways) - 1 > 10**13


# --- the search against the enumeration ----------------------------------------------------------

@st.composite
def catalogs(draw: st.DrawFn) -> PlanInputs:
    """2-5 types: random linear latency profiles, prices on a $0.001 grid, mins and maxes, a small
    batch mix, a QoS around the fastest type's, and a budget that keeps the enumeration small
    (up to some 10^4 pools)."""
    n = draw(st.integers(2, 5))
    sizes = np.arange(10, 101, 10, dtype=float)
    profiles, prices, bounds = {}, {}, {}
    for j in range(n):
        a, b = draw(st.floats(0.2, 5.0)), draw(st.floats(0.005, 0.3))
        mean = a + b * sizes
        p99 = mean * draw(st.floats(1.0, 1.6))
        profiles[f"t{j}"] = LatencyProfile("m", f"t{j}", sizes, mean, mean, p99)
        prices[f"t{j}"] = draw(st.integers(100, 900)) / 1000
        lo = draw(st.integers(0, 1)) if draw(st.booleans()) else 0
        hi = draw(st.one_of(st.none(), st.integers(max(lo, 1), 12)))
        bounds[f"t{j}"] = (lo, hi)
    k = draw(st.integers(1, 4))
    picked = sorted(draw(st.lists(st.sampled_from([10, 20, 30, 50, 80, 100]), min_size=k, max_size=k, unique=True)))
    w = np.array(draw(st.lists(st.integers(1, 10), min_size=k, max_size=k)), dtype=float)
    mix = BatchMix(np.array(picked), w / w.sum())
    fastest = min(float(p.latency_ms(picked[-1], "p99")) for p in profiles.values())
    qos = fastest * draw(st.sampled_from([0.8, 1.0, 1.1, 1.3, 1.6, 2.0, 3.0]))
    mean_price = sum(prices.values()) / n
    scale = draw(st.sampled_from({2: [2, 10, 30, 60], 3: [2, 8, 15, 25], 4: [2, 5, 9, 12], 5: [2, 4, 6, 8]}[n]))
    budget = round(mean_price * scale * draw(st.floats(0.9, 1.1)), 3)
    return PlanInputs(model="m", profiles=profiles, mix=mix, qos_ms=qos, budget_per_hour=budget, prices=prices,
                      bounds=bounds, xi=1.0)


def fake_meets(seed: int):  # type: ignore[no-untyped-def]
    """A deterministic stand-in for the simulation: passes pools by a hash of their counts."""
    def meets(pool: dict[str, int], base: str) -> bool:
        return zlib.crc32(repr((seed, sorted(pool.items()))).encode()) % 3 == 0 or sum(pool.values()) > 6 + seed % 5
    return meets


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inp=catalogs(), objective=st.sampled_from(["max_throughput", "min_cost"]), frac=st.floats(0.0, 1.3),
       top_k=st.integers(1, 15), with_meets=st.booleans(), seed=st.integers(0, 100), max_checks=st.integers(0, 6),
       held=st.booleans(), keep_within=st.sampled_from([0.1, 0.6]), data=st.data())
def test_search_gives_the_enumerations_plan(inp: PlanInputs, objective: str, frac: float, top_k: int,
                                            with_meets: bool, seed: int, max_checks: int, held: bool,
                                            keep_within: float, data: st.DataObject) -> None:
    """Random small catalogs: choose_pool searching and choose_pool ranking every pool give the
    same Plan (pick, rule, cost, bound, pools_ranked, the top_k ranked pools with their costs and
    bounds, demand_unmet), or the same PlanError."""
    ranked = outcome(rank_inputs, inp)
    top = 0.0 if isinstance(ranked, tuple) and ranked[0] == "PlanError" or len(ranked[1]) == 0 else ranked[1].bound[0]
    current = None
    if held:        # a ranked pool, perhaps one instance off
        rk = ranked[1] if not isinstance(ranked, tuple) or ranked[0] != "PlanError" else None
        if rk is not None and len(rk):
            current = rk.pool(data.draw(st.integers(0, len(rk) - 1)))
            t = data.draw(st.sampled_from(list(current)))
            current[t] = max(0, current[t] + data.draw(st.integers(-1, 1)))
        else:
            current = {t: 1 for t in inp.types}
    kw = dict(objective=objective, demand_qps=frac * top / 1.1, headroom=0.1, top_k=top_k,
              meets=fake_meets(seed) if with_meets else None, max_checks=max_checks, current=current,
              keep_within=keep_within)
    want = outcome(choose_pool, inp, exhaustive=True, **kw)
    got = outcome(searched, inp, **kw)
    event(want[0] if isinstance(want, tuple) else f"{want.rule} {len(want.ranked)}/{want.pools_ranked}")
    assert got == want


@settings(max_examples=40, deadline=None)
@given(model=st.sampled_from(sorted(QOS)), dist=st.sampled_from(["deeprecsys", "gaussian", "lognormal"]),
       budget=st.sampled_from([1.0, 2.5, 4.0]), objective=st.sampled_from(["max_throughput", "min_cost"]),
       frac=st.floats(0.0, 1.2), with_meets=st.booleans(), qos_scale=st.sampled_from([0.8, 1.0, 1.5]))
def test_search_gives_the_enumerations_plan_on_real_profiles(model: str, dist: str, budget: float, objective: str,
                                                             frac: float, with_meets: bool, qos_scale: float) -> None:
    inp = real_inputs(model, dist, budget, qos_scale=qos_scale)
    ranked = outcome(rank_inputs, inp)
    assume(not (isinstance(ranked, tuple) and ranked[0] == "PlanError"))
    kw = dict(objective=objective, demand_qps=frac * float(ranked[1].bound[0]), top_k=10,
              meets=fake_meets(3) if with_meets else None)
    assert outcome(searched, inp, **kw) == outcome(choose_pool, inp, exhaustive=True, **kw)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inp=catalogs(), data=st.data())
def test_top_pools_and_undominated_match_the_ranking(inp: PlanInputs, data: st.DataObject) -> None:
    """top_pools(k) is the ranking's first k rows (pools, costs, bounds, in order), and
    undominated_row is scaler.planner.choose.undominated, for any row."""
    try:
        ba, ranking = rank_inputs(inp)
    except PlanError:
        assume(False)
        return
    assume(len(ranking) > 0)
    space = pool_space(inp, ba)
    k = data.draw(st.integers(1, len(ranking) + 2))
    top = ps.top_pools(space, k)
    assert np.array_equal(top.counts, ranking.counts[:k])
    assert top.cost.tolist() == ranking.cost[:k].tolist() and top.bound.tolist() == ranking.bound[:k].tolist()
    i = data.draw(st.integers(0, len(ranking) - 1))
    row = undominated_row(space, (ranking.counts[i], float(ranking.cost[i]), float(ranking.bound[i])))
    assert np.array_equal(row[0], ranking.counts[undominated(ranking, inp, i)])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inp=catalogs(), frac=st.floats(0.0, 1.0), k=st.integers(1, 30))
def test_cheapest_pools_are_the_min_cost_candidates_in_order(inp: PlanInputs, frac: float, k: int) -> None:
    try:
        ba, ranking = rank_inputs(inp)
    except PlanError:
        assume(False)
        return
    assume(len(ranking) > 0 and ranking.bound[0] > 0)
    need = frac * float(ranking.bound[0])
    ok = np.flatnonzero((ranking.bound >= need) & (ranking.bound > 0))
    order = ok[np.lexsort((-ranking.bound[ok], np.round(ranking.cost[ok], 9)))][:k]
    got = ps.cheapest_pools(pool_space(inp, ba), need, k)
    assert np.array_equal(got.counts, ranking.counts[order]) and got.cost.tolist() == ranking.cost[order].tolist()


def fake_evaluate(seed: int):  # type: ignore[no-untyped-def]
    """A deterministic stand-in for the simulator: about the bound's size, scrambled per pool."""
    def evaluate(pool: dict[str, int]) -> float:
        return float(sum(pool.values()) * 10 + zlib.crc32(repr((seed, sorted(pool.items()))).encode()) % 37)
    return evaluate


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inp=catalogs(), evaluations=st.integers(2, 8), seed=st.integers(0, 50))
def test_confirmation_over_the_search_is_the_one_over_the_ranking(inp: PlanInputs, evaluations: int,
                                                                  seed: int) -> None:
    """confirm_pick with its candidates (the homogeneous pool, one more base instance, Kairos+ over
    the maximal pools in ranking order) from the search evaluates the same pools in the same order
    and confirms the same plan as from the ranked list."""
    want = outcome(confirm_pick, inp, fake_evaluate(seed), evaluations, exhaustive=True)
    got = outcome(searched, inp, fake_evaluate(seed), evaluations, decide=confirm_pick)
    assert got == want


# --- at fleet scale ------------------------------------------------------------------------------

#: the 8 catalog types without a Kairos profile, as a measured type's latencies times a factor
SCALED = {"g4dn.2xlarge": ("g4dn.xlarge", 0.95), "g5.xlarge": ("g4dn.xlarge", 0.55),
          "inf1.xlarge": ("g4dn.xlarge", 2.4), "inf2.xlarge": ("g4dn.xlarge", 0.75),
          "c5.2xlarge": ("c5n.2xlarge", 1.05), "c6i.2xlarge": ("c5n.2xlarge", 0.92),
          "m5.xlarge": ("t3.xlarge", 1.0), "r5.large": ("r5n.large", 1.03)}


def twelve_types(model: str, budget: float) -> PlanInputs:
    """The 12 catalog types in catalog order (the scaled ones stand in for profiles nobody measured)."""
    profiles = {}
    for t in CATALOG:
        src, k = SCALED.get(t, (t, 1.0))
        p = TABLE.get(model, src)
        profiles[t] = replace(p, instance_type=t, mean_ms=p.mean_ms * k, p50_ms=p.p50_ms * k, p99_ms=p.p99_ms * k)
    return PlanInputs(model=model, profiles=profiles, mix=mix_from_dist("deeprecsys", seed=0), qos_ms=QOS[model],
                      budget_per_hour=budget, prices={t: CATALOG[t].price_per_hour for t in profiles})


def test_the_whole_catalog_at_20_per_hour_plans_where_ranking_cannot() -> None:
    """1.7e13 pools: ranking refuses in one line, choose_pool searches; its pick is maximal and
    its top ten come in the ranking's order."""
    inp = twelve_types("dien", 20.0)
    with pytest.raises(PlanError, match=r"^16,576,648,012,014 pools within budget 20 \$/hr over 12 types: too many to "
                                        r"list \(limit 50,000,000\); set per-type max counts or fewer types$") as exc:
        rank_inputs(inp)
    assert "\n" not in str(exc.value)
    plan = choose_pool(inp)
    assert plan.pools_ranked > 10**13 and len(plan.ranked) == 10
    bounds = [b for _, _, b in plan.ranked]
    assert bounds == sorted(bounds, reverse=True)
    space = pool_space(inp, base_aux_of(inp))
    chosen = np.array([[plan.chosen[t] for t in space.types]])
    assert maximal(space, chosen, np.array([plan.cost_per_hour]))[0]
    cheap = choose_pool(inp, "min_cost", demand_qps=0.5 * bounds[0])
    assert cheap.upper_bound_qps >= 0.55 * bounds[0] and cheap.cost_per_hour < plan.cost_per_hour


def test_a_search_past_its_work_limit_is_one_plan_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ps, "WORK_LIMIT", 1000)
    monkeypatch.setattr(ps, "RETRY_WORK", 100)
    inp = twelve_types("dien", 20.0)
    with pytest.raises(PlanError, match=r"^the pool search needs more than 1,000 steps at budget 20 \$/hr over 12 "
                                        r"types; set per-type max counts$"):
        choose_pool(inp)


def test_a_search_past_its_limit_falls_back_to_ranking_where_ranking_can(monkeypatch: pytest.MonkeyPatch) -> None:
    inp = real_inputs("wnd", "deeprecsys", 4.0)
    want = choose_pool(inp, exhaustive=True)
    want_confirmed = confirm_pick(inp, fake_evaluate(1), 4, exhaustive=True)
    monkeypatch.setattr(plan_mod, "SEARCH_ABOVE", 0)
    monkeypatch.setattr(ps, "WORK_LIMIT", 10)
    monkeypatch.setattr(ps, "RETRY_WORK", 10)
    with pytest.raises(ps.SearchTooLarge):
        ps.top_pools(pool_space(inp, base_aux_of(inp)), 10)
    assert choose_pool(inp) == want
    assert confirm_pick(inp, fake_evaluate(1), 4) == want_confirmed
