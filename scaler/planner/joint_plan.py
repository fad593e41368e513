"""The fleet decision for every configured model at once: one pool within one budget, and which of
its workers serve which model (pure; issue #24, DESIGN "Many models, one budget").

:func:`plan_joint` is what the daemon's fleet tick, ``costscale plan`` and the replay call. Each
model gets a sub-pool of its own (design (a): Kairos per model, the budget split over the models'
frontiers, :mod:`scaler.planner.budget_split`):

- ``min_cost``: each model's own pick (:func:`scaler.planner.model_plan.plan_fleet`: the cheapest pool
  that holds *its* p99 within *its* QoS at its demand x (1 + headroom), checked by simulation, the
  pool it holds kept while it still fits). When the picks add up to no more than the budget, that is
  the plan (rule ``joint-min-cost``). When they do not, the budget is split so that the models
  short of their need are short by their weights (``joint-split``), and each model's pool is its
  own min_cost pick within its share (its highest-bound pool there, flagged, when even that falls
  short).
- ``max_throughput``: the budget is split so that the smallest served fraction of demand per unit
  of weight is as high as it can be (demand: measured, else the models' declared ``expected_qps``),
  and each model holds Kairos's similarity pick within its share (confirmed by simulation, as a
  single model's is).

With vCPU quotas (``quotas`` in the config, :mod:`scaler.planner.quota`) the models' pools together
stay within each family's quota: each model's frontier is within the quota, the ``min_cost`` picks
are taken as they are only when their sum is within it, and the split's picks are made one model
after another (the config's order), each within what the models before it left.

One configured model is planned exactly as before (:func:`scaler.planner.model_plan.plan_fleet` over
the whole budget), so a single-model deployment's decisions do not move.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from config.budget import BUDGET_EPS
from config.profiles import ProfileTable
from config.schema import Config
from scaler.planner.base_aux import PlanError
from scaler.planner.batch_mix import mix_from_dist
from scaler.planner.budget_split import Frontier, Split, frontier, split_budget
from scaler.planner.estimate_gate import planned_types
from scaler.planner.model_plan import SloCheck, plan_fleet
from scaler.planner.pick_cache import PickCache
from scaler.planner.choose import rank_inputs
from scaler.planner.plan_inputs import Objective, Plan, plan_inputs_from_config
from scaler.planner.replan import DemandView
from scaler.planner.pools import pool_cost, pool_sum
from scaler.planner.quota import VcpuQuota, quota_for


@dataclass(frozen=True)
class ModelShare:
    """One model's part of the joint plan: its workers (``pool``), what they cost and bound, and the
    demand they are for. ``need_qps``: demand x (1 + headroom), what ``min_cost`` covers."""

    model: str
    pool: dict[str, int]
    cost_per_hour: float
    capacity_qps: float
    demand_qps: float
    need_qps: float
    weight: float = 1.0
    plan: Plan | None = field(default=None, compare=False, repr=False)

    @property
    def short_qps(self) -> float:
        """How far the model's workers fall short of its need (0 when covered)."""
        return max(0.0, self.need_qps - self.capacity_qps)

    def to_dict(self) -> dict[str, Any]:
        return {"workers": dict(self.pool), "cost_per_hour": round(self.cost_per_hour, 6),
                "capacity_qps": round(self.capacity_qps, 3), "demand_qps": round(self.demand_qps, 3),
                "need_qps": round(self.need_qps, 3), "short_qps": round(self.short_qps, 3), "weight": self.weight,
                "base_type": self.plan.base_type if self.plan is not None else None,
                "rule": self.plan.rule if self.plan is not None else "none"}


