"""Allowable throughput (Kairos §7 "Metrics"): the highest Poisson arrival rate at which the p99
latency stays within the QoS target, found by bracketing (doubling/halving) then bisection until
``(hi - lo) / hi <= precision``.

:func:`pool_capacity` uses common random numbers: one seeded unit-rate Poisson sequence of ``n``
queries (last arrival at exactly n) and one batch sequence, scaled by 1/λ for each tried rate λ,
so every rate sees the same queries and the result is deterministic per seed.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Literal, Mapping

from dispatcher.policy import Policy
from config.sections.batch_dist import BatchDist
from config.profiles import ProfileTable
from sim.engine import simulate
from sim.metrics import nearest_rank
from sim.oracle import oracle_capacity
from sim.workload import Workload, unit_poisson_workload


@dataclass(frozen=True)
class CapacityResult:
    allowable_qps: float
    p99_ms: float                      # p99 at ``allowable_qps`` (nan when 0)
    evaluations: list[tuple[float, float]] = field(default_factory=list)  # (rate, p99) tried


def allowable_throughput(evaluate: Callable[[float], float], qos_ms: float, start_qps: float, *,
                         precision: float = 0.02, max_steps: int = 60, min_qps: float = 1e-3) -> CapacityResult:
    """Highest rate with ``evaluate(rate) <= qos_ms`` (``evaluate`` returns the p99 in ms), by
    doubling/halving from ``start_qps`` to bracket it and bisecting to relative ``precision``."""
    if not start_qps > 0:
        raise ValueError("start_qps must be > 0")
    if not 0 < precision < 1:
        raise ValueError("precision must be in (0, 1)")
    tried: list[tuple[float, float]] = []
    cache: dict[float, float] = {}

    def ok(rate: float) -> bool:
        if rate not in cache:
            cache[rate] = float(evaluate(rate))
            tried.append((rate, cache[rate]))
        return cache[rate] <= qos_ms

    r = float(start_qps)
    if ok(r):
        lo, hi = r, 2 * r
        while ok(hi):
            lo, hi = hi, 2 * hi
            if len(tried) >= max_steps:
                return CapacityResult(lo, cache[lo], tried)
    else:
        hi, lo = r, r / 2
        while not ok(lo):
            hi, lo = lo, lo / 2
            if lo < min_qps or len(tried) >= max_steps:
                return CapacityResult(0.0, float("nan"), tried)
    lo = bisect_rate(ok, lo, hi, precision, max_steps - len(tried))
    return CapacityResult(lo, cache[lo], tried)


def bisect_rate(holds: Callable[[float], bool], lo: float, hi: float, precision: float, max_calls: int = 60) -> float:
    """The highest rate found to hold by bisecting between ``lo`` (holds) and ``hi`` (does not, or
    is a bound) until ``(hi - lo) / hi <= precision`` or ``max_calls`` calls of ``holds``."""
    calls = 0
    while (hi - lo) / hi > precision and calls < max_calls:
        mid = (lo + hi) / 2
        calls += 1
        if holds(mid):
            lo = mid
        else:
            hi = mid
    return lo


def pool_capacity(
    pool: Mapping[str, int],
    model: str,
    profiles: ProfileTable,
    qos_ms: float,
    policy_factory: Callable[[], Policy],
    *,
    batch_dist: BatchDist | str = "deeprecsys",
    workload: Workload | None = None,
    n_queries: int = 4000,
    seed: int = 0,
    service: Literal["mean", "sampled"] = "mean",
    noise: float = 0.0,
    precision: float = 0.02,
    start_qps: float | None = None,
) -> CapacityResult:
    """Allowable throughput of ``pool`` under a fresh policy per tried rate (``policy_factory``).

    ``workload`` (unit rate, last arrival at ``len``) overrides the seeded one from ``batch_dist``.
    The search starts at half the oracle bound unless ``start_qps`` is given.
    """
    wl = workload or unit_poisson_workload(n_queries, batch_dist, seed=seed)

    def p99_at(rate: float) -> float:
        res = simulate(pool, model, profiles, policy_factory(), wl.arrivals / rate, wl.batches, qos_ms,
                       service=service, noise=noise, seed=seed)
        return nearest_rank(res.latency_ms, 99)

    if start_qps is None:
        bound = oracle_capacity(pool, model, profiles, qos_ms, wl.batches, service=service, noise=noise,
                                drain_s=qos_ms / 1000.0).allowable_qps
        if bound <= 0:
            return CapacityResult(0.0, float("nan"), [])
        start_qps = bound / 2
    return allowable_throughput(p99_at, qos_ms, start_qps, precision=precision)
