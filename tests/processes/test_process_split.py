"""``dispatcher.processes`` (issue #41, deliverable 4): each process's config (pure,
``daemon.processes.split``), two dispatchers on one port (SO_REUSEPORT) each with a port of its own,
and the supervisor's start, readiness, restart, reload and stop with stand-in processes."""
from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Callable

import pytest

from config.profiles import load_profiles_csv
from config.schema import Config
from daemon.commands.status import hosts_of, replica_lines
from daemon.processes.split import base_replica_id, parse_slot, process_config, suffixed
from dispatcher.latency_model import LatencyModel
from dispatcher.server import Dispatcher
from tests.conftest import free_port
from tests.dispatch_helpers import make_config

ROOT = Path(__file__).resolve().parents[2]


def _cfg(**top: object) -> Config:
    data = make_config().model_dump()
    data["dispatcher"]["listen"] = "127.0.0.1:50051"
    data.update(top)
    return Config.model_validate(data)


def test_each_process_gets_its_own_files_and_replica_id_and_shares_the_port() -> None:
    cfg = _cfg(state_path="/var/lib/costscale/state.db", audit_log={"path": "/var/log/costscale/audit.log"},
               metrics={"listen": "127.0.0.1:9464"})
    p0 = process_config(cfg, 0, 3, "ctl-1", "/var/lib/costscale/state.db.cluster-token")
    p2 = process_config(cfg, 2, 3, "ctl-1", "/var/lib/costscale/state.db.cluster-token")
    assert (p0.state_path, p2.state_path) == ("/var/lib/costscale/state.db", "/var/lib/costscale/state.p2.db")
    assert p0.audit_log is not None and p2.audit_log is not None
    assert (p0.audit_log.path, p2.audit_log.path) == ("/var/log/costscale/audit.log", "/var/log/costscale/audit.p2.log")
    assert (p0.metrics.listen, p2.metrics.listen) == ("127.0.0.1:9464", "127.0.0.1:9466")
    assert (p0.lease.replica_id, p2.lease.replica_id) == ("p0@ctl-1:50051", "p2@ctl-1:50051")
    assert p0.lease.replicas and p2.lease.replicas
    assert p0.dispatcher.listen == p2.dispatcher.listen == "127.0.0.1:50051"
    assert p2.dispatcher.processes == 3
    # the generated token beside the config's state path, for every process
    assert p2.dispatcher.cluster_token_file == "/var/lib/costscale/state.db.cluster-token"
    assert cfg.state_path == "/var/lib/costscale/state.db" and not cfg.lease.replicas   # the user's config untouched


def test_a_named_token_and_replica_id_are_kept_and_port_zero_stays_zero() -> None:
    cfg = _cfg(lease={"replica_id": "east-a"}, metrics={"listen": "127.0.0.1:0"})
    cfg = cfg.model_copy(update={"dispatcher": cfg.dispatcher.model_copy(update={"cluster_token": "s3cret"})})
    p1 = process_config(cfg, 1, 2, "ctl-1", "/elsewhere/token")
    assert p1.lease.replica_id == "p1@east-a"
    assert p1.dispatcher.cluster_token_file is None and p1.dispatcher.cluster_token == "s3cret"
    assert p1.metrics.listen == "127.0.0.1:0"


def test_base_replica_id_names_the_host_for_loopback_and_wildcard() -> None:
    assert base_replica_id(_cfg(), "ctl-1") == "ctl-1:50051"
    wild = _cfg()
    wild = wild.model_copy(update={"dispatcher": wild.dispatcher.model_copy(update={"listen": "0.0.0.0:7000"})})
    assert base_replica_id(wild, "ctl-2") == "ctl-2:7000"
    ip = wild.model_copy(update={"dispatcher": wild.dispatcher.model_copy(update={"listen": "10.0.0.5:7000"})})
    assert base_replica_id(ip, "ctl-2") == "10.0.0.5:7000"


def test_suffixes_counts_and_slots() -> None:
    assert suffixed("state.db", 0) == "state.db"
    assert suffixed("/a/b/state.db", 4) == "/a/b/state.p4.db"
    assert suffixed("/a/b/state", 1) == "/a/b/state.p1"
    assert suffixed(":memory:", 3) == ":memory:"
    assert _cfg().dispatcher.process_count() == 1
    auto = _cfg()
    auto = auto.model_copy(update={"dispatcher": auto.dispatcher.model_copy(update={"processes": "auto"})})
    assert auto.dispatcher.process_count(cpus=8) == 8 and auto.dispatcher.process_count(cpus=0) == 1
    assert parse_slot("1/2") == (1, 2)
    for bad in ("2/2", "-1/2", "x/2", "1"):
        with pytest.raises(ValueError):
            parse_slot(bad)


