"""The replay against the live system on the 3-minute step-and-burst trace → section "live-vs-replay"
of BENCHMARKS.md (issue #12 item 4; Proteus validated its simulator against its cluster).

The same trace (``examples/traces/step-burst-3min.csv``) goes through the live path (``costscale
demo --trace``: moto EC2 in server mode, the daemon, gRPC, local ONNX worker processes, real time)
and through ``costscale replay`` with the demo's config (no boot delay, as moto's instances run at
once; 2 s for a worker process to start and load its model). Compared: dollars (goal within 10 %),
SLO attainment (goal within 1 point), and the sequence of pool targets (goal: the same).
``tests/replay/test_live_vs_replay.py`` checks a 40 s trace in every ``make test``.

Run: ``.venv/bin/python bench/replay/live_vs_replay_bench.py [--trace CSV]`` (about 3.5 minutes).
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import argparse  # noqa: E402
import asyncio  # noqa: E402
import contextlib  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

from bench._report import machine, write_section  # noqa: E402
from daemon.demos.basic import replay_like_demo, run_demo  # noqa: E402
from daemon.demos.demo_config import DEMO_MODEL  # noqa: E402
from daemon.demos.load import trace_span_and_rate  # noqa: E402
from scaler.planner.pools import pool_text  # noqa: E402
from sim.replay.report import report  # noqa: E402
from sim.workload import load_trace_csv  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "examples" / "traces" / "step-burst-3min.csv"


def _times(ts: list[float]) -> str:
    return ", ".join(f"{t:.0f}" for t in ts)


def _pools(targets: list[dict[str, int]]) -> str:
    return " → ".join(pool_text(p) or "none" for p in targets)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", default=str(TRACE))
    args = ap.parse_args()
    logging.getLogger("werkzeug").setLevel(logging.WARNING)     # moto's request log
    wl = load_trace_csv(args.trace, DEMO_MODEL)
    duration, _ = trace_span_and_rate(wl)
    print(f"live: {len(wl)} queries over {duration:.0f} s (real time) ...", file=sys.stderr)
    t0 = time.perf_counter()
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = asyncio.run(run_demo(as_json=True, quiet=True, trace=wl))
    live_s = time.perf_counter() - t0
    if rc != 0:
        print(f"live run failed (exit {rc})", file=sys.stderr)
        return 1
    live = json.loads(buf.getvalue().strip().splitlines()[-1])
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        run = replay_like_demo(wl, Path(tmp))
        replay_s = time.perf_counter() - t0
    rep = report(run)
    live_targets = [t["pool"] for t in live["targets"]]
    replay_targets = [t.target for t in run.targets]
    live_at, replay_at = [float(t["t_s"]) for t in live["targets"]], [t.at_s for t in run.targets]
    cost_ratio = rep["cost_usd"] / live["cost_usd"] if live["cost_usd"] else float("nan")
    points = 100.0 * (rep["slo_attainment"] - live["slo_attainment"])
    same = live_targets == replay_targets
    lines = [
        "## Replay against the live system (bench/replay/live_vs_replay_bench.py)", "",
        f"Machine: {machine()}. Command: `.venv/bin/python bench/replay/live_vs_replay_bench.py`. Trace "
        f"`{Path(args.trace).relative_to(ROOT) if Path(args.trace).is_relative_to(ROOT) else args.trace}`: "
        f"{len(wl):,} queries of {DEMO_MODEL} over {duration:.0f} s. Live: `costscale demo --trace` (moto EC2 in "
        "server mode, the daemon, gRPC, local ONNX worker processes on this machine, real time). Replay: the "
        "demo's config on virtual time, no boot delay (moto's instances run at once), 2 s for a worker to load. "
        "Goals (issue #12): dollars within 10 %, SLO attainment within 1 point, the same pool targets.", "",
        "| run | cost $ | SLO attainment | p99 ms | pool targets | wall s |",
        "|---|---|---|---|---|---|",
        f"| live | {live['cost_usd']:.6f} | {100 * live['slo_attainment']:.2f} % | {live['p99_ms']} | "
        f"{_pools(live_targets)} | {live_s:.0f} |",
        f"| replay | {rep['cost_usd']:.6f} | {100 * rep['slo_attainment']:.2f} % | {rep['p99_ms']} | "
        f"{_pools(replay_targets)} | {replay_s:.1f} |", "",
        f"Targets set at (s): live {_times(live_at)}; replay {_times(replay_at)}.", "",
        f"Replay ÷ live dollars **{cost_ratio:.3f}** ({'within' if abs(cost_ratio - 1) <= 0.10 else 'outside'} 10 %); "
        f"attainment replay − live **{points:+.2f} points** ({'within' if abs(points) <= 1.0 else 'outside'} 1 point); "
        f"pool targets **{'the same' if same else 'different'}**. The live workers share this machine's cores with "
        "the daemon, moto and the load generator; the replay's service times are the profile's.",
    ]
    text = "\n".join(lines)
    print(text)
    write_section("live-vs-replay", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
