"""``costscale replay CONFIG (--trace CSV | --pattern NAME[:k=v,...]) [--hours H] [--seed N]
[--spot-trace CSV] [--baselines] [--estimates] [--json] [--plot FILE.png]``: a day of traffic through
the daemon's own loops on a virtual clock, scored in dollars, SLO attainment and accuracy
(:mod:`sim.replay.run`), optionally against the baselines of :mod:`sim.replay.baselines`. The report's
``estimated`` names each model's workers that ran on an estimated profile (issue #29), and the summary
marks them ``~``. With spot markets (issue #28) the report has a ``spot`` section and the
``on_demand_only`` baseline (:mod:`sim.replay.spot_baselines`), and ``--spot-trace`` preempts spot instances
as a zone's availability trace says.
"""
from __future__ import annotations

from config.numbers import finite_float

import argparse
import json
import math
import sys
from typing import Any, Sequence

import numpy as np

from config.errors import UsageError
from config.profiles import ProfileTable
from config.schema import Config
from daemon.commands.common.overrides import add_quota_flag, resolve, with_estimates_allowed
from daemon.commands.common.progress import Progress
from daemon.commands.history import replay_history
from scaler.planner.estimate_gate import share_estimates
from sim.patterns import parse_pattern, pattern_workload
from sim.replay.run import DEFAULT_BOOT_S, Fault, ReplaySpec, replay
from sim.replay.baselines import BASELINE_NAMES, PoolPlanner, baseline_names, run_baseline
from sim.replay.report import report
from sim.replay.forecasting import shadow_line
from sim.slo_check import slo_check
from sim.replay.spot_baselines import SPOT_BASELINES, figures, run_spot_baseline, spot_enabled
from sim.replay.spot_trace import ANY_TYPE, SpotTrace, read_spot_trace
from sim.workload import Workload, read_trace_csv, trace_workload

#: a replay is refused (one line, exit 2) past this many queries (memory: ~100 bytes each)
MAX_REPLAY_QUERIES = 20_000_000


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("replay", help="replay a day of traffic through the control loop, in dollars and SLO")
    p.add_argument("config", metavar="CONFIG")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--trace", metavar="CSV", help="trace with columns timestamp, model, batch_size")
    src.add_argument("--pattern", metavar="NAME[:k=v,...]", action="append",
                     help="diurnal | step | macroburst | microburst, with parameters (README \"Replay\"); with "
                          "several models, model=NAME among them, once per model")
    p.add_argument("--hours", type=finite_float, help="simulated hours (default: the trace's span; a diurnal's period; 1)")
    p.add_argument("--seed", type=int, default=0, help="random seed of the pattern and sampled service (default 0)")
    p.add_argument("--model", metavar="M", help="replay only this model's queries (default: every model in the "
                   "trace or patterns; the others still hold their planned workers)")
    p.add_argument("--service", choices=("mean", "sampled"), default="mean",
                   help="service times: profile mean, or lognormal fitted to p50/p99 (default mean)")
    p.add_argument("--boot-gpu-s", type=finite_float, default=DEFAULT_BOOT_S["gpu"], help="GPU launch-to-ready s (90)")
    p.add_argument("--boot-cpu-s", type=finite_float, default=DEFAULT_BOOT_S["cpu"], help="CPU launch-to-ready s (60)")
    p.add_argument("--outage", action="append", default=[], metavar="TYPE@START[-END]",
                   help="InsufficientCapacity for TYPE from START to END seconds (repeatable)")
    p.add_argument("--throttle", action="append", default=[], metavar="N@T",
                   help="the N cloud calls after T seconds are throttled (repeatable)")
    p.add_argument("--cold", action="store_true", help="start with no instances (default: the first pool is up)")
    p.add_argument("--spot-trace", metavar="CSV", help="spot availability, timestamp_s,zone,instance_type,available "
                   "(0/1; instance_type * for every type): a zone at 0 preempts its spot instances with a 2-minute "
                   "notice and refuses spot launches (README \"Spot\")")
    p.add_argument("--baselines", action="store_true", help="also run " + ", ".join(BASELINE_NAMES)
                   + " (and fleet_only, accuracy_only with accuracy scaling on; spothedge with spot markets)")
    p.add_argument("--estimates", action="store_true",
                   help="plan with the allowed types where a model has only an estimated profile (config/type_estimates.csv), "
                        "as instance_types[].allow_estimates does; the report names them")
    add_quota_flag(p)
    p.add_argument("--history", metavar="CSV", help="each model's demand before the trace, timestamp,model,qps "
                   "(negative seconds before its start; README \"Forecasting\"): planned from with forecast.mode on")
    p.add_argument("--forecast", choices=("off", "shadow", "on"), help="forecast.mode for this replay (default: the config's)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--plot", metavar="FILE.png", help="draw the timeline")
    p.set_defaults(func=run_replay)


