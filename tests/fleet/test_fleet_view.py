"""The dispatcher's cloud view (the daemon's listing of the managed instances): Status reports every
live instance and its $/hr, registered or still booting; a query nothing serves while nothing boots
is refused at once with UNAVAILABLE, while one that something booting or loading will serve waits
for it (DESIGN invariant 4)."""
from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from config.schema import Config
from daemon.app import Daemon
from config.version import PROTOCOL_VERSION, costscale_version
from dispatcher.proto import costscale_pb2 as pb, costscale_pb2_grpc as pbg
from dispatcher.server import Dispatcher
from scaler.cloud.provider import ManagedInstance
from scaler.cloud.fake import FakeCloud
from tests.dispatch_helpers import RunningWorker, start_worker
from tests.dispatcher.test_dispatcher_live import run, setup, submit, teardown

SC = grpc.StatusCode
G4 = 0.526     # g4dn.xlarge $/hr (config/instance_catalog.csv)
C5 = 0.432     # c5n.2xlarge
R5 = 0.149     # r5n.large


async def _queued(d: Dispatcher, n: int) -> None:
    while d.stats()["queued"] < n:
        await asyncio.sleep(0.005)


async def _register(ch: grpc.aio.Channel, ws: list[RunningWorker], instance_id: str, instance_type: str) -> None:
    """Start a worker and register it through the Control RPC, as a launched instance does."""
    w = await start_worker(instance_id, instance_type)
    ws.append(w)
    r = await pbg.ControlStub(ch).RegisterWorker(pb.RegisterWorkerRequest(
        instance_id=instance_id, instance_type=instance_type, address=w.address,
        costscale_version=costscale_version(), protocol_version=PROTOCOL_VERSION))
    assert r.accepted, r.message


def test_status_counts_running_instances_not_registered_yet() -> None:
    async def body() -> None:
        d, ws, ch = await setup(0)
        extra = await start_worker("i-direct", "g4dn.xlarge")
        try:
            d.set_cloud_view([ManagedInstance("i-a", "g4dn.xlarge", "running"),
                              ManagedInstance("i-b", "c5n.2xlarge", "pending"),
                              ManagedInstance("i-c", "c5n.2xlarge", "shutting-down")])
            st = await pbg.InferenceStub(ch).Status(pb.StatusRequest())
            assert dict(st.pool) == {"g4dn.xlarge": 1, "c5n.2xlarge": 1}
            assert st.cost_per_hour == pytest.approx(G4 + C5)
            assert (st.workers, st.parked) == (0, 0)
            # i-a registers: counted once; a worker added directly (not listed yet) counts too
            await _register(ch, ws, "i-a", "g4dn.xlarge")
            d.add_worker_direct("i-direct", "g4dn.xlarge", extra.address)
            st = d.status_reply()
            assert dict(st.pool) == {"g4dn.xlarge": 2, "c5n.2xlarge": 1} and st.workers == 2
            assert st.cost_per_hour == pytest.approx(2 * G4 + C5)
            # the next listing no longer has i-a: it is forgotten, and neither counts nor costs
            d.set_cloud_view([ManagedInstance("i-b", "c5n.2xlarge", "running"),
                              ManagedInstance("i-direct", "g4dn.xlarge", "running")])
            st = d.status_reply()
            assert set(d.workers) == {"i-direct"} and st.workers == 1
            assert dict(st.pool) == {"g4dn.xlarge": 1, "c5n.2xlarge": 1}
            assert d.booting() == ["i-b"]
        finally:
            await teardown(d, ws + [extra], ch)
    run(body)


def test_a_query_nothing_serves_and_nothing_boots_is_unavailable_at_once() -> None:
    async def body() -> None:
        d, ws, ch = await setup(0)
        try:
            d.set_cloud_view([ManagedInstance("i-old", "g4dn.xlarge", "shutting-down")])
            with pytest.raises(grpc.aio.AioRpcError) as ei:
                await pbg.InferenceStub(ch).Submit(pb.SubmitRequest(model="ncf", batch_size=1), timeout=15)
            assert ei.value.code() == SC.UNAVAILABLE
            assert ei.value.details() == "no worker serves model 'ncf' and none is starting"
            # answered without entering the queue: no overall deadline was ever armed for it
            assert d.accepted == 0 and d.queries.deadlines == [] and d.stats()["queued"] == 0
            assert d.rejected == {"UNAVAILABLE": 1}
            assert d.window_snapshot("ncf").count == 1   # its demand still reaches the planner
        finally:
            await teardown(d, ws, ch)
    run(body)


