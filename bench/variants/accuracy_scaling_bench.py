#!/usr/bin/env python3
"""Accuracy scaling against its baselines on a macro-burst, and adaptive batching on micro-bursts
(issue #13 goals; Proteus §6.2-6.4). Writes the "accuracy-scaling" section of BENCHMARKS.md.

    .venv/bin/python bench/variants/accuracy_scaling_bench.py [--family resnet] [--minutes 30]

The pool is fixed (accuracy scaling decides variants, not instances); the macro-burst's high phase is
twice what the pool serves with the most accurate variant on every worker (Proteus §4 capacity).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench._report import machine, write_section  # noqa: E402
from sim.accuracy_sim import ALLOCATIONS, AccuracySpec, simulate_accuracy  # noqa: E402
from sim.patterns import parse_pattern, pattern_workload  # noqa: E402
from sim.workload import gamma_arrivals, poisson_arrivals  # noqa: E402
from config.profiles import load_profiles_csv  # noqa: E402
from variants.accuracy.planner import VariantProfile, capacity, profiles_from_rows, workers_from_counts  # noqa: E402
from variants.families.profiles import read_csv, shipped_csv  # noqa: E402
from variants.families import spec as family_spec  # noqa: E402

#: the pool: 2.32 $/hr of the catalog's prices, under the examples' 2.5 $/hr budget
POOL = {"g4dn.xlarge": 1, "c5n.2xlarge": 2, "r5n.large": 4, "t3.xlarge": 2}
LABEL = {"proteus": "costscale (Proteus MILP + adaptive batching)", "no_scaling": "no accuracy scaling (Clipper-HA)",
         "infaas_accuracy": "INFaaS-Accuracy (greedy)", "clipper_ht": "Clipper-HT (least accurate)",
         "slackfit": "SlackFit (SuperServe §4.2 buckets, one queue)",
         "slackfit_queue": "SlackFit on the queue (ours: most accurate that serves what waits)"}


def kairos_variant(model: str, types: tuple[str, ...]) -> VariantProfile:
    """One variant from the Kairos latency profiles (mean ms by batch; batch 1 at the per-query cost of
    the smallest profiled batch, the profiles start at 10)."""
    prof = load_profiles_csv(None)
    lat: dict[str, dict[int, float]] = {}
    for t in types:
        p = prof.get(model, t)
        tab = {int(b): float(m) for b, m in zip(p.batch_sizes, p.mean_ms) if b <= 400}
        b0 = min(tab)
        lat[t] = {1: tab[b0] / b0, **tab}
    return VariantProfile(model, model, 1.0, lat)


def row(name: str, s: dict, wall: float) -> str:
    return (f"| {name} | {100 * s['slo_attainment']:.2f} % | {s['missed']:,} | {100 * s['mean_accuracy']:.2f} | "
            f"{s['max_drop_points']:.2f} | {s['replans']} | {s['swaps']} | {s['max_solve_ms']:.0f} | {wall:.1f} |")


#: demand multipliers tried for Proteus at equal attainment (1.05: Proteus's default)
EQUAL_BETAS = (1.05, 1.25, 1.5, 2.0, 3.0)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--family", default="resnet")
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    vs = profiles_from_rows(read_csv(shipped_csv(args.family)))
    model = vs[0].model
    slo = family_spec(args.family).qos_ms
    pool = workers_from_counts(POOL)
    top = max(vs, key=lambda v: v.accuracy)
    full = sum(capacity(top.latency_ms[t], slo)[1] for t in pool.values())  # type: ignore[index]
    dur = args.minutes * 60.0
    pat = f"macroburst:low={0.5 * full:.4g},high={2 * full:.4g},low_s={dur / 3:.4g},high_s={dur / 6:.4g}"
    arr = pattern_workload(parse_pattern(pat), dur, seed=args.seed).arrivals
    parts = [f"Machine: {machine()}. Command: `.venv/bin/python bench/variants/accuracy_scaling_bench.py --family "
             f"{args.family} --minutes {args.minutes:g}`. `sim/accuracy_sim.py` on virtual time; family "
             f"`{args.family}` ({len(vs)} variants, accuracies {100 * min(v.accuracy for v in vs):.2f}-"
             f"{100 * top.accuracy:.2f} %), SLO {slo:g} ms, pool {POOL} ({len(pool)} workers). The most accurate "
             f"variant everywhere serves {full:.1f} q/s (Proteus §4 capacity: largest batch within SLO/2).",
             "Goals (issue #13): attainment ≥ 99.9 % and max accuracy drop ≤ 4 points on a macro-burst whose high "
             "phase is 2x the full-accuracy capacity (Proteus §6.3: 4.85 % max drop, INFaaS 13.7 %); adaptive "
             "batching misses fewer SLOs than no batching and than work-conserving on Poisson and Gamma "
             "arrivals (Proteus §6.4: 2-4x); SlackFit more accurate than the Proteus planner at equal attainment "
             "(SuperServe: +4.65 points at 0.99999; here Proteus reaches SlackFit's attainment by planning for beta x "
             "demand). Max drop: the largest drop of a 1-minute mean of served accuracy "
             "below the most accurate variant. A variant swap stops the worker 0.2 s (`swap_s`)."]
    head = ("| allocation | SLO attainment | missed | mean accuracy % | max drop (points) | replans | swaps | "
            "max solve ms | wall s |\n|---|---|---|---|---|---|---|---|---|")
    lines = []
    for alloc in ALLOCATIONS:
        t0 = time.perf_counter()
        s = simulate_accuracy(pool, vs, model, slo, arr, AccuracySpec(allocation=alloc)).summary()
        lines.append(row(LABEL[alloc], s, time.perf_counter() - t0))
        print(lines[-1], flush=True)
    parts.append(f"### Macro-burst: `{pat}` over {args.minutes:g} min ({arr.size:,} queries)\n\n{head}\n"
                 + "\n".join(lines))
    lines = []
    for swap in (0.0, 0.5, 1.0):
        s = simulate_accuracy(pool, vs, model, slo, arr, AccuracySpec(swap_s=swap)).summary()
        lines.append(f"| {swap:g} | {100 * s['slo_attainment']:.2f} % | {s['missed']:,} | {s['max_drop_points']:.2f} |")
    parts.append("costscale with other swap times (s a worker serves nothing while it loads another variant):\n\n"
                 "| swap s | SLO attainment | missed | max drop |\n|---|---|---|---|\n" + "\n".join(lines))
    # SlackFit against the Proteus planner on micro-bursts (SuperServe §6: accuracy at equal attainment)
    lines = []
    for load in (0.8, 1.5):
        rng = np.random.default_rng(args.seed)
        for name, a in (("Poisson", poisson_arrivals(load * full, rng, duration=min(dur, 600.0))),
                        ("Gamma (CV² 20)", gamma_arrivals(load * full, 20.0, rng, duration=min(dur, 600.0)))):
            cells = []
            got = {}
            for alloc in ("proteus", "slackfit", "slackfit_queue"):
                s_ = got[alloc] = simulate_accuracy(pool, vs, model, slo, a, AccuracySpec(allocation=alloc)).summary()
                cells.append(f"{100 * s_['slo_attainment']:.2f} % / {100 * s_['mean_accuracy']:.2f}")
            # equal attainment: Proteus planning for more than 1.05 x the measured demand, the
            # smallest beta that reaches slackfit_queue's attainment; the accuracy it keeps there
            want = got["slackfit_queue"]["slo_attainment"]
            cell = "not reached at beta <= 3"
            for beta in EQUAL_BETAS:
                s_ = simulate_accuracy(pool, vs, model, slo, a, AccuracySpec(beta=beta)).summary()
                if s_["slo_attainment"] >= want - 1e-12:
                    gain = 100 * (got["slackfit_queue"]["mean_accuracy"] - s_["mean_accuracy"])
                    cell = (f"beta {beta:g}: {100 * s_['slo_attainment']:.2f} % / {100 * s_['mean_accuracy']:.2f} "
                            f"(SlackFit on the queue {gain:+.2f} points)")
                    break
            cells.append(cell)
            lines.append(f"| {load:g}x | {name} | {a.size:,} | " + " | ".join(cells) + " |")
            print(lines[-1], flush=True)
    parts.append("### SlackFit against the Proteus planner on micro-bursts (attainment / mean accuracy %), "
                 f"{min(dur, 600.0):g} s at a multiple of the full-accuracy capacity\n\n"
                 "| load | arrivals | queries | Proteus planner + batching | SlackFit (paper) | SlackFit on the queue "
                 "(ours) | Proteus at SlackFit on the queue's attainment |\n|---|---|---|---|---|---|---|\n"
                 + "\n".join(lines))
    # micro-bursts: a constant rate, three inter-arrival shapes, three batchers, on two profiles
    rm2 = kairos_variant("rm2", ("g4dn.xlarge", "r5n.large"))
    rm2_pool = {"g4dn.xlarge-0": "g4dn.xlarge", "r5n.large-0": "r5n.large"}
    rm2_full = sum(capacity(rm2.latency_ms[t], 50.0)[1] for t in rm2_pool.values())  # type: ignore[index]
    cases = [(f"{args.family} family, its pool, {1.5 * full:.1f} q/s (1.5x full-accuracy capacity; accuracy "
              f"scaled), SLO {slo:g} ms: per-query cost does not fall with the batch (CPU-measured, GPU by "
              "emulation factors)", pool, vs, model, slo, 1.5 * full, min(dur, 600.0)),
             (f"rm2 (Kairos profiles measured on AWS), g4dn.xlarge + r5n.large, {0.8 * rm2_full:.0f} q/s (80 % "
              "of capacity), SLO 50 ms: per-query cost falls with the batch", rm2_pool, [rm2], "rm2", 50.0,
              0.8 * rm2_full, 30.0)]
    for label, c_pool, c_vs, c_model, c_slo, rate, n_s in cases:
        rng = np.random.default_rng(args.seed)
        traces = {"uniform": np.arange(int(rate * n_s)) / rate,
                  "Poisson": poisson_arrivals(rate, rng, duration=n_s),
                  "Gamma (CV² 20)": gamma_arrivals(rate, 20.0, rng, duration=n_s)}
        lines = []
        for name, a in traces.items():
            miss = {b: simulate_accuracy(c_pool, c_vs, c_model, c_slo, a, AccuracySpec(batching=b)).summary()["missed"]  # type: ignore[arg-type]
                    for b in ("proteus", "work_conserving", "none")}
            n = a.size
            lines.append(f"| {name} | {n:,} | {100 * miss['proteus'] / n:.2f} % | {100 * miss['work_conserving'] / n:.2f} % "
                         f"| {100 * miss['none'] / n:.2f} % | {miss['work_conserving'] / max(miss['proteus'], 1):.2f} | "
                         f"{miss['none'] / max(miss['proteus'], 1):.2f} |")
            print(lines[-1], flush=True)
        parts.append(f"### Adaptive batching: {label}; {n_s:g} s, costscale's allocation, three batchers (early "
                     "drop on)\n\n| arrivals | queries | missed: Proteus | work-conserving | none | "
                     "work-conserving ÷ Proteus | none ÷ Proteus |\n|---|---|---|---|---|---|---|\n" + "\n".join(lines))
    write_section("accuracy-scaling", "## Accuracy scaling: costscale against its baselines (bench/variants/accuracy_scaling_bench.py)\n\n"
                  + "\n\n".join(parts) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
