"""Fault (f) of issue #40: the dispatcher's gRPC port flooded by an unauthenticated client in its own
process (``tests.fault_flood_query``: raw TCP garbage, HTTP/2 garbage frames, malformed protobuf
bodies, bodies over ``grpc.max_receive_message_length``, a wrong bearer token) while an
authenticated client sends queries. Every flood call ends typed (UNAUTHENTICATED, INVALID_ARGUMENT,
RESOURCE_EXHAUSTED; a raw connection closed by the server), never a hang or a crash; the
dispatcher's RSS, sampled through the flood, stays within a bound; every authenticated query is
answered once within its SLO. One seeded point here; the bench runs more."""
from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import grpc

from config.profiles import load_profiles_csv
from dispatcher.auth import bearer_metadata
from dispatcher.latency_model import LatencyModel
from dispatcher.proto import costscale_pb2 as pb, costscale_pb2_grpc as pbg
from dispatcher.server import Dispatcher
from tests.dispatch_helpers import make_config, start_worker
from tests.fault_helpers_query import REPO, Outcome, QueryHistory

TOKEN = "flood-test-token-0123456789"
#: bytes: the dispatcher's payload limit here (its gRPC receive limit is this + 1 MiB)
PAYLOAD = 64 * 1024
#: what each flood kind may end with: typed statuses, or a raw connection the server closed
ALLOWED = {"garbage": {"closed"}, "frames": {"closed"}, "malformed": {"UNAUTHENTICATED", "INVALID_ARGUMENT"},
           "oversized": {"RESOURCE_EXHAUSTED"}, "bad_token": {"UNAUTHENTICATED"}}


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


async def flood_point(seed: int, tmp: Path, seconds: float = 2.0) -> dict[str, Any]:
    rng = random.Random(seed)
    rate = rng.uniform(30, 60)
    token_file = tmp / "token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o600)
    cfg = make_config(auth_token_file=str(token_file), max_payload_bytes=PAYLOAD)
    d = Dispatcher(cfg, LatencyModel.from_profiles(load_profiles_csv()))
    port = await d.start("127.0.0.1:0")
    workers = []
    for i in range(2):
        w = await start_worker(f"i-{i}", "c5n.2xlarge", 0.005)
        d.add_worker_direct(f"i-{i}", "c5n.2xlarge", w.address)
        workers.append(w)
    ch = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    stub = pbg.InferenceStub(ch)
    hist = QueryHistory()
    md = bearer_metadata(TOKEN)

    async def one(key: str) -> None:
        hist.sent.append(key)
        sent = time.monotonic()
        try:
            r = await stub.Submit(pb.SubmitRequest(model="big", batch_size=rng.randint(1, 8), idempotency_key=key),
                                  timeout=5, metadata=md)
            hist.outcomes.append(Outcome(key, sent, time.monotonic(), None, r.instance_id, r.slo_met))
        except grpc.aio.AioRpcError as exc:
            hist.outcomes.append(Outcome(key, sent, time.monotonic(), exc.code()))

    try:
        for i in range(20):                       # warm: channels, the latency model
            await one(f"warm-{i}")
        base = rss_bytes()
        limit = PAYLOAD + 1024 * 1024
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tests.fault_flood_query", str(port), str(seed), str(seconds), str(limit),
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        peak, n, tasks = base, 0, []
        while proc.returncode is None:
            tasks.append(asyncio.ensure_future(one(f"{seed}-{n}")))
            n += 1
            peak = max(peak, rss_bytes())
            try:
                await asyncio.wait_for(proc.wait(), 1 / rate)
            except asyncio.TimeoutError:
                pass
        out_b, err_b = await proc.communicate()
        assert proc.returncode == 0, err_b.decode()
        await asyncio.gather(*tasks)
        flood = json.loads(out_b.decode())
        return {"seed": seed, "flood": flood, "flood_calls": sum(sum(c.values()) for c in flood.values()),
                "untyped": {k: {c: m for c, m in v.items() if c not in ALLOWED[k]} for k, v in flood.items()
                            if set(v) - ALLOWED[k]},
                "rss_base_mib": round(base / 2**20, 1), "rss_growth_mib": round((peak - base) / 2**20, 1),
                "sent": n + 20, "codes": hist.codes(), "violations": hist.violations(),
                "slo_missed": sorted(o.key for o in hist.answered() if not o.slo_met), "served": d.stats()["served"],
                "max_ms": round(1000 * max(o.ended - o.sent for o in hist.outcomes), 1)}
    finally:
        await ch.close()
        await d.stop(grace=0.5)
        for w in workers:
            await w.server.stop(0)


def test_a_flood_of_bad_requests_gets_typed_answers_bounded_memory_and_clients_keep_their_slo(tmp_path: Path) -> None:
    out = asyncio.run(asyncio.wait_for(flood_point(3, tmp_path), 60))
    print(out)
    assert out["untyped"] == {}
    assert out["violations"] == []
    assert out["codes"] == {"OK": out["sent"]} and out["served"] == out["sent"]
    assert out["slo_missed"] == []
    assert out["rss_growth_mib"] <= 64, out
