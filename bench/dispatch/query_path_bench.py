"""The dispatcher's CPU per query on each query path → section "query-path" of BENCHMARKS.md
(issue #41, goal: ≤ 0.3 ms with the streaming submit, ≤ 0.6 ms with unary clients, at 8 and 64
no-op workers).

One dispatcher process (built as ``bench/dispatch/dispatch_bench.py`` builds its one) in front of N
no-op workers (one process), one closed-loop client process (16 queries in flight per 4 workers),
the parts of ``bench/replicas/replica_tput_bench.py`` (``bench/dispatch/_loopback.py``), the same
measured window and CPU accounting (user + system of each process, ``bench.dispatch._proc_cpu``).
The paths, alternating in one run, medians over ``--rounds``:

- ``unary/unary``: unary Submit from the client, one unary Infer per worker call (the path before
  issue #41: ``dispatcher.worker_streams: false``);
- ``unary/stream``: unary Submit, worker calls on one InferStream per worker;
- ``stream/unary``: every query on one SubmitStream, unary Infer per worker call;
- ``stream/stream``: both streams.

Run: ``.venv/bin/python bench/dispatch/query_path_bench.py`` (``--quick``: one round of 1.5 s;
``--no-write``: print the section, leave BENCHMARKS.md as it is; ``--baseline CHECKOUT``: each path
also with the dispatcher's code from another checkout, alternating in the same run, the before/after
rows printed).
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import time  # noqa: E402
from typing import Callable  # noqa: E402

import numpy as np  # noqa: E402

from bench.dispatch import _loopback  # noqa: E402
from bench.dispatch._dispatch_capacity import TARGET_QPS, hosts_needed  # noqa: E402
from bench.replicas.replica_tput_bench import _close, _line, _spawn, one_run, owned_by  # noqa: E402
from bench._report import machine, write_section  # noqa: E402

WORKER_COUNTS = (8, 64)
#: path -> (the dispatcher's flags, the client's flags): client side / worker side
PATHS = {
    "unary/unary": (["--unary-workers"], []),
    "unary/stream": ([], []),
    "stream/unary": (["--unary-workers"], ["--stream"]),
    "stream/stream": ([], ["--stream"]),
}
#: issue #41's goals, dispatcher CPU ms per query: with the streaming submit, with unary clients
GOAL_STREAM_MS, GOAL_UNARY_MS = 0.3, 0.6
CONCURRENCY_PER_4 = 16
FIELDS = ("qps", "p50_ms", "p99_ms", "errors", "disp_ms_q", "client_ms_q", "workers_ms_q", "disp_cores",
          "other_cores")


#: the label of a path measured with ``--baseline``'s code (its dispatcher from that checkout)
BEFORE = " (before)"


def measure(n: int, rounds: int, seconds: float, concurrency: int, paths: list[str] | None = None,
            baseline: str = "") -> dict[str, list[dict[str, float]]]:
    """``rounds`` alternating runs of each path (``paths``: those of :data:`PATHS` to run, default
    all); ``baseline``: each also with the dispatcher's code from that checkout (labelled
    :data:`BEFORE`), alternating with ours in the same run."""
    wp = _spawn("--role", "workers", "--workers", str(n))
    try:
        addresses = json.loads(_line(wp))
        workers = [(f"i-{k}", _loopback.TYPES[k % 4], a) for k, a in enumerate(addresses)]
        owned = owned_by(workers, ("r0",))
        runs = [(p, [*PATHS[p][0]], PATHS[p][1]) for p in (paths or PATHS)]
        if baseline:
            runs = [r for p, d, c in runs for r in ((p, d, c), (p + BEFORE, [*d, "--code-root", baseline], c))]
        res: dict[str, list[dict[str, float]]] = {label: [] for label, _, _ in runs}
        for _ in range(rounds):
            for label, dargs, cargs in runs:
                res[label].append(_retried(lambda: one_run(owned, wp.pid, seconds, concurrency, "bench", dargs, cargs),
                                           f"{n} workers, {label}"))
        return res
    finally:
        _close(wp)


def _retried(window: Callable[[], dict[str, float]], what: str) -> dict[str, float]:
    """``window()``, once more when its client ended without its figures (seen on the shared
    machine: the client process gone, nothing on its stderr)."""
    try:
        return window()
    except json.JSONDecodeError:
        print(f"query_path_bench: {what}: the client gave no figures; measuring the window again", file=sys.stderr)
        return window()


def before_after(med: dict[int, dict[str, dict[str, float]]]) -> list[str]:
    """The rows measured with ``--baseline``: our code against the baseline's, per path."""
    lines = ["| workers | path | q/s before | q/s after | dispatcher CPU ms/query before | after | after / before |",
             "|---|---|---|---|---|---|---|"]
    for n, m in med.items():
        for p in PATHS:
            if p + BEFORE in m:
                b, a = m[p + BEFORE], m[p]
                lines.append(f"| {n} | {p} | {b['qps']:.0f} | {a['qps']:.0f} | {b['disp_ms_q']:.3f} | "
                             f"{a['disp_ms_q']:.3f} | {a['disp_ms_q'] / b['disp_ms_q']:.2f}× |")
    return lines


