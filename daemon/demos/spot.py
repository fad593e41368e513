"""``costscale demo --spot`` (issue #28 phase 2): spot capacity and an interruption, live.

The embedded cloud (moto in server mode) with three subnets in us-east-1a/c/d, two r5n.large
(``market: both``) that the daemon launches as spot in two zones, local workers that watch a local
IMDS (:mod:`daemon.local.imds`; each worker its own ``--imds-endpoint``), and a steady Poisson load
through gRPC. A scripted interruption: one worker's IMDS gives EC2's notice (shortened to
``notice_s``; the daemon follows the notice's own time), the worker tells its dispatcher
(``Control.SpotNotice``), the fleet loop launches the replacement at once (another zone, else
on-demand: ``scaler.spot.market``), the doomed worker is drained 5 s before the reclaim, and at the
notice's time the demo terminates the instance in moto as EC2 would. The summary line says what
happened: the preemption, the replacement, every query answered (exactly once).

:func:`spot_scenario` is the scenario itself; ``tests/spot/test_spot_e2e.py`` runs it and checks its
figures. An adapter: it wires processes and a load; the decisions are the daemon's.
"""
from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from config.schema import Config

ZONES = ("us-east-1a", "us-east-1c", "us-east-1d")
SPOT_TYPE = "r5n.large"


def spot_demo_config(endpoint: str, state_dir: Path, ec2: Any, qps: float) -> Config:
    """The demo's config (``daemon.demos.demo_config.demo_config``) with two r5n.large on spot over three moto subnets."""
    from daemon.demos.demo_config import demo_config

    ami = ec2.describe_images()["Images"][0]["ImageId"]
    vpc = ec2.describe_vpcs(Filters=[{"Name": "isDefault", "Values": ["true"]}])["Vpcs"][0]["VpcId"]
    subnets = {z: ec2.create_subnet(VpcId=vpc, CidrBlock=f"172.31.{200 + k}.0/24", AvailabilityZone=z)
               ["Subnet"]["SubnetId"] for k, z in enumerate(ZONES)}
    raw = demo_config(state_dir, endpoint, ami, budget=1.0, rate=qps, pinned_pool={SPOT_TYPE: 2}).model_dump()
    raw["instance_types"] = [{"type": SPOT_TYPE, "max": 4, "market": "both"}]
    raw["spot"] = {"zones": subnets, "overprovision": 0}
    raw["intervals"] = {"fleet_s": 3, "model_s": 0.5, "reconcile_s": 30}
    raw["model_scaling"]["generate_variants"] = False
    return Config.model_validate(raw)


def described(ec2: Any, cluster: str) -> dict[str, dict[str, Any]]:
    """The cluster's instances as EC2 describes them."""
    pages = ec2.describe_instances(Filters=[{"Name": "tag:costscale:cluster", "Values": [cluster]}])["Reservations"]
    return {i["InstanceId"]: i for r in pages for i in r["Instances"]}


async def _wait(cond: Callable[[], bool], limit_s: float, what: str) -> None:
    end = time.monotonic() + limit_s
    while not cond():
        if time.monotonic() > end:
            raise TimeoutError(f"spot demo: timed out waiting for {what}")
        await asyncio.sleep(0.1)


class TickCount:
    """How many fleet ticks the daemon had applied when the fleet loop took the notice (under the
    fleet lock: :meth:`scaler.spot.fleet.SpotFleet.notice`) and when each instance was launched
    (the fleet tick's audit port), read at those instants by wrapping the two calls."""

    def __init__(self, daemon: Any) -> None:
        self.at_notice: dict[str, int] = {}
        self.at_launch: dict[str, int] = {}
        spot, audit = daemon.market.spot, daemon._audit
        notice, event = spot.notice, audit.event

        def noticed(instance_id: str, *a: Any, **k: Any) -> float:
            self.at_notice.setdefault(instance_id, daemon.status.plans_applied)
            return float(notice(instance_id, *a, **k))

        def evented(kind: str, instance_id: str, *a: Any, **k: Any) -> None:
            if kind == "launch":
                self.at_launch.setdefault(instance_id, daemon.status.plans_applied)
            event(kind, instance_id, *a, **k)
        setattr(spot, "notice", noticed)
        setattr(audit, "event", evented)

    def between(self, victim: str, launched: list[str]) -> int | None:
        """Fleet ticks completed after the notice was taken and before the replacement's launch:
        0 when the first tick after the notice launched it (a tick under way when the notice came
        holds the fleet lock, so it ends before the notice is taken)."""
        at = [self.at_launch[i] for i in launched if i in self.at_launch]
        if victim not in self.at_notice or not at:
            return None
        return min(at) - self.at_notice[victim]


