"""Offline jobs (INFaaS §3.1 offline_query, §5): a file of inputs run through the normal queue,
chunk by chunk, while the online utilization of the workers that serve its model stays under the
threshold (40 %); above it the job waits (state ``throttled``) and resumes later -- it is never
dropped. Its outputs are one .npz file.

Inputs and outputs never touch the control host's paths (issue #14): the inputs come inline (one
.npy/.npz file's bytes) or from S3 (``s3://bucket/key``, or ``s3://bucket/prefix/`` of such files,
as INFaaS keeps offline inputs in S3), and the outputs go to ``output_uri`` in S3 or, without one,
into the done job's reply (:mod:`dispatcher.object_store`). A local path is INVALID_ARGUMENT.

:class:`OfflineJobs` is a part of :class:`dispatcher.server.Dispatcher` (``d.offline``; the
Dispatcher forwards ``submit_offline`` and ``offline_jobs``, ``offline_threshold``,
``offline_chunk``, ``offline_poll_s`` to it). Owns: ``jobs``, ``threshold``, ``chunk``, ``poll_s``.
Takes: admission (validation, the load getVariant's route needs, a chunk queued like a query), which
workers may serve a job (:meth:`dispatcher.routing.RoutingRound.eligible`), the worker registry
(the workers and their online utilization), the object store and the
:class:`dispatcher.runtime.Runtime` (loop, stopping).
"""
from __future__ import annotations

import asyncio
import io
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Callable

import grpc
import numpy as np

from config.schema import ModelSpec
from dispatcher import modelless as ml
from dispatcher.admission import Admission
from dispatcher.queries import SC
from dispatcher.object_store import ObjectStore, parse_s3_uri
from dispatcher.proto import costscale_pb2 as pb
from dispatcher.proto.tensors import tensor_to_array
from dispatcher.routing import GroupKey, group_key
from dispatcher.runtime import Runtime
from dispatcher.workers.registry import WorkerRegistry, WorkerState


@dataclass(eq=False)
class OfflineJob:
    """An offline job (INFaaS §3.1 offline_query): inputs, progress, and where the output goes."""

    job_id: str
    model: ModelSpec
    variant: str
    inputs: list[tuple[str, np.ndarray]]   # emptied when the job ends
    output_uri: str          # s3://bucket/key, or "": the outputs stay in ``output`` for the reply
    total: int
    done: int = 0
    state: str = "queued"
    message: str = ""
    retries: int = 0
    throttled_polls: int = 0
    output: bytes = b""
    task: asyncio.Task | None = None

    def reply(self) -> pb.OfflineJobReply:
        return pb.OfflineJobReply(job_id=self.job_id, state=self.state, done=self.done, total=self.total,
                                  message=self.message, output=self.output if self.state == "done" else b"")


_NPY_MAGIC = b"\x93NUMPY"
_ZIP_MAGIC = b"PK\x03\x04"


def arrays_from_bytes(data: bytes, name: str, stem: str = "input") -> list[tuple[str, np.ndarray]]:
    """(key, rows) arrays of one .npy file's bytes (key: ``stem``) or .npz file's (one per array).
    ValueError with one line naming ``name``."""
    try:
        if data.startswith(_NPY_MAGIC):
            arrs = [(stem, np.load(io.BytesIO(data), allow_pickle=False))]
        elif data.startswith(_ZIP_MAGIC):
            with np.load(io.BytesIO(data), allow_pickle=False) as z:
                arrs = [(k, np.asarray(z[k])) for k in z.files]
        else:
            raise ValueError(f"{name}: expected a .npy or .npz file")
    except (OSError, EOFError, zipfile.BadZipFile) as exc:
        raise ValueError(f"{name}: cannot read ({exc})") from None
    for k, a in arrs:
        if a.ndim < 1 or a.shape[0] == 0 or a.dtype.hasobject:
            raise ValueError(f"{name}: array {k!r} needs a non-empty first (row) dimension of numbers")
    return arrs


