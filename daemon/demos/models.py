"""``costscale demo --models 2``: two models on one budget, live (issue #24 "Live").

The embedded cluster of ``costscale demo`` (moto on 127.0.0.1, the real daemon, local ONNX workers
padded to the AWS profiles) serving two models with their own SLOs: ``rm2`` (Kairos rm2, 350 ms)
and ``dien`` (Kairos dien profile, a 100 ms SLO here). Each model's Poisson load steps up at its own
time (rm2 at a third of the run, dien at two thirds), so the pool grows first for one model, then
for the other; the summary shows each model's workers before and after its step, its SLO
attainment, and the dollars against the joint hindsight reference (``sim.replay.baselines``).
"""
from __future__ import annotations

import asyncio
import json
import math
import signal
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import grpc
import numpy as np

from daemon.demos.basic import hindsight_cost
from daemon.demos.demo_config import DEMO_QOS_MS, demo_config
from daemon.demos.display import LiveDisplay, fmt_pct, summary_table
from daemon.demos.load import LoadStats
from daemon.local.embedded import EmbeddedCloud
from scaler.planner.batch_mix import sample_batches
from scaler.planner.pools import pool_cost
from sim.replay.ledger import CostLedger

#: the second model: the Kairos dien profile with a 100 ms SLO (its profile's p99 at batch 1000
#: is 19-188 ms by type, so the planner has a real choice of types)
SECOND = ("dien", 100.0)


@dataclass
class ModelLoad:
    """One model's scripted load: ``low`` q/s, ``high`` from ``step_at`` s."""

    name: str
    qos_ms: float
    low: float
    high: float
    step_at: float
    stats: LoadStats = field(default_factory=LoadStats)
    workers: list[tuple[float, int]] = field(default_factory=list)    # (t, workers serving it)
    application: bool = False          # its queries name it as their application (a pipeline's)
    details: dict[str, str] = field(default_factory=dict)     # error code -> its first message

    def __post_init__(self) -> None:
        self.stats.qos_ms = self.qos_ms

    def rate(self, t: float) -> float:
        return self.low if t < self.step_at else self.high


async def send_load(stub: Any, pb: Any, load: ModelLoad, duration: float, rng: np.random.Generator,
                stop: asyncio.Event) -> None:
    """Open-loop Poisson arrivals of ``load`` for ``duration`` s."""
    batches = sample_batches("deeprecsys", 100_000, rng)
    pending: set[asyncio.Task[None]] = set()

    async def one(i: int) -> None:
        t0 = time.perf_counter()
        try:
            name = {"application" if load.application else "model": load.name}
            reply = await stub.Submit(pb.SubmitRequest(**name, batch_size=int(batches[i % len(batches)])), timeout=10.0)
        except grpc.aio.AioRpcError as exc:
            load.stats.record_error(exc.code().name)
            load.details.setdefault(exc.code().name, exc.details() or "")
            return
        load.stats.record_served((time.perf_counter() - t0) * 1000.0, time.monotonic(), reply.instance_type,
                                 reply.provider)

    start, next_t, i = time.monotonic(), 0.0, 0
    while not stop.is_set():
        now = time.monotonic() - start
        if now >= duration:
            break
        if now >= next_t:
            task = asyncio.create_task(one(i))
            pending.add(task)
            task.add_done_callback(pending.discard)
            load.stats.sent += 1
            load.stats.sent_log.append((now, int(batches[i % len(batches)])))
            i += 1
            next_t += float(rng.exponential(1.0 / load.rate(next_t)))
            continue
        await asyncio.sleep(min(next_t - now, 0.05))
    if pending:
        await asyncio.wait(pending, timeout=15.0)


def stop_on_signals() -> asyncio.Event:
    """An event SIGINT or SIGTERM sets: Ctrl-C ends a demo's load, then it prints its summary."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop


def serving(d: Any, model: str) -> int:
    """Workers of the dispatcher ``d`` taking ``model``'s queries (assigned to it, not draining)."""
    return sum(1 for iid, w in d.workers.items() if d.serves.get(iid) == model and not w.draining)


