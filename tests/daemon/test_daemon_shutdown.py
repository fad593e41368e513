"""Stopping the daemon says what happened in a line, never a traceback: a reconcile cut short by
the stop returns quietly (as a fleet tick does), and ``on_shutdown: terminate`` after the cluster
lease was lost leaves the instances to the lease's new holder in one line, writing no terminate
intent. The daemon runs in process against moto in server mode on 127.0.0.1 (its lease in
moto's DynamoDB, its instances in moto's EC2)."""
from __future__ import annotations

import asyncio
import logging
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Callable

import pytest

from scaler.replicas.lease_decision import Claimant, LeaseLost
from scaler.fleet.state import StateStore
from tests.replicas.test_cluster_lease import _daemon_config, _live, _table, lease_of

THIEF = Claimant(cluster="owned", owner="ctl-b:22:bbbb", host="ctl-b", pid=22)


async def _until(cond: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """Wait until ``cond()`` holds (checked on the event loop between its other tasks)."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


def _tracebacks(records: list[logging.LogRecord]) -> list[str]:
    return [f"{r.name}: {r.getMessage()}" for r in records
            if (r.exc_info or r.levelno >= logging.ERROR) and not _grpc_on_a_closed_loop(r)]


def _grpc_on_a_closed_loop(r: logging.LogRecord) -> bool:
    """grpc.aio's process-wide completion queue waking a call left from an earlier test's event loop, now
    closed (an earlier ``asyncio.run`` in this xdist worker): logged by asyncio in this test's loop, not
    by the daemon (grpc/grpc#25364 and #34139 describe the poller's callbacks across loops)."""
    exc = r.exc_info[1] if r.exc_info else None
    return (r.name == "asyncio" and "PollerCompletionQueue._handle_events" in r.getMessage()
            and isinstance(exc, RuntimeError) and str(exc) == "Event loop is closed")


def test_a_reconcile_cut_short_by_the_stop_returns_quietly(moto_endpoint: str, tmp_path: Path,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    from daemon.app import Daemon

    cfg = _daemon_config(tmp_path, moto_endpoint, "host-a")      # on_shutdown: keep
    entered, release = threading.Event(), threading.Event()

    def slow_reconcile():  # type: ignore[no-untyped-def]
        entered.set()               # a DescribeInstances that takes its time
        release.wait(30)

    async def scenario() -> bool:
        d = Daemon(cfg, None, listen="127.0.0.1:0")
        await d.start()
        try:
            assert d.actuator is not None and d._scheduler is not None
            d.actuator.reconcile = slow_reconcile           # type: ignore[method-assign]
            d._scheduler.get_job("reconcile").modify(next_run_time=datetime.now())
            await _until(entered.is_set, "the reconcile job to start")
            await d.stop(grace=0.0)     # cancels the job's task mid-call; stop() then takes the fleet lock
            return d._fleet_lock.locked()
        finally:
            release.set()

    # APScheduler at INFO here (the daemon keeps it at WARNING): its "executed successfully" shows the job returned
    with caplog.at_level(logging.INFO), caplog.at_level(logging.INFO, logger="apscheduler"):
        locked = asyncio.run(scenario())
    assert not locked
    assert _tracebacks(caplog.records) == []
    assert any(r.getMessage().startswith('Job "Daemon.reconcile_tick') and "executed successfully" in r.getMessage()
               for r in caplog.records)


def test_terminate_at_shutdown_after_the_lease_was_lost_leaves_the_instances_in_one_line(
        moto_endpoint: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from daemon.app import Daemon

    cfg = _daemon_config(tmp_path, moto_endpoint, "host-a").model_copy(update={"on_shutdown": "terminate"})
    table = _table(moto_endpoint)

    async def scenario() -> tuple[list[str], str]:
        d = Daemon(cfg, None, listen="127.0.0.1:0")
        await d.start()
        try:
            await d.fleet_tick("test")
            assert d.aws is not None and d.aws.lease is not None
            held = table.get("owned")
            assert held is not None and held.generation == 1
            # another daemon takes the cluster over (as after a partition that outlasted the lease)
            assert table.write(lease_of(THIEF, time.time(), time.time() + 600, 2), held)
            with pytest.raises(LeaseLost):              # the holder's next renewal finds it
                await asyncio.to_thread(d.aws.lease.renew)
            await _until(d._stop.is_set, "the lost lease to stop the daemon")
            before = _live(moto_endpoint)
        except BaseException:
            await d.stop(grace=0.0)
            raise
        with pytest.raises(LeaseLost) as lost:
            await d.stop(grace=0.0)
        return before, str(lost.value)

    with caplog.at_level(logging.INFO):
        before, lost_line = asyncio.run(scenario())
    assert len(before) == 1 and _live(moto_endpoint) == before          # left running
    assert _tracebacks(caplog.records) == [f"costscale: {lost_line}"]     # the loss itself, once
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "on_shutdown" in r.getMessage()] == [
        f"on_shutdown: terminate skipped: 1 instance left running ({before[0]}): the lease of cluster owned was "
        "lost to host ctl-b pid 22 (generation 2), whose daemon owns them now"]
    with StateStore.open(cfg.state_path) as store:      # nothing for a later reconcile to finish
        assert [i.kind for i in store.intents()] == ["launch"] and store.open_intents() == []
