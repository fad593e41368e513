"""Real variant families (issue 13, deliverable 1): the digits ladder's measured accuracy, the
ResNet ladder's architecture against torchvision's published figures, the shipped CSVs (schema,
the trade-off they offer, the emulation rule of their derived rows) and registration through the
model-less API as applications. No timing is asserted: latency facts are read from the shipped
CSVs and the cost facts from the graphs' parameter and multiply-accumulate counts."""
from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import onnx
import pytest

from config.catalog import load_catalog
from config.emulation import emulation_factors, factor_types, reference_profiles
from variants.families import FAMILY_NAMES, spec
from variants.families import digits as dg
from variants.families import resnet as rn
from variants.families.family import Member
from variants.families.profiles import (COLUMNS, accuracies, derive, latency_table, parse_csv, read_csv,
                                        shipped_csv, spread)
from variants.families.registration import register_family, registration
from variants.registry import VariantRegistry

ONE_IMAGE = 1.0 / 540      # one validation image of the digits split, as a fraction


# -- digits: measured accuracy ------------------------------------------------------------------------

def test_digits_split_is_the_documented_one() -> None:
    xt, xv, yt, yv = dg.split()
    assert xt.shape == (1257, 64) and xv.shape == (540, 64) and xv.dtype == np.float32
    assert 0.0 <= xv.min() and xv.max() <= 1.0
    assert np.bincount(yv).tolist() == [54, 55, 53, 55, 54, 55, 54, 54, 52, 54]   # stratified: 30 % of each digit


def test_digits_accuracy_rises_with_capacity_and_spans_five_points(digits_members) -> None:
    acc = [m.accuracy for m in digits_members]
    assert [m.name for m in digits_members] == [r[0] for r in dg.LADDER]
    assert all(b > a for a, b in zip(acc, acc[1:])), acc
    assert acc[-1] - acc[0] >= 0.05 and all(m.accuracy_measured for m in digits_members)
    # the shipped CSV holds what training here measures (equal up to one image across BLAS builds)
    shipped = accuracies(read_csv(shipped_csv("digits")))
    for m in digits_members:
        assert abs(shipped[m.name] - m.accuracy) <= ONE_IMAGE + 1e-9, m.name


def test_digits_costs_of_the_graphs(digits_members) -> None:
    """Dense members cost their matrix products; the SVM one 64-element dot product per support
    vector (its RBF exponentials and one-vs-one votes come on top and are not counted), so the
    most accurate member costs >= 3x the two cheapest by the count alone."""
    macs = [m.macs for m in digits_members]
    assert macs[:3] == [64 * 8 + 8 * 10, 64 * 10, 64 * 512 + 512 * 512 + 512 * 10]
    sv = macs[3] // 64
    assert macs[3] == 64 * sv and sv > 100
    assert macs[3] >= 3 * max(macs[:2])
    params = [m.params for m in digits_members]
    assert params[:3] == [64 * 8 + 64 + 8 * 10 + 10, 64 * 10 + 10, 64 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10]


def test_digits_graph_has_one_scores_output_the_pipeline_reads(digits_members) -> None:
    from variants.generator import load_validation, run_cpu, top1_agreement

    x, labels = load_validation(digits_members[0].path.parent / "validation.npz")
    for m in digits_members:
        model = onnx.load(str(m.path))
        assert [o.name for o in model.graph.output] == ["probabilities"]
        assert [i.name for i in model.graph.input] == ["x"]
        assert top1_agreement(run_cpu(m.path, x), labels) == m.accuracy


def test_digits_training_is_deterministic() -> None:
    xt, xv, yt, yv = dg.split()
    name, pca, hidden = dg.LADDER[0]
    first = dg.export(dg.train(pca, hidden, xt, yt))
    again = dg.export(dg.train(pca, hidden, xt, yt))
    other = dg.export(dg.train(pca, hidden, xt, yt, seed=1))
    w = lambda m: b"".join(t.raw_data or onnx.numpy_helper.to_array(t).tobytes() for t in m.graph.initializer)  # noqa: E731
    assert w(first) == w(again)
    assert w(first) != w(other)


# -- resnet: the published architectures ----------------------------------------------------------------

@pytest.mark.parametrize("arch", rn.ARCHS, ids=lambda a: a.name)
def test_resnet_counts_equal_torchvision_published(arch) -> None:
    params, macs = rn.architecture_counts(arch)
    assert params == arch.params
    assert round(macs / 1e9, 2) == arch.gmacs


def test_resnet_ladder_costs_and_accuracy_spread() -> None:
    counts = [rn.architecture_counts(a) for a in rn.ARCHS]
    params, macs = [c[0] for c in counts], [c[1] for c in counts]
    assert all(b > a for a, b in zip(params, params[1:])) and all(b > a for a, b in zip(macs, macs[1:]))
    assert macs[-1] / macs[0] >= 6.0
    top1 = [a.top1 for a in rn.ARCHS]
    assert all(b > a for a, b in zip(top1, top1[1:])) and top1[-1] - top1[0] >= 5.0


