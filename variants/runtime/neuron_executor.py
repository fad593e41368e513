"""Neuron executor for Inferentia (inf1/inf2) instance types (DESIGN "Hardware", INFaaS §3.2).

Inferentia runs Neuron-compiled models (TorchScript produced by ``torch_neuronx.trace``), not
ONNX Runtime. This executor is used only where the Neuron runtime is importable; elsewhere
:func:`available` is False and the worker serves Inferentia types by emulation (ONNX Runtime on
the CPU, service time padded to the type's profile) and says so.

Not exercised by the test suite: no Neuron runtime exists on the CI machines.
"""
from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from typing import Mapping

import numpy as np

from variants.runtime.executor import ExecutorKind

NEURON_MODULES = ("torch_neuronx", "neuronx", "torch_neuron")
NEURON_PROVIDER = "NeuronCore"


def available() -> bool:
    """True when a Neuron runtime module can be imported on this machine."""
    for name in NEURON_MODULES:
        try:
            if importlib.util.find_spec(name) is not None:
                return True
        except (ImportError, ValueError):
            continue
    return False


class NeuronExecutor:
    """Runs Neuron-compiled TorchScript models; inputs/outputs are numpy arrays."""

    kind: ExecutorKind = "neuron"

    def __init__(self) -> None:
        if not available():
            raise RuntimeError("the Neuron runtime (torch_neuronx) is not installed on this machine")
        self._torch = importlib.import_module("torch")
        for name in NEURON_MODULES:  # registers the Neuron ops with torch
            if importlib.util.find_spec(name) is not None:
                importlib.import_module(name)
                break
        self._models: dict[str, object] = {}

    @property
    def providers(self) -> list[str]:
        return [NEURON_PROVIDER]

    def load(self, variant: str, path: Path) -> None:
        if Path(path).suffix != ".pt":
            raise ValueError(f"{path}: the Neuron executor needs a Neuron-compiled TorchScript (.pt) file")
        self._models[variant] = self._torch.jit.load(str(path))

    def unload(self, variant: str) -> None:
        self._models.pop(variant, None)

    def loaded(self) -> list[str]:
        return sorted(self._models)

    def run(self, variant: str, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        model = self._models[variant]
        args = [self._torch.from_numpy(np.ascontiguousarray(v)) for v in inputs.values()]
        with self._torch.no_grad():
            out = model(*args)  # type: ignore[operator]
        outs = out if isinstance(out, (tuple, list)) else (out,)
        return {f"output{i}": o.cpu().numpy() for i, o in enumerate(outs)}
