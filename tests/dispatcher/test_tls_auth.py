"""Security of the dispatcher's port (issue #14, deliverable 4): TLS from certificate files, mutual
TLS, bearer tokens on the Inference and OIP services, and the refusal to listen beyond loopback
without client authentication. Certificates come from a CA each test makes with ``cryptography``;
everything listens on 127.0.0.1."""
from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

from config.errors import ConfigError
from config.sections.security import TlsSpec, WorkerTlsSpec
from dispatcher.auth import bearer_metadata, presented_token, token_matches
from dispatcher.latency_model import LatencyModel
from config.version import PROTOCOL_VERSION, costscale_version
from dispatcher.proto import costscale_pb2 as pb, costscale_pb2_grpc as pbg, oip_pb2 as oip, oip_pb2_grpc as oipg
from dispatcher.server import Dispatcher
from tests.dispatch_helpers import make_config
from tests.tls_helpers import TestCa

REPO = Path(__file__).resolve().parents[2]


def _run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 60))


async def _status(target: str, creds: grpc.ChannelCredentials | None, metadata: Any = None) -> grpc.StatusCode:
    """OK, or the code the Status call failed with."""
    ch = grpc.aio.secure_channel(target, creds) if creds is not None else grpc.aio.insecure_channel(target)
    async with ch:
        try:
            await pbg.InferenceStub(ch).Status(pb.StatusRequest(), timeout=10, metadata=metadata)
        except grpc.aio.AioRpcError as exc:
            return exc.code()
    return grpc.StatusCode.OK


def _creds(ca: TestCa | None = None, client: Any = None) -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(root_certificates=ca.ca_file.read_bytes() if ca else None,
                                        private_key=client.key.read_bytes() if client else None,
                                        certificate_chain=client.cert.read_bytes() if client else None)


def test_tls_a_client_needs_the_ca(tmp_path: Path) -> None:
    ca = TestCa(tmp_path / "ca")
    server = ca.issue("dispatcher")
    cfg = make_config(tls={"cert_file": str(server.cert), "key_file": str(server.key)})

    async def go() -> None:
        d = Dispatcher(cfg, LatencyModel())
        port = await d.start("127.0.0.1:0")
        try:
            target = f"localhost:{port}"
            assert await _status(target, _creds()) == grpc.StatusCode.UNAVAILABLE        # system roots only
            assert await _status(target, _creds(TestCa(tmp_path / "other"))) == grpc.StatusCode.UNAVAILABLE
            assert await _status(target, None) == grpc.StatusCode.UNAVAILABLE             # plaintext
            assert await _status(target, _creds(ca)) == grpc.StatusCode.OK
        finally:
            await d.stop(0.1)

    _run(go())


def test_mutual_tls_refuses_a_client_without_a_certificate(tmp_path: Path) -> None:
    ca = TestCa(tmp_path / "ca")
    clients = TestCa(tmp_path / "clients", "client CA")
    server = ca.issue("dispatcher")
    cfg = make_config(tls={"cert_file": str(server.cert), "key_file": str(server.key),
                           "client_ca_file": str(clients.ca_file)})
    assert TlsSpec(**cfg.dispatcher.tls.model_dump()).mutual

    async def go() -> None:
        d = Dispatcher(cfg, LatencyModel())
        port = await d.start("127.0.0.1:0")
        try:
            target = f"localhost:{port}"
            assert await _status(target, _creds(ca)) == grpc.StatusCode.UNAVAILABLE                      # no cert
            stranger = TestCa(tmp_path / "stranger").issue("intruder")
            assert await _status(target, _creds(ca, stranger)) == grpc.StatusCode.UNAVAILABLE            # wrong CA
            assert await _status(target, _creds(ca, clients.issue("alice"))) == grpc.StatusCode.OK
        finally:
            await d.stop(0.1)

    _run(go())


