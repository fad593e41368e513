"""``costscale variants plan``: the cheapest combination of model variants for a load and an SLO
(INFaaS §2.2 Tables 2-3; the model-autoscaler ILP of §4.2.1 or the greedy of §4.2.2).

    costscale variants plan --variants FILE.yaml --qps N --slo-ms S [--headroom H]
                            [--solver ilp|greedy] [--json]

FILE.yaml::

    variants:
      - {name: A, latency_ms: 200, saturation_qps: 5, cost_per_second: 1}
      - {name: B, latency_ms: 20, saturation_qps: 100, cost_per_second: 3,
         load_latency_s: 2.5, resources: {inferentia_cores: 1}}
    limits: {inferentia_cores: 4}      # optional caps on the summed resources

Bad files or fields: one line naming the field and its YAML line, exit 2.
"""
from __future__ import annotations

from config.numbers import finite_float

import argparse
import json
import math
from pathlib import Path
from typing import Any

import yaml

from config.errors import UsageError
from variants.infaas.autoscale_ilp import ScalingVariant
from variants.infaas.cheapest import NoCombination, cheapest

_REQUIRED = ("name", "latency_ms", "saturation_qps", "cost_per_second")
_OPTIONAL = ("load_latency_s", "resources", "hardware", "model", "accuracy", "max_batch")
_LINE = "__line__"


class _LineLoader(yaml.SafeLoader):
    """SafeLoader that records the 1-based line of every mapping under ``__line__``."""


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    mapping = loader.construct_mapping(node, deep=True)
    mapping[_LINE] = node.start_mark.line + 1
    return mapping


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("variants", help="model variants: cheapest combination for a load and SLO")
    vsub = p.add_subparsers(dest="variants_command", metavar="ACTION", parser_class=type(p))
    vsub.required = True
    plan = vsub.add_parser("plan", help="cheapest replica counts of variants for --qps within --slo-ms")
    plan.add_argument("--variants", required=True, metavar="FILE.yaml", help="YAML with a 'variants:' list")
    plan.add_argument("--qps", required=True, type=finite_float, metavar="N", help="load to serve (queries/s)")
    plan.add_argument("--slo-ms", required=True, type=finite_float, metavar="S", help="latency SLO (ms)")
    plan.add_argument("--headroom", type=finite_float, default=0.0, metavar="H",
                      help="extra capacity as a fraction of the load (INFaaS slack; 0.05 = 1.05x)")
    plan.add_argument("--solver", choices=("ilp", "greedy"), default="ilp")
    plan.add_argument("--json", action="store_true", help="print one JSON object")
    plan.set_defaults(func=run_plan)


def _number(entry: dict[str, Any], key: str, where: str, minimum: float, strict: bool = False) -> float:
    val = entry[key]
    if isinstance(val, bool) or not isinstance(val, (int, float)) or not math.isfinite(float(val)):
        raise UsageError(f"{where}.{key}: must be a number, got {val!r}")
    if float(val) < minimum or (strict and float(val) <= minimum):
        raise UsageError(f"{where}.{key}: must be {'>' if strict else '>='} {minimum:g}, got {val!r}")
    return float(val)


def _resources(raw: Any, where: str) -> dict[str, float]:
    if not isinstance(raw, dict):
        raise UsageError(f"{where}: must be a mapping of resource name to amount")
    out: dict[str, float] = {}
    for k, v in raw.items():
        if k == _LINE:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(float(v)) or v < 0:
            raise UsageError(f"{where}.{k}: must be a number >= 0, got {v!r}")
        out[str(k)] = float(v)
    return out


