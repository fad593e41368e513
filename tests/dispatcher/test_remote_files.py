"""Remote callers never name paths on the control host (issue #14, deliverable 4): offline jobs and
model registration take s3://bucket/key URIs (read and written with boto3, here against moto's S3
in server mode on 127.0.0.1) or inline bytes; a request naming a local path gets INVALID_ARGUMENT
and the file is never read. The CLI sends local files inline."""
from __future__ import annotations

import asyncio
import io
from pathlib import Path

import boto3
import grpc
import numpy as np
import pytest

from config.profiles import load_profiles_csv
from daemon.cli import main as cli_main
from dispatcher.latency_model import LatencyModel
from dispatcher.object_store import ObjectError, S3Objects, parse_s3_uri
from dispatcher.proto import costscale_pb2 as pb, costscale_pb2_grpc as pbg
from dispatcher.server import Dispatcher
from tests.dispatcher.test_modelless import _cfg
from variants.registry import RegisteredModel, VariantRegistry
from worker.options import WorkerOptions
from worker.server import WorkerServer


def test_s3_uri_rule() -> None:
    assert parse_s3_uri("s3://b/k/x.npz") == ("b", "k/x.npz")
    for bad in ("/etc/passwd", "in.npz", "file:///tmp/x.npz", "s3://bucket", "s3:///key", "https://b.s3/k"):
        with pytest.raises(ObjectError):
            parse_s3_uri(bad)


@pytest.fixture()
def served(tmp_path: Path, moto_endpoint: str):  # type: ignore[no-untyped-def]
    """A dispatcher (S3 at moto) with one real ONNX worker serving rm2; yields (tmp, endpoint, wport)."""
    ws = WorkerServer(WorkerOptions(instance_id="i-1", instance_type="c5n.2xlarge", models={"rm2": "builtin:mlp"},
                                    cache_dir=tmp_path / "cache", threads=1))
    wport = ws.start()
    try:
        yield tmp_path, moto_endpoint, wport
    finally:
        ws.stop()


async def _dispatcher(tmp: Path, endpoint: str, wport: int) -> tuple[Dispatcher, VariantRegistry, int]:
    cfg = _cfg(tmp)
    cfg = cfg.model_copy(update={"aws": cfg.aws.model_copy(update={"endpoint_url": endpoint})})
    reg = VariantRegistry(tmp / "state.db.variants.db")
    reg.register_model(RegisteredModel("rm2", "rec", "builtin:mlp", 350, 1000, "rm2", True))
    d = Dispatcher(cfg, LatencyModel.from_profiles(load_profiles_csv(None)), registry=reg, models_dir=tmp / "m")
    d.offline_poll_s, d.offline_chunk = 0.02, 4
    port = await d.start("127.0.0.1:0")
    d.add_worker_direct("i-1", "c5n.2xlarge", f"127.0.0.1:{wport}")
    return d, reg, port


async def _until_done(stub: pbg.InferenceStub, job_id: str) -> pb.OfflineJobReply:
    for _ in range(1500):
        st = await stub.GetOfflineJob(pb.OfflineJobReply(job_id=job_id))
        if st.state in ("done", "failed"):
            return st
        await asyncio.sleep(0.02)
    raise AssertionError(f"job {job_id} still {st.state}")


