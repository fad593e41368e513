"""``costscale doctor CONFIG [--json]``: the pre-flight (issue #38, deliverable 5). Every check the
config makes relevant (``daemon.doctor.checks.run_doctor``), one line each (``ok|warn|fail  CHECK
what it found; what to change (AWS error code)``), or the same as JSON; exit 1 on any fail, 2 for
a usage or config error. Nothing is launched, created or written."""
from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("doctor", help="pre-flight: check credentials, permissions, image, network and services "
                                      "against AWS, spending nothing")
    p.add_argument("config", metavar="CONFIG")
    p.add_argument("--json", action="store_true", help="the result as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from config.checks import load_checked_config
    from daemon.doctor.checks import run_doctor
    from daemon.doctor.report import as_json, exit_code

    cfg = load_checked_config(args.config, files=True)
    findings = run_doctor(cfg)
    if args.json:
        print(as_json(findings))
    else:
        for f in findings:
            print(f.line())
    return exit_code(findings)
