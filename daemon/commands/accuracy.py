"""``costscale accuracy plan``: the accuracy planner (Proteus §4, :mod:`variants.accuracy.planner`)
over a pool and a variant family's profiles: which variant each worker hosts, how each model's
queries are split, what is served and at what accuracy.

    costscale accuracy plan --variants CSV --pool TYPE=N,... --demand MODEL=QPS[,...]
                            --slo-ms MODEL=MS[,...] [--min-accuracy MODEL=A,...] [--json]

CSV: columns ``model,variant,instance_type,batch_size,latency_ms,accuracy`` (``config/families``).
``--json`` prints one object: ``placement`` (worker id -> ``{"type", "variant"}``), ``routing``
(model -> worker id -> fraction), ``served_qps``, ``demand_qps``, ``effective_accuracy``,
``feasible``, ``solve_ms``. Bad input (a malformed CSV row, an unknown type or model, demand for a
model with no variant or no SLO): one line, exit 2.
"""
from __future__ import annotations

import argparse
import json
import math
from typing import Collection

from config.errors import UsageError
from daemon.commands.common.family_csv import load_variants
from daemon.commands.common.overrides import parse_counts
from variants.accuracy.planner import AccuracyPlan, plan_accuracy, workers_from_counts

CMD = "accuracy plan"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("accuracy", help="accuracy scaling: variants per worker when demand outruns the pool")
    asub = p.add_subparsers(dest="accuracy_command", metavar="ACTION", parser_class=type(p))
    asub.required = True
    plan = asub.add_parser("plan", help="variant per worker and routing that serve the most demand, most accurately")
    plan.add_argument("--variants", required=True, metavar="CSV",
                      help="variant profiles: model,variant,instance_type,batch_size,latency_ms,accuracy")
    plan.add_argument("--pool", required=True, metavar="TYPE=N,...", help="the workers, e.g. g4dn.xlarge=2,c5n.2xlarge=1")
    plan.add_argument("--demand", required=True, metavar="MODEL=QPS[,...]", help="demand per model (queries/s)")
    plan.add_argument("--slo-ms", required=True, metavar="MODEL=MS[,...]", help="latency SLO per model (ms)")
    plan.add_argument("--min-accuracy", metavar="MODEL=A,...", help="lowest accuracy per model (a fraction, 0-1)")
    plan.add_argument("--json", action="store_true", help="print one JSON object")
    plan.set_defaults(func=run_plan)
    from daemon.commands import accuracy_replay

    accuracy_replay.register(asub)


def _parse_map(text: str | None, flag: str, models: Collection[str]) -> dict[str, float]:
    """``MODEL=X,MODEL=X`` -> {model: X}: models from the CSV, finite numbers, no model twice."""
    out: dict[str, float] = {}
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        model, sep, val = (s.strip() for s in part.partition("="))
        try:
            num = float(val) if sep and model else math.nan
        except ValueError:
            num = math.nan
        if not math.isfinite(num):
            raise UsageError(f"{CMD}: {flag}: bad entry {part!r} (expected MODEL=NUMBER)")
        if model not in models:
            raise UsageError(f"{CMD}: {flag}: no variant of model {model!r} in the CSV "
                             f"(models: {', '.join(sorted(models))})")
        if model in out:
            raise UsageError(f"{CMD}: {flag}: {model} given twice")
        out[model] = num
    return out


def run_plan(args: argparse.Namespace) -> int:
    rows, variants = load_variants(args.variants, CMD)
    models = {v.model for v in variants}
    pool = parse_counts(args.pool, CMD, {r.instance_type for r in rows})
    demand = _parse_map(args.demand, "--demand", models)
    slo = _parse_map(args.slo_ms, "--slo-ms", models)
    floor = _parse_map(args.min_accuracy, "--min-accuracy", models)
    if not demand:
        raise UsageError(f"{CMD}: --demand needs at least one MODEL=QPS")
    for m, q in demand.items():
        if q < 0:
            raise UsageError(f"{CMD}: --demand: {m} must be >= 0 q/s")
        if m not in slo:
            raise UsageError(f"{CMD}: --slo-ms: no SLO for {m} (it has --demand)")
    for m, s in slo.items():
        if s <= 0:
            raise UsageError(f"{CMD}: --slo-ms: {m} must be > 0 ms")
    for m, a in floor.items():
        if not 0.0 <= a <= 1.0:
            raise UsageError(f"{CMD}: --min-accuracy: {m} must be a fraction in [0, 1], got {a:g}")
        best = max(v.accuracy for v in variants if v.model == m)
        if best < a:
            raise UsageError(f"{CMD}: --min-accuracy: no variant of {m} reaches {a:g} (its best: {best:g})")
    plan = plan_accuracy(workers_from_counts(pool), variants, demand, slo, floor)
    if args.json:
        print(json.dumps(to_json(plan), sort_keys=True))
    else:
        print(render(plan, {v.variant: v.accuracy for v in variants}))
    return 0


def to_json(plan: AccuracyPlan) -> dict:
    """The issue's fields, exactly."""
    return {
        "placement": {w: {"type": plan.worker_types[w], "variant": v} for w, v in plan.placement.items()},
        "routing": plan.routing,
        "served_qps": plan.served_qps,
        "demand_qps": plan.demand_qps,
        "effective_accuracy": plan.effective_accuracy,
        "feasible": plan.feasible,
        "solve_ms": round(plan.solve_ms, 3),
    }


def render(plan: AccuracyPlan, accuracy: dict[str, float]) -> str:
    share = {w: (m, f) for m, ws in plan.routing.items() for w, f in ws.items()}
    width = max(len(w) for w in plan.placement) if plan.placement else 6
    lines = [f"{'worker':<{width}}  {'variant':<20} {'accuracy':>8}  share"]
    for w, v in plan.placement.items():
        m, f = share.get(w, ("", 0.0))
        acc = f"{accuracy[v]:.4f}" if v is not None else "-"
        lines.append(f"{w:<{width}}  {v or '(none)':<20} {acc:>8}  {f'{f:.1%} of {m}' if m else 'idle'}")
    for m in plan.demand_qps:
        acc = plan.accuracy[m]
        lines.append(f"{m}: served {plan.served_qps[m]:.1f} of {plan.demand_qps[m]:.1f} q/s"
                     + (f" at accuracy {acc:.4f}" if acc is not None else ""))
    eff = f"{plan.effective_accuracy:.4f}" if plan.effective_accuracy is not None else "-"
    lines.append(f"effective accuracy {eff}; {'all demand served' if plan.feasible else 'NOT all demand served'}; "
                 f"solved in {plan.solve_ms:.0f} ms")
    return "\n".join(lines)
