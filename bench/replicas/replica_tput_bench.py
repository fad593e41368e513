"""Two dispatcher processes against one → section "replicas-throughput" of BENCHMARKS.md (issue
#27, goal "Throughput": two dispatcher processes serve >= 1.6x one, on the same no-op workers as
``bench/dispatch/dispatch_bench.py``, in the same run).

The per-query path scales out by partitioning (DESIGN "Beyond one control host"): each dispatcher
replica owns a disjoint set of workers and matches (Kairos §5.1) only those. Measured, alternating
in one run, medians over ``--rounds``:

- ``1-proc``: one dispatcher process owning all N no-op workers;
- ``2-proc``: two dispatcher processes, each owning the workers ``scaler.replicas.owner_assignment.assign``
  gives it (each type split evenly; what replica worker ownership holds in steady state: every
  worker matched by exactly one replica).

The same parts as ``bench/dispatch/dispatch_bench.py`` (``bench/dispatch/_loopback.py``): N no-op workers in one
process, one closed-loop client process (4 Submits in flight per worker), the same dispatcher
config. The client reaches the dispatchers through gRPC's own ``round_robin`` over an
``ipv4:127.0.0.1:P1,127.0.0.1:P2`` target (one address for ``1-proc``), no balancer of ours. Each
dispatcher runs in its own process, built as dispatch_bench builds it (``--start bench``) or as
``costscale run`` does (``--start run``: the config's variant registry and models folder,
``daemon.app.Daemon.start``).

Reported per row: throughput, client p50/p99, the 2-proc / 1-proc ratio, and where the cores went
in the measured window: CPU seconds (``bench.dispatch._proc_cpu``: user + system) of the dispatcher
processes, the workers' process and the client, per query and in cores (CPU s / wall s); what that
CPU per query allows on this many quiet cores (``bench.dispatch._dispatch_capacity.process_ceiling``: the
upper bound on the ratio while the client and the workers share the cores). Then the
extrapolation (``bench.dispatch._dispatch_capacity.hosts_needed``): dispatcher hosts for :data:`TARGET_QPS`
from the dispatchers' CPU per query.

Run: ``.venv/bin/python bench/replicas/replica_tput_bench.py`` (``--quick``: under a minute; ``--no-write``:
print the section, leave BENCHMARKS.md as it is; ``--start run``).
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from typing import Sequence  # noqa: E402

import numpy as np  # noqa: E402

from bench.dispatch import _loopback  # noqa: E402
from bench.dispatch._dispatch_capacity import TARGET_QPS, hosts_needed, process_ceiling  # noqa: E402
from bench.dispatch._proc_cpu import machine_cpu_s, process_cpu_s  # noqa: E402
from bench._report import machine, write_section  # noqa: E402
from scaler.replicas.owner_assignment import assign  # noqa: E402

#: the no-op worker counts (the issue's 8 and dispatch_bench's 64)
WORKER_COUNTS = (8, 64)
#: the configurations and their replicas
REPLICAS = {"1-proc": ("r0",), "2-proc": ("r0", "r1")}
KINDS = tuple(REPLICAS)
#: issue #27's goal: 2-proc throughput / 1-proc
GOAL = 1.6
#: Submits the client keeps in flight per 4 workers (dispatch_bench's default)
CONCURRENCY_PER_4 = 16
#: other processes' median cores in a window above which the section says the machine was shared
#: (more dispatcher processes then also win a larger share of a contended machine)
SHARED_MACHINE_CORES = 0.2
#: seconds a part has to start (print its first line) or to stop
PART_TIMEOUT_S = 60.0
#: the measured fields, medians over the rounds
FIELDS = ("qps", "p50_ms", "p99_ms", "errors", "disp_ms_q", "client_ms_q", "workers_ms_q",
          "disp_cores", "client_cores", "workers_cores", "total_cores", "other_cores", "steal_cores",
          "first_share")

Owned = list[list[str]]        # [id, type, address] of each worker a dispatcher owns


def _spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, _loopback.__file__, *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)


def _line(p: subprocess.Popen[str]) -> str:
    assert p.stdout is not None
    line = p.stdout.readline()
    if not line:
        raise RuntimeError(f"bench part {p.args!r} ended early (exit {p.wait(PART_TIMEOUT_S)})")
    return line.strip()


def _close(p: subprocess.Popen[str]) -> str:
    """Close the part's stdin (it stops: ``communicate`` closes it), its last line."""
    out, _ = p.communicate(timeout=PART_TIMEOUT_S)
    return out.strip().splitlines()[-1] if out.strip() else ""


