"""Spot capacity inside the budget (issue #28): a 24-hour diurnal rm2 day at 2.5 $/hr
(``examples/replay-spot.yaml``: min_cost, every type ``market: both``, spot over us-east-1a, 1c,
1d) replayed against real AWS spot availability (``examples/traces/spot-aws3-day*.csv``, the
SpotHedge artifact's AWS3 trace, README there) beside ``on_demand_only`` (costscale with every
type on-demand) and SpotHedge's policy (``sim.replay.spot_baselines``).

Goals (the issue's): on a real day, dollars ≤ 0.60 × on_demand_only, ≥ 99 % within SLO, 0 queries
lost to preemptions, the budget held at every instant at billed prices (no ledger violation, the
peak $/hr within the budget); on the day with no spot in any zone, the dollars and attainment of
on_demand_only (± 2 %); against SpotHedge on the same traces, fewer dollars at no lower
attainment.

    .venv/bin/python bench/replay/spot_bench.py [--peak 20] [--hours 24] [--days 31,40,50,18] [--write]

Prints the markdown table (and, with ``--write``, writes the "spot" section of BENCHMARKS.md).
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench._report import machine, write_section  # noqa: E402
from config.budget import BUDGET_EPS  # noqa: E402
from config.profiles import load_profiles_csv  # noqa: E402
from config.schema import load_config  # noqa: E402
from sim.patterns import parse_pattern, pattern_workload  # noqa: E402
from sim.replay.run import ReplaySpec, replay  # noqa: E402
from sim.replay.spot_baselines import figures, run_spot_baseline  # noqa: E402
from sim.replay.spot_trace import read_spot_trace  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DAYS = {"31": "median day", "40": "upper-quartile day", "50": "lower-quartile day", "18": "no spot in any zone"}


def run(name: str, cfg: Any, profiles: Any, wl: Any, seconds: float, spec: ReplaySpec) -> dict[str, Any]:
    t0 = time.perf_counter()
    r = replay(cfg, profiles, wl, seconds, spec) if name.startswith("costscale") else \
        run_spot_baseline(name, cfg, profiles, wl, seconds, spec)
    f = figures(r)
    f["violations"] = len(r.ledger.violations)
    f["wall_s"] = round(time.perf_counter() - t0, 1)
    print(f"  {name}: {json.dumps(f)}", file=sys.stderr, flush=True)
    return f


def row(label: str, f: dict[str, Any], od: dict[str, Any], budget: float) -> str:
    sp = f.get("spot") or {}
    share = f"{100 * sp['spot_share']:.1f} %" if sp else "-"
    held = "yes" if f["violations"] == 0 and f["peak_cost_per_hour"] <= budget + BUDGET_EPS else "NO"
    return (f"| {label} | {f['cost_usd']:.2f} | {f['cost_usd'] / od['cost_usd']:.3f} | "
            f"{100 * f['slo_attainment']:.2f} % | {sp.get('preemptions', '-')} | "
            f"{sp.get('queries_lost_to_preemption', '-')} | {share} | {f['peak_cost_per_hour']:.3f} | {held} |")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--peak", type=float, default=20.0, help="the diurnal's peak q/s (trough a tenth of it)")
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--days", default="31,40,50,18", help="trace days (examples/traces/spot-aws3-dayNN.csv)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--write", action="store_true", help="write the 'spot' section of BENCHMARKS.md")
    a = ap.parse_args()
    cfg = load_config(ROOT / "examples" / "replay-spot.yaml")
    profiles = load_profiles_csv(cfg.profiles)
    pattern = f"diurnal:peak={a.peak:g},trough={a.peak / 10:g},period_h={a.hours:g}"
    seconds = a.hours * 3600.0
    wl = pattern_workload(parse_pattern(pattern), seconds, cfg.workload.batch_dist, seed=a.seed, max_batch=1000)
    t0 = time.perf_counter()
    days = [d.strip() for d in a.days.split(",") if d.strip()]
    print(f"{len(wl):,} queries; on_demand_only ...", file=sys.stderr, flush=True)
    od = run("on_demand_only", cfg, profiles, wl, seconds, ReplaySpec())
    results: dict[str, dict[str, Any]] = {}
    for d in days:
        spec = ReplaySpec(spot_trace=read_spot_trace(ROOT / "examples" / "traces" / f"spot-aws3-day{d}.csv"))
        print(f"day {d} ...", file=sys.stderr, flush=True)
        results[f"costscale day {d}"] = run("costscale", cfg, profiles, wl, seconds, spec)
        if d != "18":
            results[f"spothedge day {d}"] = run("spothedge", cfg, profiles, wl, seconds, spec)
        if d == days[0] and d != "18":
            over = cfg.model_copy(update={"spot": cfg.spot.model_copy(update={"overprovision": 1})})
            results[f"costscale overprovision 1 day {d}"] = run("costscale", over, profiles, wl, seconds, spec)
    wall = time.perf_counter() - t0
    cmd = "python bench/replay/spot_bench.py " + " ".join(shlex.quote(x) for x in sys.argv[1:])
    lines = ["## spot", "",
             f"Machine: {machine()}. Command: `{cmd.strip()}` ({wall:.0f} s in all).", "",
             f"`examples/replay-spot.yaml` (rm2, 2.5 $/hr, min_cost, every type `market: both`, spot over "
             f"us-east-1a, 1c, 1d, overprovision 0; spot billed at `config/spot_prices.csv`), `--pattern {pattern}` "
             f"over {a.hours:g} h ({len(wl):,} queries). Traces: `examples/traces/spot-aws3-dayNN.csv`, real AWS "
             "p3.2xlarge spot availability (SpotHedge artifact AWS3, 2023; README there), applied to every type.", "",
             "| run | cost $ | ÷ on_demand_only | SLO attainment | preemptions | queries lost | spot share | "
             "peak $/hr | budget held |", "|---|---|---|---|---|---|---|---|---|",
             row("on_demand_only", od, od, cfg.budget_per_hour)]
    for name, f in results.items():
        d = name.rsplit(" ", 1)[1]
        lines.append(row(f"{name} ({DAYS.get(d, 'day ' + d)})", f, od, cfg.budget_per_hour))
    lines.append("")
    for d in days:
        c, s = results.get(f"costscale day {d}"), results.get(f"spothedge day {d}")
        if c and s:
            lines.append(f"Day {d}: costscale ÷ SpotHedge {c['cost_usd'] / s['cost_usd']:.3f} in dollars, "
                         f"{100 * (c['slo_attainment'] - s['slo_attainment']):+.2f} points of attainment "
                         f"(SpotHedge's replica type {s['spot'].get('replica_type')}).")
    text = "\n".join(lines)
    print(text)
    if a.write:
        write_section("spot", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
