"""``costscale plan CONFIG``: the pool the planner would hold (Kairos §5.2). With several models in
the config and no --model, the joint plan of all of them (issue #24; :mod:`scaler.planner.joint_plan`):
the pool, each model's workers, their capacity against the model's demand, and what is short.

Flags override the config: --model, --budget, --types, --qos-ms, --batch-dist, --profiles; --top K
pools are listed (default 10); --json prints exactly one JSON object (``Plan.to_json``).
--confirm N (max_throughput) confirms the pick with Kairos+ (``scaler.planner.confirm``) using the simulator
as evaluator (``sim.pick_eval``, the config's dispatch policy) within N evaluations; the homogeneous
pool of the base type is always one of them.
--exhaustive ranks every pool within the budget, as costscale did before the pool search (issue
#29); by default above ``scaler.planner.choose.SEARCH_ABOVE`` pools the planner finds the same pick, top
pools and count by an exact search without listing them (``scaler.planner.search.pool_search``).
--estimates plans with the types where a model has only an estimated profile by
``config/type_estimates.csv`` (as if every type had ``allow_estimates: true``; issue #29); without
it they are left out, and a line says so. Every estimated type a plan shows is marked ``~`` with its
basis below the table (``estimated`` in ``--json``), and a pick that rests on one says so.
--region-prices prices the config's region as the daemon does (``daemon.aws.wiring``: the Price
List API, cached beside the state store; on failure the shipped us-east-1 table, with one warning
line); without it the shipped table's prices are used.
"""
from __future__ import annotations

from config.numbers import finite_float

import argparse
import contextlib
import json
import logging
import math
import sys
from typing import Any, Callable, Iterator, Mapping, Sequence

