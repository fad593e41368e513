"""Where the dispatcher's CPU goes per query, sampled by py-spy (issue #41, deliverable 3).

The parts of ``bench/dispatch/query_path_bench.py`` (``bench/dispatch/_loopback.py``: the no-op workers, one
dispatcher process, one closed-loop client process), a path at a time; while the client's measured
window runs, ``py-spy record`` samples the dispatcher process (``--format raw``: one line per distinct
stack with its sample count; ``--idle`` off, so a sample is CPU the process used or waited on the GIL
for). Each sample goes to one part of the path (:func:`part_of`), and the parts' shares of the
samples times the process's CPU per query over the same window give milliseconds per query.

py-spy is not a dependency of costscale: ``pip install py-spy`` (or ``--py-spy PATH``). Usage::

    .venv/bin/python bench/dispatch/profile_bench.py [--workers 64] [--seconds 8] [--paths stream/stream,unary/unary]
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import argparse  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from typing import Iterable  # noqa: E402

from bench.dispatch import _loopback  # noqa: E402
from bench.dispatch.query_path_bench import CONCURRENCY_PER_4, PATHS  # noqa: E402
from bench.replicas.replica_tput_bench import _close, _line, _spawn, owned_by  # noqa: E402
from bench._report import machine  # noqa: E402
from bench.dispatch._proc_cpu import process_cpu_s  # noqa: E402

#: the parts of the path, in the order a stack is tested against them: (name, substrings of a frame's
#: file). Library leaves first (what the time is spent in), then the project's code that called it.
LEAF_PARTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("protobuf (messages built, parsed, copied)", ("google/protobuf",)),
    ("metrics and logging", ("prometheus_client", "logging/")),
)
OWNER_PARTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("matching round (routing, the Kairos policy, numpy/scipy under it)", ("dispatcher/routing.py", "dispatcher/policies/",
                                                                          "dispatcher/batch_join.py")),
    ("admission, demand windows, outcomes, the latency model", ("dispatcher/admission.py", "dispatcher/window.py",
                                                               "dispatcher/outcomes.py", "dispatcher/queries.py",
                                                               "dispatcher/latency_model.py", "dispatcher/runtime.py")),
    ("worker calls (InferStream / unary Infer, the worker client)", ("dispatcher/call_stream.py", "dispatcher/workers/")),
    ("the client's side (Submit / SubmitStream servicers, interceptors)", ("dispatcher/api/", "dispatcher/server.py",
                                                                          "dispatcher/auth.py", "dispatcher/overload.py")),
    ("gRPC's Python layer (grpc.aio calls, the server's loop)", ("grpc/",)),
    ("the event loop (asyncio: tasks, callbacks, epoll; gRPC's Cython callbacks run under it)", ("asyncio/", "selectors.py")),
    ("threads besides the loop (gRPC's core poller, in C)", ("threading.py",)),
)
OTHER = "other"


def part_of(stack: str) -> str:
    """The part a sampled stack (py-spy raw: ``frame;frame;...`` root first, each ``func (file:line)``)
    belongs to: a library leaf part (:data:`LEAF_PARTS`) where the innermost frame is one, else the
    first of :data:`OWNER_PARTS` with a frame anywhere on the stack."""
    frames = stack.split(";")
    leaf = frames[-1] if frames else ""
    for name, keys in LEAF_PARTS:
        if any(k in leaf for k in keys):
            return name
    for name, keys in OWNER_PARTS:
        if any(k in f for f in frames for k in keys):
            return name
    return OTHER


def shares(lines: Iterable[str], others: Counter[str] | None = None) -> Counter[str]:
    """Samples per part from py-spy's raw output (``STACK COUNT`` per line); ``others``: the innermost
    frames of the samples no part took, counted (what :data:`OTHER` holds)."""
    out: Counter[str] = Counter()
    for line in lines:
        stack, _, count = line.rstrip().rpartition(" ")
        if stack and count.isdigit():
            part = part_of(stack)
            out[part] += int(count)
            if part == OTHER and others is not None:
                others[";".join(stack.split(";")[-2:])] += int(count)
    return out


def profile_path(py_spy: str, path: str, n: int, seconds: float, rate: int, tmp: Path) -> tuple[Counter[str], float, int]:
    """One window of ``path`` on ``n`` workers: (samples per part, dispatcher CPU s in the window, queries)."""
    dargs, cargs = PATHS[path]
    wp = _spawn("--role", "workers", "--workers", str(n))
    try:
        addresses = json.loads(_line(wp))
        workers = [(f"i-{k}", _loopback.TYPES[k % 4], a) for k, a in enumerate(addresses)]
        owned = owned_by(workers, ("r0",))["r0"]
        d = _spawn("--role", "dispatcher", "--start", "bench", "--owned", json.dumps(owned), *dargs)
        try:
            port = json.loads(_line(d))["port"]
            client = _spawn("--role", "load", "--target", f"ipv4:127.0.0.1:{port}", "--seconds", str(seconds),
                            "--concurrency", str(CONCURRENCY_PER_4 * max(1, n // 4)), "--marks", *cargs)
            while _line(client) != _loopback.MARK_START:
                pass
            raw = tmp / f"{path.replace('/', '-')}-{n}.txt"
            c0 = process_cpu_s(d.pid)
            spy = subprocess.Popen([py_spy, "record", "-p", str(d.pid), "--duration", str(max(1, int(seconds) - 1)),
                                    "--rate", str(rate), "--format", "raw", "--output", str(raw), "--nonblocking"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            t0 = time.perf_counter()
            spy.wait()
            c1, t1 = process_cpu_s(d.pid), time.perf_counter()
            while _line(client) != _loopback.MARK_END:
                pass
            res = json.loads(_close(client))
            if spy.returncode != 0 or not raw.exists():
                raise RuntimeError(f"py-spy: {spy.stderr.read().strip() if spy.stderr else spy.returncode}")
            queries = int(res["queries"] * (t1 - t0) / res["seconds"])   # the client's rate over py-spy's span
            others: Counter[str] = Counter()
            got = shares(raw.read_text().splitlines(), others)
            top = ", ".join(f"{f} {k}" for f, k in others.most_common(5))
            print(f"{path} at {n} workers, the most sampled frames in {OTHER!r}: {top or '-'}", file=sys.stderr)
            return got, c1 - c0, queries
        finally:
            _close(d)
    finally:
        _close(wp)


def table(results: dict[str, tuple[Counter[str], float, int]], n: int) -> list[str]:
    names = [p for p, _ in LEAF_PARTS] + [p for p, _ in OWNER_PARTS] + [OTHER]
    paths = list(results)
    lines = ["| part | " + " | ".join(f"{p}: ms/query (share)" for p in paths) + " |",
             "|---|" + "---|" * len(paths)]
    for name in names:
        cells = []
        for p in paths:
            c, cpu, q = results[p]
            total = sum(c.values()) or 1
            cells.append(f"{1000 * cpu / max(1, q) * c[name] / total:.3f} ({100 * c[name] / total:.0f} %)")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("| **the dispatcher's CPU per query** | " + " | ".join(
        f"**{1000 * results[p][1] / max(1, results[p][2]):.3f}** ({sum(results[p][0].values())} samples, "
        f"{results[p][2]} queries)" for p in paths) + " |")
    return [f"{n} no-op workers, py-spy at its sampling rate over the client's window:", "", *lines]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=8.0, help="the client's window (py-spy samples 1 s less)")
    ap.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    ap.add_argument("--paths", default="stream/stream,unary/unary", help=f"of {', '.join(PATHS)}")
    ap.add_argument("--py-spy", default=shutil.which("py-spy") or "", help="the py-spy executable")
    a = ap.parse_args()
    paths = [p for p in a.paths.split(",") if p]
    bad = [p for p in paths if p not in PATHS]
    if bad or not a.py_spy or a.workers < 1 or a.seconds < 2:
        ap.error(f"unknown path {bad[0]}" if bad else "py-spy not found: pip install py-spy, or --py-spy PATH"
                 if not a.py_spy else "--workers at least 1, --seconds at least 2")
    with tempfile.TemporaryDirectory() as tmp:
        results = {p: profile_path(a.py_spy, p, a.workers, a.seconds, a.rate, Path(tmp)) for p in paths}
    print(f"Machine: {machine()}. Command: `.venv/bin/python bench/dispatch/profile_bench.py --workers {a.workers} "
          f"--seconds {a.seconds:g} --paths {a.paths}`.\n")
    print("\n".join(table(results, a.workers)))


if __name__ == "__main__":
    main()
