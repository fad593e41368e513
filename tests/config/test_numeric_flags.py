"""Every numeric flag of every command refuses ``inf``, ``nan`` and what is not a number in one
line, exit 2 (issue #30: ``costscale plan --budget inf`` printed a numpy RuntimeWarning and then
said no pool fits); negative values where a command takes none are refused the same way."""
from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from config.numbers import finite_float
from daemon.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[2]
RM2 = str(ROOT / "examples" / "replay-rm2.yaml")


def _numeric_flags() -> list[tuple[list[str], str]]:
    """(the subcommand path, the flag) for every option whose type is ``finite_float``."""
    out: list[tuple[list[str], str]] = []

    def walk(p: argparse.ArgumentParser, path: list[str]) -> None:
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, sub in a.choices.items():
                    walk(sub, path + [name])
            elif a.type is finite_float and a.option_strings:
                out.append((path, a.option_strings[0]))
    walk(build_parser(), [])
    return out


FLAGS = _numeric_flags()


def test_every_float_flag_is_checked() -> None:
    assert len(FLAGS) >= 20
    assert (["plan"], "--budget") in FLAGS and (["replay"], "--hours") in FLAGS


@pytest.mark.parametrize("path,flag", FLAGS, ids=[" ".join(p + [f]) for p, f in FLAGS])
@pytest.mark.parametrize("value", ["inf", "nan", "-inf", "many"])
def test_a_non_finite_number_is_one_line(path: list[str], flag: str, value: str, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main([*path, f"{flag}={value}"]) == 2
    err = capsys.readouterr().err
    assert flag in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err and "Warning" not in err


@pytest.mark.parametrize("argv,needle", [
    (["plan", RM2, "--budget", "-1"], "--budget"),
    (["plan", RM2, "--qos-ms", "-5"], "--qos-ms"),
    (["replay", RM2, "--pattern", "step", "--hours", "-1"], "--hours"),
    (["replay", RM2, "--pattern", "step", "--boot-gpu-s", "-1"], "--boot-gpu-s"),
    (["replay", RM2, "--pattern", "step", "--boot-cpu-s", "-1"], "--boot-cpu-s"),
    (["simulate", RM2, "--pool", "r5n.large=1", "--rate", "-1"], "--rate"),
    (["simulate", RM2, "--pool", "r5n.large=1", "--duration", "-1"], "--duration"),
    (["simulate", RM2, "--pool", "r5n.large=1", "--noise", "-0.5"], "--noise"),
    (["demo", "--duration", "-1"], "--duration"),
    (["demo", "--budget", "-1"], "--budget"),
    (["variants", "plan", "--variants", "x.yaml", "--qps", "-1", "--slo-ms", "10"], "--qps"),
])
def test_a_negative_value_is_one_line(argv: list[str], needle: str, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
