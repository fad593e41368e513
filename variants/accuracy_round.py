"""The model loop's accuracy round (Proteus §3-§4 in the daemon, issue #13 "Live"): when to plan
again, and the placement and routing of every accuracy-scaled application over the live workers
(pure: the adapter is :class:`daemon.model_loop.ModelLoop`; the replay of the same decision is
:mod:`sim.accuracy_sim`).

An application is accuracy-scaled when it has variants of more than one accuracy (a family
registered through the model-less API, :mod:`variants.families.registration`); its variants are
the planner's candidates, its ``min_accuracy`` their floor, its measured arrival rate the demand.

Each round, per application, :func:`variants.accuracy_trigger.replan` says whether to plan again
(a burst at once; else every ``replan_s`` when the demand moved). A change in the live workers (one
joined, left or was parked) plans again at once for the demand last planned. A plan is one
:func:`variants.accuracy_allocation.allocate` over every application together (Proteus plans all
query types jointly); the demand of an application whose trigger did not fire is the one last
planned for it.

**Live capacity.** The dispatcher sends one query per worker call (no batching across queries on
the live path), so a variant's latency on a type is given here at the application's mean batch as
batch 1: its capacity is one query at a time at that latency, placeable when it is within SLO/2
(:func:`variants.accuracy_planner.capacity`, Proteus's rule), as the INFaaS model loop counts it
(:mod:`variants.model_decision`).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Mapping, Sequence

from variants.accuracy_allocation import BETA, Allocation, allocate
from variants.accuracy_planner import VariantProfile
from variants.accuracy_trigger import TriggerParams, TriggerState, initial_state, replan


@dataclass(frozen=True)
class AccuracyRoundParams:
    trigger: TriggerParams = TriggerParams()
    beta: float = BETA
    time_limit_s: float = 2.0          # the solves' budget: the round runs on the model loop's tick
    min_accuracy: tuple[tuple[str, float], ...] = ()   # (application, floor)


@dataclass(frozen=True)
class AccuracyInputs:
    now: float
    workers: Mapping[str, str]                  # live worker id -> instance type (not parked, not draining)
    hosted: Mapping[str, str | None]            # worker -> the accuracy-scaled variant it hosts (None: none)
    variants: Sequence[VariantProfile]          # every accuracy-scaled variant, ``model`` = its application
    slo_ms: Mapping[str, float]                 # application -> SLO (ms)
    rate: Callable[[str, float], float]         # (application, window s) -> arrivals per second


@dataclass(frozen=True)
class AccuracyState:
    triggers: Mapping[str, TriggerState] = field(default_factory=dict)
    workers: tuple[tuple[str, str], ...] = ()   # the live workers the last plan was made for
    last: Allocation | None = None


def accuracy_round(inp: AccuracyInputs, state: AccuracyState, params: AccuracyRoundParams = AccuracyRoundParams()
                   ) -> tuple[Allocation | None, AccuracyState]:
    """(a new allocation, or None to keep the current one; the new state)."""
    apps = sorted({v.model for v in inp.variants})
    live = tuple(sorted(inp.workers.items()))
    if not apps or not live:
        return None, replace(state, workers=live)
    triggers = dict(state.triggers)
    demand: dict[str, float] = {}
    fired = live != state.workers
    for app in apps:
        t = triggers.get(app)
        if t is None:
            d = inp.rate(app, params.trigger.demand_window_s)
            triggers[app] = initial_state(d, params.trigger, inp.now)
            demand[app], fired = d, True
            continue
        d_new, triggers[app] = replan(t, inp.now, lambda w, a=app: inp.rate(a, w), params.trigger)
        fired = fired or d_new is not None
        demand[app] = d_new if d_new is not None else triggers[app].planned
    if not fired:
        return None, replace(state, triggers=triggers)
    alloc = allocate(inp.workers, inp.variants, demand, {a: inp.slo_ms[a] for a in apps},
                     current=inp.hosted, beta=params.beta,
                     min_accuracy={a: dict(params.min_accuracy).get(a, 0.0) for a in apps},
                     time_limit_s=params.time_limit_s)
    return alloc, AccuracyState(triggers, live, alloc)


def swaps(hosted: Mapping[str, str | None], placement: Mapping[str, str | None]) -> list[tuple[str, str | None, str | None]]:
    """(worker, variant to unload or None, variant to load or None) for each worker whose accuracy-
    scaled variant changes, by worker id."""
    return [(w, hosted.get(w), new) for w, new in sorted(placement.items()) if hosted.get(w) != new]


__all__ = ["AccuracyInputs", "AccuracyRoundParams", "AccuracyState", "accuracy_round", "swaps"]
