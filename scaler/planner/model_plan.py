"""The fleet decision the daemon acts on and ``costscale plan`` prints: one pure function.

``plan_fleet`` builds the planner inputs from the config and a demand view, and for ``min_cost``
verifies candidates with a short simulation of the configured dispatcher policy run with the
planner's base type, so the CLI shows exactly the pool the daemon would hold. The simulation sits
in a higher layer (``sim.slo_check.slo_check``): the caller passes it in as ``slo_check`` (the
daemon, ``costscale plan`` and the replay all pass the same function).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable, Mapping, Sequence

from config.schema import Config
from scaler.planner.batch_mix import BatchMix
from scaler.planner.estimate_gate import planned_types
from scaler.planner.pick_cache import PickCache, pick_key
from scaler.planner.choose import choose_pool
from scaler.planner.quota import VcpuQuota
from scaler.planner.plan_inputs import Meets, Objective, Plan, ToConfirm, plan_inputs_from_config
from config.profiles import ProfileTable

#: ``slo_check(profile_model, profiles, qos_ms, rate_qps, mix, *, policy) -> Meets``
#: (``sim.slo_check.slo_check``, passed in by the caller: the simulator is a higher layer).
SloCheck = Callable[..., Meets]


def plan_fleet(cfg: Config, profiles: ProfileTable, mix: BatchMix, demand_qps: float, *, slo_check: SloCheck,
               model: str, exclude: Sequence[str] = (), types: Sequence[str] | None = None,
               budget: float | None = None, qos_ms: float | None = None, objective: Objective | None = None,
               top_k: int = 10, current: Mapping[str, int] | None = None,
               confirmed: PickCache | None = None, exhaustive: bool = False,
               quota: VcpuQuota | None | str = "config") -> Plan:
    """The planner's pick for ``model`` (one model's sub-pool; every model at once is
    :func:`scaler.planner.joint_plan.plan_joint`) at ``demand_qps`` with
    batch mix ``mix``; ``exclude`` are types that are temporarily unavailable (InsufficientCapacity).
    ``current``: the pool held now, kept while it covers the demand at most 10 % dearer than the
    pick (``min_cost``; see ``choose_pool``). ``confirmed`` (``max_throughput``): the picks
    confirmed by simulation so far (``scaler.planner.pick_cache``): the confirmed plan for this question
    when there is one, else the similarity pick carrying ``confirm`` (what to confirm it with).
    ``exhaustive``: rank every pool even where ``choose_pool`` would search (``costscale plan
    --exhaustive``). A type where the model has only an estimate by ``config/type_estimates.csv`` is
    left out unless the config allows it (:func:`scaler.planner.estimate_gate.planned_types`). Raises
    scaler.planner.base_aux.PlanError when no pool fits. ``quota``: the running-vCPU quotas the pool
    stays within (default ``"config"``: the config's on-demand ``quotas``; the joint plan passes
    what the models before this one left, :mod:`scaler.planner.quota`)."""
    spec = cfg.model(model)
    objective = objective or cfg.objective
    types = planned_types(cfg, profiles, model, types)    # estimates by the type table only where allowed
    inputs = plan_inputs_from_config(cfg, profiles, spec.name, mix, exclude=tuple(exclude), types=types,
                                     budget=budget, qos_ms=qos_ms, quota=quota)
    meets = None
    if objective == "min_cost" and demand_qps > 0:
        meets = slo_check(spec.profile_name, profiles, inputs.qos_ms, demand_qps * (1 + cfg.headroom), mix,
                          policy=cfg.dispatcher.policy)
    confirming = objective == "max_throughput" and confirmed is not None and cfg.confirm_evaluations >= 2
    if confirming:      # the max_throughput pick depends on neither demand nor the pool held
        key = pick_key(inputs, cfg.dispatcher.policy, cfg.confirm_evaluations)
        hit = confirmed.get(key)    # type: ignore[union-attr]
        if hit is not None:
            return hit
    plan = choose_pool(inputs, objective=objective, demand_qps=demand_qps, headroom=cfg.headroom,
                       top_k=top_k, meets=meets, current=current, exhaustive=exhaustive)
    if not confirming:
        return plan
    return replace(plan, confirm=ToConfirm(key, inputs, cfg.dispatcher.policy, cfg.confirm_evaluations, plan.base_type))
