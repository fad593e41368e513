"""Latency profiles of the config's models on every allowed instance type, and where they are kept
(INFaaS §3.2: every variant is profiled on every hardware type at registration; Kairos §5.2 plans
from per-(model, type, batch) service times).

- **Where:** the config's profile CSV (default: the shipped Kairos AWS profiles) and, in the
  variant registry next to the state store (``state_path + ".variants.db"``), every profile
  measured or estimated since: :func:`stored_profiles`; the daemon, ``costscale plan`` and
  ``validate`` read both (the registry's win).
- **Here** (:func:`profile_here`, ``costscale profile --local`` and the daemon's first guess): the
  model and its generated variants are measured on this machine with ONNX Runtime, and each type's
  profile is *estimated* from that with the type's emulation factor (``config.emulation``, the rule
  a local worker pads with; a type nobody measured through its sibling, ``config.type_estimates``).
- **On the fleet** (:func:`measure_fn`, used with ``daemon.profiling.probing.Prober`` and on running workers):
  measured through a worker of the type.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from config.emulation import reference_profiles
from config.type_estimates import estimate_of, type_rules, with_type_estimates
from config.profiles import LatencyProfile, ProfileTable, load_profiles_csv
from config.schema import Config, ModelSpec
from daemon.aws.wiring import DaemonError
from daemon.profiling.probing import Measure, measure_on_worker
from dispatcher.workers.client import WorkerClient
from variants.families.applications import with_applications
from variants.generator import Variant
from variants.prepare import generate_and_profile, generate_and_register, hardware_classes, measure_here
from variants.profiler import LOCAL_TYPE, VariantProfile
from variants.registry import VariantRegistry, base_variant, registered_from_config, registry_path_for
from variants.type_profiles import default_batches, estimate_types, is_estimate, monotone, types_for

log = logging.getLogger("costscale")

Step = Callable[[str], None]


def stored_profiles(cfg: Config) -> ProfileTable:
    """The per-type profiles kept in the variant registry (empty when it does not exist yet)."""
    path = registry_path_for(cfg.state_path)
    if path == ":memory:" or not Path(path).exists():
        return ProfileTable()
    reg = VariantRegistry(path)
    try:
        return reg.type_profiles()
    finally:
        reg.close()


def models_dir(cfg: Config) -> Path:
    """Where the generated variants' ONNX files are kept: beside the state store."""
    return Path(cfg.state_path + ".models")


def open_config_registry(cfg: Config) -> VariantRegistry:
    """The variant registry next to the state store; the config's models registered as their
    base (fp32) variant unless already known with the same file."""
    reg = VariantRegistry(registry_path_for(cfg.state_path))
    known = {m.name: m for m in reg.models()}
    for m in cfg.models:
        rm = registered_from_config(m)
        if known.get(m.name) != rm:
            reg.register_model(rm)
    return reg


async def generate_config_variants(cfg: Config, registry: VariantRegistry, refresh: Callable[[], None]) -> None:
    """The daemon at start: cheaply generate and profile the variants of config models whose ONNX
    file is at hand (builtin:mlp is), in a worker thread; ``refresh()`` after each model (routing
    picks them up)."""
    from variants.runtime.builtin_models import resolve_model
    from worker.options import default_cache_dir

    hws = hardware_classes(cfg.catalog())
    for m in cfg.models:
        if len(registry.variants(model=m.name)) > 1 or not hws:
            continue
        rm = registry.model(m.name)
        try:
            src = await asyncio.to_thread(resolve_model, m.onnx, default_cache_dir())
            await asyncio.to_thread(generate_and_profile, src, rm, models_dir(cfg) / m.name, hws, None, registry)
        except Exception as exc:  # noqa: BLE001 - variants are an optimisation; the base variant serves
            log.warning("variants of %s not generated: %s", m.name, exc)
            continue
        refresh()
        log.info("generated %d variants of %s", len(registry.variants(model=m.name)), m.name)


def own_models(cfg: Config, csv: ProfileTable) -> list[ModelSpec]:
    """The models costscale profiles itself: those the profile CSV does not name. A model the CSV
    names (a Kairos model, its ONNX file a stand-in) keeps the CSV as its only source."""
    return [m for m in cfg.models if m.profile_name not in csv.models()]


def measured_only(table: ProfileTable, registry: VariantRegistry) -> ProfileTable:
    """``table`` without its estimates: the (model, type) pairs it marks as estimated (from a local
    run, or from a sibling type by ``config/type_estimates.csv``) and those whose registry profile
    is an estimate."""
    est = set(table.estimated)
    for m in registry.models():
        for p in registry.profiles_of(m.name):
            if p.instance_type != LOCAL_TYPE and is_estimate(p):
                est.add((m.profile, p.instance_type))
    return ProfileTable({k: v for k, v in table.profiles.items() if k not in est})


