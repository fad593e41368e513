"""Replicas of one cluster in the daemon (issue #27 deliverable 1, ``daemon.replicas.role``): with
``lease.replicas`` a daemon that finds the lease held starts as a standby (it serves, beats and
publishes its demand; it never acts on the fleet), the holder plans for every live replica's demand,
and a standby takes the lease when the holder is gone, adopting its instances; plan ids lead with the
lease generation. In process, two ``Daemon`` objects against moto in server mode."""
from __future__ import annotations

import asyncio
import hashlib
import socket
import time
from pathlib import Path
from typing import Any

import boto3
import grpc
import pytest

from config.errors import ConfigError
from config.schema import Config, parse_config_text
from scaler.fleet.step import plan_id_for
from scaler.replicas.lease_table import DynamoLeaseTable, make_dynamodb_client
from tests.lease_helpers import daemon_config, daemon_config_text, live_ids


def _lease_lines(replicas: bool, unready: float) -> str:
    return f"  replicas: {str(replicas).lower()}\n  unready_s: {unready}\n"


def _config(tmp_path: Path, endpoint: str, name: str, ttl: float = 60, replicas: bool = True, unready: float = 0,
            on_shutdown: str = "keep") -> Config:
    return daemon_config(tmp_path, endpoint, name, "ha", ttl=ttl, extra=f"on_shutdown: {on_shutdown}\n",
                         lease=_lease_lines(replicas, unready))


def _text(endpoint: str = "http://127.0.0.1:9", unready: float = 0) -> str:
    """A replicas config that is only parsed (ttl 6 s)."""
    return daemon_config_text("ha", endpoint=endpoint, ttl=6, extra="on_shutdown: keep\n",
                              lease=_lease_lines(True, unready))


def _live(endpoint: str) -> list[str]:
    return live_ids(endpoint, "ha")


# -- pure ----------------------------------------------------------------------------------------

def test_plan_ids_lead_with_the_lease_generation_and_are_unchanged_without_one() -> None:
    digest = hashlib.sha256(repr([("r5n.large", 2)]).encode()).hexdigest()[:10]
    assert plan_id_for({"r5n.large": 2}, 3) == f"g3-{digest}"                  # replicas off: as before
    assert plan_id_for({"r5n.large": 2}, 3, None) == f"g3-{digest}"
    assert plan_id_for({"r5n.large": 2}, 1, 2) == f"L2g1-{digest}"
    # a new holder counting its generations from 0 again never re-derives the old holder's ids
    assert plan_id_for({"r5n.large": 2}, 1, 2) != plan_id_for({"r5n.large": 2}, 1, 1)
    assert plan_id_for({"r5n.large": 2}, 1, 1) != plan_id_for({"r5n.large": 2}, 11, None)


def test_a_bad_replica_id_is_a_config_error_naming_the_field() -> None:
    text = _text(unready=5)
    with pytest.raises(ConfigError) as err:
        parse_config_text(text.replace("  replicas: true\n", "  replicas: true\n  replica_id: a b\n"), "c.yaml")
    assert err.value.exit_code == 2
    assert err.value.lines == ["c.yaml: line 24: lease.replica_id: must be 1-200 letters, digits, '_', '.', ':', '@' "
                               "or '-'"]
    cfg = parse_config_text(text)
    assert (cfg.lease.replicas, cfg.lease.replica_id) == (True, "")


def test_the_default_replica_id_is_unique_across_hosts_listening_on_loopback() -> None:
    from daemon.replicas.role import replica_id

    text = _text(unready=5)
    cfg = parse_config_text(text)
    # the same config on two hosts, each behind a local proxy: two ids, one per host (and port)
    assert replica_id(cfg, "127.0.0.1:50051", "ctl-a") == "ctl-a:50051"
    assert replica_id(cfg, "127.0.0.1:50051", "ctl-b") == "ctl-b:50051"
    assert replica_id(cfg, "127.0.0.1:50052", "ctl-a") == "ctl-a:50052"      # two replicas on one host
    assert replica_id(cfg, "[::1]:50051", "ctl-a") == "ctl-a:50051"
    assert replica_id(cfg, "10.0.0.11:50051", "ctl-a") == "10.0.0.11:50051"  # a routable listener: its address
    named = parse_config_text(text.replace("  replicas: true\n", "  replicas: true\n  replica_id: ctl-a\n"))
    assert replica_id(named, "127.0.0.1:50051", "ctl-b") == "ctl-a"            # lease.replica_id wins


