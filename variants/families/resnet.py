"""The ResNet family: a real depth/width ladder of image classifiers (He et al., "Deep Residual
Learning for Image Recognition", CVPR 2016, Table 1) built as ONNX graphs with ``onnx.helper``.

The graphs are torchvision's ResNet-18/34/50/101/152 layer for layer (``torchvision.models.resnet``:
7x7/2 stem, 3x3/2 max-pool, four stages of basic or bottleneck blocks with the stride on the 3x3
convolution (the "ResNet v1.5" torchvision ships), global average pool, a 1000-way fully connected
layer), convolutions without bias followed by BatchNormalization, as a PyTorch export gives them.
The weights are random (He-normal, seeded): weights do not change a dense graph's latency, so the
latencies measured with ONNX Runtime are those of the real architectures. The accuracies are NOT
measured here (no ImageNet in any package): they are the published ImageNet-1K top-1 figures of
torchvision's IMAGENET1K_V1 weights, which reproduce the paper (torchvision model documentation,
https://pytorch.org/vision/stable/models.html, "acc@1", and each weight's ``num_params`` and
``GFLOPS``, which are multiply-accumulates per 224x224 image). :func:`architecture_counts` gives the
same parameter and multiply-accumulate counts from the architecture, and ``tests/variants/test_families.py``
checks them against those published figures, so the graphs are the published architectures.

Input ``x`` [N, 3, S, S] float32 (S = ``image_size``, 224 as published; a smaller S runs the same
architecture on smaller images, fewer MACs, the same parameters), output ``logits`` [N, 1000].
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from config.files import replace_atomic
from variants.families.family import FamilySpec, Member

FAMILY = "resnet"
SPEC = FamilySpec(name=FAMILY, batch_sizes=(1, 2, 4, 8, 16), qos_ms=1000.0, max_batch=16,
                  accuracy_source="published: torchvision IMAGENET1K_V1 acc@1 (ImageNet-1K val), not measured here")
OPSET = 17
IR_VERSION = 8
NUM_CLASSES = 1000
#: the resolution the published accuracies were measured at
PUBLISHED_IMAGE_SIZE = 224
#: scale of the last BatchNormalization of every residual branch: small, so that random weights keep
#: activations finite through 50 blocks (torchvision's ``zero_init_residual`` idea); cost unchanged
RESIDUAL_GAMMA = 0.2


@dataclass(frozen=True)
class Arch:
    """One ResNet of torchvision, with its published ImageNet-1K figures (IMAGENET1K_V1 weights)."""

    name: str
    block: str                    # "basic" (expansion 1) or "bottleneck" (expansion 4)
    layers: tuple[int, int, int, int]
    top1: float                   # published acc@1, percent
    params: int                   # published num_params
    gmacs: float                  # published "GFLOPS" (multiply-accumulates, 224x224), 2 decimals


#: torchvision's published figures (https://pytorch.org/vision/stable/models.html, ResNet*_Weights.IMAGENET1K_V1)
ARCHS: tuple[Arch, ...] = (
    Arch("resnet-18", "basic", (2, 2, 2, 2), 69.758, 11_689_512, 1.81),
    Arch("resnet-34", "basic", (3, 4, 6, 3), 73.314, 21_797_672, 3.66),
    Arch("resnet-50", "bottleneck", (3, 4, 6, 3), 76.130, 25_557_032, 4.09),
    Arch("resnet-101", "bottleneck", (3, 4, 23, 3), 77.374, 44_549_160, 7.80),
    Arch("resnet-152", "bottleneck", (3, 8, 36, 3), 78.312, 60_192_808, 11.51),
)
ARCH_BY_NAME = {a.name: a for a in ARCHS}


def _out(size: int, k: int, stride: int, pad: int) -> int:
    return (size + 2 * pad - k) // stride + 1


class _Builder:
    """Appends nodes and initializers, and counts parameters and MACs as it goes (torchvision's
    counting: convolution and linear MACs; BatchNormalization's scale and bias are parameters, its
    running mean and variance are buffers)."""

    def __init__(self, seed: int, weights: bool) -> None:
        self.rng = np.random.default_rng(seed)
        self.weights = weights
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.params = 0
        self.macs = 0
        self._n = 0

    def _name(self, kind: str) -> str:
        self._n += 1
        return f"{kind}{self._n}"

    def _init(self, name: str, arr: np.ndarray) -> None:
        if self.weights:
            self.inits.append(numpy_helper.from_array(arr.astype(np.float32, copy=False), name))

    def conv_bn(self, x: str, cin: int, cout: int, k: int, stride: int, size: int, relu: bool,
                gamma: float = 1.0) -> tuple[str, int]:
        name = self._name("conv")
        pad = k // 2
        w = (self.rng.standard_normal((cout, cin, k, k), dtype=np.float32) * np.sqrt(2.0 / (cin * k * k))
             if self.weights else np.empty(0))
        self._init(f"{name}.w", w)
        out = _out(size, k, stride, pad)
        self.params += cout * cin * k * k + 2 * cout
        self.macs += cout * out * out * cin * k * k
        self.nodes.append(helper.make_node("Conv", [x, f"{name}.w"], [f"{name}.c"], name=name, kernel_shape=[k, k],
                                           strides=[stride, stride], pads=[pad] * 4))
        for suffix, value in (("scale", gamma), ("bias", 0.0), ("mean", 0.0), ("var", 1.0)):
            self._init(f"{name}.bn.{suffix}", np.full(cout, value, dtype=np.float32))
        y = f"{name}.bn"
        self.nodes.append(helper.make_node("BatchNormalization", [f"{name}.c"] + [f"{name}.bn.{s}" for s in
                                           ("scale", "bias", "mean", "var")], [y], name=f"{name}.bn", epsilon=1e-5))
        if relu:
            self.nodes.append(helper.make_node("Relu", [y], [f"{y}.relu"]))
            y = f"{y}.relu"
        return y, out

    def block(self, x: str, kind: str, cin: int, width: int, stride: int, size: int) -> tuple[str, int, int]:
        """One residual block (torchvision ``BasicBlock`` / ``Bottleneck``); returns (out, channels, size)."""
        expansion = 1 if kind == "basic" else 4
        cout = width * expansion
        if kind == "basic":
            h, s = self.conv_bn(x, cin, width, 3, stride, size, relu=True)
            h, s = self.conv_bn(h, width, width, 3, 1, s, relu=False, gamma=RESIDUAL_GAMMA)
        else:
            h, s = self.conv_bn(x, cin, width, 1, 1, size, relu=True)
            h, s = self.conv_bn(h, width, width, 3, stride, s, relu=True)
            h, s = self.conv_bn(h, width, cout, 1, 1, s, relu=False, gamma=RESIDUAL_GAMMA)
        skip = x
        if stride != 1 or cin != cout:
            skip, _ = self.conv_bn(x, cin, cout, 1, stride, size, relu=False)
        name = self._name("add")
        self.nodes.append(helper.make_node("Add", [h, skip], [name], name=name))
        self.nodes.append(helper.make_node("Relu", [name], [f"{name}.relu"]))
        return f"{name}.relu", cout, s


def build_graph(arch: Arch, image_size: int = PUBLISHED_IMAGE_SIZE, seed: int = 0,
                weights: bool = True) -> tuple[onnx.ModelProto | None, int, int]:
    """(model, parameters, MACs per image) of ``arch`` at ``image_size``. With ``weights=False``
    only the counts (no graph: None), which is how :func:`architecture_counts` gets them."""
    if image_size < 32:
        raise ValueError("image_size must be >= 32 (five stride-2 stages)")
    b = _Builder(seed, weights)
    h, size = b.conv_bn("x", 3, 64, 7, 2, image_size, relu=True)
    size = _out(size, 3, 2, 1)
    b.nodes.append(helper.make_node("MaxPool", [h], ["pool0"], kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4))
    h, cin = "pool0", 64
    for stage, (n, width) in enumerate(zip(arch.layers, (64, 128, 256, 512))):
        for i in range(n):
            h, cin, size = b.block(h, arch.block, cin, width, 2 if (i == 0 and stage > 0) else 1, size)
    b.nodes.append(helper.make_node("GlobalAveragePool", [h], ["gap"]))
    b.nodes.append(helper.make_node("Flatten", ["gap"], ["feat"], axis=1))
    fc_w = (b.rng.standard_normal((NUM_CLASSES, cin), dtype=np.float32) / np.sqrt(cin)) if weights else np.empty(0)
    b._init("fc.w", fc_w)
    b._init("fc.b", np.zeros(NUM_CLASSES, dtype=np.float32))
    b.params += NUM_CLASSES * cin + NUM_CLASSES
    b.macs += NUM_CLASSES * cin
    b.nodes.append(helper.make_node("Gemm", ["feat", "fc.w", "fc.b"], ["logits"], name="fc", transB=1))
    if not weights:
        return None, b.params, b.macs
    graph = helper.make_graph(
        b.nodes, arch.name.replace("-", "_"),
        inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, image_size, image_size])],
        outputs=[helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", NUM_CLASSES])],
        initializer=b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="costscale")
    model.ir_version = IR_VERSION
    return model, b.params, b.macs


def architecture_counts(arch: Arch, image_size: int = PUBLISHED_IMAGE_SIZE) -> tuple[int, int]:
    """(parameters, MACs per image) of ``arch`` from its architecture alone (no weights drawn)."""
    _, params, macs = build_graph(arch, image_size, weights=False)
    return params, macs


def build_file(arch: Arch, path: Path, image_size: int = PUBLISHED_IMAGE_SIZE, seed: int = 0) -> Path:
    """Write ``arch``'s graph (random weights) to ``path`` (atomically) and return it."""
    model, _, _ = build_graph(arch, image_size, seed)
    assert model is not None
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_atomic(path, lambda tmp: onnx.save(model, str(tmp)))
    return path


def build(out_dir: Path, image_size: int = PUBLISHED_IMAGE_SIZE, seed: int = 0,
          names: tuple[str, ...] | None = None) -> list[Member]:
    """Write every rung (or those ``names``) to ``out_dir/<name>.onnx``; accuracies published."""
    members = []
    for arch in ARCHS:
        if names is not None and arch.name not in names:
            continue
        path = build_file(arch, Path(out_dir) / f"{arch.name}.onnx", image_size, seed)
        params, macs = architecture_counts(arch, image_size)
        members.append(Member(name=arch.name, family=FAMILY, accuracy=round(arch.top1 / 100.0, 5),
                              accuracy_measured=False, params=params, macs=macs, path=path))
    return members
