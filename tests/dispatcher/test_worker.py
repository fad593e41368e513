"""Worker runtime: gRPC Worker service, padding to profiles, one query at a time, health,
registration with a dispatcher, and the ``costscale worker`` command."""
from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
from concurrent import futures
from pathlib import Path
from typing import Iterator

import grpc
import numpy as np
import onnxruntime as ort
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from daemon.cli import main as cli_main
from dispatcher.proto import costscale_pb2 as pb, costscale_pb2_grpc as pbg
from dispatcher.proto.tensors import array_to_tensor, tensor_to_array
from config.profiles import LatencyProfile
from tests.conftest import free_port
from variants.runtime.builtin_models import build_mlp, input_signature, make_inputs, make_inputs_for
from config.emulation import padded_service_ms, padding_ms
from variants.runtime.executor import CPU, CUDA, choose_executor_kind, choose_providers, parse_providers
from worker.options import WorkerOptions
from worker.registration import RegistrationRefused
from worker.server import WorkerServer, serve_worker

REPO = Path(__file__).resolve().parents[2]


def flat_profile(ms: float) -> LatencyProfile:
    return LatencyProfile(model="flat", instance_type="c5.2xlarge", batch_sizes=np.array([1.0, 1000.0]),
                          mean_ms=np.array([ms, ms]), p50_ms=np.array([ms, ms]), p99_ms=np.array([ms, ms]))


def direct_run(path: Path, x: np.ndarray, providers: list[str] | None = None) -> tuple[np.ndarray, list[str]]:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(str(path), sess_options=so, providers=providers or [CPU])
    return sess.run(["y"], {"x": x})[0], list(sess.get_providers())


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


def _opts(cache: Path, **kw: object) -> WorkerOptions:
    base: dict[str, object] = dict(instance_id="i-test", instance_type="c5.2xlarge", cache_dir=cache, threads=1)
    base.update(kw)
    return WorkerOptions(**base)  # type: ignore[arg-type]


def _serve(opts: WorkerOptions) -> Iterator[tuple[WorkerServer, pbg.WorkerStub]]:
    ws = WorkerServer(opts)
    port = ws.start()
    ch = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield ws, pbg.WorkerStub(ch)
    finally:
        ch.close()
        ws.stop()


@pytest.fixture()
def worker(cache: Path) -> Iterator[tuple[WorkerServer, pbg.WorkerStub]]:
    yield from _serve(_opts(cache, seed=7))


@pytest.fixture()
def padded(cache: Path) -> Iterator[tuple[WorkerServer, pbg.WorkerStub]]:
    yield from _serve(_opts(cache, profile=flat_profile(50.0)))


# -- pure pieces ---------------------------------------------------------------------------------

def test_padded_service_ms_hand_computed() -> None:
    prof = LatencyProfile(model="m", instance_type="t", batch_sizes=np.array([10.0, 20.0]),
                          mean_ms=np.array([5.0, 7.0]), p50_ms=np.array([4.0, 6.0]), p99_ms=np.array([9.0, 11.0]))
    assert padded_service_ms(prof, 15, 3.0) == 7.0          # batch rounded up to 20
    assert padded_service_ms(prof, 15, 9.5) == 9.5          # compute already slower
    assert padded_service_ms(prof, 3, 1.0, stat="p99") == 9.0
    assert padded_service_ms(None, 15, 3.0) == 3.0
    assert padding_ms(prof, 10, 2.0, 2.0) == 3.0
    assert padding_ms(prof, 10, 6.0, 6.0) == 0.0


