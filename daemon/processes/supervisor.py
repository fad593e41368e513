"""``costscale run`` with ``dispatcher.processes: N`` > 1: N daemon processes on one host, one port.

The supervisor (the process systemd starts, ``Type=notify``, ``NotifyAccess=main``) runs no
dispatcher itself: it starts N ``costscale run CONFIG`` processes, process I with
``COSTSCALE_PROCESS=I/N`` in its environment (its config: :func:`daemon.processes.split.process_config`),
and stands between them and systemd:

* **readiness**: each process's ``sd_notify`` datagrams go to the supervisor's own socket
  (``NOTIFY_SOCKET`` set for them to an abstract socket it listens on); it tells systemd
  ``READY=1`` once every process has, and ``WATCHDOG=1`` only while every process pings its own
  watchdog (or was started less than a watchdog period ago);
* **signals**: SIGTERM and SIGINT stop every process (each stops as one daemon does: NOT_SERVING
  first, queued queries answered); SIGHUP reloads each (and each reopens its audit log);
* **a process that dies** after the start is started again (1 s, doubling to 30 s while it keeps
  dying within a minute): the other processes serve meanwhile, and the ownership round gives the
  dead one's workers to them (``scaler.replicas``). A process that fails before every one was
  ready ends the start: the others are stopped and the supervisor exits with its status (2: the
  config; 1: the environment), as a single daemon would.

An adapter (processes, signals, a socket); what each process runs is decided by ``split``.
"""
from __future__ import annotations

import logging
import os
import secrets
import selectors
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from daemon.observe import sdnotify
from daemon.processes.split import PROCESS_ENV

log = logging.getLogger("costscale")

#: restart delays of a process that keeps dying (s): doubled from the first to the last
RESTART_FIRST_S, RESTART_MAX_S = 1.0, 30.0
#: a process that ran this long before it died starts again after RESTART_FIRST_S
RESTART_RESET_S = 60.0
#: how often the loop looks at its processes when nothing arrives (s)
POLL_S = 0.2


@dataclass
class Child:
    """One daemon process of the host."""

    index: int
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    ready: bool = False
    last_ping: float = 0.0
    delay_s: float = RESTART_FIRST_S
    restart_at: float | None = None
    codes: list[int] = field(default_factory=list)


