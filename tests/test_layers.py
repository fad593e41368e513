"""The layers of ARCHITECTURE.md hold: ``lint-imports`` keeps every contract of pyproject.toml (the
layers, pure decisions, the dispatcher's parts below their composer and without a circle), a crossing
import breaks them, and no hand-written module grows past 500 lines."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("config", "scaler", "variants", "dispatcher", "sim", "worker", "daemon")
MAX_LINES = 500
GENERATED = ("_pb2.py", "_pb2_grpc.py", "_pb2.pyi")


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("lint-imports")
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([str(exe), "--no-cache"], cwd=root, env=env, capture_output=True, text=True, timeout=240)


def _copy_tree(dst: Path) -> None:
    shutil.copy(ROOT / "pyproject.toml", dst / "pyproject.toml")
    for pkg in PACKAGES:
        shutil.copytree(ROOT / pkg, dst / pkg, ignore=shutil.ignore_patterns("__pycache__", "*.onnx", "*.csv"))


CONTRACTS = ("Layers (ARCHITECTURE.md)", "Pure decisions do no I/O", "Dispatcher parts never import the composer",
             "Dispatcher modules import without a circle")


def test_lint_imports_keeps_every_contract() -> None:
    r = _lint(ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    for contract in CONTRACTS:
        assert f"{contract} KEPT" in r.stdout, r.stdout


@pytest.mark.parametrize("module, line, contract", [
    ("scaler/plan.py", "import daemon.app  # upward: a decision package importing the process", "Layers (ARCHITECTURE.md)"),
    ("scaler/parking.py", "import sqlite3  # I/O inside a pure decision", "Pure decisions do no I/O"),
    ("variants/selection.py", "import scaler.transitions  # across independent siblings", "Layers (ARCHITECTURE.md)"),
    # a dispatcher part given the whole composer, be it only for its type (issue #27)
    ("dispatcher/offline.py", "import typing\nif typing.TYPE_CHECKING:\n    from dispatcher.server import Dispatcher",
     "Dispatcher parts never import the composer"),
    ("dispatcher/policies/kairos.py", "import dispatcher.server  # a policy reaching for the composer",
     "Dispatcher parts never import the composer"),
    # two parts that import each other: the book is below admission
    ("dispatcher/queries.py", "import dispatcher.admission  # a circle", "Dispatcher modules import without a circle"),
])
def test_a_crossed_layer_breaks_the_contract(tmp_path: Path, module: str, line: str, contract: str) -> None:
    _copy_tree(tmp_path)
    target = tmp_path / module
    target.write_text(target.read_text() + "\n" + line + "\n")
    r = _lint(tmp_path)
    assert r.returncode != 0
    assert f"{contract} BROKEN" in r.stdout, r.stdout



def test_no_hand_written_module_over_500_lines() -> None:
    over = []
    for pkg in PACKAGES:
        for f in (ROOT / pkg).rglob("*.py"):
            if f.name.endswith(GENERATED):
                continue
            n = len(f.read_text(encoding="utf-8").splitlines())
            if n > MAX_LINES:
                over.append(f"{f.relative_to(ROOT)}: {n}")
    assert not over, over