def model_variants(cfg: Config, spec: ModelSpec, registry: VariantRegistry, src: Path,
                   generate: bool) -> list[Variant]:
    """The model (registered as the daemon registers it) and, with ``generate``, its generated
    variants (made once: reused when the registry has them)."""
    rm = registered_from_config(spec)
    if registry.model(spec.name) != rm:
        registry.register_model(rm)
    have = registry.variants(model=spec.name)
    hws = hardware_classes(cfg.catalog())
    if generate and len(have) <= 1 and hws:
        have = generate_and_register(src, rm, models_dir(cfg) / spec.name, hws, None, registry)
    return have or [base_variant(rm)]


def batches_of(spec: ModelSpec, batches: Sequence[int] | None) -> tuple[int, ...]:
    """Batch sizes to measure at: the given ones, else the model's defaults (up to its max_batch)."""
    return tuple(sorted(set(batches))) if batches else default_batches(spec.max_batch)


@dataclass
class ModelProfiles:
    """One model's profiles from a run: per variant the local measurement (or why there is none),
    per variant and type the profile (an estimate or a measurement), and the types left out."""

    spec: ModelSpec
    variants: list[Variant]
    local: dict[str, VariantProfile | str] = field(default_factory=dict)
    by_type: dict[str, dict[str, VariantProfile]] = field(default_factory=dict)   # variant -> type -> profile
    not_done: dict[str, str] = field(default_factory=dict)                         # type -> why (base variant)

    def table(self) -> ProfileTable:
        """As a profile table: the base variant under the model's profile key, others by name; the
        estimates marked."""
        out = ProfileTable()
        for v, per in self.by_type.items():
            key = self.spec.profile_name if v == self.spec.name else v
            for t, p in per.items():
                out.profiles[(key, t)] = p.to_latency_profile(key)
                if is_estimate(p):
                    out.estimated[(key, t)] = estimate_of(p.provider, t)
        return out

    def base(self) -> dict[str, LatencyProfile]:
        return {t: p.to_latency_profile(self.spec.profile_name) for t, p in self.by_type.get(self.spec.name, {}).items()}


def profile_here(cfg: Config, spec: ModelSpec, registry: VariantRegistry, src: Path, types: Sequence[str],
                 batches: Sequence[int] | None = None, repeats: int = 5, generate: bool = True,
                 on_step: Step | None = None) -> ModelProfiles:
    """Adapter (blocking): measure the model and its variants here, estimate every type of
    ``types`` each runs on, store it all in ``registry``."""
    variants = model_variants(cfg, spec, registry, src, generate)
    out = ModelProfiles(spec, variants)
    hw = {t: it.hardware for t, it in cfg.full_catalog().items()}
    out.local = measure_here(variants, batches_of(spec, batches), repeats, on_step)
    for v in variants:
        local = out.local[v.name]
        if isinstance(local, str):
            if v.name == spec.name:
                out.not_done = {t: f"not measured here: {local}" for t in types}
            continue
        registry.save_profile(local)
        est, skipped = estimate_types(local, types_for(v.hardware, types, hw), reference_profiles(), type_rules())
        for p in est:
            registry.save_profile(p)
            out.by_type.setdefault(v.name, {})[p.instance_type] = p
        if v.name == spec.name:
            for t in skipped:
                out.not_done[t] = ("no emulation factor (no reference profile on it): measure it on the type "
                                   f"(costscale profile CONFIG --types {t}, without --local)")
    return out


def measure_fn(cfg: Config, spec: ModelSpec, variants: Sequence[Variant], batches: Sequence[int] | None,
               repeats: int = 5, on_step: Step | None = None) -> Measure:
    """What a probe (or, with ``loaded``, a worker that serves) of a type runs:
    :func:`daemon.profiling.probing.measure_on_worker` over the variants of that type's hardware class."""
    hw = {t: it.hardware for t, it in cfg.full_catalog().items()}
    sizes = batches_of(spec, batches)

    async def measure(client: WorkerClient, instance_type: str,
                      loaded: set[str] | None = None) -> dict[str, VariantProfile | str]:
        mine = [v for v in variants if types_for(v.hardware, [instance_type], hw)]
        return await measure_on_worker(client, instance_type, mine, sizes, repeats, on_step=on_step, loaded=loaded)
    return measure


def record_measured(out: ModelProfiles, by_type: dict[str, dict[str, VariantProfile | str]],
                    registry: VariantRegistry) -> None:
    """Store what workers measured, type by type, into ``out`` and the registry."""
    for t, per in by_type.items():
        for v, p in per.items():
            if isinstance(p, str):
                if v == out.spec.name:
                    out.not_done[t] = p
                continue
            p = monotone(p)
            registry.save_profile(p)
            out.by_type.setdefault(v, {})[t] = p
            if v == out.spec.name:
                out.not_done.pop(t, None)
def load_profiles_for(cfg: Config) -> ProfileTable:
    """The profile CSV, the profiles measured since (a model without any is profiled at start), the
    configured applications' (issue #25: each at its most accurate variant, and every variant), and
    the estimates of the types nobody measured from their siblings (``config.type_estimates``, issue
    #29; tagged, planned on only where allowed)."""
    try:
        return with_type_estimates(with_applications(cfg, load_profiles_csv(cfg.profiles).merged(stored_profiles(cfg))))
    except ValueError as exc:
        raise DaemonError(str(exc)) from None