def test_the_config_refuses_a_process_count_out_of_range() -> None:
    for bad in (0, 65, "all"):
        with pytest.raises(Exception):
            _cfg(dispatcher={"listen": "127.0.0.1:1", "processes": bad})


def test_status_shows_one_host_with_its_processes() -> None:
    assert hosts_of(["p1@ctl-1:50051", "p0@ctl-1:50051", "ctl-2:50051", "p10@ctl-3:1", "p2@ctl-3:1"]) == {
        "ctl-1:50051": ["p0", "p1"], "ctl-3:1": ["p2", "p10"]}
    lines = replica_lines({"replica": {"id": "p0@ctl-1:50051", "lease_holder": True, "live": ["p0@ctl-1:50051",
                           "p1@ctl-1:50051"], "owners": {"i-1": "p0@ctl-1:50051", "i-2": "p1@ctl-1:50051"},
                           "releasing": {}, "forwarding_to": None, "owners_version": 3}})
    assert lines[1] == "host     ctl-1:50051: 2 dispatcher processes (p0, p1)"


def test_two_dispatchers_share_one_port_each_with_a_port_of_its_own() -> None:
    async def go() -> tuple[int, int, int | None, int | None, bool]:
        port = free_port()
        cfg = make_config(listen=f"127.0.0.1:{port}", processes=2)
        model = LatencyModel.from_profiles(load_profiles_csv())
        a, b = Dispatcher(cfg, model), Dispatcher(cfg, model)
        pa, pb = await a.start(), await b.start()
        alone = Dispatcher(make_config(listen=f"127.0.0.1:{port}"), model)   # processes: 1 does not share
        try:
            await alone.start()
            refused = False
        except Exception:
            refused = True
        try:
            return pa, pb, a.private_port, b.private_port, refused
        finally:
            await a.stop(grace=0)
            await b.stop(grace=0)

    pa, pb, own_a, own_b, refused = asyncio.run(go())
    assert pa == pb
    assert own_a and own_b and len({pa, own_a, own_b}) == 3
    assert refused


#: a stand-in process: READY=1 to its NOTIFY_SOCKET, its pid in DIR/pI, a line in DIR/hupI per SIGHUP,
#: exit 0 on SIGTERM; ``FAIL`` in its environment: exit 2 at once (process 1 only)
STANDIN = textwrap.dedent("""
    import os, signal, sys, time
    from daemon.observe.sdnotify import notify
    d = sys.argv[1]
    i = os.environ["COSTSCALE_PROCESS"].split("/")[0]
    if os.environ.get("FAIL") and i == "1":
        sys.exit(2)
    signal.signal(signal.SIGHUP, lambda *_: open(os.path.join(d, "hup" + i), "a").write("hup\\n"))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    open(os.path.join(d, "p" + i + ".tmp"), "w").write(str(os.getpid()))
    os.replace(os.path.join(d, "p" + i + ".tmp"), os.path.join(d, "p" + i))
    notify("READY=1")
    while True:
        time.sleep(0.05)
""")

RUN_SUPERVISOR = ("import sys; from daemon.processes.supervisor import Supervisor; "
                  "sys.exit(Supervisor('unused', 2, command=sys.argv[1:]).run())")


def _supervisor(tmp: Path, notify_name: str, **env: str) -> subprocess.Popen[bytes]:
    (tmp / "standin.py").write_text(STANDIN)
    e = {**os.environ, "PYTHONPATH": str(ROOT), "NOTIFY_SOCKET": "@" + notify_name, **env}
    return subprocess.Popen([sys.executable, "-c", RUN_SUPERVISOR, sys.executable, str(tmp / "standin.py"), str(tmp)],
                            cwd=ROOT, env=e)


