"""The built-in demo model and model resolution for workers.

``builtin:mlp`` is a small float32 multi-layer perceptron built with ``onnx.helper`` (x[N, in] ->
MatMul+Add -> Relu -> MatMul+Add -> y[N, out]) with a dynamic batch dimension and weights drawn
deterministically from a seed. It stands in for the registered models of INFaaS §3.1
(``register_model``) when no real model is at hand: embedded demo, tests, local workers.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from config.files import replace_atomic

BUILTIN_PREFIX = "builtin:"
BUILTINS = ("mlp",)
OPSET = 17
IR_VERSION = 8


class ModelError(ValueError):
    """A model spec that names a missing, unreadable or invalid model (one clear line)."""


def mlp_model(in_features: int = 64, hidden: int = 128, out: int = 8, seed: int = 0) -> onnx.ModelProto:
    """The MLP as an in-memory ONNX model (deterministic for a given seed and shape)."""
    if min(in_features, hidden, out) < 1:
        raise ValueError("in_features, hidden and out must be >= 1")
    rng = np.random.default_rng(seed)
    w1 = (rng.standard_normal((in_features, hidden)) / np.sqrt(in_features)).astype(np.float32)
    b1 = (0.1 * rng.standard_normal(hidden)).astype(np.float32)
    w2 = (rng.standard_normal((hidden, out)) / np.sqrt(hidden)).astype(np.float32)
    b2 = (0.1 * rng.standard_normal(out)).astype(np.float32)
    inits = [
        numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(b1, "b1"),
        numpy_helper.from_array(w2, "w2"), numpy_helper.from_array(b2, "b2"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h0"], name="fc1"),
        helper.make_node("Add", ["h0", "b1"], ["h1"], name="fc1_bias"),
        helper.make_node("Relu", ["h1"], ["h2"], name="relu"),
        helper.make_node("MatMul", ["h2", "w2"], ["y0"], name="fc2"),
        helper.make_node("Add", ["y0", "b2"], ["y"], name="fc2_bias"),
    ]
    graph = helper.make_graph(
        nodes, "costscale_mlp",
        inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", in_features])],
        outputs=[helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", out])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="costscale")
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    return model


def build_mlp(path: Path, in_features: int = 64, hidden: int = 128, out: int = 8, seed: int = 0) -> Path:
    """Write the built-in MLP to ``path`` (parents created) and return the path."""
    path = Path(path)
    model = mlp_model(in_features, hidden, out, seed)
    replace_atomic(path, lambda tmp: onnx.save(model, str(tmp)))
    return path


def resolve_model(spec: str, cache_dir: Path) -> Path:
    """Turn a model spec into a checked .onnx path.

    ``spec`` is ``builtin:mlp`` (written once into ``cache_dir``) or a path to an ONNX file.
    Raises :class:`ModelError` with one line for a missing, unreadable or invalid file.
    """
    spec = spec.strip()
    if not spec:
        raise ModelError("empty model spec (give builtin:mlp or a path to an .onnx file)")
    if spec.startswith(BUILTIN_PREFIX):
        name = spec[len(BUILTIN_PREFIX):]
        if name not in BUILTINS:
            raise ModelError(f"unknown built-in model {spec!r} (known: {', '.join(BUILTIN_PREFIX + b for b in BUILTINS)})")
        target = Path(cache_dir) / f"builtin-{name}.onnx"
        if not target.exists():
            build_mlp(target)
        return target
    p = Path(spec).expanduser()
    if not p.exists():
        raise ModelError(f"{p}: model file not found")
    if not p.is_file():
        raise ModelError(f"{p}: not a file")
    try:
        model = onnx.load(str(p), load_external_data=False)
        onnx.checker.check_model(model)
    except Exception as exc:  # onnx raises several unrelated types (DecodeError, ValidationError, ...)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelError(f"{p}: not a valid ONNX model ({first})") from None
    return p


def graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """The model's real inputs (graph inputs that are not initializers)."""
    inits = {i.name for i in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def input_signature(model_path: Path | str) -> list[tuple[str, tuple[int | None, ...], np.dtype]]:
    """(name, shape with None for dynamic dims, numpy dtype) of each real input of the model."""
    model = onnx.load(str(model_path), load_external_data=False)
    sig: list[tuple[str, tuple[int | None, ...], np.dtype]] = []
    for vi in graph_inputs(model):
        tt = vi.type.tensor_type
        dims = tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in tt.shape.dim)
        sig.append((vi.name, dims, np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type))))
    return sig


def make_inputs_for(signature: list[tuple[str, tuple[int | None, ...], np.dtype]], batch_size: int,
                    rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random inputs for a signature: every dynamic dimension becomes ``batch_size``, and so does a
    static first dimension (a batch-tuned variant: the executor pads the query up to it).

    Floats are standard normal; integers uniform in [0, 10); booleans fair coins.
    """
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    out: dict[str, np.ndarray] = {}
    for name, dims, dtype in signature:
        shape = tuple(batch_size if (d is None or i == 0) else d for i, d in enumerate(dims))
        if np.issubdtype(dtype, np.floating):
            out[name] = rng.standard_normal(shape).astype(dtype)
        elif np.issubdtype(dtype, np.integer):
            out[name] = rng.integers(0, 10, size=shape).astype(dtype)
        elif dtype == np.bool_:
            out[name] = rng.random(shape) < 0.5
        else:
            raise ValueError(f"input {name!r}: cannot generate values of dtype {dtype}")
    return out


def make_inputs(model_path: Path | str, batch_size: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random inputs matching the model's input signature (dynamic dims = ``batch_size``)."""
    return make_inputs_for(input_signature(model_path), batch_size, rng)
