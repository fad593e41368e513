"""Packaging: the control host gets the CPU build of ONNX Runtime in a tested range, never the GPU
build beside it (onnxruntime and onnxruntime-gpu install the same package and overwrite each
other; a GPU worker swaps one for the other, README "GPU workers")."""
from __future__ import annotations

import tomllib
from pathlib import Path

import onnxruntime
from packaging.requirements import Requirement
from packaging.version import Version

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def _project() -> dict:
    with PYPROJECT.open("rb") as fh:
        return tomllib.load(fh)["project"]


def test_onnxruntime_is_the_cpu_build_in_a_tested_range() -> None:
    reqs = [Requirement(r) for r in _project()["dependencies"]]
    ort = [r for r in reqs if r.name.startswith("onnxruntime")]
    assert [r.name for r in ort] == ["onnxruntime"]          # the CPU build, on every platform
    assert ort[0].marker is None
    spec = ort[0].specifier
    assert str(spec) == "<1.32,>=1.31.1"
    assert Version("1.31.1") in spec and Version("1.32.0") not in spec
    # what this environment runs is in the range (whichever build provides the package)
    assert Version(onnxruntime.__version__) in spec
    assert "CPUExecutionProvider" in onnxruntime.get_available_providers()


def test_no_extra_installs_the_gpu_build_beside_the_cpu_one() -> None:
    extras = _project()["optional-dependencies"]
    names = {Requirement(r).name for reqs in extras.values() for r in reqs}
    assert not {n for n in names if n.startswith("onnxruntime")}