def _wait(cond: Callable[[], bool], proc: subprocess.Popen[bytes], what: str, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert proc.poll() is None, f"supervisor exited while waiting for {what}"
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_the_supervisor_is_ready_when_every_process_is_restarts_one_that_dies_and_stops_them_all(tmp_path: Path) -> None:
    name = f"costscale-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as systemd:
        systemd.bind(b"\0" + name.encode())
        systemd.settimeout(60)
        sup = _supervisor(tmp_path, name)
        try:
            ready = systemd.recv(4096).decode()           # READY=1 only once both stand-ins said it
            assert ready.startswith("READY=1") and "2 dispatcher processes serving" in ready
            pids = [int((tmp_path / f"p{i}").read_text()) for i in range(2)]
            os.kill(pids[1], signal.SIGKILL)               # process 1 dies: started again, 0 untouched
            _wait(lambda: (tmp_path / "p1").exists() and int((tmp_path / "p1").read_text()) != pids[1], sup, "restart")
            new1 = int((tmp_path / "p1").read_text())
            assert int((tmp_path / "p0").read_text()) == pids[0]
            sup.send_signal(signal.SIGHUP)                 # a reload reaches every process
            _wait(lambda: all((tmp_path / f"hup{i}").exists() for i in range(2)), sup, "reload")
            sup.send_signal(signal.SIGTERM)
            assert sup.wait(timeout=60) == 0
            for pid in (pids[0], new1):
                with pytest.raises(ProcessLookupError):
                    os.kill(pid, 0)
        finally:
            if sup.poll() is None:
                sup.kill()


def test_a_process_failing_at_start_ends_the_start_with_its_status(tmp_path: Path) -> None:
    name = f"costscale-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as systemd:
        systemd.bind(b"\0" + name.encode())
        sup = _supervisor(tmp_path, name, FAIL="1")
        assert sup.wait(timeout=60) == 2                   # process 1's config error: exit 2, no restart
        systemd.setblocking(False)
        said = []
        while True:
            try:
                said.append(systemd.recv(4096).decode())
            except BlockingIOError:
                break
        assert said == ["STOPPING=1"]                      # never READY=1
        if (tmp_path / "p0").exists():                     # process 0 was stopped, not left behind
            with pytest.raises(ProcessLookupError):
                os.kill(int((tmp_path / "p0").read_text()), 0)


def _two_process_yaml(tmp: Path) -> str:
    """A config file's text: rm2 on the embedded cloud, ``dispatcher.processes: 2``, its store in ``tmp``."""
    return textwrap.dedent(f"""\
        cluster: test
        budget_per_hour: 2.5
        models: [{{name: rm2, qos_ms: 350, max_batch: 1000, profile: rm2}}]
        instance_types: [{{type: r5n.large}}]
        launch: {{ami_id: ami-0123456789abcdef0}}
        dispatcher: {{listen: "127.0.0.1:50051", processes: 2}}
        state_path: {tmp / 'state.db'}
        aws: {{endpoint_url: "http://127.0.0.1:5000"}}
        """)


def test_a_process_reloads_its_own_part_of_the_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGHUP in process 1: the file read again is split as at start (its state path, replica id),
    so the reload is taken (a different state path would refuse it), the budget change applies."""
    from config.schema import load_config
    from daemon.processes.this_process import for_this_process
    from daemon.reload import reloaded_config

    path = tmp_path / "c.yaml"
    text = _two_process_yaml(tmp_path)
    path.write_text(text)
    monkeypatch.setenv("COSTSCALE_PROCESS", "1/2")
    running = for_this_process(load_config(path))
    assert running.state_path == str(tmp_path / "state.p1.db") and running.lease.replica_id.startswith("p1@")
    path.write_text(text.replace("budget_per_hour: 2.5", "budget_per_hour: 2.0"))
    new, unapplied = reloaded_config(running, path, None, None)
    assert new.budget_per_hour == 2.0 and unapplied == [] and new.state_path == running.state_path
    monkeypatch.setenv("COSTSCALE_PROCESS", "2/2")
    with pytest.raises(Exception, match="COSTSCALE_PROCESS=2/2"):
        for_this_process(load_config(path))


def test_local_workers_with_several_processes_is_refused_in_one_line(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from daemon.cli import main

    path = tmp_path / "c.yaml"
    path.write_text(_two_process_yaml(tmp_path))
    assert main(["run", str(path), "--local-workers"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--local-workers with dispatcher.processes > 1" in err[0]


def test_each_process_tags_its_lines() -> None:
    import logging

    from daemon.processes.this_process import _Tag

    rec = logging.LogRecord("costscale", logging.INFO, __file__, 1, "fleet (interval): %s", ("no change",), None)
    tag = _Tag("p1")
    assert tag.filter(rec) and tag.filter(rec)            # a second handler does not tag it twice
    assert rec.getMessage() == "p1: fleet (interval): no change"


def test_a_dying_process_waits_1_s_then_twice_as_long_up_to_30_s_and_1_s_again_after_a_minute_up() -> None:
    from daemon.processes.supervisor import restart_delay

    assert restart_delay(1.0, 5.0, died_before=False) == 1.0
    assert [restart_delay(d, 5.0, died_before=True) for d in (1.0, 2.0, 16.0, 30.0)] == [2.0, 4.0, 30.0, 30.0]
    assert restart_delay(30.0, 60.0, died_before=True) == 1.0
