"""The model loop's accuracy round, the adapter (issue #13 "Live"; Proteus §3-§4): snapshot the
dispatcher, decide with :func:`variants.accuracy.plan_round.accuracy_round`, apply the swaps with the
Worker RPCs and hand the routing to the dispatcher (:class:`dispatcher.accuracy.routing.AccuracyRouting`).

The trigger runs on the event loop (it reads the demand windows); the MILP runs in a thread on a
snapshot, so queries keep flowing while it solves. A swap loads the new variant first, then routes by the new plan, then unloads the old one: the worker
holds both for the length of a load, and no query waits on a worker with nothing it may serve. A load
that fails leaves the worker with what it had (and out of the new routing). Demand the plan cannot
serve at any allowed accuracy goes to the fleet loop as unmet load (the capacity hint), as the INFaaS
round's does; this loop never launches or terminates anything (DESIGN invariant 1).
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import TYPE_CHECKING

from daemon.observe.recent import Recent
from variants.accuracy.allocation import Allocation
from variants.accuracy.planner import VariantProfile
from variants.accuracy import plan_round as ar
from variants.accuracy.plan_round import AccuracyInputs, AccuracyRoundParams, AccuracyState

if TYPE_CHECKING:
    from dispatcher.server import Dispatcher

log = logging.getLogger("costscale.model")

#: SlackFit mode: a variant whose load failed on a worker is tried there again after this long (s)
RETRY_S = 60.0


def scaled_applications(d: "Dispatcher") -> dict[str, list[str]]:
    """Application -> its variants, for the applications with variants of more than one accuracy."""
    p = d.placement
    out = {}
    for app in sorted(p.app_models):
        names = p.variants_for(app, "")
        if len({p.variant_meta[n].accuracy for n in names}) > 1:
            out[app] = names
    return out


def accuracy_inputs(d: "Dispatcher", now: float, plan: dict[str, str | None]) -> AccuracyInputs:
    """What the round's trigger sees: the live workers (not parked, draining or removed), the scaled
    variant each hosts (the plan's when it holds several, mid-swap), the applications' SLOs and
    rates. The profiles :func:`with_profiles` adds only when a plan is due."""
    apps = scaled_applications(d)
    workers = {iid: w.instance_type for iid, w in d.workers.items() if not (w.draining or w.removed or w.parked)}
    scaled = {n for names in apps.values() for n in names}
    hosted: dict[str, str | None] = {}
    for iid in workers:
        mine = sorted(scaled & d.loaded_on(d.workers[iid]))
        hosted[iid] = plan.get(iid) if plan.get(iid) in mine else (mine[0] if mine else None)
    return AccuracyInputs(now, workers, hosted, (), {app: d.placement.apps[app].qos_ms for app in apps}, d.accuracy.rate)


def with_profiles(d: "Dispatcher", inp: AccuracyInputs) -> AccuracyInputs:
    """``inp`` with every scaled variant's latency on the live types at its application's mean batch
    (one query per call: batch 1 to the planner)."""
    p = d.placement
    hardware = {w.instance_type: w.hardware for iid, w in d.workers.items() if iid in inp.workers}
    profiles = []
    for app, names in scaled_applications(d).items():
        batch = d.accuracy.mean_batch(app)
        for n in names:
            if p.variant_meta[n].model not in p.models:
                continue
            lat = {t: {1: p.variant_ms(n, t, batch)} for t, hw in sorted(hardware.items()) if p.runs_on(n, hw)}
            profiles.append(VariantProfile(app, n, p.variant_meta[n].accuracy, lat))
    return replace(inp, variants=tuple(profiles))


class AccuracyLoop:
    """One accuracy round per model-loop tick (see the module docstring)."""

    def __init__(self, dispatcher: "Dispatcher") -> None:
        self.d = dispatcher
        self.state = AccuracyState()
        #: the latest plans and failed loads (daemon.observe.recent: a daemon runs for months)
        self.allocations: Recent[tuple[float, Allocation]] = Recent()
        self.failed: Recent[tuple[str, str, str]] = Recent()   # (worker, variant, why)
        self._refused: dict[tuple[str, str], float] = {}   # (worker, variant) -> when its load failed

    def reset(self) -> None:
        """Accuracy scaling turned off (a reload): drop the plan, so getVariant routes again."""
        self.d.accuracy.late_bound = set()    # SlackFit mode's late binding ends too
        if self.state.last is not None:
            self.d.accuracy.set_plan({}, {})
            self.state = AccuracyState()

    async def resident(self, now: float) -> int:
        """SlackFit mode: every variant of every scaled application loaded on each live worker that
        runs it (its hardware, its service at batch 1 within the SLO); the applications' queries are
        bound to a variant at dispatch. Returns the loads started."""
        d = self.d
        if self.state.last is not None:     # from plan mode: the plan's routing no longer applies
            d.accuracy.set_plan({}, {})
            self.state = AccuracyState()
        apps = scaled_applications(d)
        d.accuracy.late_bound = set(apps)
        p = d.placement
        todo = []
        for iid, w in list(d.workers.items()):
            if w.draining or w.removed or w.parked:
                continue
            have = d.loaded_on(w)
            for app, names in apps.items():
                for n in names:
                    if (n in have or p.variant_meta[n].model not in p.models or not p.runs_on(n, w.hardware)
                            or now - self._refused.get((iid, n), -RETRY_S) < RETRY_S):
                        continue
                    if p.variant_ms(n, w.instance_type, 1.0) < p.apps[app].qos_ms:
                        todo.append((iid, n))
        got = await asyncio.gather(*(d.load_variant(w, v) for w, v in todo), return_exceptions=True)
        for (w, v), r in zip(todo, got):
            if isinstance(r, BaseException) or not r[0]:
                self.failed.append((w, v, str(r if isinstance(r, BaseException) else r[1])))
                self._refused[(w, v)] = now
        return len(todo)

    async def tick(self, now: float, params: AccuracyRoundParams) -> Allocation | None:
        d = self.d
        if params.mode == "slackfit":
            await self.resident(now)
            return None
        d.accuracy.late_bound = set()       # (from SlackFit mode, a reload): queries are routed by plans
        inp = accuracy_inputs(d, now, d.accuracy.placement)
        demand, self.state = ar.due(inp, self.state, params)
        if demand is None:
            return None
        inp = with_profiles(d, inp)
        # the MILP off the event loop (queries keep flowing meanwhile); its inputs are a snapshot
        alloc = await asyncio.to_thread(ar.plan_for, inp, demand, params)
        self.state = replace(self.state, last=alloc)
        self.allocations.append((now, alloc))
        moves = ar.swaps(inp.hosted, alloc.placement)
        todo = [(w, new) for w, _, new in moves if new is not None]
        got = await asyncio.gather(*(d.load_variant(w, v) for w, v in todo), return_exceptions=True)
        placement = dict(alloc.placement)
        for (w, v), r in zip(todo, got):
            if isinstance(r, BaseException) or not r[0]:
                why = str(r if isinstance(r, BaseException) else r[1])
                self.failed.append((w, v, why))
                log.warning("accuracy plan: load %s on %s failed: %s", v, w, why)
                placement[w] = inp.hosted.get(w)
        routing = {app: {w: f for w, f in fr.items() if placement.get(w) == alloc.placement.get(w)}
                   for app, fr in alloc.routing.items()}
        d.accuracy.set_plan(placement, routing)
        old = [(w, prev) for w, prev, _ in moves if prev is not None and placement.get(w) != prev]
        await asyncio.gather(*(d.unload_variant(w, v) for w, v in old), return_exceptions=True)
        plan = alloc.plan
        log.info("accuracy plan for %s q/s: %s; served %s q/s at accuracy %s (%d swaps, %.0f ms, %s)",
                 _fmt(plan.demand_qps), ", ".join(f"{w}={v}" for w, v in sorted(placement.items())),
                 _fmt(plan.served_qps), "-" if plan.effective_accuracy is None else f"{plan.effective_accuracy:.4f}",
                 len(moves), plan.solve_ms, plan.status)
        return alloc


def _fmt(m: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.1f}" for k, v in sorted(m.items()))


__all__ = ["AccuracyLoop", "accuracy_inputs", "scaled_applications", "with_profiles"]