def section(med: dict[int, dict[str, dict[str, float]]], rounds: int, seconds: float, command: str) -> list[str]:
    cores = os.cpu_count() or 1
    lines = [
        "## query-path: the dispatcher's CPU per query, unary and streamed (issue #41)",
        "",
        f"Machine: {machine()}. Command: `{command}`.",
        "",
        f"One dispatcher process in front of {' and '.join(map(str, WORKER_COUNTS))} no-op workers (one process), one "
        f"closed-loop client process ({CONCURRENCY_PER_4} queries in flight per 4 workers), the parts and CPU accounting "
        "of `bench/replicas/replica_tput_bench.py`. Path = client side / worker side: `unary/unary` is the path before "
        "issue #41 (unary Submit, `dispatcher.worker_streams: false`); `stream` on the client side: every query on one "
        "SubmitStream (`dispatcher.api.client.InferenceClient.stream`); on the worker side: one InferStream per worker. "
        f"{rounds} alternating rounds of {seconds:g} s, medians.",
        "",
        "| workers | path | throughput q/s | client p50 ms | client p99 ms | errors | dispatcher CPU ms/query | "
        "client ms/query | workers ms/query | dispatcher cores | other processes (cores) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for n in WORKER_COUNTS:
        for p in PATHS:
            v = med[n][p]
            lines.append(f"| {n} | {p} | {v['qps']:.0f} | {v['p50_ms']:.2f} | {v['p99_ms']:.2f} | {v['errors']:.0f} | "
                         f"{v['disp_ms_q']:.3f} | {v['client_ms_q']:.3f} | {v['workers_ms_q']:.3f} | "
                         f"{v['disp_cores']:.2f} | {v['other_cores']:.2f} |")
    for n in WORKER_COUNTS:
        m = med[n]
        base = m["unary/unary"]["disp_ms_q"]
        s, u = m["stream/stream"]["disp_ms_q"], m["unary/stream"]["disp_ms_q"]
        lines += ["", f"{n} workers: dispatcher CPU per query {base:.3f} ms before (unary/unary); unary clients "
                  f"{u:.3f} ms ({u / base:.2f}×; goal ≤ {GOAL_UNARY_MS} ms: {'met' if u <= GOAL_UNARY_MS else 'not met'}), "
                  f"SubmitStream clients {s:.3f} ms ({s / base:.2f}×; goal ≤ {GOAL_STREAM_MS} ms: "
                  f"{'met' if s <= GOAL_STREAM_MS else 'not met'}); throughput stream/stream over unary/unary "
                  f"{m['stream/stream']['qps'] / m['unary/unary']['qps']:.2f}×."]
    lines += ["", f"Dispatcher hosts of {cores} cores for {TARGET_QPS:,.0f} q/s at this CPU per query "
              "(`bench/dispatch/_dispatch_capacity.py`: one dispatcher process per core, nothing else on the host; a "
              "ceiling):", "", "| workers | path | per-host q/s | hosts |", "|---|---|---|---|"]
    for n in WORKER_COUNTS:
        for p in PATHS:
            e = hosts_needed(TARGET_QPS, med[n][p]["disp_ms_q"] / 1000, cores)
            lines.append(f"| {n} | {p} | {e.per_host_qps:,.0f} | {e.hosts} |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description="the dispatcher's CPU per query on each query path (issue #41)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--quick", action="store_true", help="one round of 1.5 s")
    ap.add_argument("--no-write", action="store_true", help="print the section, leave BENCHMARKS.md as it is")
    ap.add_argument("--baseline", default="", metavar="CHECKOUT",
                    help="also run each path with the dispatcher's code from CHECKOUT (e.g. a worktree of main), "
                         "alternating with ours; prints the before/after rows, writes nothing")
    ap.add_argument("--workers", type=int, default=0, help="with --baseline: one pool size (default: 8 and 64)")
    ap.add_argument("--paths", default="", help=f"comma-separated paths to run with --baseline (of {', '.join(PATHS)})")
    a = ap.parse_args()
    if a.rounds < 1 or not a.seconds > 0:
        ap.error("--rounds must be at least 1 and --seconds above 0")
    paths = [p for p in a.paths.split(",") if p] or None
    if (paths or a.workers) and not a.baseline:
        ap.error("--paths and --workers go with --baseline (the section has every path and pool size)")
    if a.workers < 0:
        ap.error("--workers must be at least 1")
    if paths and any(p not in PATHS for p in paths):
        ap.error(f"--paths: each one of {', '.join(PATHS)}")
    if a.baseline and not (Path(a.baseline) / "dispatcher" / "server.py").is_file():
        ap.error(f"--baseline {a.baseline}: not a costscale checkout (no dispatcher/server.py)")
    rounds, seconds = (1, 1.5) if a.quick else (a.rounds, a.seconds)
    t0 = time.perf_counter()
    med = {n: {p: {f: float(np.median([r[f] for r in runs])) for f in FIELDS}
               for p, runs in measure(n, rounds, seconds, CONCURRENCY_PER_4 * n // 4, paths, a.baseline).items()}
           for n in ((a.workers,) if a.workers else WORKER_COUNTS)}
    if a.baseline:
        print("\n".join(before_after(med) + ["", f"({time.perf_counter() - t0:.0f} s in all.)"]))
        return
    command = ".venv/bin/python bench/dispatch/query_path_bench.py" + (" --quick" if a.quick else "")
    lines = section(med, rounds, seconds, command) + ["", f"({time.perf_counter() - t0:.0f} s in all.)"]
    if not a.no_write:
        write_section("query-path", "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
