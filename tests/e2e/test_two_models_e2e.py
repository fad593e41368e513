"""Acceptance (issue #24 "Live"): two models through the real daemon in-process against moto in
server mode, with local worker processes. Each model's queries are served only by the workers the
joint plan gives it, and both SLOs hold through a load step of the second model, whose workers grow
while the first model's stay as they were.

Both models run the demo MLP padded to the Kairos rm2 profile (QoS 350 ms): ``rm2`` itself, and
``ranker`` (profile rm2: the same latency, its own SLO, demand window and workers).
"""
from __future__ import annotations

import asyncio
import time
from pathlib import Path

import grpc
import numpy as np
import pytest

from config.schema import Config
from daemon.demos.demo_config import demo_config
from tests.load_helpers import poisson_phase

pytestmark = pytest.mark.slow

LOW_QPS, STEP_QPS = 2.0, 24.0
SLO_MS = 350.0


def test_two_models_each_on_its_own_workers_through_a_step(moto_endpoint: str, tmp_path: Path) -> None:
    asyncio.run(asyncio.wait_for(_scenario(moto_endpoint, tmp_path), timeout=280))


def rm2_and_ranker(endpoint: str, tmp: Path, rm2_qps: float, ranker_qps: float, **extra) -> Config:  # noqa: ANN003
    """The demo's config with two models on rm2's profile (QoS 350 ms), declared at these rates;
    ``extra`` top-level fields over it. The local workers: :data:`WORKER_MODELS`."""
    import boto3

    ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=endpoint)
    ami = ec2.describe_images()["Images"][0]["ImageId"]
    raw = demo_config(tmp, endpoint, ami, budget=2.5, rate=rm2_qps).model_dump()
    raw["models"] = [{**raw["models"][0], "expected_qps": rm2_qps},
                     {"name": "ranker", "onnx": "builtin:mlp", "qos_ms": SLO_MS, "max_batch": 1000, "profile": "rm2",
                      "expected_qps": ranker_qps}]
    raw["intervals"] = {"fleet_s": 3, "model_s": 0.5, "reconcile_s": 30}
    raw["model_scaling"]["generate_variants"] = False
    return Config.model_validate({**raw, **extra})


WORKER_MODELS = [("rm2", "builtin:mlp", "rm2"), ("ranker", "builtin:mlp", "rm2")]


