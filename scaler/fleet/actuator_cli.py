"""A thin command-line adapter around ``FleetActuator`` (used by the kill -9 crash test and for
manual runs against moto): open the state store (taking the one-daemon lock), build ``Ec2Cloud``
and ``FleetActuator``, reconcile, apply the target, reconcile again, exit 0.

    python -m scaler.fleet.actuator_cli --state DB --endpoint URL --cluster C --budget B \
        --target type=n,... --plan-id P [--step-delay S] [--trace-calls]

It holds no logic of its own: the daemon (daemon/app.py) calls the same ``FleetActuator``.
``--trace-calls`` prints ``ec2-call N OP`` (flushed) before every EC2 API call, so a test can
kill the process at the k-th call. Exit codes: 0 done (target reached), 1 incomplete, 2 usage.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from config.errors import UsageError


def parse_target(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, n = part.partition("=")
        if not sep or not n.strip().isdigit():
            raise UsageError(f"--target: expected type=count, got {part!r}")
        out[name.strip()] = int(n)
    return out


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m scaler.fleet.actuator_cli", description=__doc__.splitlines()[0])
    ap.add_argument("--state", required=True, help="SQLite state store path")
    ap.add_argument("--endpoint", default=None, help="EC2 endpoint URL (moto); unset for AWS")
    ap.add_argument("--region", default="us-east-1")
    ap.add_argument("--cluster", required=True)
    ap.add_argument("--budget", type=float, required=True, help="$/hr")
    ap.add_argument("--target", required=True, help="type=n,type=n")
    ap.add_argument("--plan-id", required=True)
    ap.add_argument("--ami", default="ami-12c6146b")
    ap.add_argument("--step-delay", type=float, default=0.0, help="sleep before each step (tests)")
    ap.add_argument("--pending-timeout", type=float, default=600.0)
    ap.add_argument("--trace-calls", action="store_true")
    ap.add_argument("--json", action="store_true", help="print the reports as one JSON object")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _run(args)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code


def _run(args: argparse.Namespace) -> int:
    from config.schema import LaunchSpec
    from scaler.fleet.state import StateStore
    from scaler.fleet.actuator import FleetActuator
    from config.catalog import load_catalog
    from scaler.cloud.ec2 import Ec2Cloud, make_ec2_client

    target = parse_target(args.target)
    catalog = load_catalog()
    bad = sorted(set(target) - set(catalog))
    if bad:
        raise UsageError(f"--target: unknown instance type(s) {', '.join(bad)}")
    store = StateStore.open(args.state)
    try:
        client = make_ec2_client(args.region, args.endpoint)
        if args.trace_calls:
            counter = {"n": 0}

            def _trace(event_name: str, **_: Any) -> None:
                counter["n"] += 1
                print(f"ec2-call {counter['n']} {event_name.rsplit('.', 1)[-1]}", flush=True)

            client.meta.events.register("before-call.ec2.*", _trace)
        cloud = Ec2Cloud(args.cluster, args.region, LaunchSpec(ami_id=args.ami), client=client)
        hook = (lambda _step: time.sleep(args.step_delay)) if args.step_delay > 0 else None
        act = FleetActuator(cloud, store, catalog, args.budget, pending_timeout_s=args.pending_timeout,
                            step_hook=hook)
        r1 = act.reconcile()
        rep = act.apply(target, args.plan_id)
        r2 = act.reconcile()
        if args.json:
            print(json.dumps({"reconcile_before": r1.to_dict(), "apply": rep.to_dict(), "reconcile_after": r2.to_dict()},
                             default=str))
        else:
            print(f"plan {args.plan_id}: launched {sum(map(len, rep.launched.values()))}, terminated "
                  f"{len(rep.terminated)}, complete={rep.complete}", flush=True)
        return 0 if rep.complete else 1
    finally:
        store.close()


if __name__ == "__main__":
    sys.exit(main())
