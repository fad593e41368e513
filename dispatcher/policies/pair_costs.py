"""The Kairos §5.1 pair cost without its m × n matrix: what the matching minimises, per type.

Kairos §5.1 (Eq. 2, 5, 8, Definition 1): query i on worker j of type t costs
``C[t] · (S[i, t] + busy[j])`` when that completion time meets Eq. 5 with the safeguard ξ
(``S[i, t] + busy[j] <= slack[i]``, slack = ξ·T_qos − W) and the QoS penalty otherwise. The only
per-worker number is ``busy[j]``, its remaining time (0 when idle), so the m × n matrix is a
function of m × T arrays and n numbers (T = instance types). :class:`PairCosts` holds those arrays
and builds the dense matrix only where it is asked for (:meth:`PairCosts.dense`: the fast path
for small rounds and the reference the exact class matching is tested against).

``extra[i]`` is added to query i's on-time pairs and ``late[i, t]`` is what a late pair costs:
the paper's penalty ``C[t] · 10·T_qos[i]`` with ``extra = 0`` for ``kairos``; the laxity and the
mask for ``kairos-strict`` (ours, dispatcher/policies/kairos_strict.py).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np


@dataclass(frozen=True)
class PairCosts:
    S: np.ndarray        # m × T: predicted service ms of query i on type t
    C: np.ndarray        # T: heterogeneity coefficient of type t (Kairos §5.1 Definition 1)
    busy: np.ndarray     # n: remaining busy ms of worker j (0: idle)
    tix: np.ndarray      # n: worker j's type (index into the columns of S)
    slack: np.ndarray    # m: ξ·T_qos − W, ms (Eq. 5's right-hand side less the wait)
    late: np.ndarray     # m × T: the cost of a pair that misses Eq. 5
    extra: np.ndarray    # m: added to every on-time pair of query i

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.slack), len(self.busy)

    def completion(self) -> np.ndarray:
        """m × n completion times L (Eq. 2): remaining busy time + service, ms."""
        L = self.S[:, self.tix]
        L += self.busy
        return L

    def dense(self) -> np.ndarray:
        """The m × n cost matrix, element for element the arithmetic of
        ``KairosPolicy.cost_matrix`` (and of ``kairos-strict``'s masked cost)."""
        L = self.completion()
        on = L <= self.slack[:, None]
        cost = L * self.C[self.tix]
        cost += self.extra[:, None]
        return np.where(on, cost, self.late[:, self.tix])

    def on_time_idle(self) -> np.ndarray:
        """m × T: query i meets Eq. 5 on an idle worker of type t."""
        return self.S <= self.slack[:, None]

    def with_late(self, late: np.ndarray, extra: np.ndarray | None = None) -> "PairCosts":
        return replace(self, late=late, extra=self.extra if extra is None else extra)


#: a matching's pairs: (query rows, worker columns), as ``linear_sum_assignment`` returns them
Pairs = tuple[np.ndarray, np.ndarray]


def equal_rows(key: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The classes of equal rows of ``key`` (m × k floats, compared bit for bit): (one member of
    each class, the class of each row, each class's size). Both large-round solvers group the
    queries they cannot tell apart this way (class_match.py, on_time_flow.py)."""
    key = np.ascontiguousarray(key)
    rows = key.view(np.dtype((np.void, key.itemsize * key.shape[1]))).ravel()
    _, first, inv, cnt = np.unique(rows, return_index=True, return_inverse=True, return_counts=True)
    return first, inv.ravel(), cnt


def by_type(pc: PairCosts) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Workers sorted by (type, remaining time, index): (the order, where each type starts in it
    (T + 1 offsets), the sorted remaining times)."""
    n = len(pc.busy)
    order = np.lexsort((np.arange(n), pc.busy, pc.tix))
    start = np.searchsorted(pc.tix[order], np.arange(len(pc.C) + 1), side="left")
    return order, start, pc.busy[order]


def reach(pc: PairCosts, b: np.ndarray, start: np.ndarray) -> np.ndarray:
    """m × T: on how many of type t's workers (sorted as :func:`by_type`, ``b`` their remaining
    times) query i meets Eq. 5: decided by the dense matrix's own float sum ``S + busy <= slack``
    (a completion time only grows with the remaining time, so they are a prefix)."""
    m, T = pc.S.shape
    p = np.empty((m, T), dtype=np.int64)
    for t in range(T):
        seg = b[start[t]:start[t + 1]]
        s = pc.S[:, t]
        k = np.searchsorted(seg, pc.slack - s, side="right")
        while True:                                 # slack − S may round one way or the other
            up = k < len(seg)
            up[up] = s[up] + seg[k[up]] <= pc.slack[up]
            down = k > 0
            down[down] = s[down] + seg[k[down] - 1] > pc.slack[down]
            if not (up.any() or down.any()):
                break
            k = k + up - down
        p[:, t] = k
    return p


def max_on_time_cost(pc: PairCosts) -> float:
    """The largest cost of an on-time pair (0 when there is none), as ``np.max(dense, where=on
    time)`` finds it: per query and type, on the busiest worker it is on time on."""
    _, start, b = by_type(pc)
    p = reach(pc, b, start)
    ok = p > 0
    if not ok.any():
        return 0.0
    last = b[np.minimum(start[:-1] + p - 1, len(b) - 1)]
    cost = (pc.S + last) * pc.C
    cost += pc.extra[:, None]
    return max(0.0, float(cost[ok].max()))
