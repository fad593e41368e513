"""Planning ahead for three models on one budget (issue #39 goal "three models"): rm2, wnd and dien
of ``examples/replay-three.yaml`` (3.0 $/hr), each shaped by its own two-peak day, 7 days of
history each from the same generator; costscale reactive (``forecast.mode: off``) and planning
ahead (``on``) against the sum of the per-model hindsight references (each model alone on the
budget, ``replay --baselines``' hindsight: each 5-minute window's cheapest pool for its peak
minute, known in advance, no boot delay) and the joint hindsight, all in one run.

    PYTHONPATH=. .venv/bin/python bench/forecast/three_bench.py [--boot-gpu 90 --boot-cpu 60] [--seed 1]
                                                              [--hours 6] [--out DIR]

The days (``bench/forecast/ahead_bench.py``'s generator, peaks of width 0.75 h, trough a tenth of
the peak): rm2 peaks 40 q/s at 08:00 and 11:00; wnd 120 q/s at 07:00 and 10:00; dien 25 q/s at
09:00 and 12:00; the scored window is 06:00 to 06:00 + ``--hours``. Goal: ≤ 1.05× Σ per-model
hindsight at ≥ 99.5 % within SLO for each model.
"""
from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

from ahead_bench import DAY_S, HISTORY_DAYS, START_S  # noqa: E402
from config.profiles import load_profiles_csv  # noqa: E402
from bench.forecast._config import forecast_config  # noqa: E402
from config.schema import Config  # noqa: E402
from daemon.commands.history import replay_history  # noqa: E402
from scaler.planner.batch_mix import sample_batches  # noqa: E402
from sim.patterns import parse_pattern, rate_function  # noqa: E402
from sim.replay.baselines import run_baseline  # noqa: E402
from sim.replay.report import report  # noqa: E402
from sim.replay.run import ReplaySpec, replay  # noqa: E402
from sim.workload import Workload, poisson_arrivals  # noqa: E402

#: model -> (peak q/s, first peak h, second peak h)
DAYS = {"rm2": (40.0, 8.0, 11.0), "wnd": (120.0, 7.0, 10.0), "dien": (25.0, 9.0, 12.0)}
WIDTH_H = 0.75


def model_rate(model: str):  # type: ignore[no-untyped-def]
    peak, am, pm = DAYS[model]
    spec = parse_pattern(f"diurnal:peak={peak:g},trough={peak / 10:g},period_h=24,am={am:g},pm={pm:g},"
                         f"width={WIDTH_H:g}")
    return rate_function(spec, DAY_S)


def config(mode: str, boot_gpu: float, boot_cpu: float, only: str | None = None, quantile: float = 0.9) -> Config:
    return forecast_config("replay-three.yaml", "three-ahead", mode, boot_gpu=boot_gpu, boot_cpu=boot_cpu,
                           quantile=quantile, models=[only] if only is not None else None)


def scored(cfg: Config, model: str, seed: int, hours: float) -> Workload:
    rate = model_rate(model)
    peak = DAYS[model][0]
    rng = np.random.default_rng([seed, 39, len(model)])
    top = 1.01 * peak
    cand = poisson_arrivals(top, rng, duration=hours * 3600.0)
    arr = cand[rng.random(cand.size) * top < rate(cand + START_S)]
    mb = next(m.max_batch for m in cfg.models if m.name == model)
    batches = sample_batches(cfg.workload.batch_dist, arr.size, np.random.default_rng([seed, 40, len(model)]), mb)
    return Workload(arr, batches)


def write_history(path: Path, seed: int) -> None:
    """Every model's minutes of the 7 days before the trace (per-minute Poisson counts / 60)."""
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["timestamp", "model", "qps"])
        for model in DAYS:
            rate = model_rate(model)
            for d in range(HISTORY_DAYS, 0, -1):
                rng = np.random.default_rng([seed + d, 41, len(model)])
                ts = -d * DAY_S + np.arange(1440) * 60.0
                qps = rng.poisson(rate(np.mod(START_S + ts + 30.0, DAY_S)) * 60.0) / 60.0
                w.writerows([int(t), model, f"{q:.6g}"] for t, q in zip(ts, qps))


