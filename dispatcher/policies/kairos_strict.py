"""``kairos-strict``: Kairos §5.1 matching that never dispatches a pair its QoS constraint rejects.

**Ours, not the paper's.** Kairos §5.1 states the QoS constraint (Eq. 5, with the safeguard ξ) and
then folds it into the cost as a penalty (Eq. 8) so that the min-cost bipartite matching stays
feasible. With more queries than workers Eq. 7 makes every worker take a query, so the matching
*does* pair queries with workers where they miss ξ·T_qos, and :class:`KairosPolicy` dispatches them:
the worker then spends its time on a query that is late anyway, at the moment the pool is
saturated (what tight QoS targets, wnd and mtwnd 25 ms, dien 35 ms, run into first: large queries
stranded on auxiliary instances). Here Eq. 5 is a constraint of the matching, not a price:

- **Mask before matching.** A pair that misses Eq. 5 costs more than any set of on-time pairs
  (:func:`_mask`), so the assignment first serves as many queries on time as it can, then
  minimises the paper's cost C·L among those (same L, C, solver, 2n-query view). A query the
  penalty would have paired late with a cheap auxiliary is matched to a worker where it is on
  time, if one is left, in the same round.
- **Never dispatch a late pair.** A matched pair that still misses Eq. 5 (no on-time worker was
  left for it) is not dispatched: the query stays queued for a worker that can still serve it in
  time, or reaches its deadline.
- **The least laxity first.** With more queries than workers the paper's cost C·L prefers the
  smallest queries for the base instances (shortest job first): a large query that only the base
  serves in time loses the base to smaller ones that arrived after it until it has waited too
  long (seen in the simulator's traces: mtwnd's and dien's misses are such queries). Each
  query's laxity (ξ·T_qos − W minus its fastest service time in the pool, the time it may still
  wait, ms) is added to its on-time pairs: a term per row, so it changes which queries are served
  this round, not where a query goes; between two queries competing for a worker the one closer
  to its latest start wins unless the other saves more than the difference in C·L.
- **One query** (the usual round below saturation): the argmin of its cost row over the workers
  where it is on time (the laxity, one term, changes nothing).

Liveness: a query that no worker type could serve within ξ·T_qos even if started now (it is late
whatever happens; the dispatcher drops these first with ``on_deadline: drop``) is still served
when every query in the view is such a query (``on_deadline: best_effort``), as Kairos would: the
paper's penalised cost, every matched pair.

Large rounds (above :data:`STRICT_DENSE_MAX_PAIRS_SATURATED` / :data:`STRICT_DENSE_MAX_PAIRS_WIDE`
pairs) are solved as a min-cost flow over query classes and per-type chains of workers
(dispatcher/policies/on_time_flow.py), the same optimum as the dense matrix without building it.

Measured (BENCHMARKS.md "kairos-repro", where the ideas tried and dropped are listed too): the
laxity term raises allowable throughput by 3-7 % on the tight-QoS models (wnd, mtwnd, dien) at
2.5 $/hr; the mask alone changes little, as the paper's penalty already prices most late pairs out.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from dispatcher.policies.class_match import match_classes
from dispatcher.policies.kairos import KairosPolicy, RoundTerms
from dispatcher.policies.on_time_flow import match_on_time
from dispatcher.policies.pair_costs import PairCosts, max_on_time_cost
from dispatcher.policies.strict_dense import strict_round
from dispatcher.policy import Assignment, QueryView, WorkerView


#: weight of a query's laxity (ms) against the paper's cost C·L (base-type ms) in the matching's
#: objective; 0.5 and 2 measured within one bisection step of 1 (BENCHMARKS.md "kairos-repro")
LAXITY_WEIGHT = 1.0


#: rounds with at most this many (query, worker) pairs are solved on the dense matrix, larger ones
#: as the on-time flow (dispatcher/policies/on_time_flow.py), the same optimum; one threshold for
#: saturated rounds (at least as many waiting as workers: every worker is matched, Eq. 7) and one
#: for wide ones (fewer waiting than workers, Eq. 6), where the dense solve's augmenting paths are
#: short and it stays fast far longer. Each is the largest round at which the dense solve was still
#: faster at p50 in any run of ``bench/dispatch/match_bench.py --crossover`` (2n × n and m × 1,000 rounds;
#: saturated: 45,000, 31,250 and 20,000 in three runs, within 1.2× of each other between 20,000
#: and 45,000; wide: 200,000 in two; BENCHMARKS.md "match-scale"). In pairs, or in
#: min(m, n)²·max(m, n), the two shapes cross 4-6× apart, hence two thresholds.
STRICT_DENSE_MAX_PAIRS_SATURATED = 45_000
STRICT_DENSE_MAX_PAIRS_WIDE = 200_000


class KairosStrictPolicy(KairosPolicy):
    """Kairos §5.1 with Eq. 5 as a constraint and the least laxity first (the module docstring).
    Large rounds by the on-time flow (dispatcher/policies/on_time_flow.py), not the class matching:
    the laxity makes every query's cost row its own, which the class matching's relaxation rarely
    certifies, while the flow needs only the rows' service times and reach to be shared."""

    name = "kairos-strict"

    def _dense_is_faster(self, m: int, n: int) -> bool:
        """Whether an m × n round goes to the dense solve (the measured thresholds above)."""
        return m * n <= (STRICT_DENSE_MAX_PAIRS_SATURATED if m >= n else STRICT_DENSE_MAX_PAIRS_WIDE)

    def match_dense(self, q: Sequence[QueryView], workers: Sequence[WorkerView], now: float) -> list[Assignment]:
        """The dense round (:meth:`KairosPolicy.match_dense` over :meth:`_restrict`), built in a few
        numpy calls by :func:`dispatcher.policies.strict_dense.strict_round` where it can be (the
        same matrix, element for element; not when a subclass changes the cost or the laxity weight
        is not 1)."""
        if LAXITY_WEIGHT == 1.0 and type(self)._restrict is KairosStrictPolicy._restrict \
                and type(self)._terms is KairosPolicy._terms and type(self).pair_costs is KairosPolicy.pair_costs:
            got = strict_round(self.predictor, self.base_type, self.xi, q, workers, now)
            if got is not None:
                return got
        return super().match_dense(q, workers, now)

    def _large_round(self, pc: PairCosts, on_time_only: bool) -> tuple[np.ndarray, np.ndarray] | None:
        """The on-time pairs by the min-cost flow (late pairs are never dispatched, so they are not
        listed); the best-effort round (every query hopeless: the paper's cost, every pair) by
        the class matching, as ``kairos``."""
        return match_on_time(pc) if on_time_only else match_classes(pc)

    def _restrict(self, t: RoundTerms) -> tuple[np.ndarray, np.ndarray | None]:
        """The paper's cost plus each query's laxity, with the pairs that miss Eq. 5 (with ξ) masked
        out: their cost exceeds the sum of any on-time pairs, and they are not dispatched. The
        paper's cost and every pair when every query in the view is late on every worker, even an
        idle one (best effort)."""
        fastest = (t.L - t.busy[None, :]).min(axis=1)                # service on the fastest type
        if (fastest > t.slack).all():                                # every query hopeless
            return t.cost, None
        on_time = t.L <= t.slack[:, None]                            # Eq. 5 holds (with ξ)
        laxity = np.maximum(t.slack - fastest, 0.0)                  # ms it may still wait
        return _mask(t.cost + LAXITY_WEIGHT * laxity[:, None], on_time), on_time

    def _restrict_pairs(self, pc: PairCosts) -> tuple[PairCosts, bool]:
        """:meth:`_restrict` on the per-type costs: the laxity is each query's ``extra`` on its
        on-time pairs, a late pair costs the mask's M (:func:`_mask`), only on-time pairs are
        dispatched. The fastest service is the least over the pool's types (the dense form reads
        it back from L − busy, equal to within an ulp)."""
        fastest = pc.S.min(axis=1)
        if (fastest > pc.slack).all():                               # every query hopeless
            return pc, False
        extra = LAXITY_WEIGHT * np.maximum(pc.slack - fastest, 0.0)
        top = max_on_time_cost(pc.with_late(pc.late, extra))
        big = 1.0 + min(pc.shape) * top
        return pc.with_late(np.full_like(pc.late, big), extra), True

    def _match_one(self, q: QueryView, workers: Sequence[WorkerView], now: float) -> list[Assignment]:
        """One waiting query, on scalars: the argmin of its cost row over the workers where it meets
        Eq. 5, dispatched when that worker is idle; when no type could serve it in time even idle
        (hopeless), the paper's argmin (:meth:`KairosPolicy._match_one`)."""
        best, j, by_type, slack = self._best_one(q, workers, now)
        if j < 0 and min(by_type.values()) > slack:
            j = best                                   # hopeless: the paper's argmin, best effort
        if j < 0:
            return []
        w = workers[j]
        return [Assignment(q.query_id, w.worker_id)] if w.idle else []


def _mask(cost: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """``cost`` with every pair not ``allowed`` set to M > min(m, n) × (the largest allowed cost):
    an assignment with one more allowed pair always costs less than one with fewer (costs are
    >= 0), so the solver maximises the allowed pairs first, then minimises their cost."""
    top = float(np.max(cost, where=allowed, initial=0.0))
    big = 1.0 + min(cost.shape) * top
    return np.where(allowed, cost, big)
