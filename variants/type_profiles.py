"""Profiles of a model and its variants on every allowed instance type: what to measure, how a
local measurement becomes per-type estimates, and what to hold until measurements exist.

INFaaS §3.2 (Variant-Profiler) profiles every variant on every hardware type when a model is
registered; Kairos §5.2 plans from per-(model, type, batch) service times. This module decides,
purely (no I/O, no clock):

- :func:`default_batches`: the batch sizes to measure (powers of two up to the model's largest
  batch, and that batch);
- :func:`types_for`: the types a variant runs on (its hardware class; the base variant on all);
- :func:`missing_types`: the allowed types a model has no profile on;
- :func:`estimate_types`: a local measurement as estimates for other types
  (:func:`config.emulation.derive_profile`, the rule the local worker pads with; a type nobody
  measured through its sibling in ``config/type_estimates.csv``, issue #29), made
  :func:`monotone` in the batch size, as measured profiles are;
- :func:`slo_verdict`: the one line for a model that meets its SLO on no type at its largest batch;
- :func:`conservative_pool`: the pool a model is served on until its profiles exist (the cheapest
  allowed type that meets its SLO at its largest batch by the local estimate, else the configured
  minimum counts);
- :func:`drift`: whether the online latency model shows a profile drifted (then it is measured again).

Measuring (ONNX Runtime here, or a worker's Infer on a probe) is done by adapters:
``variants.prepare.profile_locally`` and ``daemon.profiling.probing``.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence

import numpy as np

from config.budget import BUDGET_EPS
from config.emulation import derive_profile, sibling_rule
from config.profiles import LatencyProfile, ProfileTable
from variants.runtime.executor import ANY_HARDWARE
from variants.profiler import BatchLatency, VariantProfile

if TYPE_CHECKING:
    from config.type_estimates import TypeRule

#: the provider recorded for a profile derived from a local measurement (not measured on the type)
ESTIMATE_PROVIDER = "estimate: local measurement x emulation factor"
#: largest batch measured by default; beyond it the profile extrapolates linearly (config.profiles)
MAX_DEFAULT_BATCH = 1024


def default_batches(max_batch: int) -> tuple[int, ...]:
    """1, 2, 4, ... up to the model's largest batch (at most :data:`MAX_DEFAULT_BATCH`), and that batch."""
    top = max(1, min(int(max_batch), MAX_DEFAULT_BATCH))
    return tuple(sorted({1 << i for i in range(top.bit_length()) if (1 << i) <= top} | {top}))


def is_estimate(p: VariantProfile) -> bool:
    """Whether a stored profile is an estimate (its provider says so: :data:`ESTIMATE_PROVIDER`, or
    a ``config/type_estimates.csv`` basis, which starts the same way)."""
    return p.provider.startswith("estimate")


def types_for(hardware: str, types: Sequence[str], hardware_of: Mapping[str, str]) -> list[str]:
    """The types among ``types`` a variant of ``hardware`` runs on (all of them for the base variant)."""
    return [t for t in types if hardware == ANY_HARDWARE or hardware_of.get(t) == hardware]


def missing_types(table: ProfileTable, model_key: str, types: Iterable[str]) -> list[str]:
    """The types of ``types`` (in order) that ``model_key`` has no profile on."""
    return [t for t in types if not table.has(model_key, t)]


def monotone(p: VariantProfile) -> VariantProfile:
    """``p`` with each statistic made non-decreasing in the batch size (a running maximum): a larger
    batch never takes less time. Measurement noise on a small model would otherwise give the planner
    a profile whose last two points extrapolate to negative latencies (Kairos §5.1 relies on
    latency growing with the batch)."""
    rows = sorted(p.batches, key=lambda b: b.batch_size)
    cols = [np.maximum.accumulate([getattr(b, c) for b in rows]) for c in ("mean_ms", "p50_ms", "p99_ms")]
    batches = tuple(BatchLatency(b.batch_size, float(m), float(p50), float(p99), b.runs)
                    for b, m, p50, p99 in zip(rows, *cols))
    return replace(p, batches=batches)


def as_variant_profile(lp: LatencyProfile, like: VariantProfile, provider: str, runs: int | None = None) -> VariantProfile:
    """``lp`` (one type) as a :class:`VariantProfile` with ``like``'s variant, model, load time and memory."""
    n = {b.batch_size: b.runs for b in like.batches}
    rows = tuple(BatchLatency(int(b), float(m), float(p50), float(p99), runs if runs is not None else n.get(int(b), 0))
                 for b, m, p50, p99 in zip(lp.batch_sizes, lp.mean_ms, lp.p50_ms, lp.p99_ms))
    return VariantProfile(variant=like.variant, model=like.model, instance_type=lp.instance_type, provider=provider,
                          batches=rows, load_ms=like.load_ms, peak_memory_mb=like.peak_memory_mb,
                          memory_method=like.memory_method)


