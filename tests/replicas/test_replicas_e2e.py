"""Acceptance (issue #27 deliverables 1, 2 and 4): two ``costscale run`` processes of one cluster
(``lease.replicas: true``, lease ttl 6 s) on 127.0.0.1 with their own ports and state paths, one
moto server for EC2 and DynamoDB, and the workers apart from both (``daemon.local.fleet``: one local
worker per running instance, as on AWS where a worker runs on its instance and outlives any control
host), registering through the one address the clients use. The workers are shared by the
published owners: with two base-type workers only the lease holder owns them and the standby
forwards its queries to it (``scaler.replicas.owning_replicas``). Load goes through gRPC's ``round_robin``
over both replicas; the lease holder is SIGKILLed mid-load (the same through nginx ``grpc_pass``:
``tests/replicas/test_demo_replicas.py``, ``costscale demo --replicas``'s scenario). Every query ends
once: the client retries on UNAVAILABLE (the killed replica's calls, and the standby's while the
owners move) and every query is answered; the standby moves the dead owner's workers to itself once
its heartbeat expired, takes the lease within the ttl + 5 s and its fleet loop acts (it adopts the
pool: no orphan, no duplicate; it replaces an instance lost after the kill); the budget holds at
every sample.

A second test stops the standby with SIGTERM under load from a client whose round_robin checks
health (``healthCheckConfig``): the replica says NOT_SERVING for ``lease.unready_s`` while it still
serves, the client moves off it, and no query fails at all (deliverable 1).
"""
from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import grpc
import numpy as np
import pytest

from config.pids import pid_alive
from daemon.demos.replica_cluster import (BudgetSampler, ClusterSpec, ReplicaProcess, fleet_worker_pids, live_instances,
                                    serves, start_local_fleet, start_replica, stop_processes)
from scaler.replicas.lease_decision import Lease, renew_interval_s
from scaler.replicas.lease_table import DynamoLeaseTable, make_dynamodb_client
from tests.conftest import free_port

pytestmark = pytest.mark.slow

CLUSTER = "ha-e2e"
BUDGET = 1.0
TTL_S = 6.0
#: the replicas' fleet interval (2 s)
FLEET_S = ClusterSpec.fleet_s


def _spec(endpoint: str, ami: str) -> ClusterSpec:
    """rm2 on 2 x r5n.large pinned within 1 $/hr, lease ttl 6 s, fleet ticks every 2 s
    (``daemon.demos.replica_cluster``, shared with ``costscale demo --replicas``), and
    ``on_deadline: best_effort``: the SLO policy refuses no query behind the backlog a failover
    leaves (how many it would refuse depends on the machine's load; the demo's test keeps ``drop``
    and bounds them), so every query must end answered."""
    return ClusterSpec(cluster=CLUSTER, endpoint=endpoint, ami=ami, budget=BUDGET, ttl_s=TTL_S,
                       on_deadline="best_effort")


def _live(ec2: Any) -> list[tuple[str, str]]:
    return live_instances(ec2, CLUSTER)


def _stop(*replicas: ReplicaProcess | None, fleet: subprocess.Popen[bytes] | None = None) -> None:
    """SIGTERM every replica still running and the workers' process, then wait for each (killed
    after 60 s)."""
    stop_processes(*(r.proc for r in replicas if r is not None), fleet)


def _start(tmp: Path, name: str, endpoint: str, ami: str, port: int) -> ReplicaProcess:
    return start_replica(tmp, name, _spec(endpoint, ami), port)


def test_the_standby_takes_the_fleet_over_when_the_holder_is_killed_mid_load(moto_endpoint: str,
                                                                              tmp_path: Path) -> None:
    _kill_scenario(moto_endpoint, tmp_path)