def test_bearer_token_guards_inference_and_oip_but_not_registration(tmp_path: Path) -> None:
    token_file = tmp_path / "client.token"
    token_file.write_text("s3cret-client-token\n")
    cfg = make_config(auth_token_file=str(token_file))

    async def go() -> None:
        d = Dispatcher(cfg, LatencyModel())
        port = await d.start("127.0.0.1:0")
        try:
            target = f"127.0.0.1:{port}"
            assert await _status(target, None) == grpc.StatusCode.UNAUTHENTICATED
            assert await _status(target, None, bearer_metadata("wrong")) == grpc.StatusCode.UNAUTHENTICATED
            assert await _status(target, None, (("authorization", "Basic czNjcmV0"),)) == grpc.StatusCode.UNAUTHENTICATED
            assert await _status(target, None, bearer_metadata("s3cret-client-token")) == grpc.StatusCode.OK
            async with grpc.aio.insecure_channel(target) as ch:
                live = oipg.GRPCInferenceServiceStub(ch).ServerLive
                with pytest.raises(grpc.aio.AioRpcError) as ei:
                    await live(oip.ServerLiveRequest(), timeout=10)
                assert ei.value.code() == grpc.StatusCode.UNAUTHENTICATED
                assert "s3cret" not in (ei.value.details() or "")
                assert (await live(oip.ServerLiveRequest(), timeout=10,
                                   metadata=bearer_metadata("s3cret-client-token"))).live
                with pytest.raises(grpc.aio.AioRpcError) as ei:
                    await pbg.InferenceStub(ch).Submit(pb.SubmitRequest(model="ncf", batch_size=1), timeout=10)
                assert ei.value.code() == grpc.StatusCode.UNAUTHENTICATED
                # worker registration carries the cluster token in its request instead: reachable
                reply = await pbg.ControlStub(ch).RegisterWorker(pb.RegisterWorkerRequest(
                    instance_id="i-x", costscale_version=costscale_version(), protocol_version=PROTOCOL_VERSION),
                    timeout=10)
                assert not reply.accepted and "unknown instance" in reply.message
        finally:
            await d.stop(0.1)

    _run(go())


def test_token_helpers() -> None:
    assert presented_token([("authorization", "Bearer abc ")]) == "abc"
    assert presented_token([("authorization", b"bearer abc")]) == "abc"
    assert presented_token([("x", "Bearer abc")]) is None
    assert token_matches("abc", "abc") and not token_matches("abd", "abc") and not token_matches(None, "abc")


def test_dispatcher_refuses_a_public_port_without_client_auth(tmp_path: Path) -> None:
    async def go() -> None:
        d = Dispatcher(make_config(), LatencyModel())
        with pytest.raises(ConfigError, match=r"listen 0\.0\.0\.0:0 is not loopback and no client authentication"):
            await d.start("0.0.0.0:0")

    _run(go())


def test_unreadable_certificate_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "bad.crt").write_text("not a certificate")
    cfg = make_config(tls={"cert_file": str(tmp_path / "bad.crt"), "key_file": str(tmp_path / "missing.key")})

    async def go() -> None:
        with pytest.raises(ConfigError, match=r"dispatcher.tls.cert_file: .*bad.crt is not a PEM file"):
            await Dispatcher(cfg, LatencyModel()).start("127.0.0.1:0")

    _run(go())


