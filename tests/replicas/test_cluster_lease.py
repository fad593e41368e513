"""One owner per cluster across hosts: the lease decision (pure), the DynamoDB lease table against
moto in server mode on 127.0.0.1, the fence on the actuator, and the daemon (in process and as
``costscale run``): a second daemon is refused naming the holder, a crashed holder's lease is
taken over once it expires, a lost lease fences the actuator and the daemon exits 1 in one line."""
from __future__ import annotations

import asyncio
import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from config.schema import Config, parse_config_text
from scaler.fleet.actuator import FleetActuator
from scaler.replicas.lease_holder import ClusterLease, Fenced, FencedCloud, LocalDeadline
from scaler.cloud.fake import FakeCloud
from scaler.replicas.lease_decision import Claimant, Lease, LeaseDecision, LeaseHeld, LeaseLost, decide, held_line, released
from scaler.replicas.lease_table import DynamoLeaseTable, make_dynamodb_client
from scaler.fleet.state import StateStore
from config.catalog import load_catalog
from tests.lease_helpers import daemon_config, daemon_config_text, live_ids

T0 = 1_700_000_000.0          # 2023-11-14T22:13:20Z
A = Claimant(cluster="c1", owner="ctl-a:11:aaaa", host="ctl-a", pid=11)
B = Claimant(cluster="c1", owner="ctl-b:22:bbbb", host="ctl-b", pid=22)


def lease_of(me: Claimant, since: float, expires_at: float, generation: int) -> Lease:
    return Lease(cluster=me.cluster, owner=me.owner, host=me.host, pid=me.pid, since=since, expires_at=expires_at,
                 generation=generation)


# -- the decision ------------------------------------------------------------------------------

def test_a_free_cluster_is_taken_at_generation_1_on_condition_that_no_item_exists() -> None:
    assert decide(None, A, None, T0, 60) == LeaseDecision("take", lease_of(A, T0, T0 + 60, 1), None)


def test_a_local_deadline_runs_from_the_start_of_the_write_less_the_clock_safety() -> None:
    deadline = LocalDeadline(10.0)
    assert deadline.passed(0.0)                              # nothing landed yet
    deadline.landed(100.0)                                   # a write begun at 100 s landed
    assert not deadline.passed(107.999) and deadline.passed(108.0)     # 10 s x (1 - 0.2)


def test_a_live_holder_is_refused_and_an_expired_one_taken_over_with_the_next_generation() -> None:
    a = lease_of(A, T0, T0 + 60, 4)
    assert decide(a, B, None, T0 + 59, 60) == LeaseDecision("refuse", None, a)
    assert decide(a, B, None, T0 + 60, 60) == LeaseDecision("take", lease_of(B, T0 + 60, T0 + 120, 5), a)


def test_a_dead_holder_on_this_host_is_taken_over_at_once() -> None:
    a = lease_of(A, T0, T0 + 60, 4)
    same_host = Claimant(cluster="c1", owner="ctl-a:12:cccc", host="ctl-a", pid=12)
    assert decide(a, same_host, None, T0 + 1, 60, holder_gone=True).action == "take"


def test_the_holder_renews_its_own_and_finds_it_lost_when_owner_or_generation_moved() -> None:
    a = lease_of(A, T0, T0 + 60, 4)
    assert decide(a, A, a, T0 + 20, 60) == LeaseDecision("renew", lease_of(A, T0, T0 + 80, 4), a)
    b = lease_of(B, T0 + 61, T0 + 121, 5)
    assert decide(b, A, a, T0 + 70, 60) == LeaseDecision("lost", None, b)
    assert decide(None, A, a, T0 + 70, 60) == LeaseDecision("lost", None, None)


def test_a_release_expires_the_lease_and_keeps_its_generation() -> None:
    assert released(lease_of(A, T0, T0 + 60, 4), T0 + 10) == lease_of(A, T0, T0 + 10, 4)


def test_the_refusal_names_the_holder_since_when_and_until_when() -> None:
    assert held_line(lease_of(A, T0, T0 + 60, 4), "costscale-leases") == (
        "cluster c1 is owned by another costscale daemon (host ctl-a pid 11 since 2023-11-14T22:13:20Z, lease "
        "expires 2023-11-14T22:14:20Z; DynamoDB table costscale-leases); stop that daemon, or if it crashed wait "
        "until its lease expires")


