"""The client of ``costscale demo --replicas`` and ``bench/replicas/replica_failover_bench.py``: a steady
open-loop Poisson load through one address (nginx in front of the replicas, or gRPC's round_robin
over their addresses) from a channel whose service config retries on UNAVAILABLE, as a production
client of a replicated cluster would (gRFC A6 retry policy; README "High availability"), and
which sends a query again while its deadline lasts when those retries gave up with UNAVAILABLE.

gRPC retries below the application (a retried call returns one result), so the retries are counted
from channelz: every attempt is a call on a subchannel, every query a call on the channel. With
round_robin's health checks (gRFC A17 ``healthCheckConfig``) each connection also holds one Watch
call on its subchannel, started when the connection comes up and failed when it drops; those are
taken out (one per subchannel READY period, from the subchannel's channelz trace). An adapter: it
sends and counts, it decides nothing.
"""
from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

#: the service the retry policy covers (the replicas' health service reports it too)
INFERENCE_SERVICE = "costscale.v1.Inference"
#: gRFC A6 retry policy for Submit: up to 5 attempts, 0.1 s backoff doubling to 1 s, on UNAVAILABLE
#: only (the code a dead or leaving replica gives; a query the dispatcher refused stays refused)
RETRY_POLICY = {"maxAttempts": 5, "initialBackoff": "0.1s", "maxBackoff": "1s", "backoffMultiplier": 2,
                "retryableStatusCodes": ["UNAVAILABLE"]}
#: seconds a query may take, retries included
QUERY_TIMEOUT_S = 10.0
#: after gRPC's own retries gave up with UNAVAILABLE (5 attempts span about a second), the client
#: sends the query again this much later while its QUERY_TIMEOUT_S lasts: the owners of a dead
#: replica's workers move once its heartbeat expired (``scaler.replicas.membership.REPLICA_TTL_S``),
#: seconds, not the one second gRPC's policy spans (gRPC caps maxAttempts at 5)
RESEND_AFTER_S = 0.25


def service_config(round_robin: bool) -> str:
    """The client's service config: the retry policy; with ``round_robin`` (no balancer in front) the
    policy over every replica's address, leaving out a replica whose health is NOT_SERVING."""
    cfg: dict[str, Any] = {"methodConfig": [{"name": [{"service": INFERENCE_SERVICE, "method": "Submit"}],
                                             "retryPolicy": RETRY_POLICY}]}
    if round_robin:
        cfg["loadBalancingConfig"] = [{"round_robin": {}}]
        cfg["healthCheckConfig"] = {"serviceName": INFERENCE_SERVICE}
    return json.dumps(cfg)


def channel_options(round_robin: bool) -> list[tuple[str, Any]]:
    """The channel's options: the service config, and subchannels of its own (so channelz's
    per-subchannel counts are this channel's attempts alone)."""
    return [("grpc.service_config", service_config(round_robin)), ("grpc.enable_retries", 1),
            ("grpc.use_local_subchannel_pool", 1)]


@dataclass(frozen=True)
class AttemptCounts:
    """One channel's channelz counts: queries (channel calls) and attempts (subchannel calls), the
    health Watch calls among them taken out."""

    queries: int = 0
    calls: int = 0            # subchannel calls: attempts and health watches
    failed_calls: int = 0
    watches: int = 0          # health watches started: one per READY period of a subchannel
    watches_ended: int = 0    # READY periods that ended (their watch failed with the connection)

    @property
    def retries(self) -> int:
        """Attempts beyond each query's first."""
        return max(0, self.calls - self.watches - self.queries)

    @property
    def failed_attempts(self) -> int:
        """Attempts that failed (each one retried, or its query's final answer)."""
        return max(0, self.failed_calls - self.watches_ended)


def attempt_counts(target: str, health_checked: bool) -> AttemptCounts:
    """The channelz counts of the live channel whose target ends with ``target``. Reads grpc's own
    channelz (the functions the grpcio-channelz package serves); zeros when no channel matches."""
    from grpc._cython import cygrpc

    top = json.loads(cygrpc.channelz_get_top_channels(0))
    for ch in top.get("channel", []):
        data = ch.get("data", {})
        if not str(data.get("target", "")).endswith(target):
            continue
        calls = failed = watches = ended = 0
        for ref in ch.get("subchannelRef", []):
            sub = json.loads(cygrpc.channelz_get_subchannel(int(ref["subchannelId"])))["subchannel"]["data"]
            calls += int(sub.get("callsStarted", 0))
            failed += int(sub.get("callsFailed", 0))
            if health_checked:
                ready = sum(1 for e in sub.get("trace", {}).get("events", [])
                            if str(e.get("description", "")).endswith("changed to READY"))
                watches += ready
                ended += ready - (sub.get("state", {}).get("state") == "READY")
        return AttemptCounts(int(data.get("callsStarted", 0)), calls, failed, watches, max(0, ended))
    return AttemptCounts()


