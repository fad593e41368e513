"""``costscale pipeline plan``: Loki's two steps (:mod:`variants.pipelines.planner`) for one of the
config's pipelines over a pool: which variant of each task runs on how many workers of which type,
at what batch, how the queries are routed along the augmented graph's paths, what is served and at
what end-to-end accuracy.

    costscale pipeline plan CONFIG [--pipeline NAME] --demand QPS [--pool TYPE=N,...] [--json]

``--pool`` defaults to the config's ``pinned_pool``. Bad input: one line, exit 2.
"""
from __future__ import annotations

import argparse
import json
import math

from config.errors import UsageError
from daemon.commands.common.overrides import parse_counts
from scaler.planner.pools import pool_text
from variants.pipelines.planner import PipelinePlan, plan_pipeline

CMD = "pipeline plan"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("pipeline", help="inference pipelines (Loki): plan a pipeline's workers and routing")
    psub = p.add_subparsers(dest="pipeline_command", metavar="ACTION", parser_class=type(p))
    psub.required = True
    plan = psub.add_parser("plan", help="hardware scaling at the top variants, else accuracy scaling (Loki §4)")
    plan.add_argument("config", metavar="CONFIG")
    plan.add_argument("--pipeline", metavar="NAME", help="the pipeline (default: the config's only one)")
    plan.add_argument("--demand", required=True, metavar="QPS", help="queries per second entering the root task")
    plan.add_argument("--pool", metavar="TYPE=N,...", help="the workers (default: the config's pinned_pool)")
    plan.add_argument("--json", action="store_true", help="print one JSON object")
    plan.set_defaults(func=run_plan)


def run_plan(args: argparse.Namespace) -> int:
    from config.profiles import load_profiles_csv
    from config.schema import load_config
    from variants.families.applications import with_applications
    from variants.pipelines.inputs import task_variants

    cfg = load_config(args.config)
    if not cfg.pipelines:
        raise UsageError(f"{CMD}: {args.config} has no pipelines")
    names = [p.name for p in cfg.pipelines]
    if args.pipeline is None and len(names) > 1:
        raise UsageError(f"{CMD}: {args.config} has {len(names)} pipelines: name one with --pipeline "
                         f"({', '.join(names)})")
    name = args.pipeline or names[0]
    if name not in names:
        raise UsageError(f"{CMD}: --pipeline: no pipeline {name!r} in {args.config} (pipelines: {', '.join(names)})")
    spec = cfg.pipelines[names.index(name)]
    try:
        qps = float(args.demand)
    except ValueError:
        qps = math.nan
    if not (math.isfinite(qps) and qps >= 0):
        raise UsageError(f"{CMD}: --demand must be a number of queries per second >= 0, got {args.demand!r}")
    if args.pool:
        pool = parse_counts(args.pool, CMD, set(cfg.catalog()))
    elif cfg.pinned_pool and sum(cfg.pinned_pool.values()) > 0:
        pool = {t: n for t, n in cfg.pinned_pool.items() if n > 0}
    else:
        raise UsageError(f"{CMD}: give --pool TYPE=N,... (the config pins no pool)")
    try:
        variants = task_variants(cfg, with_applications(cfg, load_profiles_csv(cfg.profiles)), spec)
    except ValueError as exc:
        raise UsageError(f"{CMD}: {exc}") from None
    plan = plan_pipeline(spec.graph(), variants, pool, qps)
    if args.json:
        print(json.dumps(to_json(plan), sort_keys=True))
    else:
        print(render(plan, spec.name, qps, spec.slo_ms, pool))
    return 0


def to_json(plan: PipelinePlan) -> dict:  # type: ignore[type-arg]
    return {"step": plan.step, "status": plan.status, "served": plan.served, "accuracy": plan.accuracy,
            "workers": [{"task": t, "variant": v, "type": it, "batch": b, "count": n}
                        for (t, v, it, b), n in sorted(plan.workers.items())],
            "routing": [{"path": [v for _, v in p], "fraction": f} for p, f in plan.routing.items()],
            "budgets_ms": plan.budgets_ms, "task_qps": plan.task_qps, "solve_ms": plan.solve_ms}


def render(plan: PipelinePlan, name: str, qps: float, slo_ms: float, pool: dict[str, int]) -> str:
    step = ("hardware scaling: every task at its most accurate variant" if plan.step == "hardware"
            else "accuracy scaling: the most accurate variants do not fit the pool")
    lines = [f"pipeline {name}: {qps:g} q/s at the root, SLO {slo_ms:g} ms ({slo_ms / 2:g} ms of processing), "
             f"pool {pool_text(pool)}", step,
             f"{'task':<14}{'budget ms':>10}{'q/s':>10}  workers"]
    for task, budget in plan.budgets_ms.items():
        ws = ", ".join(f"{v}@{t} b{b} x{n}" for (tk, v, t, b), n in sorted(plan.workers.items()) if tk == task)
        lines.append(f"{task:<14}{budget:>10.1f}{plan.task_qps.get(task, 0.0):>10.1f}  {ws or '-'}")
    leaves = [p for p in plan.routing if not any(q[:len(p)] == p and len(q) > len(p) for q in plan.routing)]
    if leaves:
        lines.append("paths (share of the root's queries):")
        for p in sorted(leaves, key=lambda p: -plan.routing[p]):
            lines.append(f"  {' > '.join(v for _, v in p):<40}{100 * plan.routing[p]:>7.1f} %")
    acc = f"{plan.accuracy:.4f}" if plan.accuracy is not None else "-"
    lines.append(f"served {100 * plan.served:.1f} %, end-to-end accuracy {acc}, {plan.total_workers} workers, "
                 f"{plan.status} in {plan.solve_ms:.0f} ms")
    return "\n".join(lines)