def test_the_decision_module_imports_no_cloud_sdk() -> None:
    code = "import sys, scaler.replicas.lease_decision; print(sorted(m for m in ('boto3', 'botocore') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.strip() == "[]", out.stderr


# -- the table on moto ---------------------------------------------------------------------------

class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _table(endpoint: str, name: str = "costscale-leases") -> DynamoLeaseTable:
    return DynamoLeaseTable(name, make_dynamodb_client("us-east-1", endpoint))


def test_the_table_is_created_on_demand_and_a_racing_write_loses(moto_endpoint: str) -> None:
    table = _table(moto_endpoint)
    assert table.ensure_table() is True
    assert table.ensure_table() is False
    desc = table.client.describe_table(TableName="costscale-leases")["Table"]
    assert desc["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
    assert desc["KeySchema"] == [{"AttributeName": "cluster", "KeyType": "HASH"}]
    a, b = lease_of(A, T0, T0 + 60, 1), lease_of(B, T0, T0 + 60, 1)
    assert table.write(a, None) is True
    assert table.write(b, None) is False            # both read "no item": one write lands
    assert table.get("c1") == a
    assert table.write(lease_of(B, T0 + 61, T0 + 121, 2), lease_of(A, T0, T0 + 30, 1)) is False   # stale read
    assert table.get("c1") == a


def test_a_second_holder_is_refused_then_takes_over_after_expiry_and_the_first_finds_it_lost(moto_endpoint: str) -> None:
    table = _table(moto_endpoint)
    table.ensure_table()
    clock = Clock(T0)
    lost: list[str] = []
    first = ClusterLease(table, A, 60, table_name="costscale-leases", clock=clock, alive=lambda pid: True,
                         on_lost=lambda exc: lost.append(str(exc)))
    second = ClusterLease(table, B, 60, table_name="costscale-leases", clock=clock, alive=lambda pid: True)
    assert first.acquire() == lease_of(A, T0, T0 + 60, 1)
    clock.t = T0 + 30
    with pytest.raises(LeaseHeld) as held:
        second.acquire()
    assert held.value.exit_code == 1
    assert str(held.value) == held_line(lease_of(A, T0, T0 + 60, 1), "costscale-leases")
    clock.t = T0 + 59                                 # the holder crashed: no renewal since
    with pytest.raises(LeaseHeld):
        second.acquire()
    clock.t = T0 + 60
    assert second.acquire() == lease_of(B, T0 + 60, T0 + 120, 2)
    assert second.taken_from == lease_of(A, T0, T0 + 60, 1)
    with pytest.raises(LeaseLost) as gone:            # the first comes back and renews
        first.renew()
    assert str(gone.value) == ("lease of cluster c1 lost to host ctl-b pid 22 since 2023-11-14T22:14:20Z, lease "
                               "expires 2023-11-14T22:15:20Z, generation 2: stopped launching and terminating "
                               "instances")
    assert lost == [str(gone.value)] and not first.valid()
    with pytest.raises(LeaseLost):
        first.renew()
    assert lost == [str(gone.value)]                  # said once


def test_a_released_lease_is_free_at_once_and_its_generation_goes_on(moto_endpoint: str) -> None:
    table = _table(moto_endpoint)
    table.ensure_table()
    clock = Clock(T0)
    first = ClusterLease(table, A, 60, clock=clock)
    first.acquire()
    clock.t = T0 + 5
    first.release()
    assert table.get("c1") == lease_of(A, T0, T0 + 5, 1)
    assert ClusterLease(table, B, 60, clock=clock, alive=lambda pid: True).acquire() == lease_of(B, T0 + 5, T0 + 65, 2)


# -- the fence -----------------------------------------------------------------------------------

def test_a_lost_lease_fences_the_actuator(moto_endpoint: str, tmp_path: Path) -> None:
    table = _table(moto_endpoint)
    table.ensure_table()
    clock = Clock(T0)
    lease = ClusterLease(table, A, 60, clock=clock, alive=lambda pid: True)
    lease.acquire()
    cloud = FakeCloud("c1")
    store = StateStore.open(str(tmp_path / "state.db"))
    try:
        actuator = FleetActuator(FencedCloud(cloud, lease), store, load_catalog(), 1.0)
        rep = actuator.apply({"r5n.large": 2}, "p1")
        assert len(rep.launched["r5n.large"]) == 2
        assert {i.tags["costscale:lease-generation"] for i in cloud.list_managed()} == {"1"}
        clock.t = T0 + 61                               # another daemon takes over the expired lease
        ClusterLease(table, B, 60, clock=clock, alive=lambda pid: True).acquire()
        with pytest.raises(LeaseLost):
            lease.renew()
        with pytest.raises(Fenced) as fenced:           # scale out: refused before EC2
            actuator.apply({"r5n.large": 3}, "p2")
        assert str(fenced.value).startswith("launch of 1 r5n.large refused: lease of cluster c1 lost to host ctl-b")
        with pytest.raises(Fenced):                     # scale in: refused too
            actuator.apply({}, "p3")
        assert len([i for i in cloud.list_managed() if i.live]) == 2
    finally:
        store.close()


# -- the daemon ----------------------------------------------------------------------------------

def _daemon_config(tmp_path: Path, endpoint: str, name: str, ttl: float = 60) -> Config:
    return daemon_config(tmp_path, endpoint, name, "owned", ttl=ttl)


def _live(endpoint: str) -> list[str]:
    return live_ids(endpoint, "owned")


def test_a_second_daemon_is_refused_naming_the_holder_and_starts_once_it_is_gone(moto_endpoint: str,
                                                                                 tmp_path: Path) -> None:
    from daemon.app import Daemon

    first_cfg = _daemon_config(tmp_path, moto_endpoint, "host-a")
    second_cfg = _daemon_config(tmp_path, moto_endpoint, "host-b")

    async def scenario() -> tuple[str, int, int, list[str]]:
        first = Daemon(first_cfg, None, listen="127.0.0.1:0")
        await first.start()
        await first.fleet_tick("test")
        second = Daemon(second_cfg, None, listen="127.0.0.1:0")
        try:
            with pytest.raises(LeaseHeld) as refused:
                await second.start()
        finally:
            await second.stop(grace=0.0)
        assert second.actuator is None                  # refused before reconciling: nothing adopted
        await first.stop(grace=0.0)                     # a clean stop gives the lease back
        third = Daemon(second_cfg, None, listen="127.0.0.1:0")
        await third.start()
        try:
            assert third.aws is not None and third.aws.lease is not None and third.aws.lease.held is not None
            return str(refused.value), refused.value.exit_code, third.aws.lease.held.generation, _live(moto_endpoint)
        finally:
            await third.stop(grace=0.0)

    line, code, generation, live = asyncio.run(scenario())
    assert code == 1
    host, pid = socket.gethostname(), os.getpid()
    prefix = f"cluster owned is owned by another costscale daemon (host {host} pid {pid} since "
    assert line.startswith(prefix) and line.endswith(
        "; DynamoDB table costscale-leases); stop that daemon, or if it crashed wait until its lease expires"), line
    assert ", lease expires " in line
    assert generation == 2 and len(live) == 1          # the next holder adopted the first's instance


def test_a_crashed_holders_expired_lease_is_taken_over(moto_endpoint: str, tmp_path: Path,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    from daemon.app import Daemon

    cfg = _daemon_config(tmp_path, moto_endpoint, "host-b")
    table = _table(moto_endpoint)
    table.ensure_table()
    dead = Claimant(cluster="owned", owner="ctl-gone:4242:dead", host="ctl-gone", pid=4242)
    now = time.time()
    assert table.write(lease_of(dead, now - 600, now - 540, 7), None)

    async def scenario() -> int:
        d = Daemon(cfg, None, listen="127.0.0.1:0")
        await d.start()
        try:
            assert d.aws is not None and d.aws.lease is not None and d.aws.lease.held is not None
            return d.aws.lease.held.generation
        finally:
            await d.stop(grace=0.0)

    with caplog.at_level(logging.INFO, logger="costscale"):
        assert asyncio.run(scenario()) == 8
    assert any(r.getMessage().startswith("cluster owned: lease taken in costscale-leases (generation 8, ttl 60s); "
                                         "its last holder (host ctl-gone pid 4242 since ") for r in caplog.records)
    assert table.get("owned").expires_at <= time.time()     # given back at the clean stop


def test_a_lost_lease_stops_the_daemon_acting_on_the_fleet_and_exits_1(moto_endpoint: str, tmp_path: Path,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    from daemon.app import Daemon

    cfg = _daemon_config(tmp_path, moto_endpoint, "host-a", ttl=3)   # renewed every second
    table = _table(moto_endpoint)

    async def scenario() -> tuple[list[str], str, int]:
        d = Daemon(cfg, None, listen="127.0.0.1:0")
        await d.start()
        stopped = False
        try:
            await d.fleet_tick("test")
            before = _live(moto_endpoint)
            # another daemon takes the cluster over (as after a partition that outlasted the lease);
            # its conditional write is retried while the holder's renewals land in between
            thief = Claimant(cluster="owned", owner="ctl-b:22:bbbb", host="ctl-b", pid=22)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                held = table.get("owned")
                assert held is not None and held.generation == 1
                if table.write(lease_of(thief, time.time(), time.time() + 600, 2), held):
                    break
            deadline = time.monotonic() + 60
            while not d._stop.is_set() and time.monotonic() < deadline:   # the renewal job finds it
                await asyncio.sleep(0.05)
            assert d._stop.is_set()
            assert d.actuator is not None
            with pytest.raises(Fenced):
                await asyncio.to_thread(d.actuator.apply, {"r5n.large": 2}, "after-loss")
            stopped = True
            with pytest.raises(LeaseLost) as lost:
                await d.stop(grace=0.0)
            return before, str(lost.value), lost.value.exit_code
        finally:
            if not stopped:
                await d.stop(grace=0.0)

    with caplog.at_level(logging.INFO, logger="costscale"):
        before, line, code = asyncio.run(scenario())
    assert _live(moto_endpoint) == before and len(before) == 1       # nothing launched after the loss
    assert code == 1
    assert line.startswith("lease of cluster owned lost to host ctl-b pid 22 since ") and line.endswith(
        ", generation 2: stopped launching and terminating instances"), line
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == [line]


def test_costscale_run_refused_by_a_live_lease_is_one_line_exit_1(moto_endpoint: str, tmp_path: Path) -> None:
    _daemon_config(tmp_path, moto_endpoint, "host-b")
    table = _table(moto_endpoint)
    table.ensure_table()
    holder = Claimant(cluster="owned", owner="ctl-a:4242:aaaa", host="ctl-a", pid=4242)
    assert table.write(lease_of(holder, T0, 4_102_444_800.0, 3), None)      # expires 2100-01-01
    exe = Path(sys.executable).with_name("costscale")
    r = subprocess.run([str(exe), "run", str(tmp_path / "host-b" / "costscale.yaml")], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 1, r.stderr
    assert [ln for ln in r.stderr.splitlines() if ln.strip()] == [
        "costscale: cluster owned is owned by another costscale daemon (host ctl-a pid 4242 since "
        "2023-11-14T22:13:20Z, lease expires 2100-01-01T00:00:00Z; DynamoDB table costscale-leases); stop that "
        "daemon, or if it crashed wait until its lease expires"]
    assert _live(moto_endpoint) == []


def test_a_bad_lease_section_is_a_config_error_naming_the_field() -> None:
    from config.errors import ConfigError

    text = daemon_config_text("owned", ttl=1)
    with pytest.raises(ConfigError) as err:
        parse_config_text(text.replace("lease:\n", "lease:\n  table: a/b\n"), "c.yaml")
    assert err.value.exit_code == 2
    assert err.value.lines == [
        "c.yaml: line 21: lease.table: must be a DynamoDB table name: 3-255 letters, digits, '_', '-' or '.'",
        "c.yaml: line 22: lease.ttl_s: Input should be greater than or equal to 3"]
    assert parse_config_text(text.replace("lease:\n  ttl_s: 1\n", "")).lease.model_dump() == {
        "table": "costscale-leases", "ttl_s": 60.0, "replicas": False, "replica_id": "", "unready_s": 5.0}
