"""The demo's load and how its answers count: what the client sends and when (open-loop Poisson
arrivals with a step half-way, or a trace's arrivals in real time, through the public gRPC API), and
:class:`LoadStats`: a query served over the QoS target and one answered with a ``DROP_CODES`` code
are SLO misses; the live p99 is over the last ``P99_WINDOW_S`` seconds.
"""
from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from dataclasses import dataclass, field

import grpc
import numpy as np

from daemon.demos.demo_config import DEMO_QOS_MS
from scaler.planner.batch_mix import sample_batches
from sim.metrics import nearest_rank
from sim.workload import Workload

#: answers that drop a query (the dispatcher gave up on it): each one is an SLO miss
DROP_CODES = frozenset({"DEADLINE_EXCEEDED", "UNAVAILABLE", "RESOURCE_EXHAUSTED"})
#: the live display's p99 is over the queries answered in the last this many seconds
P99_WINDOW_S = 10.0


@dataclass
class LoadStats:
    sent: int = 0
    ok: int = 0
    violations: int = 0          # served over the QoS target
    dropped: int = 0             # answered with one of DROP_CODES
    errors: dict[str, int] = field(default_factory=dict)
    latencies_ms: list[float] = field(default_factory=list)
    served_by_type: dict[str, int] = field(default_factory=dict)
    providers: dict[str, int] = field(default_factory=dict)
    #: (monotonic time served, ms) of the last ``P99_WINDOW_S`` seconds, oldest first
    recent: deque[tuple[float, float]] = field(default_factory=deque)
    #: (s since the load began, batch) of every query sent: the load the hindsight reference prices
    sent_log: list[tuple[float, int]] = field(default_factory=list)
    qos_ms: float = DEMO_QOS_MS  # the SLO a served query is judged against

    def record_served(self, ms: float, now: float, instance_type: str = "", provider: str = "") -> None:
        self.ok += 1
        self.latencies_ms.append(ms)
        self.recent.append((now, ms))
        self._trim(now)
        if ms > self.qos_ms:
            self.violations += 1
        if instance_type:
            self.served_by_type[instance_type] = self.served_by_type.get(instance_type, 0) + 1
        if provider:
            self.providers[provider] = self.providers.get(provider, 0) + 1

    def record_error(self, code: str) -> None:
        self.errors[code] = self.errors.get(code, 0) + 1
        if code in DROP_CODES:
            self.dropped += 1

    @property
    def answered(self) -> int:
        """Queries served or dropped: what the SLO is judged on."""
        return self.ok + self.dropped

    @property
    def misses(self) -> int:
        return self.violations + self.dropped

    def miss_pct(self) -> float:
        """Percentage of answered queries that missed the SLO (nan before any answer)."""
        return 100.0 * self.misses / self.answered if self.answered else math.nan

    def pct(self, q: float) -> float:
        """Nearest-rank percentile since the start (nan without a sample), the definition the
        simulator and the SLO use."""
        return nearest_rank(np.asarray(self.latencies_ms), q)

    def recent_pct(self, q: float, now: float) -> float:
        """Nearest-rank percentile over the last ``P99_WINDOW_S`` seconds (nan without a sample)."""
        self._trim(now)
        return nearest_rank(np.fromiter((ms for _, ms in self.recent), dtype=float), q)

    def _trim(self, now: float) -> None:
        while self.recent and self.recent[0][0] < now - P99_WINDOW_S:
            self.recent.popleft()



async def send_load(target: str, model: str, duration: float, rate1: float, rate2: float, seed: int,
                stats: LoadStats, stop: asyncio.Event, on_tick, trace: Workload | None = None) -> None:
    """Open-loop Poisson arrivals: rate1 for the first half, rate2 for the second; or the
    ``trace``'s arrivals (s from the start) and batch sizes, in real time."""
    from dispatcher.proto import costscale_pb2 as pb
    from dispatcher.proto import costscale_pb2_grpc as pbg

    rng = np.random.default_rng(seed)
    batches = trace.batches if trace is not None else sample_batches("deeprecsys", 200_000, rng)
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pbg.InferenceStub(channel)
        pending: set[asyncio.Task[None]] = set()

        async def one(i: int) -> None:
            t0 = time.perf_counter()
            try:
                reply = await stub.Submit(pb.SubmitRequest(model=model, batch_size=int(batches[i % len(batches)]),
                                                           idempotency_key=f"demo-{seed}-{i}"), timeout=10.0)
            except grpc.aio.AioRpcError as exc:
                stats.record_error(exc.code().name)
                return
            stats.record_served((time.perf_counter() - t0) * 1000.0, time.monotonic(), reply.instance_type,
                                reply.provider)

        start = time.monotonic()
        next_t = float(trace.arrivals[0]) if trace is not None and len(trace) else 0.0
        i = 0
        last_tick = 0.0
        while not stop.is_set():
            elapsed = time.monotonic() - start
            if elapsed >= duration:
                break
            if elapsed - last_tick >= 0.5:
                last_tick = elapsed
                on_tick(elapsed, trace_rate(trace, elapsed) if trace is not None
                        else rate1 if elapsed < duration / 2 else rate2)
            if elapsed >= next_t and trace is not None and i >= len(trace):
                await asyncio.sleep(min(duration - elapsed, 0.05))
                continue
            if elapsed >= next_t:
                task = asyncio.create_task(one(i))
                pending.add(task)
                task.add_done_callback(pending.discard)
                stats.sent += 1
                stats.sent_log.append((elapsed, int(batches[i % len(batches)])))
                i += 1
                if trace is not None:
                    next_t = float(trace.arrivals[i]) if i < len(trace) else duration
                    continue
                rate = rate1 if next_t < duration / 2 else rate2
                next_t += float(rng.exponential(1.0 / rate))
                continue
            await asyncio.sleep(min(next_t - elapsed, 0.05))
        if pending:
            await asyncio.wait(pending, timeout=15.0)


def trace_rate(trace: Workload, t: float, window_s: float = 10.0) -> float:
    """The trace's arrival rate over the ``window_s`` before ``t`` (q/s), for the display."""
    a = trace.arrivals
    return float(np.searchsorted(a, t) - np.searchsorted(a, t - window_s)) / window_s


def trace_span_and_rate(trace: Workload) -> tuple[float, float]:
    """A trace's length (to a second past its last query) and its first minute's rate, which the
    demo declares as its expected demand (at least 0.1 q/s)."""
    duration = float(trace.arrivals[-1]) + 1.0
    return duration, max(float(np.searchsorted(trace.arrivals, 60.0)) / min(60.0, duration), 0.1)



__all__ = ["DROP_CODES", "LoadStats", "P99_WINDOW_S", "send_load", "trace_rate", "trace_span_and_rate"]