def owned_by(workers: Sequence[tuple[str, str, str]], replicas: Sequence[str]) -> dict[str, Owned]:
    """Each replica's workers ((id, type, address)), by ``scaler.replicas.owner_assignment.assign``."""
    owner = assign([(w, t) for w, t, _ in workers], replicas, {})
    return {r: [[w, t, a] for w, t, a in workers if owner[w] == r] for r in replicas}


def one_run(owned: dict[str, Owned], workers_pid: int, seconds: float, concurrency: int,
            start: str, dispatcher_args: Sequence[str] = (), client_args: Sequence[str] = ()) -> dict[str, float]:
    """One measured window of the client against one dispatcher process per entry of ``owned``
    (``dispatcher_args``, ``client_args``: more of ``bench/dispatch/_loopback.py``'s flags for each)."""
    ds = [_spawn("--role", "dispatcher", "--start", start, "--owned", json.dumps(o), *dispatcher_args)
          for o in owned.values()]
    client = None
    try:
        ports = [json.loads(_line(d))["port"] for d in ds]
        target = "ipv4:" + ",".join(f"127.0.0.1:{p}" for p in ports)
        client = _spawn("--role", "load", "--target", target, "--seconds", str(seconds), "--concurrency",
                        str(concurrency), "--round-robin", "--marks", *client_args)
        pids = [d.pid for d in ds]
        while _line(client) != _loopback.MARK_START:
            pass
        d0, w0, m0 = sum(map(process_cpu_s, pids)), process_cpu_s(workers_pid), machine_cpu_s()
        t0 = time.perf_counter()
        while _line(client) != _loopback.MARK_END:
            pass
        d1, w1, m1 = sum(map(process_cpu_s, pids)), process_cpu_s(workers_pid), machine_cpu_s()
        t1 = time.perf_counter()
        res = json.loads(_close(client))
    finally:
        served = [json.loads(_close(d) or "{}").get("served", 0) for d in ds]
        if client is not None and client.poll() is None:
            client.kill()
    wall, q = t1 - t0, max(1, res["queries"])
    out = {k: float(res[k]) for k in ("qps", "p50_ms", "p99_ms", "errors")}
    out.update(disp_ms_q=1000 * (d1 - d0) / q, client_ms_q=1000 * res["cpu_s"] / q,
               workers_ms_q=1000 * (w1 - w0) / q, disp_cores=(d1 - d0) / wall,
               client_cores=res["cpu_s"] / res["seconds"], workers_cores=(w1 - w0) / wall,
               first_share=served[0] / max(1, sum(served)))
    out["total_cores"] = out["disp_cores"] + out["client_cores"] + out["workers_cores"]
    out["other_cores"] = max(0.0, (m1[0] - m0[0]) / wall - out["total_cores"])   # other processes (and the bench's own)
    out["steal_cores"] = (m1[1] - m0[1]) / wall
    return out


def measure(n: int, rounds: int, seconds: float, concurrency: int, start: str) -> dict[str, list[dict[str, float]]]:
    """``rounds`` alternating runs of every configuration on one set of ``n`` no-op workers."""
    wp = _spawn("--role", "workers", "--workers", str(n))
    try:
        addresses = json.loads(_line(wp))
        workers = [(f"i-{k}", _loopback.TYPES[k % 4], a) for k, a in enumerate(addresses)]
        owned = {kind: owned_by(workers, reps) for kind, reps in REPLICAS.items()}
        res: dict[str, list[dict[str, float]]] = {k: [] for k in KINDS}
        for _ in range(rounds):
            for kind in KINDS:
                res[kind].append(one_run(owned[kind], wp.pid, seconds, concurrency, start))
        return res
    finally:
        _close(wp)


def medians(runs: list[dict[str, float]]) -> dict[str, float]:
    return {f: float(np.median([r[f] for r in runs])) for f in FIELDS}


