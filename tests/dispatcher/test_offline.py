"""Offline jobs (INFaaS §3.1 offline_query, §5): they run only while online utilization stays
under the threshold, are throttled -- never dropped -- above it, and write every row's output."""
from __future__ import annotations

import asyncio
import io
from pathlib import Path

import grpc
import numpy as np
import pytest
from hypothesis import given, strategies as st

from dispatcher import modelless as ml
from dispatcher.latency_model import LatencyModel
from dispatcher.proto import costscale_pb2 as pb, costscale_pb2_grpc as pbg
from dispatcher.queries import SC
from dispatcher.offline import OfflineJob, offline_inputs, remote_inputs
from dispatcher.server import Dispatcher
from config.profiles import load_profiles_csv
from tests.dispatcher.test_modelless import _cfg
from variants.registry import RegisteredModel, VariantRegistry
from worker.options import WorkerOptions
from worker.server import WorkerServer


def test_threshold_rule() -> None:
    assert ml.OFFLINE_UTILIZATION_THRESHOLD == 0.40
    assert ml.offline_may_run(0.39) and not ml.offline_may_run(0.40) and not ml.offline_may_run(0.9)


@given(st.integers(0, 500), st.integers(1, 64))
def test_chunks_cover_rows_once(n: int, size: int) -> None:
    cs = ml.chunks(n, size)
    assert sum(e - s for s, e in cs) == n
    assert all(0 < e - s <= size for s, e in cs)
    assert all(a[1] == b[0] for a, b in zip(cs, cs[1:]))


def test_offline_inputs_file_folder_and_errors(tmp_path: Path) -> None:
    np.save(tmp_path / "a.npy", np.zeros((5, 64), np.float32))
    np.savez(tmp_path / "b.npz", x=np.ones((3, 64), np.float32))
    got = offline_inputs(tmp_path)
    assert [(k, a.shape) for k, a in got] == [("a", (5, 64)), ("b/x", (3, 64))]
    with pytest.raises(ValueError, match="no such file"):
        offline_inputs(tmp_path / "missing.npy")
    (tmp_path / "c.txt").write_text("x")
    with pytest.raises(ValueError, match="expected a .npy or .npz"):
        offline_inputs(tmp_path / "c.txt")


def test_throttled_above_threshold_then_completes(tmp_path: Path) -> None:
    ws = WorkerServer(WorkerOptions(instance_id="i-1", instance_type="c5n.2xlarge", models={"rm2": "builtin:mlp"},
                                    cache_dir=tmp_path / "cache", threads=1))
    wport = ws.start()
    try:
        asyncio.run(asyncio.wait_for(_job(tmp_path, wport), 60))
    finally:
        ws.stop()


