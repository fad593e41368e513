"""What an emulating worker pads a query's service time to (DESIGN "Where it runs";
:mod:`config.emulation` has the rules): its profile from the CSV, each family member's own profile,
or the type's emulation factor for a model nobody profiled. Read once, when the worker starts."""
from __future__ import annotations

import functools
from typing import Callable

from config.emulation import emulation_factors, reference_profiles
from config.profiles import LatencyProfile, ProfileTable, load_profiles_csv
from config.type_estimates import type_rules, with_type_estimates
from worker.options import WorkerOptions


def padding_table(opts: WorkerOptions) -> ProfileTable | None:
    """The profile CSV a worker that pads to it reads (once, at start), with the estimates of the
    types nobody measured from their siblings (``config.type_estimates``: a worker standing for
    g5.xlarge pads to the daemon's estimate there); None for a worker with an explicit profile or
    none to emulate."""
    if opts.profile is not None or not opts.emulate_profile:
        return None
    return with_type_estimates(load_profiles_csv(opts.profiles_path))


def padding_profile(opts: WorkerOptions, table: ProfileTable | None) -> LatencyProfile | None:
    """The profile this worker pads to: explicit, else (emulate_profile, instance_type) from
    ``table`` (:func:`padding_table`; None: nothing to pad to)."""
    if opts.profile is not None:
        return opts.profile
    if table is None or not opts.emulate_profile:
        return None
    if opts.emulate_profile not in table.models():
        return None   # nobody has profiled it: padded by the type's emulation factor (type_factor_fn)
    if not table.has(opts.emulate_profile, opts.instance_type):
        raise ValueError(f"no latency profile for model {opts.emulate_profile!r} on {opts.instance_type!r} "
                         f"(profiled types: {', '.join(table.types(opts.emulate_profile)) or 'none'})")
    return table.get(opts.emulate_profile, opts.instance_type)


def own_profiles(opts: WorkerOptions, table: ProfileTable | None = None) -> dict[str, LatencyProfile]:
    """Model -> the profile a variant of it is padded to because the CSV has that model itself on this
    worker's type (a member of a variant family, profiled in its own right), so each of a family's
    models loaded on one emulating worker runs at its own latency; a model not here is padded to the
    worker's profile times the variant's speed factor. Only a worker that pads to a CSV profile
    (``emulate_profile``, no explicit ``profile``) has any. ``table``: :func:`padding_table`."""
    table = table if table is not None else padding_table(opts)
    if table is None:
        return {}
    out = {m: p for (m, t), p in table.profiles.items() if t == opts.instance_type and m != opts.emulate_profile}
    for name, pname in opts.model_profiles.items():     # a served model named apart from its profile
        if table.has(pname, opts.instance_type) and pname != opts.emulate_profile:
            out[name] = table.get(pname, opts.instance_type)
    return out


def type_factor_fn(opts: WorkerOptions, profile: LatencyProfile | None) -> Callable[[int], float] | None:
    """For a model the profile CSV does not know: batch -> the emulation factor of the type this
    worker stands for (config.emulation rule 2); None when the worker pads to a profile or not at all."""
    if profile is not None or not opts.emulate_profile:
        return None
    ref, rules = reference_profiles(), type_rules()
    if emulation_factors(ref, opts.instance_type, [1], rules=rules) is None:
        raise ValueError(f"no latency profile for model {opts.emulate_profile!r} and no emulation factor for "
                         f"{opts.instance_type!r} (types with one: {', '.join(ref.types() + sorted(rules))})")

    @functools.lru_cache(maxsize=4096)
    def factor(batch: int) -> float:
        return float(emulation_factors(ref, opts.instance_type, [batch], rules=rules)[0])  # type: ignore[index]

    return factor


__all__ = ["own_profiles", "padding_profile", "padding_table", "type_factor_fn"]
