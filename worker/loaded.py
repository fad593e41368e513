"""Which loaded variant a query runs on, and its inputs: a named variant must be loaded; a model
names its own variant, else the first loaded variant of it (by name); neither named: the only
variant loaded. Inputs are the query's tensors (named, else by the variant's input order), or, for
a batch size alone, inputs generated from the variant's signature."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from config.profiles import LatencyProfile
from dispatcher.proto import costscale_pb2 as pb
from dispatcher.proto.tensors import tensor_to_array
from variants.runtime.builtin_models import make_inputs_for


@dataclass
class LoadedVariant:
    """A variant the worker holds, with what padding its queries needs."""

    model: str
    path: Path
    signature: list = field(default_factory=list)
    speed_factor: float = 1.0   # the dispatcher's measured relative latency (padding only)
    profile: LatencyProfile | None = None   # its own model's profile on this type (padding only)


def resolve_variant(loaded: dict[str, LoadedVariant], model: str, variant: str) -> str:
    """The loaded variant a query for ``model`` / ``variant`` runs on; KeyError when none is loaded,
    ValueError when the query names neither and several are."""
    if variant:
        if variant not in loaded:
            raise KeyError(f"variant {variant!r} is not loaded (loaded: {', '.join(sorted(loaded)) or 'none'})")
        return variant
    if model:
        if model in loaded:
            return model
        for name in sorted(loaded):
            if loaded[name].model == model:
                return name
        raise KeyError(f"no variant of model {model!r} is loaded")
    if len(loaded) == 1:
        return next(iter(loaded))
    raise ValueError("give model or variant (this worker has %d variants loaded)" % len(loaded))


def query_inputs(signature: list, request: pb.InferRequest,
                 rng: np.random.Generator) -> tuple[dict[str, np.ndarray], int]:
    """The input arrays of ``request`` for a variant of ``signature`` and its batch size."""
    if request.inputs:
        arrays: dict[str, np.ndarray] = {}
        for i, t in enumerate(request.inputs):
            key = t.name or (signature[i][0] if i < len(signature) else f"input{i}")
            arrays[key] = tensor_to_array(t)
        first = next(iter(arrays.values()))
        batch = request.batch_size if request.batch_size > 0 else (first.shape[0] if first.ndim else 1)
        return arrays, int(batch)
    if request.batch_size <= 0:
        raise ValueError("give input tensors or a batch_size >= 1")
    return make_inputs_for(signature, int(request.batch_size), rng), int(request.batch_size)


__all__ = ["LoadedVariant", "query_inputs", "resolve_variant"]
