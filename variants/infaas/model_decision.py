"""The model loop's decision (INFaaS §4.2 model-vertical scaling): one round, pure -- a snapshot of
the live workers and the state in, placements, the VM-autoscaler's requests and the new state out.

1. fold the workers' reports (queries served per variant instance, measured p99 against the
   profile) into the variant state machine (INFaaS §3.2, Figure 4);
2. run the model-autoscaler (INFaaS §4.2.2 greedy by default, the §4.2.1 ILP when selected) over
   the variant instances the live workers can hold: one instance slot per worker, a variant runs on
   the instance types of its hardware class, its saturation throughput is one query at a time at the
   profiled latency of the mean batch (the model's profile on that type times the variant's
   measured relative speed), its cost the worker's price (in $/hr units);
3. turn the plan into per-worker Load/Unload placements (the dispatcher routes a variant's queries
   only to workers where it is loaded);
4. run the VM-autoscaler rules (INFaaS §4.2.3, :func:`variants.infaas.vm_autoscaler.decide_vm`); what they
   ask of the fleet becomes a capacity hint in :mod:`variants.infaas.capacity_hint`. This decision never
   launches or terminates anything, so the money invariant (DESIGN invariant 1) stays with the
   fleet planner.

The adapter that snapshots the dispatcher and applies the placements with the Worker RPCs is
:class:`daemon.loops.model_loop.ModelLoop`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Literal, Mapping, Sequence

import numpy as np

from variants.accuracy.plan_round import AccuracyRoundParams
from variants.accuracy.trigger import TriggerParams
from variants.naming import expand_name, split_name
from variants.infaas.vm_autoscaler import VmDecision, VmParams, VmState, WorkerStatus, decide_vm
from variants.infaas.autoscale_greedy import GreedyState, greedy_scale
from variants.infaas.autoscale_ilp import (DEFAULT_LAMBDA, QPS_TOL, ScalingPlan, ScalingProblem, ScalingVariant,
                                   plan_from_counts, solve_ilp, violations)
from variants.runtime.executor import ANY_HARDWARE
from variants.infaas.state_machine import StateKey, StateParams, VariantReport, VariantState, apply_reports

if TYPE_CHECKING:
    from config.profiles import ProfileTable
    from config.schema import Config

#: a p99 over fewer served queries than this is noise: the interference check waits for more
MIN_P99_SAMPLES = 20


@dataclass(frozen=True)
class WorkerSnapshot:
    """One live worker over the last interval."""

    worker: str
    instance_type: str
    hardware: str
    utilization: float                                   # 0..1 busy fraction
    loaded: tuple[str, ...]                              # variants loaded on it
    served: tuple[tuple[str, int, float], ...] = ()      # (variant, batch, service_ms) served


@dataclass(frozen=True)
class VariantCandidate:
    name: str
    model: str
    hardware: str                 # cpu | gpu | inferentia | any
    speed_factor: float = 1.0     # latency relative to the model's profile on a type
    load_latency_s: float = 0.5


#: (model, instance type, batch, stat "mean"|"p99") -> profiled latency in ms
ProfileFn = Callable[[str, str, float, str], float]


def profiled_ms(mean_ms: Callable[[str, str, float], float], profiles: "ProfileTable", key: str, itype: str,
                batch: float, stat: str) -> float:
    """What a :data:`ProfileFn` answers for profile name ``key``: the mean from ``mean_ms`` (the
    dispatcher's latency model: the profile, else what it has learned); another stat from the
    profile, 0 for an unprofiled pair (the state machine then skips the interference check). The
    daemon's model loop and the replay's both ask this."""
    if stat == "mean":
        return float(mean_ms(key, itype, batch))
    if profiles.has(key, itype):
        return float(profiles.latency_ms(key, itype, np.asarray([max(batch, 1.0)]), stat)[0])
    return 0.0


@dataclass(frozen=True)
class ModelInputs:
    now: float
    interval_s: float
    workers: tuple[WorkerSnapshot, ...]
    variants: tuple[VariantCandidate, ...]
    load_qps: Mapping[str, float]            # model -> measured arrival rate (queries/s)
    mean_batch: Mapping[str, float]          # model -> mean batch size
    slo_ms: Mapping[str, float]              # model -> latency SLO
    price_per_hour: Mapping[str, float]      # instance type -> $/hr
    profile: ProfileFn


@dataclass(frozen=True)
class ModelLoopParams:
    solver: Literal["greedy", "ilp"] = "greedy"
    headroom: float = 0.05                   # INFaaS slack-threshold 1.05 (§5)
    lam: float = DEFAULT_LAMBDA
    min_qps: float = 0.01                    # keep one instance of every model with a variant
    state: StateParams = StateParams()
    vm: VmParams = VmParams()
    #: accuracy scaling (Proteus): applications with variants of several accuracies are placed and
    #: routed by :mod:`variants.accuracy.plan_round` (``due``, ``plan_for``); the autoscaler above does not
    #: run then, for any model (:meth:`daemon.loops.model_loop.ModelLoop.tick`; README "Accuracy scaling")
    accuracy: AccuracyRoundParams | None = None


def accuracy_params(cfg: "Config") -> AccuracyRoundParams:
    """``model_scaling.accuracy_scaling`` as the accuracy round's parameters (its trigger, headroom,
    floors and mode), whether or not it is on: a pipeline's Loki round plans with them too."""
    acc = cfg.model_scaling.accuracy_scaling
    return AccuracyRoundParams(trigger=TriggerParams(replan_s=acc.replan_s, noise_z=acc.burst_noise_z), beta=acc.beta,
                               min_accuracy=tuple(sorted(acc.min_accuracy.items())), mode=acc.mode)


