"""Numbers from a simulated run: served queries, p50/p99 latency, SLO violations, throughput,
per-instance utilization and dollars (Kairos §7 metrics: throughput under the p99 QoS target).

Percentiles use the nearest-rank definition (the smallest latency with at least p% of queries at
or below it), counting dropped queries as infinitely late, so ``p99 <= QoS`` holds exactly when
at most 1% of queries miss the target.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from sim.engine import SimResult
from scaler.planner.pools import pool_cost


def nearest_rank(values: np.ndarray, pct: float) -> float:
    """Nearest-rank percentile: ``sorted(values)[ceil(pct/100 * n) - 1]`` (nan when empty)."""
    v = np.asarray(values, dtype=float)
    if v.size == 0:
        return math.nan
    k = max(int(math.ceil(pct / 100.0 * v.size - 1e-9)), 1)
    return float(np.partition(v, k - 1)[k - 1])


@dataclass(frozen=True)
class SimMetrics:
    queries: int
    served: int
    dropped: int
    p50_ms: float
    p99_ms: float
    violation_ratio: float      # share of queries over QoS (dropped included)
    throughput_qps: float       # served queries / simulated duration
    goodput_qps: float          # queries within QoS / simulated duration
    duration_s: float
    cost_per_hour: float
    cost_usd: float             # pool $/hr x simulated duration
    utilization: dict[str, float]  # worker id -> busy share of the duration

    def to_dict(self) -> dict[str, object]:
        d = asdict(self)
        for k in ("p50_ms", "p99_ms"):
            if not math.isfinite(d[k]):
                d[k] = None
        return d



def summarize(res: SimResult) -> SimMetrics:
    lat = res.latency_ms
    n = int(lat.size)
    served = int(np.isfinite(lat).sum())
    within = int((lat <= res.qos_ms).sum())
    dur = res.duration_s
    cph = pool_cost(res.pool, res.prices) if res.prices else 0.0
    util = {w: (float(b) / 1000.0 / dur if dur > 0 else 0.0) for w, b in zip(res.worker_ids, res.busy_ms)}
    return SimMetrics(
        queries=n,
        served=served,
        dropped=n - served,
        p50_ms=nearest_rank(lat, 50),
        p99_ms=nearest_rank(lat, 99),
        violation_ratio=(n - within) / n if n else 0.0,
        throughput_qps=served / dur if dur > 0 else 0.0,
        goodput_qps=within / dur if dur > 0 else 0.0,
        duration_s=dur,
        cost_per_hour=cph,
        cost_usd=cph * dur / 3600.0,
        utilization=util,
    )
