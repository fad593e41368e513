"""Matching that scales with the types, not the workers (issue #29) → section "match-scale".

``make_policy(name, ...).match`` as shipped (the dense solve up to the policy's threshold, above it
the large-round path: ``kairos``'s class matching, dispatcher/policies/class_match.py;
``kairos-strict``'s on-time flow, dispatcher/policies/on_time_flow.py), the large-round path forced
at every size, and ``match_dense`` (the dense ``linear_sum_assignment`` on the m × n matrix, the
baseline), on the same rounds, interleaved, in the same process: rm2 queries (DeepRecSys batch mix,
waited 0-100 ms, SLO 350 ms) on 12 instance types (the 4 profiled types and copies of them 1.35×
and 1.8× slower), a third of the workers busy for 0-50 ms. Per size: p50/p99 per decision of
each, the ratio, and the largest |total cost of the large-round path's assignment − the dense
optimum| over the rounds (late pairs, never listed by the flow, at the mask's M each).

``--crossover``: the forced path against the dense solve on saturated rounds (2n waiting × n
workers, the routing round's view) of growing n and on wide ones (m waiting × 1,000 workers), and
the largest size, in pairs, at which the dense
solve was still faster at p50, per shape: what ``STRICT_DENSE_MAX_PAIRS_SATURATED`` and
``STRICT_DENSE_MAX_PAIRS_WIDE`` are set from (and ``DENSE_MAX_PAIRS`` could be).

Run: ``.venv/bin/python bench/dispatch/match_bench.py`` (``--quick``: fewer rounds; ``--policies``;
``--crossover``; ``--write``: write the section of BENCHMARKS.md).
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import argparse  # noqa: E402
import time  # noqa: E402
from typing import Callable, Sequence  # noqa: E402

import numpy as np  # noqa: E402

PROFILED = ["g4dn.xlarge", "c5n.2xlarge", "r5n.large", "t3.xlarge"]
SLOWER = [1.0, 1.35, 1.8]
TYPES = [PROFILED[k % 4] if k < 4 else f"{PROFILED[k % 4]}-x{k // 4}" for k in range(12)]
SIZES = ((20, 20), (200, 50), (400, 200), (2000, 1000))
#: saturated rounds (2n waiting × n workers) for ``--crossover``
CROSSOVER_N = (50, 100, 125, 150, 175, 200, 250, 300)
#: wide rounds (fewer waiting than workers: m × WIDE_N) for ``--crossover``
WIDE_N = 1000
WIDE_M = (50, 100, 150, 200, 300)


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
    from scaler.planner.batch_mix import sample_batches

    rng = np.random.default_rng(seed)
    now = 100.0
    batches = sample_batches("deeprecsys", m, rng)
    queue = [QueryView(f"q{i}", "rm2", int(b), now - rng.uniform(0, 0.1), 350.0) for i, b in enumerate(batches)]
    busy = rng.random(n) < 1 / 3
    workers = [WorkerView(f"w{j}", TYPES[j % 12], now + rng.uniform(0, 0.05) if busy[j] else now - 1.0, not busy[j])
               for j in range(n)]
    return queue, workers, now


def _timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter_ns()
    fn()
    return (time.perf_counter_ns() - t0) / 1000


def measure(name: str, m: int, n: int, rounds: int, reps: int, dense_reps: int,
            shipped: bool = True) -> dict[str, float]:
    """µs per decision of ``match`` as shipped, the forced large-round path and ``match_dense``,
    interleaved per round; the largest |cost − dense optimum| of the large-round path."""
    from scipy.optimize import linear_sum_assignment

    from dispatcher.policies import make_policy
    from tests.match_helpers import large_rounds     # the thresholds at 0: the large-round path at every size

    pred = TwelveTypes()
    pol = make_policy(name, pred, "g4dn.xlarge", max_queue_factor=max(2, -(-m // n)))
    t: dict[str, list[float]] = {"new": [], "forced": [], "dense": []}
    diff = 0.0
    dense_calls = 0
    for seed in range(rounds):
        queue, workers, now = make_round(m, n, seed)
        pol.match_dense(queue, workers, now)                # warm the predictor's tables
        for _ in range(max(reps, dense_reps)):
            if len(t["new"]) < (seed + 1) * reps and shipped:
                t["new"].append(_timed(lambda: pol.match(queue, workers, now)))
            if len(t["forced"]) < (seed + 1) * reps:
                with large_rounds():
                    t["forced"].append(_timed(lambda: pol.match(queue, workers, now)))
            if len(t["dense"]) < (seed + 1) * dense_reps:
                t["dense"].append(_timed(lambda: pol.match_dense(queue, workers, now)))
        cost, _ = pol._restrict(pol._terms(queue, workers, now))
        r, c = linear_sum_assignment(cost)
        pc, on_time_only = pol._restrict_pairs(pol.pair_costs(queue, workers, now))
        got = pol._large_round(pc, on_time_only)
        if got is None:
            dense_calls += 1
        else:
            late = float(pc.late.flat[0]) * (min(m, n) - len(got[0])) if on_time_only else 0.0
            diff = max(diff, abs(float(cost[got].sum()) + late - float(cost[r, c].sum())))
    p = np.percentile
    out = {f"{k}{q}": float(p(v, q)) for k, v in t.items() if v for q in (50, 99)}
    return {**out, "diff": diff, "fallback": dense_calls, "rounds": rounds}


def crossover(names: Sequence[str], quick: bool) -> list[str]:
    """The forced path against dense on saturated (2n × n) and wide (m × 1,000) rounds; per policy
    and shape the largest round, in pairs, at which the dense solve was still faster at p50."""
    lines = ["| policy | shape | queries × workers | pairs | dense p50 ms | large-round path p50 ms | dense / path |",
             "|---|---|---|---|---|---|---|"]
    series = {"saturated": [(2 * n, n) for n in CROSSOVER_N], "wide": [(m, WIDE_N) for m in WIDE_M]}
    for name in names:
        for shape, sizes in series.items():
            dense_won = [0]
            for m, n in sizes:
                reps = 3 if quick else 9
                v = measure(name, m, n, 2 if quick else 4, reps, reps, shipped=False)
                if v["dense50"] <= v["forced50"]:
                    dense_won.append(m * n)
                lines.append(f"| {name} | {shape} | {m:,}×{n:,} | {m * n:,} | {v['dense50'] / 1000:.3f} | "
                             f"{v['forced50'] / 1000:.3f} | {v['dense50'] / v['forced50']:.2f}× |")
                print(lines[-1], flush=True)
            lines.append(f"| {name} | {shape} | dense faster up to | {max(dense_won):,} | | | |")
            print(lines[-1], flush=True)
    return lines


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--write", action="store_true", help="write the section of BENCHMARKS.md")
    ap.add_argument("--policies", default="kairos,kairos-strict")
    ap.add_argument("--crossover", action="store_true", help="measure where the large-round path overtakes dense")
    a = ap.parse_args()
    from dispatcher.policies import kairos as kairos_mod, kairos_strict as strict_mod

    names = a.policies.split(",")
    lines = ["| policy | queries × workers | dense p50 ms | dense p99 ms | match p50 ms | match p99 ms | dense / match (p50) | "
             "large-round path p50 ms | p99 ms | dense / path (p50) | max \\|cost − dense optimum\\| | "
             "rounds left to the dense solve |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name in names:
        for m, n in SIZES:
            big = m * n > 100_000
            rounds = 2 if a.quick else (3 if big else 10)
            reps = 3 if big else (20 if a.quick else 100)
            v = measure(name, m, n, rounds, reps, 1 if big else reps)
            lines.append(f"| {name} | {m:,}×{n:,} | {v['dense50'] / 1000:.3f} | {v['dense99'] / 1000:.3f} | "
                         f"{v['new50'] / 1000:.3f} | {v['new99'] / 1000:.3f} | {v['dense50'] / v['new50']:.1f}× | "
                         f"{v['forced50'] / 1000:.3f} | {v['forced99'] / 1000:.3f} | {v['dense50'] / v['forced50']:.2f}× | "
                         f"{v['diff']:.1e} | {v['fallback']} of {v['rounds']} |")
            print(lines[-1], flush=True)
    cross = crossover(names, a.quick) if a.crossover else []
    from bench._report import machine, write_section

    cmd = "bench/dispatch/match_bench.py" + (" --quick" if a.quick else "") + (" --crossover" if a.crossover else "")
    text = "\n".join([
        "## match-scale: large Kairos rounds without the dense matrix (issue #29)", "",
        f"Machine: {machine()}. Command: `.venv/bin/python {cmd}`.", "",
        f"`match` as shipped (dense up to {kairos_mod.DENSE_MAX_PAIRS:,} pairs for kairos; for kairos-strict up to "
        f"{strict_mod.STRICT_DENSE_MAX_PAIRS_SATURATED:,} pairs with at least as many waiting as workers, "
        f"{strict_mod.STRICT_DENSE_MAX_PAIRS_WIDE:,} with fewer; above: kairos's class matching, "
        "kairos-strict's on-time flow), the large-round path forced at every size, and `match_dense` (the dense "
        "`linear_sum_assignment`, the baseline), interleaved on the same rounds in the same process; rm2 on 12 types, "
        "a third of the workers busy.", "", *lines, *([""] + cross if cross else [])])
    print(text)
    if a.write:
        write_section("match-scale", text)


if __name__ == "__main__":
    main()
