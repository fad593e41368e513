"""``costscale accuracy replay``: accuracy scaling on a virtual clock (:mod:`sim.accuracy_sim`): a
fixed pool serving one application's variants, placed by the accuracy planner (Proteus §4), routed by
the plan, batched on each worker (Proteus §5), against the baselines in the same run.

    costscale accuracy replay --variants CSV --pool TYPE=N,... --slo-ms MS
                              (--pattern NAME[:k=v,...] | --trace CSV) [--minutes M] [--model M]
                              [--allocation A] [--batching B] [--min-accuracy A] [--swap-s S]
                              [--baselines] [--seed N] [--json]

``--json`` prints one object: ``queries``, ``slo_attainment``, ``mean_accuracy``,
``max_drop_points`` (the largest drop of a 1-minute mean of served accuracy below the most accurate
variant), ``missed``, ``replans``, ``swaps``, ``max_solve_ms`` and, with ``--baselines``, a
``baselines`` object with the same fields for each other allocation. Bad input: one line, exit 2.
"""
from __future__ import annotations

from config.numbers import finite_float

import argparse
import json

from config.errors import UsageError
from daemon.commands.common.overrides import parse_counts

CMD = "accuracy replay"


def register(asub: argparse._SubParsersAction) -> None:
    from sim.accuracy_sim import ALLOCATIONS, AccuracySpec
    from variants.accuracy.adaptive_batching import BATCHING_POLICIES

    r = asub.add_parser("replay", help="accuracy scaling over a trace on virtual time, against baselines")
    r.add_argument("--variants", required=True, metavar="CSV",
                   help="variant profiles: model,variant,instance_type,batch_size,latency_ms,accuracy")
    r.add_argument("--pool", required=True, metavar="TYPE=N,...", help="the workers, e.g. g4dn.xlarge=1,r5n.large=4")
    r.add_argument("--slo-ms", required=True, type=finite_float, metavar="MS", help="the application's latency SLO (ms)")
    src = r.add_mutually_exclusive_group(required=True)
    src.add_argument("--pattern", metavar="NAME[:k=v,...]", help="diurnal, step, macroburst or microburst")
    src.add_argument("--trace", metavar="CSV", help="timestamp,model,batch_size rows (one request each)")
    r.add_argument("--minutes", type=finite_float, default=30.0, help="length of a --pattern run (default 30)")
    r.add_argument("--model", help="the application (default: the CSV's only one)")
    r.add_argument("--allocation", default="proteus", choices=ALLOCATIONS,
                   help="proteus (default), no_scaling, clipper_ht, infaas_accuracy, slackfit, slackfit_queue")
    r.add_argument("--batching", default="proteus", choices=BATCHING_POLICIES)
    r.add_argument("--min-accuracy", type=finite_float, default=0.0, metavar="A", help="lowest accuracy (0-1)")
    r.add_argument("--swap-s", type=finite_float, default=AccuracySpec().swap_s, metavar="S",
                   help="a worker changing variant serves nothing this long (default %(default)g)")
    r.add_argument("--baselines", action="store_true", help="also run every other allocation")
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--json", action="store_true", help="print one JSON object")
    r.set_defaults(func=run_replay)


def _arrivals(args: argparse.Namespace, model: str):  # type: ignore[no-untyped-def]
    from sim.patterns import parse_pattern, pattern_workload
    from sim.workload import load_trace_csv

    if args.trace:
        try:
            return load_trace_csv(args.trace, model).arrivals
        except OSError as exc:
            raise UsageError(f"{CMD}: --trace: cannot read {args.trace}: {exc.strerror or exc}") from None
        except ValueError as exc:
            raise UsageError(f"{CMD}: --trace: {str(exc).splitlines()[0]}") from None
    if not args.minutes > 0:
        raise UsageError(f"{CMD}: --minutes must be > 0")
    try:
        return pattern_workload(parse_pattern(args.pattern), args.minutes * 60.0, seed=args.seed).arrivals
    except ValueError as exc:
        raise UsageError(f"{CMD}: --pattern: {str(exc).splitlines()[0]}") from None


def run_replay(args: argparse.Namespace) -> int:
    from daemon.commands.common.family_csv import load_variants
    from sim.accuracy_sim import ALLOCATIONS, AccuracySpec, simulate_accuracy
    from variants.accuracy.planner import workers_from_counts

    rows, variants = load_variants(args.variants, CMD)
    models = sorted({v.model for v in variants})
    model = args.model or (models[0] if len(models) == 1 else None)
    if model is None:
        raise UsageError(f"{CMD}: --model: the CSV has several models ({', '.join(models)}); name one")
    if model not in models:
        raise UsageError(f"{CMD}: --model: no variant of {model!r} in the CSV (models: {', '.join(models)})")
    if not args.slo_ms > 0:
        raise UsageError(f"{CMD}: --slo-ms must be > 0")
    if not 0.0 <= args.min_accuracy <= 1.0:
        raise UsageError(f"{CMD}: --min-accuracy must be a fraction in [0, 1]")
    if max(v.accuracy for v in variants if v.model == model) < args.min_accuracy:
        raise UsageError(f"{CMD}: --min-accuracy: no variant of {model} reaches {args.min_accuracy:g}")
    if args.swap_s < 0:
        raise UsageError(f"{CMD}: --swap-s must be >= 0")
    pool = workers_from_counts(parse_counts(args.pool, CMD, {r.instance_type for r in rows}))
    arr = _arrivals(args, model)
    runs = [args.allocation] + ([a for a in ALLOCATIONS if a != args.allocation] if args.baselines else [])
    out: dict[str, dict] = {}
    for alloc in runs:
        spec = AccuracySpec(allocation=alloc, batching=args.batching, swap_s=args.swap_s, min_accuracy=args.min_accuracy)
        out[alloc] = simulate_accuracy(pool, variants, model, args.slo_ms, arr, spec).summary()
    result = dict(out[args.allocation])
    if args.baselines:
        result["baselines"] = {a: s for a, s in out.items() if a != args.allocation}
    if args.json:
        print(json.dumps(result, sort_keys=True))
        return 0
    print(f"{model}: {len(pool)} workers, SLO {args.slo_ms:g} ms, {int(arr.size):,} queries")
    print(f"{'allocation':<16} {'attainment':>10} {'missed':>8} {'accuracy':>9} {'max drop':>9} {'swaps':>6}")
    for alloc, s in out.items():
        print(f"{alloc:<16} {100 * s['slo_attainment']:>9.2f}% {s['missed']:>8,} {100 * s['mean_accuracy']:>8.2f}% "
              f"{s['max_drop_points']:>8.2f}p {s['swaps']:>6}")
    return 0
