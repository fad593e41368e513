"""Variant generator (INFaaS §3.2 "Variant-Generator"; model-vertical scaling, INFaaS §4.2).

From one registered ONNX model it makes model-variants that differ in precision, target hardware
and tuned batch size, without training anything:

- ``fp32``: the model as is (CPU and GPU);
- ``int8``: dynamic quantization of the weights (``onnxruntime.quantization.quantize_dynamic``), CPU;
- ``fp16``: float16 weights and compute with Cast nodes at the float inputs/outputs so callers keep
  float32 tensors (own small converter over initializers, Constant nodes and Casts), GPU;
- batch-tuned (``-b<N>``): same weights with a static batch dimension N (the variants "optimized
  for different batch sizes" of INFaaS §3.2); executors pad smaller queries up to N.

Accuracy (INFaaS §3.1: the validation set passed to ``register_model``) is top-1 agreement of a
variant's argmax with the labels of an ``.npz`` holding arrays ``x`` and ``labels``; without a
validation set a variant inherits its parent's accuracy and is marked estimated.

:func:`plan_variants` is the pure decision (which variants to make); :func:`generate_variants` the
adapter that writes files and measures accuracy.
"""
from __future__ import annotations

import copy
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from variants.runtime.builtin_models import graph_inputs
from variants.runtime.executor import CPU, CUDA, Hardware
from variants.runtime.neuron_executor import NEURON_PROVIDER

log = logging.getLogger(__name__)

Precision = Literal["fp32", "fp16", "int8"]

#: which precisions are generated for which hardware class
PRECISIONS: dict[str, tuple[Precision, ...]] = {
    "cpu": ("fp32", "int8"),
    "gpu": ("fp32", "fp16"),
    "inferentia": ("fp32",),  # served by emulation unless a Neuron toolchain compiles it
}
PROVIDER_FOR: dict[str, str] = {"cpu": CPU, "gpu": CUDA, "inferentia": NEURON_PROVIDER}


@dataclass(frozen=True)
class Variant:
    """One model-variant and where its file lives (INFaaS §3.2 Metadata Store row)."""

    name: str
    model: str
    application: str
    precision: Precision
    hardware: Hardware
    provider: str
    tuned_batch: int            # 0: dynamic batch
    path: Path
    accuracy: float
    accuracy_estimated: bool

    def as_dict(self) -> dict[str, object]:
        d = asdict(self)
        d["path"] = str(self.path)
        return d


@dataclass(frozen=True)
class VariantSpec:
    """What to generate: the pure plan, before any file exists."""

    name: str
    precision: Precision
    hardware: Hardware
    provider: str
    tuned_batch: int


def variant_name(model: str, precision: str, hardware: str, tuned_batch: int = 0) -> str:
    """``<model>-<precision>-<hw>[-b<N>]``."""
    return f"{model}-{precision}-{hardware}" + (f"-b{tuned_batch}" if tuned_batch else "")


def plan_variants(model: str, hardware: Sequence[Hardware] = ("cpu", "gpu"),
                  tuned_batches: Sequence[int] = (8, 32)) -> list[VariantSpec]:
    """The variants to generate for ``model``: each precision of each hardware class, plus
    batch-tuned copies of the hardware's default precision (fp32 on CPU, fp16 on GPU)."""
    specs: list[VariantSpec] = []
    for hw in hardware:
        if hw not in PRECISIONS:
            raise ValueError(f"unknown hardware class {hw!r}")
        for prec in PRECISIONS[hw]:
            specs.append(VariantSpec(variant_name(model, prec, hw), prec, hw, PROVIDER_FOR[hw], 0))
        tuned_prec: Precision = "fp16" if hw == "gpu" else "fp32"
        for b in tuned_batches:
            if b < 1:
                raise ValueError(f"tuned batch must be >= 1, got {b}")
            specs.append(VariantSpec(variant_name(model, tuned_prec, hw, b), tuned_prec, hw, PROVIDER_FOR[hw], int(b)))
    return specs


# -- graph transforms (pure over ModelProto) -----------------------------------------------------