async def spot_scenario(endpoint: str, state_dir: Path, qps: float = 3.0, notice_s: float = 15.0,
                        seed: int = 28) -> dict[str, Any]:
    """Run the scenario (module docstring) against moto at ``endpoint``; returns its figures."""
    import boto3
    import grpc

    from daemon.local.imds import LocalImds
    from daemon.process import start_with_local_workers
    from dispatcher.proto import costscale_pb2 as pb, costscale_pb2_grpc as pbg

    ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=endpoint)
    cfg = spot_demo_config(endpoint, state_dir, ec2, qps)
    imds = LocalImds()
    daemon, runner = await start_with_local_workers(cfg, [("rm2", "builtin:mlp", "rm2")], imds=imds.url,
                                                    generate_variants=False)
    d = daemon.dispatcher
    replies: list[tuple[int, float, str | None, str]] = []      # (query, sent at, worker or None, error)
    stop = asyncio.Event()
    out: dict[str, Any] = {"cluster": cfg.cluster, "budget_per_hour": cfg.budget_per_hour}

    def ready() -> list[str]:
        return [iid for iid, w in d.workers.items() if not w.draining and not w.removed]

    async def send_load(stub: Any) -> int:
        """Open-loop Poisson arrivals at ``qps`` until ``stop``; waits for every reply."""
        rng = np.random.default_rng(seed)
        tasks: set[asyncio.Task[None]] = set()

        async def one(i: int) -> None:
            t = time.monotonic()
            try:
                r = await stub.Submit(pb.SubmitRequest(model="rm2", batch_size=int(rng.integers(1, 100))), timeout=20.0)
                replies.append((i, t, r.instance_id, ""))
            except grpc.aio.AioRpcError as exc:
                replies.append((i, t, None, exc.code().name))
        n = 0
        while not stop.is_set():
            task = asyncio.create_task(one(n))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            n += 1
            await asyncio.sleep(float(rng.exponential(1.0 / qps)))
        if tasks:
            await asyncio.wait(tasks, timeout=30.0)
        return n

    try:
        await daemon.fleet_tick("start")
        await _wait(lambda: len(ready()) >= 2, 90, "two spot workers")
        first = described(ec2, cfg.cluster)
        out["launched"] = [{"id": iid, "zone": i["Placement"]["AvailabilityZone"],
                            "market": i.get("InstanceLifecycle") or "on-demand"} for iid, i in sorted(first.items())]
        zones = {iid: i["Placement"]["AvailabilityZone"] for iid, i in first.items()}
        st, market = d.status_reply(), daemon.market.spot.market if daemon.market and daemon.market.spot else None
        out["status"] = {   # what costscale status says of the pool: each instance's market, billed $/hr
            "instances": sorted([c.instance_type, c.market, c.zone, c.count] for c in st.instances),
            "cost_per_hour": st.cost_per_hour, "by_market": dict(st.cost_per_hour_by_market),
            "spot_prices": {z: market.price(f"{SPOT_TYPE}@{z}") for z in sorted(set(zones.values()))} if market else {}}
        victim = sorted(zones)[0]
        async with grpc.aio.insecure_channel(f"127.0.0.1:{daemon.port}") as ch:
            load = asyncio.create_task(send_load(pbg.InferenceStub(ch)))
            await _wait(lambda: any(w == victim for _, _, w, _ in replies), 30, "a query on the victim")
            noticed_at, reclaim_at = time.monotonic(), time.time() + notice_s
            spot = daemon.market.spot if daemon.market is not None else None
            ticks = TickCount(daemon)
            imds.interrupt(victim, reclaim_at)
            await _wait(lambda: spot is not None and victim in spot.state.doomed, 20, "the notice at the fleet loop")
            told_s = time.monotonic() - noticed_at
            await _wait(lambda: len(described(ec2, cfg.cluster)) > len(first), 20, "the replacement launch")
            replaced_s = time.monotonic() - noticed_at
            await _wait(lambda: d.workers.get(victim) is None or d.workers[victim].draining, notice_s + 5, "the drain")
            drained_at, drained_before = time.monotonic(), reclaim_at - time.time()
            await _wait(lambda: time.time() >= reclaim_at, notice_s + 5, "the reclaim time")
            ec2.terminate_instances(InstanceIds=[victim])               # EC2 reclaims it
            await _wait(lambda: victim not in d.workers and len(ready()) >= 2, 60, "two workers serving again")
            after = len(replies)
            await _wait(lambda: len(replies) >= after + 10, 30, "queries after the reclaim")
            stop.set()
            sent = await load
        await _wait(lambda: len(replies) >= sent, 30, "every reply")
        new = {iid: i for iid, i in described(ec2, cfg.cluster).items() if iid not in first}
        launched_at = min((t for t, kind, iid in daemon.fleet_events if kind == "launch" and iid in new), default=None)
        read = imds.served.get((victim, "spot/instance-action"), [])
        out.update({
            "imds_reads_of_the_notice": len(read),
            "notice_read_s": round(read[0] - noticed_at, 2) if read else None,
            "notice_to_launch_s": None if launched_at is None else round(launched_at - noticed_at, 2),
            "ticks_before_the_replacement": ticks.between(victim, sorted(new)),
            "fleet_s": cfg.intervals.fleet_s,
        })
        out.update({
            "victim": {"id": victim, "zone": zones[victim]},
            "replacements": [{"id": iid, "zone": i["Placement"]["AvailabilityZone"],
                              "market": i.get("InstanceLifecycle") or "on-demand"} for iid, i in sorted(new.items())],
            "notice_to_fleet_s": round(told_s, 2), "notice_to_replacement_s": round(replaced_s, 2),
            "drained_before_reclaim_s": round(drained_before, 2),
            "sent": sent, "answered": sum(1 for r in replies if r[2]), "errors": sum(1 for r in replies if not r[2]),
            "answered_once": sorted(r[0] for r in replies) == list(range(sent)),
            "on_victim_after_drain": sum(1 for r in replies if r[2] == victim and r[1] > drained_at + 1.0),
            "redispatched": d.redispatched,
        })
        return out
    finally:
        stop.set()
        await daemon.stop(grace=3.0)
        await runner.stop_all()
        imds.close()


