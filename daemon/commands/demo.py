"""``costscale demo [--duration S]``: the whole loop on one machine against an embedded moto EC2.
Exit 0 when the run served queries and left nothing running, 1 otherwise, 130 on Ctrl-C.
``costscale demo --serve [--listen HOST:PORT] [--metrics HOST:PORT]``: the same cluster kept up
for your own clients until Ctrl-C (``daemon.demos.sandbox``), exit 0."""
from __future__ import annotations

from config.numbers import finite_float

import argparse
import asyncio
import contextlib
import logging

from config.hostport import hostport_arg
from daemon.commands.common.overrides import parse_counts
from daemon.demos.demo_config import DEMO_TYPES
from daemon.demos.replicas import MAX_REPLICAS, MIN_REPLICAS
from config.errors import UsageError
from dispatcher.policies import POLICY_NAMES


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="run the whole loop against an embedded EC2 (moto) on 127.0.0.1")
    p.add_argument("--duration", type=finite_float, default=None,
                   help="seconds of load (default 60; 90 with --models 2)")
    p.add_argument("--rate", type=finite_float, default=None, help="q/s in the first half (default 12; --pipeline 3)")
    p.add_argument("--step-rate", type=finite_float, default=None,
                   help="q/s in the second half (default 36; --pipeline 10)")
    p.add_argument("--budget", type=finite_float, default=2.5, help="$/hr (default 2.5)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--policy", default="kairos", choices=POLICY_NAMES,
                   help="query distribution policy (default kairos)")
    p.add_argument("--pool", default=None, metavar="TYPE=N,...",
                   help=f"hold this pool instead of planning (types: {', '.join(DEMO_TYPES)})")
    p.add_argument("--trace", metavar="CSV", help="send this trace (timestamp, model, batch_size; model rm2) in "
                   "real time instead of the two rates: the live side of `costscale replay --trace`")
    p.add_argument("--models", type=int, default=1, choices=(1, 2),
                   help="2: two models (rm2, dien) on one budget, each stepping up at its own time (default 1)")
    p.add_argument("--pipeline", action="store_true",
                   help="a two-task pipeline (retrieve: rm2 -> 2 x rank: ranker) served end to end, Loki's round "
                        "placing its workers; --rate / --step-rate are its queries/s (default 3 -> 10)")
    p.add_argument("--spot", action="store_true",
                   help="two spot workers in two zones, a scripted interruption notice through a local IMDS: the "
                        "drain, the replacement in another zone, every query answered (README \"Spot capacity\")")
    p.add_argument("--replicas", type=int, default=None, metavar="N",
                   help=f"N ({MIN_REPLICAS}-{MAX_REPLICAS}) `costscale run` replicas of one cluster behind nginx grpc_pass "
                        "(else gRPC round_robin), the lease holder killed with SIGKILL halfway: failed queries, the "
                        "client's retries, the fleet's takeover, the budget, orphans and duplicates "
                        "(README \"High availability\"; --duration default 24, --rate default 8)")
    p.add_argument("--json", action="store_true", help="print one JSON summary object")
    p.add_argument("--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    p.add_argument("--serve", action="store_true",
                   help="keep the cluster up for your own clients until Ctrl-C, no scripted load; print the endpoints")
    p.add_argument("--listen", type=hostport_arg, default="127.0.0.1:50051", metavar="HOST:PORT",
                   help="with --serve: the API and Open Inference Protocol port (default 127.0.0.1:50051)")
    p.add_argument("--metrics", type=hostport_arg, default="127.0.0.1:9464", metavar="HOST:PORT",
                   help="with --serve: the Prometheus endpoint (default 127.0.0.1:9464)")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    if args.replicas is not None:
        return _replicas(args)
    if args.rate is None:
        args.rate = 3.0 if args.pipeline or args.spot else 12.0
    if args.step_rate is None:
        args.step_rate = 10.0 if args.pipeline else 36.0
    if (args.duration is not None and args.duration <= 0) or args.rate <= 0 or args.step_rate <= 0 or args.budget <= 0:
        raise UsageError("demo: --duration, --rate, --step-rate and --budget must be > 0")
    level = getattr(logging, args.log_level)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto server request log
    pool = parse_counts(args.pool, "demo", DEMO_TYPES) if args.pool else None
    from daemon.demos.basic import run_demo
    from daemon.demos.display import quiet_library_logs

    # at the default level the display shows costscale's warnings and errors, not library chatter
    quiet = quiet_library_logs() if level >= logging.WARNING else contextlib.nullcontext()
    if args.spot:
        if args.trace or pool or args.serve or args.models == 2 or args.pipeline:
            raise UsageError("demo: --spot runs its own scenario: no --trace, --pool, --serve, --models 2 or --pipeline")
        from daemon.demos.spot import run_spot_demo

        with quiet:
            return asyncio.run(run_spot_demo(args.rate, seed=args.seed, as_json=args.json))
    if args.models == 2:
        if args.trace or pool or args.serve:
            raise UsageError("demo: --models 2 runs its own two-model load: no --trace, --pool or --serve")
        duration = 90.0 if args.duration is None else args.duration
        if duration < 60.0:
            raise UsageError("demo: --models 2 needs --duration of at least 60 s (a third of it after each "
                             "model's step, for its new worker to start and serve)")
        from daemon.demos.models import run_models_demo

        with quiet:
            return asyncio.run(run_models_demo(duration, args.budget, args.seed, args.json))
    if args.pipeline:
        if args.trace or pool or args.serve or args.models == 2:
            raise UsageError("demo: --pipeline runs its own pipeline load: no --trace, --pool, --serve or --models 2")
        from daemon.demos.pipeline import run_pipeline_demo

        with quiet:
            return asyncio.run(run_pipeline_demo(60.0 if args.duration is None else args.duration, args.rate,
                                                 args.step_rate, args.budget, args.seed, args.json))
    if args.serve:
        from daemon.demos.sandbox import run_sandbox

        with quiet:
            return asyncio.run(run_sandbox(args.budget, args.listen, args.metrics, rate=args.rate, pinned_pool=pool))
    trace = _trace(args.trace) if args.trace else None
    with quiet:
        return asyncio.run(run_demo(60.0 if args.duration is None else args.duration, args.rate, args.step_rate,
                                    args.budget, args.seed, args.json, policy=args.policy, pinned_pool=pool, trace=trace))


