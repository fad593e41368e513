"""The model loop's accuracy round on the virtual clock (issue #25): ``daemon.loops.accuracy_loop.AccuracyLoop.tick``
(plan mode), step for step, over an application's query loop (:class:`sim.replay.variant_lane.VariantLoop`).

Every model tick :class:`ReplayAccuracyRound` builds the round's inputs from the lane (the live
workers, the variant each hosts, the application's SLO, its arrival rate from the fleet's demand
window), asks :func:`variants.accuracy.plan_round.due` whether to plan, and when it says so solves
:func:`variants.accuracy.plan_round.plan_for` over the variants' latencies at the window's mean batch
(``accuracy_loop.with_profiles``). As live, the swaps load first and the plan routes once they are
loaded (``load_s`` later, :meth:`sim.replay.variant_lane.VariantLoop.set_plan`); no round runs while
loads are in flight (the live tick awaits them). The plan's unmet load
(:meth:`variants.accuracy.allocation.Allocation.unmet_qps`) is what the fleet's capacity hint moves
on (``ModelLoop.tick`` → ``Daemon._on_vm``): the fleet plans the application at its most accurate
variant for the measured demand, so the accuracy round bridges a burst while the fleet boots, and
only demand no variant can serve raises the hint.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

from dispatcher.window import DemandWindow
from sim.replay.variant_lane import VariantLoop
from variants.accuracy.allocation import Allocation
from variants.accuracy.planner import VariantProfile
from variants.accuracy import plan_round as ar
from variants.accuracy.plan_round import AccuracyInputs, AccuracyRoundParams, AccuracyState


class ReplayAccuracyRound:
    """One application's accuracy round (see the module docstring)."""

    def __init__(self, lane: VariantLoop, window: DemandWindow, params: AccuracyRoundParams, load_s: float,
                 schedule: Callable[[float, Callable[[], None]], None], now: Callable[[], float]) -> None:
        self.lane, self.window, self.params, self.load_s = lane, window, params, load_s
        self.schedule, self.now = schedule, now
        self.state = AccuracyState()
        self.pending = False                   # a plan's loads are in flight
        self.plans: list[tuple[float, Allocation]] = []
        self.swap_log: list[tuple[float, str, str, str]] = []   # (at, worker, from, to) when routed

    @property
    def app(self) -> str:
        return self.lane.app.name

    def inputs(self, now: float) -> AccuracyInputs:
        """``accuracy_loop.accuracy_inputs`` over the lane."""
        live = {wid: w for wid, w in self.lane.workers.items() if not (w.draining or w.leaving)}
        return AccuracyInputs(now, {wid: w.itype for wid, w in live.items()},
                              {wid: w.variant for wid, w in live.items()}, (), {self.app: self.lane.qos_ms},
                              lambda _app, window_s: self.window.arrival_rate(now, window_s))

    def with_profiles(self, inp: AccuracyInputs) -> AccuracyInputs:
        """``accuracy_loop.with_profiles``: each variant's latency on the live types at the mean batch."""
        batch = self.window.mean_batch() or 1.0
        app = self.lane.app
        types = sorted(set(inp.workers.values()))
        pred = self.lane.times.predictor
        profiles = tuple(VariantProfile(self.app, v, acc, {t: {1: float(pred.predict_ms(v, t, batch))}
                                                           for t in types if (v, t) in app.latency})
                         for v, acc in app.variants)
        return replace(inp, variants=profiles)

    def tick(self, now: float) -> Allocation | None:
        if self.pending:
            return None
        inp = self.inputs(now)
        demand, self.state = ar.due(inp, self.state, self.params)
        if demand is None:
            return None
        alloc = ar.plan_for(self.with_profiles(inp), demand, self.params)
        self.state = replace(self.state, last=alloc)
        self.plans.append((now, alloc))
        placement = dict(alloc.placement)
        routing = dict(alloc.routing.get(self.app, {}))
        moves = ar.swaps(inp.hosted, placement)

        def route() -> None:
            self.pending = False
            at = self.now()
            hosted = self.lane.hosted()
            for w, old, new in moves:
                if new is not None and w in hosted:
                    self.swap_log.append((at, w, old or "", new))
            self.lane.set_plan(placement, routing, at)

        if any(new is not None for _, _, new in moves):
            self.pending = True
            self.schedule(now + self.load_s, route)
        else:
            self.lane.set_plan(placement, routing, now)
        return alloc

    def unmet(self) -> dict[str, float]:
        """The last plan's unmet load (what the capacity hint moves on); none before a plan."""
        last = self.state.last
        return last.unmet_qps() if last is not None else {}


__all__ = ["ReplayAccuracyRound"]
