"""The layers of ARCHITECTURE.md hold: ``lint-imports`` keeps every contract of pyproject.toml (the
layers, pure decisions, the dispatcher's and the daemon's parts below their composers, the
dispatcher without a circle), a crossing import breaks them, no two modules of the project import
each other through a circle, and no hand-written module grows past 400 lines (issue #37)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("config", "scaler", "variants", "dispatcher", "sim", "worker", "daemon")
MAX_LINES = 400
GENERATED = ("_pb2.py", "_pb2_grpc.py", "_pb2.pyi")


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("lint-imports")
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([str(exe), "--no-cache"], cwd=root, env=env, capture_output=True, text=True, timeout=240)


def _copy_tree(dst: Path) -> None:
    shutil.copy(ROOT / "pyproject.toml", dst / "pyproject.toml")
    for pkg in PACKAGES:
        shutil.copytree(ROOT / pkg, dst / pkg, ignore=shutil.ignore_patterns("__pycache__", "*.onnx", "*.csv"))


CONTRACTS = ("Layers (ARCHITECTURE.md)", "scaler's folders (ARCHITECTURE.md)", "daemon's folders (ARCHITECTURE.md)",
             "variants' folders (ARCHITECTURE.md)", "sim's folders (ARCHITECTURE.md)", "Pure decisions do no I/O",
             "Dispatcher parts never import the composer", "Dispatcher modules import without a circle",
             "Daemon parts never import the composer")


def test_lint_imports_keeps_every_contract() -> None:
    r = _lint(ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    for contract in CONTRACTS:
        assert f"{contract} KEPT" in r.stdout, r.stdout


@pytest.mark.parametrize("module, line, contract", [
    ("scaler/planner/choose.py", "import daemon.app  # upward: a decision package importing the process", "Layers (ARCHITECTURE.md)"),
    ("scaler/fleet/parking.py", "import sqlite3  # I/O inside a pure decision", "Pure decisions do no I/O"),
    ("variants/infaas/selection.py", "import scaler.fleet.transitions  # across independent siblings", "Layers (ARCHITECTURE.md)"),
    # the folders inside a package (issue #37): the planner below the fleet, spot and replicas apart
    ("scaler/planner/joint_plan.py", "import scaler.fleet.transitions  # the planner reaching up to the fleet",
     "scaler's folders (ARCHITECTURE.md)"),
    ("scaler/spot/events.py", "import scaler.replicas.lease_decision  # across sibling folders", "scaler's folders (ARCHITECTURE.md)"),
    ("daemon/observe/audit.py", "import daemon.loops.ticks  # what the daemon shows reaching for its loops",
     "daemon's folders (ARCHITECTURE.md)"),
    # a dispatcher part given the whole composer, be it only for its type (issue #27)
    ("dispatcher/offline.py", "import typing\nif typing.TYPE_CHECKING:\n    from dispatcher.server import Dispatcher",
     "Dispatcher parts never import the composer"),
    ("dispatcher/policies/kairos.py", "import dispatcher.server  # a policy reaching for the composer",
     "Dispatcher parts never import the composer"),
    # two parts that import each other: the book is below admission
    ("dispatcher/queries.py", "import dispatcher.admission  # a circle", "Dispatcher modules import without a circle"),
    # a daemon part given the whole Daemon, be it only for its type (issue #37)
    ("daemon/observe/metrics.py", "import typing\nif typing.TYPE_CHECKING:\n    from daemon.app import Daemon",
     "Daemon parts never import the composer"),
    ("daemon/observe/status_watchers.py", "import daemon.app  # a watcher reaching for the daemon",
     "Daemon parts never import the composer"),
])
def test_a_crossed_layer_breaks_the_contract(tmp_path: Path, module: str, line: str, contract: str) -> None:
    _copy_tree(tmp_path)
    target = tmp_path / module
    target.write_text(target.read_text() + "\n" + line + "\n")
    r = _lint(tmp_path)
    assert r.returncode != 0
    assert f"{contract} BROKEN" in r.stdout, r.stdout


def import_circles(packages: tuple[str, ...] = PACKAGES) -> list[list[str]]:
    """The circles of module-to-module imports among ``packages`` (grimp's graph, the one
    ``lint-imports`` reads): each strongly connected component of more than one module, sorted.
    A package's ``__init__`` (its re-exports) and the generated ``*_pb2*`` stubs are left out."""
    import grimp

    graph = grimp.build_graph(*packages)
    modules = sorted(m for m in graph.modules
                     if not graph.find_children(m) and not m.rsplit(".", 1)[-1].endswith(("_pb2", "_pb2_grpc")))
    counted = set(modules)
    edges = {m: sorted(n for n in graph.find_modules_directly_imported_by(m) if n in counted) for m in modules}
    # Tarjan's strongly connected components, iteratively (no recursion limit to meet)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    for root in modules:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = len(index)
                stack.append(v)
                on_stack.add(v)
            if i < len(edges[v]):
                work.append((v, i + 1))
                w = edges[v][i]
                if w not in index:
                    work.append((w, 0))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
            if work:   # back in the caller: its low link takes this one's
                u = work[-1][0]
                low[u] = min(low[u], low[v])
    return sorted(circles)


def test_no_import_circle_between_modules() -> None:
    circles = import_circles()
    assert not circles, f"{len(circles)} import circle(s) between modules:\n" + "\n".join(
        "  " + " <-> ".join(c) for c in circles)


def test_no_hand_written_module_over_400_lines() -> None:
    over = []
    for pkg in PACKAGES:
        for f in (ROOT / pkg).rglob("*.py"):
            if f.name.endswith(GENERATED):
                continue
            n = len(f.read_text(encoding="utf-8").splitlines())
            if n > MAX_LINES:
                over.append(f"{f.relative_to(ROOT)}: {n}")
    assert not over, over
