"""kairos-strict's dense round in a few numpy calls (issue #39, replay speed).

:meth:`dispatcher.policies.kairos_strict.KairosStrictPolicy.match_dense` builds its cost through
``pair_costs`` → ``_terms`` → ``_restrict`` → ``_mask``: some 25 small numpy calls and a frozen
``RoundTerms``, which cost more than the solve itself at the sizes a replay's rounds have (a few to
40 queries on 8-20 workers, one instance type: INFaaS on the resnet family). :func:`strict_round`
computes the same matrix element for element, with the same float operations in the same order:

- the predictions read one at a time (``predict_ms``, as ``KairosPolicy._small_cost`` and
  ``_best_one`` read them; ``predict_grid``'s values, index for index);
- C per type from the largest query (the first on ties), ``base / max(s, 1e-12)``;
- slack per query ``ξ·T_qos − 1000·(now − arrival)`` and remaining busy ms per worker as
  ``_matrix.busy_ms``;
- L = S[:, type] + busy; the fastest service (L − busy).min over the row; the on-time mask
  L ≤ slack; cost = L·C + max(slack − fastest, 0) (``LAXITY_WEIGHT`` is 1: the product is the
  laxity itself); the mask's M from ``np.max(cost, where=on, initial=0)``;

then the same ``linear_sum_assignment`` on the same matrix, so the same pairs, in the same order.
With one instance type C is one number for every column, and ``L * c`` is ``L * C[tix]`` element
for element. A round where every query is hopeless (the paper's cost, every pair) is left to the
general path: :func:`strict_round` returns None. ``tests/dispatcher/test_strict_dense.py`` checks
it against the general path on seeded random rounds (ties, late and hopeless queries, several types
and models, busy workers past their finish).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
from scipy.optimize import linear_sum_assignment

from dispatcher.policies._matrix import BUSY_MIN_MS
from dispatcher.policy import Assignment, LatencyPredictor, QueryView, WorkerView

#: rounds whose predictions (queries × instance types) are at most this many are built here; the
#: predictions are read one at a time, which a larger round does faster with ``predict_grid``
MAX_PREDICTIONS = 256

_min_rows, _max_of, _count = np.minimum.reduce, np.maximum.reduce, np.count_nonzero
_add_outer = np.add.outer


def strict_matrix(predictor: LatencyPredictor, base_type: str, xi: float, q: Sequence[QueryView],
                  workers: Sequence[WorkerView], now: float) -> tuple[np.ndarray, np.ndarray] | None:
    """(the masked cost the assignment minimises, the on-time pairs): ``KairosStrictPolicy._restrict(
    _terms(q, workers, now))`` element for element (see the module docstring); None when every
    query is hopeless or the round has more than :data:`MAX_PREDICTIONS` predictions."""
    types = list(dict.fromkeys([w.instance_type for w in workers]))     # first-seen order, as type_index
    if len(q) * len(types) > MAX_PREDICTIONS:
        return None
    predict = predictor.predict_ms
    big = q[0]                                     # the largest waiting query (the first on ties)
    for x in q:
        if x.batch_size > big.batch_size:
            big = x
    base_ms = predict(big.model, base_type, big.batch_size)
    sl = np.array([xi * x.qos_ms - 1000.0 * (now - x.arrival) for x in q], dtype=float)
    # _matrix.busy_ms: max(r, BUSY_MIN_MS) is r unless BUSY_MIN_MS > r (a NaN r stays)
    b = np.array([0.0 if w.idle else (BUSY_MIN_MS if BUSY_MIN_MS > (r := 1000.0 * (w.busy_until - now)) else r)
                  for w in workers], dtype=float)
    if len(types) == 1:
        t = types[0]
        c: float | np.ndarray = base_ms / max(predict(big.model, t, big.batch_size), 1e-12)
        L = _add_outer(np.array([predict(x.model, t, x.batch_size) for x in q], dtype=float), b)
    else:
        tix = [types.index(w.instance_type) for w in workers]
        c = np.array([base_ms / max(predict(big.model, t, big.batch_size), 1e-12) for t in types], dtype=float)[tix]
        L = np.array([[predict(x.model, t, x.batch_size) for t in types] for x in q], dtype=float)[:, tix]
        L += b
    fastest = _min_rows(L - b, 1)                      # service on the fastest type, as L − busy
    if _count(fastest > sl) == len(q):                 # every query hopeless: the general path
        return None
    on = L <= sl[:, None]                              # Eq. 5 holds (with ξ)
    cost = L * c
    cost += np.maximum(sl - fastest, 0.0)[:, None]     # the laxity, on every pair (late ones are masked)
    top = float(_max_of(cost, axis=None, initial=0.0, where=on))     # np.max(cost, where=on, initial=0.0)
    return np.where(on, cost, 1.0 + min(L.shape) * top), on


def strict_round(predictor: LatencyPredictor, base_type: str, xi: float, q: Sequence[QueryView],
                 workers: Sequence[WorkerView], now: float) -> list[Assignment] | None:
    """``KairosStrictPolicy.match_dense(q, workers, now)`` on :func:`strict_matrix`'s matrix: the
    same ``linear_sum_assignment``, the matched pairs whose worker is idle and which are on time,
    in the solver's order; None where :func:`strict_matrix` gives none (the caller takes the
    general path)."""
    got = strict_matrix(predictor, base_type, xi, q, workers, now)
    if got is None:
        return None
    cost, on = got
    rows, cols = linear_sum_assignment(cost)
    out = []
    for i, j in zip(rows.tolist(), cols.tolist()):
        w = workers[j]
        if w.idle and on[i, j]:
            out.append(Assignment(q[i].query_id, w.worker_id))
    return out


__all__ = ["MAX_PREDICTIONS", "strict_matrix", "strict_round"]
