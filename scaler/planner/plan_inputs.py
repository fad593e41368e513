"""What the fleet planner decides from and what it returns (Kairos §5.2), as plain data.

:class:`PlanInputs` (one model's profiles, batch mix, QoS, budget, prices, per-type bounds),
:class:`Plan` (the decision: the pool, its cost and bound, the rule, the top pools) and
:class:`ToConfirm` (a pick to confirm by simulation); :func:`plan_inputs_from_config` builds the
inputs from a config; :func:`base_aux_of` and :func:`pool_space` are the base/auxiliary split and
the pool space that the ranking (:mod:`scaler.planner.choose`) and the search (:mod:`scaler.planner.choose_by_search`)
both start from; :func:`no_pool_fits` is the one line for a budget no pool fits (pure).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Literal, Mapping, Sequence

from config.profiles import LatencyProfile, ProfileTable, Stat
from scaler.planner.base_aux import BaseAux, PlanError, split_base_aux
from scaler.planner.batch_mix import BatchMix, mix_from_dist
from scaler.planner.search.pool_space import PoolSpace
from scaler.planner.quota import VcpuQuota, cap_bounds, quota_for

Objective = Literal["max_throughput", "min_cost"]
#: the seed of the batch mix drawn from the config's declared distribution (nothing measured yet)
MIX_SEED = 0


@dataclass(frozen=True)
class PlanInputs:
    """Everything the planner decides from, as plain data."""

    model: str
    profiles: Mapping[str, LatencyProfile]
    mix: BatchMix
    qos_ms: float
    budget_per_hour: float
    prices: Mapping[str, float]
    bounds: Mapping[str, tuple[int, int | None]] = field(default_factory=dict)
    xi: float = 0.98
    exclude: tuple[str, ...] = ()
    qos_stat: Stat = "p99"
    #: the running-vCPU quotas every pool stays within (None: unlimited; scaler.planner.quota)
    quota: VcpuQuota | None = None

    @property
    def types(self) -> tuple[str, ...]:
        return tuple(self.profiles)

    @property
    def allowed(self) -> tuple[str, ...]:
        """The types a pool may hold: not excluded, and not of a family whose vCPU quota runs none."""
        return tuple(t for t in self.profiles if t not in self.exclude
                     and (self.quota is None or self.quota.type_cap(t) != 0))


@dataclass(frozen=True)
class ToConfirm:
    """A pick to confirm by simulation (``sim.pick_eval.confirmed_plan`` answers it): the planning
    question (``scaler.planner.pick_cache.pick_key``), its inputs, the dispatch policy and how many pools to
    simulate (the config's ``confirm_evaluations``)."""

    key: Hashable
    inputs: PlanInputs
    policy: str
    evaluations: int
    base_type: str      # the planner's (the simulated policy runs with it)


@dataclass(frozen=True)
class Plan:
    """A planner decision. ``ranked``: the top_k pools by upper bound as (pool, $/hr, QPS bound);
    ``aux``: per auxiliary type, its QoS region ``s`` and fraction ``f``."""

    model: str
    budget_per_hour: float
    base_type: str
    chosen: dict[str, int]
    cost_per_hour: float
    upper_bound_qps: float
    rule: str
    pools_ranked: int
    ranked: list[tuple[dict[str, int], float, float]]
    aux: dict[str, dict[str, float]]
    demand_unmet: bool = False
    #: a max_throughput pick not confirmed yet, and what to confirm it with; set by
    #: ``scaler.planner.model_plan.plan_fleet`` when it is given a cache and the config confirms
    confirm: "ToConfirm | None" = field(default=None, compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "budget_per_hour": self.budget_per_hour,
            "base_type": self.base_type,
            "chosen": dict(self.chosen),
            "cost_per_hour": round(self.cost_per_hour, 6),
            "upper_bound_qps": round(self.upper_bound_qps, 3),
            "rule": self.rule,
            "pools_ranked": self.pools_ranked,
            "ranked": [
                {"pool": dict(p), "cost_per_hour": round(c, 6), "upper_bound_qps": round(b, 3)}
                for p, c, b in self.ranked
            ],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict())


def plan_inputs_from_config(
    cfg: Any,
    profiles: ProfileTable,
    model: str | None,
    mix: BatchMix | None,
    exclude: Sequence[str] = (),
    *,
    types: Sequence[str] | None = None,
    budget: float | None = None,
    qos_ms: float | None = None,
    quota: VcpuQuota | None | str = "config",
) -> PlanInputs:
    """Build PlanInputs from a ``config.schema.Config`` (keyword overrides as on the CLI).

    ``types`` replaces the config's allowed types (each must be in the catalog; bounds from the
    config where listed, else (0, None)). ``mix`` None or empty (nothing measured yet) → the config's
    declared batch distribution, seeded. ``quota``: the vCPU quotas to plan within (default
    ``"config"``: the config's on-demand ``quotas`` over these types, ``scaler.planner.quota.quota_for``).
    Raises PlanError (one line) for an unknown model/type or a missing profile.
    """
    try:
        spec = cfg.model(model)
    except KeyError:
        raise PlanError(f"unknown model {model!r} (configured: {', '.join(m.name for m in cfg.models)})") from None
    pname = spec.profile_name
    if pname not in profiles.models():
        raise PlanError(f"model {spec.name!r}: no latency profiles for {pname!r} "
                        f"(profiles have: {', '.join(profiles.models())})")
    catalog = cfg.full_catalog()
    cfg_bounds = cfg.type_bounds()
    names = list(types) if types is not None else [t.type for t in cfg.instance_types]
    if not names:
        raise PlanError("no instance types given")
    unknown = [t for t in names if t not in catalog]
    if unknown:
        raise PlanError(f"unknown instance type(s) {', '.join(unknown)} (known: {', '.join(sorted(catalog))})")
    missing = [t for t in names if not profiles.has(pname, t)]
    if missing:
        raise PlanError(f"model {spec.name!r}: no latency profile for {pname!r} on {', '.join(missing)}")
    return PlanInputs(
        model=spec.name,
        profiles={t: profiles.get(pname, t) for t in names},
        mix=mix if mix is not None and len(mix.sizes) else mix_from_dist(cfg.workload.batch_dist, seed=MIX_SEED,
                                                                        max_batch=spec.max_batch),
        qos_ms=float(qos_ms if qos_ms is not None else spec.qos_ms),
        budget_per_hour=float(budget if budget is not None else cfg.budget_per_hour),
        prices={t: catalog[t].price_per_hour for t in names},
        bounds={t: cfg_bounds.get(t, (0, None)) for t in names},
        exclude=tuple(exclude),
        quota=quota_for(cfg, names) if quota == "config" else quota,     # type: ignore[arg-type]
    )


def base_aux_of(inputs: PlanInputs) -> BaseAux:
    """The base/auxiliary split of the allowed types (Kairos §5.2), without ranking any pool."""
    allowed = inputs.allowed
    if not allowed:
        raise PlanError("every instance type is excluded")
    return split_base_aux({t: inputs.profiles[t] for t in allowed}, inputs.mix, inputs.qos_ms,
                          inputs.prices, inputs.xi, inputs.qos_stat)


def pool_space(inputs: PlanInputs, ba: BaseAux) -> PoolSpace:
    """The pools :func:`rank_inputs` ranks for ``inputs`` (columns ``inputs.allowed``), for the search."""
    allowed = inputs.allowed
    bounds = cap_bounds(inputs.bounds, allowed, inputs.quota)
    quota = inputs.quota.matrix(allowed) if inputs.quota is not None else None
    return PoolSpace.build(allowed, [inputs.prices[t] for t in allowed],
                           [bounds[t][0] for t in allowed], [bounds[t][1] for t in allowed],
                           inputs.budget_per_hour, ba.base_type, ba.aux_types, ba.params, quota=quota)



Meets = Callable[[dict[str, int], str], bool]
"""A candidate check: (pool, the planner's base type) -> does the pool hold the SLO?"""


def no_pool_fits(inputs: PlanInputs) -> PlanError:
    """The one line for a budget no pool fits (per-type minimums included)."""
    cheapest = min(inputs.prices[t] for t in inputs.allowed)
    quotas = ""
    if inputs.quota is not None:
        a = inputs.quota.key(inputs.allowed)
        quotas = " and the vCPU quotas (" + ", ".join(f"{f} {v}" for f, v in a) + ")" if a else ""
    return PlanError(f"no pool fits the budget {inputs.budget_per_hour:g} $/hr{quotas} (cheapest allowed type "
                     f"{cheapest:g} $/hr; per-type minimums included)")


__all__ = ["MIX_SEED", "Meets", "Objective", "Plan", "PlanInputs", "ToConfirm", "base_aux_of", "no_pool_fits",
           "plan_inputs_from_config", "pool_space"]