def test_s3_offline_job_end_to_end_on_moto(served) -> None:  # type: ignore[no-untyped-def]
    tmp, endpoint, wport = served
    s3 = boto3.client("s3", region_name="us-east-1", endpoint_url=endpoint)
    s3.create_bucket(Bucket="jobs")
    x = np.random.default_rng(0).normal(size=(10, 64)).astype(np.float32)
    buf = io.BytesIO()
    np.savez(buf, x=x)
    s3.put_object(Bucket="jobs", Key="in/batch.npz", Body=buf.getvalue())
    two = io.BytesIO()
    np.save(two, x[:3])
    s3.put_object(Bucket="jobs", Key="many/a.npy", Body=two.getvalue())
    s3.put_object(Bucket="jobs", Key="many/b.npz", Body=buf.getvalue())

    async def go() -> None:
        d, reg, port = await _dispatcher(tmp, endpoint, wport)
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
                stub = pbg.InferenceStub(ch)
                job = await stub.SubmitOffline(pb.OfflineJobRequest(
                    application="rec", input_uri="s3://jobs/in/batch.npz", output_uri="s3://jobs/out/batch.npz"))
                st = await _until_done(stub, job.job_id)
                assert (st.state, st.done, st.total, st.message) == ("done", 3, 3, "wrote s3://jobs/out/batch.npz")
                assert not st.output
                body = s3.get_object(Bucket="jobs", Key="out/batch.npz")["Body"].read()
                with np.load(io.BytesIO(body)) as out:
                    assert out["x"].shape == (10, 8) and np.isfinite(out["x"]).all()
                # a prefix of objects, outputs in the reply
                job = await stub.SubmitOffline(pb.OfflineJobRequest(model="rm2", input_uri="s3://jobs/many/"))
                st = await _until_done(stub, job.job_id)
                assert st.state == "done", st.message
                with np.load(io.BytesIO(st.output)) as out:
                    assert {k: out[k].shape for k in out.files} == {"a": (3, 8), "b/x": (10, 8)}
                # a missing object or bucket: one line, INVALID_ARGUMENT
                with pytest.raises(grpc.aio.AioRpcError) as ei:
                    await stub.SubmitOffline(pb.OfflineJobRequest(model="rm2", input_uri="s3://jobs/none.npz"))
                assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "NoSuchKey" in ei.value.details()
        finally:
            await d.stop(1.0)
            reg.close()

    asyncio.run(asyncio.wait_for(go(), 90))
    assert S3Objects("us-east-1", endpoint).get("s3://jobs/in/batch.npz") == buf.getvalue()


def test_remote_requests_naming_local_paths_get_invalid_argument(served) -> None:  # type: ignore[no-untyped-def]
    tmp, endpoint, wport = served
    secret = tmp / "secret.npz"
    np.savez(secret, x=np.zeros((2, 64), np.float32))

    async def go() -> None:
        d, reg, port = await _dispatcher(tmp, endpoint, wport)
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
                stub = pbg.InferenceStub(ch)
                for req in (pb.OfflineJobRequest(model="rm2", input_uri=str(secret)),
                            pb.OfflineJobRequest(model="rm2", input_uri=f"file://{secret}"),
                            pb.OfflineJobRequest(model="rm2", input=secret.read_bytes(),
                                                 output_uri=str(tmp / "stolen.npz"))):
                    with pytest.raises(grpc.aio.AioRpcError) as ei:
                        await stub.SubmitOffline(req)
                    assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT
                    assert "not an s3://bucket/key URI" in ei.value.details()
                assert not d.offline_jobs and not (tmp / "stolen.npz").exists()
                for req in (pb.RegisterModelRequest(name="m2", onnx_uri="/etc/hostname"),
                            pb.RegisterModelRequest(name="m2", onnx=b"x", validation_uri=str(secret))):
                    with pytest.raises(grpc.aio.AioRpcError) as ei:
                        await stub.RegisterModel(req, timeout=30)
                    assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT
                    assert "not an s3://bucket/key URI" in ei.value.details()
        finally:
            await d.stop(1.0)
            reg.close()

    asyncio.run(asyncio.wait_for(go(), 60))


def test_cli_sends_local_files_inline(served, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    """`costscale offline submit` reads a local folder on the caller's side and sends it inline;
    --output writes the outputs it gets back, locally."""
    tmp, endpoint, wport = served
    src = tmp / "inputs"
    src.mkdir()
    np.save(src / "a.npy", np.ones((5, 64), np.float32))

    async def go() -> None:
        d, reg, port = await _dispatcher(tmp, endpoint, wport)
        try:
            rc = await asyncio.to_thread(cli_main, ["offline", "submit", "--dispatcher", f"127.0.0.1:{port}",
                                                    "--model", "rm2", "--input", str(src), "--output",
                                                    str(tmp / "out.npz"), "--wait", "--json"])
            assert rc == 0, capsys.readouterr()
        finally:
            await d.stop(1.0)
            reg.close()

    asyncio.run(asyncio.wait_for(go(), 60))
    with np.load(tmp / "out.npz") as out:
        assert out["a"].shape == (5, 8)