def _model_names(cfg: Any) -> dict[str, str]:
    """A trace row's name (a model's, its application's, or a pipeline's) → the config model (the
    pipeline: its queries run through its tasks, sim.replay.pipelines)."""
    out = {m.name: m.name for m in cfg.models}
    for m in cfg.models:
        if getattr(m, "application", None):
            out.setdefault(m.application, m.name)
    for p in getattr(cfg, "pipelines", ()):
        out[p.name] = p.name
    return out


def _max_batch(cfg: Any, name: str) -> int:
    """A model's max batch; a pipeline's: its root task model's."""
    for p in getattr(cfg, "pipelines", ()):
        if p.name == name:
            g = p.graph()
            return int(cfg.model(g.models[g.root]).max_batch)
    return int(cfg.model(name).max_batch)


def _pattern_model(text: str, cfg: Any, cmd: str) -> tuple[str | None, str]:
    """``NAME[:...,model=M,...]`` → (M or None, the pattern text without it)."""
    name, sep, rest = text.strip().partition(":")
    keep, model = [], None
    for part in rest.split(","):
        k, _, v = part.partition("=")
        if k.strip() == "model":
            model = v.strip()
        elif part.strip():
            keep.append(part.strip())
    if model is not None and model not in _model_names(cfg):
        raise UsageError(f"{cmd}: --pattern {text!r}: model {model!r} is not in the config "
                         f"(known: {', '.join(sorted(_model_names(cfg)))})")
    return (_model_names(cfg)[model] if model is not None else None), name + (":" + ",".join(keep) if keep else "")


def _workload(args: argparse.Namespace, cfg: Any, only: str | None) -> tuple[dict[str, Workload], float, str]:
    """Each model's workload (a trace's rows by model, or one --pattern per model), the duration
    and a description; ``only``: --model, a filter."""
    cmd = "replay"
    if args.hours is not None and not (math.isfinite(args.hours) and args.hours > 0):
        raise UsageError(f"{cmd}: --hours must be > 0")
    names = _model_names(cfg)
    if args.trace:
        try:
            rows = read_trace_csv(args.trace)
        except ValueError as exc:
            raise UsageError(f"{cmd}: {exc}") from None
        unknown = sorted(set(rows.names) - set(names))
        if unknown:
            raise UsageError(f"{cmd}: {args.trace}: model {unknown[0]!r} is not in the config "
                             f"(known: {', '.join(sorted(names))})")
        model_of = np.asarray([names[n] for n in rows.names], dtype=object)
        wanted = [m for m in dict.fromkeys(names.values()) if only is None or m == only]
        if only is not None and not (model_of == only).any():
            raise UsageError(f"{cmd}: {args.trace}: no queries for model {only!r}")
        origin = float(rows.times[np.isin(model_of, wanted)].min())
        loads = {m: trace_workload(rows, model_of == m, origin=origin) for m in wanted if (model_of == m).any()}
        last = max((float(wl.arrivals[-1]) for wl in loads.values() if len(wl)), default=0.0)
        hours = args.hours if args.hours is not None else (last + 1.0) / 3600.0
        duration = hours * 3600.0
        cut = {m: Workload(wl.arrivals[wl.arrivals < duration], wl.batches[wl.arrivals < duration])
               for m, wl in loads.items()}
        return cut, duration, f"trace {args.trace}"
    specs: list[tuple[str, Any]] = []
    for text in args.pattern:
        model, rest = _pattern_model(text, cfg, cmd)
        if model is None:
            if len(cfg.models) > 1 and only is None:
                raise UsageError(f"{cmd}: --pattern {text!r}: the config has {len(cfg.models)} models: add "
                                 "model=NAME to each pattern (or --model NAME)")
            model = only or cfg.models[0].name
        if any(m == model for m, _ in specs):
            raise UsageError(f"{cmd}: --pattern: model {model!r} has two patterns")
        try:
            specs.append((model, parse_pattern(rest)))
        except ValueError as exc:
            raise UsageError(f"{cmd}: {exc}") from None
    if only is not None:
        specs = [(m, sp) for m, sp in specs if m == only]
        if not specs:
            raise UsageError(f"{cmd}: no --pattern for model {only!r}")
    hours = args.hours if args.hours is not None else max(sp.default_hours() for _, sp in specs)
    loads = {}
    for k, (model, sp) in enumerate(specs):
        try:       # the first pattern draws from --seed as before; each further one its own stream
            loads[model] = pattern_workload(sp, hours * 3600.0, cfg.workload.batch_dist,
                                            seed=args.seed if k == 0 else [args.seed, k],
                                            max_batch=_max_batch(cfg, model))
        except ValueError as exc:
            raise UsageError(f"{cmd}: {exc}") from None
    text = "; ".join(f"{sp.text()}" + (f" for {m}" if len(cfg.models) > 1 or cfg.pipelines else "") for m, sp in specs)
    return loads, hours * 3600.0, f"pattern {text}"


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