# -- two daemons on moto -------------------------------------------------------------------------

async def _until(cond: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


def test_a_standby_serves_beats_and_never_acts_then_takes_over_and_adopts(moto_endpoint: str,
                                                                          tmp_path: Path) -> None:
    from daemon.app import Daemon

    a_cfg = _config(tmp_path, moto_endpoint, "host-a")
    b_cfg = _config(tmp_path, moto_endpoint, "host-b")

    async def scenario() -> dict[str, Any]:
        a = Daemon(a_cfg, None, listen="127.0.0.1:0")
        await a.start()
        b = Daemon(b_cfg, None, listen="127.0.0.1:0")
        out: dict[str, Any] = {}
        try:
            await a.fleet_tick("test")
            await b.start()                                  # no LeaseHeld: a standby
            assert a.replica is not None and b.replica is not None
            out["roles"] = (a.leading(), b.leading())
            out["first"] = _live(moto_endpoint)
            await b.fleet_tick("test")                       # a standby's ticks do nothing
            await b.reconcile_tick()
            out["b_plans"] = b.status.plans_applied
            out["after_standby_tick"] = _live(moto_endpoint)
            await a.replica.beat()                           # the holder reads both replicas' demand
            assert a.replica.merged is not None
            out["merged_from"] = sorted(a.replica.merged.replicas)
            out["ids"] = sorted([a.replica.me.replica, b.replica.me.replica])
            await b.replica.try_lead()                       # the holder is live: refused, still standby
            out["still_standby"] = not b.leading()
            await a.stop(grace=0.0)                          # a clean stop gives the lease back
            await b.replica.try_lead()                       # the next retry takes it, reconciles, ticks
            out["b_leads"] = b.leading()
            out["generation"] = b.replica.lease_generation()
            out["b_plans_after"] = b.status.plans_applied
            out["after_takeover"] = _live(moto_endpoint)
            # the new holder acts: an instance lost behind its back is replaced under plan ids of lease 2
            ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=moto_endpoint)
            ec2.terminate_instances(InstanceIds=out["first"])
            await b.reconcile_tick()
            await b.fleet_tick("test")
            out["replaced"] = _live(moto_endpoint)
            assert b.store is not None
            out["launch_plans"] = sorted({i.plan_id for i in b.store.intents() if i.kind == "launch"})
        finally:
            await b.stop(grace=0.0)
            if not a._stop.is_set():
                await a.stop(grace=0.0)
        return out

    out = asyncio.run(scenario())
    assert out["roles"] == (True, False)
    assert len(out["first"]) == 1
    assert out["b_plans"] == 0 and out["after_standby_tick"] == out["first"]
    assert out["merged_from"] == out["ids"]
    assert out["still_standby"]
    assert out["b_leads"] and out["generation"] == 2
    assert out["b_plans_after"] == 1
    assert out["after_takeover"] == out["first"]             # adopted: no orphan, nothing launched twice
    assert len(out["replaced"]) == 1 and out["replaced"] != out["first"]
    assert out["launch_plans"] and all(p.startswith("L2g") for p in out["launch_plans"]), out["launch_plans"]
    table = DynamoLeaseTable("costscale-leases", make_dynamodb_client("us-east-1", moto_endpoint))
    lease = table.get("ha")
    assert lease is not None and lease.generation == 2 and lease.expires_at <= time.time()   # given back


def test_replicas_off_a_second_daemon_is_still_refused(moto_endpoint: str, tmp_path: Path) -> None:
    from daemon.app import Daemon
    from scaler.replicas.lease_decision import LeaseHeld

    a_cfg = _config(tmp_path, moto_endpoint, "host-a", replicas=False)
    b_cfg = _config(tmp_path, moto_endpoint, "host-b", replicas=False)

    async def scenario() -> None:
        a = Daemon(a_cfg, None, listen="127.0.0.1:0")
        await a.start()
        b = Daemon(b_cfg, None, listen="127.0.0.1:0")
        try:
            assert a.replica is None
            with pytest.raises(LeaseHeld):
                await b.start()
        finally:
            await b.stop(grace=0.0)
            await a.stop(grace=0.0)

    asyncio.run(scenario())


