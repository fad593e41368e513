"""Fault (c) of issue #40: a worker that stops answering without dying (SIGSTOP on a real
``costscale worker`` process) while queries flow. Its queries go to the other worker within their
deadline and are answered exactly once; it is left out of the routing, then taken back after
SIGCONT (it registers again, ``worker.rejoin``). The history of every query's outcome is checked
after the fault (``tests.fault_helpers_query.QueryHistory``). One seeded point here; the bench
(``bench/faults/query_faults_bench.py``) runs more."""
from __future__ import annotations

import asyncio
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc

from config.profiles import load_profiles_csv
from config.schema import Config
from dispatcher.latency_model import LatencyModel
from dispatcher.proto import costscale_pb2 as pb, costscale_pb2_grpc as pbg
from dispatcher.server import Dispatcher
from tests.dispatch_helpers import make_config
from tests.fault_helpers_query import Outcome, QueryHistory, WorkerProcess, until

WORKER_TYPE = "c5n.2xlarge"
#: s: the client's deadline on each Submit (beyond its SLO, the dispatcher drops a query that can no
#: longer meet it, typed DEADLINE_EXCEEDED)
CLIENT_DEADLINE_S = 5.0


async def _submit(stub: Any, key: str, batch: int, hist: QueryHistory) -> None:
    hist.sent.append(key)
    sent = time.monotonic()
    try:
        r = await stub.Submit(pb.SubmitRequest(model="big", batch_size=batch, idempotency_key=key),
                              timeout=CLIENT_DEADLINE_S)
        hist.outcomes.append(Outcome(key, sent, time.monotonic(), None, r.instance_id, r.slo_met))
    except grpc.aio.AioRpcError as exc:
        hist.outcomes.append(Outcome(key, sent, time.monotonic(), exc.code()))


def _config(qos_ms: float) -> Config:
    """:func:`tests.dispatch_helpers.make_config` with model ``big``'s SLO at ``qos_ms``."""
    data = make_config().model_dump()
    data["models"] = [dict(m, qos_ms=qos_ms) if m["name"] == "big" else m for m in data["models"]]
    return Config.model_validate(data)


async def sigstop_point(seed: int, cache: Path, qos_ms: float = 1000.0) -> dict[str, Any]:
    """One seeded point: two workers, queries of ``big`` (SLO ``qos_ms``) at a seeded rate, the
    seeded victim stopped after a seeded number of queries for a seeded time, then continued.
    Returns the history and timings."""
    rng = random.Random(seed)
    rate = rng.uniform(40, 80)                 # q/s
    stop_after = rng.randint(10, 30)           # queries sent before the SIGSTOP
    stop_s = rng.uniform(1.0, 2.5)             # how long the worker stays stopped
    victim_ix = rng.randrange(2)
    d = Dispatcher(_config(qos_ms), LatencyModel.from_profiles(load_profiles_csv()))
    port = await d.start("127.0.0.1:0")
    ids = ["i-0", "i-1"]
    for iid in ids:
        d.allow_instance(iid, WORKER_TYPE)
    procs = [WorkerProcess(iid, WORKER_TYPE, f"127.0.0.1:{port}", cache) for iid in ids]
    hist = QueryHistory()
    tasks: list[asyncio.Task[None]] = []
    out: dict[str, Any] = {"seed": seed, "rate": round(rate, 1), "stop_s": round(stop_s, 2)}
    ch = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        await until(lambda: len(d.workers) == 2, 60, "both workers registered")
        stub = pbg.InferenceStub(ch)
        victim = procs[victim_ix]
        n = 0

        def send() -> None:
            nonlocal n
            tasks.append(asyncio.ensure_future(_submit(stub, f"{seed}-{n}", rng.randint(1, 8), hist)))
            n += 1

        for _ in range(stop_after):
            send()
            await asyncio.sleep(1 / rate)
        before = d.stats()["redispatched"]
        victim.sigstop()
        stopped_at = time.monotonic()
        for _ in range(3):          # a burst: one worker serves one query at a time, so one reaches the victim
            send()
        left_out = None
        while time.monotonic() - stopped_at < stop_s:
            if left_out is None and victim.instance_id not in d.workers:
                left_out = time.monotonic() - stopped_at
            send()
            await asyncio.sleep(1 / rate)
        out["sent_while_stopped"] = n - stop_after
        victim.sigcont()
        resumed_at = time.monotonic()
        served_by_victim = {o.key for o in hist.answered() if o.instance_id == victim.instance_id}
        # taken back: registered again (worker.rejoin) and in the routing
        while victim.instance_id not in d.workers:
            send()
            await asyncio.sleep(1 / rate)
            assert time.monotonic() - resumed_at < 30, f"not taken back within 30 s of SIGCONT: {d.stats()}"
        out["taken_back_s"] = round(time.monotonic() - resumed_at, 2)
        await asyncio.gather(*tasks)
        out["left_out_s"] = None if left_out is None else round(left_out, 2)
        out["redispatched"] = d.stats()["redispatched"] - before
        out["sent"] = n
        out["codes"] = hist.codes()
        out["violations"] = hist.violations()
        out["served"] = d.stats()["served"]
        # a query the stopped worker held would be answered by it after SIGCONT, past its SLO
        out["answered_by_victim_after_stop"] = sorted(
            o.key for o in hist.answered() if o.instance_id == victim.instance_id and o.key not in served_by_victim
            and o.sent < resumed_at)
        out["slo_missed"] = sorted(o.key for o in hist.answered() if not o.slo_met)
        out["max_ms"] = round(1000 * max(o.ended - o.sent for o in hist.outcomes), 1)
        return out
    finally:
        for t in tasks:
            t.cancel()
        await ch.close()
        await d.stop(grace=0.5)
        for p in procs:
            p.end()


def test_a_stopped_worker_is_left_out_its_queries_answered_once_elsewhere_then_it_is_taken_back() -> None:
    # an SLO of 2 s: the re-dispatch comes at ~0.8 s, with room for a loaded machine; the query the
    # stopped worker held would otherwise be answered by it after SIGCONT (1.59 s), which is asserted
    # against below, not through a timing threshold
    with tempfile.TemporaryDirectory() as cache:
        out = asyncio.run(asyncio.wait_for(sigstop_point(7, Path(cache), qos_ms=2000.0), 120))
    print(out)
    assert out["violations"] == []
    assert out["codes"] == {"OK": out["sent"]}, out                 # every query answered, none failed
    assert out["served"] == out["sent"]                              # each once
    assert out["answered_by_victim_after_stop"] == []                # re-dispatched, not held until SIGCONT
    assert out["slo_missed"] == []                                   # within their deadline
    assert out["left_out_s"] is not None and out["redispatched"] >= 1   # left out while stopped