@dataclass(frozen=True)
class JointPlan:
    """The joint fleet decision: each model's share; the pool is their sum."""

    objective: str
    budget_per_hour: float
    rule: str
    models: dict[str, ModelShare]

    @property
    def pool(self) -> dict[str, int]:
        return pool_sum(s.pool for s in self.models.values())

    @property
    def cost_per_hour(self) -> float:
        return sum(s.cost_per_hour for s in self.models.values())

    @property
    def upper_bound_qps(self) -> float:
        return sum(s.capacity_qps for s in self.models.values())

    @property
    def short(self) -> dict[str, float]:
        """The models short of their need, and by how many q/s."""
        return {m: s.short_qps for m, s in self.models.items() if s.short_qps > 1e-9}

    @property
    def plans(self) -> list[Plan]:
        return [s.plan for s in self.models.values() if s.plan is not None]

    @property
    def base_types(self) -> dict[str, str]:
        return {m: s.plan.base_type for m, s in self.models.items() if s.plan is not None}

    def dispatch_base_type(self) -> str | None:
        """The base type for a matching that takes one (the live dispatcher's): the busiest planned
        model's (its demand; ties: config order); None when no model has a plan."""
        planned = [s for s in self.models.values() if s.plan is not None]
        if not planned:
            return None
        return max(planned, key=lambda s: s.demand_qps).plan.base_type    # type: ignore[union-attr]

    def to_dict(self) -> dict[str, Any]:
        return {"objective": self.objective, "budget_per_hour": self.budget_per_hour, "rule": self.rule,
                "pool": self.pool, "cost_per_hour": round(self.cost_per_hour, 6),
                "models": {m: s.to_dict() for m, s in self.models.items()},
                "short": {m: round(q, 3) for m, q in self.short.items()}}


def declared_demand(cfg: Config, model: str) -> DemandView:
    """``model``'s declared workload: its ``expected_qps`` (else ``workload.expected_qps``) and
    ``workload.batch_dist`` up to its ``max_batch``: what the fleet plans for until the dispatcher
    has measured the model. Sampling the mix takes ~10 ms: callers that ask often keep it."""
    spec = cfg.model(model)
    qps = spec.expected_qps if spec.expected_qps is not None else cfg.workload.expected_qps
    return DemandView(float(qps), mix_from_dist(cfg.workload.batch_dist, max_batch=spec.max_batch), False)


def declared_demands(cfg: Config) -> dict[str, DemandView]:
    """:func:`declared_demand` of every configured model."""
    return {m.name: declared_demand(cfg, m.name) for m in cfg.models}


def _with_declared(cfg: Config, demand: Mapping[str, DemandView]) -> dict[str, DemandView]:
    """``demand`` for every configured model, the declared one where it has none (sampled only then:
    the daemon and the replay pass every model's)."""
    return {m.name: demand[m.name] if m.name in demand else declared_demand(cfg, m.name) for m in cfg.models}




def _share(plan: Plan, demand: DemandView, headroom: float, weight: float) -> ModelShare:
    pool = {t: n for t, n in plan.chosen.items() if n > 0}
    return ModelShare(plan.model, pool, plan.cost_per_hour, plan.upper_bound_qps, demand.qps,
                      demand.qps * (1.0 + headroom), weight, plan)


def _empty(model: str, demand: DemandView, headroom: float, weight: float) -> ModelShare:
    return ModelShare(model, {}, 0.0, 0.0, demand.qps, demand.qps * (1.0 + headroom), weight, None)


def model_frontiers(cfg: Config, profiles: ProfileTable, demand: Mapping[str, DemandView], *,
                    exclude: Sequence[str] = (), types: Sequence[str] | None = None,
                    budget: float | None = None, types_for: Mapping[str, Sequence[str]] | None = None
                    ) -> list[Frontier]:
    """Every model's cost → throughput frontier within the budget, at its demand's batch mix, over
    the same columns (``types``, or the config's)."""
    cols = list(types) if types is not None else [t.type for t in cfg.instance_types]
    out = []
    for m in cfg.models:
        mine = planned_types(cfg, profiles, m.name, (types_for or {}).get(m.name, types))
        inputs = plan_inputs_from_config(cfg, profiles, m.name, demand[m.name].mix, exclude=tuple(exclude),
                                         types=mine, budget=budget)
        _, ranking = rank_inputs(inputs)
        out.append(frontier(m.name, ranking, cols))
    return out


