"""The Open Inference Protocol (KServe v2 / Triton gRPC) on the dispatcher's port: a stock client
(tritonclient, in a process of its own: see tests/oip_client.py) checks health, reads metadata and
runs a real model through a real worker; our messages match tritonclient's field for field;
server reflection lists both APIs; the codec's edges."""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Awaitable, Callable

import grpc
import numpy as np
import onnxruntime as ort
import pytest
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

from config.profiles import load_profiles_csv
from config.schema import Config
from dispatcher.api import oip_codec
from dispatcher.latency_model import LatencyModel
from dispatcher.proto import costscale_pb2 as pb, oip_pb2 as oip
from dispatcher.server import Dispatcher
from variants.runtime.builtin_models import mlp_model
from worker.options import WorkerOptions
from worker.server import WorkerServer

REPO = Path(__file__).resolve().parents[2]
CLIENT = REPO / "tests" / "oip_client.py"
SC = grpc.StatusCode


def run(coro_fn: Callable[[], Awaitable[Any]], timeout: float = 120.0) -> Any:
    async def main() -> Any:
        return await asyncio.wait_for(coro_fn(), timeout)
    return asyncio.run(main())


def mlp_config() -> Config:
    return Config.model_validate({
        "cluster": "oip", "budget_per_hour": 2.5,
        "models": [{"name": "mlp", "onnx": "builtin:mlp", "qos_ms": 1000, "max_batch": 64, "profile": "ncf",
                    "application": "demo-app"}],
        "instance_types": [{"type": "c5n.2xlarge"}],
        "launch": {"ami_id": "ami-0123456789abcdef0"},
        "dispatcher": {"listen": "127.0.0.1:0", "on_deadline": "best_effort"},
    })