async def start_serving(daemon: Any, models: Sequence[str], stop: asyncio.Event, budget: float,
                        wait_s: float = 60.0) -> tuple[dict[str, float], CostLedger]:
    """A demo's start: the first fleet tick, then up to ``wait_s`` until each of ``models`` has a
    serving worker; the prices and a cost ledger from the pool held then."""
    await daemon.fleet_tick("start")
    t_wait = time.monotonic()
    while not stop.is_set() and time.monotonic() - t_wait < wait_s and any(serving(daemon.dispatcher, m) < 1
                                                                            for m in models):
        await asyncio.sleep(0.2)
    prices = daemon.cfg.prices(allowed_only=True)
    ledger = CostLedger(prices, budget)
    ledger.observe(0.0, daemon.status.pool())
    return prices, ledger


async def watch_pool(daemon: Any, ledger: CostLedger, duration: float, t0: float,
                     on_tick: Callable[[float, dict[str, int]], None], every_s: float = 0.5) -> None:
    """Until cancelled, every ``every_s``: the pool the daemon holds, its dollars into ``ledger`` (up
    to ``duration`` s of load), then ``on_tick(s since t0, pool)`` (the demo's display)."""
    while True:
        el = time.monotonic() - t0
        pool = daemon.status.pool()
        ledger.observe(min(el, duration), pool)
        on_tick(el, pool)
        await asyncio.sleep(every_s)


async def tear_down(daemon: Any, runner: Any, cloud: EmbeddedCloud) -> None:
    """A demo's last step, whatever happened: the daemon stopped if it still runs, the local workers,
    the embedded cloud."""
    if daemon is not None and not daemon._stop.is_set():
        await daemon.stop(grace=2.0)
    if runner is not None:
        await runner.stop_all()
    cloud.stop()


