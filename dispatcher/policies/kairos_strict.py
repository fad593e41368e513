"""``kairos-strict``: Kairos §5.1 matching that never dispatches a pair its QoS constraint rejects.

**Ours, not the paper's.** Kairos §5.1 states the QoS constraint (Eq. 5, with the safeguard ξ) and
then folds it into the cost as a penalty (Eq. 8) so that the min-cost bipartite matching stays
feasible. With more queries than workers Eq. 7 makes every worker take a query, so the matching
*does* pair queries with workers where they miss ξ·T_qos, and :class:`KairosPolicy` dispatches them:
the worker then spends its time on a query that is late anyway, at the moment the pool is
saturated (what tight QoS targets, wnd and mtwnd 25 ms, dien 35 ms, run into first: large queries
stranded on auxiliary instances). Here the matching is the paper's (same L, C, penalty, solver,
2n-query view), and a matched pair is dispatched only when it meets Eq. 5; the query stays queued
for a worker that can still serve it in time, or reaches its deadline.

Liveness: a query that no worker type could serve within ξ·T_qos even if started now (it is late
whatever happens; the dispatcher drops these first with ``on_deadline: drop``) is still served
when every query in the view is such a query (``on_deadline: best_effort``), as Kairos would.

Measured (BENCHMARKS.md "kairos-repro"): allowable throughput +2-5 % over ``kairos`` on wnd, mtwnd
and dien at 2.5 $/hr on the same pools.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
from scipy.optimize import linear_sum_assignment

from dispatcher.policies import _matrix as mx
from dispatcher.policies.kairos import KairosPolicy
from dispatcher.policy import Assignment, QueryView, WorkerView


class KairosStrictPolicy(KairosPolicy):
    name = "kairos-strict"

    def match(self, queue: Sequence[QueryView], workers: Sequence[WorkerView], now: float) -> list[Assignment]:
        if not queue or not workers or not any(w.idle for w in workers):
            return []
        if len(queue) == 1:
            return self._strict_one(queue[0], workers, now)
        q = mx.earliest(queue, self.max_queue_factor * len(workers))
        cost, L, _ = self.cost_matrix(q, workers, now)
        slack = np.array([self.xi * x.qos_ms - 1000.0 * (now - x.arrival) for x in q], dtype=float)
        misses = L > slack[:, None]                                  # Eq. 5 violated (with ξ)
        service = L - mx.remaining_ms(workers, now)[None, :]
        hopeless = (service > slack[:, None]).all(axis=1)            # late on every worker, even idle
        if hopeless.all():
            misses = np.zeros_like(misses)                           # best effort: serve them, as Kairos
        rows, cols = linear_sum_assignment(cost)
        return [Assignment(q[i].query_id, workers[j].worker_id)
                for i, j in zip(rows.tolist(), cols.tolist()) if workers[j].idle and not misses[i, j]]

    def _strict_one(self, q: QueryView, workers: Sequence[WorkerView], now: float) -> list[Assignment]:
        """One waiting query, on scalars (the usual round below saturation): the argmin of its cost
        row (:meth:`KairosPolicy._best_one`), dispatched when that worker is idle and the pair
        meets Eq. 5 (or no worker could serve it in time)."""
        j, late, by_type, slack = self._best_one(q, workers, now)
        w = workers[j]
        hopeless = min(by_type.values()) > slack
        return [Assignment(q.query_id, w.worker_id)] if w.idle and (not late or hopeless) else []