def test_a_query_waits_for_a_booting_worker_and_is_served_once_it_registers() -> None:
    async def body() -> None:
        d, ws, ch = await setup(0, on_deadline="best_effort")   # no SLO drop: it waits for the worker
        try:
            d.set_cloud_view([ManagedInstance("i-boot", "g4dn.xlarge", "pending")])
            fut = asyncio.ensure_future(submit(ch, model="ncf", batch_size=1))
            await _queued(d, 1)
            assert d.accepted == 1 and d.booting() == ["i-boot"]
            d.set_cloud_view([ManagedInstance("i-boot", "g4dn.xlarge", "running")])
            await _register(ch, ws, "i-boot", "g4dn.xlarge")
            reply = await fut
            assert isinstance(reply, pb.SubmitReply) and reply.instance_id == "i-boot"
            assert d.rejected == {} and d.served == 1
        finally:
            await teardown(d, ws, ch)
    run(body)


def test_a_query_waits_while_a_registered_worker_loads_its_model() -> None:
    async def body() -> None:
        d, ws, ch = await setup(1, types=("g4dn.xlarge",), on_deadline="best_effort")
        try:
            d.set_cloud_view([ManagedInstance("i-0", "g4dn.xlarge", "running")])
            d.workers["i-0"].loaded = {"big"}            # it holds the other model only
            fut = asyncio.ensure_future(submit(ch, model="ncf", batch_size=1))
            await _queued(d, 1)
            assert await d.load_variant("i-0", "ncf") == (True, "loaded")
            reply = await fut
            assert isinstance(reply, pb.SubmitReply) and reply.instance_id == "i-0"
        finally:
            await teardown(d, ws, ch)
    run(body)


def test_without_a_cloud_view_a_query_waits_as_before() -> None:
    async def body() -> None:
        d, ws, ch = await setup(0, on_deadline="best_effort")
        try:
            fut = asyncio.ensure_future(submit(ch, model="ncf", batch_size=1))
            await _queued(d, 1)
            w = await start_worker("i-late", "g4dn.xlarge")
            ws.append(w)
            d.add_worker_direct("i-late", "g4dn.xlarge", w.address)
            reply = await fut
            assert isinstance(reply, pb.SubmitReply) and reply.instance_id == "i-late"
        finally:
            await teardown(d, ws, ch)
    run(body)


def test_daemon_status_reports_the_launched_pool_before_any_worker_registers(tmp_path: Path) -> None:
    cfg = Config.model_validate({
        "cluster": "view", "budget_per_hour": 1.0,
        "models": [{"name": "rm2", "qos_ms": 350}],
        "instance_types": [{"type": "r5n.large"}, {"type": "t3.xlarge"}],
        "launch": {"ami_id": "ami-1"}, "pinned_pool": {"r5n.large": 2},
        "dispatcher": {"listen": "127.0.0.1:0"}, "state_path": str(tmp_path / "state.db"),
        "model_scaling": {"generate_variants": False},
    })

    async def body() -> None:
        d = Daemon(cfg, None, cloud=FakeCloud("view"), listen="127.0.0.1:0", generate_variants=False)
        await d.start()
        try:
            await d.fleet_tick("test")
            async with grpc.aio.insecure_channel(f"127.0.0.1:{d.port}") as ch:
                st = await pbg.InferenceStub(ch).Status(pb.StatusRequest())
            assert dict(st.pool) == {"r5n.large": 2} and st.workers == 0
            assert st.cost_per_hour == pytest.approx(2 * R5)
            assert d.dispatcher is not None and len(d.dispatcher.booting()) == 2
        finally:
            await d.stop(grace=0.0)
    run(body)