class Supervisor:
    """N ``costscale run`` processes of one config (module docstring)."""

    def __init__(self, config: str, count: int, args: Sequence[str] = (), command: Sequence[str] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.count = count
        #: what each process runs (tests give a stand-in)
        self.command = list(command) if command else [sys.executable, "-m", "daemon.cli", "run", config, *args]
        self.clock = clock
        self.children = [Child(i) for i in range(count)]
        self.stopping = False
        self.reload_asked = False
        self.all_ready = False
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        self.notify_name = f"@costscale-{os.getpid()}-{secrets.token_hex(6)}"
        self._sock.bind(b"\0" + self.notify_name[1:].encode())
        self._sock.setblocking(False)
        self._watchdog = sdnotify.watchdog_interval()
        self._next_watchdog = 0.0

    # -- processes ------------------------------------------------------------------------------
    def _env(self, index: int) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET", "WATCHDOG_PID", "LISTEN_PID")}
        env[PROCESS_ENV] = f"{index}/{self.count}"
        env["NOTIFY_SOCKET"] = self.notify_name       # its READY=1 and WATCHDOG=1 come here
        return env

    def start(self, child: Child) -> None:
        child.proc = subprocess.Popen(self.command, env=self._env(child.index))
        child.started = child.last_ping = self.clock()
        child.ready, child.restart_at = False, None
        log.info("dispatcher process %d of %d started (pid %d)", child.index, self.count, child.proc.pid)

    def _signal_all(self, sig: int) -> None:
        for c in self.children:
            if c.proc is not None and c.proc.poll() is None:
                try:
                    c.proc.send_signal(sig)
                except ProcessLookupError:
                    pass

    # -- notifications --------------------------------------------------------------------------
    def _by_pid(self, pid: int) -> Child | None:
        return next((c for c in self.children if c.proc is not None and c.proc.pid == pid), None)

    def _drain_notify(self) -> None:
        """Read the processes' datagrams; a sender is known by the pid the kernel gives
        (SO_PASSCRED); a datagram from no process of ours is dropped."""
        while True:
            try:
                data, anc, _, _ = self._sock.recvmsg(4096, socket.CMSG_SPACE(12))
            except (BlockingIOError, InterruptedError):
                return
            pid = _sender_pid(anc)
            child = self._by_pid(pid) if pid else None
            if child is None:
                continue
            lines = data.decode(errors="replace").splitlines()
            if "READY=1" in lines:
                child.ready = True
            if "READY=1" in lines or "WATCHDOG=1" in lines:
                child.last_ping = self.clock()

    def _tell_systemd(self) -> None:
        now = self.clock()
        if not self.all_ready and all(c.ready for c in self.children):
            self.all_ready = True
            sdnotify.notify(f"READY=1\nMAINPID={os.getpid()}\nSTATUS={self.count} dispatcher processes serving")
            log.info("%d dispatcher processes ready", self.count)
        if self._watchdog and now >= self._next_watchdog:
            period = 2 * self._watchdog
            if all(now - c.last_ping < period or now - c.started < period for c in self.children):
                sdnotify.notify("WATCHDOG=1")
            self._next_watchdog = now + self._watchdog

    # -- the loop -------------------------------------------------------------------------------
    def _exited(self, child: Child, code: int) -> int | None:
        """A process ended: the supervisor's exit status when the start fails, else None (restarted)."""
        child.codes.append(code)
        if self.stopping:
            return None
        if not self.all_ready:
            log.error("dispatcher process %d exited with status %d before every process was ready: stopping the others",
                      child.index, code)
            return code or 1
        now = self.clock()
        child.delay_s = restart_delay(child.delay_s, now - child.started, died_before=len(child.codes) > 1)
        child.restart_at = now + child.delay_s
        log.warning("dispatcher process %d exited with status %d; starting it again in %.0f s (the others serve)",
                    child.index, code, child.delay_s)
        return None

    def run(self) -> int:
        old = {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
        sel = selectors.DefaultSelector()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        sel.register(self._sock, selectors.EVENT_READ)
        failed: int | None = None
        try:
            for c in self.children:
                self.start(c)
            while True:
                sel.select(POLL_S)
                self._drain_notify()
                if self.reload_asked:
                    self.reload_asked = False
                    self._signal_all(signal.SIGHUP)
                for c in self.children:
                    code = c.proc.poll() if c.proc is not None else None
                    if c.proc is not None and code is not None:
                        c.proc = None
                        failed = self._exited(c, code) if failed is None else failed
                    if c.proc is None and c.restart_at is not None and not self.stopping and failed is None \
                            and self.clock() >= c.restart_at:
                        self.start(c)
                if failed is not None and not self.stopping:
                    self.stop()
                if self.stopping and all(c.proc is None for c in self.children):
                    break
                if not self.stopping:
                    self._tell_systemd()
        finally:
            for s, h in old.items():
                signal.signal(s, h)
            sel.close()
            self._sock.close()
        if failed is not None:
            return failed
        # a process ended by the SIGTERM it was sent (still starting: no handler yet) stopped as asked
        last = [c.codes[-1] for c in self.children if c.codes and c.codes[-1] != -signal.SIGTERM]
        return next((code if code > 0 else 1 for code in last if code != 0), 0)   # killed by another signal: 1

    def stop(self) -> None:
        if not self.stopping:
            self.stopping = True
            sdnotify.notify("STOPPING=1")
            self._signal_all(signal.SIGTERM)

    def _on_signal(self, sig: int, _frame: object) -> None:
        if sig == signal.SIGHUP:
            self.reload_asked = True
        else:
            self.stop()


def restart_delay(last_s: float, ran_s: float, *, died_before: bool) -> float:
    """How long a process that died waits before it starts again (s): :data:`RESTART_FIRST_S` the
    first time or after it ran :data:`RESTART_RESET_S`; else twice its last wait, at most
    :data:`RESTART_MAX_S`."""
    if ran_s >= RESTART_RESET_S or not died_before:
        return RESTART_FIRST_S
    return min(RESTART_MAX_S, last_s * 2)


def _sender_pid(ancillary: list[tuple[int, int, bytes]]) -> int | None:
    """The sending pid from SCM_CREDENTIALS (struct ucred: pid, uid, gid), or None."""
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS and len(data) >= 12:
            return int.from_bytes(data[:4], sys.byteorder)
    return None


def supervise(config: str, count: int, args: Sequence[str]) -> int:
    """``costscale run`` as the supervisor of ``count`` processes; its exit status."""
    return Supervisor(config, count, args).run()


__all__ = ["Child", "Supervisor", "restart_delay", "supervise"]
