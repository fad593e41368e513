"""Variant generator (INFaaS §3.2) and the built-in model: valid ONNX, runnable, close to fp32,
accuracy measured on a validation set or inherited and marked estimated."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import given, settings, strategies as st
from onnx import TensorProto

from variants.runtime.builtin_models import ModelError, build_mlp, make_inputs, mlp_model, resolve_model
from variants.generator import (Variant, generate_variants, load_validation, make_validation_set, plan_variants,
                                run_cpu, to_fp16, top1_agreement, variant_name, with_static_batch)
from variants.runtime.onnx_executor import run_batched, static_batch

# Tolerances against the fp32 outputs of the builtin MLP (outputs are O(1)):
FP16_ATOL = 1e-2   # float16 weights/activations: ~3 decimal digits
INT8_ATOL = 1e-1   # dynamic int8 weight quantization

N_VAL = 200
NOISE = 0.1         # 20 of 200 labels are deliberately wrong -> fp32 accuracy exactly 0.9

EXPECTED = [
    "mlp-fp32-cpu", "mlp-int8-cpu", "mlp-fp32-cpu-b8", "mlp-fp32-cpu-b32",
    "mlp-fp32-gpu", "mlp-fp16-gpu", "mlp-fp16-gpu-b8", "mlp-fp16-gpu-b32",
]


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_mlp(tmp_path_factory.mktemp("base") / "mlp.onnx")


@pytest.fixture(scope="module")
def validation(base: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_validation_set(base, N_VAL, tmp_path_factory.mktemp("val") / "val.npz", seed=3, label_noise=NOISE)


@pytest.fixture(scope="module")
def measured(base: Path, validation: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Variant]:
    vs = generate_variants(base, "mlp", tmp_path_factory.mktemp("measured"), application="demo", validation=validation)
    return {v.name: v for v in vs}


@pytest.fixture(scope="module")
def estimated(base: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Variant]:
    vs = generate_variants(base, "mlp", tmp_path_factory.mktemp("estimated"), parent_accuracy=0.76)
    return {v.name: v for v in vs}


def _session(path: Path) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), sess_options=so, providers=["CPUExecutionProvider"])


def test_plan_names_and_fields() -> None:
    specs = plan_variants("mlp")
    assert [s.name for s in specs] == EXPECTED
    assert variant_name("m", "int8", "cpu", 0) == "m-int8-cpu"
    assert variant_name("m", "fp16", "gpu", 16) == "m-fp16-gpu-b16"
    gpu = [s for s in specs if s.hardware == "gpu"]
    assert {s.provider for s in gpu} == {"CUDAExecutionProvider"}
    assert [s.name for s in plan_variants("r", ("inferentia",), ())] == ["r-fp32-inferentia"]
    with pytest.raises(ValueError):
        plan_variants("m", ("tpu",))  # type: ignore[arg-type]


def test_variants_are_valid_onnx_with_metadata(measured: dict[str, Variant]) -> None:
    assert list(measured) == EXPECTED
    for v in measured.values():
        onnx.checker.check_model(onnx.load(str(v.path)))
        assert v.model == "mlp" and v.application == "demo"
        assert v.name == variant_name(v.model, v.precision, v.hardware, v.tuned_batch)
    b8 = onnx.load(str(measured["mlp-fp32-cpu-b8"].path))
    assert b8.graph.input[0].type.tensor_type.shape.dim[0].dim_value == 8
    assert measured["mlp-fp32-cpu-b8"].tuned_batch == 8 and measured["mlp-fp32-cpu"].tuned_batch == 0
    int8 = onnx.load(str(measured["mlp-int8-cpu"].path))
    assert any(i.data_type == TensorProto.INT8 for i in int8.graph.initializer)


def test_fp16_conversion_keeps_float32_io(measured: dict[str, Variant]) -> None:
    m = onnx.load(str(measured["mlp-fp16-gpu"].path))
    assert m.graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT
    assert m.graph.output[0].type.tensor_type.elem_type == TensorProto.FLOAT
    assert {i.data_type for i in m.graph.initializer} == {TensorProto.FLOAT16}
    assert m.graph.node[0].op_type == "Cast" and m.graph.node[-1].op_type == "Cast"


@pytest.mark.parametrize("name", EXPECTED)
def test_outputs_close_to_fp32(name: str, measured: dict[str, Variant], base: Path) -> None:
    v = measured[name]
    x = make_inputs(base, 5, np.random.default_rng(11))["x"]
    ref = run_cpu(base, x)
    try:
        out = run_cpu(v.path, x)
    except Exception as exc:  # pragma: no cover - depends on the ONNX Runtime build's CPU kernels
        if v.precision == "fp16":
            pytest.skip(f"fp16 does not run on this CPU execution provider: {exc}")
        raise
    assert out.shape == ref.shape == (5, 8) and out.dtype == np.float32
    atol = {"fp32": 1e-6, "fp16": FP16_ATOL, "int8": INT8_ATOL}[v.precision]
    np.testing.assert_allclose(out, ref, rtol=0, atol=atol)


def test_accuracy_measured_on_validation_set(measured: dict[str, Variant], validation: Path) -> None:
    x, labels = load_validation(validation)
    assert x.shape == (N_VAL, 64) and labels.shape == (N_VAL,)
    fp32 = measured["mlp-fp32-cpu"]
    assert fp32.accuracy == pytest.approx(1.0 - NOISE) and not fp32.accuracy_estimated
    for v in measured.values():
        assert not v.accuracy_estimated
        assert 0.0 <= v.accuracy <= 1.0
        # a variant cannot agree with labels much better or worse than fp32: it tracks fp32's argmax
        assert abs(v.accuracy - fp32.accuracy) <= 0.1
        if v.precision == "fp32":
            assert v.accuracy == fp32.accuracy


def test_accuracy_inherited_and_estimated_without_validation(estimated: dict[str, Variant]) -> None:
    assert list(estimated) == EXPECTED
    assert all(v.accuracy == 0.76 and v.accuracy_estimated for v in estimated.values())
    assert all(v.application == "mlp" for v in estimated.values())


def test_top1_agreement_exact() -> None:
    logits = np.array([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4]])
    assert top1_agreement(logits, np.array([1, 0, 0, 0])) == 0.75


def test_bad_validation_set(tmp_path: Path) -> None:
    p = tmp_path / "v.npz"
    np.savez(p, inputs=np.zeros((2, 3)))
    with pytest.raises(ValueError, match="'x' and 'labels'"):
        load_validation(p)
    np.savez(p, x=np.zeros((2, 3)), labels=np.zeros(3))
    with pytest.raises(ValueError, match="2 inputs and 3 labels"):
        load_validation(p)


# -- static batch padding/splitting (batch-tuned variants) ----------------------------------------

@pytest.fixture(scope="module")
def small_sessions() -> dict[int, ort.InferenceSession]:
    base = mlp_model(in_features=6, hidden=5, out=4, seed=9)
    out = {0: ort.InferenceSession(base.SerializeToString(), providers=["CPUExecutionProvider"])}
    for b in (1, 3, 8):
        out[b] = ort.InferenceSession(with_static_batch(base, b).SerializeToString(), providers=["CPUExecutionProvider"])
    return out


@settings(max_examples=40, deadline=None)
@given(batch=st.integers(1, 40), tuned=st.sampled_from([1, 3, 8]), seed=st.integers(0, 2**16))
def test_batch_tuned_equals_dynamic(small_sessions: dict[int, ort.InferenceSession], batch: int, tuned: int, seed: int) -> None:
    x = np.random.default_rng(seed).standard_normal((batch, 6)).astype(np.float32)
    dyn = small_sessions[0]
    fixed = small_sessions[tuned]
    assert static_batch(dyn) is None and static_batch(fixed) == tuned
    ref = run_batched(dyn, {"x": x}, None)["y"]
    got = run_batched(fixed, {"x": x}, tuned)["y"]
    assert got.shape == (batch, 4)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


@settings(max_examples=15, deadline=None)
@given(inp=st.integers(1, 16), hidden=st.integers(1, 16), out=st.integers(2, 6), seed=st.integers(0, 1000))
def test_fp16_close_for_random_mlps(inp: int, hidden: int, out: int, seed: int) -> None:
    m = mlp_model(inp, hidden, out, seed)
    half = to_fp16(m)
    onnx.checker.check_model(half)
    x = np.random.default_rng(seed).standard_normal((3, inp)).astype(np.float32)
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = ort.InferenceSession(half.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, ref, rtol=0, atol=FP16_ATOL)


# -- built-in model and resolution ---------------------------------------------------------------

def test_builtin_mlp_deterministic(tmp_path: Path) -> None:
    a = build_mlp(tmp_path / "a.onnx").read_bytes()
    b = build_mlp(tmp_path / "b.onnx").read_bytes()
    c = build_mlp(tmp_path / "c.onnx", seed=1).read_bytes()
    assert a == b and a != c
    m = onnx.load(str(tmp_path / "a.onnx"))
    dims = m.graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_param == "N" and dims[1].dim_value == 64
    assert m.graph.input[0].name == "x" and m.graph.output[0].name == "y"


def test_resolve_model(tmp_path: Path) -> None:
    p = resolve_model("builtin:mlp", tmp_path)
    assert p == tmp_path / "builtin-mlp.onnx" and p.exists()
    assert resolve_model(str(p), tmp_path / "other") == p
    with pytest.raises(ModelError, match="unknown built-in"):
        resolve_model("builtin:resnet", tmp_path)
    with pytest.raises(ModelError, match="not found"):
        resolve_model(str(tmp_path / "missing.onnx"), tmp_path)
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x00\x01 definitely not protobuf")
    with pytest.raises(ModelError, match="not a valid ONNX model"):
        resolve_model(str(junk), tmp_path)
    with pytest.raises(ModelError, match="not a file"):
        resolve_model(str(tmp_path), tmp_path)


def test_make_inputs_uses_signature(base: Path, measured: dict[str, Variant]) -> None:
    x = make_inputs(base, 7, np.random.default_rng(0))
    assert set(x) == {"x"} and x["x"].shape == (7, 64) and x["x"].dtype == np.float32
    tuned = make_inputs(measured["mlp-fp32-cpu-b8"].path, 3, np.random.default_rng(0))
    assert tuned["x"].shape == (3, 64)  # a static batch dim is the query's batch too (executor pads)
