"""The dispatcher against other front ends in front of the same no-op workers (issue #41's goals:
throughput ≥ 1.0× the plain round-robin proxy built the same way and ≥ 0.2× nginx ``grpc_pass``,
nginx's CPU per query beside ours, added p99 over the proxy ≤ 1 ms at half the saturation rate).

One process of N no-op workers (``bench/dispatch/_loopback.py``), one front end process at a time,
one client process; the same measured window and CPU accounting as
``bench/dispatch/query_path_bench.py`` (user + system of each process over the client's window,
``bench.dispatch._proc_cpu``). The front ends (:data:`KINDS`), alternating in one run:

- ``proxy``: the plain round-robin proxy (``bench/dispatch/_rr_proxy.py``): unary Submit in, the
  dispatcher's worker channels out (an InferStream per worker), no queue, several queries per worker;
- ``proxy-1``: the same proxy holding one query per worker at a time (the dispatcher's rule);
- ``dispatcher``: unary Submit clients, worker streams (``unary/stream`` of query_path_bench);
- ``dispatcher+stream``: every query on one SubmitStream (``stream/stream``);
- ``nginx``: nginx ``grpc_pass`` in front of the workers themselves (the client sends each query as
  a unary ``Worker.Infer``), its config the demo's (``daemon.demos.replica_cluster.nginx_config``:
  one worker process, round robin, ``max_fails=0``) with ``keepalive`` connections to the workers
  (:data:`NGINX_KEEPALIVE`; without it nginx opens a connection to a worker per query) and no access
  log. Its CPU is the master's and its worker's.

Saturation: the closed-loop client, 16 queries in flight per 4 workers. Latency: an open-loop client
(seeded Poisson arrivals) at half the lowest saturation throughput of the proxy and the two
dispatcher rows in this run (:data:`HALF_OF`: each of them at most at half its own), the same offered
load for every front end.

Run: ``.venv/bin/python bench/dispatch/front_bench.py`` (``--quick``: one round of 1.5 s;
``--workers 8``: one pool size; ``--baseline CHECKOUT``: the dispatcher rows also with another
checkout's code, alternating in the same run). Prints the rows (BENCHMARKS is written by hand from them).
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from typing import Callable  # noqa: E402

import numpy as np  # noqa: E402

from bench.dispatch import _loopback  # noqa: E402
from bench.dispatch._proc_cpu import machine_cpu_s, process_cpu_s  # noqa: E402
from bench.replicas.replica_tput_bench import _close, _line, _spawn, owned_by  # noqa: E402
from bench._report import machine  # noqa: E402
from daemon.demos.replica_cluster import NGINX, free_port, listening, nginx_config, stop_processes  # noqa: E402

#: front end -> (how it starts, the client's flags)
KINDS: dict[str, tuple[str, list[str]]] = {
    "proxy": ("proxy", []),
    "proxy-1": ("proxy-1", []),
    "dispatcher": ("dispatcher", []),
    "dispatcher+stream": ("dispatcher", ["--stream"]),
    "nginx": ("nginx", ["--infer"]),
}
WORKER_COUNTS = (8, 64)
CONCURRENCY_PER_4 = 16
#: idle connections nginx keeps to the workers (its ``keepalive`` directive in the upstream block):
#: nginx's grpc_pass carries one call per upstream connection, so as many as the calls in flight
NGINX_KEEPALIVE = 1024
#: connections nginx's worker may hold (downstream and upstream; the demo's 256 is below the 256
#: calls in flight at 64 workers plus the client's)
NGINX_CONNECTIONS = 4096
#: the label of a dispatcher row run with ``--baseline``'s code
BEFORE = " (before)"
#: the latency windows' rate is half the lowest saturation throughput of these (each below half its own)
HALF_OF = ("proxy", "dispatcher", "dispatcher+stream")
#: the goals: throughput over the proxy's, over nginx's; added p99 over the proxy's (ms)
GOAL_PROXY, GOAL_NGINX, GOAL_ADDED_P99_MS = 1.0, 0.2, 1.0
FIELDS = ("qps", "p50_ms", "p99_ms", "errors", "front_ms_q", "client_ms_q", "workers_ms_q", "front_cores",
          "other_cores")


@dataclass
class Front:
    """A started front end: its address, its processes' ids (read when asked: nginx's workers),
    and how it stops."""

    target: str
    pids: Callable[[], list[int]]
    stop: Callable[[], None]
    procs: list[subprocess.Popen] = field(default_factory=list)


def _children(pid: int) -> list[int]:
    """The child processes of ``pid`` (proc(5): ``/proc/PID/task/TID/children``)."""
    out: list[int] = []
    for t in Path(f"/proc/{pid}/task").iterdir():
        out += [int(x) for x in (t / "children").read_text().split()]
    return out


def nginx_bench_config(d: Path, port: int, upstream: list[int]) -> str:
    """The demo's nginx config (:func:`daemon.demos.replica_cluster.nginx_config`) with
    :data:`NGINX_KEEPALIVE` idle connections kept to the upstream, :data:`NGINX_CONNECTIONS`, and
    no access log (the dispatcher and the proxy log nothing per query either)."""
    text = nginx_config(d, port, upstream)
    last = text.rindex("max_fails=0;\n") + len("max_fails=0;\n")
    text = text[:last] + f"    keepalive {NGINX_KEEPALIVE};\n" + text[last:]
    start = text.index("  access_log ")
    text = text[:start] + "  access_log off;" + text[text.index("\n", start):]
    if "worker_connections 256;" not in text:
        raise RuntimeError("the demo's nginx config changed: no 'worker_connections 256;' to raise")
    return text.replace("worker_connections 256;", f"worker_connections {NGINX_CONNECTIONS};")


def start_front(kind: str, owned: list[list[str]], workdir: Path, baseline: str = "") -> Front:
    """Start the front end ``kind`` (:data:`KINDS`) in front of ``owned`` ([id, type, address] each);
    a kind labelled :data:`BEFORE`: the dispatcher's code from ``baseline``."""
    how = KINDS[kind.removesuffix(BEFORE)][0]
    if how == "nginx":
        d = Path(tempfile.mkdtemp(prefix="nginx-", dir=workdir))
        port = free_port()
        conf = d / "nginx.conf"
        conf.write_text(nginx_bench_config(d, port, [int(a.rsplit(":", 1)[1]) for _, _, a in owned]))
        p = subprocess.Popen([NGINX, "-p", str(d), "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 10
        while not listening(port):
            if p.poll() is not None or time.monotonic() > deadline:
                stop_processes(p, grace_s=5)
                raise RuntimeError(f"nginx did not listen: {(p.stderr.read() if p.stderr else b'').decode().strip()}")
            time.sleep(0.05)
        return Front(f"127.0.0.1:{port}", lambda: [p.pid, *_children(p.pid)], lambda: stop_processes(p, grace_s=5))
    args = ["--role", "dispatcher", "--start", "bench"] if how == "dispatcher" else ["--role", "proxy"]
    if how == "proxy-1":
        args.append("--one-per-worker")
    if kind.endswith(BEFORE):
        args += ["--code-root", baseline]
    sp = _spawn(*args, "--owned", json.dumps(owned))
    port = json.loads(_line(sp))["port"]

    def stop() -> None:
        _close(sp)
    return Front(f"127.0.0.1:{port}", lambda: [sp.pid], stop, [sp])


def window(front: Front, workers_pid: int, seconds: float, concurrency: int, client_args: list[str]) -> dict[str, float]:
    """One measured window of the client against ``front``: throughput, latency, CPU per query."""
    client = _spawn("--role", "load", "--target", front.target, "--seconds", str(seconds), "--concurrency",
                    str(concurrency), "--marks", *client_args)
    try:
        while _line(client) != _loopback.MARK_START:
            pass
        pids = front.pids()
        f0, w0, m0 = sum(map(process_cpu_s, pids)), process_cpu_s(workers_pid), machine_cpu_s()
        t0 = time.perf_counter()
        while _line(client) != _loopback.MARK_END:
            pass
        f1, w1, m1 = sum(map(process_cpu_s, pids)), process_cpu_s(workers_pid), machine_cpu_s()
        wall = time.perf_counter() - t0
        res = json.loads(_close(client))
    finally:
        if client.poll() is None:
            client.kill()
    q = max(1, res["queries"])
    out = {k: float(res[k]) for k in ("qps", "p50_ms", "p99_ms", "errors")}
    out.update(front_ms_q=1000 * (f1 - f0) / q, client_ms_q=1000 * res["cpu_s"] / q,
               workers_ms_q=1000 * (w1 - w0) / q, front_cores=(f1 - f0) / wall)
    ours = (f1 - f0 + w1 - w0) / wall + res["cpu_s"] / res["seconds"]
    out["other_cores"] = max(0.0, (m1[0] - m0[0]) / wall - ours)
    return out


def one(kind: str, owned: list[list[str]], workdir: Path, workers_pid: int, seconds: float, concurrency: int,
        rate: float = 0.0, baseline: str = "") -> dict[str, float]:
    front = start_front(kind, owned, workdir, baseline)
    try:
        extra = ["--rate", str(rate)] if rate > 0 else []
        return window(front, workers_pid, seconds, concurrency, KINDS[kind.removesuffix(BEFORE)][1] + extra)
    finally:
        front.stop()


def measure(n: int, rounds: int, seconds: float, workdir: Path, baseline: str = ""
            ) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]], float]:
    """Medians at saturation, the rate of the latency windows (half the lowest saturation
    throughput of :data:`HALF_OF`), and the medians at that rate, for ``n`` no-op workers
    (``baseline``: the dispatcher rows also with that checkout's code, labelled :data:`BEFORE`)."""
    wp = _spawn("--role", "workers", "--workers", str(n))
    try:
        addresses = json.loads(_line(wp))
        owned = owned_by([(f"i-{k}", _loopback.TYPES[k % 4], a) for k, a in enumerate(addresses)], ("r0",))["r0"]
        conc = CONCURRENCY_PER_4 * n // 4
        kinds = kinds_run(baseline)
        sat: dict[str, list[dict[str, float]]] = {k: [] for k in kinds}
        for _ in range(rounds):
            for k in kinds:
                sat[k].append(one(k, owned, workdir, wp.pid, seconds, conc, baseline=baseline))
        med_sat = medians(sat)
        rate = min(med_sat[k]["qps"] for k in HALF_OF) / 2
        half: dict[str, list[dict[str, float]]] = {k: [] for k in kinds}
        for _ in range(rounds):
            for k in kinds:
                half[k].append(one(k, owned, workdir, wp.pid, seconds, conc, rate, baseline))
        return med_sat, medians(half), rate
    finally:
        _close(wp)


