"""Flags shared by the commands that work from a config plus overrides (``simulate``,
``capacity``; usable by ``plan``): ``--profiles``, ``--model``, ``--qos-ms``, ``--batch-dist``,
``--pool TYPE=N,...``, and ``--quota FAMILY=VCPUS`` (``add_quota_flag``). Every bad value becomes a one-line UsageError (DESIGN invariant 5)."""
from __future__ import annotations

from config.numbers import finite_float

import argparse
import math
import sys
from dataclasses import dataclass
from typing import Collection

from variants.families.applications import with_applications
from config.schema import Config, InstanceTypeSpec, ModelSpec, load_config
from config.errors import UsageError
from config.sections.batch_dist import parse_batch_dist
from config.sections.quotas import with_overrides
from config.profiles import ProfileTable, load_profiles_csv
from config.type_estimates import with_type_estimates


def add_override_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profiles", metavar="CSV", help="latency profile CSV (default: the config's, else shipped)")
    p.add_argument("--model", metavar="M", help="model name from the config (needed when it has several), or, with "
                   "--qos-ms, a model of the profile table the config does not have yet (a what-if)")
    p.add_argument("--qos-ms", metavar="T", type=finite_float, help="QoS target in ms (default: the model's qos_ms)")
    p.add_argument("--batch-dist", metavar="DIST",
                   help="deeprecsys | lognormal[:MU:SIGMA] | gaussian[:MEAN:SD] | fixed:N (default: the config's)")


def add_quota_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quota", action="append", default=[], metavar="FAMILY=VCPUS",
                   help="a running-vCPU quota over the config's quotas: FAMILY=VCPUS (on-demand) or "
                        "spot.FAMILY=VCPUS; families: standard, g_vt, p, inf, f, x, dl, trn, high_memory (repeatable)")


@dataclass(frozen=True)
class Resolved:
    """The config with the override flags applied."""

    cfg: Config
    model: str              # model name in the config
    profile_model: str      # its name in the profile table
    qos_ms: float
    batch_dist: str
    max_batch: int
    profiles: ProfileTable
    prices: dict[str, float]  # every catalog type, with the config's price overrides


def resolve(args: argparse.Namespace, cmd: str, *, one_model: bool = False) -> Resolved:
    """Load ``args.config`` and apply --profiles/--model/--qos-ms/--batch-dist. ``one_model``: the
    command works on one model, so a config of several needs --model (one line, exit 2) rather
    than a silent "the first"."""
    qos = getattr(args, "qos_ms", None)
    if qos is not None and not (math.isfinite(qos) and qos > 0):
        raise UsageError(f"{cmd}: --qos-ms must be > 0")
    cfg = load_config(args.config)
    try:        # --quota FAMILY=VCPUS: a what-if over the config's vCPU quotas (plan, replay)
        cfg = with_overrides(cfg, getattr(args, "quota", None) or ())
    except UsageError as exc:
        raise UsageError(f"{cmd}: {exc}") from None
    explicit = getattr(args, "profiles", None)
    try:
        profiles = load_profiles_csv(explicit or cfg.profiles)
    except ValueError as exc:
        raise UsageError(f"{cmd}: {exc}") from None
    if not explicit:   # and those `costscale profile` (or the daemon) measured since
        from daemon.profiling.model_profiles import stored_profiles

        profiles = profiles.merged(stored_profiles(cfg))
    try:   # the configured applications, at their most accurate variant (issue #25)
        profiles = with_applications(cfg, profiles)
    except ValueError as exc:
        raise UsageError(f"{cmd}: {exc}") from None
    profiles = with_type_estimates(profiles)   # the types nobody measured, from their siblings (issue #29)
    name = getattr(args, "model", None)
    if one_model and name is None and len(cfg.models) > 1:
        raise UsageError(f"{cmd}: the config has {len(cfg.models)} models ({', '.join(m.name for m in cfg.models)}): "
                         "name one with --model")
    try:
        spec = cfg.model(name)
    except KeyError:
        if name not in profiles.models():
            raise UsageError(f"{cmd}: --model: unknown model {name!r} (configured: "
                             f"{', '.join(m.name for m in cfg.models)}; profiled: {', '.join(profiles.models())})") from None
        if qos is None:
            raise UsageError(f"{cmd}: --model: {name!r} is profiled but not in the config: give --qos-ms for a what-if")
        try:   # a what-if for a model not configured yet: its profiles and the SLO given
            spec = ModelSpec(name=name, qos_ms=qos, profile=name)
        except ValueError as exc:
            raise UsageError(f"{cmd}: --model: {name!r}: {str(exc).splitlines()[0]}") from None
        cfg = cfg.model_copy(update={"models": [*cfg.models, spec]})
    if spec.profile_name not in profiles.models():
        raise UsageError(f"{cmd}: model {spec.name!r}: no latency profiles for {spec.profile_name!r} "
                         f"(profiles have: {', '.join(profiles.models())}); run `costscale profile {args.config}`")
    dist = getattr(args, "batch_dist", None) or cfg.workload.batch_dist
    try:
        parse_batch_dist(dist)
    except ValueError as exc:
        raise UsageError(f"{cmd}: --batch-dist: {exc}") from None
    prices = cfg.prices()
    return Resolved(cfg=cfg, model=spec.name, profile_model=spec.profile_name,
                    qos_ms=float(qos if qos is not None else spec.qos_ms), batch_dist=dist,
                    max_batch=spec.max_batch, profiles=profiles, prices=prices)