def summary_line(o: dict[str, Any]) -> str:
    """One line: the preemption, the replacement, every query answered."""
    rep = ", ".join(f"{r['id']} ({r['market']} in {r['zone']})" for r in o["replacements"]) or "none"
    return (f"spot demo: {len(o['launched'])} spot workers in {', '.join(sorted({x['zone'] for x in o['launched']}))}; "
            f"notice for {o['victim']['id']} in {o['victim']['zone']} -> replacement {rep} "
            f"{o['notice_to_replacement_s']:.1f} s after it{_how_soon(o)}; "
            f"drained {o['drained_before_reclaim_s']:.1f} s before the "
            f"reclaim; {o['answered']}/{o['sent']} queries answered"
            + (" exactly once" if o["answered_once"] else " (NOT each exactly once)")
            + f", {o['errors']} errors, {o['redispatched']} re-run"
            + (f"; status: pool {o['status']['cost_per_hour']:g} $/hr billed" if "status" in o else ""))


def _how_soon(o: dict[str, Any]) -> str:
    """Where the replacement's delay went: the worker's IMDS poll, then the fleet tick."""
    if o.get("notice_read_s") is None or o.get("notice_to_launch_s") is None:
        return ""
    first = " by the first fleet tick after it" if o.get("ticks_before_the_replacement") == 0 else ""
    return (f" (read at the worker's IMDS poll {o['notice_read_s']:.1f} s after it, launched{first} "
            f"{o['notice_to_launch_s']:.1f} s after it)")


async def run_spot_demo(qps: float = 3.0, notice_s: float = 15.0, seed: int = 28, as_json: bool = False) -> int:
    """``costscale demo --spot``: the scenario on the embedded cloud; the summary line (or JSON)."""
    from daemon.local.embedded import EmbeddedCloud

    cloud = EmbeddedCloud("demo")
    try:
        o = await spot_scenario(cloud.endpoint, cloud.state_dir, qps, notice_s, seed)
    finally:
        cloud.stop()
    print(json.dumps(o, sort_keys=True) if as_json else summary_line(o), file=sys.stdout, flush=True)
    ok = o["answered_once"] and not o["errors"] and o["replacements"]
    return 0 if ok else 1


__all__ = ["SPOT_TYPE", "TickCount", "ZONES", "described", "run_spot_demo", "spot_demo_config", "spot_scenario",
           "summary_line"]
