"""daemon.observe.sdnotify: datagrams reach a NOTIFY_SOCKET (path and abstract); watchdog interval."""
from __future__ import annotations

import os
import socket
import uuid

from daemon.observe.sdnotify import notify, watchdog_interval


def test_notify_path_socket(tmp_path) -> None:
    path = str(tmp_path / "notify.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as srv:
        srv.bind(path)
        assert notify("READY=1\nSTATUS=up", env={"NOTIFY_SOCKET": path}) is True
        assert srv.recv(4096) == b"READY=1\nSTATUS=up"


def test_notify_abstract_socket() -> None:
    name = f"costscale-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as srv:
        srv.bind(b"\0" + name.encode())
        assert notify("WATCHDOG=1", env={"NOTIFY_SOCKET": "@" + name}) is True
        assert srv.recv(4096) == b"WATCHDOG=1"


def test_notify_without_socket_is_noop(tmp_path) -> None:
    assert notify("READY=1", env={}) is False
    assert notify("READY=1", env={"NOTIFY_SOCKET": str(tmp_path / "missing.sock")}) is False
    assert notify("READY=1", env={"NOTIFY_SOCKET": "relative/path"}) is False


def test_watchdog_interval() -> None:
    assert watchdog_interval(env={}) is None
    assert watchdog_interval(env={"WATCHDOG_USEC": "0"}) is None
    assert watchdog_interval(env={"WATCHDOG_USEC": "30000000"}) == 15.0
    assert watchdog_interval(env={"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": str(os.getpid())}) == 15.0
    assert watchdog_interval(env={"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "1"}, pid=2) is None
    assert watchdog_interval(env={"WATCHDOG_USEC": "abc"}) is None
