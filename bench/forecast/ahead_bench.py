"""Planning ahead on a two-peak day (issue #39 goal "single model"): rm2 alone, 6 hours of a day
with two peaks, 7 days of history from the same generator before it; costscale reactive
(``forecast.mode: off``) and planning ahead (``on``), each against the hindsight reference
(``replay --baselines``: each 5-minute window's cheapest pool for its peak minute, known in advance,
no boot delay), all in one run; and the no-harm case: ``on`` over a history whose days do not repeat
(each day's hours shuffled), which must stay within 1 % of reactive.

    PYTHONPATH=. .venv/bin/python bench/forecast/ahead_bench.py [--boot-gpu 90 --boot-cpu 60] [--peak 40]
                                                              [--seed 1] [--out DIR] [--config replay-rm2.yaml]

``--config``: the example under ``examples/`` replayed (default ``replay-rm2.yaml``; ``replay-rm2-ahead.yaml`` is the
configuration that plans ahead), its ``forecast`` section set per run (mode, ``--quantile``, the boot delays).

The generator: ``sim.patterns``' diurnal shape on a 24 h day, peaks at 08:00 and 11:00 (width
0.75 h, the second 0.85 of the first above the trough), trough ``peak / 10``; the scored day is
06:00-12:00 of day 8 (both ramps up and the first down), queries drawn by thinning (seed ``--seed``),
batches from the config's distribution. The history is each earlier day's per-minute rate measured
from its own draw (a Poisson count per minute / 60, seeds ``seed + 1 .. seed + 7``), written as the
CSV ``costscale replay --history`` reads (``OUT/history.csv``, ``OUT/history-shuffled.csv``).
"""
from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402

from config.profiles import load_profiles_csv  # noqa: E402
from bench.forecast._config import ROOT, add_margin_args, forecast_config, headroom_on, perfect_forecast, perfect_forecast_line  # noqa: E402
from config.schema import Config  # noqa: E402
from daemon.commands.history import replay_history  # noqa: E402
from scaler.planner.batch_mix import sample_batches  # noqa: E402
from sim.patterns import parse_pattern, rate_function  # noqa: E402
from sim.replay.baselines import run_baseline  # noqa: E402
from sim.replay.report import report  # noqa: E402
from sim.replay.run import ReplaySpec, replay  # noqa: E402
from sim.workload import Workload, poisson_arrivals  # noqa: E402

DAY_S = 86400.0
#: the scored window: 06:00 to 12:00
START_S, HOURS = 6 * 3600.0, 6.0
HISTORY_DAYS = 7


#: each peak's standard deviation (h) by default
WIDTH_H = 0.75


def day_rate(peak: float, width: float = WIDTH_H):  # type: ignore[no-untyped-def]
    """q/s at a time of day (s from midnight): the two-peak day."""
    spec = parse_pattern(f"diurnal:peak={peak:g},trough={peak / 10:g},period_h=24,am=8,pm=11,width={width:g}")
    return rate_function(spec, DAY_S)


#: the example config replayed by default (``--config``)
EXAMPLE = "replay-rm2.yaml"


def config(mode: str, boot_gpu: float, boot_cpu: float, quantile: float = 0.9, headroom: float | None = None,
           scale_in_s: float | None = None, park_s: float | None = None, example: str = EXAMPLE) -> Config:
    return forecast_config(example, "ahead", mode, boot_gpu=boot_gpu, boot_cpu=boot_cpu, quantile=quantile,
                           headroom=headroom, scale_in_s=scale_in_s, park_s=park_s)


def scored_workload(cfg: Config, peak: float, seed: int, width: float = WIDTH_H) -> Workload:
    rate = day_rate(peak, width)
    rng = np.random.default_rng([seed, 39])
    top = 1.01 * peak
    dur = HOURS * 3600.0
    cand = poisson_arrivals(top, rng, duration=dur)
    arr = cand[rng.random(cand.size) * top < rate(cand + START_S)]
    batches = sample_batches(cfg.workload.batch_dist, arr.size, np.random.default_rng([seed, 40]), cfg.models[0].max_batch)
    return Workload(arr, batches)


def history_rows(peak: float, seed: int, shuffled: bool, width: float = WIDTH_H,
                 days: int = HISTORY_DAYS) -> list[tuple[int, float]]:
    """(seconds before the trace's start, q/s) of every minute of the ``days`` (7) days before it."""
    rate = day_rate(peak, width)
    rows = []
    for d in range(days, 0, -1):        # the 24 h before the trace's start, d days back
        rng = np.random.default_rng([seed + d, 41])
        ts = -d * DAY_S + np.arange(1440) * 60.0
        qps = rng.poisson(rate(np.mod(START_S + ts + 30.0, DAY_S)) * 60.0) / 60.0
        if shuffled:    # the day's hours in another order: its shape does not repeat from one day to the next
            qps = qps.reshape(24, 60)[rng.permutation(24)].reshape(-1)
        rows += [(int(t), float(q)) for t, q in zip(ts, qps)]
    return rows


def write_history(path: Path, rows: list[tuple[int, float]]) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["timestamp", "model", "qps"])
        for ts, q in rows:
            w.writerow([ts, "rm2", f"{q:.6g}"])