async def run_models_demo(duration: float = 90.0, budget: float = 2.5, seed: int = 1, as_json: bool = False) -> int:
    """The two-model demo (module docstring); exit 0 when both models were served and nothing was
    left running, 1 otherwise, 130 on Ctrl-C."""
    from daemon.process import start_with_local_workers
    from dispatcher.proto import costscale_pb2 as pb
    from dispatcher.proto import costscale_pb2_grpc as pbg

    out = sys.stderr if as_json else sys.stdout
    stop = stop_on_signals()
    # the joint plan (headroom 0.5): rm2 g4dn.xlarge + r5n.large x1 -> x2 at 16 q/s; dien r5n.large x1 -> x2 at 30
    loads = [ModelLoad("rm2", DEMO_QOS_MS, 5.0, 16.0, duration / 3),
             ModelLoad(SECOND[0], SECOND[1], 5.0, 30.0, 2 * duration / 3)]
    cloud = EmbeddedCloud("demo")
    daemon = runner = None
    try:
        raw = demo_config(cloud.state_dir, cloud.endpoint, cloud.ami, budget, loads[0].low).model_dump()
        raw["models"] = [{**raw["models"][0], "expected_qps": loads[0].low},
                         {"name": SECOND[0], "onnx": "builtin:mlp", "qos_ms": SECOND[1], "max_batch": 1000,
                          "profile": SECOND[0], "expected_qps": loads[1].low}]
        from config.schema import Config

        cfg = Config.model_validate(raw)
        print(f"costscale demo --models 2: moto EC2 on {cloud.endpoint}, budget {budget:g} $/hr; "
              + "; ".join(f"{m.name} (p99 {m.qos_ms:g} ms) {m.low:g} -> {m.high:g} q/s at t={m.step_at:.0f}s"
                          for m in loads), file=out)
        daemon, runner = await start_with_local_workers(cfg, [(m.name, "builtin:mlp", m.name) for m in loads],
                                                        profiles_csv=cfg.profiles)
        d = daemon.dispatcher
        prices, ledger = await start_serving(daemon, [m.name for m in loads], stop, budget)
        display = LiveDisplay(out)
        t0 = time.monotonic()

        def tick(el: float, pool: dict[str, int]) -> None:
            for m in loads:
                m.workers.append((el, serving(d, m.name)))
            if not as_json:
                phase = sum(el >= m.step_at for m in loads)
                display.show(phase, f"t={el:4.0f}s  " + "  ".join(
                    f"{m.name} {m.rate(el):3.0f} q/s {serving(d, m.name)} workers miss {fmt_pct(m.stats.miss_pct())}"
                    for m in loads) + f"  pool {' '.join(f'{t}x{n}' for t, n in sorted(pool.items()))}"
                    f"  ${pool_cost(pool, prices):.3f}/hr")
        watcher = asyncio.create_task(watch_pool(daemon, ledger, duration, t0, tick))
        async with grpc.aio.insecure_channel(f"127.0.0.1:{daemon.port}") as ch:
            stub = pbg.InferenceStub(ch)
            await asyncio.gather(*(send_load(stub, pb, m, duration, np.random.default_rng([seed, k]), stop)
                                   for k, m in enumerate(loads)))
        watcher.cancel()
        interrupted = stop.is_set()
        ledger.close(duration)
        if not as_json:
            display.close()
        hindsight = math.nan if interrupted else hindsight_cost(cfg, daemon.profiles,
                                                                {m.name: m.stats for m in loads}, duration)
        await daemon.stop(grace=5.0)
        await runner.stop_all()
        live_after = cloud.live_instances(cfg.cluster)
        result = {"cost_usd": round(ledger.cost_usd, 6), "hindsight_cost_usd": None if math.isnan(hindsight)
                  else round(hindsight, 6), "peak_cost_per_hour": round(ledger.peak_cost_per_hour, 4),
                  "budget_per_hour": budget, "instances_live_after": live_after, "interrupted": interrupted,
                  "models": {m.name: _model_summary(m) for m in loads}}
        if as_json:
            print(json.dumps(result))
        else:
            rows = [(f"{m.name} (p99 {m.qos_ms:g} ms)",
                     f"{s['sent']} sent, {s['served']} served, {100 * s['slo_attainment']:.2f} % within SLO; workers "
                     f"{s['workers_before_step']} before its step at {m.step_at:.0f} s, {s['workers_peak']} after")
                    for m, s in ((m, result["models"][m.name]) for m in loads)]
            rows.append(("dollars spent", f"${ledger.cost_usd:.4f}" + ("" if math.isnan(hindsight) or hindsight <= 0 else
                         f" (joint hindsight reference ${hindsight:.4f}, {ledger.cost_usd / hindsight:.2f}x)")))
            rows.append(("peak $/hr vs budget", f"{ledger.peak_cost_per_hour:.4f} / {budget:g}"))
            rows.append(("instances left running", str(live_after or "none")))
            print("\ncostscale demo --models 2 summary" + (" (interrupted)" if interrupted else ""), file=out)
            print(summary_table(rows), file=out)
        if interrupted:
            return 130
        return 0 if not live_after and all(m.stats.ok > 0 for m in loads) else 1
    finally:
        await tear_down(daemon, runner, cloud)


def _model_summary(m: ModelLoad) -> dict[str, Any]:
    before = [n for t, n in m.workers if t < m.step_at]
    after = [n for t, n in m.workers if t >= m.step_at]
    s = m.stats
    within = s.ok - s.violations
    return {"sent": s.sent, "served": s.ok, "errors": dict(s.errors), "qos_ms": m.qos_ms,
            "slo_attainment": round(within / s.sent, 6) if s.sent else 1.0,
            "workers_before_step": max(before, default=0), "workers_peak": max(after, default=0)}


__all__ = ["ModelLoad", "run_models_demo", "send_load", "serving", "start_serving", "stop_on_signals", "tear_down",
           "watch_pool"]
