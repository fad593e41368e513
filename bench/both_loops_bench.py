"""Both loops on one clock (issue #25): the fleet and the accuracy round through macro-bursts on
``examples/replay-accuracy.yaml``, against the same replay with accuracy scaling off (``fleet_only``).
Writes the "both-loops" section of BENCHMARKS.md.

``cap`` is the budget's pool's allowable throughput at full accuracy (``costscale capacity
examples/replay-accuracy.yaml --pool r5n.large=20``: the max pool within 3 $/hr, 108.5 q/s; given
with --cap). The cases are the issue's: ``macroburst:low=0.25·cap,high=H,low_s=600,high_s=300``
with H = cap (a step the budget covers) and H = 2·cap (beyond it).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._report import machine, write_section  # noqa: E402
from config.profiles import load_profiles_csv  # noqa: E402
from config.schema import Config, load_config  # noqa: E402
from sim.patterns import parse_pattern, pattern_workload  # noqa: E402
from sim.replay import ReplaySpec, replay  # noqa: E402
from sim.replay_metrics import report  # noqa: E402

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "replay-accuracy.yaml"


def fleet_only(cfg: Config) -> Config:
    acc = cfg.model_scaling.accuracy_scaling.model_copy(update={"enabled": False})
    return cfg.model_copy(update={"model_scaling": cfg.model_scaling.model_copy(update={"accuracy_scaling": acc})})


def run(cfg: Config, pattern: str, minutes: float) -> dict:  # type: ignore[type-arg]
    wl = pattern_workload(parse_pattern(pattern), minutes * 60.0, cfg.workload.batch_dist, seed=0,
                          max_batch=cfg.models[0].max_batch)
    t0 = time.perf_counter()
    rep = report(replay(cfg, load_profiles_csv(None), wl, minutes * 60.0, ReplaySpec()))
    rep["wall_s"] = round(time.perf_counter() - t0, 1)
    return rep


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cap", type=float, default=108.5, help="the budget pool's capacity at full accuracy (q/s)")
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    cfg = load_config(EXAMPLE)
    rows = []
    for label, high in (("H = cap", args.cap), ("H = 2·cap", 2 * args.cap)):
        pattern = f"macroburst:low={0.25 * args.cap:g},high={high:g},low_s=600,high_s=300"
        for name, c in (("costscale (both loops)", cfg), ("fleet_only", fleet_only(cfg))):
            r = run(c, pattern, args.minutes)
            a = r["accuracy"]
            app = a.get("applications", {}).get("resnet", {})
            rows.append(f"| {label} | {name} | {100 * r['slo_attainment']:.2f} % | ${r['cost_usd']:.4f} | "
                        f"{app.get('mean', 78.312):.2f} | {a['max_drop_points']:.2f} | {a['minutes_below_full']} | "
                        f"{r['peak_cost_per_hour']:.3f} | {r['budget_violations']} | {r['wall_s']} |")
            print(rows[-1], flush=True)
    md = ("## Both loops on one clock: the fleet and the accuracy round through a burst (bench/both_loops_bench.py)\n\n"
          f"Machine: {machine()}. Command: `.venv/bin/python bench/both_loops_bench.py --cap {args.cap:g} "
          f"--minutes {args.minutes:g}`. `examples/replay-accuracy.yaml`: the resnet family as one application "
          "(SLO 1 s, 3 $/hr, min_cost, headroom 0.5), planned at resnet-152 (78.31 %); accuracy scaling in plan "
          f"mode. cap = {args.cap:g} q/s (`costscale capacity examples/replay-accuracy.yaml --pool r5n.large=20`, "
          "the largest pool within the budget); pattern `macroburst:low=0.25·cap,high=H,low_s=600,high_s=300`; "
          "boot 60 s (CPU types) / 90 s (GPU), a variant swap loads for 1 s. Max drop: the largest drop of a "
          "1-minute mean of served accuracy below resnet-152, in points.\n\n"
          "| case | run | within SLO | dollars | mean accuracy % | max drop (points) | minutes below full | "
          "peak $/hr | budget violations | wall s |\n|---|---|---|---|---|---|---|---|---|---|\n"
          + "\n".join(rows) + "\n\nNot measured yet (issue #25): `accuracy_only` (the budget's pool pinned) and the "
          "full-accuracy hindsight reference.\n")
    if not args.no_write:
        write_section("both-loops", md)


if __name__ == "__main__":
    main()