async def client(*args: str) -> dict[str, Any]:
    proc = await asyncio.create_subprocess_exec(sys.executable, str(CLIENT), *args, cwd=str(REPO),
                                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()[-3000:]
    return json.loads(out)


def _our_descriptors() -> dict[str, Any]:
    sys.path.insert(0, str(CLIENT.parent))
    try:
        from oip_client import descriptor_table     # a plain module: it imports tritonclient only when run
    finally:
        sys.path.remove(str(CLIENT.parent))
    return descriptor_table(oip.DESCRIPTOR)


def test_our_messages_match_tritonclients_field_for_field() -> None:
    theirs = run(lambda: client("--descriptors"))
    ours = _our_descriptors()
    for name, fields in ours.items():
        if name.startswith("service:"):
            methods = {m[0]: m for m in theirs[name]}
            assert all(methods[m[0]] == m for m in fields), name
        else:
            assert theirs[name] == fields, name


def test_a_stock_tritonclient_runs_a_real_model_through_a_worker(tmp_path: Path) -> None:
    async def body() -> dict[str, Any]:
        d = Dispatcher(mlp_config(), LatencyModel.from_profiles(load_profiles_csv()))
        port = await d.start("127.0.0.1:0")
        ws = WorkerServer(WorkerOptions(instance_id="i-1", instance_type="c5n.2xlarge", cache_dir=tmp_path, threads=1))
        wport = await asyncio.to_thread(ws.start)
        try:
            d.add_worker_direct("i-1", "c5n.2xlarge", f"127.0.0.1:{wport}")
            seen = await client(f"127.0.0.1:{port}")
            seen["ledger"] = dict(d.outcomes.models["mlp"].queries)
            return seen
        finally:
            await d.stop(grace=1.0)
            await asyncio.to_thread(ws.stop)

    seen = run(body)
    assert seen["live"] and seen["ready"] and seen["model_ready"] and seen["app_ready"]
    assert not seen["unknown_ready"]
    assert seen["server_metadata"]["name"] == "costscale"
    md = seen["metadata"]
    assert md["platform"] == "onnxruntime_onnx"
    assert [(t["name"], t["datatype"], [int(s) for s in t["shape"]]) for t in md["inputs"]] == [("x", "FP32", [-1, 64])]
    assert [(t["name"], t["datatype"], [int(s) for s in t["shape"]]) for t in md["outputs"]] == [("y", "FP32", [-1, 8])]
    # the worker really ran the model: the same numbers as ONNX Runtime here
    x = np.asarray(seen["infer"]["x"], dtype=np.float32)
    sess = ort.InferenceSession(mlp_model().SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(["y"], {"x": x})[0]
    np.testing.assert_allclose(np.asarray(seen["infer"]["y"]), want, rtol=1e-4, atol=1e-5)
    assert seen["infer"]["id"] == "r-1" and seen["infer"]["model_name"] == "mlp"
    p = seen["infer"]["parameters"]
    assert p["instance_type"]["string_param"] == "c5n.2xlarge" and p["instance_id"]["string_param"] == "i-1"
    assert p["variant"]["string_param"] and p["model"]["string_param"] == "mlp"
    assert p["slo_met"]["bool_param"] is True
    assert p["service_ms"]["double_param"] > 0 and p["total_ms"]["double_param"] >= p["queue_ms"]["double_param"]
    # an application name is a model name too (model-less: getVariant picks)
    np.testing.assert_allclose(np.asarray(seen["app_infer"]["y"]), want, rtol=1e-4, atol=1e-5)
    assert seen["app_infer"]["parameters"]["model"]["string_param"] == "mlp"
    # typed errors come through as the client's exceptions
    assert seen["unknown_model"]["status"] == "StatusCode.NOT_FOUND"
    assert seen["bad_parameter"]["status"] == "StatusCode.INVALID_ARGUMENT"
    assert "latency_slo_ms" in seen["bad_parameter"]["message"]
    assert seen["bytes_input"]["status"] == "StatusCode.INVALID_ARGUMENT" and "BYTES" in seen["bytes_input"]["message"]
    assert seen["unknown_output"]["status"] == "StatusCode.INVALID_ARGUMENT"
    assert seen["unknown_metadata"]["status"] == "StatusCode.NOT_FOUND"
    assert seen["unimplemented"]["status"] == "StatusCode.UNIMPLEMENTED"
    # served queries were counted like any Submit (an unknown output is refused before the query runs)
    assert seen["ledger"]["OK"] == 2


def test_reflection_lists_the_costscale_api_and_the_inference_protocol() -> None:
    async def body() -> tuple[list[str], list[str]]:
        d = Dispatcher(mlp_config(), LatencyModel.from_profiles(load_profiles_csv()))
        port = await d.start("127.0.0.1:0")
        try:
            def ask() -> tuple[list[str], list[str]]:
                with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
                    db = ProtoReflectionDescriptorDatabase(ch)
                    services = list(db.get_services())
                    infer = db.FindFileContainingSymbol("inference.GRPCInferenceService")
                    return services, [m.name for m in infer.service[0].method]
            return await asyncio.to_thread(ask)
        finally:
            await d.stop(grace=0.5)

    services, methods = run(body)
    assert {"costscale.v1.Inference", "inference.GRPCInferenceService", "grpc.health.v1.Health"} <= set(services)
    assert {"ServerLive", "ServerReady", "ModelReady", "ModelMetadata", "ModelInfer"} <= set(methods)


def test_not_ready_without_a_worker_and_while_the_only_worker_drains() -> None:
    async def body() -> list[bool]:
        from tests.dispatch_helpers import start_worker

        d = Dispatcher(mlp_config(), LatencyModel.from_profiles(load_profiles_csv()))
        port = await d.start("127.0.0.1:0")
        w = await start_worker("i-1", "c5n.2xlarge")
        seen = []
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
                ready = ch.unary_unary("/inference.GRPCInferenceService/ServerReady",
                                       request_serializer=oip.ServerReadyRequest.SerializeToString,
                                       response_deserializer=oip.ServerReadyResponse.FromString)
                model_ready = ch.unary_unary("/inference.GRPCInferenceService/ModelReady",
                                             request_serializer=oip.ModelReadyRequest.SerializeToString,
                                             response_deserializer=oip.ModelReadyResponse.FromString)
                seen.append((await ready(oip.ServerReadyRequest())).ready)
                d.add_worker_direct("i-1", "c5n.2xlarge", w.address)
                seen.append((await ready(oip.ServerReadyRequest())).ready)
                seen.append((await model_ready(oip.ModelReadyRequest(name="mlp"))).ready)
                await d.drain("i-1")
                seen.append((await ready(oip.ServerReadyRequest())).ready)
                seen.append((await model_ready(oip.ModelReadyRequest(name="mlp"))).ready)
        finally:
            await d.stop(grace=0.5)
            await w.server.stop(0)
        return seen

    assert run(body) == [False, True, True, False, False]


# -- the codec -----------------------------------------------------------------------------------

def _request(**kw: Any) -> oip.ModelInferRequest:
    return oip.ModelInferRequest(model_name="mlp", **kw)


def test_typed_contents_and_raw_bytes_decode_to_the_same_tensor() -> None:
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    typed = _request(inputs=[oip.ModelInferRequest.InferInputTensor(
        name="x", datatype="INT32", shape=[2, 3], contents=oip.InferTensorContents(int_contents=a.ravel().tolist()))])
    raw = _request(inputs=[oip.ModelInferRequest.InferInputTensor(name="x", datatype="INT32", shape=[2, 3])],
                   raw_input_contents=[a.astype("<i4").tobytes()])
    for r in (typed, raw):
        sub = oip_codec.submit_request(r, model="mlp")
        assert isinstance(sub, pb.SubmitRequest)
        t = sub.inputs[0]
        assert (t.name, list(t.shape), t.dtype) == ("x", [2, 3], "int32")
        assert np.array_equal(np.frombuffer(t.data, dtype=np.int32).reshape(2, 3), a)


def test_parameters_are_read_from_any_numeric_or_string_form() -> None:
    r = _request(inputs=[oip.ModelInferRequest.InferInputTensor(
        name="x", datatype="FP32", shape=[1, 1], contents=oip.InferTensorContents(fp32_contents=[1.0]))])
    r.parameters["latency_slo_ms"].int64_param = 250
    r.parameters["min_accuracy"].string_param = "0.75"
    r.parameters["idempotency_key"].string_param = "k-9"
    r.parameters["timeout"].int64_param = 10          # Triton's own: ignored
    sub = oip_codec.submit_request(r, model="mlp")
    assert isinstance(sub, pb.SubmitRequest)
    assert (sub.latency_slo_ms, sub.min_accuracy, sub.idempotency_key) == (250.0, 0.75, "k-9")
    r.parameters["latency_slo_ms"].double_param = float("nan")
    bad = oip_codec.submit_request(r, model="mlp")
    assert isinstance(bad, tuple) and bad[0] == SC.INVALID_ARGUMENT and "latency_slo_ms" in bad[1]


@pytest.mark.parametrize("tensor, raw, words", [
    (dict(name="x", datatype="FP32", shape=[2, 2]), [b"\0" * 12], "12 bytes"),
    (dict(name="x", datatype="FP32", shape=[2, 2], contents=oip.InferTensorContents(fp32_contents=[1.0])), None,
     "1 values"),
    (dict(name="x", datatype="BF16", shape=[1]), [b"\0\0"], "not supported"),
    (dict(name="x", datatype="FP32", shape=[-1, 2]), None, "negative"),
    (dict(name="x", datatype="FP16", shape=[1]), None, "raw bytes"),
])
def test_malformed_inputs_are_invalid_argument(tensor: dict, raw: list | None, words: str) -> None:
    r = _request(inputs=[oip.ModelInferRequest.InferInputTensor(**tensor)], raw_input_contents=raw or [])
    out = oip_codec.submit_request(r, model="mlp")
    assert isinstance(out, tuple) and out[0] == SC.INVALID_ARGUMENT and words in out[1]


def test_no_input_and_mismatched_raw_contents_are_refused() -> None:
    assert oip_codec.submit_request(_request(), model="mlp")[0] == SC.INVALID_ARGUMENT  # type: ignore[index]
    two = _request(inputs=[oip.ModelInferRequest.InferInputTensor(name="x", datatype="FP32", shape=[1])] * 2,
                   raw_input_contents=[b"\0" * 4])
    assert "raw_input_contents" in oip_codec.submit_request(two, model="mlp")[1]  # type: ignore[index]


def test_the_reply_says_what_served_it_and_returns_the_outputs_asked_for() -> None:
    y = np.arange(4, dtype=np.float32).reshape(2, 2)
    reply = pb.SubmitReply(model="mlp", variant="mlp-int8", instance_id="i-7", instance_type="g4dn.xlarge",
                           queue_ms=1.5, service_ms=2.5, total_ms=4.0, slo_met=True, provider="CPUExecutionProvider",
                           accuracy=0.7613, outputs=[pb.Tensor(name="y", shape=[2, 2], dtype="float32", data=y.tobytes()),
                                    pb.Tensor(name="z", shape=[2], dtype="int64", data=np.zeros(2, np.int64).tobytes())])
    r = _request(id="q-1", outputs=[oip.ModelInferRequest.InferRequestedOutputTensor(name="y")])
    resp = oip_codec.infer_response(r, reply)
    assert isinstance(resp, oip.ModelInferResponse)
    assert resp.id == "q-1" and [o.name for o in resp.outputs] == ["y"] and resp.outputs[0].datatype == "FP32"
    assert np.array_equal(np.frombuffer(resp.raw_output_contents[0], dtype="<f4").reshape(2, 2), y)
    p = resp.parameters
    assert (p["variant"].string_param, p["instance_type"].string_param, p["queue_ms"].double_param,
            p["service_ms"].double_param, p["slo_met"].bool_param) == ("mlp-int8", "g4dn.xlarge", 1.5, 2.5, True)
    assert p["accuracy"].double_param == 0.7613
    everything = oip_codec.infer_response(_request(), reply)
    assert [o.datatype for o in everything.outputs] == ["FP32", "INT64"]  # type: ignore[union-attr]