def kinds_run(baseline: str) -> list[str]:
    """The front ends of a run: :data:`KINDS`, and with ``baseline`` each dispatcher row again
    with that checkout's code, after it."""
    return [x for k in KINDS for x in ((k, k + BEFORE) if baseline and KINDS[k][0] == "dispatcher" else (k,))]


def medians(runs: dict[str, list[dict[str, float]]]) -> dict[str, dict[str, float]]:
    return {k: {f: float(np.median([r[f] for r in v])) for f in FIELDS} for k, v in runs.items()}


def rows(n: int, sat: dict[str, dict[str, float]], half: dict[str, dict[str, float]], rate: float) -> list[str]:
    lines = []
    for k in sat:
        s, h = sat[k], half[k]
        lines.append(f"| {n} | {k} | {s['qps']:.0f} | {s['p99_ms']:.2f} | {s['errors']:.0f} | {s['front_ms_q']:.3f} | "
                     f"{s['front_cores']:.2f} | {s['workers_ms_q']:.3f} | {s['other_cores']:.2f} | {rate:.0f} | "
                     f"{h['p50_ms']:.2f} | {h['p99_ms']:.2f} | {h['front_ms_q']:.3f} |")
    return lines


def verdicts(n: int, sat: dict[str, dict[str, float]], half: dict[str, dict[str, float]]) -> str:
    px, ng = sat["proxy"], sat["nginx"]
    parts = []
    for d in ("dispatcher", "dispatcher+stream"):
        r_px, r_ng = sat[d]["qps"] / px["qps"], sat[d]["qps"] / ng["qps"]
        added = half[d]["p99_ms"] - half["proxy"]["p99_ms"]
        parts.append(f"{d}: throughput {r_px:.2f}× the proxy's (goal ≥ {GOAL_PROXY}: "
                     f"{'met' if r_px >= GOAL_PROXY else 'not met'}), {r_ng:.2f}× nginx's (goal ≥ {GOAL_NGINX}: "
                     f"{'met' if r_ng >= GOAL_NGINX else 'not met'}); CPU per query {sat[d]['front_ms_q']:.3f} ms "
                     f"against nginx's {ng['front_ms_q']:.3f} ({sat[d]['front_ms_q'] / ng['front_ms_q']:.1f}×) and the "
                     f"proxy's {px['front_ms_q']:.3f}; added p99 over the proxy at the half rate "
                     f"{added:+.2f} ms (goal ≤ {GOAL_ADDED_P99_MS:g}: {'met' if added <= GOAL_ADDED_P99_MS else 'not met'})")
    return f"{n} workers: " + "; ".join(parts) + "."


