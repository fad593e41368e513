"""``costscale run CONFIG``: the daemon (systemd ``Type=notify``)."""
from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run the daemon (dispatcher + fleet and model loops)")
    p.add_argument("config", metavar="CONFIG")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from daemon.process import run_daemon

    return run_daemon(args.config, args.log_level)
