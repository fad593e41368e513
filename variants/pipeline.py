"""The variant pipeline of a registered model (INFaaS §3.2): generate its variants, profile them,
store everything in the variant registry. Used by the dispatcher's ``RegisterModel`` and by the
daemon for the config's models. Importing this module stays light (no onnx until it runs)."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Mapping

#: hardware classes variants are generated for, in this order, when the catalog has them
GENERATED_HARDWARE: tuple[str, ...] = ("cpu", "gpu")


def hardware_classes(catalog: Mapping[str, Any]) -> tuple[str, ...]:
    """The classes of :data:`GENERATED_HARDWARE` that some instance type of ``catalog`` (type ->
    instance type with a ``hardware`` attribute) has; empty when none."""
    return tuple(h for h in GENERATED_HARDWARE if any(it.hardware == h for it in catalog.values()))


def generate_and_profile(src: Path, rm, out_dir: Path, hardware: tuple[str, ...], validation: Path | None,
                         registry, batch_sizes: tuple[int, ...] = (1, 8, 32), repeats: int = 2) -> list:
    """Adapter (blocking): generate the variants of ``src`` (INFaaS §3.2 Variant-Generator), profile
    each one briefly on this machine's CPU provider (Variant-Profiler; instance type "local"),
    and store model, variants and profiles in the registry. Returns the variants."""
    from variants.generator import generate_variants
    from variants.profiler import profile_variant
    from variants.registry import base_variant

    generated = generate_variants(src, rm.name, out_dir, application=rm.application, hardware=hardware,
                                  tuned_batches=(8,), validation=validation)
    parent = next((v for v in generated if v.precision == "fp32" and not v.tuned_batch), None)
    base = base_variant(rm, parent.accuracy if parent else 1.0)
    variants = [base] + generated
    registry.register_model(rm, variants)
    by_path: dict[str, object] = {}   # variants sharing a file (fp32 for CPU and for GPU) are profiled once
    for v in variants:
        key = str(Path(v.path).resolve())
        if key not in by_path:
            try:
                by_path[key] = profile_variant(v.path, v.name, "local", model=rm.name, batch_sizes=batch_sizes,
                                               repeats=repeats)
            except Exception:  # noqa: BLE001 - e.g. fp16 kernels missing on CPU: left unprofiled
                by_path[key] = None
        p = by_path[key]
        if p is not None:
            registry.save_profile(dataclasses.replace(p, variant=v.name))
    return variants
