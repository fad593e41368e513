"""``costscale run CONFIG``: the daemon (systemd ``Type=notify``)."""
from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run the daemon (dispatcher + fleet and model loops)")
    p.add_argument("config", metavar="CONFIG")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    p.add_argument("--log-format", default=None, choices=["text", "json"],
                   help="json: one JSON object per line, audit events with their fields (default: the "
                        "config's log_format, text)")
    p.add_argument("--local-workers", action="store_true",
                   help="with an EC2 emulator on this host (aws.endpoint_url on 127.0.0.1): a local worker process "
                        "stands for each running instance")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from daemon.process import run_daemon

    return run_daemon(args.config, args.log_level, args.local_workers, log_format=args.log_format)
