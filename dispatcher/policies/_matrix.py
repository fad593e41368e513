"""Vectorized building blocks shared by the policies: the predicted service-time matrix S (ms) of
m queries on n workers, remaining busy times and waits (Kairos §5.1, the L matrix of Eq. 2).

S is filled with one ``predict_grid`` call per model present (or, for a predictor without it, one
``predict_many`` per (model, instance type)), never a Python loop over (query, worker) pairs.
"""
from __future__ import annotations

import itertools
import operator
from typing import Sequence

import numpy as np

from dispatcher.policy import LatencyPredictor, QueryView, WorkerView


def type_index(workers: Sequence[WorkerView]) -> tuple[list[str], np.ndarray]:
    """Distinct instance types (first-seen order) and each worker's index into them."""
    tmap: dict[str, int] = {}
    idx = [tmap.setdefault(w.instance_type, len(tmap)) for w in workers]
    return list(tmap), np.asarray(idx, dtype=np.intp)


def service_by_type(queue: Sequence[QueryView], types: Sequence[str], predictor: LatencyPredictor,
                    batches: np.ndarray | None = None) -> np.ndarray:
    """m × len(types) predicted service times (ms)."""
    m = len(queue)
    b = np.fromiter((q.batch_size for q in queue), dtype=float, count=m) if batches is None else batches
    grid = getattr(predictor, "predict_grid", None)
    model0 = queue[0].model if m else ""
    one_model = all(q.model == model0 for q in queue)
    if grid is not None and one_model:
        return grid(model0, types, b)
    out = np.empty((m, len(types)), dtype=float)
    if one_model:
        for k, t in enumerate(types):
            out[:, k] = predictor.predict_many(model0, t, b)
        return out
    models = np.array([q.model for q in queue])
    for mod in np.unique(models):
        rows = models == mod
        if grid is not None:
            out[rows] = grid(str(mod), types, b[rows])
            continue
        for k, t in enumerate(types):
            out[rows, k] = predictor.predict_many(str(mod), t, b[rows])
    return out


def arrivals_of(queue: Sequence[QueryView]) -> np.ndarray:
    return np.fromiter((q.arrival for q in queue), dtype=float, count=len(queue))


def qos_of(queue: Sequence[QueryView]) -> np.ndarray:
    return np.fromiter((q.qos_ms for q in queue), dtype=float, count=len(queue))


#: the least remaining time (ms) a busy worker is predicted to have: one that has run past its
#: predicted finish is still busy, so it must never tie with an idle worker (a tie went to the
#: first column, and a query then waited for the busy worker while an idle one stood by)
BUSY_MIN_MS = 1e-3


def remaining_ms(workers: Sequence[WorkerView], now: float) -> np.ndarray:
    """Remaining busy time (ms) of each worker: 0 for idle workers; for busy ones
    max(busy_until − now, :data:`BUSY_MIN_MS`)."""
    return np.fromiter((busy_ms(w, now) for w in workers), dtype=float, count=len(workers))


def busy_ms(w: WorkerView, now: float) -> float:
    """One worker's remaining busy time (see :func:`remaining_ms`)."""
    return 0.0 if w.idle else max(1000.0 * (w.busy_until - now), BUSY_MIN_MS)


def earliest(queue: Sequence[QueryView], k: int) -> list[QueryView]:
    """The ``k`` earliest arrivals, in arrival order (stable)."""
    if len(queue) <= k:
        arr = [q.arrival for q in queue]
        if all(map(operator.le, arr, itertools.islice(arr, 1, None))):      # already in arrival order
            return list(queue)
        return sorted(queue, key=_arrival)
    arr = arrivals_of(queue)
    order = np.argsort(arr, kind="stable")[:k]
    return [queue[i] for i in order]


def _arrival(q: QueryView) -> float:
    return q.arrival
