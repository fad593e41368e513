"""Acceptance: model-vertical + VM scaling end to end (INFaaS §4.2) against moto in server mode.

The real daemon (planner, EC2 provider via boto3, gRPC dispatcher, fleet loop, model loop) runs
in-process; one local worker process per running instance (real ONNX, padded to the Kairos rm2
profile of its type). Load: high -> low -> spike. Checks: at low load the surplus instances are
parked (their variant unloaded, no queries) and then retired, so the pool's $/hr falls; at the
spike the variant is loaded back onto a still-parked instance (a replica in well under a second)
before the fleet launches anything, and then the fleet adds instances; SLO violations stay within
the target in the high and low phases and once the spike's launched workers serve (the transient
before that lasts as long as a worker process takes to start here; the replay measures attainment
through boot delays, on virtual time).
"""
from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Awaitable

import grpc
import numpy as np
import pytest

from config.schema import Config
from daemon.demos.demo_config import demo_config
from variants.infaas.model_decision import ModelLoopParams
from scaler.planner.batch_mix import sample_batches
from variants.infaas.vm_autoscaler import VmParams
from tests.load_helpers import poisson_phase

pytestmark = pytest.mark.slow

VIOLATION_TARGET = 0.10   # at most 10 % of the steady phases' queries over the 350 ms QoS target or failed
PARK_S = 8.0              # surplus stays parked this long (production default 120 s)


async def _phase(stub, pb, rate: float, duration: float, rng, batches, out: dict, phase: str = "",
                 until=None, max_duration: float = 0.0) -> None:  # noqa: ANN001
    """Poisson arrivals at ``rate`` for ``duration`` s; with ``until``, go on (up to
    ``max_duration``) until it returns True."""
    async def one(b: int) -> None:
        t0 = time.perf_counter()
        try:
            r = await stub.Submit(pb.SubmitRequest(application="rm2", batch_size=b), timeout=10.0)
        except grpc.aio.AioRpcError as exc:
            out["errors"][exc.code().name] = out["errors"].get(exc.code().name, 0) + 1
            out["by_phase"][phase] = out["by_phase"].get(phase, 0) + 1
            out["details"].setdefault(exc.code().name, set()).add((exc.details() or "")[:90])
            return
        ms = (time.perf_counter() - t0) * 1000.0
        out["ok"] += 1
        out["violations"] += ms > 350.0
        out["late_by_phase"][phase] = out["late_by_phase"].get(phase, 0) + (ms > 350.0)
        out["variants"].add(r.variant)

    def send(_: int) -> Awaitable[None]:
        b = int(batches[out["sent"] % len(batches)])
        out["sent"] += 1
        out["sent_by_phase"][phase] = out["sent_by_phase"].get(phase, 0) + 1
        return one(b)

    await poisson_phase(send, rate, duration, rng, until, max_duration)


def test_load_fall_and_spike(moto_endpoint: str, tmp_path: Path) -> None:
    asyncio.run(asyncio.wait_for(_scenario(moto_endpoint, tmp_path), timeout=240))


