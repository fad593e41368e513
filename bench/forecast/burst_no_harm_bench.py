"""No harm from a burst no forecast saw (issue #39 goal "no harm"): README "Replay"'s macro-burst
example (``examples/replay-accuracy.yaml``: resnet, SLO 1 s, 3 $/hr, 6 → 24 q/s at 600 s for 300 s,
both loops on) replayed reactive (``forecast.mode: off``) and planning ahead (``on``) after 7 days
of history with a daily shape that repeats and never bursts (the same minute of every day: 6 q/s
± 1 q/s on a 24 h sine, Poisson counts), so the forecaster is on (it is chosen: the shape repeats)
and the burst reaches the fleet only through the reactive path, as today.

    PYTHONPATH=. .venv/bin/python bench/forecast/burst_no_harm_bench.py [--out DIR]

Prints both runs' attainment, dollars, accuracy drop and the goal line (attainment unchanged: ``on``
at least ``off``'s).
"""
from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402

from config.profiles import load_profiles_csv  # noqa: E402
from bench.forecast._config import forecast_config  # noqa: E402
from config.schema import Config  # noqa: E402
from daemon.commands.history import replay_history  # noqa: E402
from sim.patterns import parse_pattern, pattern_workload  # noqa: E402
from sim.replay.report import report  # noqa: E402
from sim.replay.run import ReplaySpec, replay  # noqa: E402

BURST = "macroburst:low=6,high=24,low_s=600,high_s=300"
DUR = 1800.0
DAY_S = 86400.0


def config(mode: str) -> Config:
    return forecast_config("replay-accuracy.yaml", "burst", mode, keep_cluster=True)


def write_history(path: Path, seed: int = 1) -> None:
    """7 days of a repeating day around 6 q/s with no burst: per-minute Poisson counts / 60."""
    rng = np.random.default_rng([seed, 39])
    ts = -7 * DAY_S + np.arange(7 * 1440) * 60.0
    rate = 6.0 + np.sin(2 * np.pi * np.mod(ts, DAY_S) / DAY_S)
    qps = rng.poisson(rate * 60.0) / 60.0
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["timestamp", "model", "qps"])
        w.writerows([int(t), "resnet", f"{q:.6g}"] for t, q in zip(ts, qps))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("/tmp/burst-no-harm"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    hist = args.out / "history.csv"
    write_history(hist)
    profiles = load_profiles_csv(None)
    rows = {}
    for mode in ("off", "on"):
        cfg = config(mode)
        wl = pattern_workload(parse_pattern(BURST), DUR, cfg.workload.batch_dist, seed=0, max_batch=8)
        spec = ReplaySpec(history=replay_history(str(hist), cfg)) if mode == "on" else ReplaySpec()
        r = report(replay(cfg, profiles, wl, DUR, spec))
        rows[mode] = r
        fc = (r.get("forecast") or {}).get("resnet") or {}
        print(f"{mode:>3}: {100 * r['slo_attainment']:.2f} % within SLO, ${r['cost_usd']:.4f}, max drop "
              f"{r['accuracy'].get('max_drop_points', 0.0):.2f} points, plans {r['plans']}"
              + (f"; forecaster {fc.get('forecaster')}, {fc.get('minutes_forecast')} minutes forecast" if fc else ""),
              flush=True)
    off, on = rows["off"], rows["on"]
    print(f"no harm (attainment on ≥ off): {100 * on['slo_attainment']:.2f} % against {100 * off['slo_attainment']:.2f} % "
          f"({'met' if on['slo_attainment'] >= off['slo_attainment'] else 'not met'}); dollars "
          f"{100 * (on['cost_usd'] / off['cost_usd'] - 1):+.2f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
