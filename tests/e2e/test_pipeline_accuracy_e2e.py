"""Acceptance (issue #26 "Execution", live): a spike of pipeline queries handled by accuracy scaling.
The real daemon in-process against moto in server mode, two local worker processes, pool pinned
(c5n.2xlarge x 2: the budget buys no more). The pipeline ``reads``: ``prep`` (the demo model, rm2's
profile: a few ms) then ``classify``, the digits application of ``tests/e2e/test_accuracy_e2e.py``
(registered as ``register_family`` does; its members padded to 10-100 ms, the most accurate the
slowest). At 5 pipeline queries/s the classifier runs its most accurate member; at 30/s, twice what
the pool serves at full accuracy, the accuracy plan (Proteus, per application) moves workers to
faster members for the spike, and back after it. Every query is answered once, end to end.
"""
from __future__ import annotations

import asyncio
import time
from pathlib import Path

import grpc
import numpy as np
import pytest

from tests.load_helpers import poisson_phase
from tests.e2e.test_accuracy_e2e import digits_cluster
from variants.families.family import Member

pytestmark = pytest.mark.slow

LOW_QPS, SPIKE_QPS = 5.0, 30.0
PIPE_SLO_MS = 1500.0


def test_a_pipeline_spike_is_served_at_lower_accuracy_and_accuracy_comes_back(moto_endpoint: str, tmp_path: Path,
                                                                              digits_members: list[Member]) -> None:
    asyncio.run(asyncio.wait_for(_scenario(moto_endpoint, tmp_path, digits_members), timeout=300))


async def _scenario(endpoint: str, tmp: Path, members) -> None:  # noqa: ANN001
    from daemon.process import start_with_local_workers
    from dispatcher.proto import costscale_pb2 as pb, costscale_pb2_grpc as pbg

    cfg, _ = digits_cluster(endpoint, tmp, members, "plan", pipelines=[{"name": "reads", "slo_ms": PIPE_SLO_MS, "scaling": "per_task", "tasks": [
        {"name": "prep", "model": "rm2", "children": [{"task": "classify", "factor": 1}]},
        {"name": "classify", "application": "digits"}]}])
    acc = {m.name: m.accuracy for m in members}
    top = max(acc, key=acc.__getitem__)
    daemon, runner = await start_with_local_workers(cfg, [("rm2", "builtin:mlp", "rm2")], profiles_csv=cfg.profiles,
                                                   generate_variants=False)
    d = daemon.dispatcher
    out: list[tuple[str, float | None, str, float, bool]] = []     # (phase, ms, variants or error, accuracy, slo_met)
    sent = {"n": 0}
    try:
        await daemon.fleet_tick("start")
        t0 = time.monotonic()
        while len(d.workers) < 2 and time.monotonic() - t0 < 120:
            await asyncio.sleep(0.2)
        assert len(d.workers) == 2, "the pinned pool's workers did not register"
        rng = np.random.default_rng(17)

        def placed_top() -> bool:
            fr = d.accuracy.router.workers_for("digits")
            return bool(fr) and all(d.accuracy.placement.get(w) == top for w in fr)

        async def phase(stub, name: str, rate: float, secs: float, until=None, max_s: float = 0.0) -> None:  # noqa: ANN001
            async def one(_: int) -> None:
                sent["n"] += 1
                t = time.perf_counter()
                try:
                    r = await stub.Submit(pb.SubmitRequest(application="reads", batch_size=1), timeout=10.0)
                except grpc.aio.AioRpcError as exc:
                    out.append((name, None, exc.code().name, 0.0, False))
                    return
                out.append((name, (time.perf_counter() - t) * 1000.0, r.variant, r.accuracy, r.slo_met))
            await poisson_phase(one, rate, secs, rng, until, max_s, tick_s=0.02)

        async with grpc.aio.insecure_channel(f"127.0.0.1:{daemon.port}") as ch:
            stub = pbg.InferenceStub(ch)
            await phase(stub, "warm", LOW_QPS, 3.0, until=placed_top, max_s=60.0)
            await phase(stub, "low", LOW_QPS, 10.0)
            await phase(stub, "spike", SPIKE_QPS, 25.0)
            await phase(stub, "after", LOW_QPS, 5.0, until=placed_top, max_s=60.0)
            await phase(stub, "settled", LOW_QPS, 8.0)
        by = {p: [o for o in out if o[0] == p] for p in ("warm", "low", "spike", "after", "settled")}
        for p, rows_ in by.items():
            ok = [o for o in rows_ if o[1] is not None]
            print(f"  {p}: {len(rows_)} sent, {sum(1 for o in ok if o[4])} within {PIPE_SLO_MS:g} ms, errors "
                  f"{sorted({o[2] for o in rows_ if o[1] is None})}, variants {sorted({o[2] for o in ok})}, "
                  f"mean accuracy {np.mean([o[3] for o in ok]) if ok else float('nan'):.4f}")
        measured = by["low"] + by["spike"] + by["after"] + by["settled"]
        within = sum(1 for o in measured if o[1] is not None and o[4])
        print(f"pipeline accuracy e2e: {within / len(measured):.2%} within the SLO; outcomes "
              f"{dict(d.outcomes.models['reads'].queries)}; dropped early {d.pipelines.dropped_early}")
        # every query answered once, recorded once
        assert len(out) == sent["n"] and sum(d.outcomes.models["reads"].queries.values()) == sent["n"]
        # 99.78 % in a quiet run, 98.0 % with another pytest beside it, 96.5 % beside a CPU hog (the
        # misses are early drops in the spike: each query waits for the rm2 hop and the digits hop
        # on the same two workers): the floor is the loaded one
        assert within >= 0.95 * len(measured)
        # the spike was served by less accurate members of the classifier, and the reply says so
        spike_variants = {o[2] for o in by["spike"] if o[1] is not None}
        assert any(f"classify=" in v and top not in v.split("classify=")[1] for v in spike_variants), spike_variants
        spike_acc = [o[3] for o in by["spike"] if o[1] is not None]
        assert np.mean(spike_acc) < acc[top] and min(spike_acc) >= min(acc.values()) - 1e-9
        # and accuracy came back: the settled phase all at the top member
        assert all(o[2] == f"prep=rm2;classify={top}" for o in by["settled"] if o[1] is not None)
        assert all(o[3] == pytest.approx(acc[top]) for o in by["settled"] if o[1] is not None)
    finally:
        await daemon.stop(grace=3.0)
        await runner.stop_all()