def model_params_for(cfg: "Config") -> ModelLoopParams:
    """The model loop's parameters from the config (``model_scaling`` and ``headroom``): what the
    daemon and the replay both run with."""
    ms = cfg.model_scaling
    accuracy = accuracy_params(cfg) if ms.accuracy_scaling.enabled else None
    return ModelLoopParams(solver=ms.solver, headroom=cfg.headroom,
                           vm=VmParams(add_cooldown_s=ms.vm_add_cooldown_s, remove_cooldown_s=ms.vm_remove_cooldown_s,
                                       low_utilization=ms.vm_low_utilization), accuracy=accuracy)


@dataclass(frozen=True)
class ModelLoopState:
    states: Mapping[StateKey, VariantState] = field(default_factory=dict)
    greedy: GreedyState = GreedyState()
    vm: VmState = VmState()


@dataclass(frozen=True)
class Placement:
    action: Literal["load", "unload"]
    variant: str
    worker: str


@dataclass(frozen=True)
class ModelDecision:
    placements: tuple[Placement, ...]
    plan: ScalingPlan | None
    vm: tuple[VmDecision, ...]
    states: Mapping[StateKey, VariantState]
    reports: tuple[VariantReport, ...]
    unmet_qps: Mapping[str, float]
    #: model -> capacity missing below its load itself: ``unmet_qps`` beyond the headroom the model
    #: autoscaler adds (what the capacity hint acts on, :func:`shortfall`)
    shortfall_qps: Mapping[str, float] = field(default_factory=dict)


def above_floor(candidates: Sequence[VariantCandidate], accuracy: Mapping[str, float],
                floor_of: Mapping[str, float]) -> tuple[VariantCandidate, ...]:
    """The candidates getVariant may route a query to: those at or above their model's floor
    (``floor_of``, by model; ``models[].min_accuracy`` of its application; missing: 0). The
    autoscaler keeps one instance of every model it is given (``min_qps``): one below the floor would
    serve nothing and hold a worker (the pipeline example with its floors at the top variants: 96.62 %
    within the SLO when the model loop was given them, 99.92 % without)."""
    return tuple(c for c in candidates if accuracy.get(c.name, 1.0) >= floor_of.get(c.model, 0.0) - 1e-12)


def reports_for(inputs: ModelInputs, models: Mapping[str, str]) -> list[VariantReport]:
    """State-machine reports (INFaaS §5 monitoring) for every loaded (variant, worker) instance.

    Interference compares like with like: each served query's service time against the profiled
    p99 *at its own batch size*, and the p99 of those ratios is reported against the profile at the
    mean batch (``p99_ms / profiled_ms`` is that p99 ratio). Comparing the p99 of a whole batch mix
    with the profile at its mean batch called a worker Interfered whenever the mix had a tail
    (issue #12: a lone GPU worker "Interfered" at start, and the capacity hint bought 2x the pool).
    Fewer than :data:`MIN_P99_SAMPLES` queries in the interval: no interference verdict."""
    out: list[VariantReport] = []
    for w in inputs.workers:
        for v in w.loaded:
            served = [(b, ms) for name, b, ms in w.served if name == v]
            model = models.get(v, v)
            mb = float(np.mean([b for b, _ in served])) if served else inputs.mean_batch.get(model, 1.0) or 1.0
            prof_mean = inputs.profile(model, w.instance_type, mb, "mean")
            p99_ms = profiled_ms = 0.0
            if len(served) >= MIN_P99_SAMPLES:
                ref = inputs.profile(model, w.instance_type, mb, "p99")
                at: dict[int, float] = {}
                ratios = []
                for b, ms in served:
                    if b not in at:
                        at[b] = inputs.profile(model, w.instance_type, float(b), "p99")
                    ratios.append(ms / at[b] if at[b] > 0 else 0.0)
                if ref > 0 and all(x > 0 for x in at.values()):
                    p99_ms, profiled_ms = float(np.percentile(ratios, 99)) * ref, ref
            out.append(VariantReport(
                variant=v, worker=w.worker, loaded=True,
                qps_served=len(served) / max(inputs.interval_s, 1e-9),
                peak_qps=1000.0 / max(prof_mean, 1e-6),
                p99_ms=p99_ms, profiled_ms=profiled_ms))
    return out


