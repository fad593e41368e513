"""Offline jobs (INFaaS §3.1 offline_query, §5): a file of inputs run through the normal queue,
chunk by chunk, while the online utilization of the workers that serve its model stays under the
threshold (40 %); above it the job waits (state ``throttled``) and resumes later -- it is never
dropped. Its outputs go to one .npz file.

:class:`OfflineJobs` is a part of :class:`dispatcher.server.Dispatcher` (``d.offline``); the
Dispatcher forwards ``submit_offline`` and ``offline_jobs``, ``offline_threshold``,
``offline_chunk``, ``offline_poll_s`` to it.
Owns: ``jobs``, ``threshold``, ``chunk``, ``poll_s``. Reads from the Dispatcher: ``workers``,
``online_utilization``, ``_eligible``, ``_validate``, ``_start_load``, ``enqueue_offline``,
``_loop``, ``_stopping``.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
import numpy as np

from config.files import replace_atomic
from config.schema import ModelSpec
from dispatcher import modelless as ml
from dispatcher.admission import SC
from dispatcher.proto import costscale_pb2 as pb
from dispatcher.proto.tensors import tensor_to_array
from dispatcher.workers import WorkerState

if TYPE_CHECKING:
    from dispatcher.server import Dispatcher


@dataclass(eq=False)
class OfflineJob:
    """An offline job (INFaaS §3.1 offline_query): inputs, progress, and where the output goes."""

    job_id: str
    model: ModelSpec
    variant: str
    inputs: list[tuple[str, np.ndarray]]
    output: Path
    total: int
    done: int = 0
    state: str = "queued"
    message: str = ""
    retries: int = 0
    throttled_polls: int = 0
    task: asyncio.Task | None = None

    def reply(self) -> pb.OfflineJobReply:
        return pb.OfflineJobReply(job_id=self.job_id, state=self.state, done=self.done, total=self.total,
                                  message=self.message)


def offline_inputs(path: Path) -> list[tuple[str, np.ndarray]]:
    """(key, rows) arrays of an offline job: a .npy file (key: its stem), a .npz file (one per
    array) or a folder of them (keys prefixed by the file stem). ValueError with one line."""
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
    try:
        if path.suffix == ".npy":
            arrs = [(path.stem, np.load(str(path), allow_pickle=False))]
        elif path.suffix == ".npz":
            with np.load(str(path), allow_pickle=False) as data:
                arrs = [(k, np.asarray(data[k])) for k in data.files]
        else:
            raise ValueError(f"{path}: expected a .npy or .npz file or a folder of them")
    except (OSError, EOFError) as exc:
        raise ValueError(f"{path}: cannot read ({exc})") from None
    for k, a in arrs:
        if a.ndim < 1 or a.shape[0] == 0 or a.dtype.hasobject:
            raise ValueError(f"{path}: array {k!r} needs a non-empty first (row) dimension of numbers")
    return arrs


def _save_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    replace_atomic(path, lambda tmp: np.savez(str(tmp), **arrays), suffix=".tmp.npz")


class OfflineJobs:
    """The offline jobs of one dispatcher and their throttled runs (see the module docstring)."""

    def __init__(self, d: Dispatcher) -> None:
        self.d = d
        self.jobs: dict[str, OfflineJob] = {}
        self.threshold = ml.OFFLINE_UTILIZATION_THRESHOLD
        self.chunk = 8
        self.poll_s = 0.2

    async def submit(self, r: pb.OfflineJobRequest) -> pb.OfflineJobReply | tuple[grpc.StatusCode, str]:
        if not r.input_path or not r.output_path:
            return SC.INVALID_ARGUMENT, "give input_path and output_path"
        try:   # reading the inputs (whole .npy/.npz files) stays off the query loop
            inputs = await asyncio.to_thread(offline_inputs, Path(r.input_path))
        except ValueError as exc:
            return SC.INVALID_ARGUMENT, str(exc)
        probe = pb.SubmitRequest(model=r.model, application=r.application, batch_size=1, min_accuracy=r.min_accuracy)
        v = self.d._validate(probe)
        if isinstance(v[0], grpc.StatusCode):
            return v[0], v[1]  # type: ignore[return-value]
        m, _, _, variant, choice = v  # type: ignore[misc]
        job = OfflineJob(job_id=f"job-{len(self.jobs) + 1}", model=m, variant=variant, inputs=inputs,
                         output=Path(r.output_path),
                         total=sum(ml.chunks(a.shape[0], self.chunk).__len__() for _, a in inputs))
        self.jobs[job.job_id] = job
        self.d._start_load(choice)
        job.task = (self.d._loop or asyncio.get_running_loop()).create_task(self._run(job))
        return job.reply()

    def _workers(self, job: OfflineJob) -> list[WorkerState]:
        key = f"v:{job.variant}" if job.variant else f"m:{job.model.name}"
        return [w for w in self.d.workers.values() if not w.draining and self.d._eligible(w, key)]

    async def _gate(self, job: OfflineJob) -> None:
        """Wait until the job may run: a worker serves its model and online utilization of those
        workers is under the threshold (INFaaS §5); meanwhile the job reports ``throttled``."""
        while True:
            if self.d._stopping:
                raise RuntimeError("dispatcher stopped")
            ws = self._workers(job)
            if ws and ml.offline_may_run(self.d.online_utilization(ws), self.threshold):
                job.state = "running"
                return
            job.state = "throttled" if ws else "queued"
            job.throttled_polls += 1
            await asyncio.sleep(self.poll_s)

    async def _chunk(self, job: OfflineJob, chunk: np.ndarray) -> np.ndarray:
        """One chunk through the normal queue; transient failures are retried, never dropped."""
        while True:
            await self._gate(job)
            out = await asyncio.shield(self.d.enqueue_offline(job.model, job.variant, chunk))
            if not isinstance(out, tuple):
                return tensor_to_array(out.outputs[0])
            if out[0] not in (SC.UNAVAILABLE, SC.DEADLINE_EXCEEDED, SC.RESOURCE_EXHAUSTED):
                raise RuntimeError(f"{out[0].name}: {out[1]}")
            job.retries += 1
            await asyncio.sleep(self.poll_s)

    async def _run(self, job: OfflineJob) -> None:
        """Run the job chunk by chunk while online utilization stays under the threshold; above it
        the job waits (state ``throttled``) and resumes later -- it is never dropped."""
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
            await asyncio.to_thread(_save_npz, job.output, {k: np.concatenate(v) for k, v in outputs.items()})
            job.state, job.message = "done", f"wrote {job.output}"
        except asyncio.CancelledError:
            job.state, job.message = "failed", "dispatcher stopped"
            raise
        except Exception as exc:  # noqa: BLE001 - reported through GetOfflineJob
            job.state, job.message = "failed", str(exc)
