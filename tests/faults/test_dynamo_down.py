"""Fault (b) of issue #40: DynamoDB unreachable for longer than the lease ttl while two replicas run
(``lease.replicas``; two ``Daemon`` objects on moto in server mode, each reaching DynamoDB through
its own cuttable proxy, EC2 directly). The fleet keeps wanting to act: an outside hand terminates
the cluster's instance whenever one is up, so the holder launches again at each fleet tick. The
history of every launch and terminate (the "acts", their wall-clock intervals) and of every lease
write that landed is checked after the fault, Jepsen-style (``tests.fault_helpers_query.ActLog``):

* no two replicas' acts overlap;
* each act ends before the expiry of the lease its replica last wrote (as the table stored it),
  and no other owner's write landed in between: the holder stops acting before its lease can
  expire (``FencedCloud``'s local deadline, ttl x 0.8 after the renewal began);
* never more than the pinned one instance live (no duplicate launch, the budget held);
* the fleet resumes after: an instance launched after the outage, by the holder then.

An odd seed cuts the holder's link only (the standby takes over at expiry), an even one both
(nobody can; the holder renews once back, or the standby takes over first); the seed also draws the
outage's length (1.3-2 ttl) and the cut's phase against the renewals."""
from __future__ import annotations

import asyncio
import random
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from unittest import mock

import boto3
import pytest

from config.schema import parse_config_text
from daemon.demos.replica_cluster import live_instances
from scaler.cloud.provider import CloudError
from scaler.replicas.lease_table import DynamoLeaseTable, make_dynamodb_client
from tests.fault_helpers_query import ActLog, CuttableProxy, RecordingCloud, RecordingLeaseTable, until
from tests.lease_helpers import daemon_config_text, moto_ami

TTL_S = 3.0     # the least lease.ttl_s allows: renewals every second


def _config(tmp: Path, endpoint: str, host: str, cluster: str, ami: str) -> Any:
    d = tmp / host
    d.mkdir(parents=True, exist_ok=True)
    text = daemon_config_text(cluster, ami=ami, state=d / "state.db", endpoint=endpoint, ttl=TTL_S,
                              extra="on_shutdown: keep\n", lease="  replicas: true\n  unready_s: 0\n")
    return parse_config_text(text.replace("fleet_s: 3600", "fleet_s: 0.3").replace("reconcile_s: 3600",
                                                                                  "reconcile_s: 0.5"))


async def dynamo_point(seed: int, endpoint: str, tmp: Path) -> dict[str, Any]:
    """One seeded point (see the module docstring); returns the checks' inputs and findings."""
    from daemon.app import Daemon
    import daemon.aws.wiring as wiring

    # the two daemons share this process's event loop and so its default executor: threads enough
    # that one daemon's DynamoDB calls, blocked on the cut link, never queue the other's (as two hosts)
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=32))
    rng = random.Random(seed)
    mode = "holder" if seed % 2 else "both"          # odd seeds: the holder's link only
    outage_s = TTL_S * rng.uniform(1.3, 2.0)
    cluster = f"dyn{seed}"
    log = ActLog()
    proxies: list[CuttableProxy] = []
    host = endpoint.split("//", 1)[1]

    def client(region: str, endpoint_url: str | None = None, max_attempts: int = 3) -> Any:
        proxies.append(CuttableProxy(host))      # one link per daemon, in the order they start
        return make_dynamodb_client(region, proxies[-1].url, max_attempts)

    ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=endpoint)
    live = lambda: [iid for iid, _ in live_instances(ec2, cluster)]   # noqa: E731
    daemons: list[Any] = []
    max_live = 0
    with mock.patch.object(wiring, "make_dynamodb_client", client), \
            mock.patch.object(wiring, "DynamoLeaseTable", lambda n, c: RecordingLeaseTable(DynamoLeaseTable(n, c), log)):
        try:
            ami = await asyncio.to_thread(moto_ami, endpoint)
            for name in ("host-a", "host-b"):
                d = Daemon(_config(tmp, endpoint, name, cluster, ami), None, listen="127.0.0.1:0")
                await d.start()
                lease = d.aws.lease
                d.cloud.inner = RecordingCloud(d.cloud.inner, lease.me.owner, log,
                                               lambda lease=lease: lease.held.generation if lease.held else 0)
                daemons.append(d)
            a, b = daemons
            assert a.leading() and not b.leading()
            await until(lambda: len(live()) == 1, 90, "the holder launched the pinned instance")

            async def kill_until(t_end: float) -> None:
                nonlocal max_live
                while time.monotonic() < t_end:
                    ids = await asyncio.to_thread(live)
                    max_live = max(max_live, len(ids))
                    if ids:
                        await asyncio.to_thread(ec2.terminate_instances, InstanceIds=ids)
                    await asyncio.sleep(0.05)

            await asyncio.sleep(rng.uniform(0, TTL_S / 3))      # the cut's phase against the renewals
            cut_at = time.time()
            for p in proxies[: 1 if mode == "holder" else 2]:
                p.cut()
            await kill_until(time.monotonic() + outage_s)
            healed_at = time.time()
            for p in proxies:
                p.heal()
            await kill_until(time.monotonic() + 0.06)        # the pool down once more: someone must act
            # the fleet resumes: an instance launched after the outage, by whoever holds the lease then
            await until(lambda: any(x.op == "launch" and x.start > healed_at for x in log.acts), 90,
                        "a launch after the outage")
            await until(lambda: len(live()) == 1, 90, "the pinned instance up again")
            if mode == "holder":
                await until(lambda: a._stop.is_set(), 90, "the old holder found its lease lost")
            max_live = max(max_live, len(live()))
            a_owner = a.aws.lease.me.owner
            a_acts = [x for x in log.acts if x.replica == a_owner]
            a_writes = [w for w in log.landed if w.owner == a_owner and w.at <= healed_at]
            last_expiry = max(w.expires_at for w in a_writes)
            during = [x for x in a_acts if cut_at <= x.start < healed_at]
            return {"seed": seed, "mode": mode, "outage_s": round(outage_s, 2), "violations": log.violations(),
                    "acts": len(log.acts), "holder_acts_in_outage": len(during),
                    "holder_last_act_margin_s": round(last_expiry - max((x.end for x in a_acts if x.start < healed_at),
                                                                        default=cut_at), 2),
                    "takeovers": b.replica.takeovers, "leader_after": "b" if b.leading() else "a",
                    "generations": sorted({w.generation for w in log.landed}), "max_live": max_live,
                    "launches_after": sum(1 for x in log.acts if x.op == "launch" and x.start > healed_at)}
        finally:
            for d in daemons:
                try:
                    await d.stop(grace=0.0)
                except Exception:  # noqa: BLE001 - LeaseLost: the old holder's one line, said already
                    pass
            for p in proxies:
                p.close()