def offline_inputs(path: Path) -> list[tuple[str, np.ndarray]]:
    """(key, rows) arrays of local offline inputs (the CLI, which sends them inline): a .npy file
    (key: its stem), a .npz file (one per array) or a folder of them (keys prefixed by the file
    stem). ValueError with one line."""
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in (".npy", ".npz"))
        if not files:
            raise ValueError(f"{path}: no .npy or .npz files in the folder")
        out: list[tuple[str, np.ndarray]] = []
        for f in files:
            out += [(f"{f.stem}/{k}" if f.suffix == ".npz" else k, a) for k, a in offline_inputs(f)]
        return out
    if not path.exists():
        raise ValueError(f"{path}: no such file or folder")
    if path.suffix not in (".npy", ".npz"):
        raise ValueError(f"{path}: expected a .npy or .npz file or a folder of them")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ValueError(f"{path}: cannot read ({exc.strerror or exc})") from None
    return arrays_from_bytes(data, str(path), path.stem)


def npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    """One .npz file's bytes holding ``arrays``."""
    buf = io.BytesIO()
    np.savez(buf, **arrays)  # type: ignore[arg-type]
    return buf.getvalue()


def check_request(r: pb.OfflineJobRequest) -> None:
    """What a request names, checked without reading anything: exactly one input, and S3 URIs
    (a local path is refused). ValueError (ObjectError) with one line."""
    if bool(r.input) == bool(r.input_uri):
        raise ValueError("give exactly one of input (a .npy/.npz file's bytes) and input_uri (s3://bucket/key)")
    if r.input_uri:
        parse_s3_uri(r.input_uri, "input_uri")
    if r.output_uri:
        parse_s3_uri(r.output_uri, "output_uri")


def remote_inputs(r: pb.OfflineJobRequest, objects: ObjectStore) -> list[tuple[str, np.ndarray]]:
    """A checked request's (:func:`check_request`) inputs: inline bytes, one S3 object (key: the
    stem of its name, as a local file's), or every .npy/.npz under an S3 prefix (keys as
    :func:`offline_inputs` gives a folder's). Blocking (S3); ValueError with one line."""
    if r.input:
        return arrays_from_bytes(r.input, "input")
    _, key = parse_s3_uri(r.input_uri, "input_uri")
    if not key.endswith("/"):
        return arrays_from_bytes(objects.get(r.input_uri), r.input_uri, PurePosixPath(key).stem)
    uris = [u for u in objects.list(r.input_uri) if u.endswith((".npy", ".npz"))]
    if not uris:
        raise ValueError(f"{r.input_uri}: no .npy or .npz objects under the prefix")
    out: list[tuple[str, np.ndarray]] = []
    for u in uris:
        name = PurePosixPath(u).name
        stem = PurePosixPath(name).stem
        got = arrays_from_bytes(objects.get(u), u, stem)
        out += [(f"{stem}/{k}" if name.endswith(".npz") else k, a) for k, a in got]
    return out


#: ended jobs (done or failed) kept for GetOfflineJob, their outputs included; the oldest beyond
#: this are forgotten when a job is submitted (a dispatcher runs for months)
KEEP_ENDED = 1000