def _spot_trace(args: argparse.Namespace, cfg: Config) -> SpotTrace | None:
    """--spot-trace, read and checked against the config; one line, exit 2, when it does not fit."""
    if not args.spot_trace:
        return None
    if not spot_enabled(cfg):
        raise UsageError("replay: --spot-trace: no instance type may run spot (set instance_types[].market: spot "
                         "or both, and spot.zones)")
    try:
        trace = read_spot_trace(args.spot_trace)
    except ValueError as exc:
        raise UsageError(f"replay: --spot-trace: {exc}") from None
    zones = set(cfg.spot.zones) if cfg.spot is not None else set()
    bad = [z for z in trace.zones if z not in zones]
    if bad:
        raise UsageError(f"replay: --spot-trace {args.spot_trace}: zone {bad[0]} is not in spot.zones "
                         f"({', '.join(sorted(zones))})")
    allowed = {t.type for t in cfg.instance_types}
    bad = [t for t in trace.types if t != ANY_TYPE and t not in allowed]
    if bad:
        raise UsageError(f"replay: --spot-trace {args.spot_trace}: instance type {bad[0]} is not allowed "
                         f"({', '.join(sorted(allowed))}, or * for every type)")
    return trace


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
    acc = cfg.model_scaling.accuracy_scaling
    if acc.enabled and not any(m.family for m in cfg.models):
        out.append("model_scaling.accuracy_scaling: no model names a variant family (models[].family), so nothing "
                   "is accuracy-scaled in this replay")
    return out