def figures(run) -> dict:  # type: ignore[no-untyped-def, type-arg]
    r = report(run)
    return {"usd": float(r["cost_usd"]), "att": float(r["slo_attainment"]), "plans": int(r["plans"]),
            "launches": int(r["decisions"]["launch"]), "wall_s": float(run.wall_s),
            "held_back": (r.get("forecast") or {}).get("rm2", {}).get("held_back", "-"),
            "covered": (r.get("forecast") or {}).get("rm2", {}).get("covered", "-")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peak", type=float, default=40.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--width", type=float, default=WIDTH_H, help="each peak's standard deviation (h)")
    ap.add_argument("--boot-gpu", type=float, default=90.0)
    ap.add_argument("--boot-cpu", type=float, default=60.0)
    ap.add_argument("--out", type=Path, default=Path("/tmp/ahead-bench"))
    ap.add_argument("--config", default=EXAMPLE, help=f"the example under examples/ to replay (default {EXAMPLE})")
    add_margin_args(ap)
    ap.add_argument("--scale-in", type=float, default=None, help="intervals.scale_in_s for every run")
    ap.add_argument("--park", type=float, default=None, help="model_scaling.vm_park_s for every run")
    ap.add_argument("--scale-in-on", type=float, default=None, help="intervals.scale_in_s for the runs planning ahead")
    ap.add_argument("--park-on", type=float, default=None, help="model_scaling.vm_park_s for the runs planning ahead")
    ap.add_argument("--skip-shuffled", action="store_true")
    args = ap.parse_args()
    if not (ROOT / "examples" / args.config).is_file():
        ap.error(f"--config {args.config}: no such example under {ROOT / 'examples'}")
    args.out.mkdir(parents=True, exist_ok=True)
    profiles = load_profiles_csv(None)
    boot = {"gpu": args.boot_gpu, "inferentia": args.boot_gpu, "cpu": args.boot_cpu}
    dur = HOURS * 3600.0
    hist = args.out / "history.csv"
    write_history(hist, history_rows(args.peak, args.seed, False, args.width))
    shuf = args.out / "history-shuffled.csv"
    write_history(shuf, history_rows(args.peak, args.seed, True, args.width))
    off = config("off", args.boot_gpu, args.boot_cpu, headroom=args.headroom, scale_in_s=args.scale_in,
                 park_s=args.park, example=args.config)
    wl = scored_workload(off, args.peak, args.seed, args.width)
    print(f"{args.config}: rm2, two-peak day 06:00-12:00 (peak {args.peak:g} q/s, width {args.width:g} h, {wl.arrivals.size:,} queries), boot gpu "
          f"{args.boot_gpu:g} s / cpu {args.boot_cpu:g} s, 7 days of history", flush=True)
    rows: dict[str, dict] = {}  # type: ignore[type-arg]
    t0 = time.perf_counter()
    rows["hindsight"] = figures(run_baseline("hindsight", off, profiles, wl, dur, ReplaySpec(boot_s=boot)))
    rows["reactive (off)"] = figures(replay(off, profiles, wl, dur, ReplaySpec(boot_s=boot)))
    on = config("on", args.boot_gpu, args.boot_cpu, args.quantile,
                headroom_on(args),
                args.scale_in_on if args.scale_in_on is not None else args.scale_in,
                args.park_on if args.park_on is not None else args.park, args.config)
    rows["ahead (on)"] = figures(replay(on, profiles, wl, dur, ReplaySpec(boot_s=boot, history=replay_history(str(hist), on))))
    if not args.skip_shuffled:
        rows["ahead (on), shuffled days"] = figures(replay(on, profiles, wl, dur, ReplaySpec(
            boot_s=boot, history=replay_history(str(shuf), on))))
    hind = rows["hindsight"]["usd"]
    print(perfect_forecast_line(on, perfect_forecast(on, profiles, wl, dur)))
    print("| run | $ | ÷ hindsight | attainment | plans | launches | forecast held back | minutes ≤ forecast | wall s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, f in rows.items():
        print(f"| {name} | {f['usd']:.4f} | {f['usd'] / hind:.3f} | {100 * f['att']:.2f} % | {f['plans']} | "
              f"{f['launches']} | {f['held_back']} | {f['covered']} | {f['wall_s']:.1f} |")
    reac, ahead = rows["reactive (off)"], rows["ahead (on)"]
    print(f"goal ≤ 1.03x hindsight at ≥ 99.5 %: ahead {ahead['usd'] / hind:.3f}x at {100 * ahead['att']:.2f} % "
          f"({'met' if ahead['usd'] <= 1.03 * hind and ahead['att'] >= 0.995 else 'not met'}); reactive "
          f"{reac['usd'] / hind:.3f}x at {100 * reac['att']:.2f} %")
    if "ahead (on), shuffled days" in rows:
        s = rows["ahead (on), shuffled days"]
        du, da = s["usd"] / reac["usd"] - 1, s["att"] - reac["att"]
        print(f"no harm (shuffled days within 1 % of reactive): dollars {100 * du:+.2f} %, attainment "
              f"{100 * da:+.3f} points ({'met' if abs(du) <= 0.01 and abs(da) <= 0.01 else 'not met'})")
    print(f"all runs {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
