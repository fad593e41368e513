"""Local runner for the embedded default (``costscale demo`` and tests): one worker process per
managed instance that reaches ``running`` in the (moto) cloud. Each worker serves a real ONNX model
with ONNX Runtime and pads every query's service time to the latency profile of the instance type it
stands for (DESIGN "Where it runs"). An adapter: it starts and stops processes, decides nothing.
"""
from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import signal
import subprocess
import sys
from dataclasses import dataclass

from config.pids import pid_running
from scaler.cloud.provider import ManagedInstance

log = logging.getLogger("costscale.local")


#: set in a local worker's environment: the pid of the process that must outlive it
PARENT_ENV = "COSTSCALE_DIE_WITH_PARENT"


def die_with_parent() -> None:
    """Linux, called by a local worker at start when ``PARENT_ENV`` is set: the worker gets SIGTERM
    when the demo dies (even by SIGKILL), so no worker is orphaned. Done in the worker after exec,
    not in a ``preexec_fn``: code between fork and exec in a process with gRPC threads can abort."""
    want = os.environ.get(PARENT_ENV)
    if not want or not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        return
    if str(os.getppid()) != want:      # the parent died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)


@dataclass
class LocalWorker:
    instance_id: str
    instance_type: str
    proc: subprocess.Popen[bytes]


class LocalRunner:
    """Keeps one local worker process per running managed instance."""

    def __init__(self, dispatcher_address: str, token: str, models: list[tuple[str, str, str]],
                 profiles_csv: str | None = None, imds: str | None = None) -> None:
        self.dispatcher_address = dispatcher_address
        self.token = token
        self.models = models  # (name, onnx spec, profile name)
        self.profiles_csv = profiles_csv
        #: a local IMDS standing for EC2's (tests, the spot demo): each worker watches ``{imds}/{its id}``
        self.imds = imds
        self.workers: dict[str, LocalWorker] = {}
        self.started_pids: list[int] = []
        self._lock = asyncio.Lock()

    def _command(self, inst: ManagedInstance) -> list[str]:
        cmd = [sys.executable, "-m", "daemon.cli", "worker", "--listen", "127.0.0.1:0",
               "--dispatcher", self.dispatcher_address,
               "--instance-id", inst.instance_id, "--instance-type", inst.instance_type]
        for name, spec, _profile in self.models:
            cmd += ["--model", f"{name}={spec}"]
        if self.models:   # each model padded to its own profile; the first's pads what the CSV lacks
            cmd += ["--emulate-profile", self.models[0][2]]
            cmd += [x for name, _, prof in self.models[1:] if prof != name for x in ("--model-profile", f"{name}={prof}")]
        if self.profiles_csv:
            cmd += ["--profiles", self.profiles_csv]
        if self.imds:
            cmd += ["--imds-endpoint", f"{self.imds.rstrip('/')}/{inst.instance_id}"]
        return cmd

    async def sync(self, instances: list[ManagedInstance]) -> None:
        """Start workers for running instances without one; stop those whose instance is gone."""
        async with self._lock:
            running = {i.instance_id: i for i in instances if i.state == "running"}
            for iid in [w for w in self.workers if w not in running]:
                await self._stop_worker(self.workers.pop(iid))
            for iid, inst in running.items():
                w = self.workers.get(iid)
                if w is not None and w.proc.poll() is None:
                    continue
                self.workers[iid] = await self._start_worker(inst)

    async def _start_worker(self, inst: ManagedInstance) -> LocalWorker:
        # the cluster token in the environment, not in argv (which any local user can read in ps)
        env = dict(os.environ, PYTHONUNBUFFERED="1", COSTSCALE_CLUSTER_TOKEN=self.token, **{PARENT_ENV: str(os.getpid())})
        proc = subprocess.Popen(self._command(inst), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        self.started_pids.append(proc.pid)
        worker = LocalWorker(inst.instance_id, inst.instance_type, proc)
        log.info("started worker pid %d for %s (%s)", proc.pid, inst.instance_id, inst.instance_type)
        return worker

    async def _stop_worker(self, w: LocalWorker, timeout: float = 5.0) -> None:
        if w.proc.poll() is None:
            w.proc.terminate()
            try:
                await asyncio.to_thread(w.proc.wait, timeout)
            except subprocess.TimeoutExpired:
                w.proc.kill()
                await asyncio.to_thread(w.proc.wait)
        log.info("stopped worker pid %d (%s)", w.proc.pid, w.instance_id)

    async def stop_all(self) -> None:
        async with self._lock:
            for w in list(self.workers.values()):
                await self._stop_worker(w)
            self.workers.clear()

    def alive_pids(self) -> list[int]:
        return [pid for pid in self.started_pids if pid_running(pid)]   # a zombie: gone

