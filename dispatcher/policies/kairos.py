"""Kairos query distribution: min-cost bipartite matching of waiting queries to instances.

Kairos §5.1, Eq. 1–8. At each call, for the m waiting queries and n workers:

- ``L[i, j]`` = remaining busy time of worker j + predicted service time of query i on j's type (ms);
- ``C[j]`` (Definition 1) = predicted latency of the *largest* waiting query on the base type ÷ its
  latency on j's type (so the base type has C = 1, slower types C < 1; a type faster than the base
  gets C > 1: we do not clip);
- QoS penalty (Eq. 5 with the §5.1 remark's safeguard ξ, Eq. 8): where ``L[i, j] + W[i] > ξ·T_qos[i]``
  (W = time query i has waited), ``L[i, j] := 10·T_qos[i]``;
- minimise Σ C[j]·L[i, j]·P[i, j] with ``scipy.optimize.linear_sum_assignment`` (Jonker–Volgenant;
  rectangular either way: min(m, n) pairs, Eq. 6–7).

Only pairs whose worker is idle are dispatched; a query matched to a busy worker waits for the next
round (its worker's remaining time was part of the cost, Kairos §6).

**Bound on m.** Each round considers at most ``max_queue_factor · n`` queries (default 2n), the
earliest arrivals. At most n queries can be matched per round, and the oldest ones are those closest
to their deadline (the W term), so looking further back in the queue adds solve time without
changing who is served first; later arrivals enter the window as older ones leave.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
from scipy.optimize import linear_sum_assignment

from dispatcher.policies import _matrix as mx
from dispatcher.policy import Assignment, LatencyPredictor, QueryView, WorkerView

PENALTY_FACTOR = 10.0


class KairosPolicy:
    name = "kairos"

    def __init__(self, predictor: LatencyPredictor, base_type: str, *, xi: float = 0.98,
                 max_queue_factor: int = 2, penalty_factor: float = PENALTY_FACTOR) -> None:
        if max_queue_factor < 1:
            raise ValueError("max_queue_factor must be >= 1")
        self.predictor = predictor
        self.base_type = base_type
        self.xi = xi
        self.max_queue_factor = max_queue_factor
        self.penalty_factor = penalty_factor

    def cost_matrix(self, queue: Sequence[QueryView], workers: Sequence[WorkerView], now: float
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(cost = C·L after the penalty, L before the penalty, C per worker) for ``queue`` as given
        (no bounding); exposed for tests and the simulator's diagnostics."""
        types, tix = mx.type_index(workers)
        b = np.fromiter((q.batch_size for q in queue), dtype=float, count=len(queue))
        # service times of every query on every type, plus the base type for C_j (last column)
        cols = types if self.base_type in types else types + [self.base_type]
        s_types = mx.service_by_type(queue, cols, self.predictor, b)
        L = s_types[:, tix] + mx.remaining_ms(workers, now)[None, :]
        imax = int(np.argmax(b))
        base_col = cols.index(self.base_type)
        c_type = s_types[imax, base_col] / np.maximum(s_types[imax, : len(types)], 1e-12)
        C = c_type[tix]
        W = (now - mx.arrivals_of(queue)) * 1000.0
        qos = mx.qos_of(queue)
        violate = (L + W[:, None]) > (self.xi * qos)[:, None]
        Lp = np.where(violate, (self.penalty_factor * qos)[:, None], L)
        return C[None, :] * Lp, L, C

    def match(self, queue: Sequence[QueryView], workers: Sequence[WorkerView], now: float) -> list[Assignment]:
        if not queue or not workers or not any(w.idle for w in workers):
            return []
        q = mx.earliest(queue, self.max_queue_factor * len(workers))
        cost, _, _ = self.cost_matrix(q, workers, now)
        rows, cols = linear_sum_assignment(cost)
        return [Assignment(q[i].query_id, workers[j].worker_id)
                for i, j in zip(rows.tolist(), cols.tolist()) if workers[j].idle]
