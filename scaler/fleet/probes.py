"""Probe instances: one instance of each type a model has no profile on, launched to measure it
there (INFaaS §3.2: every variant is profiled on every hardware type at registration).

Probes are managed instances like any other: the actuator launches and terminates them with
write-ahead intents and the cluster tags, and the budget invariant (DESIGN invariant 1) counts
them. This module decides, purely:

- :func:`probe_rounds`: which probe types go up together so that the pool held plus the round's
  probes stays within the budget (first-fit, dearest first); types no round can afford;
- :func:`probe_target`: the pool to ask the actuator for during a round;
- :func:`probe_cost`: what probes cost, with EC2's per-second billing and its 60 s minimum.
"""
from __future__ import annotations

from typing import Mapping, Sequence
from config.budget import BUDGET_EPS

#: EC2 bills Linux on-demand instances per second, with a minimum of 60 seconds per launch
BILLING_MINIMUM_S = 60.0
#: plan ids of probe rounds start with this (intents of probes are found by it after a crash)
PROBE_PLAN_PREFIX = "probe-"


def probe_rounds(types: Sequence[str], prices: Mapping[str, float], room: float) -> tuple[list[list[str]], list[str]]:
    """Group ``types`` into rounds whose summed price fits ``room`` ($/hr left under the budget
    beside the pool held). Returns the rounds (each in the order given) and the types that do not
    fit even alone."""
    unaffordable = [t for t in types if prices[t] > room + BUDGET_EPS]
    rounds: list[list[str]] = []
    spent: list[float] = []
    for t in sorted((t for t in types if t not in unaffordable), key=lambda t: (-prices[t], types.index(t))):
        for i, s in enumerate(spent):
            if s + prices[t] <= room + BUDGET_EPS:
                rounds[i].append(t)
                spent[i] += prices[t]
                break
        else:
            rounds.append([t])
            spent.append(prices[t])
    order = {t: i for i, t in enumerate(types)}
    return [sorted(r, key=order.__getitem__) for r in rounds], unaffordable


def probe_target(held: Mapping[str, int], probe_types: Sequence[str]) -> dict[str, int]:
    """The pool held plus one instance of each probe type."""
    target = {t: n for t, n in held.items() if n > 0}
    for t in probe_types:
        target[t] = target.get(t, 0) + 1
    return target


def probe_cost(price_per_hour: float, seconds: float) -> float:
    """Dollars an instance at ``price_per_hour`` costs for ``seconds`` (billed per second, 60 s minimum)."""
    return price_per_hour * max(float(seconds), BILLING_MINIMUM_S) / 3600.0
