"""The Kairos §7 oracle (ORCL) as the paper describes it, beside the fluid LP of ``sim.oracle``.

Kairos §7: "It creates a sequence of queries according to batch size distribution and sorts all
queries by the batch size. Whenever a base instance is available, it serves the next largest
query. For auxiliary instances, it is the next smallest query. There is no wait time for queries,
and queries never run on instances that violate QoS. The throughput on serving the query sequence
is recorded, and among all possible heterogeneous configurations, the largest throughput is used
as the Oracle throughput."

Our reading, made exact:

- every query is available at time 0 (no arrivals, no waiting); all instances are free at 0;
- the instance that becomes free first takes its next query (ties: base before auxiliary, then
  the worker order of ``sim.engine.worker_ids_for``); a base instance takes the largest query
  left that it serves within QoS, an auxiliary instance the smallest query left, if it serves it
  within QoS; an instance with nothing it may serve retires;
- service time = the profile mean (``sim.service.ServiceModel`` with ``service="mean"``), and
  "within QoS" = service time <= ``xi * qos_ms`` (no wait, so latency = service time);
- throughput = queries served / the time the last one finishes (the makespan). Queries no
  instance of the pool serves within QoS are never run; ``served_fraction`` says how many ran.
  The allowable throughput is a p99 figure (Kairos §7 "Metrics"): a pool that leaves more than
  ``100 - percentile`` % of the sequence unserved (a pool of auxiliary types only, on a mix with
  queries beyond their QoS region) has allowable throughput 0, as in the fluid LP.
- the base type of a pool is ``sim.policies.base_type_of`` (the fastest type on the largest
  batch, Kairos Definition 1 / §7) unless given.

:func:`best_paper_oracle` is "among all possible heterogeneous configurations, the largest": the
max over the pools it is given. Unlike the LP (a fluid bound on every policy), this oracle is a
heuristic schedule with perfect knowledge; it is not an upper bound on every policy.
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Iterable, Mapping

import numpy as np

from config.profiles import ProfileTable
from sim.engine import worker_ids_for
from sim.policies import base_type_of


@dataclass(frozen=True)
class PaperOracleResult:
    allowable_qps: float                   # served / makespan (q/s); 0 when nothing can be served
    served_fraction: float                 # share of the sequence run (the rest misses QoS everywhere)
    makespan_s: float
    base_type: str
    share_by_type: dict[str, float]        # share of the sequence served by each type


def paper_oracle(
    pool: Mapping[str, int],
    model: str,
    profiles: ProfileTable,
    qos_ms: float,
    batches: np.ndarray,
    *,
    base_type: str | None = None,
    xi: float = 1.0,
    percentile: float = 99.0,
) -> PaperOracleResult:
    """Kairos §7 ORCL throughput of one pool on the query sequence ``batches`` (see module doc)."""
    live = {t: int(c) for t, c in pool.items() if c > 0}
    b = np.sort(np.asarray(batches, dtype=np.int64))
    n = int(b.size)
    if not live or n == 0:
        return PaperOracleResult(0.0, 0.0, 0.0, base_type or "", {})
    base = base_type if base_type is not None and base_type in live else base_type_of(live, profiles, model)
    limit = xi * qos_ms
    svc = {t: np.asarray(profiles.latency_ms(model, t, b, "mean"), dtype=float) for t in live}
    ok = {t: svc[t] <= limit for t in live}
    servable = np.zeros(n, dtype=bool)
    for t in live:
        servable |= ok[t]
    # sorted queries still waiting: indices lo..hi (inclusive) of b; taken[] marks the base's skips
    taken = ~servable
    lo, hi = 0, n - 1
    heap: list[tuple[float, int, int, str]] = []
    for k, (_, t) in enumerate(worker_ids_for(live)):
        heap.append((0.0, 0 if t == base else 1, k, t))
    heapq.heapify(heap)
    served_by = {t: 0 for t in live}
    makespan = 0.0
    svc_l = {t: (svc[t] / 1000.0).tolist() for t in live}
    ok_l = {t: ok[t].tolist() for t in live}
    taken_l = taken.tolist()
    while heap:
        while lo <= hi and taken_l[lo]:
            lo += 1
        while hi >= lo and taken_l[hi]:
            hi -= 1
        if lo > hi:
            break
        free_at, rank, k, t = heapq.heappop(heap)
        if rank == 0:                       # base: the largest query left it serves within QoS
            j = hi
            while j >= lo and (taken_l[j] or not ok_l[t][j]):
                j -= 1
            if j < lo:
                continue                    # retires
        else:                               # auxiliary: the smallest query left, if within QoS
            j = lo
            if not ok_l[t][j]:
                continue                    # retires
        taken_l[j] = True
        done = free_at + svc_l[t][j]
        makespan = max(makespan, done)
        served_by[t] += 1
        heapq.heappush(heap, (done, rank, k, t))
    served = sum(served_by.values())
    enough = served >= math.ceil(percentile / 100.0 * n - 1e-9)
    return PaperOracleResult(
        allowable_qps=served / makespan if makespan > 0 and enough else 0.0,
        served_fraction=served / n,
        makespan_s=makespan,
        base_type=base,
        share_by_type={t: c / n for t, c in served_by.items()},
    )


def best_paper_oracle(pools: Iterable[Mapping[str, int]], model: str, profiles: ProfileTable, qos_ms: float,
                      batches: np.ndarray, *, xi: float = 1.0, percentile: float = 99.0) -> tuple[float, dict[str, int]]:
    """Kairos §7: the largest ORCL throughput among ``pools`` and the pool that has it
    (``(0.0, {})`` when none serves anything)."""
    best, best_pool = 0.0, {}
    for p in pools:
        q = paper_oracle(p, model, profiles, qos_ms, batches, xi=xi, percentile=percentile).allowable_qps
        if q > best:
            best, best_pool = q, {t: int(c) for t, c in p.items() if c > 0}
    return best, best_pool