def test_a_stopping_replica_says_not_serving_while_it_still_admits_then_drains(moto_endpoint: str,
                                                                              tmp_path: Path) -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from daemon.app import Daemon
    from dispatcher.proto import costscale_pb2 as pb, costscale_pb2_grpc as pbg

    cfg = _config(tmp_path, moto_endpoint, "host-a", unready=3)

    async def scenario() -> dict[str, Any]:
        d = Daemon(cfg, None, listen="127.0.0.1:0")
        await d.start()
        await d.fleet_tick("test")         # an instance starting: a query waits for it instead of failing fast
        out: dict[str, Any] = {}
        stopping: asyncio.Task[None] | None = None
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{d.port}") as ch:
                health = health_pb2_grpc.HealthStub(ch)
                check = health_pb2.HealthCheckRequest(service="costscale.v1.Inference")
                out["before"] = (await health.Check(check, timeout=5)).status
                stopping = asyncio.create_task(d.stop(grace=0.0))
                states: list[int] = []

                async def not_serving() -> bool:
                    states.append((await health.Check(check, timeout=5)).status)
                    return states[-1] == health_pb2.HealthCheckResponse.NOT_SERVING
                deadline = time.monotonic() + 10
                while not await not_serving():
                    assert time.monotonic() < deadline
                assert d.dispatcher is not None
                out["admitting"] = not d.dispatcher.rt.stopping
                try:   # admitted (no worker here: it waits), not refused with UNAVAILABLE
                    await pbg.InferenceStub(ch).Submit(pb.SubmitRequest(model="rm2", batch_size=1), timeout=0.5)
                except grpc.aio.AioRpcError as exc:
                    out["during"] = exc.code()
                    out["details"] = exc.details()
                await stopping
                out["after"] = d.dispatcher.rt.stopping
        finally:
            if stopping is None:
                await d.stop(grace=0.0)
        return out

    out = asyncio.run(scenario())
    from grpc_health.v1 import health_pb2
    assert out["before"] == health_pb2.HealthCheckResponse.SERVING
    assert out["admitting"] is True
    assert out["during"] == grpc.StatusCode.DEADLINE_EXCEEDED, out
    assert out["after"] is True


