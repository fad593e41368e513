"""The ``costscale`` command line. Each subcommand lives in ``daemon/commands/<name>.py`` and
exposes ``register(subparsers)``; its handler returns an exit code. Usage and config errors print
one line on stderr and exit 2, never a traceback (DESIGN invariant 5)."""
from __future__ import annotations

import argparse
import importlib
import os
import sys

# gRPC core logs fork() notices at INFO when worker processes are started; keep its log to errors
# unless the user asked for more.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
from typing import Sequence

from config.errors import UsageError

# modules under daemon/commands/ (simulate also registers capacity; models also registers offline)
COMMANDS = ("init", "validate", "doctor", "plan", "simulate", "run", "demo", "worker", "variants", "models", "profile", "status", "replay", "accuracy",
            "pipeline", "history",
            "bundle", "forecast")
#: commands registered by a module of another name
REGISTERED_BY = {"capacity": "simulate", "offline": "models"}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2
        raise UsageError(f"{self.prog}: {message}")


def version() -> str:
    """The installed distribution's version (pyproject.toml)."""
    from importlib.metadata import PackageNotFoundError, version as dist_version

    try:
        return dist_version("costscale")
    except PackageNotFoundError:   # run from a source tree that was never installed
        return "unknown"


def command_modules(argv: Sequence[str] | None) -> tuple[str, ...]:
    """The command modules to import for ``argv``: the chosen command's alone (importing all of
    them costs about 2.7 s, scipy.stats among them, before a command such as ``status`` or
    ``worker`` has parsed its flags), or every one for the top-level help, ``--version`` or an
    unknown command (so argparse lists them all)."""
    first = next((a for a in (sys.argv[1:] if argv is None else argv) if not a.startswith("-")), None)
    name = REGISTERED_BY.get(first or "", first)
    return (name,) if name in COMMANDS else COMMANDS


def build_parser(modules: Sequence[str] = COMMANDS) -> argparse.ArgumentParser:
    parser = _Parser(prog="costscale", description="Cost-aware autoscaler for ML inference on AWS EC2.")
    parser.add_argument("--version", action="version", version=f"costscale {version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for name in modules:
        importlib.import_module(f"daemon.commands.{name}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        parser = build_parser(command_modules(argv))
        args = parser.parse_args(argv)
        return int(args.func(args) or 0)
    except UsageError as exc:
        for line in exc.lines:
            print(f"costscale: {line}" if not line.startswith("costscale") else line, file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("costscale: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
