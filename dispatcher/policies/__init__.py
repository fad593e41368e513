"""Query-distribution policies behind the :class:`dispatcher.policy.Policy` interface.

``kairos`` (Kairos §5.1 matching, as the paper states it), ``kairos-strict`` (ours: the same
matching, never dispatching a pair that misses Eq. 5; the default) and the baselines of Kairos §7: ``fcfs`` (Ribbon), ``drs``
(DeepRecSys threshold), ``clockwork``. Also :func:`infeasible`, the queries no worker can serve
within their SLO (the dispatcher's ``drop`` mode).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from dispatcher.policies import _matrix as mx
from dispatcher.policies.clockwork import ClockworkPolicy
from dispatcher.policies.drs import DrsPolicy, sweep_drs_threshold
from dispatcher.policies.fcfs import FcfsPolicy
from dispatcher.policies.kairos import KairosPolicy
from dispatcher.policies.kairos_strict import KairosStrictPolicy
from dispatcher.policy import DISPATCH_VIEW_FACTOR, DISPATCH_XI, LatencyPredictor, Policy, QueryView, WorkerView

POLICY_NAMES: tuple[str, ...] = ("kairos", "kairos-strict", "fcfs", "drs", "clockwork")

__all__ = ["POLICY_NAMES", "make_policy", "infeasible", "sweep_drs_threshold", "KairosPolicy",
           "KairosStrictPolicy",
           "FcfsPolicy", "DrsPolicy", "ClockworkPolicy"]


def make_policy(name: str, predictor: LatencyPredictor, base_type: str, *, xi: float = DISPATCH_XI,
                drs_threshold: int | None = None, max_queue_factor: int = DISPATCH_VIEW_FACTOR) -> Policy:
    """A fresh policy by name (one of :data:`POLICY_NAMES`); ValueError for another name."""
    if name == "kairos":
        return KairosPolicy(predictor, base_type, xi=xi, max_queue_factor=max_queue_factor)
    if name == "kairos-strict":
        return KairosStrictPolicy(predictor, base_type, xi=xi, max_queue_factor=max_queue_factor)
    if name == "fcfs":
        return FcfsPolicy(predictor, base_type)
    if name == "drs":
        return DrsPolicy(predictor, base_type, threshold=drs_threshold, xi=xi)
    if name == "clockwork":
        return ClockworkPolicy(predictor, base_type, xi=xi)
    raise ValueError(f"unknown policy {name!r} (known: {', '.join(POLICY_NAMES)})")


def infeasible(queue: Sequence[QueryView], workers: Sequence[WorkerView], predictor: LatencyPredictor,
               now: float, xi: float = DISPATCH_XI) -> list[str]:
    """Ids of queries that miss ξ·SLO on every worker even if that worker started them now:
    ``W_i + min_j S_ij > ξ·T_qos_i`` (Kairos §5.1 Eq. 5 without the busy term). With no workers
    nothing is judged infeasible (capacity may yet arrive)."""
    if not queue or not workers:
        return []
    types = sorted({w.instance_type for w in workers})
    best = mx.service_by_type(queue, types, predictor).min(axis=1)
    wait = (now - mx.arrivals_of(queue)) * 1000.0
    bad = wait + best > xi * mx.qos_of(queue)
    return [queue[i].query_id for i in np.nonzero(bad)[0].tolist()]