def to_fp16(model: onnx.ModelProto) -> onnx.ModelProto:
    """Float16 copy of ``model`` that still takes and returns float32 tensors.

    Converts float32 initializers, Constant node tensors and Casts-to-float to float16, and inserts a
    Cast(float16) after each float32 graph input and a Cast(float32) before each float32 output.
    Intermediate value_info types are dropped (ONNX Runtime re-infers them).
    """
    m = copy.deepcopy(model)
    g = m.graph
    for init in g.initializer:
        if init.data_type == TensorProto.FLOAT:
            init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init).astype(np.float16), init.name))
    for node in g.node:
        if node.op_type == "Constant":
            for attr in node.attribute:
                if attr.name == "value" and attr.t.data_type == TensorProto.FLOAT:
                    attr.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(attr.t).astype(np.float16), attr.t.name))
        if node.op_type == "Cast":
            for attr in node.attribute:
                if attr.name == "to" and attr.i == TensorProto.FLOAT:
                    attr.i = TensorProto.FLOAT16
    del g.value_info[:]
    new_nodes: list[onnx.NodeProto] = []
    for vi in graph_inputs(m):
        if vi.type.tensor_type.elem_type != TensorProto.FLOAT:
            continue
        half = f"{vi.name}__fp16"
        _rename_in_nodes(g.node, vi.name, half, outputs=False)
        new_nodes.append(helper.make_node("Cast", [vi.name], [half], to=TensorProto.FLOAT16, name=f"cast_in_{vi.name}"))
    tail: list[onnx.NodeProto] = []
    for vo in g.output:
        if vo.type.tensor_type.elem_type != TensorProto.FLOAT:
            continue
        half = f"{vo.name}__fp16"
        # the producer writes the fp16 name; an output also consumed inside the graph is read by it
        _rename_in_nodes(g.node, vo.name, half, outputs=True)
        tail.append(helper.make_node("Cast", [half], [vo.name], to=TensorProto.FLOAT, name=f"cast_out_{vo.name}"))
    nodes = new_nodes + list(g.node) + tail
    del g.node[:]
    g.node.extend(nodes)
    return m


def _rename_in_nodes(nodes, old: str, new: str, outputs: bool) -> None:  # type: ignore[no-untyped-def]
    """Point every node input named ``old`` (and, with ``outputs``, every node output) at ``new``."""
    for node in nodes:
        fields = (node.input, node.output) if outputs else (node.input,)
        for names in fields:
            for i, name in enumerate(names):
                if name == old:
                    names[i] = new


def with_static_batch(model: onnx.ModelProto, batch: int) -> onnx.ModelProto:
    """Copy of ``model`` whose inputs' and outputs' first dimension is fixed to ``batch``."""
    if batch < 1:
        raise ValueError("batch must be >= 1")
    m = copy.deepcopy(model)
    for vi in list(graph_inputs(m)) + list(m.graph.output):
        dims = vi.type.tensor_type.shape.dim
        if len(dims):
            dims[0].Clear()
            dims[0].dim_value = int(batch)
    del m.graph.value_info[:]
    return m


def quantize_int8(src: Path, dst: Path) -> Path:
    """Dynamic int8 quantization of the weights (activations quantized at run time)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8)
    return dst


# -- accuracy ------------------------------------------------------------------------------------

def load_validation(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(x, labels) from an ``.npz`` with arrays ``x`` and ``labels``; ValueError with one line."""
    try:
        with np.load(str(path)) as data:
            if "x" not in data or "labels" not in data:
                raise ValueError(f"{path}: validation set needs arrays 'x' and 'labels' (has {', '.join(data.files)})")
            x, labels = np.asarray(data["x"]), np.asarray(data["labels"]).reshape(-1)
    except OSError as exc:
        raise ValueError(f"{path}: cannot read validation set ({exc})") from None
    if len(x) != len(labels) or len(x) == 0:
        raise ValueError(f"{path}: validation set has {len(x)} inputs and {len(labels)} labels")
    return x, labels


def top1_agreement(logits: np.ndarray, labels: np.ndarray) -> float:
    """Fraction of rows whose argmax equals the label (INFaaS: variant accuracy on the validation set)."""
    pred = np.asarray(logits).reshape(len(labels), -1).argmax(axis=1)
    return float(np.mean(pred == np.asarray(labels).reshape(-1)))


