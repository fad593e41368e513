"""Base and auxiliary instance types, and the throughputs the upper bound is built from (Kairos §5.2).

Readings of the paper's definitions used here (all throughputs are per instance, in queries/s, and
are computed from the latency profiles over the batch-size mix; service time = the profile's
``mean`` column, QoS checks use the ``qos_stat`` column, p99 by default since the QoS is a p99
target):

- **QoS-respecting region s** of a type (Fig. 6): the largest profiled batch size ``s`` such that
  *every* profiled batch size ``<= s`` has latency ``<= xi * QoS`` (xi = 0.98, the noise safeguard
  of §5.1). A query of batch ``b`` is served within QoS iff ``b <= s``. 0 when even the smallest
  profiled batch misses the target.
- **f**: the fraction of queries in the mix with batch ``<= s`` (``BatchMix.cdf(s)``).
- **Q_b**: the base's standalone throughput over the whole mix: ``1000 / E[latency_b(batch)]``.
- **Q_b^{s+}**: the base's throughput when it serves only the queries larger than ``s``:
  ``1000 / E[latency_b(batch) | batch > s]``.
- **Q_a**: an auxiliary's throughput when it serves only the queries ``<= s``:
  ``1000 / E[latency_a(batch) | batch <= s]``.
- Several auxiliary types (Eq. 14-15): ``f' = max f^i`` over the auxiliary types present in a pool
  and ``Q_a^i`` is type i's throughput over the queries ``<= s'`` (the region of the type with the
  largest ``s``), even where that exceeds type i's own region (the paper's optimistic
  simplification). So for ``n`` auxiliary types we precompute an ``n x n`` matrix ``q_a[j, i]`` =
  throughput of type ``i`` over the region of type ``j``, and ``q_b_splus[j]`` = Q_b^{s_j+}.
- **Base type** (§7): among the types that meet QoS for every batch size in the mix, the one with
  the best throughput per dollar ``Q_b / price`` (ties: cheaper, then name). None → ``NoFeasibleBase``.

Also the heterogeneity coefficient of Definition 1 (§5.1).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from scaler.planner.batch_mix import BatchMix
from config.profiles import LatencyProfile, Stat


class PlanError(ValueError):
    """The planner cannot produce a plan from these inputs (one clear line)."""


class NoFeasibleBase(PlanError):
    """No allowed instance type meets the QoS target for every batch size in the mix."""


def qos_region(profile: LatencyProfile, limit_ms: float, stat: Stat = "p99") -> int:
    """Largest profiled batch ``s`` with every profiled batch ``<= s`` within ``limit_ms`` (0 if none)."""
    ok = profile.column(stat) <= limit_ms
    if ok.all():
        return int(profile.batch_sizes[-1])
    first_bad = int(np.argmin(ok))
    return int(profile.batch_sizes[first_bad - 1]) if first_bad > 0 else 0


def throughput_qps(profile: LatencyProfile, mix: BatchMix, mask: np.ndarray | None = None) -> float:
    """Standalone throughput (queries/s) of one instance serving the queries of ``mix`` selected by
    ``mask`` (all when None): ``1000 / E[mean latency | selected]``; 0.0 when nothing is selected."""
    frac = mix.fractions if mask is None else mix.fractions * mask
    total = float(frac.sum())
    if total <= 0.0:
        return 0.0
    busy_ms = float((frac * profile.latency_ms(mix.sizes, "mean")).sum()) / total
    return 1000.0 / busy_ms if busy_ms > 0 else float("inf")


@dataclass(frozen=True)
class AuxInfo:
    """One auxiliary type: its QoS-respecting region ``s``, the fraction ``f`` of the mix in it, and
    ``q_a``, its throughput over its own region."""

    instance_type: str
    s: int
    f: float
    q_a: float


@dataclass(frozen=True)
class BoundParams:
    """Everything Eq. 9-15 needs, as plain numbers. Auxiliary index order = ``aux`` order (ascending
    ``s``, then ``f``), so the last present auxiliary of a pool is the one with the largest region.

    ``f[j]``: fraction of region j; ``q_b_splus[j]``: Q_b^{s_j+}; ``q_a[j, i]``: throughput of auxiliary
    ``i`` over region ``j``.
    """

    q_b: float
    f: np.ndarray
    q_b_splus: np.ndarray
    q_a: np.ndarray


@dataclass(frozen=True)
class BaseAux:
    """The base type, its throughput, and the auxiliary types with their regions (Kairos §5.2)."""

    base_type: str
    q_b: float
    aux: tuple[AuxInfo, ...]
    params: BoundParams

    @property
    def aux_types(self) -> tuple[str, ...]:
        return tuple(a.instance_type for a in self.aux)


def split_base_aux(
    profiles: Mapping[str, LatencyProfile],
    mix: BatchMix,
    qos_ms: float,
    prices: Mapping[str, float],
    xi: float = 0.98,
    qos_stat: Stat = "p99",
) -> BaseAux:
    """Choose the base type and describe every other type as auxiliary (Kairos §5.2, §7)."""
    if len(mix.sizes) == 0 or float(mix.fractions.sum()) <= 0:
        raise PlanError("the batch-size mix is empty")
    if not profiles:
        raise PlanError("no instance types to plan with")
    limit = xi * qos_ms
    feasible: list[tuple[float, float, str]] = []
    for t, prof in profiles.items():
        lat = prof.latency_ms(mix.sizes, qos_stat)
        if bool(np.all(lat <= limit)):
            feasible.append((-throughput_qps(prof, mix) / prices[t], prices[t], t))
    if not feasible:
        raise NoFeasibleBase(
            f"no instance type meets the QoS target {qos_ms:g} ms (x{xi:g}) for every batch size up to "
            f"{mix.max_size} among {', '.join(sorted(profiles))}"
        )
    base = min(feasible)[2]
    bprof = profiles[base]
    q_b = throughput_qps(bprof, mix)

    raw = []
    for t, prof in profiles.items():
        if t == base:
            continue
        s = qos_region(prof, limit, qos_stat)
        f = mix.cdf(s)
        raw.append((s, f, t))
    raw.sort()
    n = len(raw)
    f_arr = np.array([r[1] for r in raw], dtype=float)
    q_b_splus = np.zeros(n)
    q_a = np.zeros((n, n))
    aux: list[AuxInfo] = []
    for j, (s, f, t) in enumerate(raw):
        inside = (mix.sizes <= s).astype(float)
        q_b_splus[j] = throughput_qps(bprof, mix, 1.0 - inside)
        for i, (_, _, ti) in enumerate(raw):
            q_a[j, i] = throughput_qps(profiles[ti], mix, inside)
        aux.append(AuxInfo(instance_type=t, s=int(s), f=float(f), q_a=float(q_a[j, j])))
    return BaseAux(base_type=base, q_b=q_b, aux=tuple(aux),
                   params=BoundParams(q_b=q_b, f=f_arr, q_b_splus=q_b_splus, q_a=q_a))


def heterogeneity_coefficients(latencies_ms: Mapping[str, float]) -> dict[str, float]:
    """Kairos §5.1, Definition 1: ``C_j`` = latency of the base (the lowest-latency type) on the
    largest query divided by type j's latency on it; the base gets 1. 100/200/500 ms → 1, 0.5, 0.2."""
    if not latencies_ms:
        return {}
    if any(v <= 0 for v in latencies_ms.values()):
        raise ValueError("latencies must be positive")
    best = min(latencies_ms.values())
    return {k: best / v for k, v in latencies_ms.items()}
