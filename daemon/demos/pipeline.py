"""``costscale demo --pipeline``: a two-task pipeline served live (issue #26).

The embedded cluster of ``costscale demo`` (moto on 127.0.0.1, the real daemon, local ONNX workers
padded to the Kairos rm2 profile) serving the pipeline ``recs``: ``retrieve`` (model ``rm2``) makes
two ``rank`` requests (model ``ranker``) per query, under one end-to-end SLO. Queries name the
pipeline as their application; the load steps up halfway. The fleet plans each task's model for
the load it sees (the ranker's is twice the retriever's) and Loki's round (the pipeline's default
``scaling: loki``, :mod:`daemon.loops.pipeline_loop`) may move workers between the tasks. The summary
shows the end-to-end attainment, each task's requests and workers, the round's plans and moves,
and the dollars.
"""
from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

import grpc
import numpy as np

from daemon.demos.demo_config import DEMO_QOS_MS, demo_config
from daemon.demos.display import LiveDisplay, fmt_pct, summary_table
from daemon.demos.models import ModelLoad, send_load, serving, start_serving, stop_on_signals, tear_down, watch_pool
from daemon.local.embedded import EmbeddedCloud
from scaler.planner.pools import pool_cost

PIPELINE = "recs"
SLO_MS = 1000.0
FACTOR = 2
TASKS = (("retrieve", "rm2"), ("rank", "ranker"))


def pipeline_config(state_dir: Any, endpoint: str, ami: str, budget: float, rate: float) -> Any:
    """The demo's config with the two models (both on the rm2 profile, 350 ms each) and the pipeline."""
    from config.schema import Config

    raw = demo_config(state_dir, endpoint, ami, budget, rate).model_dump()
    raw["models"] = [{**raw["models"][0], "expected_qps": rate},
                     {"name": "ranker", "onnx": "builtin:mlp", "qos_ms": DEMO_QOS_MS, "max_batch": 1000, "profile": "rm2",
                      "expected_qps": FACTOR * rate}]
    raw["model_scaling"]["generate_variants"] = False
    raw["pipelines"] = [{"name": PIPELINE, "slo_ms": SLO_MS, "tasks": [
        {"name": "retrieve", "model": "rm2", "children": [{"task": "rank", "factor": FACTOR}]},
        {"name": "rank", "model": "ranker"}]}]
    return Config.model_validate(raw)


