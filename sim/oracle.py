"""The Kairos §7 oracle (ORCL): an upper limit on the allowable throughput of a pool.

The paper's oracle knows the whole query sequence, sorts it by batch size, serves the largest
queries on base instances and the smallest on auxiliary ones, never lets a query wait and never
runs a query where it would miss QoS. We compute its allowable throughput as the *fluid bound* of
that idea, a small linear program (``scipy.optimize.linprog``, HiGHS):

Given N queries grouped by batch size g (``n_g`` of each, profile grid) and the pool's types t
(``c_t`` instances), choose ``x[g,t] >= 0`` queries of group g served on type t and a horizon T:

    minimise T
    s.t.  sum_t x[g,t] <= n_g                                   (each query served at most once)
          sum_g x[g,t] * E[S_t(g)] <= c_t * (T + drain)         (type t's instances busy <= 100%)
          sum_{g,t} x[g,t] * P[S_t(g) <= QoS] >= ceil(pct% * N)  (p99 within QoS)

and report ``N / T`` queries/s. ``drain`` is the time a run may keep serving after the last
arrival (QoS, when a query may finish QoS after it arrived) — 0 for the plain long-run bound.
The paper's sorted assignment (largest→base, smallest→auxiliary, no waiting) is one feasible
point of this LP, so the LP optimum is at least the paper's oracle. With deterministic service
times (``service="mean"``) it is a true upper bound on any policy simulated on the same queries
with their last arrival at N/λ: every query served within QoS finishes by N/λ + QoS, and at least
ceil(0.99 N) must be (nearest-rank p99); only 1% may be dropped, which the LP lets it skip.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Mapping

import numpy as np
from scipy.optimize import linprog

from scaler.planner.batch_mix import mix_from_batches
from config.profiles import ProfileTable
from sim.service import ServiceModel


@dataclass(frozen=True)
class OracleResult:
    allowable_qps: float
    served_fraction: float                 # share of queries the oracle serves (>= pct/100)
    share_by_type: dict[str, float]        # share of queries sent to each type
    utilization: dict[str, float]          # per-type busy share over the horizon (<= 1)


def oracle_capacity(
    pool: Mapping[str, int],
    model: str,
    profiles: ProfileTable,
    qos_ms: float,
    batches: np.ndarray,
    *,
    service: Literal["mean", "sampled"] = "mean",
    noise: float = 0.0,
    percentile: float = 99.0,
    drain_s: float = 0.0,
    granularity: int = 10,
) -> OracleResult:
    """Fluid-bound oracle throughput (q/s) of ``pool`` for the batch sizes ``batches``."""
    types = sorted(t for t, c in pool.items() if c > 0)
    b = np.asarray(batches, dtype=np.int64)
    n = int(b.size)
    if not types or n == 0:
        return OracleResult(0.0, 0.0, {}, {})
    mix = mix_from_batches(b, granularity)     # sizes rounded up to the profile grid
    groups, counts = mix.sizes, np.rint(mix.fractions * n).astype(np.int64)
    # queries are grouped by the profile grid: every size in a group has the same service time
    svc = ServiceModel(profiles, model, service, noise)
    G, K = groups.size, len(types)
    E = np.stack([svc.expected_ms(t, groups) for t in types], axis=1) / 1000.0  # (G, K) seconds
    P = np.stack([svc.prob_within(t, groups, qos_ms) for t in types], axis=1)    # (G, K)
    need = math.ceil(percentile / 100.0 * n - 1e-9)
    nv = G * K + 1  # x[g,k] row-major, then T
    c = np.zeros(nv)
    c[-1] = 1.0
    rows, rhs = [], []
    for g in range(G):
        r = np.zeros(nv)
        r[g * K:(g + 1) * K] = 1.0
        rows.append(r)
        rhs.append(float(counts[g]))
    for k, t in enumerate(types):
        r = np.zeros(nv)
        r[k:G * K:K] = E[:, k]
        r[-1] = -float(pool[t])
        rows.append(r)
        rhs.append(float(pool[t]) * drain_s)
    r = np.zeros(nv)
    r[:G * K] = -P.ravel()
    rows.append(r)
    rhs.append(-float(need))
    res = linprog(c, A_ub=np.array(rows), b_ub=np.array(rhs), bounds=[(0, None)] * nv, method="highs")
    if res.status != 0:  # infeasible: fewer than pct% of the queries can ever meet QoS here
        return OracleResult(0.0, 0.0, {t: 0.0 for t in types}, {t: 0.0 for t in types})
    x = res.x[:-1].reshape(G, K)
    horizon = max(float(res.x[-1]), 1e-12)
    work = (x * E).sum(axis=0)
    return OracleResult(
        allowable_qps=n / horizon,
        served_fraction=float(x.sum() / n),
        share_by_type={t: float(x[:, k].sum() / n) for k, t in enumerate(types)},
        utilization={t: float(work[k] / (pool[t] * (horizon + drain_s))) for k, t in enumerate(types)},
    )