def scaling_problem(inputs: ModelInputs, params: ModelLoopParams) -> ScalingProblem:
    """The INFaaS §4.2.1 problem over the live workers: variables are (variant, instance type)."""
    types = sorted({w.instance_type for w in inputs.workers})
    hw_of = {w.instance_type: w.hardware for w in inputs.workers}
    svs: list[ScalingVariant] = []
    running: dict[str, int] = {}
    for v in inputs.variants:
        mb = max(inputs.mean_batch.get(v.model, 1.0), 1.0)
        for t in types:
            if v.hardware not in (ANY_HARDWARE, hw_of[t]):
                continue
            lat = inputs.profile(v.model, t, mb, "mean") * v.speed_factor
            if not (lat > 0 and math.isfinite(lat)):
                continue
            key = expand_name(v.name, t)
            svs.append(ScalingVariant(name=key, model=v.model, hardware=t, latency_ms=lat,
                                      saturation_qps=1000.0 / lat,
                                      cost_per_second=inputs.price_per_hour.get(t, 0.0) / 3600.0,
                                      load_latency_s=v.load_latency_s, resources={"slot": 1.0}))
            running[key] = sum(1 for w in inputs.workers if w.instance_type == t and v.name in w.loaded)
    capacity: dict[str, dict[str, float]] = {}
    for t in types:
        ws = [w for w in inputs.workers if w.instance_type == t]
        used = sum(running.get(expand_name(v.name, t), 0) for v in inputs.variants)
        capacity[t] = {"slot": float(max(len(ws), used))}
    models = {v.model for v in inputs.variants}
    load = {m: max(inputs.load_qps.get(m, 0.0), params.min_qps) for m in models}
    slo = {m: inputs.slo_ms.get(m, math.inf) for m in models}
    return ScalingProblem(variants=tuple(svs), load_qps=load, slo_ms=slo, running=running, capacity=capacity,
                          headroom=params.headroom, lam=params.lam)


def placements_for(plan: ScalingPlan, workers: Sequence[WorkerSnapshot], keep_one: bool = True) -> list[Placement]:
    """Per-worker Load/Unload for the plan's target counts: unload from the least-utilized
    holders first (their queries move least), load onto the workers with the fewest variants
    (free slots first, then least utilized); ties by worker id. With ``keep_one``, an unload that
    would leave a worker with no variant at all is dropped."""
    loaded = {w.worker: set(w.loaded) for w in workers}
    util = {w.worker: w.utilization for w in workers}
    by_type: dict[str, list[str]] = {}
    for w in workers:
        by_type.setdefault(w.instance_type, []).append(w.worker)
    out: list[Placement] = []
    loads: list[tuple[str, str, int]] = []
    for key, target in sorted(plan.counts.items()):
        v, t = split_name(key)
        holders = sorted((x for x in by_type.get(t, []) if v in loaded[x]), key=lambda x: (util[x], x))
        if len(holders) > target:
            for x in holders[: len(holders) - target]:
                loaded[x].discard(v)
                out.append(Placement("unload", v, x))
        elif len(holders) < target:
            loads.append((v, t, target - len(holders)))
    for v, t, k in loads:
        free = sorted((x for x in by_type.get(t, []) if v not in loaded[x]),
                      key=lambda x: (len(loaded[x]), util[x], x))
        for x in free[:k]:
            loaded[x].add(v)
            out.append(Placement("load", v, x))
    if keep_one:
        # a rented worker is never left without a variant: the fleet planner owns the number of
        # workers, so emptying one saves nothing; its replica stays (spare capacity) unless
        # another variant replaces it (upgrade/downgrade)
        out = [p for p in out if p.action == "load" or loaded[p.worker]]
    return out


def keep_running_unless_better(problem: ScalingProblem, plan: ScalingPlan) -> ScalingPlan:
    """Hold the running variant instances when they already meet the load and the SLO (with the
    headroom) and the plan costs no less: a swap between equally priced variants only costs load
    time and capacity while the new one loads (INFaaS §4.2.2 scales only on a headroom deficit or
    a real saving)."""
    running = {v.name: problem.running.get(v.name, 0) for v in problem.variants}
    if running == dict(plan.counts):
        return plan
    if violations(problem, running):
        return plan
    current = plan_from_counts(problem, running, plan.solver, plan.solve_ms)
    if current.cost_per_second <= plan.cost_per_second + 1e-12:
        return current
    return plan


