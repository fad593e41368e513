"""Routing by the accuracy plan on the live path (Proteus §3 request router, issue #13 "Routing by
the plan"): an accuracy-scaled application's queries go to the variants the plan placed, in the
plan's proportions; the matching round then serves each query on a worker where its variant is
loaded (:mod:`dispatcher.routing`).

The model loop (:class:`daemon.model_loop.ModelLoop`, deciding with
:func:`variants.accuracy_round.accuracy_round`) hands the plan in with :meth:`AccuracyRouting.set_plan`.
At admission a query that names the application (no variant, and a ``min_accuracy`` the plan's pick
meets) takes the variant of the worker :class:`dispatcher.plan_routing.PlanRouter` picks; others go
through getVariant (INFaaS §4.1) as before. When a plan moves a variant off every worker, the
queries still waiting for it are routed again by the new plan instead of waiting for a variant
that will not come back.

A part of :class:`dispatcher.server.Dispatcher` (``d.accuracy``). Owns: the router, the plan's
placement, each application's demand window. Reads: ``clock``, ``placement`` (``variant_meta``,
``models``), ``_queue``, ``_retry``, ``_kick``.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Mapping

from dispatcher.plan_routing import PlanRouter
from dispatcher.window import DemandWindow

if TYPE_CHECKING:
    from dispatcher.admission import _Query
    from dispatcher.server import Dispatcher


class AccuracyRouting:
    """The live accuracy plan's routing (see the module docstring)."""

    def __init__(self, d: "Dispatcher") -> None:
        self.d = d
        self.router = PlanRouter()
        self.placement: dict[str, str | None] = {}     # worker -> accuracy-scaled variant it hosts
        self.windows: dict[str, DemandWindow] = {}     # application -> its arrivals
        self.plans = 0
        self.rerouted = 0

    # -- demand ------------------------------------------------------------------------------------
    def record(self, application: str, batch: int, now: float) -> None:
        w = self.windows.get(application)
        if w is None:
            w = self.windows[application] = DemandWindow()
        w.record(batch, now)

    def rate(self, application: str, window_s: float) -> float:
        """Arrivals of ``application`` per second over the last ``window_s`` seconds."""
        w = self.windows.get(application)
        return w.arrival_rate(self.d.clock(), window_s) if w is not None else 0.0

    def mean_batch(self, application: str) -> float:
        w = self.windows.get(application)
        return (w.snapshot(self.d.clock()).mean_batch or 1.0) if w is not None else 1.0

    # -- the plan ----------------------------------------------------------------------------------
    def set_plan(self, placement: Mapping[str, str | None], routing: Mapping[str, Mapping[str, float]]) -> None:
        """A new plan: worker -> variant, application -> worker -> fraction; queued queries whose
        variant the plan no longer places are routed again."""
        self.placement = dict(placement)
        self.router.set_plan(routing)
        self.plans += 1
        for q in list(self.d._retry.values()) + list(self.d._queue.values()):
            self.repin_if_unplaced(q)
        self.d._kick()

    def repin_if_unplaced(self, q: "_Query") -> None:
        """A waiting query of a planned application whose variant no plan worker hosts any more
        (a swap, or a worker that said it does not hold it) takes the plan's variant now."""
        if not q.application or not self.router.workers_for(q.application):
            return
        if q.variant in self.placement.values():
            return
        v = self.route(q.application, 0.0)
        if v is not None:
            self._repin(q, v)

    def route(self, application: str, min_accuracy: float) -> str | None:
        """The variant for the next query of ``application``: the plan's pick when it meets
        ``min_accuracy``; None when the plan does not serve the application (getVariant decides)."""
        w = self.router.route(application)
        v = self.placement.get(w) if w is not None else None
        if v is None:
            return None
        meta = self.d.placement.variant_meta.get(v)
        return v if meta is not None and meta.accuracy >= min_accuracy else None

    def _repin(self, q: "_Query", variant: str) -> None:
        p = self.d.placement
        m = p.models.get(p.variant_meta[variant].model, q.model)
        q.variant, q.model = variant, m
        q.view = dataclasses.replace(q.view, model=m.profile_name)
        self.rerouted += 1


__all__ = ["AccuracyRouting"]
