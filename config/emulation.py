"""Hardware emulation: how a local run stands for an EC2 instance type (DESIGN "Where it runs").

Two rules, shared by the worker (which pads a query's service time to them) and by
``costscale profile --local`` (which writes the latencies a local measurement stands for):

1. **A profiled model** (its name is in the profile CSV): the type's profile (Kairos §7 AWS
   measurements) times the variant's ``speed_factor`` (:func:`padded_service_ms`).
2. **A model nobody has profiled yet** (a user's own ONNX file): the time measured on this machine
   times the type's **emulation factor** (:func:`emulation_factors`, :func:`emulated_ms`). The factor of
   type T at batch b is the median, over the reference models of the shipped Kairos profiles, of
   ``ref(m, T, b) / min_T' ref(m, T', b)``: how much slower the reference models run on T than on
   their fastest type at that batch. This machine stands for the fastest type (factor 1), because
   padding can slow a local worker down but never speed it up. A type without a reference profile
   takes its sibling's factor times its latency factor when ``config/type_estimates.csv`` has a row
   for it (``rules``: :func:`config.type_estimates.type_rules`; the estimate is then one by that
   table, issue #29); else it has no factor and can only be measured (a probe on AWS).

INFaaS §3.2 profiles every variant on every hardware type at registration; these factors are how
the embedded default (and ``--local``) gives every type an estimate from one local measurement.
Pure but for :func:`reference_profiles`, which reads the shipped CSV once.
"""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Mapping

import numpy as np

from config.profiles import LatencyProfile, ProfileTable, Stat, load_profiles_csv

if TYPE_CHECKING:
    from config.type_estimates import TypeRule


def padded_service_ms(profile: LatencyProfile | None, batch: int, compute_ms: float, stat: Stat = "mean",
                      speed_factor: float = 1.0, type_factor: float | None = None) -> float:
    """Service time (ms) a query of ``batch`` should take: the larger of the real compute time and
    the profiled latency (batch rounded up to the profile grid) times the variant's ``speed_factor``
    (its measured latency relative to the model's base variant). Without a profile: ``compute_ms``
    times ``type_factor`` (the emulation factor of the type at this batch, rule 2) when given."""
    if compute_ms < 0:
        raise ValueError("compute_ms must be >= 0")
    if profile is None:
        return float(compute_ms) if type_factor is None else emulated_ms(compute_ms, type_factor)
    target = float(profile.latency_ms(max(int(batch), 1), stat)) * (speed_factor if speed_factor > 0 else 1.0)
    return max(float(compute_ms), target)


def padding_ms(profile: LatencyProfile | None, batch: int, compute_ms: float, elapsed_ms: float, stat: Stat = "mean",
               speed_factor: float = 1.0, type_factor: float | None = None) -> float:
    """How long to sleep now, ``elapsed_ms`` into the query, to reach the padded service time."""
    return max(0.0, padded_service_ms(profile, batch, compute_ms, stat, speed_factor, type_factor) - float(elapsed_ms))


@functools.lru_cache(maxsize=1)
def reference_profiles() -> ProfileTable:
    """The reference the factors come from: the shipped Kairos AWS profiles (never the user's CSV,
    so a user's own rows do not move the factors)."""
    return load_profiles_csv()


def factor_types(reference: ProfileTable) -> list[str]:
    """Instance types that have an emulation factor (some reference model is profiled there)."""
    return reference.types()


def sibling_rule(reference: ProfileTable, instance_type: str,
                 rules: Mapping[str, TypeRule] | None) -> TypeRule | None:
    """The ``rules`` row ``instance_type``'s factor comes through: its own when no reference model
    is profiled on it (rule 2, issue #29); None when it has a reference profile or no row."""
    rule = (rules or {}).get(instance_type)
    return rule if rule is not None and instance_type not in reference.types() else None


def emulation_factors(reference: ProfileTable, instance_type: str, batches: np.ndarray | list[int],
                      stat: Stat = "mean", rules: Mapping[str, TypeRule] | None = None) -> np.ndarray | None:
    """Rule 2's factor of ``instance_type`` at each of ``batches`` (>= 1 each); None when no
    reference model is profiled on that type and ``rules`` give it no sibling that has one
    (:func:`sibling_rule`)."""
    rule = sibling_rule(reference, instance_type, rules)
    if rule is not None:
        f = emulation_factors(reference, rule.sibling, batches, stat)
        return None if f is None else f * rule.latency_factor
    b = np.maximum(np.asarray(batches, dtype=float), 1.0)
    ratios = []
    for m in reference.models():
        types = reference.types(m)
        if instance_type not in types:
            continue
        fastest = np.min(np.vstack([reference.latency_ms(m, t, b, stat) for t in types]), axis=0)
        ratios.append(reference.latency_ms(m, instance_type, b, stat) / fastest)
    if not ratios:
        return None
    return np.median(np.vstack(ratios), axis=0)


def emulated_ms(measured_ms: float | np.ndarray, factor: float | np.ndarray) -> float | np.ndarray:
    """A latency measured on this machine as it stands on a type with emulation ``factor``."""
    out = np.asarray(measured_ms, dtype=float) * np.asarray(factor, dtype=float)
    return float(out) if out.ndim == 0 else out


def derive_profile(local: LatencyProfile, instance_type: str, reference: ProfileTable,
                   model: str | None = None, rules: Mapping[str, TypeRule] | None = None) -> LatencyProfile | None:
    """``local`` (measured on this machine) as an estimate for ``instance_type``: every batch's
    mean, p50 and p99 times the type's emulation factor at that batch; None without a factor."""
    f = emulation_factors(reference, instance_type, local.batch_sizes, rules=rules)
    if f is None:
        return None
    return LatencyProfile(model=model or local.model, instance_type=instance_type,
                          batch_sizes=local.batch_sizes.copy(), mean_ms=emulated_ms(local.mean_ms, f),
                          p50_ms=emulated_ms(local.p50_ms, f), p99_ms=emulated_ms(local.p99_ms, f))