def main() -> None:
    ap = argparse.ArgumentParser(description="the dispatcher against a round-robin proxy and nginx grpc_pass (issue #41)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--quick", action="store_true", help="one round of 1.5 s")
    ap.add_argument("--workers", type=int, default=0, help=f"one pool size (default: {WORKER_COUNTS})")
    ap.add_argument("--baseline", default="", metavar="CHECKOUT",
                    help="the dispatcher rows also with the code of CHECKOUT (e.g. a worktree of main), alternating")
    a = ap.parse_args()
    if a.rounds < 1 or not a.seconds > 0 or a.workers < 0:
        ap.error("--rounds must be at least 1, --seconds above 0, --workers at least 1")
    if a.baseline and not (Path(a.baseline) / "dispatcher" / "server.py").is_file():
        ap.error(f"--baseline {a.baseline}: not a costscale checkout (no dispatcher/server.py)")
    if not Path(NGINX).is_file():
        ap.error(f"nginx not found at {NGINX}")
    rounds, seconds = (1, 1.5) if a.quick else (a.rounds, a.seconds)
    counts = (a.workers,) if a.workers else WORKER_COUNTS
    t0 = time.perf_counter()
    lines = [f"Machine: {machine()}. Command: `.venv/bin/python bench/dispatch/front_bench.py"
             f"{' --quick' if a.quick else ''}`. {rounds} alternating rounds of {seconds:g} s, medians.", "",
             "| workers | front end | throughput q/s | client p99 ms | errors | front CPU ms/query | front cores | "
             "workers ms/query | other processes (cores) | half-rate q/s | p50 ms there | p99 ms there | "
             "front CPU ms/query there |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    notes = []
    with tempfile.TemporaryDirectory(prefix="front-bench-") as tmp:
        for n in counts:
            sat, half, rate = measure(n, rounds, seconds, Path(tmp), a.baseline)
            lines += rows(n, sat, half, rate)
            notes.append(verdicts(n, sat, half))
    for v in notes:
        lines += ["", v]
    print("\n".join(lines + ["", f"({time.perf_counter() - t0:.0f} s in all.)"]))


if __name__ == "__main__":
    main()
