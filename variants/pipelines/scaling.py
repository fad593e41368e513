"""Loki's pipeline round in the model loop (issue #26): which task and variant each of a pipeline's
workers serves, and how each task's requests are routed over them. Pure: the workers the fleet
gave the pipeline's tasks, the variants' service times and the root demand come in; a
:class:`PipelineDecision` goes out. The replay runs it (:mod:`sim.replay.pipeline_round`).

**Who owns what.** The fleet plans each task's model for its measured demand at its most accurate
variant (hardware scaling, within the budget, as for any model). The round pools the workers the
fleet gave the pipeline's tasks and runs :func:`variants.pipelines.planner.plan_pipeline` over them
(Loki §4.1): step 1 (every task at its most accurate variant, the fewest workers) when that fits,
else step 2 (accuracy scaling over the augmented graph, the most end-to-end accuracy). Its answer
may move a worker from one task to another (Loki plans the workers of all the tasks together; a
per-task accuracy round cannot), and sets every worker's variant.

**Capacity** (the live rule of :mod:`variants.accuracy.plan_round`, not Loki's "a batch within SLO/2 at
full throughput"). The replay and the dispatcher serve one query per worker call, so a worker loaded
near 1000/latency q/s queues far past its SLO: at 30 images/s on the example's six workers Loki's
rule planned full accuracy on five while the fleet's own pool at full accuracy missed 10 % end to
end (the README's "capacity rule" note). Here a (variant, type) serves rho x 1000 / s q/s, s its
service time at the task's mean batch and rho :func:`variants.accuracy.plan_round.max_utilization`
against the task's model's QoS (its part of the end-to-end SLO) with the type's workers of that
task taking one queue; the planner gets s / rho as the kind's latency and an end-to-end SLO that
admits every kind with rho > 0 (the per-task QoS already keeps each task's share of the SLO).
The demand is planned with the accuracy planner's headroom ``beta``.

**Moves** (ours). A move between tasks loads a model, so the round first plans with each task held
to the workers it has (``plan_pipeline(split=...)``); only when that does not fit the top variants
does it plan with the workers free, and it takes that plan only when it serves 1 % more of the
demand, or 0.5 points more end-to-end accuracy, or fits the top variants where keeping them does
not (:data:`MOVE_GAIN_SERVED`, :data:`MOVE_GAIN_ACCURACY`: without this the round moved 13 workers in
the example's 30-minute burst at twice hardware's capacity, 5 with it, at 99.78 % within the SLO
instead of 99.72 %). The plan has the 1 s budget, half of it for the plan that keeps the workers.

**Assignment** (ours): the plan counts workers per (task, variant, type); they are mapped onto the
live workers keeping each worker's task, then its variant, where the plan allows (a variant swap
loads a variant). Workers the plan leaves without work stay on
their task at its most accurate variant and are routed like the others (spare capacity shortens the
queues).

**Routing** (Loki §5.1): MostAccurateFirst (:func:`variants.pipelines.routing.most_accurate_first`)
over the placed variants at the planned demand gives each (task, variant) its rate; a task's
requests go to its workers in proportion to that rate split over each variant's workers by their
capacity.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

from config.sections.pipeline_graph import Pipeline
from variants.accuracy.allocation import BETA
from variants.accuracy.planner import VariantProfile
from variants.accuracy.plan_round import AccuracyRoundParams, max_utilization
from variants.accuracy.trigger import TriggerParams, TriggerState, initial_state, replan
from variants.infaas.model_decision import accuracy_params
from variants.pipelines.planner import PipelinePlan, plan_pipeline, top_variants
from variants.pipelines.routing import VariantSlot, most_accurate_first

if TYPE_CHECKING:
    from config.schema import Config

#: the planner's budget per round: the model loop's tick (BENCHMARKS "pipeline-planner": step 2 on
#: the example's six workers takes tens of milliseconds)
ROUND_TIME_LIMIT_S = 1.0


@dataclass(frozen=True)
class PipelineWorker:
    """A live worker of one of the pipeline's tasks: its instance type, task and hosted variant."""

    wid: str
    itype: str
    task: str
    variant: str


