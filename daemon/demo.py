"""``costscale demo``: the whole product on one machine, against an embedded EC2 (moto) on 127.0.0.1.

Starts moto in server mode on a free loopback port, runs the real daemon (planner, EC2 provider via
boto3 ``endpoint_url``, gRPC dispatcher, fleet loop) against it, one local worker process per
running instance (real ONNX inference padded to the instance type's AWS latency profile), and drives
an open-loop Poisson load through the public gRPC API with a load step half-way. At the end (or on
Ctrl-C) it terminates every instance and stops every process it started.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import numpy as np

from config.schema import Config
from scaler.batch_mix import sample_batches
from scaler.transitions import pool_cost
from sim.metrics import nearest_rank

DEMO_MODEL = "rm2"          # Kairos rm2 profile, QoS 350 ms (Kairos §7): sleeps dominate, robust on 2 cores
DEMO_QOS_MS = 350.0
# the Kairos §7 types (the ones with AWS profiles), each with a cap on how many the demo may run
DEMO_TYPES = {"g4dn.xlarge": 3, "c5n.2xlarge": 3, "r5n.large": 4, "t3.xlarge": 3}


@dataclass
class LoadStats:
    sent: int = 0
    ok: int = 0
    violations: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    latencies_ms: list[float] = field(default_factory=list)
    served_by_type: dict[str, int] = field(default_factory=dict)
    providers: dict[str, int] = field(default_factory=dict)

    def pct(self, q: float) -> float:
        """Nearest-rank percentile, the definition the simulator and the SLO use."""
        return nearest_rank(np.asarray(self.latencies_ms), q)


def demo_config(state_dir: Path, endpoint: str, ami: str, budget: float, rate: float,
                policy: str = "kairos", pinned_pool: dict[str, int] | None = None) -> Config:
    return Config.model_validate({
        "cluster": f"demo-{secrets.token_hex(3)}",
        "region": "us-east-1",
        "budget_per_hour": budget,
        "objective": "min_cost",
        "headroom": 0.5,
        "models": [{"name": DEMO_MODEL, "onnx": "builtin:mlp", "qos_ms": DEMO_QOS_MS, "max_batch": 1000,
                    "profile": DEMO_MODEL}],
        "instance_types": [{"type": t, "max": n} for t, n in DEMO_TYPES.items()],
        "launch": {"ami_id": ami, "tags": {"purpose": "costscale-demo"}},
        "pinned_pool": pinned_pool,
        "dispatcher": {"listen": "127.0.0.1:0", "policy": policy, "on_deadline": "drop",
                       "cluster_token": secrets.token_hex(16)},
        "intervals": {"fleet_s": 4, "model_s": 1, "reconcile_s": 20},
        "workload": {"batch_dist": "deeprecsys", "expected_qps": rate},
        "state_path": str(state_dir / "state.db"),
        "on_shutdown": "terminate",
        "aws": {"endpoint_url": endpoint},
    })


async def _load(target: str, model: str, duration: float, rate1: float, rate2: float, seed: int,
                stats: LoadStats, stop: asyncio.Event, on_tick) -> None:
    """Open-loop Poisson arrivals: rate1 for the first half, rate2 for the second."""
    from dispatcher.proto import costscale_pb2 as pb
    from dispatcher.proto import costscale_pb2_grpc as pbg

    rng = np.random.default_rng(seed)
    batches = sample_batches("deeprecsys", 200_000, rng)
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pbg.InferenceStub(channel)
        pending: set[asyncio.Task[None]] = set()

        async def one(i: int) -> None:
            t0 = time.perf_counter()
            try:
                reply = await stub.Submit(pb.SubmitRequest(model=model, batch_size=int(batches[i % len(batches)]),
                                                           idempotency_key=f"demo-{seed}-{i}"), timeout=10.0)
            except grpc.aio.AioRpcError as exc:
                code = exc.code().name
                stats.errors[code] = stats.errors.get(code, 0) + 1
                return
            ms = (time.perf_counter() - t0) * 1000.0
            stats.ok += 1
            stats.latencies_ms.append(ms)
            if ms > DEMO_QOS_MS:
                stats.violations += 1
            stats.served_by_type[reply.instance_type] = stats.served_by_type.get(reply.instance_type, 0) + 1
            if reply.provider:
                stats.providers[reply.provider] = stats.providers.get(reply.provider, 0) + 1

        start = time.monotonic()
        next_t = 0.0
        i = 0
        last_tick = 0.0
        while not stop.is_set():
            elapsed = time.monotonic() - start
            if elapsed >= duration:
                break
            if elapsed - last_tick >= 0.5:
                last_tick = elapsed
                on_tick(elapsed, rate1 if elapsed < duration / 2 else rate2)
            if elapsed >= next_t:
                task = asyncio.create_task(one(i))
                pending.add(task)
                task.add_done_callback(pending.discard)
                stats.sent += 1
                i += 1
                rate = rate1 if next_t < duration / 2 else rate2
                next_t += float(rng.exponential(1.0 / rate))
                continue
            await asyncio.sleep(min(next_t - elapsed, 0.05))
        if pending:
            await asyncio.wait(pending, timeout=15.0)


def _table(rows: list[tuple[str, str]]) -> str:
    w = max(len(k) for k, _ in rows)
    return "\n".join(f"  {k.ljust(w)}  {v}" for k, v in rows)


async def run_demo(duration: float = 60.0, rate1: float = 12.0, rate2: float = 36.0, budget: float = 2.5,
                   seed: int = 1, as_json: bool = False, quiet: bool = False, policy: str = "kairos",
                   pinned_pool: dict[str, int] | None = None) -> int:
    import boto3
    from moto.server import ThreadedMotoServer

    from daemon.app import Daemon
    from daemon.local_runner import LocalRunner

    out = sys.stderr if as_json else sys.stdout
    # The demo's cloud is moto on loopback: use throwaway credentials so nothing can reach real AWS.
    for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
        os.environ.pop(key, None)
    os.environ.update(AWS_ACCESS_KEY_ID="costscale-demo", AWS_SECRET_ACCESS_KEY="costscale-demo",
                      AWS_DEFAULT_REGION="us-east-1")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)

    port = _free_port()
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    moto.start()
    endpoint = f"http://127.0.0.1:{port}"
    tmp = tempfile.TemporaryDirectory(prefix="costscale-demo-")
    daemon: Daemon | None = None
    runner: LocalRunner | None = None
    stats = LoadStats()
    peak_pool: dict[str, int] = {}
    peak_cost = 0.0
    result: dict[str, Any] = {}
    interrupted = False
    try:
        ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=endpoint)
        images = ec2.describe_images(Owners=["amazon"]).get("Images") or ec2.describe_images().get("Images")
        ami = images[0]["ImageId"]
        cfg = demo_config(Path(tmp.name), endpoint, ami, budget, rate1, policy, pinned_pool)
        catalog = cfg.catalog()
        print(f"costscale demo: moto EC2 on {endpoint}, budget {budget:g} $/hr, model {DEMO_MODEL} "
              f"(QoS p99 {DEMO_QOS_MS:g} ms), load {rate1:g} -> {rate2:g} q/s at t={duration / 2:.0f}s", file=out)

        holder: dict[str, LocalRunner] = {}

        async def on_fleet_change(instances):  # the local runner follows the fleet
            if "runner" in holder:
                await holder["runner"].sync(instances)

        daemon = Daemon(cfg, None, on_fleet_change=on_fleet_change, listen="127.0.0.1:0")
        await daemon.start()
        target = f"127.0.0.1:{daemon.port}"
        runner = LocalRunner(target, cfg.dispatcher.cluster_token or "", [(DEMO_MODEL, "builtin:mlp", DEMO_MODEL)],
                             profiles_csv=cfg.profiles)
        holder["runner"] = runner
        await daemon.fleet_tick("start")

        # wait (bounded) for the first worker to register before sending load
        t_wait = time.monotonic()
        while not stop.is_set() and time.monotonic() - t_wait < 30:
            if len(daemon.dispatcher.workers) > 0:
                break
            await asyncio.sleep(0.2)

        prices = {t: it.price_per_hour for t, it in catalog.items()}

        def tick(elapsed: float, rate: float) -> None:
            nonlocal peak_cost
            pool = daemon.status.pool()
            cost = pool_cost(pool, prices)
            if cost >= peak_cost:
                peak_cost = cost
                peak_pool.clear()
                peak_pool.update(pool)
            if quiet or as_json:
                return
            p99 = stats.pct(99) if stats.latencies_ms else 0.0
            pool_s = " ".join(f"{t}x{n}" for t, n in sorted(pool.items())) or "-"
            line = (f"t={elapsed:4.0f}s  load {rate:4.0f} q/s  sent {stats.sent:5d}  ok {stats.ok:5d}  "
                    f"viol {stats.violations:4d}  p99 {p99:6.1f} ms  workers {len(daemon.dispatcher.workers):2d}  "
                    f"pool {pool_s}  ${cost:.3f}/hr")
            print("\r" + line.ljust(150)[:150], end="", file=out, flush=True)

        await _load(target, DEMO_MODEL, duration, rate1, rate2, seed, stats, stop, tick)
        interrupted = stop.is_set()
        if not (quiet or as_json):
            print(file=out)
        pool_end = daemon.status.pool()
        cost_end = pool_cost(pool_end, prices)
        served_by = dict(sorted(stats.served_by_type.items()))
        # ---- teardown: terminate every instance, stop every process -----------------------------
        await daemon.stop(grace=5.0)
        await runner.stop_all()
        described = ec2.describe_instances(Filters=[{"Name": "tag:costscale:cluster", "Values": [cfg.cluster]}])
        all_inst = [i for r in described["Reservations"] for i in r["Instances"]]
        live_after = [i["InstanceId"] for i in all_inst if i["State"]["Name"] in ("pending", "running")]
        result = {
            "sent": stats.sent, "served": stats.ok, "slo_violations": stats.violations,
            "errors": stats.errors, "p50_ms": round(stats.pct(50), 2), "p99_ms": round(stats.pct(99), 2),
            "qos_ms": DEMO_QOS_MS, "served_by_type": served_by, "providers": stats.providers,
            "pool_at_end": pool_end, "cost_per_hour_at_end": round(cost_end, 4),
            "peak_pool": dict(peak_pool), "peak_cost_per_hour": round(peak_cost, 4), "budget_per_hour": budget,
            "instances_launched": len(all_inst), "instances_live_after": live_after,
            "worker_pids": runner.started_pids, "workers_alive_after": runner.alive_pids(),
            "plans_applied": daemon.status.plans_applied, "interrupted": interrupted,
            "dispatcher": daemon.dispatcher.stats() if daemon.dispatcher else {},
        }
        if as_json:
            print(json.dumps(result))
        else:
            viol = 100.0 * stats.violations / stats.ok if stats.ok else 0.0
            err = ", ".join(f"{k} {v}" for k, v in sorted(stats.errors.items())) or "none"
            print("\ncostscale demo summary" + (" (interrupted)" if interrupted else ""), file=out)
            print(_table([
                ("queries sent / served", f"{stats.sent} / {stats.ok}   errors: {err}"),
                ("SLO violations", f"{stats.violations} ({viol:.1f}%) over p99 target {DEMO_QOS_MS:g} ms"),
                ("latency p50 / p99", f"{stats.pct(50):.1f} / {stats.pct(99):.1f} ms (client-side, end to end)"),
                ("served by type", ", ".join(f"{t} {n}" for t, n in served_by.items()) or "-"),
                ("execution providers", ", ".join(f"{p} {n}" for p, n in stats.providers.items()) or "-"),
                ("peak pool", " ".join(f"{t}x{n}" for t, n in sorted(peak_pool.items())) or "-"),
                ("peak $/hr vs budget", f"{peak_cost:.4f} / {budget:g}"),
                ("pool at end of load", " ".join(f"{t}x{n}" for t, n in sorted(pool_end.items())) or "-"),
                ("instances launched", f"{len(all_inst)} (all terminated: {'yes' if not live_after else 'NO ' + str(live_after)})"),
                ("worker processes", f"{len(runner.started_pids)} started, {len(runner.alive_pids())} left running"),
            ]), file=out)
        ok = not live_after and not runner.alive_pids() and stats.ok > 0
        return 0 if ok or interrupted else 1
    finally:
        if daemon is not None and not daemon._stop.is_set():
            try:
                await daemon.stop(grace=2.0)
            except Exception:
                logging.getLogger("costscale").exception("demo: stopping the daemon failed")
        if runner is not None:
            await runner.stop_all()
        moto.stop()
        tmp.cleanup()


def _free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
