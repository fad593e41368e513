"""Planner benchmark (Kairos §5.2): enumerate, bound (Eq. 9-15) and rank every pool of 6 instance
types within a budget that yields >= 1,000,000 pools, on one core.

Baseline, measured in the same run: a straightforward per-pool Python loop (cost check, the scalar
Eq. 15 of ``upper_bound_one``, then ``sorted``) over a subsample of the same pools.

The Kairos profiles cover 4 types; two more are synthetic, derived by scaling: ``g4dn.synth-fast``
(g4dn.xlarge latencies x0.7, $0.75/hr) and ``r5n.synth-slow`` (r5n.large latencies x1.4, $0.10/hr).

Run: ``.venv/bin/python bench/plan_bench.py [--runs 5] [--model rm2] [--budget 7.5]``
"""
from __future__ import annotations

import os
import sys

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")  # one core

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from dataclasses import replace  # noqa: E402

import numpy as np  # noqa: E402

from bench._report import machine, write_section  # noqa: E402
from scaler.batch_mix import mix_from_dist  # noqa: E402
from scaler.plan import PlanInputs, choose_pool, rank_inputs  # noqa: E402
from config.catalog import load_catalog  # noqa: E402
from config.profiles import LatencyProfile, load_profiles_csv  # noqa: E402
from scaler.upper_bound import upper_bound_one  # noqa: E402

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
        if cost > inputs.budget_per_hour + 1e-9 or sum(pool) == 0:
            continue
        scored.append((upper_bound_one(pool[bcol], [pool[j] for j in acols], ba.params), -cost, pool))
    scored.sort(reverse=True)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--model", default="rm2", choices=sorted(QOS))
    ap.add_argument("--budget", type=float, default=7.5)
    ap.add_argument("--subsample", type=int, default=50_000)
    args = ap.parse_args()
    inputs = make_inputs(args.model, args.budget)

    vec_s, n_pools = [], 0
    for _ in range(args.runs):
        t0 = time.perf_counter()
        _, ranking = rank_inputs(inputs)
        vec_s.append(time.perf_counter() - t0)
        n_pools = len(ranking)
    t0 = time.perf_counter()
    plan = choose_pool(inputs)
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
        f"Command: `.venv/bin/python bench/plan_bench.py --runs {args.runs} --model {args.model} --budget {args.budget:g}`",
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