@dataclass(frozen=True)
class PipelineDecision:
    """``task_of`` / ``variant_of``: each worker's task and variant; ``routing``: task -> worker ->
    fraction of the task's requests; ``capacity``: worker -> q/s (the planning rule's)."""

    plan: PipelinePlan
    demand_qps: float
    task_of: dict[str, str]
    variant_of: dict[str, str]
    routing: dict[str, dict[str, float]]
    capacity: dict[str, float]

    def moves(self, workers: Sequence[PipelineWorker]) -> int:
        """How many workers change task."""
        return sum(1 for w in workers if self.task_of.get(w.wid, w.task) != w.task)

    def swaps(self, workers: Sequence[PipelineWorker]) -> int:
        """How many workers change variant on their task (a move loads its new task's anyway)."""
        return sum(1 for w in workers if self.task_of.get(w.wid, w.task) == w.task
                   and self.variant_of.get(w.wid, w.variant) != w.variant)


@dataclass(frozen=True)
class RoundState:
    """Between rounds: the root demand's trigger and the workers the last round planned."""

    trigger: TriggerState | None = None
    members: tuple[tuple[str, str], ...] = ()


def due(state: RoundState, members: tuple[tuple[str, str], ...], now: float, rate: Callable[[float], float],
        params: TriggerParams) -> tuple[float | None, RoundState]:
    """(the root demand to plan for now, or None to keep the last decision; the new state). The
    accuracy round's trigger (:func:`variants.accuracy.trigger.replan`: the first look, a burst at
    once, the timer when the demand moved) on the pipeline's root rate (``rate(window_s)``), and at
    once when ``members`` (the pipeline's workers, (id, type)) changed."""
    if state.trigger is None:
        demand = max(rate(params.demand_window_s), rate(params.burst_window_s))
        return demand, RoundState(initial_state(demand, params, now), members)
    fired, trig = replan(state.trigger, now, rate, params)
    if fired is None and members == state.members:
        return None, RoundState(trig, members)
    return (fired if fired is not None else trig.planned), RoundState(trig, members)


def round_params(cfg: "Config") -> AccuracyRoundParams:
    """The round's trigger and headroom: ``model_scaling.accuracy_scaling``'s (``replan_s``,
    ``burst_noise_z``, ``beta``), whether or not accuracy scaling is on for the models."""
    return replace(accuracy_params(cfg), time_limit_s=ROUND_TIME_LIMIT_S)


def task_qos(cfg: "Config", pipe: Pipeline) -> dict[str, float]:
    """Each task's QoS: its model's ``qos_ms`` (its part of the end-to-end SLO), at most the SLO."""
    return {t: min(float(cfg.model(m).qos_ms), pipe.slo_ms) for t, m in pipe.models.items()}


#: the requests of a task before its measured fan-out replaces the configured factor (Loki §4.2:
#: measured at run time, the configured value the prior)
MEASURED_MIN_REQUESTS = 200


def with_measured(pipe: Pipeline, fanout: Mapping[tuple[str, str], tuple[int, int]],
                  min_requests: int = MEASURED_MIN_REQUESTS) -> Pipeline:
    """``pipe`` with each edge's factor the measured one (``fanout[(task, child)]`` = (requests of
    the task, requests made of the child)) once the task has had ``min_requests``; the configured
    factor until then."""
    edges = {}
    for task, es in pipe.edges.items():
        out = []
        for e in es:
            n, made = fanout.get((task, e.child), (0, 0))
            out.append(replace(e, factor=made / n) if n >= min_requests and made > 0 else e)
        edges[task] = tuple(out)
    return replace(pipe, edges=edges)


def _servers(pool: Mapping[str, int], itype: str, tasks: int) -> int:
    """The workers of ``itype`` one task's queue is taken to have when planning (its even share)."""
    return max(1, int(round(pool.get(itype, 0) / max(tasks, 1))))