def test_resnet_graph_is_the_counted_architecture(tmp_path: Path) -> None:
    import onnxruntime as ort

    arch = rn.ARCH_BY_NAME["resnet-18"]
    model, params, macs = rn.build_graph(arch, image_size=64)
    onnx.checker.check_model(model)
    learned = sum(int(np.prod(t.dims)) for t in model.graph.initializer
                  if not t.name.endswith((".bn.mean", ".bn.var")))
    assert learned == params == arch.params
    assert sum(n.op_type == "Conv" for n in model.graph.node) == 20       # 1 + 8 blocks x 2 + 3 downsamples
    assert macs == rn.architecture_counts(arch, 64)[1] < rn.architecture_counts(arch)[1]
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    y = sess.run(None, {"x": np.random.default_rng(0).random((2, 3, 64, 64), dtype=np.float32)})[0]
    assert y.shape == (2, 1000) and np.isfinite(y).all()


# -- the shipped CSVs ------------------------------------------------------------------------------------

@pytest.mark.parametrize("family", FAMILY_NAMES)
@pytest.mark.parametrize("kind", ["", "local"])
def test_shipped_csv_schema(family: str, kind: str) -> None:
    path = shipped_csv(family, kind)
    assert path.read_text().splitlines()[0] == ",".join(COLUMNS)
    rows = read_csv(path)
    s = spec(family)
    types = ["local"] if kind == "local" else factor_types(reference_profiles())
    assert sorted({r.instance_type for r in rows}) == sorted(types)
    if not kind:
        assert set(types) <= set(load_catalog(None))
    assert {r.model for r in rows} == {family}
    for t in types:
        lat = latency_table(rows, t)
        assert all(sorted(b) == list(s.batch_sizes) for b in lat.values()), t
    if family == "resnet":
        assert accuracies(rows) == {a.name: round(a.top1 / 100, 5) for a in rn.ARCHS}


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_shipped_profiles_offer_a_real_trade_off(family: str) -> None:
    """At every batch size on every type: the most accurate member is >= 3x slower than the fastest
    and >= 5 accuracy points better (issue 13's bar)."""
    for kind in ("", "local"):
        rows = read_csv(shipped_csv(family, kind))
        for t in sorted({r.instance_type for r in rows}):
            for b, (fast, best, ratio, points) in spread(rows, t).items():
                assert ratio >= 3.0 and points >= 5.0, (family, t, b, fast, best, ratio, points)


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_derived_rows_are_local_times_the_emulation_factor(family: str) -> None:
    local = read_csv(shipped_csv(family, "local"))
    ref = reference_profiles()
    assert read_csv(shipped_csv(family)) == derive(local)
    # one row by hand: a batch whose local latency is already non-decreasing
    lat = latency_table(local, "local")
    v = sorted(lat)[0]
    b = max(lat[v])
    if lat[v][b] >= max(lat[v].values()):
        row = next(r for r in derive(local, types=["t3.xlarge"]) if r.variant == v and r.batch_size == b)
        assert row.latency_ms == pytest.approx(lat[v][b] * float(emulation_factors(ref, "t3.xlarge", [b])[0]), rel=1e-3)


def test_parse_csv_refuses_malformed_rows() -> None:
    head = ",".join(COLUMNS) + "\n"
    with pytest.raises(ValueError, match=":1: header"):
        parse_csv("model,variant\n")
    with pytest.raises(ValueError, match=":2: batch_size must be an integer"):
        parse_csv(head + "m,v,t,one,1.0,0.5\n")
    with pytest.raises(ValueError, match=":3: accuracy"):
        parse_csv(head + "m,v,t,1,1.0,0.5\nm,v,t,2,1.0,50\n")
    with pytest.raises(ValueError, match=":2: batch_size must be >= 1"):
        parse_csv(head + "m,v,t,1,-1,0.5\n")


# -- registration through the model-less API -----------------------------------------------------------

def _resnet_members(tmp: Path) -> list[Member]:
    return [Member(a.name, "resnet", round(a.top1 / 100, 5), False, a.params, 0, tmp / f"{a.name}.onnx")
            for a in rn.ARCHS]