def _with_fixed(cfg: Config, profiles: ProfileTable, demand: Mapping[str, DemandView],
                fixed: Mapping[str, Mapping[str, int]], *, budget: float, **kw: Any) -> JointPlan:
    """:func:`plan_joint` with some models on given pools: those first, the rest in what is left."""
    prices = cfg.prices()
    demand = _with_declared(cfg, demand)
    held = {m: pool_sum([p]) for m, p in fixed.items()}
    spent = pool_cost(pool_sum(held.values()), prices)
    shares = {m: ModelShare(m, held[m], pool_cost(held[m], prices), 0.0, demand[m].qps,
                            demand[m].qps * (1.0 + cfg.headroom), cfg.model(m).weight, None) for m in held}
    rest = [m for m in cfg.models if m.name not in held]
    if not rest:
        return JointPlan(kw["objective"], budget, "held", shares)
    if spent > budget + BUDGET_EPS:
        raise PlanError(f"the pools held for {', '.join(held)} cost {spent:.4f} $/hr, over the budget {budget:g} $/hr")
    sub = cfg.model_copy(update={"models": rest, "quotas": _quotas_left(cfg, pool_sum(held.values()))})
    plan = plan_joint(sub, profiles, {m.name: demand[m.name] for m in rest}, budget=budget - spent, **kw)
    return JointPlan(plan.objective, budget, plan.rule, {**{m.name: plan.models[m.name] for m in rest}, **shares})


def _quotas_left(cfg: Config, pool: Mapping[str, int]) -> Any:
    """The config's ``quotas`` less what ``pool`` (held for fixed models) runs on demand."""
    q = quota_for(cfg, list(cfg.full_catalog()))
    if q is None:
        return cfg.quotas
    return cfg.quotas.model_copy(update={"on_demand": dict(q.less(pool).limits)})   # type: ignore[union-attr]


def split_for(cfg: Config, frontiers: Sequence[Frontier], demand: Mapping[str, DemandView], budget: float,
              objective: Objective) -> Split:
    """The budget split for ``objective`` (:func:`scaler.planner.budget_split.split_budget`): ``min_cost``
    shares a shortfall of need by weight; ``max_throughput`` maximises the smallest served fraction
    of demand per weight (with no demand at all, of weight alone)."""
    weights = {m.name: m.weight for m in cfg.models}
    maxima = {t.type: t.max for t in cfg.instance_types}
    if objective == "min_cost":
        targets = {m: d.qps * (1.0 + cfg.headroom) for m, d in demand.items()}
        return split_budget(frontiers, targets, weights, budget, capped=True, maxima=maxima)
    any_demand = any(d.qps > 0 for d in demand.values())
    targets = {m: (d.qps if any_demand else 1.0) for m, d in demand.items()}
    return split_budget(frontiers, targets, weights, budget, capped=False, maxima=maxima)


def _shares_of(split: Split, frontiers: Sequence[Frontier], budget: float) -> dict[str, float]:
    """Each model's budget share: its split row's cost, what the split left unspent going to the
    model of the lowest score (a sub-pool pick within it may use it)."""
    shares = {f.model: float(f.cost[split.rows[f.model]]) for f in frontiers}
    left = budget - sum(shares.values())
    if left > BUDGET_EPS and shares:
        low = min(shares, key=lambda m: (split.scores[m], m))
        shares[low] += left
    return shares


