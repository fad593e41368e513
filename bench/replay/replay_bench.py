"""The replay yardstick (issue #12): costscale's control loop against the four baselines on a
diurnal day (trough:peak 1:10, the peak at 80 % of what the budget's best pool allows) and on a
macro-burst trace (flat phases at 20 % and 80 % of it, Proteus §6.3), for rm2 and dien at
2.5 $/hr; plus replay speed. Writes the "replay" section of BENCHMARKS.md.

    .venv/bin/python bench/replay/replay_bench.py [--hours 24] [--hours-by-model dien=6] [--burst-hours 6]
                                           [--models rm2,dien] [--budget 2.5] [--append]

``--hours`` below 24 compresses the day (the diurnal's period is the run): its ramps are then that
much steeper against the same 60-90 s boot delays, a harder test than a real day.
``--hours-by-model`` sets it for some models only (dien's day is ~4.6x rm2's queries).

Each model's figures, and the speed goal's, lie between their own markers inside the section
(``<!-- BEGIN replay dien -->``), each with the command that made them. ``--append`` keeps the
blocks of the models not run (and the speed goal's, run only when absent); without it the whole
section is rewritten from this run.
"""
from __future__ import annotations

import argparse
import re
import shlex
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402
import yaml  # noqa: E402

from bench._report import machine, read_section, write_section  # noqa: E402
from config.profiles import load_profiles_csv  # noqa: E402
from config.schema import Config  # noqa: E402
from sim.capacity import pool_capacity  # noqa: E402
from sim.patterns import PatternSpec, expected_queries, parse_pattern, pattern_workload, rate_function  # noqa: E402
from sim.policies import policy_factory  # noqa: E402
from sim.replay.run import DEFAULT_BOOT_S, ReplaySpec, replay  # noqa: E402
from sim.replay.baselines import BASELINE_NAMES, PoolPlanner, run_baseline  # noqa: E402
from sim.replay.outcomes import SERVED  # noqa: E402
from sim.replay.report import report  # noqa: E402
from sim.slo_check import slo_check  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
#: a macro-burst's misses counted against its step up: this long after each step (s)
STEP_WINDOW_S = 120.0
#: Kairos §7 QoS targets (ms)
QOS_MS = {"rm2": 350.0, "dien": 35.0, "ncf": 5.0, "wnd": 25.0, "mtwnd": 25.0}
#: a diurnal's miss counted as on a ramp up when the rate this much later is higher (s)
RAMP_LOOKAHEAD_S = 300.0
#: the sub-blocks of the section: ``<!-- BEGIN replay NAME -->`` ... ``<!-- END replay NAME -->``
BLOCK_RE = re.compile(r"<!-- BEGIN replay (\S+) -->\n(.*?)\n<!-- END replay \1 -->", re.S)
SPEED_BLOCK = "speed"


def config_for(model: str, budget: float) -> Config:
    raw = yaml.safe_load((ROOT / "examples" / "replay-rm2.yaml").read_text())
    raw["cluster"] = f"bench-{model}"
    raw["budget_per_hour"] = budget
    raw["models"] = [{"name": model, "onnx": "builtin:mlp", "qos_ms": QOS_MS[model], "max_batch": 1000}]
    raw["state_path"] = f"/tmp/costscale-bench-{model}.db"
    return Config.model_validate(raw)


def allowable(cfg: Config, profiles, planner: PoolPlanner) -> tuple[dict[str, int], float]:  # type: ignore[no-untyped-def]
    """The budget's best pool (max_throughput) and its allowable throughput (p99 <= QoS)."""
    pool = planner.pool("max_throughput", 0.0)
    m = cfg.models[0]
    res = pool_capacity(pool, m.profile_name, profiles, m.qos_ms, policy_factory("kairos", profiles, m.profile_name, pool),
                        batch_dist=cfg.workload.batch_dist, seed=0)
    return pool, float(res.allowable_qps)


def step_misses(run, low_s: float, high_s: float, after_s: float = STEP_WINDOW_S) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """A macro-burst run's missed queries (not served within the QoS) by when they arrived: the first
    minute, the ``after_s`` after each step up (low -> high), the rest."""
    q = run.qloop
    missed = ~((q.outcome == SERVED) & (q.latency <= q.qos_ms))
    phase = np.mod(q.arr, low_s + high_s)
    start = q.arr < 60.0
    step = ~start & (phase >= low_s) & (phase < low_s + after_s)
    return {"all": int(missed.sum()), "start": int((missed & start).sum()), "step": int((missed & step).sum()),
            "steps": int(np.ceil((q.arr.max() - low_s) / (low_s + high_s))) if q.n and q.arr.max() > low_s else 0}