def planning_variants(variants: Mapping[str, Sequence[VariantProfile]], pool: Mapping[str, int],
                      task_qos_ms: Mapping[str, float]) -> tuple[dict[str, list[VariantProfile]], dict[tuple[str, str, str], float]]:
    """(task -> its variants as the planner gets them: batch 1 at s / rho on each pool type where
    rho > 0; (task, variant, type) -> s, the service time). ``variants`` carry each (variant,
    type)'s service time at the task's mean batch as batch 1."""
    out: dict[str, list[VariantProfile]] = {}
    service: dict[tuple[str, str, str], float] = {}
    for task, vs in variants.items():
        rows = []
        for v in vs:
            lat: dict[str, dict[int, float]] = {}
            for t, by_batch in v.latency_ms.items():
                s = by_batch.get(1)
                if s is None or pool.get(t, 0) <= 0:
                    continue
                rho = max_utilization(s, task_qos_ms[task], servers=_servers(pool, t, len(variants)))
                if rho > 0:
                    lat[t] = {1: s / rho}
                    service[(task, v.variant, t)] = s
            if lat:
                rows.append(VariantProfile(v.model, v.variant, v.accuracy, lat))
        out[task] = rows
    return out, service


def _planner_pipeline(pipe: Pipeline, planning: Mapping[str, Sequence[VariantProfile]]) -> Pipeline:
    """``pipe`` with an SLO that admits every planning kind: twice the slowest path's sum of its
    tasks' slowest kinds (each task's QoS already holds its share of the real SLO)."""
    slowest = {t: max((lat for v in vs for by_b in v.latency_ms.values() for lat in by_b.values()), default=0.0)
               for t, vs in planning.items()}
    worst = max(sum(slowest[t] for t in pipe.path_to(leaf)) for leaf in pipe.leaves())
    return replace(pipe, slo_ms=2.0 * worst * (1.0 + 1e-9) + 1e-6)


def _assign(plan: PipelinePlan, workers: Sequence[PipelineWorker], tops: Mapping[str, str]
            ) -> tuple[dict[str, str], dict[str, str]]:
    """The plan's (task, variant, type) counts onto ``workers`` (see the module docstring)."""
    want: dict[tuple[str, str, str], int] = {}
    for (task, variant, itype, _), n in plan.workers.items():
        want[(task, variant, itype)] = want.get((task, variant, itype), 0) + n
    task_of: dict[str, str] = {}
    variant_of: dict[str, str] = {}
    free = sorted(workers, key=lambda w: w.wid)
    for keep_task, keep_variant in ((True, True), (True, False), (False, False)):
        rest = []
        for w in free:
            pick = next((k for k in sorted(want) if want[k] > 0 and k[2] == w.itype
                         and (not keep_task or k[0] == w.task) and (not keep_variant or k[1] == w.variant)), None)
            if pick is None:
                rest.append(w)
                continue
            want[pick] -= 1
            task_of[w.wid], variant_of[w.wid] = pick[0], pick[1]
        free = rest
    for w in free:                       # spare: its task, at its task's most accurate variant
        task_of[w.wid], variant_of[w.wid] = w.task, tops[w.task]
    return task_of, variant_of