def verdict(n: int, one: dict[str, float], two: dict[str, float]) -> str:
    """The ratio against the goal (not judged where it may come from other jobs' cores), where the
    cores went, and the most this CPU per query allows on quiet cores."""
    ratio = two["qps"] / one["qps"]
    cores = os.cpu_count() or 1
    # the most each configuration can serve here, from its own CPU per query (bench.dispatch._dispatch_capacity)
    rest = {k: v["client_ms_q"] + v["workers_ms_q"] for k, v in (("1-proc", one), ("2-proc", two))}
    top1 = process_ceiling(one["disp_ms_q"] / 1000, rest["1-proc"] / 1000, cores, 1)
    top2 = process_ceiling(two["disp_ms_q"] / 1000, rest["2-proc"] / 1000, cores, 2)
    shared = max(one["other_cores"], two["other_cores"]) > SHARED_MACHINE_CORES
    if ratio < GOAL:
        judged = "not met"
    elif not shared:
        judged = "met"
    else:   # the second process may have won its cores from other jobs, not from scaling
        judged = "not judged: other processes shared the machine" + (
            f", and {ratio:.2f}× is above the {top2 / top1:.2f}× this CPU per query allows on quiet cores"
            if ratio > top2 / top1 else "")
    return (f"{n} workers: 2-proc / 1-proc throughput **{ratio:.2f}×** (goal ≥ {GOAL}×: {judged}); added p99 "
            f"{two['p99_ms'] - one['p99_ms']:+.2f} ms. The bench's processes used {one['total_cores']:.2f} (1-proc) "
            f"and {two['total_cores']:.2f} (2-proc) of {cores} cores "
            f"(the client alone {one['client_cores']:.2f} and {two['client_cores']:.2f}, the workers "
            f"{one['workers_cores']:.2f} and {two['workers_cores']:.2f}), other processes {one['other_cores']:.2f} and "
            f"{two['other_cores']:.2f}, steal {one['steal_cores']:.2f} and {two['steal_cores']:.2f}. The most this "
            f"CPU per query allows on {cores} quiet cores (a dispatcher process on one core, every process "
            "together on all of them: `bench/dispatch/_dispatch_capacity.py`, an upper bound on the ratio): 1-proc "
            f"{top1:.0f} q/s (dispatcher {one['disp_ms_q']:.3f} ms, client and workers {rest['1-proc']:.3f} ms a "
            f"query), 2-proc {top2:.0f} q/s ({two['disp_ms_q']:.3f} and {rest['2-proc']:.3f} ms): at most "
            f"**{top2 / top1:.2f}×**; {GOAL}× needs the client and the workers at no more than a quarter of the "
            "dispatcher's CPU a query "
            f"({two['disp_ms_q'] / 4:.3f} ms here, against {rest['2-proc']:.3f}).")


