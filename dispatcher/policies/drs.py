"""DeepRecSys-style static threshold distribution (the "DRS" baseline of Kairos §7).

A query with batch size *above* the threshold may only run on the base type; one at or below it
only on auxiliary types; FCFS within each class. When the pool has no worker at all of a query's
class, the query may use the other class (otherwise it could never be served).

DeepRecSys finds the threshold with a hill-climbing sweep over measured throughput; here that search
is :func:`sweep_drs_threshold`, a pure helper over any ``evaluate(threshold) -> float`` (the
simulator supplies allowable throughput). Without an explicit threshold, the policy uses, per model
and pool, the largest batch size that the fastest auxiliary type serves within ξ·QoS (the natural
DRS split point), computed once and cached.
"""
from __future__ import annotations

from typing import Callable, Iterable, Sequence

import numpy as np

from dispatcher.policies import _matrix as mx
from dispatcher.policy import DISPATCH_XI, Assignment, LatencyPredictor, QueryView, WorkerView

MAX_BATCH = 1000


def sweep_drs_threshold(evaluate: Callable[[int], float], candidates: Iterable[int]) -> int:
    """The candidate threshold with the highest ``evaluate(threshold)``; ties go to the smaller
    threshold. Every candidate is evaluated once (an exhaustive sweep, which finds what DeepRecSys's
    hill climbing finds on a unimodal curve and cannot stop at a local optimum otherwise)."""
    best: tuple[float, int] | None = None
    for t in sorted(set(int(c) for c in candidates)):
        score = float(evaluate(t))
        if best is None or score > best[0]:
            best = (score, t)
    if best is None:
        raise ValueError("sweep_drs_threshold needs at least one candidate")
    return best[1]


class DrsPolicy:
    name = "drs"

    def __init__(self, predictor: LatencyPredictor, base_type: str, *, threshold: int | None = None,
                 xi: float = DISPATCH_XI) -> None:
        self.predictor = predictor
        self.base_type = base_type
        self.threshold = threshold
        self.xi = xi
        self._derived: dict[tuple[str, float, tuple[str, ...]], int] = {}

    def threshold_for(self, model: str, qos_ms: float, aux_types: Sequence[str]) -> int:
        if self.threshold is not None:
            return self.threshold
        key = (model, qos_ms, tuple(sorted(aux_types)))
        t = self._derived.get(key)
        if t is None:
            b = np.arange(1, MAX_BATCH + 1, dtype=float)
            if aux_types:
                best = np.min(np.vstack([self.predictor.predict_many(model, a, b) for a in aux_types]), axis=0)
                ok = np.nonzero(best <= self.xi * qos_ms)[0]
                t = int(b[ok.max()]) if ok.size else 0
            else:
                t = 0
            self._derived[key] = t
        return t

    def match(self, queue: Sequence[QueryView], workers: Sequence[WorkerView], now: float) -> list[Assignment]:
        idle = [w for w in workers if w.idle]
        if not queue or not idle:
            return []
        has_base = any(w.instance_type == self.base_type for w in workers)
        aux_types = sorted({w.instance_type for w in workers if w.instance_type != self.base_type})
        free_base = [w for w in idle if w.instance_type == self.base_type]
        free_aux = [w for w in idle if w.instance_type != self.base_type]
        out: list[Assignment] = []
        for query in mx.earliest(queue, len(queue)):
            if not free_base and not free_aux:
                break
            large = query.batch_size > self.threshold_for(query.model, query.qos_ms, aux_types)
            if large and not has_base or not large and not aux_types:
                large = not large        # the query's class is absent from the pool
            pool = free_base if large else free_aux
            if pool:
                out.append(Assignment(query.query_id, pool.pop(0).worker_id))
        return out
