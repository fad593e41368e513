"""``costscale profile CONFIG``: latency profiles of the config's models (and their generated
variants) at each batch size on each allowed instance type, stored where the daemon and ``plan``
find them (the variant registry next to the state store) and, with ``--out``, as a profile CSV.

INFaaS §3.2 profiles every variant on every hardware type at registration. ``--local`` measures on
this machine and *estimates* the types with their emulation factors (``config.emulation``);
without it, one probe instance per type that lacks a measured profile is launched through the fleet
actuator, measured through its worker, and terminated (``daemon.profiling.probing``), and what the probes
cost is printed. By default the models with no profile on some allowed type are profiled.

Every estimate is tagged as one, in the output, the registry and ``--out`` (its ``source`` column):
this machine's measurement x a type's emulation factor, and for the eight catalog types nobody
measured, a sibling type's profile x its latency factor (``config/type_estimates.csv``, issue #29),
also for the models whose profiles come from the profile CSV (listed, not profiled).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from config.checks import load_checked_config
from config.errors import UsageError
from config.profiles import ProfileTable, load_profiles_csv, save_profiles_csv
from config.schema import Config, ModelSpec
from daemon.commands.common.progress import Progress

if TYPE_CHECKING:   # the command's work imports ONNX Runtime and gRPC: only when it runs
    from daemon.profiling.model_profiles import ModelProfiles
    from variants.registry import VariantRegistry

ESTIMATE_NOTE = ("per-type profiles marked 'estimate' are this machine's measurement x each type's emulation factor "
                 "(config/emulation.py; a type nobody measured: its sibling's x its latency factor, "
                 "config/type_estimates.csv), not measurements on the type: run `costscale profile CONFIG` without "
                 "--local (probes on AWS) to measure them")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("profile", help="measure the models' latency on every allowed instance type")
    p.add_argument("config", metavar="CONFIG")
    p.add_argument("--model", metavar="M", help="profile this model (default: every model lacking profiles)")
    p.add_argument("--types", metavar="T,...", help="instance types to profile (default: the config's allowed types)")
    p.add_argument("--batches", metavar="1,2,4,...", help="batch sizes (default: powers of two up to max_batch, and it)")
    p.add_argument("--repeats", metavar="N", type=int, default=5, help="timed runs per batch size (default 5)")
    p.add_argument("--local", action="store_true", help="measure here and estimate the types (no instances launched)")
    p.add_argument("--out", metavar="CSV", help="also write the profiles as a profile CSV (for plan --profiles)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def _parse_batches(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        sizes = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise UsageError(f"profile: --batches: {text!r} is not a comma-separated list of integers") from None
    if not sizes or sizes[0] < 1:
        raise UsageError("profile: --batches: give batch sizes >= 1, e.g. 1,2,4,8")
    return sizes


def _parse_types(text: str | None, cfg: Config) -> list[str]:
    allowed = [t.type for t in cfg.instance_types]
    if text is None:
        return allowed
    types = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in types if t not in allowed]
    if not types or bad:
        raise UsageError(f"profile: --types: {', '.join(bad) or 'none given'}: not an allowed type of this config "
                         f"(allowed: {', '.join(allowed)})")
    return list(dict.fromkeys(types))


def _models(args: argparse.Namespace, cfg: Config, csv: ProfileTable, have: ProfileTable,
            types: list[str]) -> tuple[list[ModelSpec], list[str]]:
    """The models to profile, and a line for each one skipped because it has profiles on every type."""
    from daemon.profiling.model_profiles import own_models

    if args.model is not None:
        try:
            return [cfg.model(args.model)], []
        except KeyError:
            raise UsageError(f"profile: --model: unknown model {args.model!r} "
                             f"(configured: {', '.join(m.name for m in cfg.models)})") from None
    todo, skipped = [], []
    mine = own_models(cfg, csv)
    for m in cfg.models:
        if m not in mine:
            skipped.append(f"model {m.name}: its profiles come from {cfg.profiles or 'the shipped Kairos profiles'}; "
                           f"skipped (--model {m.name} to measure its ONNX file under that name)")
        elif all(have.has(m.profile_name, t) for t in types):
            skipped.append(f"model {m.name}: profiled on every type already; skipped (--model {m.name} to measure "
                           "it again)")
        else:
            todo.append(m)
    return todo, skipped


def _open_registry(cfg: Config, out: str | None) -> "VariantRegistry | None":
    from variants.registry import VariantRegistry, registry_path_for

    path = registry_path_for(cfg.state_path)
    try:
        return VariantRegistry(path)
    except Exception as exc:  # noqa: BLE001 - unwritable state directory and the like
        if out is None:
            raise UsageError(f"profile: cannot open the variant registry {path} ({exc}); fix state_path, or write "
                             "the profiles to a CSV with --out") from None
        print(f"costscale: warning: profiles not stored in {path} ({exc}); only in {out}", file=sys.stderr)
        return None


def run(args: argparse.Namespace) -> int:
    from daemon.profiling.model_profiles import stored_profiles
    from variants.registry import VariantRegistry, registry_path_for

    if args.repeats < 1:
        raise UsageError("profile: --repeats must be >= 1")
    cfg = load_checked_config(args.config)
    types = _parse_types(args.types, cfg)
    batches = _parse_batches(args.batches)
    try:
        csv = load_profiles_csv(cfg.profiles)
    except ValueError as exc:
        raise UsageError(f"profile: {exc}") from None
    have = csv if not args.local else csv.merged(stored_profiles(cfg))
    registry = _open_registry(cfg, args.out)
    reg = registry or VariantRegistry(":memory:")
    root, level = logging.getLogger(), logging.getLogger().level
    root.setLevel(logging.ERROR)   # ONNX Runtime's quantizer advice while variants are generated
    try:
        if not args.local:
            from daemon.commands.common.profile_fleet import have_measured, profile_on_fleet

            have = have_measured(csv, cfg, reg)
        specs, skipped = _models(args, cfg, csv, have, types)
        srcs = {m.name: _resolve(m) for m in specs}
        bar = Progress(len(specs) * 2 if args.local else len(types) * max(1, len(specs)))
        try:
            if args.local:
                results = [_estimate(cfg, m, reg, srcs[m.name], types, batches, args.repeats, csv, bar) for m in specs]
                probes = None
            else:
                results, probes = asyncio.run(profile_on_fleet(cfg, specs, srcs, reg, types, batches, args.repeats,
                                                               bar, have))
        finally:
            bar.close()
    finally:
        reg.close()
        root.setLevel(level)
    if args.out:
        table = ProfileTable()
        for r in results:
            table = table.merged(r.table())
        try:
            save_profiles_csv(args.out, table.profiles.values(), table.estimated)
        except OSError as exc:
            raise UsageError(f"profile: --out: cannot write {args.out} ({exc.strerror or exc})") from None
    stored = registry_path_for(cfg.state_path) if registry is not None else None
    doc = _document(cfg, results, types, skipped, probes, stored, args.out, args.local)
    doc["type_estimates"] = _type_estimates(cfg, csv, results, types)
    print(json.dumps(doc) if args.json else _render(doc))
    return 0


def _estimate(cfg: Config, m: ModelSpec, reg: "VariantRegistry", src: Path, types: list[str],
              batches: list[int] | None, repeats: int, csv: ProfileTable, bar: Progress) -> "ModelProfiles":
    """``--local``: measure here and estimate the types; a measured profile is never replaced."""
    from daemon.profiling.model_profiles import measured_only, profile_here

    measured = measured_only(csv.merged(reg.type_profiles()), reg)
    keep = [t for t in types if measured.has(m.profile_name, t)]
    r = profile_here(cfg, m, reg, src, [t for t in types if t not in keep], batches, repeats,
                     cfg.model_scaling.generate_variants, on_step=bar.step)
    for t in keep:
        r.not_done[t] = "measured already: kept (an estimate never replaces a measurement)"
    return r


def _type_estimates(cfg: Config, csv: ProfileTable, results: "list[ModelProfiles]",
                    types: list[str]) -> dict[str, dict[str, str]]:
    """Model -> type -> basis: the estimates by ``config/type_estimates.csv`` the daemon and ``plan``
    hold for the models not profiled in this run, on ``types`` (issue #29)."""
    from config.type_estimates import with_type_estimates
    from daemon.profiling.model_profiles import stored_profiles
    from scaler.planner.estimate_gate import needs_opt_in

    view = with_type_estimates(csv.merged(stored_profiles(cfg)))
    done = {r.spec.name for r in results}
    out = {}
    for m in cfg.models:
        est = {t: e.basis for t in types if m.name not in done and needs_opt_in(e := view.estimate(m.profile_name, t))}
        if est:
            out[m.name] = est
    return out


def _resolve(m: ModelSpec) -> Path:
    from variants.runtime.builtin_models import ModelError, resolve_model
    from worker.options import default_cache_dir

    try:
        return resolve_model(m.onnx, default_cache_dir())
    except ModelError as exc:
        raise UsageError(f"profile: model {m.name}: {exc}") from None


def _document(cfg: Config, results: "list[ModelProfiles]", types: list[str], skipped: list[str], probes: Any,
              stored: str | None, out: str | None, local: bool) -> dict[str, Any]:
    from variants.type_profiles import is_estimate, slo_verdict

    models = []
    prices = cfg.prices()
    for r in results:
        base = r.by_type.get(r.spec.name, {})
        table = ProfileTable({(r.spec.profile_name, t): p.to_latency_profile(r.spec.profile_name)
                              for t, p in base.items()})
        check = slo_verdict(table, r.spec.profile_name, types, r.spec.qos_ms, r.spec.max_batch, r.spec.name)
        models.append({
            "model": r.spec.name, "qos_ms": r.spec.qos_ms, "max_batch": r.spec.max_batch,
            "variants": [v.name for v in r.variants],
            "types": {t: {"source": "estimate" if is_estimate(p) else "measured", "provider": p.provider,
                          "basis": p.provider if is_estimate(p) else None,
                          "price_per_hour": prices[t],
                          "p99_ms": {str(b.batch_size): round(b.p99_ms, 4) for b in p.batches},
                          "p99_ms_at_max_batch": round(check.p99_ms[t], 4) if t in check.p99_ms else None}
                      for t, p in sorted(base.items())},
            "variant_types": {v: sorted(per) for v, per in sorted(r.by_type.items()) if v != r.spec.name},
            "not_profiled": dict(sorted(r.not_done.items())),
            "slo": check.line(),
        })
    return {"models": models, "skipped": skipped, "local": local, "estimates_note": ESTIMATE_NOTE if local else None,
            "probes": None if probes is None else {"launched": probes.instances, "seconds": probes.seconds,
                                                   "cost_usd": round(probes.cost, 6), "line": probes.cost_line(),
                                                   "left_running": probes.left_running, "failed": probes.failed},
            "stored": stored, "out": out}


def _render(doc: dict[str, Any]) -> str:
    lines = list(doc["skipped"])
    for m in doc["models"]:
        where = "estimated from this machine" if doc["local"] else "measured on the fleet"
        lines.append(f"model {m['model']} (qos p99 {m['qos_ms']:g} ms, max batch {m['max_batch']}; "
                     f"{len(m['variants'])} variant(s)): {where}")
        for t, row in m["types"].items():
            sizes = list(row["p99_ms"])
            lines.append(f"  {t:<14} {row['price_per_hour']:>7.4f} $/hr  p99 {row['p99_ms'][sizes[0]]:.3f} ms at batch "
                         f"{sizes[0]} .. {row['p99_ms'][sizes[-1]]:.3f} ms at batch {sizes[-1]}  ({row['basis'] or row['source']})")
        for t, why in m["not_profiled"].items():
            lines.append(f"  {t:<14} not profiled: {why}")
        if m["variant_types"]:
            lines.append("  variants: " + "; ".join(f"{v} on {', '.join(ts)}" for v, ts in m["variant_types"].items()))
        if m["slo"]:
            lines.append(m["slo"])
    for m, per in doc.get("type_estimates", {}).items():
        lines.append(f"model {m}: estimated, not measured, on " + "; ".join(f"{t} ({b})" for t, b in per.items())
                     + f" (planned on only where instance_types[].allow_estimates; to measure: costscale profile CONFIG --model {m} --types "
                     + ",".join(per) + ", without --local)")
    if doc["estimates_note"] and doc["models"]:
        lines.append(f"note: {doc['estimates_note']}")
    if doc["probes"] is not None:
        lines.append(doc["probes"]["line"])
    if doc["stored"] and doc["models"]:
        lines.append(f"stored in {doc['stored']} (the daemon and `costscale plan CONFIG` read them from there)")
    if doc["out"]:
        lines.append(f"wrote {doc['out']} (use: costscale plan CONFIG --profiles {doc['out']})")
    return "\n".join(lines) if lines else "nothing to profile"
