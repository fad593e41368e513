"""Acceptance (issue #41, deliverable 4): ``dispatcher.processes: 2`` runs two dispatcher processes
on one port of one host, sharing the workers without double-booking.

One ``costscale run`` (the supervisor, ``daemon.processes.supervisor``) on moto's EC2 and DynamoDB,
rm2 on 4 x r5n.large pinned, the workers apart from it (``daemon.local.fleet``) registering through
the one port. Both processes bind that port (SO_REUSEPORT): 16 client connections are spread over
them by the kernel. The workers are shared by the replica ownership (two owners of two base
workers each), so every worker is matched by one process: each worker's own count of the calls it
held at once (``HealthReply.peak_in_flight``) never passes 1 while 320 queries run 32 at a time, and
the workers served exactly the calls the two processes report.
"""
from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import boto3
import grpc
import pytest

from daemon.commands.status import hosts_of
from daemon.demos.replica_cluster import ROOT, ClusterSpec, free_port, serves, start_local_fleet, stop_processes
from dispatcher.proto import costscale_pb2 as pb, costscale_pb2_grpc as pbg
from scaler.replicas.lease_table import make_dynamodb_client
from scaler.replicas.replica_table import DynamoReplicaTable
from scaler.replicas.worker_table import DynamoWorkerTable

pytestmark = pytest.mark.slow

CLUSTER = "procs-e2e"
QUERIES, CONNECTIONS, IN_FLIGHT = 320, 16, 32


def _config_text(spec: ClusterSpec, port: int, state: Path) -> str:
    text = spec.config_text(port, state, "ctl")
    text = text.replace(f"  listen: 127.0.0.1:{port}\n", f"  listen: 127.0.0.1:{port}\n  processes: 2\n")
    return text + "metrics:\n  listen: null\n"


async def _status(address: str) -> pb.StatusReply:
    async with grpc.aio.insecure_channel(address) as ch:
        return await pbg.InferenceStub(ch).Status(pb.StatusRequest(), timeout=10.0)


async def _health(address: str) -> pb.HealthReply:
    async with grpc.aio.insecure_channel(address) as ch:
        return await pbg.WorkerStub(ch).Health(pb.HealthRequest(), timeout=10.0)


async def _load(port: int) -> list[str]:
    """QUERIES Submits over CONNECTIONS connections of their own, IN_FLIGHT at a time: each code."""
    chans = [grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.use_local_subchannel_pool", 1)])
             for _ in range(CONNECTIONS)]
    stubs = [pbg.InferenceStub(c) for c in chans]
    gate = asyncio.Semaphore(IN_FLIGHT)

    async def one(i: int) -> str:
        async with gate:
            try:
                await stubs[i % CONNECTIONS].Submit(pb.SubmitRequest(model="rm2", batch_size=4), timeout=60.0)
                return "OK"
            except grpc.aio.AioRpcError as exc:
                return exc.code().name

    try:
        return list(await asyncio.gather(*(one(i) for i in range(QUERIES))))
    finally:
        for c in chans:
            await c.close()


def _wait(cond, what: str, logs, timeout: float = 180.0) -> None:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, f"timed out waiting for {what}\n{logs()}"
        time.sleep(0.25)


def test_two_processes_on_one_port_share_the_workers_without_double_booking(moto_endpoint: str,
                                                                             tmp_path: Path) -> None:
    ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=moto_endpoint)
    ami = ec2.describe_images()["Images"][0]["ImageId"]
    spec = ClusterSpec(cluster=CLUSTER, endpoint=moto_endpoint, ami=ami, budget=1.0, pool_n=4,
                       on_deadline="best_effort")
    port = free_port()
    d = tmp_path / "host"
    d.mkdir()
    cfg, log = d / "costscale.yaml", d / "daemon.log"
    cfg.write_text(_config_text(spec, port, d / "state.db"))
    with open(log, "wb") as out:   # the supervisor: costscale run, as systemd starts it
        sup = subprocess.Popen([sys.executable, "-m", "daemon.cli", "run", str(cfg)], cwd=ROOT, stdout=out,
                               stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    fleet = None
    dynamo = make_dynamodb_client("us-east-1", moto_endpoint)
    replicas = DynamoReplicaTable("costscale-leases", dynamo, CLUSTER)
    workers = DynamoWorkerTable("costscale-leases", dynamo, CLUSTER)

    def logs() -> str:
        return log.read_text(errors="replace")[-4000:] + ((tmp_path / "fleet.log").read_text()[-1500:] if (tmp_path / "fleet.log").exists() else "")

    try:
        fleet = start_local_fleet(tmp_path, cfg, f"127.0.0.1:{port}")
        ids = {"p0@ctl", "p1@ctl"}     # lease.replica_id ctl (the host's id), process I: pI@ctl

        def split() -> bool:
            try:
                published = replicas.owners()
                beats = {b.replica: b for b in replicas.beats()}
            except Exception:
                return False
            return (published is not None and set(beats) == ids and len(published[0].owner) == 4
                    and set(published[0].owner.values()) == ids and not published[0].releasing)

        _wait(split, "both processes beating and owning two workers each", logs)
        own = {b.replica: b.address for b in replicas.beats()}
        assert len(set(own.values())) == 2 and all(a.rpartition(":")[2] != str(port) for a in own.values())
        for rid, address in own.items():
            assert asyncio.run(serves(int(address.rpartition(":")[2]), 120)), logs()

        def serve_own() -> bool:   # each matches on its own workers (not forwarding to its sibling)
            st = [asyncio.run(_status(a)) for a in own.values()]
            return all(s.replica.forwarding_to == "" and s.workers > 0 for s in st)

        _wait(serve_own, "each process serving on workers of its own", logs)
        before = {rid: asyncio.run(_status(a)).served for rid, a in own.items()}
        codes = asyncio.run(_load(port))
        after = {rid: asyncio.run(_status(a)) for rid, a in own.items()}
        healths = [asyncio.run(_health(w.address)) for w in workers.workers()]
    finally:
        stop_processes(sup, fleet)
    assert sup.returncode == 0, logs()
    assert codes.count("OK") == QUERIES, sorted(set(codes))
    # the kernel spread the 16 connections over both processes; each answered what it was sent
    took = {rid: after[rid].served - before[rid] for rid in own}
    assert sum(took.values()) == QUERIES and all(n > 0 for n in took.values()), took
    # one host, two processes, in either's status
    live = list(after[next(iter(own))].replica.live)
    assert hosts_of(live) == {"ctl": ["p0", "p1"]}
    # no double-booking: no worker ever held two calls at once; they served exactly what was matched
    # (a worker the matching never picked holds 0: Kairos may prefer its sibling at this load)
    peaks = [(h.instance_id, h.peak_in_flight, h.served) for h in healths]
    assert len(healths) == 4 and all(h.peak_in_flight <= 1 for h in healths), peaks
    assert all((h.peak_in_flight == 1) == (h.served > 0) for h in healths), peaks
    assert sum(h.served for h in healths) == sum(s.served for s in after.values())
