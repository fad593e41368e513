"""The worker's hardware executor interface (INFaaS §3.2, "Hardware Executors").

A worker hands each query to the executor of its hardware: ONNX Runtime on GPU and CPU instance
types (:mod:`variants.runtime.onnx_executor`), the Neuron runtime on Inferentia where it is installed
(:mod:`variants.runtime.neuron_executor`), and, on Inferentia types without it, ONNX Runtime on the CPU
with the service time padded to the type's profile (kind ``"emulated"``, DESIGN "Hardware").

``choose_providers`` and ``choose_executor_kind`` are the pure decisions; executors are adapters.
"""
from __future__ import annotations

from pathlib import Path
from typing import Literal, Mapping, Protocol, Sequence

import numpy as np

ExecutorKind = Literal["onnxruntime", "neuron", "emulated"]
Hardware = Literal["gpu", "cpu", "inferentia"]
#: the hardware class of a config model's base variant: it runs on every class
ANY_HARDWARE = "any"

CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"
TENSORRT = "TensorrtExecutionProvider"

#: short names accepted on the command line
PROVIDER_ALIASES: dict[str, str] = {"cuda": CUDA, "cpu": CPU, "tensorrt": TENSORRT, "trt": TENSORRT}


class Executor(Protocol):
    """Runs loaded variants. ``providers`` are the providers actually in use (not the requested ones)."""

    kind: ExecutorKind

    @property
    def providers(self) -> list[str]: ...

    def load(self, variant: str, path: Path) -> None: ...

    def unload(self, variant: str) -> None: ...

    def loaded(self) -> list[str]: ...

    def run(self, variant: str, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]: ...


def parse_providers(text: str) -> list[str] | None:
    """``"auto"`` -> None; ``"cuda,cpu"`` -> full ONNX Runtime provider names. Raises ValueError."""
    text = text.strip()
    if text.lower() == "auto":
        return None
    out: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            raise ValueError(f"empty provider in {text!r}")
        full = PROVIDER_ALIASES.get(part.lower(), part)
        if not full.endswith("ExecutionProvider"):
            raise ValueError(f"unknown provider {part!r} (use cuda, cpu, tensorrt, a full "
                             f"ONNX Runtime provider name, or auto)")
        if full not in out:
            out.append(full)
    return out


def choose_providers(hardware: Hardware, requested: Sequence[str] | None) -> list[str]:
    """Providers to ask ONNX Runtime for: the explicit list, else CUDA first on GPU types and CPU
    otherwise (DESIGN "Hardware"). CPU is always the last resort."""
    if requested:
        out = list(requested)
    elif hardware == "gpu":
        out = [CUDA, CPU]
    else:
        out = [CPU]
    if CPU not in out:
        out.append(CPU)
    return out


def choose_executor_kind(hardware: Hardware, neuron_available: bool, model_paths: Sequence[Path]) -> ExecutorKind:
    """Neuron where the runtime is importable and the models are Neuron-compiled (``.pt``); on
    Inferentia without that, emulation; ONNX Runtime everywhere else."""
    if hardware == "inferentia":
        if neuron_available and model_paths and all(Path(p).suffix == ".pt" for p in model_paths):
            return "neuron"
        return "emulated"
    return "onnxruntime"