def test_costscale_run_refuses_a_public_listen_without_client_auth(tmp_path: Path) -> None:
    """The daemon exits 2 with one line saying why, before it touches AWS; with a token file the
    same config passes the check (validate says ok)."""
    raw = yaml.safe_load((REPO / "config" / "costscale.example.yaml").read_text())
    raw["dispatcher"].update({"listen": "0.0.0.0:50051", "auth_token_file": None})
    raw["state_path"] = str(tmp_path / "state.db")
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(raw))
    run = subprocess.run([sys.executable, "-m", "daemon.cli", "run", str(tmp_path / "c.yaml")],
                         capture_output=True, text=True, timeout=60, cwd=REPO)
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in run.stderr
    assert "listen 0.0.0.0:50051 is not loopback and no client authentication is configured" in lines[0]
    assert "auth_token_file" in lines[0] and "client_ca_file" in lines[0]
    (tmp_path / "t").write_text("tok")
    raw["dispatcher"]["auth_token_file"] = str(tmp_path / "t")
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(raw))
    ok = subprocess.run([sys.executable, "-m", "daemon.cli", "validate", str(tmp_path / "c.yaml")],
                        capture_output=True, text=True, timeout=60, cwd=REPO)
    assert ok.returncode == 0, ok.stderr


def test_a_public_metrics_listen_needs_saying_so(tmp_path: Path) -> None:
    """/metrics has no authentication: beyond loopback it is refused in one line unless
    metrics.public says the user accepts that."""
    raw = yaml.safe_load((REPO / "config" / "costscale.example.yaml").read_text())
    raw["metrics"] = {"listen": "0.0.0.0:9464"}
    raw["state_path"] = str(tmp_path / "state.db")
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(raw))
    bad = subprocess.run([sys.executable, "-m", "daemon.cli", "validate", str(tmp_path / "c.yaml")],
                         capture_output=True, text=True, timeout=60, cwd=REPO)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "metrics: listen 0.0.0.0:9464 is not loopback" in bad.stderr and "metrics.public" in bad.stderr
    raw["metrics"]["public"] = True
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(raw))
    ok = subprocess.run([sys.executable, "-m", "daemon.cli", "validate", str(tmp_path / "c.yaml")],
                        capture_output=True, text=True, timeout=60, cwd=REPO)
    assert ok.returncode == 0, ok.stderr


def test_worker_channels_over_mutual_tls_with_the_cluster_token(tmp_path: Path) -> None:
    """The whole path under TLS: a client with a certificate queries the dispatcher (mTLS); a worker
    registers over TLS (trusting the dispatcher's CA, its own certificate as client certificate);
    the dispatcher dials the worker over mTLS and sends the cluster token, which the worker
    requires. A channel without the CA, without a client certificate, or without the token fails."""
    from dispatcher.credentials import WorkerChannelSecurity
    from dispatcher.workers.client import WorkerClient
    from tests.dispatcher.test_modelless import _cfg
    from worker.options import WorkerOptions
    from worker.server import serve_worker

    ca = TestCa(tmp_path / "ca")
    disp, worker, client = ca.issue("dispatcher"), ca.issue("worker", dns=("costscale-worker",), ips=()), ca.issue("client")
    base = _cfg(tmp_path)
    cfg = base.model_copy(update={"dispatcher": base.dispatcher.model_copy(update={
        "cluster_token": "cluster-s3cret",
        "tls": TlsSpec(cert_file=str(disp.cert), key_file=str(disp.key), client_ca_file=str(ca.ca_file)),
        "worker_tls": WorkerTlsSpec(ca_file=str(ca.ca_file), cert_file=str(disp.cert), key_file=str(disp.key))})})

    async def go() -> None:
        d = Dispatcher(cfg, LatencyModel())
        port = await d.start("127.0.0.1:0")
        d.allow_instance("i-1", "c5n.2xlarge")
        stop = asyncio.Event()
        opts = WorkerOptions(instance_id="i-1", instance_type="c5n.2xlarge", models={"rm2": "builtin:mlp"},
                             cache_dir=tmp_path / "cache", threads=1, listen="127.0.0.1:0",
                             dispatcher=f"localhost:{port}", token="cluster-s3cret", register_attempts=20,
                             register_backoff_s=0.05, tls_cert=str(worker.cert), tls_key=str(worker.key),
                             tls_client_ca=str(ca.ca_file), dispatcher_ca=str(ca.ca_file))
        task = asyncio.create_task(serve_worker(opts, stop=stop))
        try:
            for _ in range(400):
                if "i-1" in d.workers or task.done():
                    break
                await asyncio.sleep(0.025)
            assert "i-1" in d.workers, task.result() if task.done() else "worker did not register"
            async with grpc.aio.secure_channel(f"localhost:{port}", _creds(ca, client)) as ch:
                r = await pbg.InferenceStub(ch).Submit(pb.SubmitRequest(model="rm2", batch_size=4), timeout=30)
            assert r.instance_id == "i-1" and r.outputs
            address = d.workers["i-1"].address
            good = WorkerChannelSecurity.from_spec(cfg.dispatcher.worker_tls)
            no_cert = WorkerChannelSecurity(_creds(ca), "costscale-worker")
            for security, token, code in ((good, "cluster-s3cret", None),
                                          (good, None, grpc.StatusCode.UNAUTHENTICATED),
                                          (no_cert, "cluster-s3cret", grpc.StatusCode.UNAVAILABLE),
                                          (WorkerChannelSecurity(), "cluster-s3cret", grpc.StatusCode.UNAVAILABLE)):
                c = WorkerClient(address, security, token)
                try:
                    if code is None:
                        assert (await c.health(10)).instance_id == "i-1"
                    else:
                        with pytest.raises(grpc.aio.AioRpcError) as ei:
                            await c.health(10)
                        assert ei.value.code() == code
                finally:
                    await c.close()
        finally:
            stop.set()
            await asyncio.wait_for(task, 30)
            await d.stop(0.5)

    _run(go())


