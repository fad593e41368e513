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

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench._report import machine, write_section  # noqa: E402
from config.profiles import load_profiles_csv  # noqa: E402
from config.schema import Config, load_config  # noqa: E402
from sim.patterns import parse_pattern, pattern_workload  # noqa: E402
from sim.replay.run import ReplaySpec, replay  # noqa: E402
from sim.replay.baselines import run_baseline  # noqa: E402
from sim.replay.report import report  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "replay-accuracy.yaml"
APP = "resnet"          # the example's one application
RUNS = (("costscale (both loops)", None), ("fleet_only", "fleet_only"), ("accuracy_only", "accuracy_only"),
        ("hindsight (full accuracy)", "hindsight"))


def _met(ok: bool) -> str:
    return "met" if ok else "**not met**"


def goals(res: dict[tuple[str, str | None], dict]) -> str:  # type: ignore[type-arg]
    """The issue's goals against this run's rows (figures from ``res``: (case, baseline) -> report)."""
    def fig(case: str, base: str | None = None) -> tuple[float, float, float]:
        r = res[(case, base)]
        return 100 * r["slo_attainment"], r["accuracy"]["max_drop_points"], r["cost_usd"]
    att1, drop1, usd1 = fig("H = cap")
    att2, drop2, _ = fig("H = 2·cap")
    _, drop_acc, usd_acc = fig("H = cap", "accuracy_only")
    att_hind, _, usd_hind = fig("H = cap", "hindsight")
    att_fleet = fig("H = cap", "fleet_only")[0]
    acc_fleet = res[("H = cap", "fleet_only")]["accuracy"]["applications"][APP]["mean"]
    viol = sum(r["budget_violations"] for r in res.values())
    return (
        "Goals (issue #25) against these rows:\n\n"
        f"- **H = cap:** ≥ 99.9 % within SLO: {_met(att1 >= 99.9)} ({att1:.2f} %). Max drop ≤ 4 points: "
        f"{_met(drop1 <= 4.0)} ({drop1:.2f}). Until the new instances serve (launch + 60 s boot + 1 s load) the "
        "low phase's pool, planned for 0.25·cap × 1.5, carries all of H: each worker alone on its queue holds "
        "resnet-34 but not resnet-50 at that rate within the SLO's p99, so that minute is served near "
        "resnet-34's 73.31 %, about 5 points down, whatever the round plans. `accuracy_only` (the budget's "
        f"pool held all day) drops {drop_acc:.2f} points at {usd_acc / usd1:.2f}x the dollars. Dollars ≤ 1.10x "
        f"the full-accuracy hindsight: {_met(usd1 <= 1.10 * usd_hind)} ({usd1 / usd_hind:.2f}x): hindsight "
        "switches pools every 5 minutes with no boot delay and no scale-in window, and serves "
        f"{att_hind:.2f} % doing it.\n"
        f"- **H = 2·cap:** ≥ 99.9 %: {_met(att2 >= 99.9)} ({att2:.2f} %: the misses fall in the seconds before "
        f"the first swap serves); max drop ≤ 5: {_met(drop2 <= 5.0)} ({drop2:.2f}), bounded the same way (before "
        f"the boot only resnet-18, 69.76 %, holds the rate); the budget held: {_met(viol == 0)}.\n"
        f"- `fleet_only` is costscale with accuracy scaling off, INFaaS serving the family: {att_fleet:.2f} % at "
        f"H = cap at a mean {acc_fleet:.2f} % (getVariant takes any variant a query allows; these name no "
        "minimum). The issue expected about 97.5 % from the rm2 replay (the fleet alone at full accuracy, "
        "which this row showed before INFaaS was replayed: 90.32 % at H = cap). getVariant binds each query to "
        "a variant at admission, by its workers' load (recent busy time, the call under way, the queries "
        "waiting for their variants): until the new instances serve, the low phase's pool is over capacity "
        "and the queries bound to each variant queue behind it, where the accuracy round plans the pool's "
        "variants for the whole rate at once.\n")


def run(cfg: Config, pattern: str, minutes: float, baseline: str | None = None) -> dict:  # type: ignore[type-arg]
    wl = pattern_workload(parse_pattern(pattern), minutes * 60.0, cfg.workload.batch_dist, seed=0,
                          max_batch=cfg.model(APP).max_batch)
    t0 = time.perf_counter()
    profiles = load_profiles_csv(None)
    if baseline is None:
        r = replay(cfg, profiles, wl, minutes * 60.0, ReplaySpec())
    else:
        r = run_baseline(baseline, cfg, profiles, wl, minutes * 60.0, ReplaySpec())
    rep = report(r)
    rep["wall_s"] = round(time.perf_counter() - t0, 1)
    return rep


