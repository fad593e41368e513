"""Fault injection on the query path's dependencies (issue #40, deliverable 2 (b), (c), (f)), shared by
``tests/faults/test_dynamo_down.py``, ``test_worker_sigstop.py``, ``test_grpc_flood.py`` and
``bench/faults/query_faults_bench.py``: a real worker process one can SIGSTOP, a history of query
outcomes checked Jepsen-style (each query ended once: an answer or a typed status), and a
history of "acting" intervals per replica (no two overlap; each inside its lease as the table
saw it). Everything on 127.0.0.1."""
from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import grpc

REPO = Path(__file__).resolve().parents[1]

#: the typed statuses a query may end with instead of an answer (never UNKNOWN, never a hang)
TYPED = frozenset({grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE,
                   grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.INVALID_ARGUMENT,
                   grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.NOT_FOUND})


# -- a real worker process -------------------------------------------------------------------------

class WorkerProcess:
    """``costscale worker`` in its own process, emulating ``profile`` on ``instance_type``,
    registering with the dispatcher at ``dispatcher`` (HOST:PORT)."""

    def __init__(self, instance_id: str, instance_type: str, dispatcher: str, cache: Path,
                 model: str = "big", profile: str = "rm2") -> None:
        self.instance_id = instance_id
        cmd = [sys.executable, "-m", "daemon.cli", "worker", "--listen", "127.0.0.1:0", "--dispatcher", dispatcher,
               "--instance-id", instance_id, "--instance-type", instance_type, "--model", f"{model}=builtin:mlp",
               "--emulate-profile", profile, "--threads", "1", "--cache-dir", str(cache)]
        env = dict(os.environ, PYTHONPATH=str(REPO))
        self.proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True)
        self.stopped = False

    def sigstop(self) -> None:
        self.proc.send_signal(signal.SIGSTOP)
        self.stopped = True

    def sigcont(self) -> None:
        self.proc.send_signal(signal.SIGCONT)
        self.stopped = False

    def end(self) -> None:
        if self.proc.poll() is None:
            if self.stopped:
                self.sigcont()
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


