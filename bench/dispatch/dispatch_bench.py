"""Dispatcher benchmark → section "dispatch" of BENCHMARKS.md.

1. Decision latency of the Kairos matching (Kairos §6: "20-query-20-instance matching within
   0.05 ms, hundreds of queries well within 1 ms"): ``KairosPolicy.match`` (matrix build + solve) at
   20×20 and 200×50, against bare ``scipy.optimize.linear_sum_assignment`` on a precomputed matrix of
   the same size (the baseline ratio).
2. End-to-end throughput and client p99 on loopback: the dispatcher vs a plain round-robin grpc.aio
   proxy built the same way (same server options, same persistent worker channels), both in front of
   the same no-op workers (a separate process), driven by the same closed-loop client (another
   process), with 4 and with 64 workers (``WORKER_COUNTS``; the client keeps 4 Submits per worker in
   flight). Alternating runs, medians. The workers, the client and the dispatcher's config are
   ``bench/dispatch/_loopback.py``'s, shared with ``bench/replicas/replica_tput_bench.py``.

Run: ``.venv/bin/python bench/dispatch/dispatch_bench.py`` (``--quick`` for a short run; ``--no-write``: print
the section only).
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import argparse  # noqa: E402
import asyncio  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from bench.dispatch._loopback import TYPES, load_main, make_dispatcher, workers_main  # noqa: E402
from bench.dispatch._rr_proxy import RoundRobinProxy  # noqa: E402

#: the no-op worker counts of the end-to-end rows: the original 4, and a pool whose matching
#: rounds are no longer trivial
WORKER_COUNTS = (4, 64)
KINDS = ("proxy", "proxy-1", "dispatcher")


# ---- 1. decision latency -----------------------------------------------------------------------
def decision_latency(m: int, n: int, reps: int) -> dict[str, float]:
    from scipy.optimize import linear_sum_assignment

    from dispatcher.latency_model import LatencyModel
    from dispatcher.policies.kairos import KairosPolicy
    from dispatcher.policy import QueryView, WorkerView
    from scaler.planner.batch_mix import sample_batches
    from config.profiles import load_profiles_csv

    lm = LatencyModel.from_profiles(load_profiles_csv())
    rng = np.random.default_rng(0)
    pol = KairosPolicy(lm, "g4dn.xlarge", max_queue_factor=max(2, -(-m // n)))  # the full m×n matrix
    now = 100.0
    batches = sample_batches("deeprecsys", m, rng)
    queue = [QueryView(f"q{i}", "rm2", int(b), now - rng.uniform(0, 0.1), 350.0) for i, b in enumerate(batches)]
    workers = [WorkerView(f"w{j}", TYPES[j % 4], now + (rng.uniform(0, 0.05) if j % 3 == 0 else -1), j % 3 != 0)
               for j in range(n)]
    cost, _, _ = pol.cost_matrix(queue, workers, now)
    assert cost.shape == (m, n)
    for _ in range(50):
        pol.match(queue, workers, now)
        linear_sum_assignment(cost)
    t_pol, t_lsa = [], []
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        pol.match(queue, workers, now)
        t1 = time.perf_counter_ns()
        linear_sum_assignment(cost)
        t2 = time.perf_counter_ns()
        t_pol.append((t1 - t0) / 1000)
        t_lsa.append((t2 - t1) / 1000)
    p = np.percentile
    return {"p50_us": float(p(t_pol, 50)), "p99_us": float(p(t_pol, 99)),
            "lsa_p50_us": float(p(t_lsa, 50)), "lsa_p99_us": float(p(t_lsa, 99))}


# ---- 2. end to end (the no-op workers and the client: bench/dispatch/_loopback.py) -----------------------
async def _one_run(kind: str, addresses: list[str], seconds: float, concurrency: int) -> dict[str, float]:
    if kind == "dispatcher":
        d = make_dispatcher("bench")
        port = await d.start("127.0.0.1:0")
        for k, a in enumerate(addresses):
            d.add_worker_direct(f"i-{k}", TYPES[k % 4], a)
    else:
        proxy = RoundRobinProxy(addresses, one_per_worker=(kind == "proxy-1"))
        server, port = await proxy.start()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--role", "load", "--target", f"127.0.0.1:{port}", "--seconds", str(seconds),
        "--concurrency", str(concurrency), stdout=asyncio.subprocess.PIPE)
    out, _ = await proc.communicate()
    if kind == "dispatcher":
        await d.stop(1.0)
    else:
        await server.stop(0)  # type: ignore[attr-defined]
        await proxy.close()
    return json.loads(out.decode().strip().splitlines()[-1])


async def end_to_end(workers: int, rounds: int, seconds: float, concurrency: int) -> dict[str, list[dict[str, float]]]:
    wp = subprocess.Popen([sys.executable, __file__, "--role", "workers", "--workers", str(workers)],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert wp.stdout is not None
        addresses = json.loads(wp.stdout.readline())
        res: dict[str, list[dict[str, float]]] = {k: [] for k in KINDS}
        for _ in range(rounds):
            for kind in KINDS:
                res[kind].append(await _one_run(kind, addresses, seconds, concurrency))
        return res
    finally:
        assert wp.stdin is not None
        wp.stdin.close()
        wp.wait(timeout=10)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--role", default="main", choices=["main", "workers", "load"])
    ap.add_argument("--target", default="")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--concurrency", type=int, default=16, help="concurrent Submits per 4 workers")
    ap.add_argument("--workers", type=int, default=4, help="(role workers) how many no-op workers to serve")
    ap.add_argument("--no-write", action="store_true", help="print the section, leave BENCHMARKS.md as it is")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    if a.role == "workers":
        asyncio.run(workers_main(a.workers))
        return
    if a.role == "load":
        asyncio.run(load_main(a.target, a.seconds, a.concurrency))
        return
    reps = 300 if a.quick else 2000
    rounds, seconds = (1, 1.5) if a.quick else (a.rounds, a.seconds)
    dl = {f"{m}×{n}": decision_latency(m, n, reps) for m, n in ((20, 20), (200, 50))}
    conc = {w: a.concurrency * w // 4 for w in WORKER_COUNTS}
    med: dict[int, dict[str, dict[str, float]]] = {}
    for w in WORKER_COUNTS:
        e2e = asyncio.run(end_to_end(w, rounds, seconds, conc[w]))
        med[w] = {k: {f: float(np.median([r[f] for r in v])) for f in ("qps", "p50_ms", "p99_ms", "errors")}
                  for k, v in e2e.items()}
    from bench._report import machine, write_section

    lines = [
        "## dispatch: Kairos matching decision latency and dispatcher overhead",
        "",
        f"Machine: {machine()}. Command: `.venv/bin/python bench/dispatch/dispatch_bench.py{' --quick' if a.quick else ''}`.",
        "",
        f"Decision latency: `KairosPolicy.match` (L matrix with numpy from the profile latency model, C_j, QoS penalty, "
        f"`linear_sum_assignment`), {reps} calls each, rm2 on 4 instance types, a third of the workers busy. Baseline: bare "
        "`linear_sum_assignment` on a precomputed matrix of the same size. Goals (Kairos §6): 20×20 < 50 µs, 200×50 < 1 ms.",
        "",
        "| queries × workers | match p50 µs | match p99 µs | bare LSA p50 µs | bare LSA p99 µs | match / bare (p50) |",
        "|---|---|---|---|---|---|",
    ]
    for k, v in dl.items():
        lines.append(f"| {k} | {v['p50_us']:.1f} | {v['p99_us']:.1f} | {v['lsa_p50_us']:.1f} | {v['lsa_p99_us']:.1f} | "
                     f"{v['p50_us'] / v['lsa_p50_us']:.1f}× |")
    lines += [
        "",
        f"End to end on loopback: {' and '.join(map(str, WORKER_COUNTS))} no-op workers (one process), closed-loop client "
        f"with {a.concurrency} concurrent Submits per 4 workers (another process), {rounds} alternating rounds of "
        f"{seconds:g} s each, medians. Baseline: a plain "
        "round-robin grpc.aio proxy (no queue, no policy, several queries per worker at once) with the same server "
        "options and worker channels; `proxy-1` is the same proxy holding one query per worker at a time (FIFO over idle "
        "workers), the constraint the dispatcher has by design (Kairos §6: one query per instance at a time).",
        "",
        "| workers | front end | concurrent Submits | throughput q/s | client p50 ms | client p99 ms | errors |",
        "|---|---|---|---|---|---|---|",
    ]
    for w in WORKER_COUNTS:
        for k in KINDS:
            v = med[w][k]
            lines.append(f"| {w} | {k} | {conc[w]} | {v['qps']:.0f} | {v['p50_ms']:.2f} | {v['p99_ms']:.2f} | "
                         f"{v['errors']:.0f} |")
    for w in WORKER_COUNTS:
        d, px, p1 = med[w]["dispatcher"], med[w]["proxy"], med[w]["proxy-1"]
        lines += ["", f"{w} workers: dispatcher / proxy throughput **{d['qps'] / px['qps']:.2f}×** (goal ≥ 0.8×), added "
                  f"p99 **{d['p99_ms'] - px['p99_ms']:+.2f} ms**; dispatcher / proxy-1 (same one-query-per-worker rule): "
                  f"**{d['qps'] / p1['qps']:.2f}×**, added p99 **{d['p99_ms'] - p1['p99_ms']:+.2f} ms**."]
    if not a.no_write:
        write_section("dispatch", "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
