"""Routing by the accuracy plan on the live path (Proteus §3 request router, issue #13 "Routing by
the plan"): an accuracy-scaled application's queries go to the variants the plan placed, in the
plan's proportions; the matching round then serves each query on a worker where its variant is
loaded (:mod:`dispatcher.routing`).

The model loop (:class:`daemon.loops.model_loop.ModelLoop`, deciding with
:func:`variants.accuracy.plan_round.accuracy_round`) hands the plan in with :meth:`AccuracyRouting.set_plan`.
At admission a query that names the application (no variant, and a ``min_accuracy`` the plan's pick
meets) takes the variant of the worker :class:`dispatcher.accuracy.plan_router.PlanRouter` picks; others go
through getVariant (INFaaS §4.1) as before. When a plan moves a variant off every worker, the
queries still waiting for it are routed again by the new plan instead of waiting for a variant
that will not come back.

**SlackFit mode** (``accuracy_scaling.mode: slackfit``; SuperServe §4.2): no plan; every variant of
an application stays loaded, a query of it waits unbound, and when it is dispatched to a worker
:meth:`AccuracyRouting.bind` chooses the variant and how many waiting queries go with it.

A part of :class:`dispatcher.server.Dispatcher` (``d.accuracy``). Owns: the router, the plan's
placement, each application's demand window, the late-bound applications. Takes: placement
(``variant_meta``, ``models``, ``app_models``, ``cfg_models``, ``variant_model``, ``variant_ms``), the
worker registry (its workers, read only), the waiting queries (:meth:`dispatcher.queries.QueryBook.waiting`),
the round trigger's ``kick``, the clock and the matching's tunables (ξ).
"""
from __future__ import annotations

import itertools
from typing import Callable, Iterable, Iterator, Mapping, Sequence

from dispatcher.workers.placement import VariantPlacement
from dispatcher.accuracy.plan_router import PlanRouter
from dispatcher.queries import Query
from dispatcher.runtime import MatchTunables
from dispatcher.window import DemandWindow
from dispatcher.workers.registry import WorkerRegistry, WorkerState
from variants.accuracy.slackfit import LATE_RATE_WINDOW_S, bind_at_dispatch, pareto


