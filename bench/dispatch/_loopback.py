"""Shared by the loopback dispatcher benchmarks (``bench/dispatch/dispatch_bench.py``,
``bench/replicas/replica_tput_bench.py``): the no-op worker process, the closed-loop client, the benchmark's
dispatcher config and how a dispatcher is built, and a dispatcher process of its own.

Each part runs as a process of its own through this file's ``--role`` (``workers``, ``load``,
``dispatcher``), so the benchmarks measure the dispatcher beside, not inside, its load:

- ``workers``: ``count`` no-op workers (``tests.dispatch_helpers.SleepWorker``, delay 0) in one
  process; prints their addresses as one JSON line, serves until its stdin closes.
- ``load``: the closed-loop client: ``concurrency`` Submits in flight, each sent again as soon as
  it is answered; 0.5 s of warm-up, then ``seconds`` measured; prints one JSON line (q/s, client
  p50/p99 ms, errors). With ``--round-robin`` its channel spreads Submits over every address of an
  ``ipv4:A,B`` target with gRPC's own ``round_robin`` policy (the client side of several dispatcher
  replicas, DESIGN "Beyond one control host"); with ``--marks`` it prints :data:`MARK_START` and
  :data:`MARK_END` around the measured window (so a parent can read other processes' CPU there)
  and adds its own CPU seconds and query count to the JSON line.
- ``proxy``: the plain round-robin proxy (``bench/dispatch/_rr_proxy.py``) in front of the
  workers it is given (``--owned``), printing and stopping as the dispatcher role does.
- ``dispatcher``: one :class:`dispatcher.server.Dispatcher` owning the workers it is given; prints
  ``{"port": P}``, serves until its stdin closes, then prints what it served. ``--code-root``: the
  dispatcher's code from another checkout (a before/after comparison in one run).
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import argparse  # noqa: E402
import asyncio  # noqa: E402
import itertools  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
from typing import TYPE_CHECKING, Any, Sequence  # noqa: E402

import numpy as np  # noqa: E402

if TYPE_CHECKING:
    from config.schema import Config
    from dispatcher.server import Dispatcher

#: the instance types the no-op workers stand for, worker k of type TYPES[k % 4]
TYPES = ["g4dn.xlarge", "c5n.2xlarge", "r5n.large", "t3.xlarge"]
#: how a dispatcher is built: ``bench`` as dispatch_bench always did (no variant registry);
#: ``run`` as ``costscale run`` builds it (``daemon.app.Daemon.start``: the config's variant
#: registry, here in memory, and the generated models' folder)
DISPATCHER_STARTS = ("bench", "run")
#: the client's lines around its measured window (``--marks``)
MARK_START, MARK_END = "measure-start", "measure-end"
#: gRPC's own client-side balancing over every address of the target (no balancer of ours)
ROUND_ROBIN_SERVICE_CONFIG = json.dumps({"loadBalancingConfig": [{"round_robin": {}}]})
#: the client's warm-up before its measured window, seconds
WARM_UP_S = 0.5
#: batch sizes the client cycles through (1..1000, seeded)
_BATCHES = 4096


# ---- the dispatcher ------------------------------------------------------------------------------
def bench_config(worker_streams: bool = True) -> Config:
    """rm2 (QoS 1000 ms, max batch 1000) on :data:`TYPES`, best effort, a queue that never refuses;
    ``worker_streams`` False: one unary Infer per worker call (the path before issue #41)."""
    from config.schema import Config

    return Config.model_validate({
        "cluster": "bench", "budget_per_hour": 10,
        "models": [{"name": "rm2", "qos_ms": 1000, "max_batch": 1000}],
        "instance_types": [{"type": t} for t in TYPES],
        "launch": {"ami_id": "ami-0123456789abcdef0"},
        "dispatcher": {"listen": "127.0.0.1:0", "on_deadline": "best_effort", "queue_limit": 100000,
                       "worker_streams": worker_streams},
    })


def make_dispatcher(start: str = "bench", worker_streams: bool = True) -> Dispatcher:
    """A dispatcher on :func:`bench_config` with the profile latency model, built the way ``start``
    (one of :data:`DISPATCHER_STARTS`) says."""
    from config.profiles import load_profiles_csv
    from dispatcher.latency_model import LatencyModel
    from dispatcher.server import Dispatcher

    cfg = bench_config(worker_streams)
    predictor = LatencyModel.from_profiles(load_profiles_csv())
    if start == "bench":
        return Dispatcher(cfg, predictor)
    if start != "run":
        raise ValueError(f"dispatcher start {start!r}: one of {', '.join(DISPATCHER_STARTS)}")
    from daemon.profiling.model_profiles import models_dir, open_config_registry

    cfg = cfg.model_copy(update={"state_path": ":memory:"})
    return Dispatcher(cfg, predictor, registry=open_config_registry(cfg), models_dir=models_dir(cfg))


async def dispatcher_main(workers: Sequence[Sequence[str]], start: str, worker_streams: bool = True) -> None:
    """The ``dispatcher`` role: a dispatcher owning ``workers`` ((id, type, address) each)."""
    d = make_dispatcher(start, worker_streams)
    port = await d.start("127.0.0.1:0")
    for iid, itype, address in workers:
        d.add_worker_direct(iid, itype, address)
    print(json.dumps({"port": port}), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)   # until the parent closes stdin
    stats = d.stats()
    await d.stop(1.0)
    print(json.dumps({"served": stats["served"], "accepted": stats["accepted"]}), flush=True)


# ---- the no-op workers and the client ------------------------------------------------------------
async def workers_main(count: int) -> None:
    """The ``workers`` role."""
    from tests.dispatch_helpers import start_worker

    ws = [await start_worker(f"i-{k}", TYPES[k % 4], 0.0) for k in range(count)]
    print(json.dumps([w.address for w in ws]), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)   # until the parent closes stdin


async def load_main(target: str, seconds: float, concurrency: int, *, round_robin: bool = False,
                    marks: bool = False, stream: bool = False, infer: bool = False, rate: float = 0.0) -> None:
    """The ``load`` role (see the module docstring); ``stream``: every query on one SubmitStream
    (``dispatcher.api.client.InferenceClient.stream``), not a unary Submit each; ``infer``: a unary
    ``Worker.Infer`` each (the target is a balancer in front of the workers themselves, nginx
    ``grpc_pass``); ``rate`` > 0: open loop, Poisson arrivals at ``rate`` q/s (seeded), each query
    sent when it arrives however many are in flight, ``concurrency`` unused."""
    import grpc

    from dispatcher.api.client import InferenceClient
    from dispatcher.proto import costscale_pb2 as pb, costscale_pb2_grpc as pbg

    options = [("grpc.service_config", ROUND_ROBIN_SERVICE_CONFIG)] if round_robin else []
    ch = grpc.aio.insecure_channel(target, options=options)
    client = InferenceClient(ch)
    if infer:
        stub = pbg.WorkerStub(ch)

        async def send(r: pb.SubmitRequest, timeout: float) -> Any:
            return await stub.Infer(pb.InferRequest(query_id="x", model=r.model, batch_size=r.batch_size),
                                    timeout=timeout)
    else:
        send = client.stream if stream else client.submit
    rng = np.random.default_rng(1)
    batches = rng.integers(1, 1001, _BATCHES).tolist()
    lat: list[float] = []
    errors = 0
    counter = itertools.count()

    async def query() -> None:
        nonlocal errors
        i = next(counter)
        t0 = time.perf_counter()
        try:
            await send(pb.SubmitRequest(model="rm2", batch_size=batches[i % _BATCHES]), timeout=10)
            lat.append(time.perf_counter() - t0)
        except grpc.aio.AioRpcError:
            errors += 1

    async def one(end: float) -> None:
        while time.perf_counter() < end:
            await query()

    async def arrivals(end: float) -> None:
        """Open loop: a query at each arrival of a seeded Poisson process at ``rate`` q/s until ``end``."""
        gaps = np.random.default_rng(2)
        sent: set[asyncio.Task] = set()
        t = time.perf_counter()
        while t < end:
            wait = t - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
            task = asyncio.create_task(query())
            sent.add(task)
            task.add_done_callback(sent.discard)
            t += float(gaps.exponential(1.0 / rate))
        await asyncio.gather(*sent)

    def window(end: float) -> Any:
        return arrivals(end) if rate > 0 else asyncio.gather(*(one(end) for _ in range(concurrency)))

    await window(time.perf_counter() + WARM_UP_S)   # warm-up
    lat.clear()
    errors = 0
    if marks:
        print(MARK_START, flush=True)
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    await window(t0 + seconds)
    el = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    if marks:
        print(MARK_END, flush=True)
    a = np.array(lat) * 1000
    out: dict[str, Any] = {"qps": len(lat) / el, "p50_ms": float(np.percentile(a, 50)),
                           "p99_ms": float(np.percentile(a, 99)), "errors": errors}
    if marks:
        out.update(queries=len(lat), seconds=el, cpu_s=cpu)
    print(json.dumps(out), flush=True)   # before the channel closes: a crash there loses no figure
    await client.close()
    await ch.close()


async def proxy_main(addresses: Sequence[str], one_per_worker: bool) -> None:
    """The ``proxy`` role: :class:`bench.dispatch._rr_proxy.RoundRobinProxy` in front of ``addresses``."""
    from bench.dispatch._rr_proxy import RoundRobinProxy

    proxy = RoundRobinProxy(list(addresses), one_per_worker)
    server, port = await proxy.start()
    print(json.dumps({"port": port}), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)   # until the parent closes stdin
    await server.stop(0)   # type: ignore[attr-defined]
    await proxy.close()
    print(json.dumps({"served": 0}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description="a part of the loopback dispatcher benchmarks (bench/dispatch/_loopback.py)")
    ap.add_argument("--role", required=True, choices=["workers", "load", "dispatcher", "proxy"])
    ap.add_argument("--workers", type=int, default=4, help="(workers) how many no-op workers to serve")
    ap.add_argument("--target", default="", help="(load) the gRPC target")
    ap.add_argument("--seconds", type=float, default=3.0, help="(load) the measured window")
    ap.add_argument("--concurrency", type=int, default=16, help="(load) Submits in flight")
    ap.add_argument("--round-robin", action="store_true", help="(load) gRPC round_robin over the target's addresses")
    ap.add_argument("--marks", action="store_true", help="(load) mark the measured window, report the client's CPU")
    ap.add_argument("--stream", action="store_true", help="(load) every query on one SubmitStream, not unary Submits")
    ap.add_argument("--infer", action="store_true", help="(load) a unary Worker.Infer each (a balancer of the workers)")
    ap.add_argument("--rate", type=float, default=0.0, help="(load) open loop: Poisson arrivals at this q/s")
    ap.add_argument("--one-per-worker", action="store_true", help="(proxy) one query per worker at a time")
    ap.add_argument("--unary-workers", action="store_true",
                    help="(dispatcher) one unary Infer per worker call (dispatcher.worker_streams: false)")
    ap.add_argument("--owned", default="[]", help="(dispatcher, proxy) JSON list of [id, type, address]")
    ap.add_argument("--start", default="bench", choices=DISPATCHER_STARTS, help="(dispatcher) how it is built")
    ap.add_argument("--code-root", default="",
                    help="(dispatcher) import the dispatcher from this checkout (another commit's code, same bench)")
    a = ap.parse_args()
    if a.code_root:
        sys.path.insert(0, str(Path(a.code_root).resolve()))
    if a.role == "workers":
        asyncio.run(workers_main(a.workers))
    elif a.role == "load":
        asyncio.run(load_main(a.target, a.seconds, a.concurrency, round_robin=a.round_robin, marks=a.marks,
                              stream=a.stream, infer=a.infer, rate=a.rate))
    elif a.role == "proxy":
        asyncio.run(proxy_main([o[2] for o in json.loads(a.owned)], a.one_per_worker))
    else:
        asyncio.run(dispatcher_main(json.loads(a.owned), a.start, not a.unary_workers))


if __name__ == "__main__":
    main()
