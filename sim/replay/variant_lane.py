"""The query loop of an application (issue #25): queries any of its variants may answer, each worker
hosting one variant, as the live dispatcher serves an accuracy-scaled application.

:class:`VariantLoop` is :class:`sim.replay.query_loop.QueryLoop` with the live path's variant rules:

- admission (``dispatcher.accuracy.routing.AccuracyRouting.route``): a query takes the variant of
  the worker the accuracy plan's :class:`dispatcher.accuracy.plan_router.PlanRouter` picks; with accuracy
  scaling off, getVariant's (:attr:`VariantLoop.get_variant`, set by :mod:`sim.replay.infaas`);
  otherwise (before the first plan) the most accurate variant, which every worker hosts when it
  registers (the fleet plans the application at it);
- the matching round (``dispatcher.routing.RoutingRound.round``): the queries are grouped by
  variant, and each group is matched over the live workers that host its variant;
- service: the variant's profile on the worker's type (predicted and served);
- a new plan (:meth:`set_plan`, after its loads): the workers' variants change, and a waiting query
  whose variant no live worker hosts any more takes the new plan's
  (``AccuracyRouting.repin_if_unplaced``);
- SlackFit mode (``late``; ``accuracy_scaling.mode: slackfit``): every worker holds every variant
  (resident from registration: the live loop's loads are not timed here), queries wait unbound, and
  each call's variant and queries are chosen at dispatch by :func:`variants.accuracy.slackfit.bind_at_dispatch`,
  as ``AccuracyRouting.bind`` chooses them.

Each served query's variant is kept (:attr:`VariantLoop.qvariant`), so the report gives the served
accuracy over time.
"""
from __future__ import annotations

import bisect
import collections
import itertools
from typing import Callable, Mapping

import numpy as np

from dispatcher.accuracy.plan_router import PlanRouter
from dispatcher.policy import QueryView, WorkerView
from sim.replay.matching_round import LoopWorker
from sim.replay.outcomes import SERVED
from sim.replay.query_loop import QueryLoop
from sim.service import ServiceTimes
from variants.families.applications import Application
from variants.accuracy.slackfit import LATE_RATE_WINDOW_S, bind_at_dispatch, pareto


#: the service intervals kept per worker (live: ``WorkerState.busy``, 4096): enough for getVariant's
#: 2 s horizon at the fastest family variant's batch-1 latency (resnet-18, 24 ms: 83 calls)
BUSY_INTERVALS = 256