def replay_speed(cfg: Config, minutes: float, qps: float = 100.0) -> str:
    """The issue's speed goal: a steady ``qps`` for ``minutes``, the model loop on, in both modes; CPU
    seconds of this process (the figure on a machine shared with other work)."""
    pattern = f"macroburst:low={qps:g},high={qps:g},low_s=600,high_s=300"
    off = cfg.model_copy(update={"model_scaling": cfg.model_scaling.model_copy(update={
        "accuracy_scaling": cfg.model_scaling.accuracy_scaling.model_copy(update={"enabled": False})})})
    out, ratios = [], []
    for label, c in (("accuracy scaling on (the accuracy round)", cfg), ("accuracy scaling off (INFaaS: getVariant per query)", off)):
        t0 = time.process_time()
        r = run(c, pattern, minutes)
        cpu = time.process_time() - t0
        ratios.append(minutes * 60.0 / cpu)
        out.append(f"{label}: {ratios[-1]:.0f}x real time ({r['queries']:,} queries, {cpu:.1f} CPU s)")
        print(out[-1], flush=True)
    return (f"\nReplay speed at a steady {qps:g} q/s for {minutes:g} minutes, the model loop on (goal: "
            f"≥ 480x real time: {_met(ratios[0] >= 480)}): " + "; ".join(out) + ".\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cap", type=float, default=108.5, help="the budget pool's capacity at full accuracy (q/s)")
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    low = 0.25 * args.cap
    cfg = load_config(EXAMPLE)
    # declared at the low phase's rate: the cluster has been serving it when the trace starts
    cfg = cfg.model_copy(update={"models": [m.model_copy(update={"expected_qps": low}) if m.name == APP else m
                                            for m in cfg.models]})
    rows = []
    res: dict[tuple[str, str | None], dict] = {}  # type: ignore[type-arg]
    for label, high in (("H = cap", args.cap), ("H = 2·cap", 2 * args.cap)):
        pattern = f"macroburst:low={low:g},high={high:g},low_s=600,high_s=300"
        for name, base in RUNS:
            r = res[(label, base)] = run(cfg, pattern, args.minutes, base)
            a = r["accuracy"]
            app = a.get("applications", {}).get(APP, {})
            rows.append(f"| {label} | {name} | {100 * r['slo_attainment']:.2f} % | ${r['cost_usd']:.4f} | "
                        f"{app.get('mean', 78.312):.2f} | {a['max_drop_points']:.2f} | {a['minutes_below_full']} | "
                        f"{r['peak_cost_per_hour']:.3f} | {r['budget_violations']} | {r['wall_s']} |")
            print(rows[-1], flush=True)
    speed = replay_speed(cfg, args.minutes)
    md = ("## Both loops on one clock: the fleet and the accuracy round through a burst (bench/replay/both_loops_bench.py)\n\n"
          f"Machine: {machine()}. Command: `.venv/bin/python bench/replay/both_loops_bench.py --cap {args.cap:g} "
          f"--minutes {args.minutes:g}`. `examples/replay-accuracy.yaml`: the resnet family as one application "
          "(SLO 1 s, 3 $/hr, min_cost, headroom 0.5), planned at resnet-152 (78.31 %); accuracy scaling in plan "
          f"mode. cap = {args.cap:g} q/s (`costscale capacity examples/replay-accuracy.yaml --pool r5n.large=20`, "
          "the largest pool within the budget); pattern `macroburst:low=0.25·cap,high=H,low_s=600,high_s=300`; "
          "boot 60 s (CPU types) / 90 s (GPU), a variant swap loads for 1 s; the declared rate is the low phase's "
          "(the cluster has been serving it). `fleet_only`: costscale with accuracy scaling off; `accuracy_only`: "
          "the budget's max-throughput pool held, the accuracy round on; `hindsight`: per 5 minutes the cheapest "
          "pool for that window's peak at full accuracy, known in advance, no boot delay. Max drop: the largest "
          "drop of a 1-minute mean of served accuracy below resnet-152, in points.\n\n"
          "| case | run | within SLO | dollars | mean accuracy % | max drop (points) | minutes below full | "
          "peak $/hr | budget violations | wall s |\n|---|---|---|---|---|---|---|---|---|---|\n"
          + "\n".join(rows) + "\n\n" + goals(res) + speed)
    if not args.no_write:
        write_section("both-loops", md)


if __name__ == "__main__":
    main()
