"""`costscale run` as systemd runs it: READY over NOTIFY_SOCKET, SIGHUP with a broken config keeps
the old config, a second daemon on the same state is refused, SIGTERM stops it and leaves no
process behind. Against moto in server mode on 127.0.0.1."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import boto3
import pytest

pytestmark = pytest.mark.slow


def _config(path: Path, endpoint: str, state: Path, ami: str, budget: float = 1.0) -> None:
    path.write_text(f"""\
cluster: lifecycle
budget_per_hour: {budget}
models:
  - name: rm2
    qos_ms: 350
instance_types:
  - type: r5n.large
  - type: t3.xlarge
launch:
  ami_id: {ami}
dispatcher:
  listen: 127.0.0.1:0
intervals:
  fleet_s: 1
  model_s: 1
  reconcile_s: 5
state_path: {state}
pinned_pool:
  r5n.large: 2
aws:
  endpoint_url: {endpoint}
""")


class _NotifyReader:
    """The test's systemd: reads the NOTIFY_SOCKET continuously on a thread, as PID 1 does. A reader
    that stopped between checks let the datagram queue fill (net.unix.max_dgram_qlen, 10 by default;
    systemd raises it to 512) and the daemon's next notify blocked its event loop: on a loaded
    machine the second daemon's start took long enough for that, and SIGHUP was never handled."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._got: list[str] = []
        self._seen = 0            # datagrams handed out by until()
        self._mu = threading.Lock()
        self._stop = threading.Event()
        sock.settimeout(0.1)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data = self._sock.recv(4096).decode()
            except socket.timeout:
                continue
            except OSError:
                return
            with self._mu:
                self._got.append(data)

    def until(self, needle: str, timeout: float) -> str:
        """What came since the last call, once it holds ``needle`` (or at the deadline)."""
        deadline = time.monotonic() + timeout
        while True:
            with self._mu:
                got = "".join(d + "\n" for d in self._got[self._seen:])
                n = len(self._got)
            if needle in got or time.monotonic() >= deadline:
                self._seen = n
                return got
            time.sleep(0.05)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def _live(ec2) -> list[dict]:
    res = ec2.describe_instances(Filters=[{"Name": "tag:costscale:cluster", "Values": ["lifecycle"]},
                                          {"Name": "instance-state-name", "Values": ["pending", "running"]}])
    return [i for r in res["Reservations"] for i in r["Instances"]]



def _reap(proc: subprocess.Popen, *closing) -> None:  # type: ignore[type-arg, no-untyped-def]
    """A daemon a test started: killed if still running, and what the test opened beside it closed."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    for c in closing:
        c.close()

def test_run_reload_lock_and_stop(moto_endpoint: str, tmp_path: Path) -> None:
    ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=moto_endpoint)
    ami = ec2.describe_images()["Images"][0]["ImageId"]
    cfg = tmp_path / "costscale.yaml"
    state = tmp_path / "state.db"
    _config(cfg, moto_endpoint, state, ami)
    notify_path = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(notify_path)
    notes = _NotifyReader(sock)
    env = dict(os.environ, NOTIFY_SOCKET=notify_path, PYTHONUNBUFFERED="1")
    log = tmp_path / "daemon.log"
    with log.open("w") as logf:
        proc = subprocess.Popen([sys.executable, "-m", "daemon.cli", "run", str(cfg)], stdout=logf,
                                stderr=subprocess.STDOUT, env=env)
    try:
        assert "READY=1" in notes.until("READY=1", 30), log.read_text()[-3000:]
        assert "STATUS=pool r5n.large×2 at 0.298 of 1 $/hr" in notes.until("STATUS=pool", 30)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(_live(ec2)) < 2:
            time.sleep(0.2)
        assert len(_live(ec2)) == 2, log.read_text()[-3000:]

        # A second daemon on the same state store is refused with a clear line, not a traceback.
        second = subprocess.run([sys.executable, "-m", "daemon.cli", "run", str(cfg)], capture_output=True,
                                text=True, timeout=60, env=dict(os.environ))
        assert second.returncode != 0
        assert "Traceback" not in second.stderr
        assert "state store" in second.stderr or "another costscale" in second.stderr, second.stderr

        # SIGHUP with a broken config: rejected, old config keeps running.
        cfg.write_text(cfg.read_text().replace("budget_per_hour: 1.0", "budget_per_hour: -5"))
        proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and "reload rejected" not in log.read_text():
            time.sleep(0.1)
        assert "reload rejected" in log.read_text()
        # systemd hears of the reload and of its outcome (RELOADING=1, then READY=1 with a STATUS=)
        assert "RELOADING=1" in notes.until("reload rejected", 10)
        # it goes on under the old config: fleet ticks (every second) are logged after the rejection
        mark = log.read_text().index("reload rejected")
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and log.read_text()[mark:].count("fleet (") < 2:
            time.sleep(0.1)
        assert log.read_text()[mark:].count("fleet (") >= 2, log.read_text()[mark:][-2000:]
        assert proc.poll() is None
        assert len(_live(ec2)) == 2

        # SIGTERM: graceful stop, exit 0, instances kept (on_shutdown: keep), no process left.
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, log.read_text()[-3000:]
        assert len(_live(ec2)) == 2
    finally:
        _reap(proc, notes, sock)
    out = subprocess.run(["pgrep", "-f", f"daemon.cli run {cfg}"], capture_output=True, text=True)
    assert out.stdout.strip() == ""
