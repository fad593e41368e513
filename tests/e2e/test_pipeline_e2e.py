"""Acceptance (issue #26 "Execution", live): pipeline queries through the real daemon in-process
against moto in server mode, with local worker processes. A pipeline ``recs`` retrieves with ``rm2``
and ranks each result with ``ranker`` (2 ranker requests per query); both models run the demo MLP
padded to the Kairos rm2 profile. Every query gets one answer, end to end, with the variants that
served it; each step is a query of its model, so the fleet sees the ranker's load double the
retriever's, and its plan gives each model the capacity its own load needs through a step of the
pipeline's rate.
"""
from __future__ import annotations

import asyncio
import time
from pathlib import Path

import grpc
import numpy as np
import pytest

from tests.load_helpers import poisson_phase
from tests.e2e.test_two_models_e2e import WORKER_MODELS, rm2_and_ranker

pytestmark = pytest.mark.slow

LOW_QPS, STEP_QPS = 2.0, 10.0
SLO_MS = 1000.0


def test_pipeline_queries_are_served_end_to_end_and_the_fleet_sees_each_task(moto_endpoint: str, tmp_path: Path) -> None:
    asyncio.run(asyncio.wait_for(_scenario(moto_endpoint, tmp_path), timeout=280))


async def _scenario(endpoint: str, tmp: Path) -> None:
    from daemon.process import start_with_local_workers
    from dispatcher.proto import costscale_pb2 as pb, costscale_pb2_grpc as pbg

    cfg = rm2_and_ranker(endpoint, tmp, LOW_QPS, 2 * LOW_QPS, pipelines=[{"name": "recs", "slo_ms": SLO_MS, "tasks": [
        {"name": "retrieve", "model": "rm2", "children": [{"task": "rank", "factor": 2}]},
        {"name": "rank", "model": "ranker"}]}])
    daemon, runner = await start_with_local_workers(cfg, WORKER_MODELS, generate_variants=False)
    d = daemon.dispatcher
    out: list[tuple[str, float | None, str, bool]] = []     # (phase, ms, variants or error code, slo_met)
    sent = {"n": 0}

    def serving(model: str) -> int:
        return sum(1 for iid in d.workers if d.serves.get(iid) == model and not d.workers[iid].draining)

    async def phase(stub, name: str, rate: float, secs: float, until=None, max_s: float = 0.0) -> None:  # noqa: ANN001
        rng = np.random.default_rng(len(out) + 11)

        async def one(_: int) -> None:
            sent["n"] += 1
            t0 = time.perf_counter()
            try:
                r = await stub.Submit(pb.SubmitRequest(application="recs", batch_size=int(rng.integers(1, 100))),
                                      timeout=10.0)
            except grpc.aio.AioRpcError as exc:
                out.append((name, None, exc.code().name, False))
                return
            out.append((name, (time.perf_counter() - t0) * 1000.0, r.variant, r.slo_met))

        await poisson_phase(one, rate, secs, rng, until, max_s, tick_s=0.02)

    try:
        await daemon.fleet_tick("start")
        t0 = time.monotonic()
        while (serving("rm2") < 1 or serving("ranker") < 1) and time.monotonic() - t0 < 90:
            await asyncio.sleep(0.2)
        assert serving("rm2") >= 1 and serving("ranker") >= 1, f"workers per model: {d.serves}"
        low_shares = daemon.shares()
        async with grpc.aio.insecure_channel(f"127.0.0.1:{daemon.port}") as ch:
            stub = pbg.InferenceStub(ch)
            await phase(stub, "low", LOW_QPS, 10.0)
            await phase(stub, "step", STEP_QPS, 8.0)      # the fleet's next plans see the step
            await phase(stub, "high", STEP_QPS, 10.0)
        high_shares = daemon.shares()
        plan = daemon.status.plan.to_dict()["models"] if daemon.status.plan else {}
        by = {p: [o for o in out if o[0] == p] for p in ("low", "step", "high")}
        for p, rows in by.items():
            ok = [o for o in rows if o[1] is not None]
            print(f"  {p}: {len(rows)} sent, {len(ok)} answered, {sum(1 for o in ok if o[3])} within the SLO, "
                  f"errors {sorted({o[2] for o in rows if o[1] is None})}")
        steps = {m: sum(d.outcomes.models[m].queries.values()) for m in ("rm2", "ranker")}
        pipeline = d.outcomes.models["recs"].queries
        loki = daemon.model_loop.pipelines
        rounds = list(loki.decisions)
        print(f"pipeline e2e: shares {low_shares} -> {high_shares}; steps per model {steps}; pipeline outcomes "
              f"{dict(pipeline)}; measured factor {d.pipelines.measured_factor('recs', 'retrieve', 'rank')}; plan {plan}; "
              f"Loki's round: {len(rounds)} plans, steps {[x[2].plan.step for x in rounds]}, {loki.moves} moves")
        # Loki's round ran live over the pipeline's workers (the default scaling), at the pipeline's rate
        assert rounds and all(set(x[2].task_of.values()) <= {"retrieve", "rank"} for x in rounds)
        # every query got exactly one answer (a reply or one typed error), recorded once
        assert len(out) == sent["n"] and sum(pipeline.values()) == sent["n"]
        # served end to end, by both tasks, within the SLO in the steady phases
        steady = by["low"] + by["high"]
        assert all(o[1] is not None for o in steady), sorted({o[2] for o in steady if o[1] is None})
        assert all(o[2].startswith("retrieve=rm2;rank=ranker") for o in steady)
        assert sum(1 for o in steady if o[3]) >= 0.99 * len(steady)
        # each step is a query of its model: two rank requests per retrieval
        assert steps["ranker"] == 2 * steps["rm2"] and d.pipelines.measured_factor("recs", "retrieve", "rank") == 2.0
        # the fleet planned for each task's load: the ranker's demand is twice the retriever's, and the
        # plan gives each model the capacity its own demand needs (by more workers or by other types:
        # one run grew rm2 to g4dn + 2 r5n, another moved both models to one r5n.large each)
        assert plan["ranker"]["demand_qps"] == pytest.approx(2 * plan["rm2"]["demand_qps"], rel=0.25)
        assert all(plan[m]["capacity_qps"] >= plan[m]["demand_qps"] for m in ("rm2", "ranker"))
    finally:
        await daemon.stop(grace=3.0)
        await runner.stop_all()