class AccuracyRouting:
    """The live accuracy plan's routing (see the module docstring)."""

    def __init__(self, placement: VariantPlacement, registry: WorkerRegistry,
                 waiting: Callable[[], Iterable[Query]], kick: Callable[[], None], clock: Callable[[], float],
                 tunables: MatchTunables) -> None:
        self.variants = placement
        self.registry = registry
        self.waiting = waiting
        self.kick = kick
        self.clock = clock
        self.tunables = tunables
        self.router = PlanRouter()
        self.placement: dict[str, str | None] = {}     # worker -> accuracy-scaled variant it hosts
        self.windows: dict[str, DemandWindow] = {}     # application -> its arrivals
        self.rerouted = 0                               # queued queries moved to the new plan's variants
        #: applications whose variant is chosen per dispatch (SlackFit mode), not by a plan
        self.late_bound: set[str] = set()
        self.bound: dict[str, int] = {}                # variant -> queries SlackFit sent to it

    # -- demand ------------------------------------------------------------------------------------
    def record(self, application: str, batch: int, now: float) -> None:
        w = self.windows.get(application)
        if w is None:
            w = self.windows[application] = DemandWindow()
        w.record(batch, now)

    def rate(self, application: str, window_s: float, now: float | None = None) -> float:
        """Arrivals of ``application`` per second over the last ``window_s`` seconds (to ``now``,
        default the clock's)."""
        w = self.windows.get(application)
        return w.arrival_rate(self.clock() if now is None else now, window_s) if w is not None else 0.0

    def mean_batch(self, application: str) -> float:
        w = self.windows.get(application)
        return (w.mean_batch() or 1.0) if w is not None else 1.0

    # -- the plan ----------------------------------------------------------------------------------
    def set_plan(self, placement: Mapping[str, str | None], routing: Mapping[str, Mapping[str, float]]) -> None:
        """A new plan: worker -> variant, application -> worker -> fraction; queued queries whose
        variant the plan no longer places are routed again."""
        self.placement = dict(placement)
        self.router.set_plan(routing)
        for q in list(self.waiting()):
            self.repin_if_unplaced(q)
        self.kick()

    def repin_if_unplaced(self, q: Query) -> None:
        """A waiting query of a planned application whose variant no plan worker hosts any more
        (a swap, or a worker that said it does not hold it) takes the plan's variant now."""
        if not q.application or not self.router.workers_for(q.application):
            return
        if q.variant in self.placement.values():
            return
        v = self.route(q.application, q.min_accuracy)
        if v is not None:
            self._repin(q, v)
            self.rerouted += 1

    def route(self, application: str, min_accuracy: float) -> str | None:
        """The variant for the next query of ``application``: the plan's pick when it meets
        ``min_accuracy``; None when the plan does not serve the application (getVariant decides)."""
        w = self.router.route(application)
        v = self.placement.get(w) if w is not None else None
        if v is None:
            return None
        meta = self.variants.variant_meta.get(v)
        return v if meta is not None and meta.accuracy >= min_accuracy else None

    # -- SlackFit: the variant at dispatch -----------------------------------------------------------
    def holds(self, w: WorkerState, application: str, floor: float = 0.0) -> bool:
        """Whether ``w`` holds a variant of ``application`` at or above ``floor`` (a late-bound query
        with that ``min_accuracy`` may go there); stops at the first."""
        return next(self._resident(w, application, floor), None) is not None

    def _resident(self, w: WorkerState, application: str, floor: float) -> Iterator[str]:
        p = self.variants
        models = p.app_models.get(application, ())
        loaded = w.loaded if w.loaded is not None else p.cfg_models
        return (v for v in loaded if p.variant_model(v) in models
                and (meta := p.variant_meta.get(v)) is not None and meta.accuracy >= floor)

    def bind(self, q: Query, w: WorkerState, now: float, waiting: Sequence[Query]) -> list[Query]:
        """SlackFit on the live path (SuperServe §4.2; :func:`variants.accuracy.slackfit.choose_for_queue`, the
        rule that did best in the simulator): among the variants of ``q``'s application resident on
        ``w`` (at or above the query's ``min_accuracy``), the most accurate one that serves ``q`` and
        the waiting queries behind it (``waiting``, queue order, those whose inputs stack with it) within
        ``q``'s slack, in one call; when none does, the fastest with the largest batch that fits (one
        query at least). ``q`` and the queries that join it take that variant; returns the joiners."""
        p = self.variants
        names = sorted(self._resident(w, q.application, q.min_accuracy))   # never empty: the group key holds the floor
        if not names:
            return []
        sig = q.sig
        group = [q] + [x for x in waiting if sig is not None and x.min_accuracy <= q.min_accuracy and x.sig == sig]
        rows = list(itertools.accumulate(x.batch for x in group))

        def seconds(v: str) -> Callable[[int], float]:
            return lambda n: p.variant_ms(v, w.instance_type, rows[min(n, len(rows)) - 1]) / 1000.0

        fns = {v: (p.variant_meta[v].accuracy, seconds(v)) for v in names}
        fits = {v: max(1, sum(1 for r in rows if r <= p.models[p.variant_model(v)].max_batch)) for v in names}
        front = pareto(fns)
        slack_s = (self.tunables.xi * q.qos_ms - 1000.0 * (now - q.arrival)) / 1000.0
        # each worker holding the application must keep up with its share of the arrivals, and takes
        # its share of what waits (idle ones take the rest in this round). Both are read per
        # dispatch: a share refreshed per model tick lagged a spike's first second, and SlackFit
        # kept choosing the slow variants while the queue grew (93.6 % in CI's run of
        # tests/e2e/test_accuracy_e2e.py); holders cached per tick missed workers that loaded since
        holders = [x for x in self.registry.workers.values()
                   if not (x.draining or x.removed) and self.holds(x, q.application)]
        variant, n = bind_at_dispatch(fns, fits, front, len(group), slack_s,
                                      self.rate(q.application, LATE_RATE_WINDOW_S, now), len(holders),
                                      sum(1 for x in holders if x.idle and x is not w))
        for x in group[:n]:
            self._repin(x, variant)
        self.bound[variant] = self.bound.get(variant, 0) + n
        return group[1:n]

    def _repin(self, q: Query, variant: str) -> None:
        p = self.variants
        m = p.models.get(p.variant_meta[variant].model, q.model)
        q.variant, q.model = variant, m
        q.view = q.view._replace(model=m.profile_name)


__all__ = ["AccuracyRouting"]
