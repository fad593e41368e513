"""Matching that scales with the types, not the workers (issue #29) → section "match-scale".

``make_policy(name, ...).match`` (the class matching above ``DENSE_MAX_PAIRS`` pairs) against
``match_dense`` (today's dense ``linear_sum_assignment`` on the m × n matrix, the baseline), on the
same rounds, in the same process: rm2 queries (DeepRecSys batch mix, waited 0-100 ms, SLO 350 ms)
on 12 instance types (the 4 profiled types and copies of them 1.35× and 1.8× slower), a third of
the workers busy for 0-50 ms. Per size: p50/p99 per decision of each, the ratio, and the largest
|total cost of the new assignment − the dense optimum| over the rounds.

Run: ``.venv/bin/python bench/match_bench.py`` (``--quick``: fewer rounds; ``--write``: write the
section of BENCHMARKS.md).
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse  # noqa: E402
import time  # noqa: E402
from typing import Sequence  # noqa: E402

import numpy as np  # noqa: E402

PROFILED = ["g4dn.xlarge", "c5n.2xlarge", "r5n.large", "t3.xlarge"]
SLOWER = [1.0, 1.35, 1.8]
TYPES = [PROFILED[k % 4] if k < 4 else f"{PROFILED[k % 4]}-x{k // 4}" for k in range(12)]
SIZES = ((20, 20), (200, 50), (400, 200), (2000, 1000))


class TwelveTypes:
    """The profile latency model for the 4 profiled types; ``<type>-x1``/``-x2`` are that type
    1.35× / 1.8× slower (a stand-in for 12 catalog types with distinct profiles)."""

    def __init__(self) -> None:
        from config.profiles import load_profiles_csv
        from dispatcher.latency_model import LatencyModel

        self.lm = LatencyModel.from_profiles(load_profiles_csv())

    @staticmethod
    def _split(t: str) -> tuple[str, float]:
        base, _, x = t.partition("-x")
        return base, SLOWER[int(x)] if x else 1.0

    def predict_ms(self, model: str, t: str, b: float) -> float:
        base, f = self._split(t)
        return f * self.lm.predict_ms(model, base, b)

    def predict_many(self, model: str, t: str, b: np.ndarray) -> np.ndarray:
        base, f = self._split(t)
        return f * self.lm.predict_many(model, base, b)

    def predict_grid(self, model: str, types: Sequence[str], b: np.ndarray) -> np.ndarray:
        parts = [self._split(t) for t in types]
        return self.lm.predict_grid(model, [p[0] for p in parts], b) * np.array([p[1] for p in parts])


def make_round(m: int, n: int, seed: int):  # type: ignore[no-untyped-def]
    from dispatcher.policy import QueryView, WorkerView
    from scaler.batch_mix import sample_batches

    rng = np.random.default_rng(seed)
    now = 100.0
    batches = sample_batches("deeprecsys", m, rng)
    queue = [QueryView(f"q{i}", "rm2", int(b), now - rng.uniform(0, 0.1), 350.0) for i, b in enumerate(batches)]
    busy = rng.random(n) < 1 / 3
    workers = [WorkerView(f"w{j}", TYPES[j % 12], now + rng.uniform(0, 0.05) if busy[j] else now - 1.0, not busy[j])
               for j in range(n)]
    return queue, workers, now


def measure(name: str, m: int, n: int, rounds: int, reps: int, dense_reps: int) -> dict[str, float]:
    from scipy.optimize import linear_sum_assignment

    from dispatcher.policies import kairos as kairos_mod, make_policy
    from dispatcher.policies.class_match import match_classes

    pred = TwelveTypes()
    pol = make_policy(name, pred, "g4dn.xlarge", max_queue_factor=max(2, -(-m // n)))
    pol.class_matching = True         # measured even where the policy does not use it yet (strict)
    t_new: list[float] = []
    t_dense: list[float] = []
    diff = 0.0
    dense_calls = 0
    for seed in range(rounds):
        queue, workers, now = make_round(m, n, seed)
        pol.match(queue, workers, now)                     # warm the predictor's tables
        for _ in range(reps):
            t0 = time.perf_counter_ns()
            pol.match(queue, workers, now)
            t_new.append((time.perf_counter_ns() - t0) / 1000)
        for _ in range(dense_reps):
            t0 = time.perf_counter_ns()
            pol.match_dense(queue, workers, now)
            t_dense.append((time.perf_counter_ns() - t0) / 1000)
        cost, _ = pol._restrict(pol._terms(queue, workers, now))
        r, c = linear_sum_assignment(cost)
        if m * n > kairos_mod.DENSE_MAX_PAIRS:
            got = match_classes(pol._restrict_pairs(pol.pair_costs(queue, workers, now))[0])
            if got is None:
                dense_calls += 1
            else:
                diff = max(diff, abs(float(cost[got].sum()) - float(cost[r, c].sum())))
    p = np.percentile
    return {"new50": float(p(t_new, 50)), "new99": float(p(t_new, 99)), "dense50": float(p(t_dense, 50)),
            "dense99": float(p(t_dense, 99)), "diff": diff, "fallback": dense_calls, "rounds": rounds}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--write", action="store_true", help="write the section of BENCHMARKS.md")
    ap.add_argument("--policies", default="kairos,kairos-strict")
    a = ap.parse_args()
    from dispatcher.policies import kairos as kairos_mod

    lines = ["| policy | queries × workers | dense p50 ms | dense p99 ms | new p50 ms | new p99 ms | dense / new (p50) | "
             "max \\|cost − dense optimum\\| | rounds left to the dense solve |", "|---|---|---|---|---|---|---|---|---|"]
    for name in a.policies.split(","):
        for m, n in SIZES:
            big = m * n > 100_000
            rounds = 2 if a.quick else (3 if big else 10)
            reps = 3 if big else (20 if a.quick else 100)
            v = measure(name, m, n, rounds, reps, 1 if big else reps)
            lines.append(f"| {name} | {m:,}×{n:,} | {v['dense50'] / 1000:.3f} | {v['dense99'] / 1000:.3f} | "
                         f"{v['new50'] / 1000:.3f} | {v['new99'] / 1000:.3f} | {v['dense50'] / v['new50']:.1f}× | "
                         f"{v['diff']:.1e} | {v['fallback']} of {v['rounds']} |")
            print(lines[-1], flush=True)
    from bench._report import machine, write_section

    text = "\n".join([
        "## match-scale: Kairos matching over classes of queries and groups of workers (issue #29)", "",
        f"Machine: {machine()}. Command: `.venv/bin/python bench/match_bench.py{' --quick' if a.quick else ''}`.", "",
        f"`match` (the class matching above {kairos_mod.DENSE_MAX_PAIRS:,} pairs, dense below) against `match_dense` "
        "(the dense `linear_sum_assignment`, the baseline) on the same rounds in the same process; rm2 on 12 types, "
        "a third of the workers busy. New = dense at 20×20 and 200×50 (the same code).", "", *lines])
    print(text)
    if a.write:
        write_section("match-scale", text)


if __name__ == "__main__":
    main()