def run_replay(args: argparse.Namespace) -> int:
    cmd = "replay"
    for flag in ("boot_gpu_s", "boot_cpu_s"):
        v = getattr(args, flag)
        if not (math.isfinite(v) and v >= 0):
            raise UsageError(f"{cmd}: --{flag.replace('_', '-')} must be >= 0")
    r = resolve(args, cmd)      # an unknown --model: one line
    cfg = with_estimates_allowed(r.cfg) if args.estimates else r.cfg
    if args.forecast is not None:     # a what-if over forecast.mode (issue #39)
        cfg = cfg.model_copy(update={"forecast": cfg.forecast.model_copy(update={"mode": args.forecast})})
    only = r.model if args.model else None
    for line in not_replayed(cfg):
        print(f"costscale: warning: {cmd}: {line}", file=sys.stderr)
    wl, duration, source = _workload(args, cfg, only)
    total = sum(len(w) for w in wl.values())
    if total > MAX_REPLAY_QUERIES:
        raise UsageError(f"{cmd}: {total:,} queries is over the limit of {MAX_REPLAY_QUERIES:,}; "
                         "replay fewer hours or a lower rate")
    boot = {"gpu": args.boot_gpu_s, "inferentia": args.boot_gpu_s, "cpu": args.boot_cpu_s}
    spec = ReplaySpec(service=args.service, seed=args.seed, boot_s=boot, warm_start=not args.cold,
                      faults=_faults(args, set(cfg.catalog())), spot_trace=_spot_trace(args, cfg),
                      history=replay_history(args.history, cfg) if args.history else None)
    names = baseline_names(cfg) if args.baselines else ()
    spot_names = ("on_demand_only",) + (SPOT_BASELINES[1:] if args.baselines else ()) if spot_enabled(cfg) else ()
    runs = 1 + len(names) + len(spot_names)
    bar, tick = _bar(100 * runs, f"replay {'+'.join(wl)}")
    done = {"n": 0}

    def progress(frac: float) -> None:
        tick((done["n"] + frac) / runs)
    try:
        try:
            run = replay(cfg, r.profiles, wl, duration, spec, progress=progress)
        except ValueError as exc:      # what the config and the workload cannot replay together
            raise UsageError(f"{cmd}: {exc}") from None
        out = report(run, with_timeline=bool(args.plot))
        out["source"] = source
        out["estimated"] = replay_estimates(cfg, r.profiles, run.targets)
        if spec.history is not None:     # what --history held: measured minutes per series
            out["history_minutes"] = {m: h.known for m, h in sorted(spec.history.items())}
        if args.baselines:
            planner = PoolPlanner(cfg, r.profiles, slo_check)
            out["baselines"] = {}
            for name in names:
                done["n"] += 1
                rep = report(run_baseline(name, cfg, r.profiles, wl, duration, spec, planner=planner))
                out["baselines"][name] = {k: rep[k] for k in ("cost_usd", "slo_attainment", "p99_ms",
                                                              "peak_cost_per_hour", "instance_hours", "decisions",
                                                              "models", "accuracy")}
        for name in spot_names:      # on_demand_only: costscale without spot; spothedge (--baselines)
            done["n"] += 1
            try:
                got = figures(run_spot_baseline(name, cfg, r.profiles, wl, duration, spec))
            except ValueError as exc:
                raise UsageError(f"{cmd}: {name}: {exc}") from None
            if name == "on_demand_only":
                out["on_demand_only"] = got
                if out.get("spot") is not None and got["cost_usd"]:
                    out["spot"]["cost_vs_on_demand_only"] = round(out["cost_usd"] / float(got["cost_usd"]), 6)
            else:
                out.setdefault("baselines", {})[name] = got
    finally:
        bar.close()
    if args.plot:
        from sim.replay.plot import plot_replay

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


def replay_estimates(cfg: Config, profiles: ProfileTable, targets: Sequence[Any]) -> dict[str, dict[str, str]]:
    """Model -> type -> basis: each model's workers, in any target of the replay, planned from an
    estimated profile (issue #29: its figures then rest on that estimate, not a measurement)."""
    out: dict[str, dict[str, str]] = {}
    for tc in targets:
        for m, per in share_estimates(cfg, profiles, tc.shares).items():
            out.setdefault(m, {}).update({t: e.basis for t, e in per.items()})
    return {m: dict(sorted(per.items())) for m, per in sorted(out.items())}


