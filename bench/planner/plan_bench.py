"""Planner benchmark (Kairos §5.2): enumerate, bound (Eq. 9-15) and rank every pool of 6 instance
types within a budget that yields >= 1,000,000 pools, on one core.

Baseline, measured in the same run: a straightforward per-pool Python loop (cost check, the scalar
Eq. 15 of ``upper_bound_one``, then ``sorted``) over a subsample of the same pools.

The Kairos profiles cover 4 types; two more are synthetic, derived by scaling: ``g4dn.synth-fast``
(g4dn.xlarge latencies x0.7, $0.75/hr) and ``r5n.synth-slow`` (r5n.large latencies x1.4, $0.10/hr).

Run: ``.venv/bin/python bench/planner/plan_bench.py [--runs 5] [--model rm2] [--budget 7.5] [--section plan|fleet-scale|all]``

The ``fleet-scale`` section (issue #29) times ``choose_pool`` ranking every pool (``exhaustive=True``)
against the exact pool search (``scaler.planner.search.pool_search``) in the same run, and checks they give the
same Plan: (a) 5 types (the 4 Kairos types and r5.large) at a budget of about 4.5 M pools; (b) all
12 catalog types at 20 $/hr (1.66e13 pools: the ranking refuses), the search alone. The 8 catalog
types without a Kairos profile are planned on their estimates (`config/type_estimates.csv`, ``FLEET_SCALED``).
"""
from __future__ import annotations

import os
import sys

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")  # one core

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from dataclasses import replace  # noqa: E402

import numpy as np  # noqa: E402

from bench._report import machine, write_section  # noqa: E402
from config.budget import BUDGET_EPS  # noqa: E402
from scaler.planner.batch_mix import mix_from_dist  # noqa: E402
import scaler.planner.choose as plan_mod  # noqa: E402
from scaler.planner.choose import choose_pool, rank_inputs  # noqa: E402
from scaler.planner.plan_inputs import PlanInputs  # noqa: E402
from config.catalog import load_catalog  # noqa: E402
from config.profiles import LatencyProfile, load_profiles_csv  # noqa: E402
from config.type_estimates import type_rules, with_type_estimates  # noqa: E402
from scaler.planner.upper_bound import upper_bound_one  # noqa: E402

QOS = {"ncf": 5, "rm2": 350, "wnd": 25, "mtwnd": 25, "dien": 35}
#: Kairos §7 Table 3's types at the shipped catalog's prices, and two synthetic types with their own
_CATALOG = load_catalog()
PRICES = {**{t: _CATALOG[t].price_per_hour for t in ("g4dn.xlarge", "c5n.2xlarge", "r5n.large", "t3.xlarge")},
          "g4dn.synth-fast": 0.75, "r5n.synth-slow": 0.10}
SYNTH = {"g4dn.synth-fast": ("g4dn.xlarge", 0.7), "r5n.synth-slow": ("r5n.large", 1.4)}


def scaled(p: LatencyProfile, name: str, k: float) -> LatencyProfile:
    return replace(p, instance_type=name, mean_ms=p.mean_ms * k, p50_ms=p.p50_ms * k, p99_ms=p.p99_ms * k)


def make_inputs(model: str, budget: float) -> PlanInputs:
    table = load_profiles_csv()
    profiles = {t: table.get(model, t) for t in ("g4dn.xlarge", "c5n.2xlarge", "r5n.large", "t3.xlarge")}
    for name, (src, k) in SYNTH.items():
        profiles[name] = scaled(profiles[src], name, k)
    return PlanInputs(model=model, profiles=profiles, mix=mix_from_dist("deeprecsys", seed=0), qos_ms=QOS[model],
                      budget_per_hour=budget, prices=PRICES)


def baseline(inputs: PlanInputs, pools: list[tuple[int, ...]]) -> float:
    """Per-pool Python loop: seconds for ``pools``."""
    ba, _ = rank_inputs(replace(inputs, budget_per_hour=min(PRICES.values())))  # base/aux split only
    types = list(inputs.allowed)
    price = [inputs.prices[t] for t in types]
    bcol = types.index(ba.base_type)
    acols = [types.index(t) for t in ba.aux_types]
    t0 = time.perf_counter()
    scored = []
    for pool in pools:
        cost = sum(n * p for n, p in zip(pool, price))
        if cost > inputs.budget_per_hour + BUDGET_EPS or sum(pool) == 0:
            continue
        scored.append((upper_bound_one(pool[bcol], [pool[j] for j in acols], ba.params), -cost, pool))
    scored.sort(reverse=True)
    return time.perf_counter() - t0