def _kill_scenario(moto_endpoint: str, tmp_path: Path) -> None:
    ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=moto_endpoint)
    ami = ec2.describe_images()["Images"][0]["ImageId"]
    table = DynamoLeaseTable("costscale-leases", make_dynamodb_client("us-east-1", moto_endpoint))
    pa, pb_port = free_port(), free_port()
    sampler = BudgetSampler(moto_endpoint, CLUSTER, BUDGET)
    sampler.start()
    a = _start(tmp_path, "host-a", moto_endpoint, ami, pa)
    b: ReplicaProcess | None = None
    fleet: subprocess.Popen[bytes] | None = None
    try:
        target, options = f"ipv4:127.0.0.1:{pa},127.0.0.1:{pb_port}", [("grpc.lb_policy_name", "round_robin")]
        fleet = start_local_fleet(tmp_path, a.dir / "costscale.yaml", target)
        assert asyncio.run(serves(pa, 120)), a.log_text()[-3000:] + (tmp_path / "fleet.log").read_text()[-2000:]
        first = _live(ec2)
        assert [t for _, t in first] == ["r5n.large", "r5n.large"]
        b = _start(tmp_path, "host-b", moto_endpoint, ami, pb_port)
        assert asyncio.run(serves(pb_port, 120)), b.log_text()[-3000:]
        held = table.get(CLUSTER)
        assert held is not None and held.pid == a.pid and held.generation == 1
        assert "starting as a standby replica" in b.log_text()
        workers = fleet_worker_pids(tmp_path)

        outcomes, t_kill, t_lease, kill_wall, leases = asyncio.run(_load_and_kill(a.proc, target, options, table,
                                                                                  a.pid, b.pid))
        after_kill = _live(ec2)
        survived = [p for p in workers if pid_alive(p, zombie_alive=False)]
        owners = asyncio.run(_replica_status(pb_port))
        # the fleet loop acts on the new holder: an instance lost now is replaced within a few ticks
        ec2.terminate_instances(InstanceIds=[after_kill[0][0]])
        t_lost = time.monotonic()
        while time.monotonic() - t_lost < 60 and (len(_live(ec2)) < 2 or after_kill[0] in _live(ec2)):
            time.sleep(0.2)
        replaced_s = time.monotonic() - t_lost
        final = _live(ec2)
        b_text, b_pid = b.log_text(), b.pid
    finally:
        sampler.stop.set()
        _stop(a, b, fleet=fleet)
    answered = [o for o in outcomes if o.tries > 0]
    first_try = sum(1 for o in outcomes if o.tries == 1)
    retried = [o for o in outcomes if o.tries > 1]
    failed = [o for o in outcomes if o.tries == 0]
    gap = max((o.t_end - t_kill for o in retried), default=0.0)
    in_flight = [o for o in outcomes if o.t_start < t_kill < o.t_end]
    old_lease, new_lease = leases
    took = new_lease.since - kill_wall if new_lease is not None else t_lease - t_kill
    print("replicas e2e (round_robin): "
          f"{len(outcomes)} queries, "
          f"{first_try} answered at the first try, {len(retried)} after retrying UNAVAILABLE "
          f"({len(retried) / len(outcomes):.1%}; the last answered {gap:.1f} s after the kill), {len(failed)} failed "
          f"{[o.code for o in failed]}; {len(in_flight)} in flight at the kill; lease taken {took:.2f} s after the "
          f"kill, {new_lease.since - old_lease.expires_at if new_lease else float('nan'):.2f} s after the dead "
          f"holder's lease expired (ttl {TTL_S:g} s); a lost instance "
          f"replaced in {replaced_s:.1f} s; peak {sampler.peak:.3f} of {BUDGET} $/hr over {len(sampler.samples)} samples")
    assert failed == [] and len(answered) == len(outcomes)   # retrying on UNAVAILABLE, every query answered once
    assert all(c == "UNAVAILABLE" for o in retried for c in o.retried_codes)
    # at the first try: every query sent after the standby took the lease (the killed replica's calls,
    # and those round_robin sent it before it saw the connection drop, fail UNAVAILABLE; the standby
    # holds the queries it forwarded to the dead owner: never failed)
    assert all(o.t_start < t_lease for o in retried), [(o.t_start - t_kill, o.retried_codes) for o in retried]
    assert first_try == len(outcomes) - len(retried)
    # the lease (README "High availability"): the dead holder ran on this host, so the standby takes
    # its lease once it sees its process gone (a failed forwarding hop, or its next lease retry, every
    # ttl / 3), not when it expires: after the kill, at the next generation (a conditional write on
    # the item it read), within one retry interval and one fleet interval of slack for the scheduler
    assert old_lease is not None and old_lease.pid == a.pid and new_lease is not None and new_lease.pid == b_pid
    assert new_lease.generation == old_lease.generation + 1
    assert kill_wall - 0.001 <= new_lease.since        # after the SIGKILL (the item holds ms)
    assert took <= renew_interval_s(TTL_S) + FLEET_S
    assert "reconciled at takeover" in b_text and "fleet (lease taken)" in b_text
    assert "moving their workers without the lease holder" in b_text or "connected i-" in b_text
    assert after_kill == first                                   # adopted: no orphan, no duplicate
    assert len(final) == 2 and [t for _, t in final] == ["r5n.large", "r5n.large"] and after_kill[0] not in final
    assert replaced_s < 30
    assert sampler.over == [] and len(sampler.samples) > 10
    assert len(workers) == 2 and survived == workers             # the workers outlived the replica killed
    # status on the survivor: it holds the lease and owns both workers (deliverable 2)
    assert owners.lease_holder and dict(owners.owners) == {iid: owners.id for iid, _ in first}, owners


