"""``costscale replay CONFIG (--trace CSV | --pattern NAME[:k=v,...]) [--hours H] [--seed N]
[--baselines] [--json] [--plot FILE.png]``: a day of traffic through the daemon's own loops on a
virtual clock, scored in dollars, SLO attainment and accuracy (:mod:`sim.replay`), optionally
against the baselines of :mod:`sim.replay_baselines`.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

import numpy as np

from config.errors import UsageError
from config.schema import Config
from daemon.commands._overrides import resolve
from daemon.commands._progress import Progress
from sim.patterns import parse_pattern, pattern_workload
from sim.replay import DEFAULT_BOOT_S, Fault, ReplaySpec, replay
from sim.replay_baselines import BASELINE_NAMES, PoolPlanner, run_baseline
from sim.replay_metrics import report
from sim.slo_check import slo_check
from sim.workload import Workload, read_trace_csv, trace_workload

#: a replay is refused (one line, exit 2) past this many queries (memory: ~100 bytes each)
MAX_REPLAY_QUERIES = 20_000_000


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("replay", help="replay a day of traffic through the control loop, in dollars and SLO")
    p.add_argument("config", metavar="CONFIG")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--trace", metavar="CSV", help="trace with columns timestamp, model, batch_size")
    src.add_argument("--pattern", metavar="NAME[:k=v,...]",
                     help="diurnal | step | macroburst | microburst, with parameters (README \"Replay\")")
    p.add_argument("--hours", type=float, help="simulated hours (default: the trace's span; a diurnal's period; 1)")
    p.add_argument("--seed", type=int, default=0, help="random seed of the pattern and sampled service (default 0)")
    p.add_argument("--model", metavar="M", help="config model to replay (default: the first)")
    p.add_argument("--service", choices=("mean", "sampled"), default="mean",
                   help="service times: profile mean, or lognormal fitted to p50/p99 (default mean)")
    p.add_argument("--boot-gpu-s", type=float, default=DEFAULT_BOOT_S["gpu"], help="GPU launch-to-ready s (90)")
    p.add_argument("--boot-cpu-s", type=float, default=DEFAULT_BOOT_S["cpu"], help="CPU launch-to-ready s (60)")
    p.add_argument("--outage", action="append", default=[], metavar="TYPE@START[-END]",
                   help="InsufficientCapacity for TYPE from START to END seconds (repeatable)")
    p.add_argument("--throttle", action="append", default=[], metavar="N@T",
                   help="the N cloud calls after T seconds are throttled (repeatable)")
    p.add_argument("--cold", action="store_true", help="start with no instances (default: the first pool is up)")
    p.add_argument("--baselines", action="store_true", help="also run " + ", ".join(BASELINE_NAMES))
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--plot", metavar="FILE.png", help="draw the timeline")
    p.set_defaults(func=run_replay)


def _workload(args: argparse.Namespace, cfg: Any, model: Any) -> tuple[Workload, float, str]:
    cmd = "replay"
    if args.hours is not None and not (math.isfinite(args.hours) and args.hours > 0):
        raise UsageError(f"{cmd}: --hours must be > 0")
    if args.trace:
        try:
            rows = read_trace_csv(args.trace)
        except ValueError as exc:
            raise UsageError(f"{cmd}: {exc}") from None
        names = {model.name} | ({model.application} if getattr(model, "application", None) else set())
        known = {m.name for m in cfg.models} | {m.application for m in cfg.models if getattr(m, "application", None)}
        unknown = sorted(set(rows.names) - known)
        if unknown:
            raise UsageError(f"{cmd}: {args.trace}: model {unknown[0]!r} is not in the config "
                             f"(known: {', '.join(sorted(known))})")
        keep = np.asarray([n in names for n in rows.names], dtype=bool)
        if not keep.any():
            raise UsageError(f"{cmd}: {args.trace}: no queries for model {model.name!r}")
        wl = trace_workload(rows, keep, origin=float(rows.times.min()))
        span = float(wl.arrivals[-1]) + 1.0 if len(wl) else 1.0
        hours = args.hours if args.hours is not None else span / 3600.0
        duration = hours * 3600.0
        cut = wl.arrivals < duration
        return Workload(wl.arrivals[cut], wl.batches[cut]), duration, f"trace {args.trace}"
    try:
        spec = parse_pattern(args.pattern)
    except ValueError as exc:
        raise UsageError(f"{cmd}: {exc}") from None
    hours = args.hours if args.hours is not None else spec.default_hours()
    try:
        wl = pattern_workload(spec, hours * 3600.0, cfg.workload.batch_dist, seed=args.seed,
                              max_batch=model.max_batch)
    except ValueError as exc:
        raise UsageError(f"{cmd}: {exc}") from None
    return wl, hours * 3600.0, f"pattern {spec.text()}"


def _faults(args: argparse.Namespace, types: set[str]) -> tuple[Fault, ...]:
    """--outage TYPE@START[-END] and --throttle N@T as injected faults; one line, exit 2, when bad."""
    out: list[Fault] = []
    for text in args.outage:
        itype, _, when = text.partition("@")
        start, _, end = when.partition("-")
        try:
            t0, t1 = float(start), (float(end) if end else math.inf)
        except ValueError:
            raise UsageError(f"replay: --outage {text!r}: give TYPE@START[-END] in seconds") from None
        if itype not in types:
            raise UsageError(f"replay: --outage {text!r}: {itype!r} is not an allowed type ({', '.join(sorted(types))})")
        if not (0 <= t0 < t1):
            raise UsageError(f"replay: --outage {text!r}: need 0 <= START < END")
        out.append(Fault(t0, "capacity", itype))
        if math.isfinite(t1):
            out.append(Fault(t1, "capacity_end", itype))
    for text in args.throttle:
        n, _, when = text.partition("@")
        try:
            k, t = int(n), float(when or 0)
        except ValueError:
            raise UsageError(f"replay: --throttle {text!r}: give N@T (calls, seconds)") from None
        if k < 1 or t < 0:
            raise UsageError(f"replay: --throttle {text!r}: need N >= 1 and T >= 0")
        out.append(Fault(t, "throttle", count=k))
    return tuple(sorted(out, key=lambda f: f.at_s))


def _bar(total_steps: int, label: str):  # type: ignore[no-untyped-def]
    bar = Progress(total_steps)
    state = {"k": 0}

    def tick(frac: float) -> None:
        while state["k"] < int(frac * total_steps):
            state["k"] += 1
            bar.step(label)
    return bar, tick


def not_replayed(cfg: Config) -> list[str]:
    """What the config turns on that this replay does not run (one line each): its figures are
    then those of the daemon without it."""
    out = []
    if cfg.model_scaling.accuracy_scaling.enabled:
        out.append("model_scaling.accuracy_scaling is not replayed here (the figures are without it); "
                   "`costscale accuracy replay` replays it on a fixed pool")
    if cfg.dispatcher.batching != "none":
        out.append(f"dispatcher.batching: {cfg.dispatcher.batching} is not replayed here (each query is its own call)")
    return out


def run_replay(args: argparse.Namespace) -> int:
    cmd = "replay"
    for flag in ("boot_gpu_s", "boot_cpu_s"):
        v = getattr(args, flag)
        if not (math.isfinite(v) and v >= 0):
            raise UsageError(f"{cmd}: --{flag.replace('_', '-')} must be >= 0")
    r = resolve(args, cmd)
    cfg = r.cfg
    model = cfg.model(r.model)
    for line in not_replayed(cfg):
        print(f"costscale: warning: {cmd}: {line}", file=sys.stderr)
    wl, duration, source = _workload(args, cfg, model)
    if len(wl) > MAX_REPLAY_QUERIES:
        raise UsageError(f"{cmd}: {len(wl):,} queries is over the limit of {MAX_REPLAY_QUERIES:,}; "
                         "replay fewer hours or a lower rate")
    boot = {"gpu": args.boot_gpu_s, "inferentia": args.boot_gpu_s, "cpu": args.boot_cpu_s}
    spec = ReplaySpec(model=model.name, service=args.service, seed=args.seed, boot_s=boot, warm_start=not args.cold,
                      faults=_faults(args, set(cfg.catalog())))
    runs = 1 + (len(BASELINE_NAMES) if args.baselines else 0)
    bar, tick = _bar(100 * runs, f"replay {model.name}")
    done = {"n": 0}

    def progress(frac: float) -> None:
        tick((done["n"] + frac) / runs)
    try:
        run = replay(cfg, r.profiles, wl, duration, spec, progress=progress)
        out = report(run, with_timeline=bool(args.plot))
        out["source"] = source
        if args.baselines:
            planner = PoolPlanner(cfg, r.profiles, slo_check)
            out["baselines"] = {}
            for name in BASELINE_NAMES:
                done["n"] += 1
                rep = report(run_baseline(name, cfg, r.profiles, wl, duration, spec, planner=planner))
                out["baselines"][name] = {k: rep[k] for k in ("cost_usd", "slo_attainment", "p99_ms",
                                                              "peak_cost_per_hour", "instance_hours", "decisions")}
    finally:
        bar.close()
    if args.plot:
        from sim.replay_plot import plot_replay

        try:
            plot_replay(run, out, args.plot)
        except OSError as exc:
            raise UsageError(f"{cmd}: cannot write {args.plot}: {exc.strerror or exc}") from None
    out.pop("timeline", None)     # drawn, not printed
    if args.json:
        print(json.dumps(out, sort_keys=True))
    else:
        _print(out)
        if args.plot:
            print(f"timeline drawn to {args.plot}")
    return 0


def _print(o: dict[str, Any]) -> None:
    p99 = "over QoS" if o["p99_ms"] is None else f"{o['p99_ms']:.1f} ms"
    print(f"replay {o['model']} ({o['source']}, {o['hours']:g} h, QoS {o['qos_ms']:g} ms)")
    print(f"  queries {o['queries']:,}: served {o['served']:,}, within SLO {o['within_slo']:,} "
          f"({100 * o['slo_attainment']:.2f} %), p99 {p99}")
    print(f"  cost ${o['cost_usd']:.4f}; peak {o['peak_cost_per_hour']:.4f} of {o['budget_per_hour']:g} $/hr"
          + (f"; BUDGET EXCEEDED {o['budget_violations']} time(s)" if o["budget_violations"] else ""))
    print("  instance-hours " + ", ".join(f"{t} {h:.3f}" for t, h in o["instance_hours"].items()))
    print("  decisions " + ", ".join(f"{k} {v}" for k, v in o["decisions"].items())
          + f"; plans {o['plans']}; wall {o['wall_s']:.1f} s")
    for name, b in (o.get("baselines") or {}).items():
        ratio = o["cost_usd"] / b["cost_usd"] if b["cost_usd"] > 0 else math.nan
        print(f"  {name:<14} ${b['cost_usd']:.4f} ({100 * b['slo_attainment']:.2f} % in SLO); "
              f"costscale/{name} {ratio:.2f}x")
    sys.stdout.flush()
