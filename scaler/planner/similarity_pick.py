"""Kairos §5.2's similarity pick over pools ranked by their throughput upper bound: if the top-3
pools have the same base count, the top one ("top3-same-base"); otherwise, among the top 10, the
pool with the least sum of squared Euclidean distances (over count vectors) to the other nine
("min-sse-top10"). The ranking (:mod:`scaler.planner.choose`) and the search (:mod:`scaler.planner.choose_by_search`)
both pick with it (pure).
"""
from __future__ import annotations

import numpy as np

from scaler.planner.base_aux import PlanError

#: the pools the similarity pick compares (Kairos §5.2: the top ten)
SIMILARITY_TOP = 10


def similarity_pick(counts: np.ndarray, base_col: int, top: int = SIMILARITY_TOP) -> tuple[int, str]:
    """Kairos §5.2 pick over ranked count vectors: index of the chosen row and the rule."""
    n = counts.shape[0]
    if n == 0:
        raise PlanError("no pool to pick from")
    head3 = counts[: min(3, n), base_col]
    if n < 2 or bool(np.all(head3 == head3[0])):
        return 0, "top3-same-base"
    x = counts[: min(top, n)].astype(float)
    d = ((x[:, None, :] - x[None, :, :]) ** 2).sum(axis=2)
    return int(np.argmin(d.sum(axis=1))), "min-sse-top10"


__all__ = ["SIMILARITY_TOP", "similarity_pick"]