#: the catalog types without a Kairos profile: their sibling's measured latencies times the type
#: table's factor (config/type_estimates.csv, the estimates `costscale plan --estimates` plans with)
FLEET_SCALED = {t: (r.sibling, r.latency_factor) for t, r in type_rules().items()}
FIVE = ("g4dn.xlarge", "c5n.2xlarge", "r5n.large", "t3.xlarge", "r5.large")


def fleet_inputs(model: str, budget: float, types: tuple[str, ...] | None = None) -> PlanInputs:
    """``types`` (default: every catalog type, in catalog order) at catalog prices, deeprecsys mix."""
    table = with_type_estimates(load_profiles_csv())      # the unmeasured types: FLEET_SCALED
    profiles = {t: table.get(model, t) for t in types or tuple(_CATALOG)}
    return PlanInputs(model=model, profiles=profiles, mix=mix_from_dist("deeprecsys", seed=0), qos_ms=QOS[model],
                      budget_per_hour=budget, prices={t: _CATALOG[t].price_per_hour for t in profiles})


def timed(f, runs: int):  # type: ignore[no-untyped-def]
    out, ts = None, []
    for _ in range(runs):
        t0 = time.perf_counter()
        out = f()
        ts.append(time.perf_counter() - t0)
    return out, statistics.median(ts)


def searched(inputs: PlanInputs, **kw: object):  # type: ignore[no-untyped-def]
    old = plan_mod.SEARCH_ABOVE
    plan_mod.SEARCH_ABOVE = -1          # search whatever the size (the default above 200,000 pools does too)
    try:
        return choose_pool(inputs, **kw)  # type: ignore[arg-type]
    finally:
        plan_mod.SEARCH_ABOVE = old


def short(pool: dict[str, int]) -> str:
    return " + ".join(f"{n} {t}" for t, n in pool.items() if n)


