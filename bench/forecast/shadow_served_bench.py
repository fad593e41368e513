"""Shadow's capacity estimate of what each pool would have served, against the replay's attainment
(issue #39 deliverable 4; scaler/forecast/served.py).

``forecast.mode: shadow`` plans as ``off`` (bit for bit) and estimates, per model and minute, the
share of arrivals within the capacity of the applied pool and of the pool planning ahead would have
held. This replays each day once in ``shadow`` (its attainment is the applied pool's actual one) and
once in ``on`` (the actual attainment of planning ahead), and prints both estimates beside both
actual figures:

- ``step``: the README's 20-minute example (rm2, 5 q/s then 30 q/s from 10 minutes on, 7 days of the
  same step as history; ``tests/forecast/test_replay_ahead.py``);
- ``two-peak``: ``bench/forecast/ahead_bench.py``'s day (06:00-12:00, peaks 40 q/s at 08:00 and
  11:00, 7 days of history), with ``--width`` and the boot delays as there.

    PYTHONPATH=. .venv/bin/python bench/forecast/shadow_served_bench.py [--skip-two-peak] [--width 0.3 --boot-gpu 300 --boot-cpu 300]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.forecast.step_day import run, step_history  # noqa: E402
from bench.forecast.ahead_bench import (HOURS, WIDTH_H, config, history_rows, scored_workload,  # noqa: E402
                                        write_history)
from config.profiles import load_profiles_csv  # noqa: E402
from daemon.commands.history import replay_history  # noqa: E402
from sim.replay.outcomes import SERVED  # noqa: E402
from sim.replay.report import report  # noqa: E402
from sim.replay.run import ReplaySpec, replay  # noqa: E402


def step_runs(profiles) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    with tempfile.TemporaryDirectory() as tmp:
        return {m: run(m, Path(tmp), profiles, step_history()) for m in ("shadow", "on")}


def two_peak_runs(profiles, width: float, boot_gpu: float, boot_cpu: float) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    boot = {"gpu": boot_gpu, "inferentia": boot_gpu, "cpu": boot_cpu}
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        hist = Path(tmp) / "history.csv"
        write_history(hist, history_rows(40.0, 1, False, width))
        for mode in ("shadow", "on"):
            cfg = config(mode, boot_gpu, boot_cpu)
            wl = scored_workload(cfg, 40.0, 1, width)
            out[mode] = replay(cfg, profiles, wl, HOURS * 3600.0,
                               ReplaySpec(boot_s=boot, history=replay_history(str(hist), cfg)))
    return out


def counted_attainment(run: Any, f: dict[str, Any], minutes: int) -> float:  # type: ignore[type-arg]
    """The replay's attainment over the minutes the estimate counted (the last ``served_minutes`` of the
    ``minutes`` recorded: the first ones, before the first pool booted, are left out), percent."""
    q = run.lanes["rm2"]
    lo, hi = 60.0 * (minutes - f["served_minutes"]["applied"]), 60.0 * minutes
    sel = (q.arr >= lo) & (q.arr < hi)
    within = (q.outcome == SERVED) & (q.latency <= q.qos_ms)
    return 100.0 * float(within[sel].sum()) / float(sel.sum())


def row(name: str, runs: dict[str, Any]) -> str:
    sh, on = report(runs["shadow"]), report(runs["on"])
    f, minutes = sh["forecast_shadow"], sh["forecast"]["rm2"]["minutes"]
    att_off, att_on = 100 * float(sh["slo_attainment"]), 100 * float(on["slo_attainment"])
    c_off, c_on = counted_attainment(runs["shadow"], f, minutes), counted_attainment(runs["on"], f, minutes)
    return (f"| {name} | {f['applied_served_pct']:.2f} % | {att_off:.2f} % ({c_off:.2f} %) | "
            f"{f['applied_served_pct'] - c_off:+.2f} | {f['ahead_served_pct']:.2f} % | {att_on:.2f} % ({c_on:.2f} %) | "
            f"{f['ahead_served_pct'] - c_on:+.2f} | {f['ahead_extra_pct']:+.2f} % | "
            f"{100 * (float(on['cost_usd']) / float(sh['cost_usd']) - 1):+.2f} % | {f['served_minutes']['applied']} of {minutes} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--width", type=float, default=WIDTH_H)
    ap.add_argument("--boot-gpu", type=float, default=90.0)
    ap.add_argument("--boot-cpu", type=float, default=60.0)
    ap.add_argument("--skip-two-peak", action="store_true")
    args = ap.parse_args()
    profiles = load_profiles_csv(None)
    t0 = time.perf_counter()
    print("| day | applied: estimate | applied: actual, shadow = off (over the minutes counted) | estimate - actual "
          "(points, same minutes) | ahead: estimate | ahead: actual, on (minutes counted) | estimate - actual | "
          "ahead $ planned vs applied (shadow) | on $ billed vs off | minutes counted |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    print(row("step, 20 min (README)", step_runs(profiles)), flush=True)
    if not args.skip_two_peak:
        print(row(f"two-peak 6 h, width {args.width:g} h, boot {args.boot_gpu:g}/{args.boot_cpu:g} s",
                  two_peak_runs(profiles, args.width, args.boot_gpu, args.boot_cpu)))
    print(f"all runs {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
