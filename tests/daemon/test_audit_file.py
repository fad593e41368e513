"""The audit log's own file (issue #40: the audit log size-bounded and logrotate-friendly): created
0600, reopened at its path on SIGHUP after logrotate moved it, and with ``max_bytes`` rotated to
exactly ``backups`` copies."""
from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from config.errors import UsageError
from config.sections.retention import AuditLogSpec
from daemon.observe import audit
from daemon.observe.audit_file import AuditFile, on_hangup
from tests.config.test_config_checks import BASE

REPO = Path(__file__).resolve().parents[2]


def _events(path: Path) -> list[int]:
    return [json.loads(ln)["n"] for ln in path.read_text().splitlines()]


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def audit_file():
    f = AuditFile()
    yield f
    f.close()


def test_a_sighup_after_logrotate_moved_the_file_starts_a_new_one_at_the_path(tmp_path: Path, audit_file: AuditFile) -> None:
    path = tmp_path / "log" / "audit.log"
    spec = AuditLogSpec(path=str(path))
    audit_file.start(spec)
    for n in range(3):
        audit.emit("plan", f"plan {n}", n=n)
    os.rename(path, tmp_path / "log" / "audit.log.1")      # logrotate's move (create mode)
    audit.emit("plan", "still the moved file until the signal", n=3)

    async def hangup() -> list[str]:
        loop, done, reloads = asyncio.get_running_loop(), asyncio.Event(), []

        def reload() -> bool:
            reloads.append("reload")
            return False              # a refused reload reopens the file all the same
        hup = on_hangup(reload, audit_file, lambda: spec)
        loop.add_signal_handler(signal.SIGHUP, lambda: (hup(), done.set()))
        try:
            os.kill(os.getpid(), signal.SIGHUP)
            await asyncio.wait_for(done.wait(), 30)     # a hang guard: the handler runs on the loop
        finally:
            loop.remove_signal_handler(signal.SIGHUP)
        return reloads

    assert asyncio.run(hangup()) == ["reload"]
    for n in range(4, 6):
        audit.emit("launch", f"launch {n}", n=n)
    assert _events(tmp_path / "log" / "audit.log.1") == [0, 1, 2, 3]
    assert _events(path) == [4, 5]
    assert _mode(path) == 0o600 and _mode(tmp_path / "log" / "audit.log.1") == 0o600
    assert _mode(tmp_path / "log") == 0o700
    first = json.loads(path.read_text().splitlines()[0])
    assert (first["event"], first["summary"], first["logger"]) == ("launch", "launch 4", "costscale.audit")


def test_max_bytes_keeps_exactly_backups_copies_each_under_the_cap(tmp_path: Path, audit_file: AuditFile) -> None:
    path = tmp_path / "audit.log"
    audit_file.start(AuditLogSpec(path=str(path), max_bytes=2000, backups=3))
    for n in range(300):
        audit.emit("load", "variant loaded on a worker", n=n)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["audit.log", "audit.log.1", "audit.log.2", "audit.log.3"]
    files = [tmp_path / "audit.log.3", tmp_path / "audit.log.2", tmp_path / "audit.log.1", path]
    assert all(f.stat().st_size < 2000 and _mode(f) == 0o600 for f in files)
    kept = [n for f in files for n in _events(f)]
    assert kept == list(range(kept[0], 300))        # the newest events, none lost between the copies
    assert kept[0] > 0                               # the oldest copies went


def test_events_reach_the_file_whatever_the_log_level(tmp_path: Path, audit_file: AuditFile) -> None:
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)           # costscale run --log-level ERROR
    try:
        audit_file.start(AuditLogSpec(path=str(tmp_path / "audit.log")))
        audit.emit("plan", "a plan", n=7)
    finally:
        root.setLevel(level)
    assert _events(tmp_path / "audit.log") == [7]


def test_a_reload_moves_the_file_or_closes_it_and_a_bad_path_keeps_the_open_one(tmp_path: Path,
                                                                                audit_file: AuditFile) -> None:
    a, b = AuditLogSpec(path=str(tmp_path / "a.log")), AuditLogSpec(path=str(tmp_path / "b.log"))
    audit_file.start(a)
    audit.emit("plan", "one", n=1)
    audit_file.apply(b)
    audit.emit("plan", "two", n=2)
    blocker = tmp_path / "file"
    blocker.write_text("")
    audit_file.apply(AuditLogSpec(path=str(blocker / "c.log")))   # a folder that is a file: one line, b stays
    audit.emit("plan", "three", n=3)
    audit_file.apply(None)
    audit.emit("plan", "four", n=4)
    assert _events(tmp_path / "a.log") == [1] and _events(tmp_path / "b.log") == [2, 3]
    assert audit.AUDIT.handlers == [] and audit.AUDIT.level == logging.NOTSET


def test_a_file_that_cannot_be_opened_at_start_is_one_line(tmp_path: Path, audit_file: AuditFile) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(UsageError) as e:
        audit_file.start(AuditLogSpec(path=str(blocker / "audit.log")))
    assert str(e.value).startswith(f"audit_log.path: cannot open {blocker / 'audit.log'}: ")
    assert "\n" not in str(e.value)


def test_costscale_run_with_an_audit_path_it_cannot_open_is_one_line_and_exit_2(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(BASE.replace("dispatcher:\n", f"state_path: {tmp_path / 'state.db'}\naudit_log:\n"
                                                 f"  path: {tmp_path / 'file' / 'audit.log'}\ndispatcher:\n"))
    r = subprocess.run([sys.executable, "-m", "daemon.cli", "run", str(cfg)], capture_output=True, text=True,
                       timeout=120, cwd=REPO)
    assert r.returncode == 2
    assert r.stderr.splitlines() == [f"costscale: audit_log.path: cannot open {tmp_path / 'file' / 'audit.log'}: "
                                     f"File exists ({tmp_path / 'file'})"]