def step_launches(run, low_s: float, high_s: float, duration_s: float,  # type: ignore[no-untyped-def]
                  after_s: float = STEP_WINDOW_S) -> list[tuple[float, int, float]]:
    """Per step up of a macro-burst: (seconds to the first launch, instances launched within
    ``after_s``, seconds to the last of them); (nan, 0, nan) for a step with no launch in it."""
    out = []
    for s in np.arange(low_s, duration_s, low_s + high_s):
        near = [(t - s, n) for t, _, n in run.launches if s <= t < s + after_s]
        out.append((near[0][0], sum(n for _, n in near), near[-1][0]) if near else (float("nan"), 0, float("nan")))
    return out


def ramp_misses(run, spec: PatternSpec, duration_s: float) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """A diurnal run's missed queries: all, the first minute's (the warm start's), and of the rest
    those that arrived while the rate was rising (higher :data:`RAMP_LOOKAHEAD_S` later) and the
    simulated day's hour (of 24) that held the most."""
    q = run.qloop
    missed = ~((q.outcome == SERVED) & (q.latency <= q.qos_ms))
    start = q.arr < 60.0
    t = q.arr[missed & ~start]
    rate = rate_function(spec, duration_s)
    rising = rate(np.minimum(t + RAMP_LOOKAHEAD_S, duration_s)) > rate(t)
    hour = np.floor(np.mod(t, spec.params["period_h"] * 3600.0) / (spec.params["period_h"] * 150.0)).astype(int)
    counts = np.bincount(hour, minlength=24)
    return {"all": int(missed.sum()), "start": int((missed & start).sum()), "rising": int(rising.sum()),
            "worst_hour": int(np.argmax(counts)), "worst_hour_misses": int(counts.max())}


def run_all(cfg: Config, profiles, pattern: str, hours: float, planner: PoolPlanner) -> list[tuple[str, dict]]:  # type: ignore[no-untyped-def]
    spec = parse_pattern(pattern)
    wl = pattern_workload(spec, hours * 3600.0, cfg.workload.batch_dist, seed=1, max_batch=cfg.models[0].max_batch)
    rows = []
    t0, c0 = time.perf_counter(), time.process_time()
    run = replay(cfg, profiles, wl, hours * 3600.0, ReplaySpec())
    rows.append(("costscale", report(run)))
    rows[-1][1]["cpu_s"] = time.process_time() - c0
    if spec.name == "macroburst":
        rows[-1][1]["step_misses"] = step_misses(run, spec.params["low_s"], spec.params["high_s"])
        rows[-1][1]["step_launches"] = step_launches(run, spec.params["low_s"], spec.params["high_s"], hours * 3600.0)
    elif spec.name == "diurnal":
        rows[-1][1]["ramp_misses"] = ramp_misses(run, spec, hours * 3600.0)
    print(f"  costscale: {rows[-1][1]['queries']:,} queries in {time.perf_counter() - t0:.0f} s "
          f"({rows[-1][1]['cpu_s']:.0f} s CPU)", flush=True)
    del run
    for name in BASELINE_NAMES:
        rows.append((name, report(run_baseline(name, cfg, profiles, wl, hours * 3600.0, ReplaySpec(), planner=planner))))
        print(f"  {name}: ${rows[-1][1]['cost_usd']:.2f}", flush=True)
    return rows


def step_note(ours: dict, cfg: Config, spec: PatternSpec) -> str:
    """Where costscale's macro-burst misses are (:func:`step_misses`) and how soon the fleet launched
    after each step up (:func:`step_launches`), in words."""
    m = ours["step_misses"]
    rest = m["all"] - m["start"] - m["step"]
    n = ours["queries"]
    launches = "; ".join(f"step {i + 1}: none" if k == 0 else f"step {i + 1}: first {a:.0f} s after it, "
                         f"{k} instance(s) within {STEP_WINDOW_S:g} s, the last at {b:.0f} s"
                         for i, (a, k, b) in enumerate(ours["step_launches"]))
    boots = ", ".join(f"{v:g} s {k.upper() if k != 'inferentia' else k}" for k, v in DEFAULT_BOOT_S.items())
    return (f"costscale's {m['all']:,} missed queries ({100 * m['all'] / n:.2f} % of all): {m['step']:,} in the "
            f"{STEP_WINDOW_S:g} s after the {m['steps']} step(s) up ({100 * m['step'] / n:.2f} %), {m['start']:,} in "
            f"the first minute ({100 * m['start'] / n:.2f} %: the run starts warm on the pool the config's declared "
            f"`expected_qps` ({cfg.workload.expected_qps:g} q/s) needs, as the live daemon does, and boots the rest), "
            f"{rest:,} elsewhere ({100 * rest / n:.2f} %). Launches after each "
            f"{spec.params['high'] / spec.params['low']:.3g}x step up: {launches}. A launched instance serves only "
            f"after its boot delay ({boots}), and until then the low phase's pool serves what it can and drops the "
            "rest; no launch made at the step can serve sooner. The static pools hold the high phase's capacity "
            "through the low phases, at their cost above.")