def test_registration_is_one_model_per_member_under_the_application(tmp_path: Path) -> None:
    rows = read_csv(shipped_csv("resnet"))
    regs = registration(rn.SPEC, _resnet_members(tmp_path), rows)
    assert [r.model.name for r in regs] == [a.name for a in rn.ARCHS]
    assert {r.model.application for r in regs} == {"resnet"}
    r50 = regs[2]
    assert (r50.variant.name, r50.variant.model, r50.variant.accuracy, r50.variant.accuracy_estimated) == \
        ("resnet-50", "resnet-50", 0.7613, True)
    g4 = next(p for p in r50.profiles if p.instance_type == "g4dn.xlarge")
    want = {r.batch_size: r.latency_ms for r in rows if r.variant == "resnet-50" and r.instance_type == "g4dn.xlarge"}
    assert {b.batch_size: b.mean_ms for b in g4.batches} == want
    assert g4.provider.startswith("estimate")
    with pytest.raises(ValueError):
        registration(dg.SPEC, _resnet_members(tmp_path), rows)


def test_registered_family_is_listed_as_an_application(tmp_path: Path) -> None:
    from config.profiles import load_profiles_csv
    from config.schema import Config
    from dispatcher.latency_model import LatencyModel
    from dispatcher.server import Dispatcher

    reg = VariantRegistry(tmp_path / "state.db.variants.db")
    register_family(reg, rn.SPEC, _resnet_members(tmp_path), read_csv(shipped_csv("resnet")))
    assert [v.name for v in reg.variants(application="resnet")] == sorted(a.name for a in rn.ARCHS)
    table = reg.type_profiles()
    assert table.has("resnet-152", "t3.xlarge") and table.has("resnet-18", "g4dn.xlarge")
    cfg = Config.model_validate({
        "cluster": "t", "budget_per_hour": 5,
        "models": [{"name": "rm2", "onnx": "builtin:mlp", "qos_ms": 350, "max_batch": 1000}],
        "instance_types": [{"type": "c5n.2xlarge"}, {"type": "g4dn.xlarge"}],
        "launch": {"ami_id": "ami-0123456789abcdef0"},
        "dispatcher": {"listen": "127.0.0.1:0"}, "state_path": str(tmp_path / "state.db")})
    d = Dispatcher(cfg, LatencyModel.from_profiles(load_profiles_csv(None)), registry=reg, models_dir=tmp_path / "m")
    listed = {v.name: v.accuracy for v in d.list_variants(application="resnet")}
    assert listed == {a.name: round(a.top1 / 100, 5) for a in rn.ARCHS}
    reg.close()


@pytest.mark.slow
def test_digits_family_registers_through_grpc_with_measured_accuracy(tmp_path: Path, digits_members) -> None:
    """RegisterModel (the gRPC model-less API) with the family as the application and the shipped
    validation split: the variant pipeline measures each member's accuracy, equal to the family's."""
    asyncio.run(asyncio.wait_for(_grpc_register(tmp_path, digits_members), 240))


async def _grpc_register(tmp: Path, members: list[Member]) -> None:
    import grpc

    from config.profiles import load_profiles_csv
    from config.schema import Config
    from dispatcher.latency_model import LatencyModel
    from dispatcher.proto import costscale_pb2 as pb, costscale_pb2_grpc as pbg
    from dispatcher.server import Dispatcher

    cfg = Config.model_validate({
        "cluster": "t", "budget_per_hour": 5,
        "models": [{"name": "rm2", "onnx": "builtin:mlp", "qos_ms": 350, "max_batch": 1000}],
        "instance_types": [{"type": "c5n.2xlarge"}],
        "launch": {"ami_id": "ami-0123456789abcdef0"},
        "dispatcher": {"listen": "127.0.0.1:0"}, "state_path": str(tmp / "state.db")})
    reg = VariantRegistry(tmp / "state.db.variants.db")
    d = Dispatcher(cfg, LatencyModel.from_profiles(load_profiles_csv(None)), registry=reg, models_dir=tmp / "models")
    port = await d.start("127.0.0.1:0")
    val = str(members[0].path.parent / "validation.npz")
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            stub = pbg.InferenceStub(ch)
            for m in members:
                rep = await stub.RegisterModel(pb.RegisterModelRequest(
                    name=m.name, application="digits", onnx=m.path.read_bytes(), validation=Path(val).read_bytes(),
                    qos_ms=dg.SPEC.qos_ms, max_batch=dg.SPEC.max_batch), timeout=120)
                got = {v.name: v for v in rep.variants}
                # the base variant carries the fp32 file's measured accuracy (the pipeline marks the
                # base itself estimated; its fp32 copy is the measured one)
                assert got[m.name].accuracy == pytest.approx(m.accuracy)
                fp32 = got[f"{m.name}-fp32-cpu"]
                assert fp32.accuracy == pytest.approx(m.accuracy) and not fp32.accuracy_estimated
            lst = await stub.ListVariants(pb.ListVariantsRequest(application="digits"))
            bases = {v.name: v.accuracy for v in lst.variants if v.name == v.model}
            assert bases == pytest.approx({m.name: m.accuracy for m in members})
    finally:
        await d.stop(1.0)
        reg.close()
