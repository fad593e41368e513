"""A user's own model for the bring-your-own-model tests: a small ONNX graph built here with
``onnx.helper`` (not ``builtin:mlp``, not a Kairos model name), and a config that serves it."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import yaml
from onnx import TensorProto, helper, numpy_helper

MODEL = "mymodel"
KAIROS_TYPES = ("g4dn.xlarge", "c5n.2xlarge", "r5n.large", "t3.xlarge")


def build_user_model(path: Path, features: int = 32, hidden: int = 128, out: int = 4) -> Path:
    """x[N, features] -> Gemm -> Tanh -> MatMul -> y[N, out], dynamic batch."""
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(rng.standard_normal((features, hidden)).astype(np.float32), "w1"),
             numpy_helper.from_array(np.zeros(hidden, np.float32), "b1"),
             numpy_helper.from_array(rng.standard_normal((hidden, out)).astype(np.float32), "w2")]
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"]), helper.make_node("Tanh", ["h"], ["t"]),
             helper.make_node("MatMul", ["t", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "user_model",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", features])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", out])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def user_config(tmp: Path, onnx_path: Path, **over: Any) -> dict[str, Any]:
    """The raw config (a dict) of a cluster serving the user's model on the four Kairos types."""
    raw: dict[str, Any] = {
        "cluster": "byom", "budget_per_hour": 1.0,
        "models": [{"name": MODEL, "onnx": str(onnx_path), "qos_ms": 50, "max_batch": 64}],
        "instance_types": [{"type": t, "max": 2} for t in KAIROS_TYPES],
        "launch": {"ami_id": "ami-12c6146b"},
        "dispatcher": {"advertise": "10.0.0.10:50051"},
        "model_scaling": {"generate_variants": False},
        "state_path": str(tmp / "state" / "state.db"),
    }
    raw.update(over)
    return raw


def write_config(path: Path, raw: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path