#: the shortest ``--replicas`` run: the kill at half of it, a fleet tick and a takeover after it
MIN_REPLICAS_DURATION_S = 8.0


def _replicas(args: argparse.Namespace) -> int:
    """``demo --replicas N``: its checks (one line, exit 2), then :func:`daemon.demos.replicas.run_replicas_demo`."""
    if not MIN_REPLICAS <= args.replicas <= MAX_REPLICAS:
        raise UsageError(f"demo: --replicas must be between {MIN_REPLICAS} and {MAX_REPLICAS} (got {args.replicas}): "
                         "they share the workers of one pinned pool on this machine")
    if args.trace or args.pool or args.serve or args.models == 2 or args.pipeline or args.spot:
        raise UsageError("demo: --replicas runs its own scenario: no --trace, --pool, --serve, --models 2, --pipeline "
                         "or --spot")
    duration = 24.0 if args.duration is None else args.duration
    rate = 8.0 if args.rate is None else args.rate
    if duration < MIN_REPLICAS_DURATION_S or rate <= 0:
        raise UsageError(f"demo: --replicas needs --duration of at least {MIN_REPLICAS_DURATION_S:g} s (the kill at "
                         "half of it) and --rate > 0")
    level = getattr(logging, args.log_level)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto server request log
    from daemon.demos.display import quiet_library_logs
    from daemon.demos.replicas import run_replicas_demo

    with quiet_library_logs() if level >= logging.WARNING else contextlib.nullcontext():
        return asyncio.run(run_replicas_demo(args.replicas, duration, rate, args.seed, args.json))


def _trace(path: str):  # type: ignore[no-untyped-def]
    """The trace's rows for the demo's model, from 0; one line and exit 2 when it has none."""
    import numpy as np

    from daemon.demos.demo_config import DEMO_MODEL
    from sim.workload import read_trace_csv, trace_workload

    try:
        rows = read_trace_csv(path)
    except ValueError as exc:
        raise UsageError(f"demo: {exc}") from None
    keep = np.asarray([n == DEMO_MODEL for n in rows.names], dtype=bool)
    if not keep.any():
        raise UsageError(f"demo: {path}: no queries for the demo's model {DEMO_MODEL!r}")
    return trace_workload(rows, keep)
