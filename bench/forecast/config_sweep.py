"""Which fleet configuration lets planning ahead meet issue #39's single-model and real-traffic goals, and what
reacting does under the same configuration: one run per cell of headroom x holds (``intervals.scale_in_s`` /
``model_scaling.vm_park_s``) x ``forecast.quantile``, reactive (``off``) and planning ahead (``on``) each
against one hindsight reference (it has no headroom nor holds, so it is replayed once).

    PYTHONPATH=. .venv/bin/python bench/forecast/config_sweep.py [--day gentle|steep|nasa] [--seed 1]
        [--boots 90/60] [--headrooms 0.1,0.05,0.03,0] [--holds 300/120,120/60,60/30] [--quantiles 0.9,0.95]
        [--batching work_conserving] [--cells 0.05:60/30:0.9,...] [--reuse OLD.json] [--jobs 2] [--shuffled] [--json OUT.json]

``gentle``: ``ahead_bench.py``'s day (peaks 0.75 h wide, boots 90/60 s); ``steep``: its ``--width 0.3`` day
with 300 s boots; ``nasa``: ``real_traffic_bench.py``'s day 24 (Tuesday 25 July 1995) with ``--boots``.
``--cells`` runs only the listed (headroom, holds, quantile) cells; reactive runs once per (headroom, holds).
``--shuffled`` adds, per cell, planning ahead over the gentle day's shuffled history (the no-harm run).
Each replay is its own process (``--jobs`` at once); the dollars are deterministic, the walls are not.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.forecast import ahead_bench, real_traffic_bench  # noqa: E402
from bench.forecast._config import forecast_config, perfect_forecast  # noqa: E402
from config.profiles import load_profiles_csv  # noqa: E402
from config.schema import Config  # noqa: E402
from daemon.commands.history import replay_history  # noqa: E402
from sim.replay.baselines import run_baseline  # noqa: E402
from sim.replay.report import report  # noqa: E402
from sim.replay.run import ReplaySpec, replay  # noqa: E402
from sim.workload import Workload  # noqa: E402

Cell = tuple[float, float, float, float]     # headroom, scale_in_s, vm_park_s, quantile


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x]


def _holds(text: str) -> list[tuple[float, float]]:
    return [(float(a), float(b)) for a, b in (p.split("/") for p in text.split(",") if p)]


def _cells(text: str) -> list[Cell]:
    out = []
    for p in text.split(","):
        h, holds, q = p.split(":")
        s, k = holds.split("/")
        out.append((float(h), float(s), float(k), float(q)))
    return out


def _day(args: argparse.Namespace, hist_dir: Path) -> tuple[Workload, float, dict[str, float], Path, Path | None]:
    """The scored workload, its duration, the boots, the history CSV and the shuffled one (gentle/steep)."""
    if args.day == "nasa":
        g, c = real_traffic_bench.boot_sets(args.boots)[0]
        _, qps = real_traffic_bench.load_trace()
        scale = real_traffic_bench.scale_for(qps, real_traffic_bench.DEFAULT_DAY, 40.0)
        hist = hist_dir / "history.csv"
        real_traffic_bench.write_history(hist, real_traffic_bench.history_rows(qps, real_traffic_bench.DEFAULT_DAY, scale))
        rate = scale * real_traffic_bench.days_of(qps)[real_traffic_bench.DEFAULT_DAY]
        wl = real_traffic_bench.scored_workload(_cfg(args, "off", 0.1, 300, 120, 0.9), rate, args.seed)
        return wl, 60.0 * rate.size, {"gpu": g, "inferentia": g, "cpu": c}, hist, None
    width, (g, c) = (0.3, (300.0, 300.0)) if args.day == "steep" else (ahead_bench.WIDTH_H, (90.0, 60.0))
    hist, shuf = hist_dir / "history.csv", hist_dir / "history-shuffled.csv"
    ahead_bench.write_history(hist, ahead_bench.history_rows(40.0, args.seed, False, width))
    ahead_bench.write_history(shuf, ahead_bench.history_rows(40.0, args.seed, True, width))
    wl = ahead_bench.scored_workload(_cfg(args, "off", 0.1, 300, 120, 0.9), 40.0, args.seed, width)
    return wl, ahead_bench.HOURS * 3600.0, {"gpu": g, "inferentia": g, "cpu": c}, hist, shuf


def _cfg(args: argparse.Namespace, mode: str, headroom: float, scale_in: float, park: float, q: float) -> Config:
    boot = real_traffic_bench.boot_sets(args.boots)[0] if args.day == "nasa" else \
        ((300.0, 300.0) if args.day == "steep" else (90.0, 60.0))
    cfg = forecast_config(args.example, f"sweep-{args.day}-{headroom:g}-{scale_in:g}-{park:g}-{q:g}", mode,
                          boot_gpu=boot[0], boot_cpu=boot[1], quantile=q, headroom=headroom, scale_in_s=scale_in,
                          park_s=park)
    if args.batching is None:
        return cfg
    return cfg.model_copy(update={"dispatcher": cfg.dispatcher.model_copy(update={"batching": args.batching})})


def _figures(run: Any) -> dict[str, Any]:
    r = report(run)
    fc = (r.get("forecast") or {}).get("rm2", {})
    return {"usd": float(r["cost_usd"]), "att": float(r["slo_attainment"]), "plans": int(r["plans"]),
            "launches": int(r["decisions"]["launch"]), "held_back": fc.get("held_back", "-"),
            "covered": fc.get("covered", "-"), "wall_s": float(run.wall_s)}


def _job(args: argparse.Namespace, kind: str, cell: Cell) -> tuple[str, Cell, dict[str, Any]]:
    """One replay in its own process: ``hindsight``, ``off``, ``on`` or ``shuffled`` at ``cell``."""
    with tempfile.TemporaryDirectory() as d:
        wl, dur, boot, hist, shuf = _day(args, Path(d))
        h, s, k, q = cell
        profiles = load_profiles_csv(None)
        if kind == "hindsight":
            return kind, cell, _figures(run_baseline("hindsight", _cfg(args, "off", h, s, k, q), profiles, wl, dur,
                                                     ReplaySpec(boot_s=boot)))
        cfg = _cfg(args, "off" if kind == "off" else "on", h, s, k, q)
        if kind == "off":
            return kind, cell, _figures(replay(cfg, profiles, wl, dur, ReplaySpec(boot_s=boot)))
        src = shuf if kind == "shuffled" else hist
        fig = _figures(replay(cfg, profiles, wl, dur, ReplaySpec(boot_s=boot, history=replay_history(str(src), cfg))))
        fig["perfect"] = perfect_forecast(cfg, profiles, wl, dur)["headroom_and_hold"]
        return kind, cell, fig


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--day", choices=("gentle", "steep", "nasa"), default="gentle")
    ap.add_argument("--example", default="replay-rm2.yaml", help="the example config under examples/")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--batching", choices=("none", "work_conserving"), default=None,
                    help="dispatcher.batching for every run (default: the example's)")
    ap.add_argument("--boots", default="90/60", help="nasa only: GPU/CPU boot delays (s), one set")
    ap.add_argument("--headrooms", type=_floats, default=_floats("0.1,0.05,0.03,0"))
    ap.add_argument("--holds", type=_holds, default=_holds("300/120,120/60,60/30"))
    ap.add_argument("--quantiles", type=_floats, default=_floats("0.9,0.95"))
    ap.add_argument("--cells", type=_cells, default=None, help="only these headroom:scale_in/park:quantile cells")
    ap.add_argument("--hindsight-usd", type=float, default=None, help="hindsight's dollars, not replayed")
    ap.add_argument("--shuffled", action="store_true", help="also planning ahead over the shuffled history")
    ap.add_argument("--reuse", type=Path, action="append", default=[], help="a --json of an earlier sweep of the "
                    "same day and seed: its runs are not replayed again")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    cells = args.cells or [(h, s, k, q) for h in args.headrooms for s, k in args.holds for q in args.quantiles]
    jobs: list[tuple[str, Cell]] = [] if args.hindsight_usd is not None else [("hindsight", (0.1, 300.0, 120.0, 0.9))]
    jobs += [("off", c) for c in dict.fromkeys((h, s, k, 0.9) for h, s, k, _ in cells)]
    jobs += [("on", c) for c in cells]
    if args.shuffled:
        jobs += [("shuffled", c) for c in cells]
    t0 = time.perf_counter()
    res: dict[tuple[str, Cell], dict[str, Any]] = {}
    for path in args.reuse:
        old = json.loads(path.read_text())
        for r in old["runs"]:
            res[(r["kind"], (r["headroom"], r["scale_in_s"], r["vm_park_s"], r["quantile"]))] = r
        res[("hindsight", (0.1, 300.0, 120.0, 0.9))] = {"usd": old["hindsight_usd"]}
    jobs = [j for j in jobs if j not in res]
    with ProcessPoolExecutor(max_workers=args.jobs) as ex:
        for kind, cell, fig in ex.map(_job, [args] * len(jobs), *zip(*jobs)) if jobs else ():
            res[(kind, cell)] = fig
            print(f"{kind} {cell}: ${fig['usd']:.4f} at {100 * fig['att']:.2f} % ({fig['wall_s']:.0f} s)", flush=True)
    hind = args.hindsight_usd if args.hindsight_usd is not None else res[("hindsight", (0.1, 300.0, 120.0, 0.9))]["usd"]
    goal = 1.02 if args.day == "nasa" else 1.03
    print(f"\nday {args.day}, seed {args.seed}{', boots ' + args.boots if args.day == 'nasa' else ''}: "
          f"hindsight ${hind:.4f}; goal ≤ {goal}x at ≥ 99.5 %")
    print("| headroom | holds | q | reactive | ahead | ahead $ / reactive | perfect forecast | plans off / on "
          "| held back | goal |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for c in cells:
        h, s, k, q = c
        off, on = res[("off", (h, s, k, 0.9))], res[("on", c)]
        met = on["usd"] <= goal * hind and on["att"] >= 0.995
        worse = on["usd"] > off["usd"] and on["att"] < off["att"]
        print(f"| {h:g} | {s:g}/{k:g} s | {q:g} | {off['usd'] / hind:.3f}x at {100 * off['att']:.2f} % | "
              f"{on['usd'] / hind:.3f}x at {100 * on['att']:.2f} % (${on['usd']:.4f}) | "
              f"{100 * (on['usd'] / off['usd'] - 1):+.2f} % | {on['perfect']:.3f}x | {off['plans']} / {on['plans']} | "
              f"{on['held_back']} | {'met' if met else 'not met'}{', dearer and lower' if worse else ''} |")
        if ("shuffled", c) in res:
            sh = res[("shuffled", c)]
            print(f"|  | shuffled |  |  | {sh['usd'] / hind:.3f}x at {100 * sh['att']:.2f} % | "
                  f"{100 * (sh['usd'] / off['usd'] - 1):+.2f} % vs reactive, {100 * (sh['att'] - off['att']):+.3f} "
                  f"points |  |  |  |  |")
    print(f"all runs {time.perf_counter() - t0:.0f} s")
    if args.json:
        args.json.write_text(json.dumps({"hindsight_usd": hind, "runs": [
            {**f, "kind": kd, "headroom": c[0], "scale_in_s": c[1], "vm_park_s": c[2], "quantile": c[3]}
            for (kd, c), f in res.items() if kd != "hindsight"]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