def decide(pipe: Pipeline, variants: Mapping[str, Sequence[VariantProfile]], workers: Sequence[PipelineWorker],
           demand_qps: float, task_qos_ms: Mapping[str, float], beta: float = BETA,
           time_limit_s: float = 1.0, solver: str | None = None) -> PipelineDecision | None:
    """One round (see the module docstring); None when the pipeline has no worker, or a task no
    variant of which any worker's type can serve within its QoS."""
    if not workers:
        return None
    pool: dict[str, int] = {}
    for w in workers:
        pool[w.itype] = pool.get(w.itype, 0) + 1
    planning, service = planning_variants(variants, pool, task_qos_ms)
    if any(not vs for vs in planning.values()):
        return None
    planner_pipe, qps = _planner_pipeline(pipe, planning), beta * max(demand_qps, 0.0)
    split: dict[str, dict[str, int]] = {}
    for w in workers:
        split.setdefault(w.task, {})[w.itype] = split.setdefault(w.task, {}).get(w.itype, 0) + 1
    t0 = time.perf_counter()
    plan = plan_pipeline(planner_pipe, planning, pool, qps, time_limit_s=time_limit_s / 2, solver=solver, split=split)
    if plan.step != "hardware":          # the workers where they are do not carry it at the top variants
        left = max(time_limit_s - (time.perf_counter() - t0), 0.05)
        free = plan_pipeline(planner_pipe, planning, pool, qps, time_limit_s=left, solver=solver)
        if _better(free, plan):
            plan = free
    tops = top_variants(planning)
    task_of, variant_of = _assign(plan, workers, tops)
    acc = {(t, v.variant): v.accuracy for t, vs in planning.items() for v in vs}
    itype = {w.wid: w.itype for w in workers}
    capacity: dict[str, float] = {}
    for wid, task in task_of.items():
        v = variant_of[wid]
        lat = next((p.latency_ms.get(itype[wid], {}).get(1) for p in planning[task] if p.variant == v), None)
        capacity[wid] = 1000.0 / lat if lat else 0.0
    slots = []
    for task in pipe.tasks:
        by_v: dict[str, list[str]] = {}
        for wid, t in task_of.items():
            if t == task and capacity[wid] > 0:
                by_v.setdefault(variant_of[wid], []).append(wid)
        for v, ws in sorted(by_v.items()):
            s = max(service.get((task, v, itype[w]), 0.0) for w in ws)
            slots.append(VariantSlot(task, v, acc[(task, v)], sum(capacity[w] for w in ws), s))
    if any(not any(s.task == t for s in slots) for t in pipe.tasks):
        return None
    tables = most_accurate_first(pipe, slots, max(demand_qps, 0.0))
    routing: dict[str, dict[str, float]] = {}
    for task in pipe.tasks:
        rates = {v: q for (t, v), q in tables.incoming.items() if t == task and q > 0}
        out: dict[str, float] = {}
        if sum(rates.values()) <= 0:        # no demand yet: by capacity, most accurate variants first
            top = max((s for s in slots if s.task == task), key=lambda s: (s.accuracy, s.variant)).variant
            rates = {top: 1.0}
        for v, q in rates.items():
            ws = [w for w, t in task_of.items() if t == task and variant_of[w] == v and capacity[w] > 0]
            cap = sum(capacity[w] for w in ws)
            for w in ws:
                out[w] = q * capacity[w] / cap
        total = sum(out.values())
        routing[task] = {w: f / total for w, f in sorted(out.items())} if total > 0 else {}
    return PipelineDecision(plan, demand_qps, task_of, variant_of, routing, capacity)


def hardware_capacity(pipe: Pipeline, variants: Mapping[str, Sequence[VariantProfile]],
                      workers: Sequence[PipelineWorker], task_qos_ms: Mapping[str, float], beta: float = BETA) -> float:
    """The most root q/s :func:`decide` serves on ``workers`` with step 1 (every task at its most
    accurate variant): what hardware scaling alone serves on them, to 1e-6 relative (bisection)."""
    def fits(q: float) -> bool:
        d = decide(pipe, variants, workers, q, task_qos_ms, beta)
        return d is not None and d.plan.step == "hardware"

    lo, hi = 0.0, 1.0
    while fits(hi) and hi < 1e9:
        lo, hi = hi, 2.0 * hi
    while hi - lo > 1e-6 * hi:
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


#: what moving workers between tasks must gain over keeping them where they are: a share of the
#: demand served, or points of end-to-end accuracy (a move loads a model; a plan that only
#: reshuffles workers for a solver's tie costs loads and queueing for nothing)
MOVE_GAIN_SERVED = 0.01
MOVE_GAIN_ACCURACY = 0.005


def _better(free: PipelinePlan, keep: PipelinePlan) -> bool:
    """Whether the plan that may move workers gains enough over the one that keeps them."""
    if free.step == "hardware" and keep.step != "hardware":
        return True
    if free.served > keep.served + MOVE_GAIN_SERVED:
        return True
    return free.served >= keep.served - 1e-9 and (free.accuracy or 0.0) > (keep.accuracy or 0.0) + MOVE_GAIN_ACCURACY


def end_to_end_top(variants: Mapping[str, Sequence[VariantProfile]], pipe: Pipeline) -> float:
    """The end-to-end accuracy at every task's most accurate variant (leaves weighted alike)."""
    best = {t: max(v.accuracy for v in vs) for t, vs in variants.items()}
    return sum(math.prod(best[t] for t in pipe.path_to(leaf)) for leaf in pipe.leaves()) / len(pipe.leaves())


__all__ = ["MOVE_GAIN_ACCURACY", "MOVE_GAIN_SERVED", "ROUND_TIME_LIMIT_S", "PipelineDecision", "PipelineWorker", "RoundState", "decide", "due",
           "MEASURED_MIN_REQUESTS", "end_to_end_top", "hardware_capacity", "planning_variants", "round_params", "task_qos",
           "with_measured"]