def test_provider_choice() -> None:
    assert choose_providers("gpu", None) == [CUDA, CPU]
    assert choose_providers("cpu", None) == [CPU]
    assert choose_providers("inferentia", None) == [CPU]
    assert choose_providers("cpu", [CUDA]) == [CUDA, CPU]
    assert parse_providers("auto") is None
    assert parse_providers("cuda,cpu") == [CUDA, CPU]
    with pytest.raises(ValueError):
        parse_providers("warp-drive")
    assert choose_executor_kind("inferentia", False, [Path("m.onnx")]) == "emulated"
    assert choose_executor_kind("inferentia", True, [Path("m.pt")]) == "neuron"
    assert choose_executor_kind("gpu", True, [Path("m.onnx")]) == "onnxruntime"


def test_tensor_codec_round_trip_and_errors() -> None:
    a = np.arange(12, dtype=np.int64).reshape(3, 4)
    np.testing.assert_array_equal(tensor_to_array(array_to_tensor("a", a)), a)
    with pytest.raises(ValueError, match="bytes"):
        tensor_to_array(pb.Tensor(name="a", shape=[2, 2], dtype="float32", data=b"\0" * 8))
    with pytest.raises(ValueError, match="dtype"):
        tensor_to_array(pb.Tensor(name="a", shape=[1], dtype="nope", data=b"\0" * 4))


# -- the server ----------------------------------------------------------------------------------

def test_infer_by_batch_size_matches_direct_run(worker: tuple[WorkerServer, pbg.WorkerStub], cache: Path) -> None:
    ws, stub = worker
    reply = stub.Infer(pb.InferRequest(query_id="q1", model="mlp", batch_size=5))
    assert reply.variant == "mlp"
    (out,) = reply.outputs
    y = tensor_to_array(out)
    assert out.name == "y" and y.shape == (5, 8) and y.dtype == np.float32
    # the worker's first generated batch comes from default_rng(seed=7)
    path = cache / "builtin-mlp.onnx"
    x = make_inputs_for(input_signature(path), 5, np.random.default_rng(7))["x"]
    expect, _ = direct_run(path, x)
    np.testing.assert_allclose(y, expect, rtol=1e-5, atol=1e-6)
    assert reply.compute_ms > 0 and reply.service_ms >= reply.compute_ms


def test_infer_by_tensors_matches_direct_run(worker: tuple[WorkerServer, pbg.WorkerStub], cache: Path) -> None:
    ws, stub = worker
    path = cache / "builtin-mlp.onnx"
    x = make_inputs(path, 3, np.random.default_rng(123))["x"]
    reply = stub.Infer(pb.InferRequest(query_id="q2", inputs=[array_to_tensor("x", x)]))
    y = tensor_to_array(reply.outputs[0])
    expect, providers = direct_run(path, x)
    assert y.shape == (3, 8)
    np.testing.assert_allclose(y, expect, rtol=1e-5, atol=1e-6)
    assert reply.provider == providers[0]
    health = stub.Health(pb.HealthRequest())
    assert list(health.providers) == providers


def test_bad_requests_get_typed_errors(worker: tuple[WorkerServer, pbg.WorkerStub]) -> None:
    _, stub = worker
    with pytest.raises(grpc.RpcError) as e:
        stub.Infer(pb.InferRequest(variant="nope", batch_size=1))
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.RpcError) as e:
        stub.Infer(pb.InferRequest(model="mlp"))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as e:  # wrong feature count
        stub.Infer(pb.InferRequest(model="mlp", inputs=[array_to_tensor("x", np.zeros((2, 5), np.float32))]))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as e:  # truncated bytes
        stub.Infer(pb.InferRequest(model="mlp", inputs=[pb.Tensor(name="x", shape=[2, 64], dtype="float32", data=b"1")]))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert stub.Infer(pb.InferRequest(model="mlp", batch_size=1)).outputs  # still serving