def estimate_types(local: VariantProfile, types: Sequence[str], reference: ProfileTable,
                   rules: Mapping[str, TypeRule] | None = None) -> tuple[list[VariantProfile], list[str]]:
    """``local`` (measured here) as an estimate on each of ``types`` (made :func:`monotone` before
    and after the type's factors, which fall with the batch on some types); a type without a
    reference profile through its sibling in ``rules`` (its provider then that rule's basis); also
    the types without an emulation factor (they can only be measured on the type itself)."""
    lp = monotone(local).to_latency_profile()
    out, skipped = [], []
    for t in types:
        d = derive_profile(lp, t, reference, rules=rules)
        if d is None:
            skipped.append(t)
            continue
        rule = sibling_rule(reference, t, rules)
        provider = rule.basis(sibling_estimated=True) if rule is not None else ESTIMATE_PROVIDER
        out.append(monotone(as_variant_profile(d, local, provider)))
    return out, skipped


@dataclass(frozen=True)
class SloCheck:
    """How a model fares at its largest batch on each type: p99 (ms) by type, and the verdict."""

    model: str
    qos_ms: float
    max_batch: int
    p99_ms: dict[str, float]

    @property
    def meeting(self) -> list[str]:
        return [t for t, ms in self.p99_ms.items() if ms <= self.qos_ms]

    def line(self) -> str | None:
        """None when some type meets the SLO; else one line naming the best type and the fixes."""
        if self.meeting or not self.p99_ms:
            return None
        best = min(self.p99_ms, key=lambda t: (self.p99_ms[t], t))
        return (f"model {self.model!r} cannot meet its SLO (p99 <= {self.qos_ms:g} ms) at its largest batch "
                f"{self.max_batch} on any of {', '.join(sorted(self.p99_ms))}: the best is {best} at "
                f"{self.p99_ms[best]:.1f} ms; lower its max_batch or raise its qos_ms")


def slo_verdict(table: ProfileTable, model_key: str, types: Sequence[str], qos_ms: float, max_batch: int,
                model: str | None = None) -> SloCheck:
    """p99 at ``max_batch`` of ``model_key`` on each profiled type of ``types``."""
    p99 = {t: float(table.latency_ms(model_key, t, max_batch, "p99")) for t in types if table.has(model_key, t)}
    return SloCheck(model or model_key, float(qos_ms), int(max_batch), p99)


def conservative_pool(check: SloCheck, prices: Mapping[str, float], mins: Mapping[str, int],
                      budget: float) -> tuple[dict[str, int], str]:
    """The pool to hold for a model until its profiles exist, and why: the configured minimum
    counts plus one instance of the cheapest type that meets the SLO at the largest batch by the
    local estimate (when that fits the budget); else the minimum counts alone."""
    base = {t: n for t, n in mins.items() if n > 0}
    floor = sum(prices[t] * n for t, n in base.items())
    for t in sorted(check.meeting, key=lambda t: (prices[t], t)):
        if base.get(t, 0) >= 1 or floor + prices[t] <= budget + BUDGET_EPS:
            pool = dict(base)
            pool[t] = max(1, pool.get(t, 0))
            return pool, (f"{t} meets p99 <= {check.qos_ms:g} ms at batch {check.max_batch} by the local estimate "
                          f"({check.p99_ms[t]:.1f} ms) and is the cheapest that does")
    why = "no type meets the SLO by the local estimate" if not check.meeting else "no type that meets it fits the budget"
    return base, f"{why}: the configured minimum counts"


#: a profile has drifted when measured queries take this many times its latency (median over buckets)
DRIFT_RATIO = 1.5
#: ... judged only from buckets with at least this many measured queries
DRIFT_MIN_SAMPLES = 10


def drift(profile: LatencyProfile, observed: Mapping[int, tuple[int, float]], ratio: float = DRIFT_RATIO,
          min_samples: int = DRIFT_MIN_SAMPLES) -> float | None:
    """The factor by which a (model, type)'s measured queries are slower than its profile, when it
    has drifted (the median over buckets with ``min_samples`` observations of observed mean /
    profile latency at the bucket's top batch is above ``ratio``); else None. ``observed`` is bucket
    -> (count, mean ms), a bucket holding batches up to its key: the profile at the key is an upper
    bound of the bucket's, so only slowdowns are judged (a faster type never triggers a refresh)."""
    keys = [k for k, (n, _) in sorted(observed.items()) if n >= min_samples]
    if not keys:
        return None
    measured = np.array([observed[k][1] for k in keys])
    expected = np.maximum(profile.latency_ms(np.asarray(keys, dtype=float)), 1e-9)
    r = float(np.median(measured / expected))
    return r if r > ratio else None