async def _replica_status(port: int) -> Any:
    from dispatcher.proto import costscale_pb2 as pb, costscale_pb2_grpc as pbg

    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        reply = await pbg.InferenceStub(ch).Status(pb.StatusRequest(), timeout=10.0)
    return reply.replica


@dataclass
class Outcome:
    """One query as a retrying client saw it: answered at try ``tries`` (0: failed with ``code``),
    the codes of the tries before, when it ended."""

    tries: int = 0
    code: str = ""
    retried_codes: list[str] = field(default_factory=list)
    t_start: float = 0.0
    t_end: float = 0.0


async def _load_and_kill(a: subprocess.Popen[bytes], target: str, options: list[tuple[str, str]],
                         table: DynamoLeaseTable, a_pid: int, b_pid: int
                         ) -> tuple[list[Outcome], float, float, float, tuple[Lease | None, Lease | None]]:
    """Poisson load at 8 q/s for 16 s to ``target`` (round_robin over both replicas, or a balancer),
    each query retried on UNAVAILABLE (every 0.25 s, within 20 s); SIGKILL the holder at 5 s (no
    query sent until it is dead); the time the standby's lease item lands (monotonic), the kill's
    wall time, and the lease items: the dead holder's last and the standby's."""
    from dispatcher.proto import costscale_pb2 as pb, costscale_pb2_grpc as pbg

    rng = np.random.default_rng(27)
    outcomes: list[Outcome] = []
    t_kill = t_lease = 0.0
    async with grpc.aio.insecure_channel(target, options=options) as ch:
        stub = pbg.InferenceStub(ch)

        async def one(i: int, t_start: float) -> None:
            o = Outcome(t_start=t_start)
            outcomes.append(o)
            batch = int(rng.integers(1, 50))
            end = time.monotonic() + 20.0
            while True:
                try:
                    await stub.Submit(pb.SubmitRequest(model="rm2", batch_size=batch, idempotency_key=f"ha-{i}"),
                                      timeout=10.0)
                    o.tries = len(o.retried_codes) + 1
                    break
                except grpc.aio.AioRpcError as exc:
                    if exc.code() != grpc.StatusCode.UNAVAILABLE or time.monotonic() > end:
                        o.code = exc.code().name
                        break
                    o.retried_codes.append(exc.code().name)
                    await asyncio.sleep(0.25)
            o.t_end = time.monotonic()

        tasks: list[asyncio.Task[None]] = []
        t0 = time.monotonic()
        i = 0
        old: Lease | None = None
        kill_wall = 0.0
        while time.monotonic() - t0 < 16.0:
            if not t_kill and time.monotonic() - t0 >= 5.0:
                before = await asyncio.to_thread(table.get, CLUSTER)
                signal_wall = time.time()
                a.send_signal(signal.SIGKILL)
                while pid_alive(a.pid, zombie_alive=False):   # dead, its sockets closed, before the next query
                    time.sleep(0.001)                         # (not reaped yet: gone all the same)
                t_kill, kill_wall = time.monotonic(), signal_wall
                after = await asyncio.to_thread(table.get, CLUSTER)   # its last renewal (it renews no more)
                old = after if after is not None and after.pid == a_pid else before
            if t_kill and not t_lease:
                item = await asyncio.to_thread(table.get, CLUSTER)
                if item is not None and item.pid == b_pid and item.generation == 2:
                    t_lease = time.monotonic()
            tasks.append(asyncio.create_task(one(i, time.monotonic())))
            i += 1
            await asyncio.sleep(float(rng.exponential(1 / 8.0)))
        await asyncio.gather(*tasks)
        while not t_lease and time.monotonic() - t_kill < 30:
            item = await asyncio.to_thread(table.get, CLUSTER)
            if item is not None and item.pid == b_pid and item.generation == 2:
                t_lease = time.monotonic()
            await asyncio.sleep(0.1)
    assert len(outcomes) == i
    new = await asyncio.to_thread(table.get, CLUSTER)
    return outcomes, t_kill, t_lease or float("inf"), kill_wall, (old, new if new is not None and new.pid == b_pid
                                                                  else None)


