"""Acceptance (issue #28 phase 2, deliverable 6): spot capacity through the real daemon in-process
against moto in server mode, with local worker processes.

Two r5n.large (``market: both``, zones us-east-1a/c/d on moto subnets) are launched as spot
(describe_instances shows ``InstanceLifecycle: spot``) in two zones. Under a steady load, one
worker's IMDS (a local IMDSv2 server, the worker's ``--imds-endpoint``) gives the two-minute notice,
shortened here to 15 s: the worker tells its dispatcher, the fleet loop launches a replacement at
once in a zone other than the interrupted one, the doomed worker is drained before EC2 reclaims it
(the test terminates it in moto at the notice's time, as EC2 would), and every query sent is
answered exactly once, none by the doomed worker after its drain.
"""
from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest

from config.schema import Config
from daemon.demo import demo_config
from tests.imds_helpers import FakeImds
from tests.load_helpers import poisson_phase

pytestmark = pytest.mark.slow

ZONES = ["us-east-1a", "us-east-1c", "us-east-1d"]
NOTICE_S = 15.0      # EC2 gives 120 s; the notice's own time says when, and the daemon follows it
QPS = 3.0


def spot_config(endpoint: str, tmp: Path) -> tuple[Config, Any]:
    import boto3

    ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=endpoint)
    ami = ec2.describe_images()["Images"][0]["ImageId"]
    vpc = ec2.describe_vpcs(Filters=[{"Name": "isDefault", "Values": ["true"]}])["Vpcs"][0]["VpcId"]
    subnets = {z: ec2.create_subnet(VpcId=vpc, CidrBlock=f"172.31.{200 + k}.0/24", AvailabilityZone=z)
               ["Subnet"]["SubnetId"] for k, z in enumerate(ZONES)}
    raw = demo_config(tmp, endpoint, ami, budget=1.0, rate=QPS, pinned_pool={"r5n.large": 2}).model_dump()
    raw["instance_types"] = [{"type": "r5n.large", "max": 4, "market": "both"}]
    raw["spot"] = {"zones": subnets, "overprovision": 0}
    raw["intervals"] = {"fleet_s": 3, "model_s": 0.5, "reconcile_s": 30}
    raw["model_scaling"]["generate_variants"] = False
    return Config.model_validate(raw), ec2


def _describe(ec2: Any, cluster: str) -> dict[str, dict[str, Any]]:
    out = {}
    for r in ec2.describe_instances(Filters=[{"Name": "tag:costscale:cluster", "Values": [cluster]}])["Reservations"]:
        for i in r["Instances"]:
            out[i["InstanceId"]] = i
    return out


def test_spot_interruption_drains_replaces_in_another_zone_and_loses_no_query(moto_endpoint: str,
                                                                                 tmp_path: Path) -> None:
    asyncio.run(asyncio.wait_for(_scenario(moto_endpoint, tmp_path), timeout=240))


async def _wait(cond: Any, limit_s: float, what: str) -> None:
    end = time.monotonic() + limit_s
    while not cond():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


async def _scenario(endpoint: str, tmp: Path) -> None:
    from daemon.local_runner import start_with_local_workers
    from dispatcher.proto import costscale_pb2 as pb, costscale_pb2_grpc as pbg

    cfg, ec2 = spot_config(endpoint, tmp)
    imds = FakeImds()
    daemon, runner = await start_with_local_workers(cfg, [("rm2", "builtin:mlp", "rm2")], imds=imds.url,
                                                    generate_variants=False)
    d = daemon.dispatcher
    replies: list[tuple[int, float, str | None, str]] = []    # (query, sent at, worker or None, error)
    stop = asyncio.Event()

    def ready() -> list[str]:
        return [iid for iid, w in d.workers.items() if not w.draining and not w.removed]

    try:
        await daemon.fleet_tick("start")
        await _wait(lambda: len(ready()) >= 2, 90, "two spot workers")
        first = _describe(ec2, cfg.cluster)
        live = {iid: i for iid, i in first.items() if i["State"]["Name"] in ("pending", "running")}
        assert len(live) == 2 and all(i.get("InstanceLifecycle") == "spot" for i in live.values()), live
        zones = {iid: i["Placement"]["AvailabilityZone"] for iid, i in live.items()}
        assert len(set(zones.values())) == 2, zones       # spread over two zones
        victim = sorted(zones)[0]

        async with grpc.aio.insecure_channel(f"127.0.0.1:{daemon.port}") as ch:
            stub = pbg.InferenceStub(ch)
            rng = np.random.default_rng(28)

            async def one(i: int) -> None:
                t = time.monotonic()
                try:
                    r = await stub.Submit(pb.SubmitRequest(model="rm2", batch_size=int(rng.integers(1, 100))),
                                          timeout=20.0)
                    replies.append((i, t, r.instance_id, ""))
                except grpc.aio.AioRpcError as exc:
                    replies.append((i, t, None, exc.code().name))

            load = asyncio.create_task(poisson_phase(one, QPS, 0.0, rng, until=stop.is_set, max_duration=600.0))
            await _wait(lambda: any(w == victim for _, _, w, _ in replies), 30, "a query on the victim")
            reclaim_at = time.time() + NOTICE_S
            imds.interrupt(victim, reclaim_at)
            # the worker's watch (every 5 s) tells the dispatcher; the fleet launches a replacement at once
            await _wait(lambda: victim in (daemon.market.spot.state.doomed if daemon.market.spot else {}), 20,
                        "the notice reaching the fleet loop")
            await _wait(lambda: len(_describe(ec2, cfg.cluster)) >= 3, 20, "the replacement launch")
            await _wait(lambda: d.workers.get(victim) is None or d.workers[victim].draining, NOTICE_S + 5,
                        "the drain")
            drained_at = time.monotonic()
            assert time.time() < reclaim_at, "drained only after the reclaim"
            await _wait(lambda: time.time() >= reclaim_at, NOTICE_S + 5, "the reclaim time")
            ec2.terminate_instances(InstanceIds=[victim])              # EC2 reclaims it
            await _wait(lambda: victim not in d.workers and len(ready()) >= 2, 60,
                        "the victim gone and two workers serving again")
            after = len(replies)
            await _wait(lambda: len(replies) >= after + 10, 30, "queries after the reclaim")
            stop.set()
            sent = await load
        await _wait(lambda: len(replies) == sent, 30, "every reply")
        now = _describe(ec2, cfg.cluster)
        new = {iid: i for iid, i in now.items() if iid not in first}
        assert len(new) == 1, f"one replacement, not {len(new)} (a replacement parked as surplus launches another)"
        for iid, i in new.items():
            assert i["Placement"]["AvailabilityZone"] != zones[victim] or i.get("InstanceLifecycle") != "spot", i
        print(f"spot e2e: victim {victim} in {zones[victim]}; replacement(s) "
              f"{[(i['Placement']['AvailabilityZone'], i.get('InstanceLifecycle', 'on-demand')) for i in new.values()]}; "
              f"{sent} sent, {sum(1 for r in replies if r[2])} answered, redispatched {d.redispatched}")
        # every query answered exactly once, none failed, none sent to the victim after its drain
        assert sorted(r[0] for r in replies) == list(range(sent))
        assert [r for r in replies if r[2] is None] == []
        assert not [r for r in replies if r[2] == victim and r[1] > drained_at + 1.0]
    finally:
        stop.set()
        await daemon.stop(grace=3.0)
        await runner.stop_all()
        imds.close()