def per_model(run, models) -> dict[str, tuple[float, int]]:  # type: ignore[no-untyped-def]
    """model -> (attainment, queries)."""
    r = report(run)
    out = {}
    for m in models:
        mm = (r.get("models") or {}).get(m) or {}
        out[m] = (float(mm.get("slo_attainment", float("nan"))), int(mm.get("queries", 0)))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--hours", type=float, default=6.0)
    ap.add_argument("--boot-gpu", type=float, default=90.0)
    ap.add_argument("--boot-cpu", type=float, default=60.0)
    ap.add_argument("--quantile", type=float, default=0.9)
    ap.add_argument("--out", type=Path, default=Path("/tmp/three-ahead-bench"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    profiles = load_profiles_csv(None)
    boot = {"gpu": args.boot_gpu, "inferentia": args.boot_gpu, "cpu": args.boot_cpu}
    dur = args.hours * 3600.0
    hist = args.out / "history.csv"
    write_history(hist, args.seed)
    off = config("off", args.boot_gpu, args.boot_cpu)
    loads = {m: scored(off, m, args.seed, args.hours) for m in DAYS}
    print(f"three models, 06:00 + {args.hours:g} h of their own days ("
          + ", ".join(f"{m} {w.arrivals.size:,}" for m, w in loads.items())
          + f" queries), boot gpu {args.boot_gpu:g} s / cpu {args.boot_cpu:g} s, 7 days of history", flush=True)
    t0 = time.perf_counter()
    alone = {}
    for m in DAYS:
        cfg = config("off", args.boot_gpu, args.boot_cpu, only=m)
        r = report(run_baseline("hindsight", cfg, profiles, loads[m], dur, ReplaySpec(boot_s=boot)))
        alone[m] = float(r["cost_usd"])
        print(f"hindsight {m} alone: ${alone[m]:.4f} at {100 * float(r['slo_attainment']):.2f} %", flush=True)
    sum_h = sum(alone.values())
    rows = {}
    joint = run_baseline("hindsight", off, profiles, loads, dur, ReplaySpec(boot_s=boot))
    rows["hindsight (joint)"] = joint
    rows["reactive (off)"] = replay(off, profiles, loads, dur, ReplaySpec(boot_s=boot))
    on = config("on", args.boot_gpu, args.boot_cpu, quantile=args.quantile)
    rows["ahead (on)"] = replay(on, profiles, loads, dur, ReplaySpec(boot_s=boot, history=replay_history(str(hist), on)))
    print(f"Σ per-model hindsight ${sum_h:.4f}")
    print("| run | $ | ÷ Σ hindsight | attainment | " + " | ".join(DAYS) + " |")
    print("|---|---|---|---|" + "---|" * len(DAYS))
    figs = {}
    for name, run in rows.items():
        r = report(run)
        pm = per_model(run, DAYS)
        figs[name] = (float(r["cost_usd"]), pm)
        print(f"| {name} | {float(r['cost_usd']):.4f} | {float(r['cost_usd']) / sum_h:.3f} | "
              f"{100 * float(r['slo_attainment']):.2f} % | " + " | ".join(f"{100 * a:.2f} %" for a, _ in pm.values())
              + " |")
    for name in ("reactive (off)", "ahead (on)"):
        usd, pm = figs[name]
        ok = usd <= 1.05 * sum_h and all(a >= 0.995 for a, _ in pm.values())
        print(f"goal ≤ 1.05x Σ hindsight at ≥ 99.5 % each: {name} {usd / sum_h:.3f}x, worst model "
              f"{100 * min(a for a, _ in pm.values()):.2f} % ({'met' if ok else 'not met'})")
    print(f"all runs {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