#: a client's round_robin over the replicas that leaves a replica out while its health is NOT_SERVING
HEALTH_CHECKED_RR = json.dumps({"loadBalancingConfig": [{"round_robin": {}}],
                                "healthCheckConfig": {"serviceName": "costscale.v1.Inference"}})


def test_a_replica_stopped_under_load_leaves_the_balancing_before_it_refuses(moto_endpoint: str,
                                                                             tmp_path: Path) -> None:
    ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=moto_endpoint)
    ami = ec2.describe_images()["Images"][0]["ImageId"]
    pa, pb_port = free_port(), free_port()
    a = _start(tmp_path, "host-a", moto_endpoint, ami, pa)
    b: ReplicaProcess | None = None
    fleet = start_local_fleet(tmp_path, a.dir / "costscale.yaml", f"ipv4:127.0.0.1:{pa},127.0.0.1:{pb_port}")
    try:
        assert asyncio.run(serves(pa, 120)), a.log_text()[-3000:]
        b = _start(tmp_path, "host-b", moto_endpoint, ami, pb_port)
        assert asyncio.run(serves(pb_port, 120)), b.log_text()[-3000:]
        outcomes, b_code = asyncio.run(_load_and_stop(b.proc, pa, pb_port))
        b_text = b.log_text()
        live = _live(ec2)
    finally:
        _stop(a, b, fleet=fleet)
    failed = [o for o in outcomes if o != "OK"]
    print(f"replicas e2e (SIGTERM of a standby, health-checked round_robin): {len(outcomes)} queries, "
          f"{len(outcomes) - len(failed)} answered, failed {failed}")
    assert b_code == 0 and "leaving: NOT_SERVING for 5 s, then draining" in b_text
    assert failed == [] and len(outcomes) > 50
    assert len(live) == 2                              # the standby's stop left the holder's fleet alone


async def _load_and_stop(b: subprocess.Popen[bytes], pa: int, pb_port: int) -> tuple[list[str], int | None]:
    """Poisson load at 8 q/s for 14 s through health-checked round_robin; SIGTERM the standby at 4 s."""
    from dispatcher.proto import costscale_pb2 as pb, costscale_pb2_grpc as pbg

    rng = np.random.default_rng(28)
    outcomes: list[str] = []
    target = f"ipv4:127.0.0.1:{pa},127.0.0.1:{pb_port}"
    async with grpc.aio.insecure_channel(target, options=[("grpc.service_config", HEALTH_CHECKED_RR)]) as ch:
        stub = pbg.InferenceStub(ch)

        async def one(i: int) -> None:
            try:
                await stub.Submit(pb.SubmitRequest(model="rm2", batch_size=int(rng.integers(1, 50)),
                                                   idempotency_key=f"ha-stop-{i}"), timeout=10.0)
                outcomes.append("OK")
            except grpc.aio.AioRpcError as exc:
                outcomes.append(exc.code().name)

        tasks: list[asyncio.Task[None]] = []
        t0 = time.monotonic()
        stopped = False
        i = 0
        while time.monotonic() - t0 < 14.0:
            if not stopped and time.monotonic() - t0 >= 4.0:
                b.send_signal(signal.SIGTERM)
                stopped = True
            tasks.append(asyncio.create_task(one(i)))
            i += 1
            await asyncio.sleep(float(rng.exponential(1 / 8.0)))
        await asyncio.gather(*tasks)
    code = await asyncio.to_thread(b.wait, 60)
    return outcomes, code