class VariantLoop(QueryLoop):
    """A :class:`QueryLoop` over an application's variants (see the module docstring). ``times``
    (variant → its service times) replaces the lane's one model's."""

    def __init__(self, arrivals: np.ndarray, batches: np.ndarray, *, app: Application,
                 variant_times: Mapping[str, ServiceTimes], late: bool = False, **kw: object) -> None:
        self.app = app
        self.vtimes = dict(variant_times)
        self.vnames = [v for v, _ in app.variants]
        self.vindex = {v: i for i, v in enumerate(self.vnames)}
        self.vaccuracy = np.array([a for _, a in app.variants], dtype=float)
        super().__init__(arrivals, batches, times=self.vtimes[app.top], **kw)  # type: ignore[arg-type]
        self.qvariant = np.full(self.n, -1, dtype=np.int16)   # index into vnames: pinned, then served by
        self.router = PlanRouter()
        self.placement: dict[str, str] = {}                    # the plan's worker -> variant
        self.swaps = 0
        self.rerouted = 0
        self.late = late           # SlackFit mode: every variant resident, chosen per call (bind_at_dispatch)
        self.batching = self.batching or late     # a late-bound call builds its own (see _call_for)
        self.bound: dict[str, int] = {}   # SlackFit: queries sent to each variant
        #: getVariant (INFaaS §4.1) at admission, accuracy scaling off (:mod:`sim.replay.infaas`):
        #: (batch, the query's own latency SLO in ms, 0: none) -> the variant; None: the most accurate
        self.get_variant: Callable[[int, float], str] | None = None
        #: worker -> its calls' (start, end, end - start), kept while getVariant runs (``WorkerState.busy`` live)
        self.busy: dict[str, collections.deque[tuple[float, float, float]]] | None = None
        #: workers with a call that started before the one before it ended, or ended before it started
        #: (never, one call at a time: getVariant then sums their intervals one by one, not by duration)
        self.busy_unordered: set[str] = set()

    # -- variants ------------------------------------------------------------------------------
    def _pin(self, q: int) -> int:
        """The variant index for query ``q``: the plan's pick; with no plan, getVariant's when it
        runs (accuracy scaling off), else the most accurate."""
        w = self.router.route(self.app.name)
        v = self.placement.get(w) if w is not None else None
        if v is None and self.get_variant is not None:     # a pipeline step asks for its own budget
            v = self.get_variant(self._bat[q], self.qos_of.get(q, 0.0))
        return self.vindex[v] if v is not None else 0

    def hosted(self) -> dict[str, str]:
        """Worker → the variant it hosts (the live ones)."""
        return {wid: w.variant for wid, w in self.workers.items() if not w.leaving}

    def set_plan(self, placement: Mapping[str, str | None], routing: Mapping[str, float], now: float) -> None:
        """The accuracy plan's loads are done: each placed worker hosts its variant, queries route by
        ``routing`` (worker → fraction), and waiting queries whose variant no live worker hosts
        take the plan's."""
        for wid, v in placement.items():
            w = self.workers.get(wid)
            if w is None or v is None or w.variant == v:
                continue
            w.variant, w.pred, w.view = v, self.vtimes[v].pred_ms(w.itype), None
            self.swaps += 1
        self.placement = {wid: v for wid, v in placement.items() if v is not None and wid in self.workers}
        self.router.set_plan({self.app.name: {w: f for w, f in routing.items() if w in self.placement}})
        self._repin_unplaced()
        self._round(now)

    def host(self, wid: str, variant: str, now: float) -> None:
        """A load done outside a plan (the INFaaS model loop or getVariant, accuracy scaling off;
        :mod:`sim.replay.infaas`): ``wid`` hosts ``variant`` in its one slot, and waiting queries
        whose variant no live worker hosts any more are pinned again."""
        w = self.workers.get(wid)
        if w is None or w.variant == variant:
            return
        w.variant, w.pred, w.view = variant, self.vtimes[variant].pred_ms(w.itype), None
        self.swaps += 1
        self._repin_unplaced()
        self._round(now)

    def _repin_unplaced(self) -> None:
        self._live = None
        live = {w.variant for w in self.workers.values() if not (w.draining or w.leaving)}
        for d in (self._retry, self._queue):
            for q, view in list(d.items()):
                if self.vnames[self.qvariant[q]] not in live:
                    self.qvariant[q] = self._pin(q)
                    d[q] = self._view(q, self._bat[q], view.arrival)
                    self.rerouted += 1

    # -- QueryLoop hooks -----------------------------------------------------------------------
    def add_worker(self, wid: str, itype: str, now: float, draining: bool = False) -> None:
        """A worker registers hosting the most accurate variant (what the fleet planned it for)."""
        if wid in self.workers:
            return
        super().add_worker(wid, itype, now, draining=True)       # no round before its variant is set
        w = self.workers[wid]
        w.variant, w.pred = self.app.top, self.vtimes[self.app.top].pred_ms(itype)
        if not draining:
            self.set_draining(wid, False, now)

    def _arrive(self, now: float) -> None:
        self.qvariant[self.i] = self._pin(self.i)
        super()._arrive(now)

    def _view(self, q: int, batch: int, arrival: float) -> QueryView:
        # a late-bound query is predicted at the application's profile (its most accurate variant)
        return QueryView(str(q), self.app.top if self.late else self.vnames[self.qvariant[q]], batch, arrival,
                         self.qos_of.get(q, self.qos_ms))

    def _pred_tables(self, types: frozenset[str]) -> list[list[float]]:
        return [vt.pred_ms(t) for vt in self.vtimes.values() for t in types if self.app.latency.get((vt.model, t))]

    def _match(self, qs: list[QueryView], views: list[WorkerView], now: float) -> None:
        if self.late:          # every worker holds every variant: one group
            super()._match(qs, views, now)
            return
        live = self._live or []
        # only a group whose variant an idle worker hosts is matched (a group's match dispatches
        # onto its own workers only, so which are idle is known before the first); in the order
        # the groups' first queries come
        idle = {w.variant for w in live if w.idle}
        groups: dict[str, list[QueryView]] = {}
        for v in qs:
            if v.model in idle:
                groups.setdefault(v.model, []).append(v)
        for variant, gqs in groups.items():
            super()._match(gqs, self._views([w for w in live if w.variant == variant]), now)

    def _call_for(self, head: QueryView, w: LoopWorker, now: float, reserved: set[str]) -> list[int]:
        """SlackFit mode (``AccuracyRouting.bind``, which takes precedence over joining as
        ``RoutingRound._dispatch`` gives it): the variant ``w`` runs and how many waiting queries join
        the head, from its slack on this worker; else the dispatcher's work-conserving join."""
        if not self.late:
            return super()._call_for(head, w, now, reserved)
        q = int(head.query_id)
        group = [q] + [int(x.query_id) for x in self._waiting_like(head, reserved)]
        rows = list(itertools.accumulate(self._bat[x] for x in group))
        mb = self.times.max_batch
        fns = {v: (acc, (lambda n, v=v: self.vtimes[v].pred_ms(w.itype)[min(rows[min(n, len(rows)) - 1], mb)] / 1000.0))
               for v, acc in self.app.variants if (v, w.itype) in self.app.latency}
        fits = {v: max(1, sum(1 for r in rows if r <= mb)) for v in fns}
        slack_s = (self.xi * self.qos_ms - 1000.0 * (now - self._arr[q])) / 1000.0
        live = self._live or []
        rate = (self.i - bisect.bisect_right(self._arr, now - LATE_RATE_WINDOW_S, 0, self.i)) / LATE_RATE_WINDOW_S
        variant, n = bind_at_dispatch(fns, fits, pareto(fns), len(group), slack_s, rate, len(live),
                                      sum(1 for x in live if x.idle and x is not w))
        self.bound[variant] = self.bound.get(variant, 0) + n
        w.variant, w.pred = variant, self.vtimes[variant].pred_ms(w.itype)
        return self._take(group[1:n])

    def _service_s(self, w: LoopWorker, q: int, rows: int) -> float:
        for x in (q, *w.joined):
            self.qvariant[x] = self.vindex[w.variant]
        s = self.vtimes[w.variant].actual_s(w.itype, q, rows)
        if self.busy is not None:        # getVariant reads each worker's recent service intervals
            dq = self.busy.setdefault(w.wid, collections.deque(maxlen=BUSY_INTERVALS))
            start, end = w.started, w.started + s
            if end < start or (dq and start < dq[-1][1]):
                self.busy_unordered.add(w.wid)
            dq.append((start, end, end - start))
        return s

    def trim(self, n: int) -> None:
        super().trim(n)
        self.qvariant = self.qvariant[:n]

    def served_accuracy(self) -> np.ndarray:
        """Per query, the accuracy of the variant that served it (nan: not served)."""
        out = np.full(self.n, np.nan)
        ok = self.outcome == SERVED
        out[ok] = self.vaccuracy[self.qvariant[ok]]
        return out


__all__ = ["VariantLoop"]