async def _scenario(endpoint: str, tmp_path: Path) -> None:
    import boto3

    from daemon.app import Daemon
    from daemon.local.runner import LocalRunner
    from dispatcher.proto import costscale_pb2 as pb, costscale_pb2_grpc as pbg

    ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=endpoint)
    ami = ec2.describe_images()["Images"][0]["ImageId"]
    base = demo_config(tmp_path, endpoint, ami, budget=2.5, rate=2.0)
    raw = base.model_dump()
    raw["models"][0]["application"] = "rm2"
    raw["intervals"] = {"fleet_s": 2, "model_s": 0.5, "reconcile_s": 30, "scale_in_s": 2}   # compressed like PARK_S
    raw["model_scaling"]["vm_park_s"] = PARK_S
    cfg = Config.model_validate(raw)
    catalog = cfg.catalog()
    params = ModelLoopParams(headroom=cfg.headroom,
                             vm=VmParams(add_cooldown_s=4.0, remove_cooldown_s=3.0, min_workers=1))
    holder: dict[str, LocalRunner] = {}

    async def on_fleet_change(instances):  # noqa: ANN001
        if "r" in holder:
            await holder["r"].sync(instances)

    daemon = Daemon(cfg, None, on_fleet_change=on_fleet_change, listen="127.0.0.1:0", model_params=params,
                    generate_variants=True)
    await daemon.start()
    runner = LocalRunner(f"127.0.0.1:{daemon.port}", daemon.dispatcher.cluster_token(),
                         [("rm2", "builtin:mlp", "rm2")], profiles_csv=cfg.profiles)
    holder["r"] = runner
    try:
        await daemon.fleet_tick("start")
        # the load starts once the whole first pool serves (on a loaded machine the local workers
        # take long to start, and the high phase then ran on a pool still booting)
        t0 = time.monotonic()
        while (len(daemon.dispatcher.workers) < sum(daemon.status.target.values())
               and time.monotonic() - t0 < 90):
            await asyncio.sleep(0.2)
        assert daemon.dispatcher.workers, "no worker registered"

        def cost() -> float:
            return sum(catalog[t].price_per_hour * n for t, n in daemon.status.pool().items())

        rng = np.random.default_rng(7)
        batches = sample_batches("deeprecsys", 50_000, rng)
        stats = {"sent": 0, "ok": 0, "violations": 0, "errors": {}, "details": {}, "by_phase": {}, "variants": set(),
                 "sent_by_phase": {}, "late_by_phase": {}}
        loop = daemon.model_loop
        async with grpc.aio.insecure_channel(f"127.0.0.1:{daemon.port}") as ch:
            stub = pbg.InferenceStub(ch)
            await _phase(stub, pb, 12.0, 10.0, rng, batches, stats, "high")
            cost_high, pool_high = cost(), daemon.status.pool()
            unloads_before = loop and sum(1 for p in loop.applied if p.action == "unload")
            t_low = time.monotonic()
            unload_ops_before = daemon.dispatcher.unload_ops

            def low_done() -> bool:  # one parked instance retired (cost fell) and one still parked
                ev = [k for t, k, _ in daemon.fleet_events if t >= t_low]
                return "retire" in ev and bool(daemon.dispatcher.parked_ids) and cost() < cost_high

            await _phase(stub, pb, 2.0, 12.0, rng, batches, stats, "low", until=low_done, max_duration=45.0)
            cost_low, pool_low = cost(), daemon.status.pool()
            parked_at_low = sorted(daemon.dispatcher.parked_ids)
            unloads_low = sum(1 for p in loop.applied if p.action == "unload") - unloads_before
            unload_ops_low = daemon.dispatcher.unload_ops - unload_ops_before
            loads_before = sum(1 for p in loop.applied if p.action == "load")
            load_ops_before = daemon.dispatcher.load_ops
            launched_before = len(daemon.status.instances)
            t_spike = time.monotonic()

            def scaled_out() -> bool:  # the fleet launched for the spike and every target worker serves
                return (len(daemon.status.instances) > launched_before
                        and len(daemon.dispatcher.workers) - len(daemon.dispatcher.parked_ids)
                        >= sum(daemon.status.target.values()))

            # the spike's transient (until the launched workers serve) lasts as long as a worker process
            # takes to start on this machine; the replay measures attainment through boot delays on
            # virtual time. Here the SLO is asserted on the steady phases, the spike's after scale-out.
            await _phase(stub, pb, 24.0, 10.0, rng, batches, stats, "spike", until=scaled_out, max_duration=60.0)
            t_ready = time.monotonic() - t_low
            await _phase(stub, pb, 24.0, 8.0, rng, batches, stats, "spike-served")
            loads_spike = sum(1 for p in loop.applied if p.action == "load") - loads_before
            load_ops_spike = daemon.dispatcher.load_ops - load_ops_before
            launched_after = len(daemon.status.instances)
            cost_spike, pool_spike = cost(), daemon.status.pool()
        events = [(round(t - t_low, 1), k, i) for t, k, i in daemon.fleet_events if t >= t_low]
        spike_ev = [(t, k, i) for t, k, i in daemon.fleet_events if t >= t_spike]
        first_unpark = next((t for t, k, _ in spike_ev if k == "unpark"), None)
        first_launch = next((t for t, k, _ in spike_ev if k == "launch"), None)
        # a query refused or timed out counts as a violation too
        viol = (stats["violations"] + sum(stats["errors"].values())) / max(stats["sent"], 1)
        steady = ("high", "low", "spike-served")
        steady_sent = sum(stats["sent_by_phase"].get(p, 0) for p in steady)
        steady_viol = sum(stats["late_by_phase"].get(p, 0) + stats["by_phase"].get(p, 0)
                          for p in steady) / max(steady_sent, 1)
        print(f"\nmodel-scaling e2e: sent {stats['sent']} served {stats['ok']} errors {stats['errors']}; "
              f"SLO violations {stats['violations']} ({viol:.1%} of all; {steady_viol:.1%} outside the spike's "
              f"transient, target <= {VIOLATION_TARGET:.0%}); scaled out and serving {t_ready:.1f} s after the "
              f"low phase began; sent/late/errors by phase {stats['sent_by_phase']} {stats['late_by_phase']} "
              f"{stats['by_phase']}")
        print(f"cost $/hr: high {cost_high:.3f} {pool_high} -> low {cost_low:.3f} {pool_low} -> "
              f"spike {cost_spike:.3f} {pool_spike}; variant unloads at low {unload_ops_low} (model loop "
              f"{unloads_low}), loads at spike {load_ops_spike} (model loop {loads_spike}); parked when the spike "
              f"came {parked_at_low}; instances known before/after spike {launched_before}/{launched_after}; "
              f"variants served {sorted(stats['variants'])}; hint {daemon.capacity_hint}")
        print(f"  fleet events from the low phase on (s after it began): {events}")
        print(f"  spike began at {t_spike - t_low:.1f} s; first unpark (variant loaded back) "
              f"{'-' if first_unpark is None else f'{first_unpark - t_low:.1f} s'}, first launch "
              f"{'-' if first_launch is None else f'{first_launch - t_low:.1f} s'}; unparks took "
              f"{[round(x) for x in daemon.unpark_ms]} ms")
        print(f"  errors by phase: {stats['by_phase']}")
        print("  variants: " + ", ".join(f"{n} ({m.hardware}, speed x{m.speed_factor:.2f}, acc {m.accuracy:.3f})"
                                         for n, m in sorted(daemon.dispatcher._variant_meta.items())))
        print("  placements: " + ", ".join(f"{p.action} {p.variant}@{daemon.dispatcher.workers[p.worker].instance_type if p.worker in daemon.dispatcher.workers else p.worker}" for p in loop.applied))
        for code, msgs in stats["details"].items():
            print(f"  {code}: {sorted(msgs)[:4]}")
        assert stats["ok"] > 0 and stats["ok"] + sum(stats["errors"].values()) == stats["sent"]
        assert steady_viol <= VIOLATION_TARGET
        assert cost_low < cost_high, "the pool did not get cheaper at low load"
        assert unload_ops_low >= 1 and parked_at_low, "no variant instance was scaled down at low load"
        assert loop.rounds > 0 and loop.failed == []
        assert first_unpark is not None and load_ops_spike >= 1, "the spike did not load a variant back first"
        assert launched_after > launched_before and first_launch is not None, "no instance was added at the spike"
        assert first_unpark < first_launch, "instances were launched before the warm replica was used"
        # README "Scale-in parks first": an unparked replica has its variants back well under a second
        assert daemon.unpark_ms and max(daemon.unpark_ms) < 1000.0, daemon.unpark_ms
        assert cost_spike > cost_low
        assert max(cost_high, cost_spike) <= cfg.budget_per_hour + 1e-9
    finally:
        await daemon.stop(grace=3.0)
        await runner.stop_all()