def parse_counts(text: str, cmd: str, known: Collection[str]) -> dict[str, int]:
    """``TYPE=N,TYPE=N`` → {type: N} (types in ``known``, N >= 0 integers, no type twice, at least
    one instance); zero counts are dropped."""
    pool: dict[str, int] = {}
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        itype, sep, count = part.partition("=")
        itype, count = itype.strip(), count.strip()
        if not sep or not itype or not count.isdigit():
            raise UsageError(f"{cmd}: --pool: bad entry {part!r} (expected TYPE=N, e.g. g4dn.xlarge=2)")
        if itype not in known:
            raise UsageError(f"{cmd}: --pool: unknown instance type {itype!r} (known: {', '.join(sorted(known))})")
        if itype in pool:
            raise UsageError(f"{cmd}: --pool: {itype} given twice")
        pool[itype] = int(count)
    if sum(pool.values()) == 0:
        raise UsageError(f"{cmd}: --pool needs at least one instance (TYPE=N,...)")
    return {t: c for t, c in pool.items() if c > 0}


def parse_pool(text: str, r: Resolved, cmd: str) -> dict[str, int]:
    """:func:`parse_counts` over the catalog, each type with a profile for the model."""
    pool = parse_counts(text, cmd, r.prices)
    for itype in pool:
        if not r.profiles.has(r.profile_model, itype):
            raise UsageError(f"{cmd}: --pool: no latency profile for model {r.profile_model!r} on {itype}")
        e = r.profiles.estimate(r.profile_model, itype)
        if e is not None:   # said, never taken for a measurement (issue #29)
            print(f"costscale: note: {cmd}: {r.profile_model!r} on {itype} runs at an estimated profile, not a "
                  f"measured one ({e.basis})", file=sys.stderr)
    return pool


def with_estimates_allowed(cfg: Config, types: Collection[str] | None = None) -> Config:
    """``cfg`` with ``allow_estimates`` on every allowed type and on ``types`` (``--estimates``: a
    what-if on the types nobody measured; those not in the config are added with no bounds)."""
    listed = [t.model_copy(update={"allow_estimates": True}) for t in cfg.instance_types]
    have = {t.type for t in listed}
    extra = [InstanceTypeSpec(type=t, allow_estimates=True) for t in (types or ()) if t not in have]
    return cfg.model_copy(update={"instance_types": listed + extra})