async def _job(tmp: Path, wport: int) -> None:
    cfg = _cfg(tmp)
    reg = VariantRegistry(tmp / "state.db.variants.db")
    reg.register_model(RegisteredModel("rm2", "rec", "builtin:mlp", 350, 1000, "rm2", True))
    d = Dispatcher(cfg, LatencyModel.from_profiles(load_profiles_csv(None)), registry=reg, models_dir=tmp / "m")
    d.offline_poll_s = 0.02
    d.offline_chunk = 4
    port = await d.start("127.0.0.1:0")
    d.add_worker_direct("i-1", "c5n.2xlarge", f"127.0.0.1:{wport}")
    x = np.random.default_rng(0).normal(size=(10, 64)).astype(np.float32)
    np.savez(tmp / "in.npz", x=x)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            stub = pbg.InferenceStub(ch)
            # online work keeps the worker busy: fake 100 % utilization over the horizon
            w = d.workers["i-1"]
            now = d.clock()
            w.busy.append((now - 10.0, now + 3600.0))
            job = await stub.SubmitOffline(pb.OfflineJobRequest(application="rec", input=(tmp / "in.npz").read_bytes()))
            assert job.total == 3
            for _ in range(20):
                await asyncio.sleep(0.03)
                st_ = await stub.GetOfflineJob(pb.OfflineJobReply(job_id=job.job_id))
                assert st_.state == "throttled" and st_.done == 0
            assert d.offline_jobs[job.job_id].throttled_polls >= 5
            w.busy.clear()  # load goes away: the job resumes and finishes
            for _ in range(300):
                st_ = await stub.GetOfflineJob(pb.OfflineJobReply(job_id=job.job_id))
                if st_.state in ("done", "failed"):
                    break
                await asyncio.sleep(0.02)
            assert (st_.state, st_.done, st_.total) == ("done", 3, 3), st_.message
            assert d.offline_jobs[job.job_id].inputs == []   # the outputs stay, the inputs go
            with np.load(io.BytesIO(st_.output)) as out:    # no output_uri: the outputs come in the reply
                got = out["x"]
            assert got.shape == (10, 8)
            # the same rows through ONNX Runtime directly, in one run: the chunks (4, 4, 2) went through
            # the worker in the right order and came back whole
            import onnxruntime as ort

            from variants.runtime.builtin_models import resolve_model
            sess = ort.InferenceSession(str(resolve_model("builtin:mlp", tmp / "ref")), providers=["CPUExecutionProvider"])
            want = sess.run(None, {sess.get_inputs()[0].name: x})[0]
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
            served_online = d.online_utilization()
            assert served_online == 0.0  # offline chunks do not count as online load
            with pytest.raises(grpc.aio.AioRpcError) as ei:
                await stub.GetOfflineJob(pb.OfflineJobReply(job_id="job-99"))
            assert ei.value.code() == grpc.StatusCode.NOT_FOUND
            with pytest.raises(grpc.aio.AioRpcError) as ei:
                await stub.SubmitOffline(pb.OfflineJobRequest(model="rm2", input=b"not numpy"))
            assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    finally:
        await d.stop(1.0)
        reg.close()


class _Store:
    """An in-memory :class:`dispatcher.object_store.ObjectStore` that records what was read."""

    def __init__(self, objects: dict[str, bytes]) -> None:
        self.objects, self.gets = objects, []  # type: list[str]

    def get(self, uri: str) -> bytes:
        self.gets.append(uri)
        return self.objects[uri]

    def put(self, uri: str, data: bytes) -> None:
        self.objects[uri] = data

    def list(self, uri: str) -> list[str]:
        return sorted(u for u in self.objects if u.startswith(uri))


def _npy(rows: int) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.zeros((rows, 64), np.float32))
    return buf.getvalue()


def test_a_job_for_an_unknown_model_downloads_nothing(tmp_path: Path) -> None:
    """The model (or application) is checked before any S3 object is read: a request for one the
    dispatcher does not serve costs no download."""
    store = _Store({"s3://jobs/in/x.npy": _npy(3)})
    d = Dispatcher(_cfg(tmp_path), LatencyModel(), objects=store)

    async def go() -> None:
        for req, code in ((pb.OfflineJobRequest(model="nope", input_uri="s3://jobs/in/x.npy"), SC.INVALID_ARGUMENT),
                          (pb.OfflineJobRequest(application="nope", input_uri="s3://jobs/in/"), SC.NOT_FOUND)):
            got = await d.submit_offline(req)
            assert isinstance(got, tuple) and got[0] == code and "nope" in got[1]
        assert store.gets == [] and not d.offline_jobs
        job = await d.submit_offline(pb.OfflineJobRequest(model="rm2", input_uri="s3://jobs/in/x.npy"))
        assert store.gets == ["s3://jobs/in/x.npy"] and job.total == 1   # a known model: read once
        d.rt.stopping = True    # the job, with no worker, ends at its next poll
        await d.offline_jobs[job.job_id].task

    asyncio.run(asyncio.wait_for(go(), 30))