@dataclass
class LoadRecord:
    """Every query of a load: when it was sent (UNIX time) and how it ended (``OK`` or a status
    code's name); ``ends`` counts the answers per query (each must be 1)."""

    sent_at: list[float] = field(default_factory=list)
    outcome: dict[int, str] = field(default_factory=dict)
    ends: dict[int, int] = field(default_factory=dict)
    attempts: AttemptCounts = field(default_factory=AttemptCounts)
    resent: int = 0           # queries sent again after gRPC's own retries gave up (RESEND_AFTER_S)
    details: dict[int, str] = field(default_factory=dict)   # a failed query's last error message

    @property
    def sent(self) -> int:
        return len(self.sent_at)

    @property
    def ok(self) -> int:
        return sum(1 for o in self.outcome.values() if o == "OK")

    def failed(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for o in self.outcome.values():
            if o != "OK":
                out[o] = out.get(o, 0) + 1
        return dict(sorted(out.items()))

    def failed_between(self, t0: float, t1: float) -> tuple[int, int]:
        """(failed, sent) among the queries sent in [t0, t1)."""
        idx = [i for i, t in enumerate(self.sent_at) if t0 <= t < t1]
        return sum(1 for i in idx if self.outcome.get(i, "OK") != "OK"), len(idx)

    def twice(self) -> int:
        """Queries answered more than once (0 expected)."""
        return sum(1 for n in self.ends.values() if n > 1)

    def unanswered(self) -> int:
        """Queries sent that never ended (0 expected)."""
        return self.sent - len(self.outcome)

    def recovered_share(self) -> float | None:
        """Of the attempts that failed, the share whose query still ended OK, by a retry (None when
        no attempt failed)."""
        fa = self.attempts.failed_attempts
        if fa == 0:
            return None
        final = sum(1 for o in self.outcome.values() if o != "OK")
        return max(0.0, min(1.0, (fa - final) / fa))


async def steady_load(target: str, round_robin: bool, qps: float, seed: int, stop: asyncio.Event,
                      record: LoadRecord, model: str = "rm2", drain_s: float = 20.0) -> LoadRecord:
    """Poisson arrivals at ``qps`` to ``target`` until ``stop``, then every reply awaited (at most
    ``drain_s``); the channelz counts read before the channel closes."""
    import grpc

    from dispatcher.proto import costscale_pb2 as pb, costscale_pb2_grpc as pbg

    rng = np.random.default_rng(seed)
    async with grpc.aio.insecure_channel(target, options=channel_options(round_robin)) as ch:
        stub = pbg.InferenceStub(ch)
        pending: set[asyncio.Task[None]] = set()

        async def one(i: int) -> None:
            req = pb.SubmitRequest(model=model, batch_size=int(rng.integers(1, 50)), idempotency_key=f"failover-{seed}-{i}")
            end = time.monotonic() + QUERY_TIMEOUT_S
            while True:
                try:
                    await stub.Submit(req, timeout=max(0.1, end - time.monotonic()))
                    code = "OK"
                    break
                except grpc.aio.AioRpcError as exc:
                    code = exc.code().name
                    record.details[i] = exc.details() or ""
                    if exc.code() != grpc.StatusCode.UNAVAILABLE or time.monotonic() + RESEND_AFTER_S >= end:
                        break
                record.resent += 1
                await asyncio.sleep(RESEND_AFTER_S)
            record.outcome[i] = code
            record.ends[i] = record.ends.get(i, 0) + 1

        i = 0
        while not stop.is_set():
            record.sent_at.append(time.time())
            task = asyncio.create_task(one(i))
            pending.add(task)
            task.add_done_callback(pending.discard)
            i += 1
            try:
                await asyncio.wait_for(stop.wait(), float(rng.exponential(1.0 / qps)))
            except asyncio.TimeoutError:
                pass
        if pending:
            await asyncio.wait(pending, timeout=drain_s)
        counts = attempt_counts(target.removeprefix("ipv4:"), round_robin)
        # a query sent again is one more channel call, not one more query
        record.attempts = replace(counts, queries=max(0, counts.queries - record.resent))
    return record


__all__ = ["AttemptCounts", "INFERENCE_SERVICE", "LoadRecord", "QUERY_TIMEOUT_S", "RESEND_AFTER_S", "RETRY_POLICY", "attempt_counts",
           "channel_options", "service_config", "steady_load"]