def section(med: dict[int, dict[str, dict[str, float]]], conc: dict[int, int], rounds: int, seconds: float,
            start: str, cores: int, command: str) -> list[str]:
    lines = [
        "## replicas-throughput: two dispatcher processes against one (issue #27, goal \"Throughput\")",
        "",
        f"Machine: {machine()}. Command: `{command}`.",
        "",
        f"{' and '.join(map(str, WORKER_COUNTS))} no-op workers (one process), one closed-loop client process "
        f"({CONCURRENCY_PER_4} Submits in flight per 4 workers), the parts of `bench/dispatch/dispatch_bench.py` "
        "(`bench/dispatch/_loopback.py`). `1-proc`: one dispatcher process owning every worker; `2-proc`: two dispatcher "
        "processes, each owning the half `scaler.replicas.owner_assignment.assign` gives it (each type split evenly), the "
        "client spreading its Submits over both with gRPC's own `round_robin` (`ipv4:127.0.0.1:P1,127.0.0.1:P2`, "
        "`loadBalancingConfig` round_robin; one address for 1-proc). Dispatchers built "
        + ("as dispatch_bench builds its one (`--start bench`)" if start == "bench" else
           "as `costscale run` builds them (`--start run`: variant registry, models folder)")
        + f". {rounds} alternating rounds of {seconds:g} s each (after {_loopback.WARM_UP_S:g} s of warm-up), "
        "medians. CPU: user + system time of each process over the measured window (/proc/PID/stat, or psutil), per "
        f"query served and in cores (CPU s / wall s; the machine has {os.cpu_count()}), below. *first share*: the "
        "first dispatcher's part of the queries the two served (round_robin's split).",
        "",
        "| workers | config | Submits in flight | throughput q/s | client p50 ms | client p99 ms | errors | "
        "first share |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for n in WORKER_COUNTS:
        for k in KINDS:
            v = med[n][k]
            share = f"{100 * v['first_share']:.0f} %" if k == "2-proc" else "-"
            lines.append(f"| {n} | {k} | {conc[n]} | {v['qps']:.0f} | {v['p50_ms']:.2f} | {v['p99_ms']:.2f} | "
                         f"{v['errors']:.0f} | {share} |")
    lines += [
        "",
        "Where the cores went in the measured window: CPU ms per query served, and cores (CPU s / wall s) of the "
        "dispatcher processes (both, for 2-proc), the client, the workers' process, the three together, every "
        "other process on the machine (other jobs, this bench's parent: /proc/stat's busy time less ours) and the "
        "time the hypervisor stole (steal).",
        "",
        "| workers | config | dispatcher ms/query | client ms/query | workers ms/query | dispatcher cores | "
        "client cores | workers cores | ours in all | other processes | steal |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for n in WORKER_COUNTS:
        for k in KINDS:
            v = med[n][k]
            lines.append(f"| {n} | {k} | {v['disp_ms_q']:.3f} | {v['client_ms_q']:.3f} | {v['workers_ms_q']:.3f} | "
                         f"{v['disp_cores']:.2f} | {v['client_cores']:.2f} | {v['workers_cores']:.2f} | "
                         f"{v['total_cores']:.2f} | {v['other_cores']:.2f} | {v['steal_cores']:.2f} |")
    for n in WORKER_COUNTS:
        lines += ["", verdict(n, med[n]["1-proc"], med[n]["2-proc"])]
    shared = [f"{n} {k}: {med[n][k]['other_cores']:.2f}" for n in WORKER_COUNTS for k in KINDS
              if med[n][k]["other_cores"] > SHARED_MACHINE_CORES]
    if shared:
        lines += ["", "**The machine was shared**: other processes used more than "
                  f"{SHARED_MACHINE_CORES} of a core in the measured window ({'; '.join(shared)} cores). Two "
                  "dispatcher processes then also take a larger share of a contended machine than one, so the ratios "
                  "above are not the dispatcher's scaling alone: rerun on a quiet machine."]
    lines += [
        "",
        f"Extrapolation (`bench/dispatch/_dispatch_capacity.py`): dispatcher hosts for {TARGET_QPS:,.0f} q/s (ncf at 2.5 $/hr, "
        "\"kairos-repro\": 7,020 q/s confirmed pick, 7,436 paper oracle) = ceil(7,200 / per-host q/s), per-host q/s "
        f"= {cores} cores / the dispatchers' CPU seconds per query. Assumed: a host runs one dispatcher process per "
        "core and nothing else (no client, no workers), every core fully busy, the CPU per query as measured here "
        "(no-op workers, so the dispatcher's own work per query: gRPC in and out, admission, the matching round); "
        "a ceiling, not a measured rate.",
        "",
        "| workers | config | dispatcher CPU ms/query | per-host q/s (ceiling) | hosts for 7,200 q/s |",
        "|---|---|---|---|---|",
    ]
    for n in WORKER_COUNTS:
        for k in KINDS:
            e = hosts_needed(TARGET_QPS, med[n][k]["disp_ms_q"] / 1000, cores)
            lines.append(f"| {n} | {k} | {med[n][k]['disp_ms_q']:.3f} | {e.per_host_qps:,.0f} | {e.hosts} |")
    worst = max(WORKER_COUNTS, key=lambda n: med[n]["2-proc"]["disp_ms_q"])
    e = hosts_needed(TARGET_QPS, med[worst]["2-proc"]["disp_ms_q"] / 1000, cores)
    lines += ["", f"Taking the 2-proc row with the most dispatcher CPU per query ({worst} workers, "
              f"{e.cpu_s_per_query * 1000:.3f} ms): **{e.hosts} hosts** of {cores} cores for {TARGET_QPS:,.0f} q/s "
              f"({e.per_host_qps:,.0f} q/s a host at most). The CPU per query is this run's, on this machine "
              "(higher on a contended one)."]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description="two dispatcher processes against one (issue #27)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds (medians over them)")
    ap.add_argument("--seconds", type=float, default=3.0, help="the measured window of each run")
    ap.add_argument("--start", default="bench", choices=_loopback.DISPATCHER_STARTS,
                    help="how each dispatcher process builds its Dispatcher: bench (as dispatch_bench) or run "
                         "(as `costscale run`)")
    ap.add_argument("--host-cores", type=int, default=os.cpu_count() or 1,
                    help="cores of a dispatcher host in the extrapolation (default: this machine's)")
    ap.add_argument("--quick", action="store_true", help="one round of 1.5 s (under a minute)")
    ap.add_argument("--no-write", action="store_true", help="print the section, leave BENCHMARKS.md as it is")
    a = ap.parse_args()
    if a.rounds < 1 or not 0 < a.seconds < math.inf or a.host_cores < 1:
        ap.error("--rounds and --host-cores must be at least 1, --seconds a number above 0")
    rounds, seconds = (1, 1.5) if a.quick else (a.rounds, a.seconds)
    conc = {n: CONCURRENCY_PER_4 * n // 4 for n in WORKER_COUNTS}
    t0 = time.perf_counter()
    med = {n: {k: medians(v) for k, v in measure(n, rounds, seconds, conc[n], a.start).items()}
           for n in WORKER_COUNTS}
    command = ".venv/bin/python bench/replicas/replica_tput_bench.py" + (" --quick" if a.quick else "") + \
        (f" --start {a.start}" if a.start != "bench" else "")
    lines = section(med, conc, rounds, seconds, a.start, a.host_cores, command)
    lines += ["", f"({time.perf_counter() - t0:.0f} s in all.)"]
    if not a.no_write:
        write_section("replicas-throughput", "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