def fleet_scale(runs: int, budget5: float, demand_frac: float) -> str:
    syn = ", ".join(f"{t} = {src} x{k}" for t, (src, k) in FLEET_SCALED.items())
    lines = [
        "## plan fleet-scale: the exact pool search against ranking every pool (issue #29)",
        "",
        f"Machine: {machine()}; one thread (OMP/OPENBLAS/MKL_NUM_THREADS=1).",
        f"Command: `.venv/bin/python bench/planner/plan_bench.py --section fleet-scale --runs {runs}`",
        "",
        "deeprecsys mix, each model at its Kairos QoS, catalog prices. `choose_pool` times, median of "
        f"{runs} runs each; max_throughput (the similarity pick, undominated) and min_cost at demand = "
        f"{demand_frac:g} x the top bound / 1.1 (so need = {demand_frac:g} x the top bound). \"same\": the "
        "search's Plan equals the ranking's (pick, rule, cost, bound, pools_ranked, the top 10 with "
        "costs and bounds).",
        f"Types without a Kairos profile are planned on their estimates (config/type_estimates.csv, as `costscale plan --estimates` does): {syn}.",
        "",
        f"(a) 5 types ({', '.join(FIVE)}) at {budget5:g} $/hr: enumeration and search in the same run.",
        "",
        "| model | pools | rank every pool s | search s | speed-up | same pick | min_cost rank s | min_cost search s "
        "| same | pick (max_throughput) |",
        "|---|---:|---:|---:|---:|---|---:|---:|---|---|",
    ]
    for model in sorted(QOS):
        inp = fleet_inputs(model, budget5, FIVE)
        want, t_rank = timed(lambda: choose_pool(inp, exhaustive=True), runs)
        got, t_search = timed(lambda: searched(inp), runs)
        kw = {"objective": "min_cost", "demand_qps": demand_frac * want.ranked[0][2] / 1.1}
        want_mc, t_rank_mc = timed(lambda: choose_pool(inp, exhaustive=True, **kw), runs)
        got_mc, t_search_mc = timed(lambda: searched(inp, **kw), runs)
        lines.append(f"| {model} | {want.pools_ranked:,} | {t_rank:.3f} | {t_search:.3f} | {t_rank / t_search:.0f}x | "
                     f"{'yes' if got == want else 'NO'} | {t_rank_mc:.3f} | {t_search_mc:.3f} | "
                     f"{'yes' if got_mc == want_mc else 'NO'} | {short(got.chosen)} ({got.rule}) |")
        print(lines[-1], flush=True)
    lines += [
        "",
        "(b) all 12 catalog types at 20 $/hr: the search alone (ranking every pool refuses: "
        "`rank_inputs` counts the pools first and stops in one PlanError line). Goal: <= 1 s.",
        "",
        "| model | pools | search s (max_throughput) | pick | bound q/s | rule | min_cost search s | min_cost pick ($/hr) |",
        "|---|---:|---:|---|---:|---|---:|---|",
    ]
    worst = 0.0
    for model in sorted(QOS):
        inp = fleet_inputs(model, 20.0)
        got, t = timed(lambda: choose_pool(inp), runs)
        kw = {"objective": "min_cost", "demand_qps": demand_frac * got.ranked[0][2] / 1.1}
        mc, t_mc = timed(lambda: choose_pool(inp, **kw), runs)
        worst = max(worst, t, t_mc)
        lines.append(f"| {model} | {got.pools_ranked:,} | {t:.3f} | {short(got.chosen)} | {got.upper_bound_qps:.1f} | "
                     f"{got.rule} | {t_mc:.3f} | {short(mc.chosen)} (${mc.cost_per_hour:.3f}) |")
        print(lines[-1], flush=True)
    try:
        rank_inputs(fleet_inputs("rm2", 20.0))
        refused = "(ranked?)"
    except Exception as exc:  # noqa: BLE001 - the line it refuses with
        refused = str(exc)
    lines += ["", f"Slowest search in (b): {worst:.3f} s (goal <= 1 s). `rank_inputs` at 20 $/hr: \"{refused}\"."]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--model", default="rm2", choices=sorted(QOS))
    ap.add_argument("--budget", type=float, default=7.5)
    ap.add_argument("--subsample", type=int, default=50_000)
    ap.add_argument("--section", choices=("plan", "fleet-scale", "all"), default="all")
    ap.add_argument("--budget5", type=float, default=12.4, help="fleet-scale (a): the 5 types' budget")
    ap.add_argument("--demand-frac", type=float, default=0.6, help="fleet-scale: min_cost need / top bound")
    args = ap.parse_args()
    if args.section in ("fleet-scale", "all"):
        md = fleet_scale(args.runs, args.budget5, args.demand_frac)
        print(md)
        write_section("plan-fleet-scale", md)
    if args.section == "fleet-scale":
        return 0
    inputs = make_inputs(args.model, args.budget)

    vec_s, n_pools = [], 0
    for _ in range(args.runs):
        t0 = time.perf_counter()
        _, ranking = rank_inputs(inputs)
        vec_s.append(time.perf_counter() - t0)
        n_pools = len(ranking)
    t0 = time.perf_counter()
    plan = choose_pool(inputs, exhaustive=True)     # ranking every pool, as this section measures
    choose_s = time.perf_counter() - t0

    rng = np.random.default_rng(0)
    pick = rng.choice(n_pools, size=min(args.subsample, n_pools), replace=False)
    sub = [tuple(int(x) for x in row) for row in ranking.counts[pick]]
    base_s = [baseline(inputs, sub) for _ in range(args.runs)]

    vec_med, base_med = statistics.median(vec_s), statistics.median(base_s)
    vec_rate, base_rate = n_pools / vec_med, len(sub) / base_med
    synth = ", ".join(f"{n} = {src} latency x{k} at ${PRICES[n]}/hr" for n, (src, k) in SYNTH.items())
    lines = [
        "## plan: enumerate, bound and rank every pool (Kairos §5.2, Eq. 9-15)",
        "",
        f"Machine: {machine()}; one thread (OMP/OPENBLAS/MKL_NUM_THREADS=1).",
        f"Command: `.venv/bin/python bench/planner/plan_bench.py --runs {args.runs} --model {args.model} --budget {args.budget:g}`",
        "",
        f"Model {args.model} (QoS {QOS[args.model]} ms), deeprecsys mix, budget {args.budget:g} $/hr, 6 instance types: "
        f"4 from the Kairos profiles + 2 synthetic ({synth}).",
        "",
        "| | pools | median s | pools/s |",
        "|---|---:|---:|---:|",
        f"| vectorized (numpy): enumerate + bound + rank | {n_pools:,} | {vec_med:.3f} | {vec_rate:,.0f} |",
        f"| baseline: per-pool Python loop (subsample) | {len(sub):,} | {base_med:.3f} | {base_rate:,.0f} |",
        "",
        f"Speed-up (pools/s, vectorized / loop): **{vec_rate / base_rate:.1f}x**; median of {args.runs} runs each. "
        f"1,000,000 pools in {1e6 / vec_rate:.3f} s (goal < 1 s).",
        f"Full `choose_pool` (incl. the pick) once: {choose_s:.3f} s; pick {plan.chosen} rule {plan.rule}.",
    ]
    md = "\n".join(lines)
    print(md)
    write_section("plan", md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