def test_on_shutdown_terminate_hands_the_fleet_over_while_another_replica_lives(moto_endpoint: str, tmp_path: Path,
                                                                                caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from daemon.app import Daemon

    a_cfg = _config(tmp_path, moto_endpoint, "host-a", on_shutdown="terminate")
    b_cfg = _config(tmp_path, moto_endpoint, "host-b", on_shutdown="terminate")

    async def scenario() -> tuple[list[str], list[str], list[str]]:
        a = Daemon(a_cfg, None, listen="127.0.0.1:0")
        await a.start()
        b = Daemon(b_cfg, None, listen="127.0.0.1:0")
        try:
            await a.fleet_tick("test")
            await b.start()
            assert a.replica is not None and b.replica is not None
            await a.replica.beat()                       # the holder sees b live
            first = _live(moto_endpoint)
            await a.stop(grace=0.0)                      # b outlives it: the fleet is handed over
            handed = _live(moto_endpoint)
            await b.replica.try_lead()
            assert b.leading()
            await b.replica.beat()                       # a's items are gone: b is the last replica
        finally:
            await b.stop(grace=0.0)                      # the last replica terminates as configured
            if not a._stop.is_set():
                await a.stop(grace=0.0)
        return first, handed, _live(moto_endpoint)

    with caplog.at_level(logging.INFO, logger="costscale"):
        first, handed, last = asyncio.run(scenario())
    assert len(first) == 1 and handed == first and last == []
    assert any(r.getMessage().startswith(f"on_shutdown: terminate skipped: replica {socket.gethostname()}:") and
               r.getMessage().endswith(" live: the next to take the lease runs the fleet") for r in caplog.records)


def test_a_first_heartbeat_refused_by_dynamodb_is_one_line_exit_1() -> None:
    from daemon.aws.wiring import DaemonError
    from daemon.replicas.role import ReplicaRole
    from scaler.cloud.provider import CloudError
    from scaler.replicas.lease_holder import ClusterLease
    from scaler.replicas.lease_decision import Claimant

    def down(key: str) -> Any:
        raise CloudError("get_item: endpoint unreachable")

    cfg = parse_config_text(_text())
    lease = ClusterLease(None, Claimant(cluster="ha", owner="h:1:n", host="h", pid=1), 6.0)  # type: ignore[arg-type]

    async def noop() -> None:
        return None

    role = ReplicaRole(cfg, lease, None, "127.0.0.1:5", dict, noop)
    role.table.get_item = down  # type: ignore[method-assign]
    with pytest.raises(DaemonError) as err:
        asyncio.run(role.start())
    assert err.value.exit_code == 1
    assert str(err.value) == ("replica h:5: DynamoDB table costscale-leases refused its first heartbeat: "
                              "get_item: endpoint unreachable")


def test_the_holder_plans_for_the_merged_windows_of_every_replica(moto_endpoint: str,
                                                                  tmp_path: Path) -> None:
    import numpy as np

    from daemon.app import Daemon
    from scaler.fleet import step as fleet_step
    from scaler.planner.joint_plan import declared_demands
    from scaler.planner.batch_mix import BatchMix
    from scaler.replicas.demand import MergedDemand, ModelWindow

    cfg = _config(tmp_path, moto_endpoint, "host-a")
    mix = BatchMix(np.array([1, 64], dtype=np.int64), np.array([0.75, 0.25]))
    summed = ModelWindow(arrival_qps=12.0, steady_qps=10.0, count=600, total=600, mean_batch=16.75, mix=mix, span_s=60.0)

    async def scenario() -> tuple[Any, Any, Any]:
        d = Daemon(cfg, None, listen="127.0.0.1:0")
        await d.start()
        try:
            assert d.replica is not None and d.leading()
            own = d.current_demand()["rm2"]                  # nothing read yet: its own (empty) window
            d.replica.merged = MergedDemand({"rm2": summed}, ("a:1", "b:2"))
            merged = d.current_demand()["rm2"]
            declared = declared_demands(d.cfg)["rm2"]
            want = fleet_step.planning_demand(12.0, mix, 600, declared, 1.0, 10.0)
            return own, merged, want
        finally:
            await d.stop(grace=0.0)

    own, merged, want = asyncio.run(scenario())
    assert merged == want and merged != own


def _two_roles(endpoint: str, on_windows: Any = None) -> tuple[Any, Any, Any]:
    """A holder (replica 10.0.0.1:5, the lease taken) and a standby (10.0.0.2:6) of cluster ha on
    moto, each publishing one rm2 window (``on_windows`` called as each takes it); and the client."""
    import numpy as np

    from daemon.replicas.role import ReplicaRole
    from scaler.planner.batch_mix import BatchMix
    from scaler.replicas.lease_holder import ClusterLease
    from scaler.replicas.lease_decision import Claimant
    from scaler.replicas.demand import ModelWindow

    cfg = parse_config_text(_text(endpoint))
    client = make_dynamodb_client("us-east-1", endpoint)
    table = DynamoLeaseTable("costscale-leases", client)
    table.ensure_table()
    window = ModelWindow(4.0, 3.0, 40, 40, 2.0, BatchMix(np.array([2], dtype=np.int64), np.array([1.0])), 10.0)

    async def noop() -> None:
        return None

    def windows() -> dict[str, ModelWindow]:
        if on_windows is not None:
            on_windows()
        return {"rm2": window}

    def role(pid: int, port: int) -> ReplicaRole:
        lease = ClusterLease(table, Claimant(cluster="ha", owner=f"h:{pid}:n", host="h", pid=pid), 6.0)
        return ReplicaRole(cfg, lease, client, f"10.0.0.{pid}:{port}", windows, noop)

    holder, standby = role(1, 5), role(2, 6)
    holder.lease.acquire()
    return holder, standby, client


def test_the_holders_beat_reads_every_heartbeat_and_window_in_one_scan(moto_endpoint: str) -> None:
    holder, standby, client = _two_roles(moto_endpoint)
    scans: list[str] = []
    client.meta.events.register("before-call.dynamodb.Scan", lambda **kw: scans.append("scan"))
    asyncio.run(standby.beat())
    assert scans == [] and standby.merged is None                   # a standby reads nobody's items
    asyncio.run(holder.beat())
    assert scans == ["scan"]                                        # heartbeats and windows: one Scan
    assert holder.live == ("10.0.0.1:5", "10.0.0.2:6")
    assert holder.merged is not None and holder.merged.replicas == holder.live
    assert holder.merged.windows["rm2"].steady_qps == 6.0 and holder.merged.windows["rm2"].count == 80


def test_a_replica_takes_its_windows_on_the_event_loop_not_in_the_beats_thread(moto_endpoint: str) -> None:
    import threading

    threads: list[int] = []
    holder, standby, _ = _two_roles(moto_endpoint, lambda: threads.append(threading.get_ident()))

    async def beats() -> int:
        await standby.start()
        await holder.beat()
        return threading.get_ident()

    loop_thread = asyncio.run(beats())
    assert threads == [loop_thread, loop_thread]
