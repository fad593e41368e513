"""SIGHUP reloads the config (``daemon.app.Daemon.reload``): what the daemon reads only at start --
the whole dispatcher section (listen, TLS, tokens, policy, queue limit, batching...), the metrics
endpoint (``config.sections.security.RESTART_ONLY``) -- keeps its running values, with one log line naming
the fields and "restart to apply"; the rest of the reload (the budget, the tick intervals) is
applied. No daemon is started: reload reads the file and swaps (a scheduler stands in for the
ticks)."""
from __future__ import annotations

import logging
from pathlib import Path

import pytest

from apscheduler.schedulers.background import BackgroundScheduler

from config.checks import load_checked_config
from daemon.app import Daemon
from tests.config.test_config_checks import BASE
from tests.tls_helpers import TestCa


def _text(state: Path) -> str:
    """costscale validate's base config (tests.config.test_config_checks) with a state path and metrics."""
    return BASE.replace("dispatcher:\n", f"state_path: {state}\nmetrics:\n  listen: 127.0.0.1:9464\ndispatcher:\n")


def _daemon(tmp_path: Path) -> tuple[Daemon, Path]:
    path = tmp_path / "c.yaml"
    path.write_text(_text(tmp_path / "state.db"))
    return Daemon(load_checked_config(path), path), path


def _restart_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "restart to apply" in r.getMessage()]


def test_a_reload_keeps_the_security_settings_and_applies_the_rest(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    d, path = _daemon(tmp_path)
    before = d.cfg
    pem = TestCa(tmp_path / "ca").issue("dispatcher")
    (tmp_path / "token").write_text("client-token-1\n")
    path.write_text(_text(tmp_path / "state.db")
                    .replace("budget_per_hour: 2.5", "budget_per_hour: 3.0")
                    .replace("  listen: 127.0.0.1:9464", "  listen: 127.0.0.1:9470\n  public: true")
                    .replace("  listen: 127.0.0.1:50051", "  listen: 127.0.0.1:50061")
                    + f"  auth_token_file: {tmp_path / 'token'}\n  cluster_token: cluster-secret-2\n"
                    + f"  tls: {{cert_file: {pem.cert}, key_file: {pem.key}}}\n")
    with caplog.at_level(logging.INFO):
        assert d.reload() is True
    assert d.cfg.budget_per_hour == 3.0                          # the rest of the reload is applied
    assert d.cfg.dispatcher == before.dispatcher and d.cfg.metrics == before.metrics
    lines = _restart_lines(caplog)
    assert len(lines) == 1, lines
    for field in ("dispatcher.listen", "dispatcher.tls", "dispatcher.auth_token_file", "dispatcher.cluster_token",
                  "metrics.listen", "metrics.public"):
        assert field in lines[0], lines[0]
    assert "cluster-secret-2" not in caplog.text and "client-token-1" not in caplog.text


def test_a_reload_without_security_changes_says_nothing_of_a_restart(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    d, path = _daemon(tmp_path)
    path.write_text(_text(tmp_path / "state.db").replace("budget_per_hour: 2.5", "budget_per_hour: 2.0"))
    with caplog.at_level(logging.INFO):
        assert d.reload() is True
    assert d.cfg.budget_per_hour == 2.0 and _restart_lines(caplog) == []


def test_dispatcher_settings_are_restart_only_and_intervals_apply_now(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The dispatcher's policy, queue limit, deadline rule and batching are built into it at start:
    a reload says so instead of logging them as applied; new tick intervals move the jobs now."""
    d, path = _daemon(tmp_path)
    sched = BackgroundScheduler()
    for job, s in (("fleet", 30.0), ("model", 5.0), ("reconcile", 60.0)):
        sched.add_job(lambda: None, "interval", seconds=s, id=job)
    d._scheduler = sched  # type: ignore[assignment]
    before = d.cfg.dispatcher
    path.write_text(_text(tmp_path / "state.db")
                    .replace("dispatcher:\n", "intervals:\n  fleet_s: 12\n  model_s: 2\ndispatcher:\n")
                    + "  policy: fcfs\n  queue_limit: 50\n  on_deadline: best_effort\n  batching: work_conserving\n")
    with caplog.at_level(logging.INFO):
        assert d.reload() is True
    assert d.cfg.dispatcher == before
    lines = _restart_lines(caplog)
    assert len(lines) == 1
    for field in ("dispatcher.policy", "dispatcher.queue_limit", "dispatcher.on_deadline", "dispatcher.batching"):
        assert field in lines[0], lines[0]
    assert "dispatcher.listen" not in lines[0]
    assert (d.cfg.intervals.fleet_s, d.cfg.intervals.model_s) == (12, 2)
    secs = {j.id: j.trigger.interval.total_seconds() for j in sched.get_jobs()}
    assert secs == {"fleet": 12.0, "model": 2.0, "reconcile": 60.0}


def test_a_restart_only_change_cannot_reject_the_reload(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A new listen beyond loopback without authentication would fail validate; it is not applied
    (restart-only), so the rest of the reload still is."""
    d, path = _daemon(tmp_path)
    path.write_text(_text(tmp_path / "state.db").replace("budget_per_hour: 2.5", "budget_per_hour: 2.0")
                    .replace("  listen: 127.0.0.1:50051", "  listen: 0.0.0.0:50051")
                    + f"  auth_token_file: {tmp_path / 'missing-token'}\n")
    with caplog.at_level(logging.INFO):
        assert d.reload() is True
    assert d.cfg.budget_per_hour == 2.0 and d.cfg.dispatcher.listen == "127.0.0.1:50051"
    assert "dispatcher.listen" in _restart_lines(caplog)[0]


def test_a_reload_failing_a_check_keeps_the_running_config(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    d, path = _daemon(tmp_path)
    path.write_text(_text(tmp_path / "state.db").replace("budget_per_hour: 2.5", "budget_per_hour: 0.001"))
    with caplog.at_level(logging.INFO):
        assert d.reload() is False
    assert d.cfg.budget_per_hour == 2.5 and "buys no allowed instance type" in caplog.text


def test_a_reload_keeps_the_lease_section_until_a_restart(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    d, path = _daemon(tmp_path)
    before = d.cfg
    path.write_text(_text(tmp_path / "state.db").replace("budget_per_hour: 2.5", "budget_per_hour: 3.0")
                    + "lease:\n  ttl_s: 9\n  replicas: true\n  unready_s: 1\n")
    with caplog.at_level(logging.INFO):
        assert d.reload() is True
    assert d.cfg.budget_per_hour == 3.0 and d.cfg.lease == before.lease
    assert _restart_lines(caplog) == ["reload: lease.ttl_s, lease.replicas, lease.unready_s changed: restart to apply "
                                      "(the running values are kept)"]


def test_a_reload_applies_the_retention_now_and_its_prune_interval_at_a_restart(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    d, path = _daemon(tmp_path)
    path.write_text(_text(tmp_path / "state.db") + "state_retention:\n  days: 3\n  every_s: 60\n  max_rows: 50\n")
    with caplog.at_level(logging.INFO):
        assert d.reload() is True
    assert (d.cfg.state_retention.days, d.cfg.state_retention.every_s, d.cfg.state_retention.max_rows) == (3, 3600, 50)
    assert _restart_lines(caplog) == ["reload: state_retention.every_s changed: restart to apply "
                                      "(the running values are kept)"]
