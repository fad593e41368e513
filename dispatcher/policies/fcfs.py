"""Ribbon-style FCFS distribution (the "Ribbon" baseline of Kairos §7).

Queries are taken in arrival order; each goes to the best idle instance: an idle worker of the base
type if there is one, otherwise the idle worker whose type has the lowest predicted latency for the
query (ties: the order the workers are given). No QoS awareness, no look-ahead.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from dispatcher.policies import _matrix as mx
from dispatcher.policy import Assignment, LatencyPredictor, QueryView, WorkerView


class FcfsPolicy:
    name = "fcfs"

    def __init__(self, predictor: LatencyPredictor, base_type: str) -> None:
        self.predictor = predictor
        self.base_type = base_type

    def match(self, queue: Sequence[QueryView], workers: Sequence[WorkerView], now: float) -> list[Assignment]:
        idle = [w for w in workers if w.idle]
        if not queue or not idle:
            return []
        q = mx.earliest(queue, len(idle))
        types, tix = mx.type_index(idle)
        S = mx.service_by_type(q, types, self.predictor)[:, tix]          # m × idle
        is_base = np.array([w.instance_type == self.base_type for w in idle])
        free = np.ones(len(idle), dtype=bool)
        out: list[Assignment] = []
        for i, query in enumerate(q):
            cand = free & is_base
            if not cand.any():
                cand = free
            j = int(np.argmin(np.where(cand, S[i], np.inf)))
            free[j] = False
            out.append(Assignment(query.query_id, idle[j].worker_id))
        return out