def run_cpu(path: Path, x: np.ndarray) -> np.ndarray:
    """First output of the model at ``path`` on ONNX Runtime's CPU provider (static batches padded)."""
    import onnxruntime as ort

    from variants.runtime.onnx_executor import run_batched, static_batch

    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(str(path), sess_options=so, providers=[CPU])
    name = sess.get_inputs()[0].name
    out = run_batched(sess, {name: x.astype(np.float32, copy=False)}, static_batch(sess))
    return next(iter(out.values()))


def make_validation_set(model_path: Path, n: int, path: Path, seed: int = 0, label_noise: float = 0.0) -> Path:
    """A small validation set for a model with one float input: random ``x`` and, as labels, the
    fp32 model's own argmax (with a fraction ``label_noise`` of labels changed)."""
    from variants.runtime.builtin_models import make_inputs

    rng = np.random.default_rng(seed)
    inputs = make_inputs(model_path, n, rng)
    x = next(iter(inputs.values()))
    logits = run_cpu(model_path, x)
    labels = logits.reshape(n, -1).argmax(axis=1)
    k = int(round(label_noise * n))
    if k:
        idx = rng.choice(n, size=k, replace=False)
        labels[idx] = (labels[idx] + 1) % logits.reshape(n, -1).shape[1]
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(str(path), x=x, labels=labels)
    return path


# -- the adapter -----------------------------------------------------------------------------------

def generate_variants(model_path: Path, model: str, out_dir: Path, application: str | None = None,
                      hardware: Sequence[Hardware] = ("cpu", "gpu"), tuned_batches: Sequence[int] = (8, 32),
                      validation: Path | None = None, parent_accuracy: float = 1.0) -> list[Variant]:
    """Write every planned variant of ``model_path`` under ``out_dir`` and measure its accuracy.

    Without ``validation`` each variant gets ``parent_accuracy`` (default 1.0: "agrees with the
    registered model") and ``accuracy_estimated=True``. A variant that cannot run on the CPU
    provider here (so its accuracy cannot be measured) also inherits, marked estimated.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    base = onnx.load(str(model_path))
    onnx.checker.check_model(base)
    val = load_validation(validation) if validation is not None else None
    app = application or model
    fp32_path = out_dir / f"{model}-fp32.onnx"
    onnx.save(base, str(fp32_path))
    fp16_model: onnx.ModelProto | None = None
    variants: list[Variant] = []
    measured_parent: float | None = None
    for spec in plan_variants(model, hardware, tuned_batches):
        if spec.precision == "fp32" and not spec.tuned_batch:
            path = fp32_path
        elif spec.precision == "int8":
            path = quantize_int8(fp32_path, out_dir / f"{spec.name}.onnx")
        else:
            if spec.precision == "fp16":
                fp16_model = fp16_model or to_fp16(base)
                m = fp16_model
            else:
                m = base
            if spec.tuned_batch:
                m = with_static_batch(m, spec.tuned_batch)
            onnx.checker.check_model(m)
            path = out_dir / f"{spec.name}.onnx"
            onnx.save(m, str(path))
        accuracy, estimated = measured_parent if measured_parent is not None else parent_accuracy, True
        if val is not None and path == fp32_path and measured_parent is not None:
            estimated = False          # the same file as the fp32 variant measured above
        elif val is not None:
            try:
                accuracy, estimated = top1_agreement(run_cpu(path, val[0]), val[1]), False
                if spec.precision == "fp32" and not spec.tuned_batch:
                    measured_parent = accuracy
            except Exception as exc:  # e.g. an op without a CPU kernel for this precision
                log.warning("variant %s: accuracy not measured on CPU (%s); inherited", spec.name, exc)
        variants.append(Variant(name=spec.name, model=model, application=app, precision=spec.precision,
                                hardware=spec.hardware, provider=spec.provider, tuned_batch=spec.tuned_batch,
                                path=path, accuracy=accuracy, accuracy_estimated=estimated))
    return variants