from config.profiles import Estimate
from daemon.commands.common.estimates import footer, marked, model_estimates
from daemon.commands.common.overrides import add_override_flags, add_quota_flag, resolve, with_estimates_allowed
from scaler.planner.quota import QuotaBind, binding_quotas, quota_for
from config.errors import UsageError
from config.schema import Config
from scaler.planner.base_aux import PlanError
from scaler.planner.batch_mix import mix_from_dist
from scaler.planner.model_plan import plan_fleet
from sim.slo_check import slo_check
from scaler.planner.pick_cache import PickCache
from scaler.planner.plan_inputs import MIX_SEED, Plan
from sim.pick_eval import confirmation
from scaler.planner.joint_plan import JointPlan, declared_demands, plan_joint
from scaler.planner.replan import DemandView


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="show the pool the planner picks within the budget")
    p.add_argument("config", metavar="CONFIG")
    add_override_flags(p)
    p.add_argument("--budget", metavar="X", type=finite_float, help="budget in $/hr")
    p.add_argument("--types", metavar="TYPE,TYPE", help="allowed instance types (comma-separated)")
    p.add_argument("--objective", choices=("max_throughput", "min_cost"), help="default: the config's")
    p.add_argument("--demand-qps", metavar="Q|M=Q,...",
                   help="demand in q/s (default: each model's expected_qps, else workload.expected_qps); with "
                        "several models, M=Q per model (a what-if; the others keep their declared rate)")
    p.add_argument("--top", metavar="K", type=int, default=10, help="pools to list (default 10)")
    p.add_argument("--region-prices", action="store_true",
                   help="price the config's region as the daemon does (AWS Price List API, cached beside the "
                        "state store; the shipped us-east-1 prices with a warning when that fails)")
    p.add_argument("--confirm", metavar="N", type=int,
                   help="max_throughput: confirm the pick by simulating at most N pools (Kairos+; >= 2; 0: the "
                        "similarity pick unconfirmed); default the config's confirm_evaluations, as the daemon does")
    p.add_argument("--exhaustive", action="store_true",
                   help="rank every pool within the budget instead of searching (the reference; refused in one line "
                        "beyond 50,000,000 pools)")
    p.add_argument("--estimates", action="store_true",
                   help="also plan with the types where a model has only an estimated profile (config/type_estimates.csv: "
                        "a measured sibling type x a latency factor), as instance_types[].allow_estimates does")
    add_quota_flag(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.budget is not None and not args.budget > 0:
        raise UsageError("plan: --budget must be > 0")
    if args.top < 1:
        raise UsageError("plan: --top must be >= 1")
    if args.confirm is not None and args.confirm != 0 and args.confirm < 2:
        raise UsageError("plan: --confirm must be 0 or >= 2 (the pick and the homogeneous pool)")
    r = resolve(args, "plan")
    cfg = r.cfg
    types = None
    if args.types is not None:
        types = [t.strip() for t in args.types.split(",") if t.strip()]
        if not types:
            raise UsageError("plan: --types needs at least one instance type")
        if len(set(types)) != len(types):
            raise UsageError("plan: --types lists a type twice")
    if args.region_prices:
        cfg = region_priced(cfg, types)
    if args.estimates:
        cfg = with_estimates_allowed(cfg, types)
    dist = r.batch_dist
    objective = args.objective or cfg.objective
    if args.confirm and objective != "max_throughput":
        raise UsageError("plan: --confirm applies to the max_throughput objective")
    if args.confirm is not None:
        cfg = cfg.model_copy(update={"confirm_evaluations": args.confirm})
    rates = demand_rates(args.demand_qps, cfg, args.model)
    if args.model is None and len(cfg.models) > 1:     # every model at once (issue #24)
        if args.qos_ms is not None:
            raise UsageError("plan: --qos-ms applies to one model: add --model M")
        if args.batch_dist:
            cfg = cfg.model_copy(update={"workload": cfg.workload.model_copy(update={"batch_dist": dist})})
        return run_joint(args, cfg, r.profiles, rates, types, objective)
    spec = cfg.model(r.model)
    demand = rates.get(r.model, spec.expected_qps if spec.expected_qps is not None else cfg.workload.expected_qps)
    try:
        mix = mix_from_dist(dist, seed=MIX_SEED, max_batch=r.max_batch)
        # as the daemon decides: a max_throughput pick comes with what to confirm it with (plan.confirm)
        plan = plan_fleet(cfg, r.profiles, mix, demand, slo_check=slo_check, model=r.model, types=types, budget=args.budget,
                          qos_ms=args.qos_ms, objective=objective, top_k=args.top, confirmed=PickCache(),
                          exhaustive=args.exhaustive)
        conf = None
        if plan.confirm is not None:
            todo = plan.confirm
            conf = confirmation(todo.inputs, todo.policy, todo.evaluations, top_k=args.top, base_type=todo.base_type,
                                exhaustive=args.exhaustive)
            plan = conf.plan
        binds = quota_binds(cfg, plan.chosen, lambda c: plan_fleet(
            c, r.profiles, mix, demand, slo_check=slo_check, model=r.model, types=types, budget=args.budget,
            qos_ms=args.qos_ms, objective=objective, top_k=1, exhaustive=args.exhaustive).chosen)
    except PlanError as exc:
        raise UsageError(f"plan: {exc}") from None
    est = model_estimates(cfg, r.profiles, plan.model, plan.chosen, types)
    if args.json:
        d = plan.to_dict()
        need = demand * (1 + cfg.headroom)
        d["models"] = {plan.model: {"workers": {t: n for t, n in plan.chosen.items() if n},
                                    "capacity_qps": round(plan.upper_bound_qps, 3), "demand_qps": round(demand, 3),
                                    "short_qps": round(max(0.0, need - plan.upper_bound_qps), 3)
                                    if objective == "min_cost" else 0.0, "estimated": sorted(est.picked)}}
        d.update(est.to_dict())
        if binds is not None:
            d["quotas"] = binds
        if conf is not None:
            d["confirmation"] = {"pick_qps": round(conf.pick_qps, 3), "similarity_qps": round(conf.similarity_qps, 3),
                                 "homogeneous": conf.homogeneous, "homogeneous_qps": round(conf.homogeneous_qps, 3),
                                 "evaluated": [{"pool": p, "qps": round(q, 3)} for p, q in conf.evaluated]}
        print(json.dumps(d))
    else:
        if args.region_prices:
            catalog = cfg.full_catalog()
            print(f"prices ({cfg.region}): " + ", ".join(f"{t} {catalog[t].price_per_hour:g}" for t in plan.chosen)
                  + " $/hr")
        print(render(plan, dist, est.considered))
        for line in footer([est]):
            print(line)
        for line in quota_lines(binds):
            print(line)
        if conf is not None:
            print(f"confirmed by {len(conf.evaluated)} simulated pools ({cfg.dispatcher.policy}): pick "
                  f"{conf.pick_qps:.1f} q/s, similarity pick {conf.similarity_qps:.1f} q/s, homogeneous "
                  + ", ".join(f"{t} x{c}" for t, c in conf.homogeneous.items() if c) + f" {conf.homogeneous_qps:.1f} q/s")
    return 0


@contextlib.contextmanager
def _warnings_on_stderr() -> Iterator[None]:
    """The costscale logger's warnings as ``costscale: warning: ...`` lines while pricing (the
    CLI configures no logging)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.WARNING)
    handler.setFormatter(logging.Formatter("costscale: warning: %(message)s"))
    logger = logging.getLogger("costscale")
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)


def region_priced(cfg: Config, types: Sequence[str] | None) -> Config:
    """``cfg`` priced in its region through the daemon's own path (``AwsWiring.priced``), with the
    ``--types`` beyond the allowed ones priced too; an emulated cloud (``aws.endpoint_url``) keeps
    the table's prices, as the daemon does, and one line says so."""
    from daemon.aws.wiring import AwsWiring

    wiring = AwsWiring(cfg, None)
    if wiring.prices is None:
        print("costscale: warning: plan --region-prices: aws.endpoint_url is set (an emulated cloud, no Price "
              "List API): the shipped us-east-1 prices are used, as the daemon does", file=sys.stderr)
        return cfg
    with _warnings_on_stderr():
        return wiring.priced(cfg, also=types or ())


def demand_rates(text: str | None, cfg: Config, model: str | None) -> dict[str, float]:
    """``--demand-qps``: ``Q`` (one model: ``--model``'s, or the config's only one) or
    ``M=Q,...``; one line, exit 2, when bad."""
    if text is None:
        return {}
    names = [m.name for m in cfg.models]
    out: dict[str, float] = {}
    parts = [p.strip() for p in text.split(",") if p.strip()]
    for part in parts:
        name, sep, val = part.rpartition("=")
        if not sep:
            if len(parts) != 1:
                raise UsageError(f"plan: --demand-qps {text!r}: give M=Q for each model")
            if model is None and len(names) > 1:
                raise UsageError(f"plan: --demand-qps {text!r}: the config has {len(names)} models: give "
                                 f"M=Q,... ({', '.join(names)}) or --model M")
            name = model or names[0]
        name = name.strip()
        if name not in names and name != model:
            raise UsageError(f"plan: --demand-qps: model {name!r} is not in the config (configured: {', '.join(names)})")
        try:
            q = float(val)
        except ValueError:
            raise UsageError(f"plan: --demand-qps: {val.strip()!r} is not a number of queries per second") from None
        if not (math.isfinite(q) and q >= 0):
            raise UsageError("plan: --demand-qps must be >= 0")
        out[name] = q
    return out


def run_joint(args: argparse.Namespace, cfg: Config, profiles, rates: dict[str, float],  # type: ignore[no-untyped-def]
              types: list[str] | None, objective: str) -> int:
    """The joint plan of every configured model (:func:`scaler.planner.joint_plan.plan_joint`), confirmed
    as the daemon confirms its max_throughput picks."""
    declared = declared_demands(cfg)
    demand = {m: DemandView(rates.get(m, d.qps), d.mix, False) for m, d in declared.items()}
    cache = PickCache()
    try:
        plan = plan_joint(cfg, profiles, demand, slo_check=slo_check, types=types, budget=args.budget,
                          objective=objective, confirmed=cache, exhaustive=args.exhaustive)  # type: ignore[arg-type]
        todo = [p.confirm for p in plan.plans if p.confirm is not None]
        if todo:
            for c in todo:
                cache.put(c.key, confirmation(c.inputs, c.policy, c.evaluations, base_type=c.base_type,
                                              exhaustive=args.exhaustive).plan)
            plan = plan_joint(cfg, profiles, demand, slo_check=slo_check, types=types, budget=args.budget,
                              objective=objective, confirmed=cache, exhaustive=args.exhaustive)  # type: ignore[arg-type]
        binds = quota_binds(cfg, plan.pool, lambda c: plan_joint(
            c, profiles, demand, slo_check=slo_check, types=types, budget=args.budget, objective=objective,
            exhaustive=args.exhaustive).pool)   # type: ignore[arg-type]
    except PlanError as exc:
        raise UsageError(f"plan: {exc}") from None
    ests = [model_estimates(cfg, profiles, m, s.plan.chosen if s.plan is not None else s.pool, types)
            for m, s in plan.models.items()]
    if args.json:
        d = plan.to_dict()
        for e in ests:
            d["models"][e.model].update(e.to_dict())
        d["estimated"] = sorted({t for e in ests for t in e.considered})        # as one model's plan says them
        d["estimated_picked"] = sorted({t for e in ests for t in e.picked})
        if binds is not None:
            d["quotas"] = binds
        print(json.dumps(d))
    else:
        print(render_joint(plan, {e.model: e.considered for e in ests}))
        for line in footer(ests):
            print(line)
        for line in quota_lines(binds):
            print(line)
    return 0


def quota_binds(cfg: Config, pool: Mapping[str, int],
                best: Callable[[Config], Mapping[str, int]]) -> dict[str, Any] | None:
    """With vCPU quotas: each family's vCPUs in ``pool`` and its quota, and the quotas that bind
    (``best``: the plan of a config without quotas, the budget's best pool, is over them;
    :func:`scaler.planner.quota.binding_quotas`). None without quotas."""
    q = quota_for(cfg, list(cfg.full_catalog()))
    if q is None:
        return None
    used = q.used(pool)
    free = cfg.model_copy(update={"quotas": None})
    binding = binding_quotas(best(free), q)
    return {"within": {f: {"vcpus": used.get(f, 0), "limit": int(v)} for f, v in sorted(q.limits.items())},
            "binds": bool(binding), "binding": [b.to_dict() for b in binding]}


def quota_lines(binds: dict[str, Any] | None) -> list[str]:
    """``plan``'s quota lines: each family's vCPUs against its quota, then what binds and what to raise."""
    if binds is None:
        return []
    out = ["vCPU quotas: " + ", ".join(f"{f} {w['vcpus']}/{w['limit']}" for f, w in binds["within"].items())
           + ("" if binds["binds"] else " (the budget binds, not a quota)")]
    for b in binds["binding"]:
        out.append(QuotaBind(b["family"], b["limit"], b["needs"], b["market"]).line())
    return out


def render_joint(plan: JointPlan, estimated: Mapping[str, Mapping[str, Estimate]] | None = None) -> str:
    """The joint plan: the pool, each model's workers (``~`` on a type planned from an estimate,
    ``estimated``: model -> type -> estimate), capacity against demand, and what is short."""
    est = estimated or {}
    anywhere = {t: e for m, s in plan.models.items() for t, e in est.get(m, {}).items() if s.pool.get(t, 0) > 0}
    pool = ", ".join(f"{marked(t, anywhere)} x{n}" for t, n in sorted(plan.pool.items())) or "(empty)"
    lines = [f"joint plan of {len(plan.models)} models: budget {plan.budget_per_hour:g} $/hr, objective "
             f"{plan.objective}, rule {plan.rule}",
             f"pool: {pool}  ({plan.cost_per_hour:.4f} $/hr)"]
    head = ["model", "workers", "$/hr", "capacity q/s", "demand q/s", "short q/s", "weight", "rule"]
    rows = [[m, ", ".join(f"{marked(t, est.get(m, {}))} x{n}" for t, n in sorted(s.pool.items())) or "none",
             f"{s.cost_per_hour:.4f}",
             f"{s.capacity_qps:.1f}", f"{s.demand_qps:.1f}", f"{s.short_qps:.1f}", f"{s.weight:g}",
             s.plan.rule if s.plan is not None else "none"] for m, s in plan.models.items()]
    widths = [max(len(h), *(len(r[j]) for r in rows)) for j, h in enumerate(head)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [head] + rows]
    if plan.short:
        lines.append("short: " + ", ".join(f"{m} {q:.1f} q/s" for m, q in plan.short.items())
                     + " (the budget cannot cover every model; the shortfall is shared by weight)")
    lines.append("capacity: the Kairos upper bound of each model's workers; need = demand x (1 + headroom)")
    return "\n".join(lines)


def render(plan: Plan, dist: str, estimated: Mapping[str, Estimate] | None = None) -> str:
    """Human-readable plan: the top pools, the pick and its rule, base and auxiliary types; each
    type planned from an estimate (``estimated``: type -> estimate) marked ``~``."""
    est = estimated or {}
    types = list(plan.chosen)
    head = ["#"] + [marked(t, est) for t in types] + ["$/hr", "QPS bound"]
    rows = []
    for i, (pool, cost, bound) in enumerate(plan.ranked, 1):
        mark = "*" if pool == plan.chosen else ""
        rows.append([f"{i}{mark}"] + [str(pool[t]) for t in types] + [f"{cost:.4f}", f"{bound:.1f}"])
    widths = [max(len(h), *(len(r[j]) for r in rows)) if rows else len(h) for j, h in enumerate(head)]
    fmt = lambda r: "  ".join(c.rjust(w) for c, w in zip(r, widths))  # noqa: E731
    lines = [f"model {plan.model}: budget {plan.budget_per_hour:g} $/hr, batch mix {dist}, "
             f"{plan.pools_ranked:,} pools within budget; top {len(plan.ranked)} by upper bound (* = pick):",
             fmt(head)] + [fmt(r) for r in rows]
    pick = ", ".join(f"{marked(t, est)} x{c}" for t, c in plan.chosen.items() if c) or "(empty)"
    lines.append(f"pick: {pick}  ({plan.cost_per_hour:.4f} $/hr, upper bound {plan.upper_bound_qps:.1f} QPS, "
                 f"rule {plan.rule})")
    if plan.demand_unmet:
        lines.append("warning: no pool within budget covers the demand; holding the max-upper-bound pool")
    lines.append(f"base type: {plan.base_type}")
    for t, a in plan.aux.items():
        lines.append(f"auxiliary {t}: s = {int(a['s'])} (largest batch within QoS), f = {a['f']:.3f}")
    return "\n".join(lines)