def test_a_single_object_input_is_keyed_by_its_name() -> None:
    """One .npy object's outputs are keyed by the object's name without extension, never by its
    whole key, with or without an extension (as a prefix's objects and a local file's are)."""
    store = _Store({"s3://b/dir/batch": _npy(2), "s3://b/dir/run.v2.npy": _npy(2), "s3://b/many/a.npy": _npy(1)})
    for uri, key in (("s3://b/dir/batch", "batch"), ("s3://b/dir/run.v2.npy", "run.v2"), ("s3://b/many/", "a")):
        got = remote_inputs(pb.OfflineJobRequest(model="rm2", input_uri=uri), store)
        assert [(k, a.shape) for k, a in got] == [(key, (2 if "dir" in uri else 1, 64))]


@pytest.mark.parametrize("fails", [False, True])
def test_a_finished_job_lets_go_of_its_inputs(tmp_path: Path, fails: bool) -> None:
    """Done or failed, a job no longer holds its inputs; its state, counts and outputs stay for
    GetOfflineJob."""
    jobs = Dispatcher(_cfg(tmp_path), LatencyModel(), objects=_Store({})).offline
    jobs.chunk = 4

    async def chunk(job: OfflineJob, rows: np.ndarray) -> np.ndarray:
        if fails and job.done == 1:
            raise RuntimeError("UNKNOWN: worker broke")
        return rows[:, :2] + 1

    jobs._chunk = chunk  # type: ignore[method-assign]
    x = np.zeros((10, 64), np.float32)
    job = OfflineJob("job-1", _cfg(tmp_path).models[0], "", [("x", x)], "", total=3)
    asyncio.run(asyncio.wait_for(jobs._run(job), 30))
    assert job.inputs == []
    reply = job.reply()
    if fails:
        assert (reply.state, reply.done, reply.total) == ("failed", 1, 3) and "x rows 4-8" in reply.message
        return
    assert (reply.state, reply.done, reply.total) == ("done", 3, 3)
    with np.load(io.BytesIO(reply.output)) as out:
        assert out["x"].shape == (10, 2) and (out["x"] == 1).all()


def test_ended_jobs_beyond_the_limit_are_forgotten_oldest_first(tmp_path: Path) -> None:
    """A dispatcher running for months keeps the latest ended jobs only (outputs included); a job
    still queued or running is never forgotten, and ids stay unique after forgetting."""
    d = Dispatcher(_cfg(tmp_path), LatencyModel(), objects=_Store({}))
    jobs = d.offline
    m = _cfg(tmp_path).models[0]
    states = ["done", "running", "failed", "done", "queued", "done"]
    for i, s in enumerate(states, 1):
        jobs.jobs[f"job-{i}"] = OfflineJob(f"job-{i}", m, "", [], "", total=1, state=s)
    jobs.submitted = len(states)                      # as if submitted
    jobs.forget_ended(keep=2)
    assert list(jobs.jobs) == ["job-2", "job-4", "job-5", "job-6"]
    jobs.forget_ended(keep=0)
    assert list(jobs.jobs) == ["job-2", "job-5"]

    async def submit() -> list[str]:
        jobs._run = lambda job: asyncio.sleep(0)  # type: ignore[method-assign,assignment,return-value]
        d.admission.start_load = lambda choice: None  # type: ignore[method-assign]
        x = io.BytesIO()
        np.save(x, np.zeros((2, 64), np.float32))
        ids = []
        for _ in range(2):
            r = await jobs.submit(pb.OfflineJobRequest(model=m.name, input=x.getvalue()))
            assert isinstance(r, pb.OfflineJobReply), r
            ids.append(r.job_id)
        return ids
    # ids count submissions, not the jobs kept: job-7 and job-8, never a second job-5 or job-6
    assert asyncio.run(submit()) == ["job-7", "job-8"]
    assert list(jobs.jobs) == ["job-2", "job-5", "job-7", "job-8"]