def test_dynamodb_down_past_the_lease_ttl_never_has_two_replicas_acting(moto_endpoint: str, tmp_path: Path) -> None:
    out = asyncio.run(asyncio.wait_for(dynamo_point(1, moto_endpoint, tmp_path), 400))
    print(out)
    assert out["mode"] == "holder"
    assert out["violations"] == []
    assert out["holder_last_act_margin_s"] > 0          # its last act ended before its lease's expiry
    assert out["takeovers"] == 1 and out["leader_after"] == "b" and out["generations"] == [1, 2]
    assert out["max_live"] == 1                           # no duplicate launch, the budget held
    assert out["launches_after"] >= 1                     # the fleet resumed


class _Table:
    """An in-memory lease table whose link can be down (a write or read raises CloudError)."""

    def __init__(self) -> None:
        self.item: Any = None
        self.down = False
        self.writes = 0

    def get(self, cluster: str) -> Any:
        if self.down:
            raise CloudError("get_item: endpoint unreachable")
        return self.item

    def write(self, lease: Any, expect: Any) -> bool:
        if self.down:
            raise CloudError("put_item: endpoint unreachable")
        if self.item != expect:
            return False
        self.item, self.writes = lease, self.writes + 1
        return True


def test_an_act_with_less_than_the_reserve_left_renews_first_and_is_refused_when_that_fails() -> None:
    from scaler.cloud.fake import FakeCloud
    from scaler.replicas.lease_decision import Claimant
    from scaler.replicas.lease_holder import ACT_RESERVE, ClusterLease, Fenced, FencedCloud

    t = {"wall": 1_700_000_000.0, "mono": 100.0}
    table = _Table()
    me = Claimant(cluster="c1", owner="ctl-a:1:aa", host="ctl-a", pid=1)
    lease = ClusterLease(table, me, 60, clock=lambda: t["wall"], monotonic=lambda: t["mono"], alive=lambda pid: True)
    lease.acquire()                                    # local deadline: 100 + 48 s
    cloud = FencedCloud(FakeCloud("c1"), lease)
    t["mono"] += 48 - 60 * ACT_RESERVE - 0.001         # 24.001 s left: acts without a write
    cloud.launch("r5n.large", 1, "tok-1")
    assert table.writes == 1
    t["mono"] += 0.002                                 # 23.999 s left: renewed first, then acts
    t["wall"] += 24.0
    cloud.launch("r5n.large", 1, "tok-2")
    assert table.writes == 2 and lease.deadline.at == t["mono"] + 48
    t["mono"] += 24.5                                  # 23.5 s left, DynamoDB unreachable: refused
    table.down = True
    with pytest.raises(Fenced) as fenced:
        cloud.launch("r5n.large", 1, "tok-3")
    assert str(fenced.value).startswith("launch of 1 r5n.large refused: the lease of cluster c1 (until ")
    assert str(fenced.value).endswith("could not be renewed: get_item: endpoint unreachable")
    assert len(cloud.inner.list_managed()) == 2 and lease.valid()   # still valid, yet no act started
