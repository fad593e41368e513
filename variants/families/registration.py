"""A variant family registered through the model-less API as an application (INFaaS §3.1: an
application names a task; queries that name it may be served by any of its models' variants).

Each member becomes a registered model (``application`` = the family) whose one variant is the
model itself with the member's accuracy (``accuracy_estimated`` is False only for an accuracy
measured on the family's validation set; a published figure is marked estimated: not measured
here); the family CSV's latencies become the variant's stored profiles per instance type, so the
dispatcher's latency model and the model loop see them.

:func:`registration` is pure (rows in, registry rows out); :func:`register_family` writes them to a
:class:`variants.registry.VariantRegistry`. The gRPC ``RegisterModel`` path (validation set given,
variants generated and profiled by the pipeline) needs nothing from here but the ONNX files and
:func:`variants.families.digits.write_validation`; ``tests/variants/test_families.py`` registers the digits
family both ways.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Sequence

from variants.families.family import FamilySpec, Member
from variants.families.profiles import ProfileRow
from variants.generator import Variant
from variants.profiler import BatchLatency, VariantProfile
from variants.registry import RegisteredModel, base_variant
from variants.type_profiles import ESTIMATE_PROVIDER

#: the provider a stored profile names, by the instance type of its CSV rows (others: estimates)
MEASURED_PROVIDERS = {"local": "CPUExecutionProvider", "h100": "CUDAExecutionProvider"}

#: what a profile copied from a family CSV says of the memory it did not measure
FROM_CSV = "not measured: latency from a family profile CSV"


@dataclass(frozen=True)
class Registration:
    """What the registry holds for one member."""

    model: RegisteredModel
    variant: Variant
    profiles: tuple[VariantProfile, ...]


def registration(spec: FamilySpec, members: Sequence[Member], rows: Sequence[ProfileRow],
                 qos_ms: float | None = None, max_batch: int | None = None) -> list[Registration]:
    """Registry rows for ``members`` of ``spec`` with the profiles of ``rows`` (their CSV)."""
    out = []
    for m in members:
        if m.family != spec.name:
            raise ValueError(f"{m.name} belongs to {m.family!r}, not {spec.name!r}")
        rm = RegisteredModel(name=m.name, application=spec.name, onnx_path=str(m.path),
                             qos_ms=float(qos_ms or spec.qos_ms), max_batch=int(max_batch or spec.max_batch),
                             profile=m.name)
        v = dataclasses.replace(base_variant(rm, m.accuracy), accuracy_estimated=not m.accuracy_measured)
        by_type: dict[str, list[ProfileRow]] = {}
        for r in rows:
            if r.variant == m.name:
                by_type.setdefault(r.instance_type, []).append(r)
        profiles = tuple(
            VariantProfile(variant=m.name, model=m.name, instance_type=t, provider=MEASURED_PROVIDERS.get(t, ESTIMATE_PROVIDER),
                           batches=tuple(BatchLatency(r.batch_size, r.latency_ms, r.latency_ms, r.latency_ms, 1)
                                         for r in sorted(rs, key=lambda r: r.batch_size)),
                           load_ms=0.0, peak_memory_mb=0.0, memory_method=FROM_CSV)
            for t, rs in sorted(by_type.items()))
        out.append(Registration(rm, v, profiles))
    return out


def register_family(registry, spec: FamilySpec, members: Sequence[Member], rows: Sequence[ProfileRow],
                    qos_ms: float | None = None, max_batch: int | None = None) -> list[Variant]:
    """Adapter: register every member of the family as a model of application ``spec.name`` in
    ``registry`` (a :class:`variants.registry.VariantRegistry`) with its profiles; returns the variants."""
    regs = registration(spec, members, rows, qos_ms, max_batch)
    for reg in regs:
        registry.register_model(reg.model, [reg.variant])
        for p in reg.profiles:
            registry.save_profile(p)
    return [reg.variant for reg in regs]