def _print(o: dict[str, Any]) -> None:
    p99 = "over QoS" if o["p99_ms"] is None else f"{o['p99_ms']:.1f} ms"
    qos = f", QoS {o['qos_ms']:g} ms" if o["qos_ms"] is not None else ""
    print(f"replay {o['model']} ({o['source']}, {o['hours']:g} h{qos})")
    print(f"  queries {o['queries']:,}: served {o['served']:,}, within SLO {o['within_slo']:,} "
          f"({100 * o['slo_attainment']:.2f} %)" + (f", p99 {p99}" if o["qos_ms"] is not None else ""))
    if len(o["models"]) > 1:
        for m, f in o["models"].items():
            mp = "over QoS" if f["p99_ms"] is None else f"{f['p99_ms']:.1f} ms"
            print(f"  {m:<10} {f['queries']:,} queries, {100 * f['slo_attainment']:.2f} % within its "
                  f"{f['qos_ms']:g} ms, p99 {mp}")
    for name, f in (o.get("pipelines") or {}).items():
        pp = "-" if f["p99_ms"] is None else f"{f['p99_ms']:.1f} ms"
        print(f"  pipeline {name}: {f['queries']:,} queries end to end, {100 * f['slo_attainment']:.2f} % within its "
              f"{f['slo_ms']:g} ms, {f['dropped_early']:,} dropped early, p99 {pp}; fan-out "
              + ", ".join(f"{e} {v:g}" for e, v in f["measured_factors"].items())
              + (f"; end-to-end accuracy {100 * f['accuracy']:.2f} % (top {100 * f['top_accuracy']:.2f} %)"
                 if f.get("accuracy") is not None else ""))
        sc = f.get("scaling") or {}
        if sc.get("scaling") == "loki":
            print(f"    Loki's round: {sc['rounds']} plans ({sc['accuracy_steps']} by accuracy scaling), "
                  f"{sc['moves']} worker moves between tasks, {sc['swaps']} variant swaps; most workers "
                  + ", ".join(f"{t} {n}" for t, n in sc["most_workers"].items()))
    print(f"  cost ${o['cost_usd']:.4f}; peak {o['peak_cost_per_hour']:.4f} of {o['budget_per_hour']:g} $/hr"
          + (f"; BUDGET EXCEEDED {o['budget_violations']} time(s)" if o["budget_violations"] else ""))
    print("  instance-hours " + ", ".join(f"{t} {h:.3f}" for t, h in o["instance_hours"].items()))
    for m, per in (o.get("estimated") or {}).items():
        print(f"  ~ {m} ran on estimated profiles, not measurements: "
              + "; ".join(f"{t} ({basis})" for t, basis in per.items()))
    print("  decisions " + ", ".join(f"{k} {v}" for k, v in o["decisions"].items())
          + f"; plans {o['plans']}; wall {o['wall_s']:.1f} s")
    for m, f in (o.get("forecast") or {}).items():
        cov = "-" if f["covered"] is None else f"{100 * f['covered']:.1f} %"
        print(f"  forecast {m} ({f['mode']}, {f['forecaster']}, {f['lead_s']:.0f} s lead): {f['minutes_forecast']} of "
              f"{f['minutes']} minutes forecast, {cov} of them at or below it; {f['held_back']} plan(s) held back")
    sh = o.get("forecast_shadow")
    if sh:
        print("  " + shadow_line(sh))
    sp = o.get("spot")
    if sp:
        print(f"  spot: {100 * sp['spot_share']:.1f} % of instance-hours, {sp['preemptions']} preemption(s), "
              f"{sp['queries_lost_to_preemption']} queries lost to them ({sp['queries_re_run']} re-run), "
              f"{sp['fallback_hours']:.3f} on-demand fallback hours; $ spot {sp['cost_usd']['spot']:.4f}, "
              f"on-demand {sp['cost_usd']['on_demand']:.4f}")
    od = o.get("on_demand_only")
    if od:
        print(f"  on_demand_only ${od['cost_usd']:.4f} ({100 * od['slo_attainment']:.2f} % in SLO); "
              f"costscale/on_demand_only {o['cost_usd'] / od['cost_usd'] if od['cost_usd'] else math.nan:.2f}x")
    acc = o["accuracy"]
    for app, a in (acc.get("applications") or {}).items():
        print(f"  accuracy {app}: mean {a['mean']:.2f} % of the top {a['top']:.2f} %; max drop "
              f"{a['max_drop_points']:.2f} points; {a['minutes_below_full']} minute(s) below full; {a['swaps']} swaps")
    for name, b in (o.get("baselines") or {}).items():
        ratio = o["cost_usd"] / b["cost_usd"] if b["cost_usd"] > 0 else math.nan
        drop = b.get("accuracy", {}).get("max_drop_points", 0.0)
        print(f"  {name:<14} ${b['cost_usd']:.4f} ({100 * b['slo_attainment']:.2f} % in SLO"
              + (f", max drop {drop:.2f} points" if acc.get("variants_replayed") else "")
              + f"); costscale/{name} {ratio:.2f}x")
    sys.stdout.flush()