class OfflineJobs:
    """The offline jobs of one dispatcher and their throttled runs (see the module docstring)."""

    def __init__(self, admission: Admission, eligible: Callable[[WorkerState, GroupKey], bool],
                 registry: WorkerRegistry, objects: ObjectStore, rt: Runtime) -> None:
        self.admission = admission
        self.eligible = eligible
        self.registry = registry
        self.objects = objects
        self.rt = rt
        self.jobs: dict[str, OfflineJob] = {}     # by submission, oldest first
        self.submitted = 0
        self.threshold = ml.OFFLINE_UTILIZATION_THRESHOLD
        self.chunk = 8
        self.poll_s = 0.2

    async def submit(self, r: pb.OfflineJobRequest) -> pb.OfflineJobReply | tuple[grpc.StatusCode, str]:
        try:
            check_request(r)
        except ValueError as exc:   # ObjectError too: a local path
            return SC.INVALID_ARGUMENT, str(exc)
        # the model before the inputs: nothing is downloaded for a model the dispatcher does not serve
        probe = pb.SubmitRequest(model=r.model, application=r.application, batch_size=1, min_accuracy=r.min_accuracy)
        v = self.admission.validate(probe)
        if isinstance(v[0], grpc.StatusCode):
            return v[0], v[1]  # type: ignore[return-value]
        m, _, _, variant, choice = v  # type: ignore[misc]
        try:   # reading the inputs (whole .npy/.npz files, S3) stays off the query loop
            inputs = await asyncio.to_thread(remote_inputs, r, self.objects)
        except ValueError as exc:   # ObjectError too: a missing object
            return SC.INVALID_ARGUMENT, str(exc)
        self.forget_ended()
        self.submitted += 1
        job = OfflineJob(job_id=f"job-{self.submitted}", model=m, variant=variant, inputs=inputs,
                         output_uri=r.output_uri,
                         total=sum(ml.chunks(a.shape[0], self.chunk).__len__() for _, a in inputs))
        self.jobs[job.job_id] = job
        self.admission.start_load(choice)
        job.task = self.rt.create_task(self._run(job))
        return job.reply()

    def forget_ended(self, keep: int | None = None) -> None:
        """Forget the oldest ended jobs beyond ``keep`` (default :data:`KEEP_ENDED`); a job queued,
        throttled or running is never forgotten."""
        keep = KEEP_ENDED if keep is None else keep
        ended = [k for k, j in self.jobs.items() if j.state in ("done", "failed")]
        for k in ended[:max(len(ended) - keep, 0)]:
            del self.jobs[k]

    def _workers(self, job: OfflineJob) -> list[WorkerState]:
        key = group_key(job.variant, job.model.name)
        return [w for w in self.registry.workers.values() if not w.draining and self.eligible(w, key)]

    async def _gate(self, job: OfflineJob) -> None:
        """Wait until the job may run: a worker serves its model and online utilization of those
        workers is under the threshold (INFaaS §5); meanwhile the job reports ``throttled``."""
        while True:
            if self.rt.stopping:
                raise RuntimeError("dispatcher stopped")
            ws = self._workers(job)
            if ws and ml.offline_may_run(self.registry.online_utilization(ws), self.threshold):
                job.state = "running"
                return
            job.state = "throttled" if ws else "queued"
            job.throttled_polls += 1
            await asyncio.sleep(self.poll_s)

    async def _chunk(self, job: OfflineJob, chunk: np.ndarray) -> np.ndarray:
        """One chunk through the normal queue; transient failures are retried, never dropped."""
        while True:
            await self._gate(job)
            out = await asyncio.shield(self.admission.enqueue_offline(job.model, job.variant, chunk))
            if not isinstance(out, tuple):
                return tensor_to_array(out.outputs[0])
            if out[0] not in (SC.UNAVAILABLE, SC.DEADLINE_EXCEEDED, SC.RESOURCE_EXHAUSTED):
                raise RuntimeError(f"{out[0].name}: {out[1]}")
            job.retries += 1
            await asyncio.sleep(self.poll_s)

    async def _run(self, job: OfflineJob) -> None:
        """Run the job chunk by chunk while online utilization stays under the threshold; above it
        the job waits (state ``throttled``) and resumes later -- it is never dropped. Once it ends
        it holds no inputs (jobs are kept for GetOfflineJob; their inputs would pile up)."""
        outputs: dict[str, list[np.ndarray]] = {}
        try:
            for key, arr in job.inputs:
                for s, e in ml.chunks(arr.shape[0], self.chunk):
                    try:
                        got = await self._chunk(job, np.ascontiguousarray(arr[s:e]))
                    except RuntimeError as exc:
                        raise RuntimeError(f"{key} rows {s}-{e}: {exc}") from None
                    outputs.setdefault(key, []).append(got)
                    job.done += 1
            data = await asyncio.to_thread(npz_bytes, {k: np.concatenate(v) for k, v in outputs.items()})
            if job.output_uri:
                await asyncio.to_thread(self.objects.put, job.output_uri, data)
                job.message = f"wrote {job.output_uri}"
            else:
                job.output, job.message = data, f"outputs in this reply ({len(data)} bytes, .npz)"
            job.state = "done"
        except asyncio.CancelledError:
            job.state, job.message = "failed", "dispatcher stopped"
            raise
        except Exception as exc:  # noqa: BLE001 - reported through GetOfflineJob
            job.state, job.message = "failed", str(exc)
        finally:   # done, failed or stopped: the inputs go; state, counts and outputs stay for GetOfflineJob
            job.inputs = []
