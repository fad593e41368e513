"""Batching on the live path → section "live-batching" of BENCHMARKS.md.

The dispatcher on loopback in front of one emulated g4dn.xlarge worker that sleeps the Kairos rm2
profile for each call's total batch (5.4 ms for 10 rows, 29 ms for 100: per-row cost falls with the
batch), open-loop Poisson arrivals of 10-row queries from a client in the same process, at rates
around what one-query-per-call serves (1000 / 5.4 = 185 q/s). Baseline in the same command:
``dispatcher.batching: none`` against ``work_conserving`` (:mod:`dispatcher.batch_join`) at each rate.

Run: ``.venv/bin/python bench/dispatch/live_batching_bench.py [--seconds 6]``.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import argparse  # noqa: E402
import asyncio  # noqa: E402
import time  # noqa: E402

import grpc  # noqa: E402
import numpy as np  # noqa: E402

from bench._report import machine, write_section  # noqa: E402
from config.profiles import load_profiles_csv  # noqa: E402
from dispatcher.latency_model import LatencyModel  # noqa: E402
from dispatcher.proto import costscale_pb2 as pb, costscale_pb2_grpc as pbg  # noqa: E402
from dispatcher.server import Dispatcher  # noqa: E402
from tests.dispatch_helpers import SleepWorker, make_config  # noqa: E402

PROFILES = load_profiles_csv()
RATES = (150.0, 250.0, 350.0)
ROWS = 10
QOS_MS = 1000.0     # model "big" of tests.dispatch_helpers (profile rm2, max_batch 100)


class ProfileWorker(SleepWorker):
    """Sleeps rm2's g4dn.xlarge profile at the call's batch; counts calls and rows."""

    def __init__(self) -> None:
        super().__init__("i-0", "g4dn.xlarge")
        self.profile = PROFILES.get("rm2", "g4dn.xlarge")
        self.calls = 0
        self.rows = 0

    async def Infer(self, request: pb.InferRequest, context: grpc.aio.ServicerContext) -> pb.InferReply:
        ms = float(self.profile.latency_ms(request.batch_size))
        await asyncio.sleep(ms / 1000.0)
        self.calls += 1
        self.rows += request.batch_size
        return pb.InferReply(service_ms=ms, provider="none", variant=request.model)


async def one_run(batching: str, rate: float, seconds: float, seed: int) -> dict[str, float]:
    d = Dispatcher(make_config(batching=batching), LatencyModel.from_profiles(PROFILES))
    port = await d.start("127.0.0.1:0")
    worker = ProfileWorker()
    server = grpc.aio.server()
    pbg.add_WorkerServicer_to_server(worker, server)
    wport = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    d.add_worker_direct("i-0", "g4dn.xlarge", f"127.0.0.1:{wport}")
    lat: list[float] = []
    errors = 0
    rng = np.random.default_rng(seed)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            stub = pbg.InferenceStub(ch)

            async def one() -> None:
                nonlocal errors
                t0 = time.perf_counter()
                try:
                    await stub.Submit(pb.SubmitRequest(model="big", batch_size=ROWS), timeout=10.0)
                except grpc.aio.AioRpcError:
                    errors += 1
                    return
                lat.append((time.perf_counter() - t0) * 1000.0)

            tasks = []
            start = time.perf_counter()
            t = 0.0
            while t < seconds:
                delay = start + t - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.create_task(one()))
                t += float(rng.exponential(1.0 / rate))
            await asyncio.gather(*tasks)
            wall = time.perf_counter() - start
    finally:
        await d.stop(grace=1.0)
        await server.stop(0)
    n = len(lat) + errors
    within = sum(1 for x in lat if x <= QOS_MS)
    return {"queries": n, "attainment": within / n if n else 1.0, "p99": float(np.percentile(lat, 99)) if lat else float("nan"),
            "served_qps": len(lat) / wall, "rows_per_call": worker.rows / max(worker.calls, 1)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    lines = []
    for rate in RATES:
        got = {b: asyncio.run(one_run(b, rate, args.seconds, args.seed)) for b in ("none", "work_conserving")}
        n, w = got["none"], got["work_conserving"]
        lines.append(f"| {rate:g} | {n['queries']:,} | {100 * n['attainment']:.2f} % / {100 * w['attainment']:.2f} % | "
                     f"{n['p99']:.1f} / {w['p99']:.1f} | {n['served_qps']:.0f} / {w['served_qps']:.0f} | "
                     f"{n['rows_per_call']:.1f} / {w['rows_per_call']:.1f} |")
        print(lines[-1], flush=True)
    write_section("live-batching", "## Live batching: one query per call against work-conserving joins "
                  "(bench/dispatch/live_batching_bench.py)\n\n"
                  f"Machine: {machine()}. Command: `.venv/bin/python bench/dispatch/live_batching_bench.py --seconds {args.seconds:g}`.\n\n"
                  f"The dispatcher on loopback, one emulated g4dn.xlarge worker sleeping the rm2 profile at each call's "
                  f"rows, Poisson arrivals of {ROWS}-row queries for {args.seconds:g} s, SLO {QOS_MS:g} ms. One query per "
                  f"call serves at most 1000 / 5.4 = 185 q/s. Cells: `dispatcher.batching` none / work_conserving.\n\n"
                  "| offered q/s | queries | SLO attainment | p99 ms | served q/s | rows per call |\n|---|---|---|---|---|---|\n"
                  + "\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
