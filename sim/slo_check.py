"""Does a pool hold the p99 SLO at a given rate? A short simulation of production policy code, used
by the min_cost planner (``scaler.planner.choose.choose_pool(..., meets=...)``) to verify a candidate pool:
Kairos's upper bound (§5.2) is a fluid bound, and a pool run near it queues past a p99 target.
"""
from __future__ import annotations

import math
from typing import Callable, Mapping

import numpy as np

from dispatcher.policy import Policy
from scaler.planner.batch_mix import BatchMix
from config.profiles import ProfileTable
from sim.engine import simulate
from sim.metrics import nearest_rank
from sim.policies import policy_factory
from sim.workload import poisson_arrivals


def batches_from_mix(mix: BatchMix, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` batch sizes drawn from an empirical mix (sizes on the profile grid)."""
    if not len(mix.sizes):
        raise ValueError("empty batch mix")
    p = np.asarray(mix.fractions, dtype=float)
    return rng.choice(np.asarray(mix.sizes, dtype=np.int64), size=n, p=p / p.sum())


def slo_check(model: str, profiles: ProfileTable, qos_ms: float, rate_qps: float, mix: BatchMix, *,
              policy: str = "kairos", n_queries: int = 2000, seed: int = 0
              ) -> Callable[[dict[str, int], str | None], bool]:
    """A predicate ``meets(pool, base_type)``: True when ``pool`` serves Poisson arrivals at
    ``rate_qps`` with batches from ``mix`` at p99 ≤ ``qos_ms`` under ``policy`` run with that base
    type, as the dispatcher would (same queries for every pool: common random numbers,
    deterministic per seed). Types without a profile make the pool fail."""
    rng = np.random.default_rng(seed)
    arrivals = poisson_arrivals(rate_qps, rng, n=n_queries)
    batches = batches_from_mix(mix, n_queries, rng)

    def meets(pool: dict[str, int], base_type: str | None = None) -> bool:
        live = {t: n for t, n in pool.items() if n > 0}
        if not live or any(not profiles.has(model, t) for t in live):
            return False
        make = policy_factory(policy, profiles, model, live, base_type=base_type)
        return holds_p99(live, model, profiles, make(), arrivals, batches, qos_ms, seed=seed)

    return meets


def allowed_misses(n_queries: int) -> int:
    """How many of ``n_queries`` may miss the QoS with the p99 still within it: n - ceil(0.99 n)
    (nearest rank; at least one query counts)."""
    return n_queries - max(int(math.ceil(0.99 * n_queries - 1e-9)), 1)


def holds_p99(pool: Mapping[str, int], model: str, profiles: ProfileTable, policy: Policy, arrivals: np.ndarray,
              batches: np.ndarray, qos_ms: float, *, seed: int = 0) -> bool:
    """Whether ``policy`` on ``pool`` keeps the p99 of these queries within ``qos_ms``. A simulation
    past :func:`allowed_misses` misses is decided, and stops (most pools that fail, fail early)."""
    res = simulate(pool, model, profiles, policy, arrivals, batches, qos_ms, seed=seed,
                   stop_after_misses=allowed_misses(len(arrivals)))
    return not res.extra.get("stopped_early") and bool(nearest_rank(res.latency_ms, 99) <= qos_ms)