def prefer_loaded_equivalents(problem: ScalingProblem, plan: ScalingPlan) -> ScalingPlan:
    """Where the plan loads variant B on a type while unloading variant A of the same model there,
    and A is as fast and as cheap as B and meets the SLO, keep A instead: a swap between
    equivalent variants only costs a load (the greedy's from-scratch downgrade and the ILP pick any
    of equally good variants)."""
    counts = dict(plan.counts)
    run = problem.running
    vs = sorted(problem.variants, key=lambda v: v.name)
    changed = False
    for b in vs:
        for a in vs:
            extra_b = counts.get(b.name, 0) - run.get(b.name, 0)
            gone_a = run.get(a.name, 0) - counts.get(a.name, 0)
            if (extra_b <= 0 or gone_a <= 0 or a is b or a.model != b.model or a.hardware != b.hardware
                    or a.latency_ms > b.latency_ms + 1e-9 or a.cost_per_second > b.cost_per_second + 1e-15
                    or a.resources != b.resources or not problem.meets_slo(a)):
                continue
            k = min(extra_b, gone_a)
            counts[b.name] -= k
            counts[a.name] = counts.get(a.name, 0) + k
            changed = True
    if not changed:
        return plan
    return plan_from_counts(problem, counts, plan.solver, plan.solve_ms)


def shortfall(unmet_qps: Mapping[str, float], load_qps: Mapping[str, float], headroom: float) -> dict[str, float]:
    """The capacity missing below each model's load itself: what ``unmet_qps`` (the autoscaler asks
    for load × (1 + headroom)) leaves once the headroom is taken off. The fleet planner sizes the
    pool for demand × (1 + headroom) with a simulation of the dispatcher; a model loop that cannot
    place its own headroom on that pool is no sign that the pool is short, only that its estimate
    (each worker's saturation at the mean batch) is cruder. The replay (rm2, a steady 106 q/s on
    g4dn.xlarge + 11 r5n.large, 119.8 q/s by that estimate): the 10 s rate passed 108.9 q/s often
    enough that the hint bought two more r5n.large and gave them back every five minutes.

    ``load_qps`` is the measured load, before the autoscaler's floor (``min_qps``, one instance of
    every model): an instance that only the floor asks for is never missing capacity. Without that
    cap a family's idle members (issue #25: the replay of INFaaS on an application, each member a
    model at 0 q/s) each asked the fleet for 0.0095 q/s and raised the hint to 1.5."""
    out = {}
    for m, u in unmet_qps.items():
        load = load_qps.get(m, 0.0)
        short = min(u, load * (1.0 + headroom)) - load * headroom
        if short > QPS_TOL:
            out[m] = short
    return out


def decide(inputs: ModelInputs, state: ModelLoopState = ModelLoopState(),
           params: ModelLoopParams = ModelLoopParams()) -> tuple[ModelDecision, ModelLoopState]:
    """One model-loop round (pure)."""
    models = {v.name: v.model for v in inputs.variants}
    reports = reports_for(inputs, models)
    live = {(v, w.worker) for w in inputs.workers for v in w.loaded}
    states = {k: s for k, s in apply_reports(state.states, reports, params.state).items() if k in live}
    plan: ScalingPlan | None = None
    greedy = state.greedy
    placements: list[Placement] = []
    unmet: dict[str, float] = {}
    short: dict[str, float] = {}
    if inputs.workers and inputs.variants:
        problem = scaling_problem(inputs, params)
        if problem.variants:
            if params.solver == "ilp":
                plan = solve_ilp(problem)
            else:
                plan, greedy = greedy_scale(problem, inputs.now, state.greedy)
            plan = keep_running_unless_better(problem, prefer_loaded_equivalents(problem, plan))
            placements = placements_for(plan, inputs.workers)
            unmet = dict(plan.unmet_qps)
            short = shortfall(unmet, inputs.load_qps, problem.headroom)
    wstatus = [WorkerStatus(w.worker, w.hardware, w.utilization,
                            tuple(states.get((v, w.worker), VariantState.ACTIVE) for v in w.loaded))
               for w in inputs.workers]
    vm, vm_state = decide_vm(wstatus, inputs.now, state.vm, params.vm)
    decision = ModelDecision(tuple(placements), plan, tuple(vm), states, tuple(reports), unmet, short)
    return decision, ModelLoopState(states=states, greedy=greedy, vm=vm_state)