def ramp_note(ours: dict, spec: PatternSpec) -> str:
    """Where costscale's diurnal misses are (:func:`ramp_misses`), in words."""
    m = ours["ramp_misses"]
    n, day = ours["queries"], spec.params["period_h"]
    rest = m["all"] - m["start"]
    return (f"costscale's {m['all']:,} missed queries ({100 * m['all'] / n:.2f} % of all): {m['start']:,} in the "
            f"first minute (the warm start, as in the macro-burst below); of the other {rest:,}, {m['rising']:,} "
            f"arrived while the rate was rising (higher {RAMP_LOOKAHEAD_S:g} s later), and the day's hour "
            f"{m['worst_hour']}-{m['worst_hour'] + 1}"
            + (f" ({day * 60 / 24:g} minutes of the compressed day)" if day != 24 else "")
            + f" held the most, {m['worst_hour_misses']:,}.")


def table(rows: list[tuple[str, dict]]) -> str:
    ours = rows[0][1]
    out = ["| run | cost $ | costscale ÷ it | SLO attainment | p99 ms | peak $/hr | launches | plans |",
           "|---|---|---|---|---|---|---|---|"]
    for name, r in rows:
        ratio = ours["cost_usd"] / r["cost_usd"] if r["cost_usd"] > 0 else float("nan")
        p99 = "over QoS" if r["p99_ms"] is None else f"{r['p99_ms']:.1f}"
        out.append(f"| {name} | {r['cost_usd']:.2f} | {ratio:.2f} | {100 * r['slo_attainment']:.2f} % | {p99} | "
                   f"{r['peak_cost_per_hour']:.3f} | {r['decisions']['launch']} | {r['plans']} |")
    return "\n".join(out)


def speed_table(speed: list[tuple[str, str, float, int, float, float]]) -> str:
    lines = ["| model | trace | simulated h | queries | wall s | CPU s | queries per CPU s | × real time (CPU) |",
             "|---|---|---|---|---|---|---|---|"]
    for model, kind, hours, n, wall, cpu in speed:
        lines.append(f"| {model} | {kind} | {hours:g} | {n:,} | {wall:.1f} | {cpu:.1f} | {n / cpu:,.0f} | "
                     f"{hours * 3600 / cpu:,.0f} |")
    return "\n".join(lines)


def model_block(model: str, hours: float, burst_hours: float, budget: float, profiles, command: str) -> str:  # type: ignore[no-untyped-def]
    """One model's figures: both traces against the baselines, and the replay speed of costscale's runs."""
    cfg = config_for(model, budget)
    planner = PoolPlanner(cfg, profiles, slo_check)
    pool, allow = allowable(cfg, profiles, planner)
    peak = 0.8 * allow
    traces = [(f"diurnal:peak={peak:.4g},trough={peak / 10:.4g},period_h={hours:g}", hours),
              (f"macroburst:low={0.2 * allow:.4g},high={peak:.4g},low_s=1800,high_s=900", burst_hours)]
    parts = [f"### {model} (QoS {QOS_MS[model]:g} ms, budget {budget:g} $/hr)",
             f"Machine: {machine()}. Command: `{command}`."
             + (f" The day is compressed {24 / hours:g}x: the diurnal's period is the run ({hours:g} h), so its "
                f"ramps are {24 / hours:g}x steeper than a real day's against the same 60-90 s boot delays: harder, "
                "not easier, for an autoscaler that must boot capacity ahead of demand." if hours < 24 else ""),
             f"The budget's best pool {pool} allows {allow:.1f} q/s at p99 ≤ QoS; peak = 80 % of that = "
             f"{peak:.1f} q/s."]
    speed = []
    for pattern, h in traces:
        print(f"{model}: {pattern} over {h:g} h", flush=True)
        t0 = time.perf_counter()
        rows = run_all(cfg, profiles, pattern, h, planner)
        ours = rows[0][1]
        speed.append((model, pattern.split(":")[0], h, ours["queries"], ours["wall_s"], ours["cpu_s"]))
        parts.append(f"`--pattern {pattern}` over {h:g} h ({ours['queries']:,} queries; all runs "
                     f"{time.perf_counter() - t0:.0f} s):\n\n" + table(rows))
        if "step_misses" in ours:
            parts.append(step_note(ours, cfg, parse_pattern(pattern)))
        if "ramp_misses" in ours:
            parts.append(ramp_note(ours, parse_pattern(pattern)))
    parts.append("Replay speed (costscale's runs, one process; wall time on a machine shared with other work, so CPU "
                 "time is the figure):\n\n" + speed_table(speed))
    return "\n\n".join(parts)


