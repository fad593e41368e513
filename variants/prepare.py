"""The variant pipeline of a registered model (INFaaS §3.2): generate its variants, profile them,
store everything in the variant registry. Used by the dispatcher's ``RegisterModel``, by the
daemon for the config's models, and by ``costscale profile`` (:func:`measure_here`). Importing this
module stays light (no onnx until it runs)."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

#: hardware classes variants are generated for, in this order, when the catalog has them
GENERATED_HARDWARE: tuple[str, ...] = ("cpu", "gpu")


def hardware_classes(catalog: Mapping[str, Any]) -> tuple[str, ...]:
    """The classes of :data:`GENERATED_HARDWARE` that some instance type of ``catalog`` (type ->
    instance type with a ``hardware`` attribute) has; empty when none."""
    return tuple(h for h in GENERATED_HARDWARE if any(it.hardware == h for it in catalog.values()))


def generate_and_register(src: Path, rm, out_dir: Path, hardware: tuple[str, ...], validation: Path | None,
                          registry) -> list:
    """Adapter (blocking): generate the variants of ``src`` (INFaaS §3.2 Variant-Generator) and
    register the model with its base variant and them. Returns the variants, base first."""
    from variants.generator import generate_variants
    from variants.registry import base_variant

    generated = generate_variants(src, rm.name, out_dir, application=rm.application, hardware=hardware,
                                  tuned_batches=(8,), validation=validation)
    parent = next((v for v in generated if v.precision == "fp32" and not v.tuned_batch), None)
    variants = [base_variant(rm, parent.accuracy if parent else 1.0)] + generated
    registry.register_model(rm, variants)
    return variants


def generate_and_profile(src: Path, rm, out_dir: Path, hardware: tuple[str, ...], validation: Path | None,
                         registry, batch_sizes: tuple[int, ...] = (1, 8, 32), repeats: int = 2) -> list:
    """Adapter (blocking): :func:`generate_and_register`, then profile each variant briefly on this
    machine's CPU provider (Variant-Profiler; instance type "local") into the registry."""
    variants = generate_and_register(src, rm, out_dir, hardware, validation, registry)
    for p in measure_here(variants, batch_sizes, repeats).values():
        if not isinstance(p, str):   # e.g. fp16 kernels missing on CPU: left unprofiled
            registry.save_profile(p)
    return variants


def measure_here(variants: Sequence, batch_sizes: Sequence[int], repeats: int = 5,
                 on_step: Callable[[str], None] | None = None) -> dict[str, object]:
    """Adapter (blocking): profile each variant on this machine (instance type ``local``) at
    ``batch_sizes``; variants sharing a file (fp32 for CPU and for GPU) are measured once. Returns
    variant name -> VariantProfile, or the one-line reason it could not be measured (e.g. fp16
    kernels missing on this CPU)."""
    from variants.profiler import LOCAL_TYPE, profile_variant

    out: dict[str, object] = {}
    by_path: dict[str, object] = {}
    for v in variants:
        key = str(Path(v.path).resolve())
        if key not in by_path:
            if on_step is not None:
                on_step(v.name)
            try:
                by_path[key] = profile_variant(v.path, v.name, LOCAL_TYPE, model=v.model, batch_sizes=batch_sizes,
                                               repeats=repeats)
            except Exception as exc:  # noqa: BLE001 - ORT raises many types; the reason is reported
                text = str(exc).strip()
                by_path[key] = text.splitlines()[0] if text else type(exc).__name__
        got = by_path[key]
        out[v.name] = got if isinstance(got, str) else dataclasses.replace(got, variant=v.name)
    return out