def plan_joint(cfg: Config, profiles: ProfileTable, demand: Mapping[str, DemandView], *, slo_check: SloCheck,
               exclude: Sequence[str] = (), types: Sequence[str] | None = None, budget: float | None = None,
               objective: Objective | None = None, current: Mapping[str, Mapping[str, int]] | None = None,
               confirmed: PickCache | None = None, top_k: int = 10,
               fixed: Mapping[str, Mapping[str, int]] | None = None,
               types_for: Mapping[str, Sequence[str]] | None = None,
               keep: Mapping[str, ModelShare] | None = None, exhaustive: bool = False) -> JointPlan:
    """The joint plan for every configured model (module docstring). ``demand``: each model's
    demand (missing ones: the declared); ``current``: each model's pool held now (``min_cost``
    keeps it while it fits); ``fixed``: models that hold a given pool (a model being profiled holds
    its conservative pool, ``daemon.profiling.self_profiling``): the others are planned in what it leaves of
    the budget; ``types_for``: a model's allowed types when fewer than ``types`` (the types it has
    a profile on); ``keep``: ``min_cost`` shares to hold as they are while the picks still fit the
    budget (the models whose demand did not move, ``scaler.fleet.step.unmoved_shares``);
    ``exhaustive``: each model's pick ranks every pool (``plan_fleet``). Raises PlanError when no
    pool fits."""
    objective = objective or cfg.objective
    budget = float(budget if budget is not None else cfg.budget_per_hour)
    if fixed:
        return _with_fixed(cfg, profiles, demand, fixed, slo_check=slo_check, exclude=exclude, types=types,
                           budget=budget, objective=objective, current=current, confirmed=confirmed, top_k=top_k,
                           types_for=types_for, keep=keep, exhaustive=exhaustive)
    demand = _with_declared(cfg, demand)
    weights = {m.name: m.weight for m in cfg.models}
    current = current or {}

    def model_types(model: str) -> Sequence[str] | None:
        return (types_for or {}).get(model, types)

    def pick(model: str, share: float, obj: Objective, quota: VcpuQuota | None | str = "config") -> Plan:
        d = demand[model]
        return plan_fleet(cfg, profiles, d.mix, d.qps, slo_check=slo_check, model=model, exclude=exclude,
                          types=model_types(model), budget=share, objective=obj, top_k=top_k,
                          current=current.get(model) or None, confirmed=confirmed, exhaustive=exhaustive,
                          quota=quota)

    joint_quota = quota_for(cfg, list(cfg.full_catalog()))     # every type's family and vCPUs; None: no quota

    if len(cfg.models) == 1:
        m = cfg.models[0].name
        plan = pick(m, budget, objective)
        return JointPlan(objective, budget, plan.rule, {m: _share(plan, demand[m], cfg.headroom, weights[m])})
    if objective == "min_cost":
        kept = {m: s for m, s in (keep or {}).items() if s.plan is not None and any(x.name == m for x in cfg.models)}
        own = {m.name: kept[m.name].plan if m.name in kept else pick(m.name, budget, "min_cost") for m in cfg.models}
        if sum(p.cost_per_hour for p in own.values()) <= budget + BUDGET_EPS and _within_maxima(cfg, own.values()) \
                and _within_quota(joint_quota, own.values()):
            return JointPlan(objective, budget, "joint-min-cost",
                             {m: kept[m] if m in kept else _share(p, demand[m], cfg.headroom, weights[m])  # type: ignore[arg-type]
                              for m, p in own.items()})
    frontiers = model_frontiers(cfg, profiles, demand, exclude=exclude, types=types, budget=budget,
                                types_for=types_for)
    if all(len(f) == 1 for f in frontiers):      # only the empty pool: nothing fits
        names = [t for t in (types or [t.type for t in cfg.instance_types]) if t not in exclude]
        cheapest = min(cfg.full_catalog()[t].price_per_hour for t in names) if names else 0.0
        raise PlanError(f"no pool fits the budget {budget:g} $/hr (cheapest allowed type {cheapest:g} $/hr; "
                        "per-type minimums included)")
    split = split_for(cfg, frontiers, demand, budget, objective)
    shares = _shares_of(split, frontiers, budget)
    out: dict[str, ModelShare] = {}
    for f in frontiers:
        m = f.model
        if split.rows[m] == 0:      # the budget leaves this model nothing
            out[m] = _empty(m, demand[m], cfg.headroom, weights[m])
            continue
        try:    # Kairos within the share (never a pool of bound 0 where one bounds more: choose_pool)
            plan = pick(m, shares[m] + BUDGET_EPS, objective, "config" if joint_quota is None else joint_quota)
        except PlanError:
            out[m] = _empty(m, demand[m], cfg.headroom, weights[m])
            continue
        if joint_quota is not None:     # the next model plans within what this one leaves
            joint_quota = joint_quota.less(plan.chosen)
        out[m] = _share(plan, demand[m], cfg.headroom, weights[m])
    joint = JointPlan(objective, budget, "joint-split", out)
    if joint.cost_per_hour > budget + 1e-6:     # each pick is within its share; the shares add up to the budget
        raise PlanError(f"joint plan {joint.cost_per_hour:.4f} $/hr over the budget {budget:g} $/hr")
    return joint


def _within_quota(quota: VcpuQuota | None, plans: Iterable[Plan]) -> bool:
    """The plans' pools together within every vCPU quota."""
    if quota is None:
        return True
    used = quota.used(pool_sum(p.chosen for p in plans))
    return all(used.get(f, 0) <= v for f, v in quota.limits.items())


def _within_maxima(cfg: Config, plans: Iterable[Plan]) -> bool:
    total = pool_sum(p.chosen for p in plans)
    return all(t.max is None or total.get(t.type, 0) <= t.max for t in cfg.instance_types)


__all__ = ["JointPlan", "ModelShare", "declared_demand", "declared_demands", "model_frontiers", "plan_joint",
           "split_for"]