def speed_goal_block(model: str, budget: float, profiles, command: str) -> str:  # type: ignore[no-untyped-def]
    """The speed goal's own trace: 24 h at 20 q/s mean, costscale only; CPU time besides wall time,
    since the machine may be shared."""
    cfg = config_for(model, budget)
    base = parse_pattern("diurnal:peak=10,trough=1,period_h=24")
    scale = 20.0 / (expected_queries(base, 86400.0) / 86400.0)
    spec = parse_pattern(f"diurnal:peak={10 * scale:.4g},trough={scale:.4g},period_h=24")
    print(f"speed goal: {model} {spec.text()} over 24 h", flush=True)
    wl = pattern_workload(spec, 86400.0, cfg.workload.batch_dist, seed=1, max_batch=cfg.models[0].max_batch)
    c0, w0 = time.process_time(), time.perf_counter()
    ours = report(replay(cfg, profiles, wl, 86400.0, ReplaySpec()))
    row = (model, f"`{spec.text()}`", 24.0, ours["queries"], time.perf_counter() - w0, time.process_time() - c0)
    return (f"### Replay speed goal\n\nMachine: {machine()}. Command: `{command}`. costscale's run only, one "
            "process; wall time on a machine shared with other work, so CPU time is the figure.\n\n"
            + speed_table([row]) + "\n\nGoal: 24 simulated hours at 20 q/s mean (~1.7 M queries) in under 3 "
            "minutes on one core (≥ 9,600 queries/s).")


def hours_by_model(text: str) -> dict[str, float]:
    """``dien=6,rm2=24`` -> {"dien": 6.0, "rm2": 24.0}."""
    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, val = part.partition("=")
        if not sep or name.strip() not in QOS_MS:
            raise argparse.ArgumentTypeError(f"bad {part!r}: give MODEL=HOURS, MODEL one of {', '.join(QOS_MS)}")
        out[name.strip()] = float(val)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hours", type=float, default=24.0, help="the diurnal's run and period (h)")
    ap.add_argument("--hours-by-model", type=hours_by_model, default={}, metavar="MODEL=H[,...]",
                    help="--hours for these models only")
    ap.add_argument("--burst-hours", type=float, default=6.0)
    ap.add_argument("--models", default="rm2,dien")
    ap.add_argument("--budget", type=float, default=2.5)
    ap.add_argument("--append", action="store_true",
                    help="keep the other models' blocks (and the speed goal's) in BENCHMARKS.md")
    args = ap.parse_args()
    command = shlex.join([".venv/bin/python", "bench/replay/replay_bench.py", *sys.argv[1:]])
    profiles = load_profiles_csv(None)
    section = (read_section("replay") or "") if args.append else ""
    old = {name: body for name, body in BLOCK_RE.findall(section)}
    if "### " in section and not old:
        print("--append: BENCHMARKS.md's replay section has no per-model blocks to keep", file=sys.stderr)
        return 2
    blocks = dict(old)
    models = [m for m in args.models.split(",") if m]
    for model in models:
        blocks[model] = model_block(model, args.hours_by_model.get(model, args.hours), args.burst_hours,
                                    args.budget, profiles, command)
    if SPEED_BLOCK not in blocks:
        blocks[SPEED_BLOCK] = speed_goal_block(models[0], args.budget, profiles, command)
    intro = ("costscale ÷ it: costscale's dollars over the run's (below 1: costscale spent less). Goals (issue #12): "
             "≤ 1.10 × hindsight at ≥ 99 % attainment on the diurnal; ≤ 0.75 × reactive at no lower attainment. "
             "hindsight is a reference (each 5-minute window's cheapest pool for its peak minute, known in advance, "
             "no boot delay), not a bound. Each model's block says the command and machine that made it.")
    order = [n for n in blocks if n != SPEED_BLOCK] + [SPEED_BLOCK]
    write_section("replay", "## Replay: costscale against the baselines (bench/replay/replay_bench.py)\n\n" + intro + "\n\n"
                  + "\n\n".join(f"<!-- BEGIN replay {n} -->\n{blocks[n]}\n<!-- END replay {n} -->" for n in order))
    print(f"wrote BENCHMARKS.md section 'replay' (ran: {', '.join(models)}; kept: "
          f"{', '.join(n for n in old if n not in models) or 'none'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
