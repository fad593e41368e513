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

**Solving it.** Small rounds (at most :data:`DENSE_MAX_PAIRS` pairs) on the dense matrix; larger
ones as a transportation problem over classes of identical queries and groups of workers of one type
(dispatcher/policies/class_match.py, issue #29): the same optimum (equal total cost), without the
m × n matrix or the cubic solve.

Only pairs whose worker is idle are dispatched; a query matched to a busy worker waits for the next
round (its worker's remaining time was part of the cost, Kairos §6).

**Bound on m.** Each round considers at most ``max_queue_factor · n`` queries (default 2n), the
earliest arrivals. At most n queries can be matched per round, and the oldest ones are those closest
to their deadline (the W term), so looking further back in the queue adds solve time without
changing who is served first; later arrivals enter the window as older ones leave.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy.optimize import linear_sum_assignment

from dispatcher.policies import _matrix as mx
from dispatcher.policies.class_match import match_classes
from dispatcher.policies.pair_costs import PairCosts
from dispatcher.policy import (DISPATCH_VIEW_FACTOR, DISPATCH_XI, Assignment, LatencyPredictor, QueryView,
                              WorkerView)

PENALTY_FACTOR = 10.0
#: rounds with at most this many (query, worker) pairs are solved on the dense matrix (fast there:
#: 20 × 20 in some 50 µs); larger ones by the exact class matching (dispatcher/policies/class_match.py),
#: which gives the same optimum. Where the two cross: BENCHMARKS.md "match-scale".
DENSE_MAX_PAIRS = 20_000
#: dense rounds with at most this many pairs build their cost matrix on Python floats
#: (:meth:`KairosPolicy._small_cost`): a replay's rounds are mostly a few queries on a few workers
SMALL_PAIRS = 200


@dataclass(frozen=True)
class RoundTerms:
    """One matching round's arrays (m queries × n workers, ms): what :meth:`KairosPolicy._restrict`
    works from."""

    cost: np.ndarray        # C·L after the Eq. 8 penalty
    L: np.ndarray           # completion time from now: remaining busy time + service (Eq. 2)
    C: np.ndarray           # heterogeneity coefficient per worker (Definition 1)
    slack: np.ndarray       # per query: ξ·T_qos − W (Eq. 5's right-hand side less the wait)
    busy: np.ndarray        # per worker: remaining busy time


class KairosPolicy:
    name = "kairos"

    def __init__(self, predictor: LatencyPredictor, base_type: str, *, xi: float = DISPATCH_XI,
                 max_queue_factor: int = DISPATCH_VIEW_FACTOR, penalty_factor: float = PENALTY_FACTOR) -> None:
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
        t = self._terms(queue, workers, now)
        return t.cost, t.L, t.C

    def _terms(self, queue: Sequence[QueryView], workers: Sequence[WorkerView], now: float) -> RoundTerms:
        pc = self.pair_costs(queue, workers, now)
        L = pc.completion()
        C = pc.C[pc.tix]
        Lp = np.where(L > pc.slack[:, None], pc.late[:, pc.tix], L * C)
        return RoundTerms(Lp, L, C, pc.slack, pc.busy)

    def pair_costs(self, queue: Sequence[QueryView], workers: Sequence[WorkerView], now: float) -> PairCosts:
        """The round's costs per (query, type) and remaining time per worker, no m × n array:
        ``pair_costs(...).dense()`` is :meth:`cost_matrix`'s cost, element for element."""
        types, tix = mx.type_index(workers)
        m = len(queue)
        xi, pf = self.xi, self.penalty_factor
        # per query: batch, slack before the QoS safeguard ξ·T_qos − W (ms; W = time waited), penalty
        per_q = np.array([(q.batch_size, xi * q.qos_ms - 1000.0 * (now - q.arrival), pf * q.qos_ms) for q in queue],
                         dtype=float).reshape(m, 3)
        b = per_q[:, 0]
        # service times of every query on every type, plus the base type for C_j (last column)
        cols = types if self.base_type in types else types + [self.base_type]
        s_types = mx.service_by_type(queue, cols, self.predictor, b)
        row = s_types[int(np.argmax(b))]                      # the largest waiting query
        C = row[cols.index(self.base_type)] / np.maximum(row[: len(types)], 1e-12)
        S = s_types[:, : len(types)]
        return PairCosts(S, C, mx.remaining_ms(workers, now), tix, per_q[:, 1], per_q[:, 2:3] * C, np.zeros(m))

    def match(self, queue: Sequence[QueryView], workers: Sequence[WorkerView], now: float) -> list[Assignment]:
        if not queue:
            return []
        for w in workers:           # any idle worker (none: nothing to dispatch)
            if w.idle:
                break
        else:
            return []
        if len(queue) == 1:
            return self._match_one(queue[0], workers, now)
        q = mx.earliest(queue, self.max_queue_factor * len(workers))
        if not self._dense_is_faster(len(q), len(workers)):
            pc, on_time_only = self._restrict_pairs(self.pair_costs(q, workers, now))
            got = self._large_round(pc, on_time_only)
            if got is not None:
                rows, cols = got
                keep = np.array([workers[j].idle for j in cols.tolist()], dtype=bool)
                if on_time_only:
                    keep &= pc.S[rows, pc.tix[cols]] <= pc.slack[rows]     # on time on an idle worker
                srt = np.argsort(rows[keep], kind="stable")
                return [Assignment(q[i].query_id, workers[j].worker_id)
                        for i, j in zip(rows[keep][srt].tolist(), cols[keep][srt].tolist())]
        return self.match_dense(q, workers, now)

    def match_dense(self, q: Sequence[QueryView], workers: Sequence[WorkerView], now: float) -> list[Assignment]:
        """The round solved on the dense m × n matrix with ``linear_sum_assignment`` (Kairos §5.1 as
        the paper states it; the fast path for small rounds and the reference of the class matching):
        ``q`` as given, no bounding of the view."""
        if len(q) * len(workers) <= SMALL_PAIRS and type(self)._restrict is KairosPolicy._restrict:
            cost, allowed = np.array(self._small_cost(q, workers, now), dtype=float), None
        else:
            cost, allowed = self._restrict(self._terms(q, workers, now))
        rows, cols = linear_sum_assignment(cost)
        return [Assignment(q[i].query_id, workers[j].worker_id)
                for i, j in zip(rows.tolist(), cols.tolist())
                if workers[j].idle and (allowed is None or allowed[i, j])]

    def _small_cost(self, q: Sequence[QueryView], workers: Sequence[WorkerView], now: float) -> list[list[float]]:
        """:meth:`cost_matrix`'s cost as rows of Python floats, for a round of at most
        :data:`SMALL_PAIRS` pairs: element for element the same arithmetic (the predictions read
        one at a time, as :meth:`_best_one` does), without the dozen small numpy calls that cost
        more than the round itself at that size."""
        predict, xi, pf = self.predictor.predict_ms, self.xi, self.penalty_factor
        big = q[0]                                      # the largest waiting query (the first on ties)
        for x in q:
            if x.batch_size > big.batch_size:
                big = x
        base_ms = predict(big.model, self.base_type, big.batch_size)
        types, tix = mx.type_index(workers)
        C = [base_ms / max(predict(big.model, t, big.batch_size), 1e-12) for t in types]
        cols = [(k, C[k], mx.busy_ms(w, now)) for k, w in zip(tix.tolist(), workers)]
        out = []
        for x in q:
            slack = xi * x.qos_ms - 1000.0 * (now - x.arrival)
            penalty = pf * x.qos_ms
            s = [predict(x.model, t, x.batch_size) for t in types]
            out.append([penalty * c if (L := s[k] + b) > slack else L * c for k, c, b in cols])
        return out

    def _dense_is_faster(self, m: int, n: int) -> bool:
        """Whether an m × n round goes to the dense solve: at most :data:`DENSE_MAX_PAIRS` pairs."""
        return m * n <= DENSE_MAX_PAIRS

    def _large_round(self, pc: PairCosts, on_time_only: bool) -> tuple[np.ndarray, np.ndarray] | None:
        """A large round's matched (query rows, worker columns) without the dense matrix, an optimum
        of ``linear_sum_assignment(pc.dense())``; None: solve it dense. The paper's: the class
        matching (dispatcher/policies/class_match.py)."""
        return match_classes(pc)

    def _restrict_pairs(self, pc: PairCosts) -> tuple[PairCosts, bool]:
        """:meth:`_restrict` on the per-type costs: the costs to minimise and whether only on-time
        pairs are dispatched. The paper's: ``pc`` as it is, every pair."""
        return pc, False

    def _restrict(self, t: RoundTerms) -> tuple[np.ndarray, np.ndarray | None]:
        """The hook a stricter matching overrides: the cost the assignment minimises and which
        matched pairs may be dispatched (``None``: every pair with an idle worker). The paper's:
        the penalised cost of :meth:`cost_matrix` as it is, every pair."""
        return t.cost, None

    def _match_one(self, q: QueryView, workers: Sequence[WorkerView], now: float) -> list[Assignment]:
        """One waiting query: Eq. 6 with m = 1 is the argmin of its cost row (first minimum on ties,
        as ``linear_sum_assignment`` breaks them)."""
        w = workers[self._best_one(q, workers, now)[0]]
        return [Assignment(q.query_id, w.worker_id)] if w.idle else []

    def _best_one(self, q: QueryView, workers: Sequence[WorkerView], now: float
                  ) -> tuple[int, int, dict[str, float], float]:
        """The argmin of one query's cost row, in one pass: (its worker's index; the index of the
        argmin over the workers where the query meets Eq. 5, -1 when there is none; the predicted
        service ms by type; the query's slack ξ·T_qos − W in ms). The same arithmetic as
        :meth:`cost_matrix`, on scalars: a round with a single waiting query (the usual case below
        saturation) makes no numpy calls."""
        predict = self.predictor.predict_ms
        base_ms = predict(q.model, self.base_type, q.batch_size)
        slack = self.xi * q.qos_ms - 1000.0 * (now - q.arrival)
        penalty = self.penalty_factor * q.qos_ms
        by_type: dict[str, float] = {}
        coef: dict[str, float] = {}     # C per type, base_ms / max(s, 1e-12), once per type
        best, best_j, on_time, on_time_j = float("inf"), -1, float("inf"), -1
        for j, w in enumerate(workers):
            t = w.instance_type
            s = by_type.get(t)
            if s is None:
                s = by_type[t] = predict(q.model, t, q.batch_size)
                c = coef[t] = base_ms / max(s, 1e-12)
            else:
                c = coef[t]
            L = s if w.idle else s + max(1000.0 * (w.busy_until - now), mx.BUSY_MIN_MS)   # + mx.busy_ms
            late = L > slack
            cost = c * (penalty if late else L)
            if cost < best or best_j < 0:
                best, best_j = cost, j
            if not late and (cost < on_time or on_time_j < 0):
                on_time, on_time_j = cost, j
        return best_j, on_time_j, by_type, slack