def test_gpu_type_reports_granted_providers(cache: Path, caplog: pytest.LogCaptureFixture) -> None:
    """On a GPU type the worker asks for CUDA first and reports what ONNX Runtime really granted."""
    caplog.set_level(logging.WARNING, logger="variants.runtime.onnx_executor")
    ws = WorkerServer(_opts(cache, instance_type="g4dn.xlarge"))
    port = ws.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            stub = pbg.WorkerStub(ch)
            health = stub.Health(pb.HealthRequest())
            reply = stub.Infer(pb.InferRequest(model="mlp", batch_size=2))
    finally:
        ws.stop()
    x = np.zeros((1, 64), np.float32)
    _, granted = direct_run(cache / "builtin-mlp.onnx", x, [CUDA, CPU])
    assert list(health.providers) == granted
    assert reply.provider == granted[0]
    assert health.executor == "onnxruntime" and not health.emulated
    if CUDA not in granted:  # the silent fallback is said out loud
        assert any("CUDA was requested" in r.getMessage() for r in caplog.records)


def test_padding_to_profile(padded: tuple[WorkerServer, pbg.WorkerStub]) -> None:
    ws, stub = padded
    reply = stub.Infer(pb.InferRequest(model="mlp", batch_size=4))
    assert reply.service_ms >= 50.0
    assert reply.compute_ms < reply.service_ms
    health = stub.Health(pb.HealthRequest())
    assert health.emulated and health.instance_type == "c5.2xlarge" and health.instance_id == "i-test"
    assert list(health.loaded_variants) == ["mlp"] and health.served == 1


def test_one_query_at_a_time(padded: tuple[WorkerServer, pbg.WorkerStub]) -> None:
    ws, stub = padded
    calls = [stub.Infer.future(pb.InferRequest(query_id=f"q{i}", model="mlp", batch_size=2)) for i in range(4)]
    replies = [c.result(timeout=30) for c in calls]
    assert all(r.service_ms >= 50.0 for r in replies)
    assert ws.max_executing == 1
    spans = sorted(ws.history)
    assert len(spans) == 4
    for (s0, e0), (s1, e1) in zip(spans, spans[1:]):
        assert e0 <= s1, "two queries were in service at once"
    assert ws.served == 4 and ws.in_flight == 0
    # four calls sent together were held at once (queued on the lock): what double-booking would show
    assert stub.Health(pb.HealthRequest()).peak_in_flight == ws.peak_in_flight > 1


def test_health_checking_service(worker: tuple[WorkerServer, pbg.WorkerStub]) -> None:
    ws, _ = worker
    with grpc.insecure_channel(f"127.0.0.1:{ws.port}") as ch:
        hs = health_pb2_grpc.HealthStub(ch)
        for svc in ("", "costscale.v1.Worker"):
            resp = hs.Check(health_pb2.HealthCheckRequest(service=svc))
            assert resp.status == health_pb2.HealthCheckResponse.SERVING


def test_load_and_unload_variant(worker: tuple[WorkerServer, pbg.WorkerStub], tmp_path: Path) -> None:
    ws, stub = worker
    other = build_mlp(tmp_path / "other.onnx", in_features=16, hidden=8, out=3, seed=5)
    r = stub.LoadVariant(pb.VariantRequest(model="other", variant="other-fp32-cpu", onnx=other.read_bytes()))
    assert r.ok and r.load_ms > 0
    reply = stub.Infer(pb.InferRequest(model="other", batch_size=6))
    assert reply.variant == "other-fp32-cpu" and tuple(reply.outputs[0].shape) == (6, 3)
    assert "other-fp32-cpu" in stub.Health(pb.HealthRequest()).loaded_variants
    assert stub.UnloadVariant(pb.VariantRequest(variant="other-fp32-cpu")).ok
    with pytest.raises(grpc.RpcError) as e:
        stub.Infer(pb.InferRequest(variant="other-fp32-cpu", batch_size=1))
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    bad = stub.LoadVariant(pb.VariantRequest(variant="junk", onnx=b"not a model"))
    assert not bad.ok and "junk" in bad.message
    missing = stub.LoadVariant(pb.VariantRequest(variant="gone", onnx_path=str(tmp_path / "gone.onnx")))
    assert not missing.ok and "not found" in missing.message


