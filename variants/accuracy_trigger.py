"""When the accuracy planner runs again, and for what demand (pure; Proteus §3: the Resource Manager
runs periodically, and at once when the load balancers' monitor sees a burst).

- **Burst:** the arrival rate over a short window (``burst_window_s``) is over ``burst_factor`` x the
  demand planned for, and the rate over the demand window confirms it (over ``1 + replan_delta``
  x the last steady plan's demand, so noise in a short window at steady load is not a burst): plan
  at once for the short window's rate, and look again after the demand window (a burst's plan rests
  on a few seconds of arrivals).
- **Timer:** every ``replan_s``, plan for the mean rate since the last plan, if it moved by
  ``replan_delta`` (a plan for the same demand only shuffles variants, and a swap stops a worker).

The caller measures the rates (:class:`Rates`) and keeps :class:`TriggerState` between calls.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable


@dataclass(frozen=True)
class TriggerParams:
    replan_s: float = 30.0
    demand_window_s: float = 5.0
    burst_window_s: float = 1.0
    burst_factor: float = 1.2
    replan_delta: float = 0.10


@dataclass(frozen=True)
class TriggerState:
    planned: float              # the demand the current plan was made for (q/s)
    steady: float               # the demand of the last plan that was not a burst's
    planned_at: float           # when the last look was taken (s)
    next_plan: float            # when the timer looks next (s)


def initial_state(demand: float, params: TriggerParams, now: float = 0.0) -> TriggerState:
    """The state after the first plan, made at ``now`` for ``demand``."""
    return TriggerState(demand, demand, now, now + params.replan_s)


def replan(state: TriggerState, now: float, rate: Callable[[float], float], params: TriggerParams
           ) -> tuple[float | None, TriggerState]:
    """(the demand to plan for now, or None to keep the plan; the new state). ``rate(w)``: the
    arrival rate over the last ``w`` seconds."""
    short = rate(params.burst_window_s)
    if short > params.burst_factor * state.planned and rate(params.demand_window_s) > (1 + params.replan_delta) * state.steady:
        return short, replace(state, planned=short, planned_at=now, next_plan=now + params.demand_window_s)
    if now < state.next_plan:
        return None, state
    mean = rate(min(params.replan_s, now - state.planned_at))
    demand = mean if abs(mean - state.planned) > params.replan_delta * max(state.planned, 1e-9) else None
    planned = demand if demand is not None else state.planned
    return demand, TriggerState(planned, planned, now, now + params.replan_s)


__all__ = ["TriggerParams", "TriggerState", "initial_state", "replan"]
