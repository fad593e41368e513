"""The model loop's accuracy round (Proteus §3-§4 in the daemon, issue #13 "Live"): when to plan
again, and the placement and routing of every accuracy-scaled application over the live workers
(pure: the adapter is :class:`daemon.loops.model_loop.ModelLoop`; the replay of the same decision is
:mod:`sim.accuracy_sim`).

An application is accuracy-scaled when it has variants of more than one accuracy (a family
registered through the model-less API, :mod:`variants.families.registration`); its variants are
the planner's candidates, its ``min_accuracy`` their floor, its measured arrival rate the demand.

Each round, per application, :func:`variants.accuracy.trigger.replan` says whether to plan again
(a burst at once; else every ``replan_s`` when the demand moved). A change in the live workers (one
joined, left or was parked) plans again at once for the demand last planned. A plan is one
:func:`variants.accuracy.allocation.allocate` over every application together (Proteus plans all
query types jointly); the demand of an application whose trigger did not fire is the one last
planned for it.

**Live capacity** (ours). Proteus sizes a worker by its largest batch within SLO/2 (a query waits at
most one batch); the live dispatcher sends one query per worker call, so queries wait in a queue
instead, and a worker loaded near 1000/latency q/s (what β = 1.05 allows) queues far past its SLO: a
first live run planned two workers at 97 % of that for a 40 q/s spike and missed 9 % of it. Here a
worker's capacity is the largest rate at which its waiting time's 99th percentile plus the service
stays within the SLO (:func:`max_utilization`), and a variant goes on a type where that rate is
above zero; the planner receives the service time stretched by 1 / that utilization and an SLO
that admits every such variant (:func:`planner_profiles`). The latency comes in at the
application's mean batch, given as batch 1.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Callable, Mapping, Sequence

from variants.accuracy.allocation import BETA, Allocation, allocate
from variants.accuracy.planner import DEFAULT_TIME_LIMIT_S, AccuracyPlan, VariantProfile
from variants.accuracy.trigger import TriggerParams, TriggerState, initial_state, replan


@dataclass(frozen=True)
class AccuracyRoundParams:
    trigger: TriggerParams = TriggerParams()
    beta: float = BETA
    time_limit_s: float = DEFAULT_TIME_LIMIT_S   # the planner's budget (1 s): the round runs on the model loop's tick
    min_accuracy: tuple[tuple[str, float], ...] = ()   # (application, floor)
    mode: str = "plan"                 # "slackfit": no plan, every variant resident (daemon.loops.accuracy_loop)


@dataclass(frozen=True)
class AccuracyInputs:
    now: float
    workers: Mapping[str, str]                  # live worker id -> instance type (not parked, not draining)
    hosted: Mapping[str, str | None]            # worker -> the accuracy-scaled variant it hosts (None: none)
    variants: Sequence[VariantProfile]          # every accuracy-scaled variant, ``model`` = its application,
                                                # its service ms per type at batch 1 (plan_for reads them)
    slo_ms: Mapping[str, float]                 # application -> SLO (ms); its keys: the applications
    rate: Callable[[str, float], float]         # (application, window s) -> arrivals per second


@dataclass(frozen=True)
class AccuracyState:
    triggers: Mapping[str, TriggerState] = field(default_factory=dict)
    workers: tuple[tuple[str, str], ...] = ()   # the live workers the last plan was made for
    last: Allocation | None = None


def max_utilization(service_ms: float, slo_ms: float, quantile: float = 0.99, servers: int = 1) -> float:
    """The largest utilization rho at which a worker serving one query at a time (Poisson arrivals,
    a fixed service time: M/D/1) answers ``quantile`` of its queries within ``slo_ms``. Waiting times
    by Kingman's heavy-traffic approximation: P(wait > t) = rho exp(-2 (1 - rho) t / service), so
    the condition is rho exp(-2 (1 - rho) (slo - service) / service) <= 1 - quantile, increasing in
    rho; solved by bisection. 0 when the service alone misses the SLO. ``servers`` c > 1: c workers
    taking one queue (M/D/c; the dispatcher's matching serves a variant's queries on any idle worker
    hosting it): the same approximation with the waiting time's decay rate c times larger, and the
    probability of waiting bounded by rho (Erlang C <= rho)."""
    if service_ms <= 0 or slo_ms <= service_ms:
        return 0.0
    x = 2.0 * max(int(servers), 1) * (slo_ms - service_ms) / service_ms
    tail = 1.0 - quantile

    def ok(rho: float) -> bool:
        return rho * math.exp(-x * (1.0 - rho)) <= tail

    if ok(1.0 - 1e-9):
        return 1.0 - 1e-9
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def planner_profiles(variants: Sequence[VariantProfile], slo_ms: Mapping[str, float]
                     ) -> tuple[list[VariantProfile], dict[str, float]]:
    """The live capacity rule in the planner's terms: each (variant, type)'s service time at batch 1
    divided by :func:`max_utilization` (the type left out where that is 0), and per application an
    SLO twice the largest such time, so that Proteus's "latency within SLO/2" admits exactly the
    types where the rate is above zero and the capacity is rho x 1000 / service."""
    out: list[VariantProfile] = []
    slo: dict[str, float] = {}
    for v in variants:
        lat = {}
        for t, by_batch in v.latency_ms.items():
            s = by_batch.get(1)
            rho = max_utilization(s, slo_ms[v.model]) if s is not None else 0.0
            if rho > 0:
                lat[t] = {1: s / rho}
                slo[v.model] = max(slo.get(v.model, 0.0), 2.0 * lat[t][1])
        out.append(VariantProfile(v.model, v.variant, v.accuracy, lat))
    return out, {a: slo.get(a, float(slo_ms[a])) for a in slo_ms}


def due(inp: AccuracyInputs, state: AccuracyState, params: AccuracyRoundParams = AccuracyRoundParams()
        ) -> tuple[dict[str, float] | None, AccuracyState]:
    """The trigger half of a round (cheap; reads the rates, not the profiles): (per application the
    demand to plan for now, or None to keep the plan; the new state, ``last`` unchanged)."""
    apps = sorted(inp.slo_ms)
    live = tuple(sorted(inp.workers.items()))
    if not apps or not live:
        return None, replace(state, workers=live)
    triggers = dict(state.triggers)
    demand: dict[str, float] = {}
    fired = live != state.workers
    for app in apps:
        t = triggers.get(app)
        if t is None:
            # the first look: the window may be younger than the demand window, and a young window
            # reads low (a handful of queries counts over the whole window); planned for a quarter of
            # the rate, the next noisy second read as a burst (the replay's start, issue #25)
            d = max(inp.rate(app, params.trigger.demand_window_s), inp.rate(app, params.trigger.burst_window_s))
            triggers[app] = initial_state(d, params.trigger, inp.now)
            demand[app], fired = d, True
            continue
        d_new, triggers[app] = replan(t, inp.now, lambda w, a=app: inp.rate(a, w), params.trigger)
        fired = fired or d_new is not None
        demand[app] = d_new if d_new is not None else triggers[app].planned
    return (demand if fired else None), AccuracyState(triggers, live, state.last)


def pooled_full_accuracy(inp: AccuracyInputs, demand: Mapping[str, float], beta: float = BETA) -> Allocation | None:
    """Every live worker on the most accurate variant, when the workers of each type, taking one
    queue, carry β x the demand that way but sized alone they do not (issue #25); None otherwise:
    sized alone they carry it (the MILP then places it itself, with its fewest swaps), or not even
    pooled, or several applications share the workers (the MILP splits them).

    The live capacity rule sizes each worker alone (one queue per worker: :func:`max_utilization`
    with c = 1), which is right for a plan that splits a type's workers over variants, but when
    every worker hosts the same variant the dispatcher's matching serves its queries from one queue
    on any of them (M/D/c). Sized alone, the fleet's own pool for the demand at full accuracy (the
    Kairos planner, one shared queue) read as short, and the round served a steady load below full
    accuracy: 26 of 30 minutes in the first replay of both loops, at 6 q/s on the 2 r5n.large the
    fleet planned (resnet-152, 188 ms, SLO 1 s: 2.9 q/s a worker alone, 4.0 in a pair)."""
    if len(demand) != 1:
        return None
    (app, d), = demand.items()
    tops = [v for v in inp.variants if v.model == app]
    if not tops or not inp.workers:
        return None
    top = max(tops, key=lambda v: (v.accuracy, v.variant))
    by_type: dict[str, list[str]] = {}
    for w, t in sorted(inp.workers.items()):
        by_type.setdefault(t, []).append(w)
    cap: dict[str, float] = {}
    alone = 0.0
    for t, ws in by_type.items():
        s = top.latency_ms.get(t, {}).get(1)
        rho = max_utilization(s, inp.slo_ms[app], servers=len(ws)) if s is not None else 0.0
        if rho <= 0:
            return None          # a type that cannot host it within the SLO: the planner decides
        cap.update({w: rho * 1000.0 / s for w in ws})   # type: ignore[operator]
        alone += len(ws) * max_utilization(s, inp.slo_ms[app]) * 1000.0 / s   # type: ignore[operator]
    total = sum(cap.values())
    if total < beta * d or alone >= beta * d:
        return None
    placement: dict[str, str | None] = {w: top.variant for w in inp.workers}
    routing = {app: {w: c / total for w, c in cap.items()}}
    plan = AccuracyPlan(dict(placement), dict(inp.workers), routing, {app: beta * d}, {app: beta * d},
                        {app: top.accuracy}, top.accuracy, True,
                        sum(1 for w in inp.workers if inp.hosted.get(w) != top.variant), 0.0, "pooled-full-accuracy")
    return Allocation(plan, placement, routing, {app: d})


def plan_for(inp: AccuracyInputs, demand: Mapping[str, float], params: AccuracyRoundParams = AccuracyRoundParams()
             ) -> Allocation:
    """The planning half (the MILP; up to ``params.time_limit_s``): one allocation of every
    application's ``demand`` over the live workers, by the live capacity rule; full accuracy
    without a solve when only the pooled workers carry the demand at it
    (:func:`pooled_full_accuracy`: sized alone, the MILP would trade accuracy it need not)."""
    full = pooled_full_accuracy(inp, demand, params.beta)
    if full is not None:
        return full
    apps = sorted(demand)
    profiles, slo = planner_profiles(inp.variants, {a: inp.slo_ms[a] for a in apps})
    return allocate(inp.workers, profiles, demand, slo, current=inp.hosted, beta=params.beta,
                    min_accuracy={a: dict(params.min_accuracy).get(a, 0.0) for a in apps},
                    time_limit_s=params.time_limit_s)


def accuracy_round(inp: AccuracyInputs, state: AccuracyState, params: AccuracyRoundParams = AccuracyRoundParams()
                   ) -> tuple[Allocation | None, AccuracyState]:
    """One round: :func:`due`, then :func:`plan_for` when it says so (a new allocation, or None to
    keep the current one; the new state)."""
    demand, st = due(inp, state, params)
    if demand is None:
        return None, st
    alloc = plan_for(inp, demand, params)
    return alloc, replace(st, last=alloc)


def swaps(hosted: Mapping[str, str | None], placement: Mapping[str, str | None]) -> list[tuple[str, str | None, str | None]]:
    """(worker, variant to unload or None, variant to load or None) for each worker whose accuracy-
    scaled variant changes, by worker id."""
    return [(w, hosted.get(w), new) for w, new in sorted(placement.items()) if hosted.get(w) != new]


__all__ = ["AccuracyInputs", "AccuracyRoundParams", "AccuracyState", "accuracy_round", "due", "max_utilization",
           "plan_for", "planner_profiles", "pooled_full_accuracy", "swaps"]
