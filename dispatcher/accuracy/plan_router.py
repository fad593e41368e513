"""Query assignment by the accuracy plan (Proteus §3 "request router", §4 query assignment): each
model's queries go to the workers the plan routes it to, in the plan's proportions.

Deterministic smooth weighted round robin: every query adds each routed worker's fraction to its
credit, the worker with the most credit takes the query and gives back 1. A worker's count is its
fraction of the queries minus its credit, and the credits stay bounded, so over any run of queries
every share stays within a few queries of its fraction (no random draws: a replay is repeatable, and
a small worker is not starved by bad luck). Pure: no clock, no I/O.
"""
from __future__ import annotations

from typing import Mapping


class PlanRouter:
    """The routing of the current plan, per model (``AccuracyPlan.routing``)."""

    def __init__(self, routing: Mapping[str, Mapping[str, float]] | None = None) -> None:
        self._routing: dict[str, dict[str, float]] = {}
        self._credit: dict[str, dict[str, float]] = {}
        if routing is not None:
            self.set_plan(routing)

    def set_plan(self, routing: Mapping[str, Mapping[str, float]]) -> None:
        """A new plan: fractions per model (workers with a fraction <= 0 are left out); credits of
        workers that stay routed are kept, so a replan that changes nothing changes no order."""
        new: dict[str, dict[str, float]] = {}
        for model, fr in routing.items():
            live = {w: float(f) for w, f in fr.items() if f > 0}
            total = sum(live.values())
            if total > 0:
                new[model] = {w: f / total for w, f in sorted(live.items())}
        self._credit = {m: {w: self._credit.get(m, {}).get(w, 0.0) for w in fr} for m, fr in new.items()}
        self._routing = new

    def workers_for(self, model: str) -> dict[str, float]:
        return dict(self._routing.get(model, {}))

    def route(self, model: str) -> str | None:
        """The worker for the next query of ``model``; None when the plan serves none of it."""
        fr = self._routing.get(model)
        if not fr:
            return None
        credit = self._credit[model]
        best = None
        for w, f in fr.items():
            c = credit[w] = credit[w] + f
            if best is None or c > credit[best]:
                best = w
        credit[best] -= 1.0  # type: ignore[index]
        return best


__all__ = ["PlanRouter"]