async def run_pipeline_demo(duration: float = 60.0, rate1: float = 3.0, rate2: float = 10.0, budget: float = 2.5,
                            seed: int = 1, as_json: bool = False) -> int:
    """The pipeline demo (module docstring); exit 0 when queries were served end to end and nothing
    was left running, 1 otherwise, 130 on Ctrl-C."""
    from daemon.process import start_with_local_workers
    from dispatcher.proto import costscale_pb2 as pb
    from dispatcher.proto import costscale_pb2_grpc as pbg

    out = sys.stderr if as_json else sys.stdout
    stop = stop_on_signals()
    load = ModelLoad(PIPELINE, SLO_MS, rate1, rate2, duration / 2, application=True)
    cloud = EmbeddedCloud("demo")
    daemon = runner = None
    try:
        cfg = pipeline_config(cloud.state_dir, cloud.endpoint, cloud.ami, budget, rate1)
        print(f"costscale demo --pipeline: moto EC2 on {cloud.endpoint}, budget {budget:g} $/hr; pipeline {PIPELINE} "
              f"(retrieve: rm2 -> {FACTOR} x rank: ranker, end to end {SLO_MS:g} ms) {rate1:g} -> {rate2:g} q/s at "
              f"t={duration / 2:.0f}s", file=out)
        daemon, runner = await start_with_local_workers(cfg, [("rm2", "builtin:mlp", "rm2"), ("ranker", "builtin:mlp", "rm2")],
                                                        profiles_csv=cfg.profiles)
        d = daemon.dispatcher
        prices, ledger = await start_serving(daemon, [m for _, m in TASKS], stop, budget)
        display = LiveDisplay(out)
        workers: list[tuple[float, dict[str, int]]] = []
        rounds = daemon.model_loop.pipelines
        t0 = time.monotonic()

        def tick(el: float, pool: dict[str, int]) -> None:
            workers.append((el, {t: serving(d, m) for t, m in TASKS}))
            if not as_json:
                display.show(int(el >= load.step_at), f"t={el:4.0f}s  {load.rate(el):3.0f} q/s  "
                             + "  ".join(f"{t} {n}" for t, n in workers[-1][1].items())
                             + f" workers  miss {fmt_pct(load.stats.miss_pct())}  Loki: {len(rounds.decisions)} plans, "
                             f"{rounds.moves} moves  pool {' '.join(f'{t}x{n}' for t, n in sorted(pool.items()))}"
                             f"  ${pool_cost(pool, prices):.3f}/hr")
        watcher = asyncio.create_task(watch_pool(daemon, ledger, duration, t0, tick))
        async with grpc.aio.insecure_channel(f"127.0.0.1:{daemon.port}") as ch:
            await send_load(pbg.InferenceStub(ch), pb, load, duration, np.random.default_rng([seed, 26]), stop)
        watcher.cancel()
        interrupted = stop.is_set()
        ledger.close(duration)
        if not as_json:
            display.close()
        steps = {m: sum(d.outcomes.models[m].queries.values()) if m in d.outcomes.models else 0 for _, m in TASKS}
        factor = d.pipelines.measured_factor(PIPELINE, "retrieve", "rank")
        plans = [x[2].plan.step for x in rounds.decisions]
        await daemon.stop(grace=5.0)
        await runner.stop_all()
        live_after = cloud.live_instances(cfg.cluster)
        s = load.stats
        before = {t: max((w[t] for el, w in workers if el < load.step_at), default=0) for t, _ in TASKS}
        after = {t: max((w[t] for el, w in workers if el >= load.step_at), default=0) for t, _ in TASKS}
        result = {"sent": s.sent, "served": s.ok, "errors": dict(s.errors), "error_details": dict(load.details),
                  "slo_attainment": round((s.ok - s.violations) / s.sent, 6) if s.sent else 1.0,
                  "dropped_early": d.pipelines.dropped_early, "requests": steps, "measured_factor": factor,
                  "workers_before_step": before, "workers_after_step": after,
                  "loki": {"plans": len(plans), "accuracy_steps": plans.count("accuracy"), "moves": rounds.moves},
                  "cost_usd": round(ledger.cost_usd, 6), "peak_cost_per_hour": round(ledger.peak_cost_per_hour, 4),
                  "budget_per_hour": budget, "instances_live_after": live_after, "interrupted": interrupted}
        if as_json:
            print(json.dumps(result))
        else:
            rows = [(f"pipeline {PIPELINE} (end to end {SLO_MS:g} ms)",
                     f"{s.sent} sent, {s.ok} served, {100 * result['slo_attainment']:.2f} % within the SLO, "
                     f"{result['dropped_early']} dropped early" + (f", errors {dict(s.errors)}" if s.errors else "")),
                    *((f"  {code}", msg[:100]) for code, msg in sorted(load.details.items())),
                    ("requests per task", ", ".join(f"{t} ({m}) {steps[m]}" for t, m in TASKS)
                     + (f"; measured fan-out {factor:g}" if factor is not None else "")),
                    ("workers per task", ", ".join(f"{t} {before[t]} -> {after[t]}" for t, _ in TASKS)
                     + f" (before / after the step at {load.step_at:.0f} s)"),
                    ("Loki's round", f"{len(plans)} plans ({plans.count('accuracy')} by accuracy scaling), "
                                     f"{rounds.moves} worker(s) moved between tasks"),
                    ("dollars spent", f"${ledger.cost_usd:.4f}; peak {ledger.peak_cost_per_hour:.4f} of {budget:g} $/hr"),
                    ("instances left running", str(live_after or "none"))]
            print(f"\ncostscale demo --pipeline summary" + (" (interrupted)" if interrupted else ""), file=out)
            print(summary_table(rows), file=out)
        if interrupted:
            return 130
        return 0 if not live_after and s.ok > 0 else 1
    finally:
        await tear_down(daemon, runner, cloud)


__all__ = ["PIPELINE", "pipeline_config", "run_pipeline_demo"]
