"""What a variant family is: a named set of models that answer one task (an application of the
model-less API, INFaaS §3.1) at different points of accuracy and cost (Proteus §3 "model
variants"; SuperServe's "SubNets"), one :class:`Member` each, ordered by capacity.

A member is served as a model of its own whose single variant is the model itself (the registry's
base variant), so ``variant`` and the registry's model name are the member's name and the
application is the family's. This module holds the shared shape and the cost counts; the families
themselves are :mod:`variants.families.digits` and :mod:`variants.families.resnet`.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import onnx
from onnx import numpy_helper


@dataclass(frozen=True)
class Member:
    """One model of a family and the file it was built to."""

    name: str                 # model and variant name (1-63 letters, digits, '.', '_', '-')
    family: str               # the application it answers
    accuracy: float           # top-1, a fraction of 1
    accuracy_measured: bool   # measured here on the family's validation set; False: a published figure
    params: int               # learned parameters
    macs: int                 # multiply-accumulates per input (one row, one image)
    path: Path


@dataclass(frozen=True)
class FamilySpec:
    """How a family is profiled and served."""

    name: str
    batch_sizes: tuple[int, ...]    # the profiled batch sizes
    qos_ms: float                   # the latency objective it is registered with
    max_batch: int
    accuracy_source: str            # one line: where the accuracies come from


def graph_costs(model: onnx.ModelProto) -> tuple[int, int]:
    """(parameters, multiply-accumulates per input row) of a dense ONNX classifier: every
    initializer element is a parameter; a MatMul or Gemm by a [K, M] initializer costs K*M per row;
    an ``ai.onnx.ml`` SVMClassifier costs one multiply-accumulate per support-vector element (the
    kernel's dot products) and its support vectors, coefficients and intercepts are parameters.
    Convolutions are not counted here (:func:`variants.families.resnet.architecture_counts`)."""
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    params = sum(int(a.size) for a in inits.values())
    macs = 0
    for node in model.graph.node:
        if node.op_type in ("MatMul", "Gemm") and len(node.input) >= 2 and node.input[1] in inits:
            w = inits[node.input[1]]
            if w.ndim == 2:
                macs += int(w.shape[0] * w.shape[1])
        elif node.op_type == "SVMClassifier":
            attrs = {a.name: a for a in node.attribute}
            sv = len(attrs["support_vectors"].floats) if "support_vectors" in attrs else 0
            extra = sum(len(attrs[k].floats) for k in ("coefficients", "rho") if k in attrs)
            macs += sv
            params += sv + extra
    return params, macs


def check_ladder(members: list[Member]) -> None:
    """ValueError unless the members' accuracy rises strictly along the capacity ladder."""
    for a, b in zip(members, members[1:]):
        if not b.accuracy > a.accuracy:
            raise ValueError(f"{b.name} ({b.accuracy:.4f}) is not more accurate than {a.name} ({a.accuracy:.4f})")
