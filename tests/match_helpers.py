"""Test helpers for the large-round matchings (dispatcher/policies/class_match.py, on_time_flow.py):
a latency table drawn by a test, the large-round path forced at every size, HiGHS through SciPy
where highspy is missing, and what every dispatched round must satisfy."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Sequence

import numpy as np

from dispatcher.policies import KairosPolicy, KairosStrictPolicy, kairos as kairos_mod, kairos_strict as strict_mod
from dispatcher.policies._matrix import earliest
from dispatcher.policy import Assignment, QueryView, WorkerView

#: the policies' module thresholds below which a round is solved dense
_THRESHOLDS = ((kairos_mod, "DENSE_MAX_PAIRS"), (strict_mod, "STRICT_DENSE_MAX_PAIRS_SATURATED"),
               (strict_mod, "STRICT_DENSE_MAX_PAIRS_WIDE"))


class GridPredictor:
    """Service ms per (type, batch 1..4) from a table drawn by the test."""

    def __init__(self, table: dict[str, list[float]]) -> None:
        self.table = table

    def predict_ms(self, model: str, instance_type: str, batch_size: float) -> float:
        return self.table[instance_type][int(batch_size) - 1]

    def predict_many(self, model: str, instance_type: str, batch_sizes: np.ndarray) -> np.ndarray:
        return np.array([self.table[instance_type][int(b) - 1] for b in batch_sizes], dtype=float)


@contextmanager
def large_rounds() -> Iterator[None]:
    """Both policies take the large-round path at every size (every threshold 0) inside the block
    (a context manager, not monkeypatch: hypothesis tests cannot take function-scoped fixtures)."""
    saved = [getattr(mod, name) for mod, name in _THRESHOLDS]
    for mod, name in _THRESHOLDS:
        setattr(mod, name, 0)
    try:
        yield
    finally:
        for (mod, name), value in zip(_THRESHOLDS, saved):
            setattr(mod, name, value)


@contextmanager
def without_highspy() -> Iterator[None]:
    """The transportation LP solved by SciPy's copy of HiGHS inside the block, as where the
    ``accuracy`` extra (highspy) is not installed."""
    from dispatcher.policies import transport_lp

    saved = transport_lp.highspy
    transport_lp.highspy = None
    try:
        yield
    finally:
        transport_lp.highspy = saved


def assert_dispatchable(policy: KairosPolicy, queue: Sequence[QueryView], workers: Sequence[WorkerView],
                        now: float, got: Sequence[Assignment]) -> None:
    """A round's dispatches go to idle workers only, each worker and each query at most once; a
    ``kairos-strict`` round (but the best-effort one, every query hopeless) dispatches only pairs
    on time by Eq. 5 over the round's 2n view."""
    idle = {w.worker_id for w in workers if w.idle}
    assert all(a.worker_id in idle for a in got)
    assert len({a.worker_id for a in got}) == len(got) == len({a.query_id for a in got})
    if not isinstance(policy, KairosStrictPolicy) or not got:
        return
    view = earliest(queue, policy.max_queue_factor * len(workers))       # the round's 2n view
    pc = policy.pair_costs(view, workers, now)
    if not (pc.S.min(axis=1) > pc.slack).all():                          # not the best-effort case
        qi = {q.query_id: i for i, q in enumerate(view)}
        ti = {w.worker_id: pc.tix[j] for j, w in enumerate(workers)}
        assert all(pc.S[qi[a.query_id], ti[a.worker_id]] <= pc.slack[qi[a.query_id]] for a in got)
