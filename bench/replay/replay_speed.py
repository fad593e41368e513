"""The replay's speed goal (issue #39): × real time of two replays with both loops on (the fleet loop
and the model loop), in one process, CPU time beside wall time (the machine may be shared):

- ``rm2-day``: rm2 alone on ``examples/replay-rm2.yaml`` at 2.5 $/hr, a diurnal day compressed to
  ``--hours`` (6), its peak 80 % of the budget's best pool (``replay_bench.py --hours 6``'s day);
- ``infaas``: ``--minutes`` (30) of the resnet family of ``examples/replay-accuracy.yaml`` at a steady
  100 q/s with accuracy scaling off, INFaaS's getVariant per query (``both_loops_bench.py``'s speed row).

    PYTHONPATH=. .venv/bin/python bench/replay/replay_speed.py [--hours 6] [--minutes 30] [--only rm2-day,infaas]
                                                             [--profile DIR] [--top 25]

``--profile DIR`` runs each replay under cProfile (slower: the ratios printed are then the profiled
run's) and writes ``DIR/NAME.prof`` and the top functions by cumulative and by own time. Each run
prints its dollars, attainment and plans, which a change meant to be faster must leave as they were.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from config.profiles import load_profiles_csv  # noqa: E402
from config.schema import Config, load_config  # noqa: E402
from sim.patterns import parse_pattern, pattern_workload  # noqa: E402
from sim.replay.report import report  # noqa: E402
from sim.replay.run import ReplayRun, ReplaySpec, replay  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
#: the rm2 day's peak: 80 % of the budget's best pool at 2.5 $/hr (replay_bench.py's ``allowable``: 134.6 q/s)
RM2_PEAK = 107.7
FAMILY = "resnet"          # examples/replay-accuracy.yaml's one application
FAMILY_QPS = 100.0


def rm2_day(hours: float) -> tuple[Config, str, float]:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from replay_bench import config_for  # noqa: PLC0415   (the bench's rm2 config)
    return config_for("rm2", 2.5), f"diurnal:peak={RM2_PEAK:g},trough={RM2_PEAK / 10:g},period_h={hours:g}", hours * 3600.0


def infaas_family(minutes: float) -> tuple[Config, str, float]:
    cfg = load_config(ROOT / "examples" / "replay-accuracy.yaml")
    acc = cfg.model_scaling.accuracy_scaling.model_copy(update={"enabled": False})
    cfg = cfg.model_copy(update={"model_scaling": cfg.model_scaling.model_copy(update={"accuracy_scaling": acc}),
                                 # as both_loops_bench.py: declared at its low phase's rate (0.25 of 108.5 q/s)
                                 "models": [m.model_copy(update={"expected_qps": 0.25 * 108.5}) if m.name == FAMILY
                                            else m for m in cfg.models]})
    return cfg, f"macroburst:low={FAMILY_QPS:g},high={FAMILY_QPS:g},low_s=600,high_s=300", minutes * 60.0


def run_one(name: str, cfg: Config, pattern: str, duration_s: float, seed: int,
            profile_dir: Path | None, top: int) -> dict[str, float]:
    model = cfg.models[0]
    wl = pattern_workload(parse_pattern(pattern), duration_s, cfg.workload.batch_dist, seed=seed,
                          max_batch=model.max_batch)
    profiles = load_profiles_csv(None)
    prof = cProfile.Profile() if profile_dir is not None else None
    c0, w0 = time.process_time(), time.perf_counter()
    if prof is not None:
        prof.enable()
    run: ReplayRun = replay(cfg, profiles, wl, duration_s, ReplaySpec())
    if prof is not None:
        prof.disable()
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    rep = report(run)
    out = {"queries": float(len(wl)), "cpu_s": cpu, "wall_s": wall, "x_cpu": duration_s / cpu,
           "x_wall": duration_s / wall, "usd": float(rep["cost_usd"]), "att": float(rep["slo_attainment"]),
           "plans": float(rep["plans"])}
    print(f"{name}: `{pattern}` over {duration_s / 3600:g} h, {len(wl):,} queries: {out['x_cpu']:.0f}x real time "
          f"by CPU ({cpu:.1f} s), {out['x_wall']:.0f}x by wall ({wall:.1f} s); ${rep['cost_usd']}, "
          f"{100 * out['att']:.4f} % within SLO, {rep['plans']} plans", flush=True)
    if prof is not None and profile_dir is not None:
        profile_dir.mkdir(parents=True, exist_ok=True)
        prof.dump_stats(str(profile_dir / f"{name}.prof"))
        for key in ("cumulative", "tottime"):
            buf = io.StringIO()
            pstats.Stats(prof, stream=buf).strip_dirs().sort_stats(key).print_stats(top)
            (profile_dir / f"{name}-{key}.txt").write_text(buf.getvalue())
        print(f"  profile: {profile_dir}/{name}.prof, {name}-cumulative.txt, {name}-tottime.txt", flush=True)
    return out


CASES: dict[str, Callable[[argparse.Namespace], tuple[Config, str, float]]] = {
    "rm2-day": lambda a: rm2_day(a.hours),
    "infaas": lambda a: infaas_family(a.minutes),
}
SEEDS = {"rm2-day": 1, "infaas": 0}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hours", type=float, default=6.0, help="the rm2 day's length and period (h)")
    ap.add_argument("--minutes", type=float, default=30.0, help="the family's run (min)")
    ap.add_argument("--only", default="", help=f"comma-separated subset of {','.join(CASES)}")
    ap.add_argument("--profile", type=Path, default=None, metavar="DIR", help="run under cProfile, stats to DIR")
    ap.add_argument("--top", type=int, default=25, help="functions listed per profile ordering")
    args = ap.parse_args(argv)
    names = [n for n in args.only.split(",") if n] or list(CASES)
    bad = [n for n in names if n not in CASES]
    if bad:
        print(f"unknown case {', '.join(bad)} (known: {', '.join(CASES)})", file=sys.stderr)
        return 2
    got = {}
    for name in names:
        cfg, pattern, dur = CASES[name](args)
        got[name] = run_one(name, cfg, pattern, dur, SEEDS[name], args.profile, args.top)
    print("| replay | queries | CPU s | wall s | × real time (CPU) | × real time (wall) | $ | within SLO | plans |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, f in got.items():
        print(f"| {name} | {f['queries']:,.0f} | {f['cpu_s']:.1f} | {f['wall_s']:.1f} | {f['x_cpu']:.0f} | "
              f"{f['x_wall']:.0f} | {f['usd']:.6f} | {100 * f['att']:.4f} % | {f['plans']:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