async def _scenario(endpoint: str, tmp: Path) -> None:
    from daemon.process import start_with_local_workers
    from dispatcher.proto import costscale_pb2 as pb, costscale_pb2_grpc as pbg

    cfg = rm2_and_ranker(endpoint, tmp, LOW_QPS, LOW_QPS)
    daemon, runner = await start_with_local_workers(cfg, WORKER_MODELS, generate_variants=False)
    d = daemon.dispatcher
    out: list[tuple[str, str, float | None, str, str]] = []   # (phase, model, ms, worker, model it served)

    def serving(model: str) -> int:
        return sum(1 for iid in d.workers if d.serves.get(iid) == model and not d.workers[iid].draining)

    async def phase(stub, name: str, rates: dict[str, float], secs: float, until=None, max_s: float = 0.0) -> None:  # noqa: ANN001
        rng = np.random.default_rng(len(out) + 7)

        async def one(model: str) -> None:
            t0 = time.perf_counter()
            try:
                r = await stub.Submit(pb.SubmitRequest(model=model, batch_size=int(rng.integers(1, 200))), timeout=10.0)
            except grpc.aio.AioRpcError as exc:
                out.append((name, model, None, exc.code().name, exc.details() or ""))
                return
            out.append((name, model, (time.perf_counter() - t0) * 1000.0, r.instance_id, d.serves.get(r.instance_id, "")))

        await asyncio.gather(*(poisson_phase(lambda _, m=m: one(m), q, secs, rng, until, max_s, tick_s=0.02)
                               for m, q in rates.items()))

    try:
        await daemon.fleet_tick("start")
        t0 = time.monotonic()
        while (serving("rm2") < 1 or serving("ranker") < 1) and time.monotonic() - t0 < 90:
            await asyncio.sleep(0.2)
        assert serving("rm2") >= 1 and serving("ranker") >= 1, f"workers per model: {d.serves}"
        low_shares = daemon.shares()
        async with grpc.aio.insecure_channel(f"127.0.0.1:{daemon.port}") as ch:
            stub = pbg.InferenceStub(ch)
            await phase(stub, "low", {"rm2": LOW_QPS, "ranker": LOW_QPS}, 10.0)
            before = serving("ranker")
            t_step = time.monotonic()
            await phase(stub, "step", {"rm2": LOW_QPS, "ranker": STEP_QPS}, 6.0,
                        until=lambda: serving("ranker") > before, max_s=90.0)
            grew_s = time.monotonic() - t_step

            def settled() -> bool:
                """Every worker the plan gives the ranker serves it, type by type. Counting workers is not
                enough: the g4dn it had before the step still serves it (held by the remove cooldown
                while the r5n pool boots), and counted as one of the r5n it made the steady phase start
                with a planned worker still booting."""
                want = {t: n for t, n in daemon.shares().get("ranker", {}).items() if n}
                have: dict[str, int] = {}
                for iid, w in d.workers.items():
                    if d.serves.get(iid) == "ranker":
                        have[w.instance_type] = have.get(w.instance_type, 0) + 1
                return sum(want.values()) > before and all(have.get(t, 0) >= n for t, n in want.items())
            # the step's transient lasts until the ranker's planned pool serves (a worker or two more
            # may boot after the first): the steady phase is measured from then
            await phase(stub, "step", {"rm2": LOW_QPS, "ranker": STEP_QPS}, 0.5, until=settled, max_s=90.0)
            settled_s = time.monotonic() - t_step
            assert settled(), f"the ranker's workers never became its plan: {daemon.shares()} {d.serves}"
            await phase(stub, "high", {"rm2": LOW_QPS, "ranker": STEP_QPS}, 15.0)
        high_shares = daemon.shares()
        by = {(p, m): [o for o in out if o[0] == p and o[1] == m] for p in ("low", "step", "high") for m in ("rm2", "ranker")}
        for (p, m), rows in by.items():
            late = sum(1 for o in rows if o[2] is not None and o[2] > SLO_MS)
            failed = sorted({o[3] for o in rows if o[2] is None})
            print(f"  {p} {m}: {len(rows)} sent, {late} late, {sum(1 for o in rows if o[2] is None)} failed "
                  f"{failed}; workers {sorted({o[3] for o in rows if o[2] is not None})}; "
                  f"{sorted({o[4] for o in rows if o[2] is None})[:3]}")
        print(f"two-model e2e: shares {low_shares} -> {high_shares}; ranker's workers grew {grew_s:.1f} s after "
              f"its step; status plan {daemon.status.plan and daemon.status.plan.to_dict()['models']}")
        # every reply came from a worker the plan gave its model
        served = [o for o in out if o[2] is not None]
        assert served and all(o[4] == o[1] for o in served), [o for o in served if o[4] != o[1]][:5]
        # the step's model got more workers; the other model's stayed as they were
        assert sum(high_shares["ranker"].values()) > sum(low_shares["ranker"].values())
        assert high_shares["rm2"] == low_shares["rm2"]

        def attainment(rows: list) -> float:   # noqa: ANN001
            return sum(1 for o in rows if o[2] is not None and o[2] <= SLO_MS) / max(len(rows), 1)
        # floors for real ONNX workers sharing the cores with the rest of the suite (2 cores, 4 xdist workers): a
        # quiet run gives each model >= 99 %; a CI run with a heavy replay beside the high phase gave rm2 3 late of 66
        # (95.5 %) and the ranker 21 of 369 (94.3 %), every query still answered by a worker of its own model
        assert attainment(by[("low", "rm2")] + by[("step", "rm2")] + by[("high", "rm2")]) >= 0.95
        assert attainment(by[("low", "ranker")] + by[("high", "ranker")]) >= 0.93
        reply = d.status_reply()
        ms = {m.name: m for m in reply.models}
        assert ms["ranker"].workers == serving("ranker") and ms["ranker"].planned
        assert {w.model for w in reply.worker_list} <= {"rm2", "ranker"}
    finally:
        await daemon.stop(grace=3.0)
        await runner.stop_all()
