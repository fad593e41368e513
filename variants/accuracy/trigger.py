"""When the accuracy planner runs again, and for what demand (pure; Proteus §3: the Resource Manager
runs periodically, and at once when the load balancers' monitor sees a burst).

- **Burst:** the arrival rate over a short window (``burst_window_s``) is over ``burst_factor`` x the
  demand planned for, and the rate over the demand window confirms it (over ``1 + replan_delta``
  x the last steady plan's demand, so noise in a short window at steady load is not a burst): plan
  at once for the short window's rate, and look again after the demand window (a burst's plan rests
  on a few seconds of arrivals).
- **Timer:** every ``replan_s``, plan for the mean rate since the last plan, if it moved by
  ``replan_delta`` (a plan for the same demand only shuffles variants, and a swap stops a worker).
- **Noise** (ours, issue #25; ``noise_z`` > 0, the daemon's default 4 through
  ``model_scaling.accuracy_scaling.burst_noise_z``): a burst must also lie more than ``noise_z``
  standard deviations of a Poisson count over the short window above the demand planned
  (:func:`beyond_noise`; a 2x step at 20 q/s or a 4x step at 6 q/s is seen as soon as before). At
  the hundreds of q/s Proteus ran, 20 % is already beyond noise; at a few q/s one second holds a
  few queries, and a Poisson second read as a burst: the first replay of both loops swapped variants
  179 times in 30 minutes of 6 q/s with bursts to 24, 17 minutes below full accuracy; 3 standard
  deviations left a false burst every ~5 minutes (a dip and a swap back each); with 4 (and the
  first look's rate, :func:`variants.accuracy.plan_round.due`): 27 swaps, 4 minutes below full, at the
  same attainment (99.96 %). The fixed-pool reproduction
  (:mod:`sim.accuracy_sim`) keeps Proteus's test alone: there, at 22-89 q/s, the guard cost
  attainment (99.78 → 99.25 % at 3: the noisy seconds it ignores had been re-planning the high
  phase up).

The caller measures the rates (:class:`Rates`) and keeps :class:`TriggerState` between calls.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable


@dataclass(frozen=True)
class TriggerParams:
    replan_s: float = 30.0
    demand_window_s: float = 5.0
    burst_window_s: float = 1.0
    burst_factor: float = 1.2
    replan_delta: float = 0.10
    noise_z: float = 0.0        # 0: Proteus's test alone; the daemon's config sets 4 (model_params_for)


@dataclass(frozen=True)
class TriggerState:
    planned: float              # the demand the current plan was made for (q/s)
    steady: float               # the demand of the last plan that was not a burst's
    planned_at: float           # when the last look was taken (s)
    next_plan: float            # when the timer looks next (s)


def beyond_noise(rate: float, planned: float, window_s: float, z: float) -> bool:
    """``rate`` over ``window_s`` is more than ``z`` Poisson standard deviations of the count
    expected at ``planned`` away from it (the standard deviation of at least one query)."""
    return abs(rate - planned) * window_s > z * math.sqrt(max(planned * window_s, 1.0))


def initial_state(demand: float, params: TriggerParams, now: float = 0.0) -> TriggerState:
    """The state after the first plan, made at ``now`` for ``demand``."""
    return TriggerState(demand, demand, now, now + params.replan_s)


def replan(state: TriggerState, now: float, rate: Callable[[float], float], params: TriggerParams
           ) -> tuple[float | None, TriggerState]:
    """(the demand to plan for now, or None to keep the plan; the new state). ``rate(w)``: the
    arrival rate over the last ``w`` seconds."""
    short = rate(params.burst_window_s)
    if short > params.burst_factor * state.planned and \
            beyond_noise(short, state.planned, params.burst_window_s, params.noise_z) and \
            rate(params.demand_window_s) > (1 + params.replan_delta) * state.steady:
        return short, replace(state, planned=short, planned_at=now, next_plan=now + params.demand_window_s)
    if now < state.next_plan:
        return None, state
    mean = rate(min(params.replan_s, now - state.planned_at))
    demand = mean if abs(mean - state.planned) > params.replan_delta * max(state.planned, 1e-9) else None
    planned = demand if demand is not None else state.planned
    return demand, TriggerState(planned, planned, now, now + params.replan_s)


__all__ = ["TriggerParams", "TriggerState", "beyond_noise", "initial_state", "replan"]