def load_variants_file(path: str) -> tuple[list[ScalingVariant], dict[str, float]]:
    """Parse and validate the variants YAML; raises UsageError with one line on any problem."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        doc = yaml.load(text, Loader=_LineLoader)  # noqa: S506 - SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        raise UsageError(f"{path}:{line} not valid YAML ({getattr(exc, 'problem', None) or exc})") from None
    if not isinstance(doc, dict) or "variants" not in doc:
        raise UsageError(f"{path}: expected a mapping with a 'variants:' list")
    unknown = sorted(k for k in doc if k not in ("variants", "limits", _LINE))
    if unknown:
        raise UsageError(f"{path}: unknown top-level key {unknown[0]!r} (expected 'variants', 'limits')")
    entries = doc["variants"]
    if not isinstance(entries, list) or not entries:
        raise UsageError(f"{path}: 'variants' must be a non-empty list")
    variants: list[ScalingVariant] = []
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise UsageError(f"{path}: variants[{i}]: must be a mapping with {', '.join(_REQUIRED)}")
        where = f"{path} line {entry[_LINE]}: variants[{i}]"
        for key in _REQUIRED:
            if key not in entry:
                raise UsageError(f"{where}: missing field '{key}'")
        for key in entry:
            if key != _LINE and key not in _REQUIRED and key not in _OPTIONAL:
                raise UsageError(f"{where}: unknown field {key!r}")
        name = entry["name"]
        if not isinstance(name, (str, int)) or isinstance(name, bool) or not str(name).strip():
            raise UsageError(f"{where}.name: must be a non-empty string")
        name = str(name)
        if name in seen:
            raise UsageError(f"{where}.name: duplicate variant name {name!r}")
        seen.add(name)
        variants.append(ScalingVariant(
            name=name,
            model=str(entry.get("model", "model")),
            hardware=str(entry.get("hardware", "any")),
            latency_ms=_number(entry, "latency_ms", where, 0.0),
            saturation_qps=_number(entry, "saturation_qps", where, 0.0, strict=True),
            cost_per_second=_number(entry, "cost_per_second", where, 0.0),
            load_latency_s=_number(entry, "load_latency_s", where, 0.0) if "load_latency_s" in entry else 0.0,
            resources=_resources(entry["resources"], f"{where}.resources") if "resources" in entry else {},
        ))
    limits = _resources(doc["limits"], f"{path}: limits") if "limits" in doc else {}
    return variants, limits


def run_plan(args: argparse.Namespace) -> int:
    if not math.isfinite(args.qps) or args.qps < 0:
        raise UsageError(f"--qps: must be a number >= 0, got {args.qps:g}")
    if not math.isfinite(args.slo_ms) or args.slo_ms <= 0:
        raise UsageError(f"--slo-ms: must be a number > 0, got {args.slo_ms:g}")
    if not math.isfinite(args.headroom) or args.headroom < 0:
        raise UsageError(f"--headroom: must be a number >= 0, got {args.headroom:g}")
    variants, limits = load_variants_file(args.variants)
    try:
        combo = cheapest(variants, args.qps, args.slo_ms, headroom=args.headroom, solver=args.solver,
                         limits=limits or None)
    except NoCombination as exc:
        raise UsageError(f"{args.variants}: {exc}") from None
    if args.json:
        print(json.dumps({
            "counts": dict(combo.counts),
            "cost": combo.cost_per_second,
            "solver": combo.solver,
            "solve_ms": round(combo.solve_ms, 3),
            "capacity_qps": combo.capacity_qps,
        }))
        return 0
    rows = [("variant", "latency_ms", "qps/replica", "$/s", "replicas")]
    for v in variants:
        rows.append((v.name, f"{v.latency_ms:g}", f"{v.saturation_qps:g}", f"{v.cost_per_second:g}",
                     str(combo.counts[v.name])))
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    for r in rows:
        print("  ".join(cell.ljust(w) if c == 0 else cell.rjust(w) for c, (cell, w) in enumerate(zip(r, widths))))
    need = args.qps * (1.0 + args.headroom)
    print(f"cost {combo.cost_per_second:g} $/s ({combo.cost_per_second * 3600:g} $/hr), capacity "
          f"{combo.capacity_qps:g} >= {need:g} qps within {args.slo_ms:g} ms; "
          f"solver {combo.solver} in {combo.solve_ms:.1f} ms")
    return 0
