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

import boto3
import pytest

from config.schema import parse_config_text
from scaler.lease import Claimant, Lease, LeaseLost
from scaler.lease_table import DynamoLeaseTable, make_dynamodb_client
from scaler.state import StateStore

CONFIG = """\
cluster: stopping
budget_per_hour: 1.0
models:
  - name: rm2
    qos_ms: 350
instance_types:
  - type: r5n.large
launch:
  ami_id: {ami}
dispatcher:
  listen: 127.0.0.1:0
intervals:
  fleet_s: 3600
  reconcile_s: 3600
state_path: {state}
pinned_pool:
  r5n.large: 1
on_shutdown: {on_shutdown}
model_scaling:
  generate_variants: false
aws:
  endpoint_url: {endpoint}
"""
THIEF = Claimant(cluster="stopping", owner="ctl-b:22:bbbb", host="ctl-b", pid=22)


def _config(tmp_path: Path, endpoint: str, on_shutdown: str):  # type: ignore[no-untyped-def]
    ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=endpoint)
    ami = ec2.describe_images()["Images"][0]["ImageId"]
    return parse_config_text(CONFIG.format(ami=ami, state=tmp_path / "state.db", on_shutdown=on_shutdown,
                                           endpoint=endpoint))


def _live(endpoint: str) -> list[str]:
    ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=endpoint)
    res = ec2.describe_instances(Filters=[{"Name": "tag:costscale:cluster", "Values": ["stopping"]},
                                          {"Name": "instance-state-name", "Values": ["pending", "running"]}])
    return sorted(i["InstanceId"] for r in res["Reservations"] for i in r["Instances"])


async def _until(cond: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """Wait until ``cond()`` holds (checked on the event loop between its other tasks)."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


def _tracebacks(records: list[logging.LogRecord]) -> list[str]:
    return [f"{r.name}: {r.getMessage()}" for r in records if r.exc_info or r.levelno >= logging.ERROR]


def test_a_reconcile_cut_short_by_the_stop_returns_quietly(moto_endpoint: str, tmp_path: Path,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    from daemon.app import Daemon

    cfg = _config(tmp_path, moto_endpoint, "keep")
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

    with caplog.at_level(logging.INFO):
        locked = asyncio.run(scenario())
    assert not locked
    assert _tracebacks(caplog.records) == []
    assert any(r.getMessage().startswith('Job "Daemon.reconcile_tick') and "executed successfully" in r.getMessage()
               for r in caplog.records)


def test_terminate_at_shutdown_after_the_lease_was_lost_leaves_the_instances_in_one_line(
        moto_endpoint: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from daemon.app import Daemon

    cfg = _config(tmp_path, moto_endpoint, "terminate")
    table = DynamoLeaseTable("costscale-leases", make_dynamodb_client("us-east-1", moto_endpoint))

    async def scenario() -> tuple[list[str], str]:
        d = Daemon(cfg, None, listen="127.0.0.1:0")
        await d.start()
        try:
            await d.fleet_tick("test")
            assert d.aws is not None and d.aws.lease is not None
            held = table.get("stopping")
            assert held is not None and held.generation == 1
            # another daemon takes the cluster over (as after a partition that outlasted the lease)
            now = time.time()
            assert table.write(Lease(cluster="stopping", owner=THIEF.owner, host=THIEF.host, pid=THIEF.pid,
                                     since=now, expires_at=now + 600, generation=2), held)
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
        f"on_shutdown: terminate skipped: 1 instance left running ({before[0]}): the lease of cluster stopping was "
        "lost to host ctl-b pid 22 (generation 2), whose daemon owns them now"]
    with StateStore.open(cfg.state_path) as store:      # nothing for a later reconcile to finish
        assert [i.kind for i in store.intents()] == ["launch"] and store.open_intents() == []