async def until(cond: Callable[[], bool], timeout: float, what: str) -> None:
    """Wait (polling every 10 ms) until ``cond()``; fail naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"not met within {timeout:g} s: {what}"
        await asyncio.sleep(0.01)


# -- query histories ------------------------------------------------------------------------------

@dataclass
class Outcome:
    """How one query ended, as its client saw it."""

    key: str
    sent: float                       # monotonic s
    ended: float
    code: grpc.StatusCode | None      # None: answered
    instance_id: str = ""             # who answered
    slo_met: bool = True              # the answer came within the query's SLO (the dispatcher's word)


@dataclass
class QueryHistory:
    """Every query's outcome; :meth:`violations` is the Jepsen-style check."""

    outcomes: list[Outcome] = field(default_factory=list)
    sent: list[str] = field(default_factory=list)

    def answered(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.code is None]

    def codes(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for o in self.outcomes:
            name = "OK" if o.code is None else o.code.name
            out[name] = out.get(name, 0) + 1
        return dict(sorted(out.items()))

    def violations(self) -> list[str]:
        """Each query sent ended exactly once, with an answer or a typed status."""
        bad = []
        ended: dict[str, int] = {}
        for o in self.outcomes:
            ended[o.key] = ended.get(o.key, 0) + 1
            if o.code is not None and o.code not in TYPED:
                bad.append(f"{o.key}: untyped {o.code.name}")
        bad += [f"{k}: ended {n} times" for k, n in ended.items() if n != 1]
        bad += [f"{k}: lost (never ended)" for k in self.sent if k not in ended]
        return bad


# -- acting histories (Jepsen style) --------------------------------------------------------------

@dataclass(frozen=True)
class Act:
    """One launch or terminate a replica made on EC2: its wall-clock interval."""

    replica: str
    op: str
    start: float
    end: float
    generation: int


@dataclass(frozen=True)
class Landed:
    """A lease write that landed in the table: who, until when (the table's ``expires_at``)."""

    owner: str
    at: float
    expires_at: float
    generation: int


class ActLog:
    """The acts of every replica and the lease writes that landed, on one wall clock (thread-safe)."""

    def __init__(self) -> None:
        self.acts: list[Act] = []
        self.landed: list[Landed] = []
        self._mu = threading.Lock()

    def act(self, a: Act) -> None:
        with self._mu:
            self.acts.append(a)

    def land(self, w: Landed) -> None:
        with self._mu:
            self.landed.append(w)

    def violations(self) -> list[str]:
        """No two replicas' acts overlap, and each act ends before the expiry of the lease its replica
        last wrote before the act began (the table's view), with no other owner's write between."""
        bad = []
        acts = sorted(self.acts, key=lambda a: a.start)
        for i, a in enumerate(acts):
            for b in acts[i + 1:]:
                if b.start >= a.end:
                    break
                if b.replica != a.replica:
                    bad.append(f"{a.replica} {a.op} [{a.start:.3f}, {a.end:.3f}] overlaps {b.replica} {b.op} "
                               f"[{b.start:.3f}, {b.end:.3f}]")
        for a in acts:
            mine = [w for w in self.landed if w.owner == a.replica and w.at <= a.start]
            if not mine:
                bad.append(f"{a.replica} {a.op} at {a.start:.3f}: no lease write of its own landed before")
                continue
            last = max(mine, key=lambda w: w.at)
            if a.end >= last.expires_at:
                bad.append(f"{a.replica} {a.op} ended at {a.end:.3f}, after its lease expired at {last.expires_at:.3f}")
            other = [w for w in self.landed if w.owner != a.replica and last.at < w.at <= a.end]
            if other:
                bad.append(f"{a.replica} {a.op} ended at {a.end:.3f} after {other[0].owner} took the lease at "
                           f"{other[0].at:.3f}")
        return bad


class RecordingCloud:
    """A ``CloudProvider`` that records each launch and terminate (the acts) in an :class:`ActLog`."""

    def __init__(self, inner: Any, replica: str, log: ActLog, generation: Callable[[], int]) -> None:
        self.inner = inner
        self.replica = replica
        self.log = log
        self.generation = generation
        self.cluster = inner.cluster

    def _timed(self, op: str, fn: Callable[[], Any]) -> Any:
        start = time.time()
        try:
            return fn()
        finally:
            self.log.act(Act(self.replica, op, start, time.time(), self.generation()))

    def launch(self, instance_type: str, count: int, client_token: str, tags: dict[str, str] | None = None) -> Any:
        return self._timed("launch", lambda: self.inner.launch(instance_type, count, client_token, tags))

    def terminate(self, instance_ids: list[str]) -> None:
        if instance_ids:
            self._timed("terminate", lambda: self.inner.terminate(instance_ids))
        else:
            self.inner.terminate(instance_ids)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class RecordingLeaseTable:
    """A lease table whose writes that land are recorded (owner, wall time, expiry, generation)."""

    def __init__(self, inner: Any, log: ActLog) -> None:
        self.inner = inner
        self.log = log

    def get(self, cluster: str) -> Any:
        return self.inner.get(cluster)

    def write(self, lease: Any, expect: Any) -> bool:
        ok = bool(self.inner.write(lease, expect))
        if ok:
            self.log.land(Landed(lease.owner, time.time(), lease.expires_at, lease.generation))
        return ok

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


# -- a link that can be cut ------------------------------------------------------------------------

class CuttableProxy:
    """A TCP proxy on 127.0.0.1 in front of ``target`` (HOST:PORT). :meth:`cut` closes every open
    connection and refuses new ones (accepted, then closed at once: the client sees a dropped
    connection, as from an endpoint gone), :meth:`heal` lets them through again."""

    def __init__(self, target: str) -> None:
        host, _, port = target.rpartition(":")
        self.target = (host, int(port))
        self.down = False
        self._socks: set[socket.socket] = set()
        self._mu = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self._accept, daemon=True).start()

    def cut(self) -> None:
        with self._mu:
            self.down = True
            socks, self._socks = self._socks, set()
        for s in socks:
            _close(s)

    def heal(self) -> None:
        with self._mu:
            self.down = False

    def close(self) -> None:
        self.cut()
        _close(self._listener)

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            with self._mu:
                if self.down:
                    _close(conn)
                    continue
            try:
                up = socket.create_connection(self.target, timeout=5)
            except OSError:
                _close(conn)
                continue
            up.settimeout(None)
            with self._mu:
                if self.down:            # cut while this one was being connected: not through
                    _close(conn)
                    _close(up)
                    continue
                self._socks |= {conn, up}
            for a, b in ((conn, up), (up, conn)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                b.sendall(data)
        except OSError:
            pass
        _close(a)
        _close(b)


def _close(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    s.close()