def test_launched_workers_are_told_where_their_tls_files_are() -> None:
    from config.sections.security import WORKER_TLS_DIR, WorkerTlsSpec, worker_tls_flags
    from scaler.cloud.ec2 import build_user_data

    assert worker_tls_flags(None, None) == []
    tls = TlsSpec(cert_file="d.crt", key_file="d.key", client_ca_file="c.crt")
    flags = worker_tls_flags(tls, WorkerTlsSpec(ca_file="w.crt", cert_file="dc.crt", key_file="dc.key"))
    assert flags == ["--dispatcher-ca", f"{WORKER_TLS_DIR}/ca.crt", "--tls-cert", f"{WORKER_TLS_DIR}/worker.crt",
                     "--tls-key", f"{WORKER_TLS_DIR}/worker.key", "--tls-client-ca", f"{WORKER_TLS_DIR}/ca.crt"]
    ud = build_user_data("c1", "10.0.0.10:50051", cluster_token="t", worker_flags=flags)
    assert ud.rstrip().endswith("--dispatcher 10.0.0.10:50051 " + " ".join(flags))


def test_status_cli_over_tls_with_a_bearer_token(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from daemon.cli import main as cli_main

    ca = TestCa(tmp_path / "ca")
    server = ca.issue("dispatcher")
    (tmp_path / "token").write_text("tok-123\n")
    cfg = make_config(tls={"cert_file": str(server.cert), "key_file": str(server.key)},
                      auth_token_file=str(tmp_path / "token"))

    async def go() -> tuple[int, int]:
        d = Dispatcher(cfg, LatencyModel())
        port = await d.start("127.0.0.1:0")
        try:
            base = ["status", "--dispatcher", f"localhost:{port}", "--json", "--ca", str(ca.ca_file)]
            without = await asyncio.to_thread(cli_main, base)
            with_token = await asyncio.to_thread(cli_main, base + ["--token-file", str(tmp_path / "token")])
            return without, with_token
        finally:
            await d.stop(0.1)

    without, with_token = _run(go())
    out, err = capsys.readouterr()
    assert without == 1 and "UNAUTHENTICATED" in err and len(err.strip().splitlines()) == 1 and "tok-123" not in err
    assert with_token == 0 and json.loads(out.strip().splitlines()[-1])["budget_per_hour"] == 2.5
