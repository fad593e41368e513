"""``costscale validate FILE``: exit 0 for a valid config; else one line per problem, exit 2.

Beyond the schema it runs :func:`config.checks.config_problems`: what would pass the schema and
fail later in the daemon (an unknown region, a budget no allowed type fits, minimum counts over
the budget, an unreadable profile CSV, launched workers told to dial 127.0.0.1, a TLS certificate,
key or token file the daemon could not read), and prints
:func:`config.checks.config_warnings` on stderr without failing (a model with no latency profile:
the daemon can profile it)."""
from __future__ import annotations

import argparse
import sys

from config.checks import config_warnings, load_checked_config


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("validate", help="check a config file")
    p.add_argument("config", metavar="FILE")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from daemon.profiling.model_profiles import stored_profiles

    cfg = load_checked_config(args.config, files=True)
    for line in config_warnings(cfg, stored_profiles(cfg), args.config):
        print(f"costscale: warning: {args.config}: {line}", file=sys.stderr)
    print(f"{args.config}: ok (cluster {cfg.cluster}, budget {cfg.budget_per_hour:g} $/hr, "
          f"{len(cfg.models)} model(s), {len(cfg.instance_types)} instance type(s))")
    return 0
