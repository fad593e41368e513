"""The digits family: classifiers of increasing capacity trained on scikit-learn's handwritten
digits (``sklearn.datasets.load_digits``: 1,797 8x8 images, 10 classes, shipped inside the
scikit-learn package, so nothing is downloaded), exported to ONNX with skl2onnx, and their
accuracy MEASURED on a held-out split with ONNX Runtime running the exported graph.

The ladder, least to most capacity (each member a model of its own, :mod:`variants.families.family`):

- ``digits-pca8``: softmax regression on the first 8 principal components;
- ``digits-softmax``: softmax regression on the 64 pixels;
- ``digits-mlp128``: a multi-layer perceptron, one hidden layer of 128 ReLUs;
- ``digits-svm``: a support-vector machine with an RBF kernel (C = 10).

Split: 30 % held out, stratified, ``random_state=0`` (540 validation images). Inputs are the pixels
scaled to [0, 1] (divided by 16) as float32 ``x`` [N, 64]; every exported graph keeps one output,
``probabilities`` [N, 10] (the SVM's: its one-vs-rest decision scores), whose argmax is the
prediction, which is what the variant pipeline's accuracy measure reads
(:func:`variants.generator.top1_agreement`). Training is deterministic: fixed seeds and one BLAS
thread (``threadpoolctl``), a few seconds on a laptop core.
"""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import onnx

from config.files import replace_atomic
from variants.families.family import FamilySpec, Member, check_ladder, graph_costs

FAMILY = "digits"
SPEC = FamilySpec(name=FAMILY, batch_sizes=(1, 2, 4, 8, 16, 32, 64, 128, 256), qos_ms=50.0, max_batch=256,
                  accuracy_source="measured: top-1 on the held-out 30 % of sklearn's digits (540 images), exported graph on ONNX Runtime")
#: the held-out fraction and the split's seed
VALIDATION_FRACTION = 0.3
SPLIT_SEED = 0
#: training seed of every member
SEED = 0
#: the ladder: (member, PCA components or None, hidden layers or "svm")
LADDER: tuple[tuple[str, int | None, tuple[int, ...] | str], ...] = (
    ("digits-pca8", 8, ()),
    ("digits-softmax", None, ()),
    ("digits-mlp512x2", None, (512, 512)),
    ("digits-svm", None, "svm"),
)
OPSETS = {"": 17, "ai.onnx.ml": 3}
KEEP_OUTPUT = "probabilities"


def split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x_train, x_val, y_train, y_val): the fixed split, pixels scaled to [0, 1], float32."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    xt, xv, yt, yv = train_test_split(x, y, test_size=VALIDATION_FRACTION, random_state=SPLIT_SEED, stratify=y)
    return xt, xv, yt.astype(np.int64), yv.astype(np.int64)


def make_estimator(pca: int | None, hidden: tuple[int, ...] | str, seed: int = SEED):
    """The scikit-learn estimator of one rung (unfitted)."""
    from sklearn.decomposition import PCA
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.svm import SVC

    if hidden == "svm":
        est = SVC(C=10.0, kernel="rbf", gamma="scale")
    else:
        # no hidden layer: softmax (multinomial logistic) regression trained by the same solver
        est = MLPClassifier(hidden_layer_sizes=tuple(hidden), alpha=1e-3, max_iter=200, random_state=seed)
    return make_pipeline(PCA(pca, random_state=seed), est) if pca else est


def train(pca: int | None, hidden: tuple[int, ...] | str, x: np.ndarray, y: np.ndarray, seed: int = SEED):
    """Fit one rung deterministically (one BLAS thread; convergence warnings silenced: the
    iteration budget is part of the rung)."""
    from sklearn.exceptions import ConvergenceWarning
    from threadpoolctl import threadpool_limits

    est = make_estimator(pca, hidden, seed)
    with threadpool_limits(1), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(x, y)
    return est


def keep_one_output(model: onnx.ModelProto, output: str = KEEP_OUTPUT) -> onnx.ModelProto:
    """``model`` with ``output`` its only output and the nodes and initializers it does not need
    dropped (skl2onnx also emits the label, an int64 first output, through ml-domain nodes)."""
    outs = [o for o in model.graph.output if o.name == output]
    if not outs:
        raise ValueError(f"graph has no output {output!r}")
    needed = {output}
    keep = []
    for node in reversed(list(model.graph.node)):
        if needed.intersection(node.output):
            keep.append(node)
            needed.update(i for i in node.input if i)
    keep.reverse()
    m = onnx.ModelProto()
    m.CopyFrom(model)
    del m.graph.node[:]
    m.graph.node.extend(keep)
    del m.graph.output[:]
    m.graph.output.extend(outs)
    inits = [t for t in m.graph.initializer if t.name in needed]
    del m.graph.initializer[:]
    m.graph.initializer.extend(inits)
    onnx.checker.check_model(m)
    return m


def export(est, features: int = 64) -> onnx.ModelProto:
    """The fitted estimator as ONNX (skl2onnx; no ZipMap), scores output only."""
    from skl2onnx import convert_sklearn
    from skl2onnx.common.data_types import FloatTensorType

    final = est.steps[-1][1] if hasattr(est, "steps") else est
    options = {id(final): {"zipmap": False}}
    with warnings.catch_warnings():   # skl2onnx reads SVC attributes scikit-learn 1.9 deprecates
        warnings.simplefilter("ignore", FutureWarning)
        onx = convert_sklearn(est, initial_types=[("x", FloatTensorType([None, features]))], options=options,
                              target_opset=OPSETS)
    return keep_one_output(onx)


def write_validation(path: Path) -> Path:
    """The validation split as the ``.npz`` the model-less API's RegisterModel takes (arrays ``x``
    and ``labels``)."""
    _, xv, _, yv = split()
    path = Path(path)
    replace_atomic(path, lambda tmp: np.savez(tmp.open("wb"), x=xv, labels=yv))
    return path


def measured_accuracy(path: Path, x: np.ndarray, labels: np.ndarray) -> float:
    """Top-1 of the ONNX graph at ``path`` on (x, labels), on ONNX Runtime's CPU provider."""
    from variants.generator import run_cpu, top1_agreement

    return top1_agreement(run_cpu(Path(path), x), labels)


def build(out_dir: Path) -> list[Member]:
    """Train, export and measure every rung into ``out_dir`` (``<member>.onnx`` and
    ``validation.npz``); ValueError if accuracy does not rise along the ladder."""
    out_dir = Path(out_dir)
    xt, xv, yt, yv = split()
    members = []
    for name, pca, hidden in LADDER:
        model = export(train(pca, hidden, xt, yt))
        path = out_dir / f"{name}.onnx"
        replace_atomic(path, lambda tmp, m=model: onnx.save(m, str(tmp)))
        params, macs = graph_costs(model)
        members.append(Member(name=name, family=FAMILY, accuracy=measured_accuracy(path, xv, yv), accuracy_measured=True,
                              params=params, macs=macs, path=path))
    write_validation(out_dir / "validation.npz")
    check_ladder(members)
    return members
