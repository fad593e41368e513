"""The ``costscale`` command imports only the chosen command's module (``daemon.cli.command_modules``):
every command module together costs seconds (scipy.stats among them) before a command such as
``status`` or ``worker`` parses its flags."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from daemon.cli import COMMANDS, command_modules

ROOT = Path(__file__).resolve().parents[2]


def test_the_chosen_command_alone_or_all_of_them() -> None:
    assert command_modules(["status", "--json"]) == ("status",)
    assert command_modules(["capacity", "--pool", "x=1"]) == ("simulate",)    # registered by simulate
    assert command_modules(["offline", "status", "j-1"]) == ("models",)        # registered by models
    assert command_modules(["-h"]) == COMMANDS and command_modules([]) == COMMANDS
    assert command_modules(["--version"]) == COMMANDS
    assert command_modules(["nope"]) == COMMANDS                               # argparse lists every command


def test_status_does_not_import_the_other_commands() -> None:
    code = ("import sys; from daemon import cli; cli.build_parser(cli.command_modules(['status']));"
            "print(sorted(m for m in sys.modules if m.startswith('daemon.commands.')"
            " and not m.startswith('daemon.commands.common')))")   # the commands' shared parts aside
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['daemon.commands.status']"