def test_inferentia_without_neuron_is_emulated(cache: Path) -> None:
    ws = WorkerServer(_opts(cache, instance_type="inf1.xlarge"))
    assert ws.executor.kind == "emulated" and ws.emulated


# -- registration ----------------------------------------------------------------------------------

class FakeControl(pbg.ControlServicer):
    def __init__(self, answers: list[object]) -> None:
        self.answers = answers  # True / False / a grpc.StatusCode to fail with
        self.requests: list[pb.RegisterWorkerRequest] = []

    def RegisterWorker(self, request: pb.RegisterWorkerRequest, context: grpc.ServicerContext) -> pb.RegisterWorkerReply:
        self.requests.append(request)
        answer = self.answers[min(len(self.requests), len(self.answers)) - 1]
        if isinstance(answer, grpc.StatusCode):
            context.abort(answer, "not yet")
        return pb.RegisterWorkerReply(accepted=bool(answer), message="ok" if answer else "unknown instance")


@pytest.fixture()
def control() -> Iterator[tuple[FakeControl, str]]:
    fake = FakeControl([grpc.StatusCode.UNAVAILABLE, True])
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pbg.add_ControlServicer_to_server(fake, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield fake, f"127.0.0.1:{port}"
    finally:
        server.stop(0)


def test_registers_with_dispatcher_after_retry(cache: Path, control: tuple[FakeControl, str]) -> None:
    fake, addr = control
    opts = _opts(cache, dispatcher=addr, token="s3cret", register_backoff_s=0.05)

    async def main() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(serve_worker(opts, stop=stop))
        for _ in range(400):
            if len(fake.requests) >= 2 or task.done():
                break
            await asyncio.sleep(0.025)
        stop.set()
        await task

    asyncio.run(main())
    assert len(fake.requests) == 2  # one UNAVAILABLE, then accepted
    req = fake.requests[-1]
    assert (req.instance_id, req.instance_type, req.token, req.executor) == ("i-test", "c5.2xlarge", "s3cret", "onnxruntime")
    assert list(req.providers) == [CPU] and req.address.startswith("127.0.0.1:")


def test_refused_registration_exits_with_message(cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fake = FakeControl([False])
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pbg.add_ControlServicer_to_server(fake, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with pytest.raises(RegistrationRefused, match="unknown instance"):
            asyncio.run(serve_worker(_opts(cache, dispatcher=f"127.0.0.1:{port}")))
        rc = cli_main(["worker", "--listen", "127.0.0.1:0", "--instance-id", "i-x", "--instance-type", "t3.xlarge",
                       "--cache-dir", str(cache), "--dispatcher", f"127.0.0.1:{port}", "--token", "t"])
    finally:
        server.stop(0)
    err = capsys.readouterr().err
    assert rc == 1 and "refused" in err and "unknown instance" in err


# -- the command -----------------------------------------------------------------------------------

@pytest.mark.parametrize("argv, needle", [
    (["worker", "--instance-type", "c5.2xlarge"], "--instance-id"),
    (["worker", "--instance-id", "i-1"], "--instance-type"),
    (["worker", "--instance-id", "i-1", "--instance-type", "x9.huge"], "unknown instance type"),
    (["worker", "--instance-id", "i-1", "--instance-type", "c5.2xlarge", "--listen", "nowhere"], "HOST:PORT"),
    (["worker", "--instance-id", "i-1", "--instance-type", "c5.2xlarge", "--model", "oops"], "NAME=SPEC"),
    (["worker", "--instance-id", "i-1", "--instance-type", "c5.2xlarge", "--providers", "quantum"], "--providers"),
    (["worker", "--instance-id", "i-1", "--instance-type", "c5.2xlarge", "--token-file", "/nonexistent/tok"], "--token-file"),
    (["worker", "--instance-id", "i-1", "--instance-type", "c5.2xlarge", "--listen", "127.0.0.1:0",
      "--model", "m=/nonexistent/model.onnx"], "not found"),
    (["worker", "--instance-id", "i-1", "--instance-type", "c5.2xlarge", "--listen", "127.0.0.1:0",
      "--emulate-profile", "ncf", "--profiles", "/nonexistent/p.csv"], "cannot read profile CSV"),
    (["worker", "--token", "a", "--token-file", "b"], "not allowed with"),
])
def test_bad_flags_exit_2(argv: list[str], needle: str, capsys: pytest.CaptureFixture[str],
                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COSTSCALE_INSTANCE_ID", raising=False)
    monkeypatch.delenv("COSTSCALE_INSTANCE_TYPE", raising=False)
    assert cli_main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and "Traceback" not in err and len(err.splitlines()) == 1


def _costscale() -> list[str]:
    script = Path(sys.executable).with_name("costscale")
    return [str(script)] if script.exists() else [sys.executable, "-m", "daemon.cli"]


def test_worker_command_serves_and_stops_on_sigterm(cache: Path) -> None:
    env = dict(os.environ, COSTSCALE_INSTANCE_ID="i-cli", COSTSCALE_INSTANCE_TYPE="t3.xlarge")
    proc = subprocess.Popen(_costscale() + ["worker", "--listen", "127.0.0.1:0", "--emulate-profile", "ncf",
                                            "--cache-dir", str(cache), "--threads", "1"],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline().strip()
        assert first.startswith("listening 127.0.0.1:"), first + (proc.stderr.read() if proc.poll() is not None else "")
        port = int(first.rsplit(":", 1)[1])
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            stub = pbg.WorkerStub(ch)
            health = stub.Health(pb.HealthRequest(), timeout=10)
            reply = stub.Infer(pb.InferRequest(model="mlp", batch_size=10), timeout=10)
        assert (health.instance_id, health.instance_type, health.emulated) == ("i-cli", "t3.xlarge", True)
        assert reply.service_ms >= reply.compute_ms and tuple(reply.outputs[0].shape) == (10, 8)
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=20)
        err = proc.stderr.read() if proc.stderr else ""
        assert rc == 0, err
        assert "providers CPUExecutionProvider" in err and "emulating yes" in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_worker_command_bad_flag_subprocess() -> None:
    res = subprocess.run(_costscale() + ["worker", "--instance-id", "i-1", "--instance-type", "c5.2xlarge",
                                         "--listen", "bad"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    assert res.stderr.strip() == "costscale: --listen: 'bad' is not HOST:PORT"
    assert res.stdout == ""


def test_listen_on_explicit_port(cache: Path) -> None:
    port = free_port()
    ws = WorkerServer(_opts(cache, instance_type="r5.large", listen=f"127.0.0.1:{port}"))
    assert ws.start() == port
    ws.stop()


def test_batch_tuned_variant_pads_queries(worker: tuple[WorkerServer, pbg.WorkerStub], cache: Path) -> None:
    import onnx

    from variants.generator import with_static_batch

    ws, stub = worker
    path = cache / "builtin-mlp.onnx"
    tuned = with_static_batch(onnx.load(str(path)), 8)
    assert stub.LoadVariant(pb.VariantRequest(model="mlp", variant="mlp-fp32-cpu-b8", onnx=tuned.SerializeToString())).ok
    x = make_inputs(path, 11, np.random.default_rng(5))["x"]  # 11 = one full chunk of 8 + 3 padded
    reply = stub.Infer(pb.InferRequest(variant="mlp-fp32-cpu-b8", inputs=[array_to_tensor("x", x)]))
    expect, _ = direct_run(path, x)
    np.testing.assert_allclose(tensor_to_array(reply.outputs[0]), expect, rtol=1e-5, atol=1e-6)
    by_size = stub.Infer(pb.InferRequest(variant="mlp-fp32-cpu-b8", batch_size=3))
    assert tuple(by_size.outputs[0].shape) == (3, 8)
