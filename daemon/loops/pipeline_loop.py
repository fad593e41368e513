"""Loki's pipeline round in the live model loop (issue #26), the adapter: each ``scaling: loki``
pipeline's workers planned together by :func:`variants.pipelines.scaling.decide`, the function the
replay runs (:mod:`sim.replay.pipeline_round`).

Every model tick, per pipeline: the live workers the fleet gave its tasks' models (``d.serves``; not
draining, parked or removed), each task's model at its window's mean batch on their types (the
dispatcher's latency model), the root model's arrival rate. When :func:`variants.pipelines.scaling.due`
says so, the decision's workers are pinned to their tasks' models (:attr:`PipelineLoop.pins`,
which the daemon lays over the fleet's assignment of instances to models, ``Daemon._sync_workers``)
and handed to the dispatcher at once (``set_assignment``: a worker that changes model loads it, and
takes the new model's queries once loaded). No round runs while a moved worker is still loading.

Live, a task serves its configured model: the variant families of ``models[].family`` are the
replay's (they name profiles, not ONNX files), so the live round moves workers between tasks and
leaves each task's variants to the model loop's INFaaS round, as for any model. A task naming a
registered application cannot be scaled this way (config validation says so).
"""
from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Mapping, Sequence

from config.sections.pipeline_graph import Pipeline
from daemon.observe.recent import Recent
from variants.accuracy.planner import VariantProfile
from variants.accuracy.plan_round import AccuracyRoundParams
from variants.pipelines.scaling import (PipelineDecision, PipelineWorker, RoundState, decide, due, round_params,
                                       task_qos, with_measured)

if TYPE_CHECKING:
    from config.sections.pipelines import PipelineSpec
    from dispatcher.server import Dispatcher

log = logging.getLogger("costscale.model")

#: how long a moved worker's model load holds its pipeline's rounds back (s)
LOAD_WAIT_S = 60.0


class PipelineLoop:
    """The live rounds of the config's Loki-scaled pipelines (see the module docstring)."""

    def __init__(self, d: "Dispatcher", pipelines: Sequence["PipelineSpec"]) -> None:
        self.d = d
        self.graphs: dict[str, Pipeline] = {p.name: p.graph() for p in pipelines if p.scaling == "loki"}
        self.qos = {n: task_qos(d.cfg, g) for n, g in self.graphs.items()}
        self.params = round_params(d.cfg) if self.graphs else AccuracyRoundParams()
        self.states: dict[str, RoundState] = {n: RoundState() for n in self.graphs}
        self.last: dict[str, PipelineDecision] = {}
        #: instance -> the model a round put it on (laid over the fleet's assignment)
        self.pins: dict[str, str] = {}
        self.decisions: Recent[tuple[float, str, PipelineDecision]] = Recent()
        self.moves = 0
        self._moved_at: dict[str, float] = {}        # instance -> when a round last moved it

    def _workers(self, pipe: Pipeline) -> list[PipelineWorker]:
        d = self.d
        task_of = {m: t for t, m in pipe.models.items()}
        out = []
        for iid, w in sorted(d.workers.items()):
            m = d.serves.get(iid)
            if m in task_of and not (w.draining or w.removed or w.parked):
                out.append(PipelineWorker(iid, w.instance_type, task_of[m], m))
        return out

    def _loading(self, pipe: Pipeline, now: float) -> bool:
        """A worker moved by a round in the last :data:`LOAD_WAIT_S` that does not hold its new model
        yet (one whose load failed or hangs stops holding the rounds back after that)."""
        d = self.d
        for iid, m in self.pins.items():
            w = d.workers.get(iid)
            if m in pipe.models.values() and w is not None and not w.removed and w.loaded is not None \
                    and now - self._moved_at.get(iid, -LOAD_WAIT_S) < LOAD_WAIT_S \
                    and not any(d.variant_model(v) == m for v in w.loaded):
                return True
        return False

    def _variants(self, pipe: Pipeline, types: set[str]) -> dict[str, list[VariantProfile]]:
        d = self.d
        out = {}
        for task, m in pipe.models.items():
            spec = d._models.get(m)
            key = spec.profile_name if spec is not None else m
            win = d.model_windows.get(m)
            batch = (win.mean_batch() if win is not None else 0.0) or 1.0
            out[task] = [VariantProfile(m, m, 1.0, {t: {1: float(d.predictor.predict_ms(key, t, batch))}
                                                    for t in sorted(types)})]
        return out

    def _rate(self, pipe: Pipeline, window_s: float) -> float:
        win = self.d.model_windows.get(pipe.models[pipe.root])
        return win.arrival_rate(self.d.clock(), window_s) if win is not None else 0.0

    async def tick(self, now: float) -> int:
        """One round per pipeline; returns the workers moved between tasks."""
        moved = 0
        live = set(self.d.workers)
        for iid in [i for i in self.pins if i not in live]:
            del self.pins[iid]
            self._moved_at.pop(iid, None)
        for name, pipe in self.graphs.items():
            if self._loading(pipe, now):
                continue
            workers = self._workers(pipe)
            members = tuple((w.wid, w.itype) for w in workers)
            demand, self.states[name] = due(self.states[name], members, now, lambda s, p=pipe: self._rate(p, s),
                                            self.params.trigger)
            if demand is None or not workers:
                continue
            variants = self._variants(pipe, {w.itype for w in workers})
            measured = {(t, c): (v[0], v[1]) for (p, t, c), v in self.d.pipelines.fanout.items() if p == name}
            dec = await asyncio.to_thread(decide, with_measured(pipe, measured), variants, workers, demand, self.qos[name],
                                          self.params.beta, self.params.time_limit_s)
            if dec is None:
                continue
            self.last[name] = dec
            self.decisions.append((now, name, dec))
            n = dec.moves(workers)
            for w in workers:
                self.pins[w.wid] = pipe.models[dec.task_of[w.wid]]
                if dec.task_of[w.wid] != w.task:
                    self._moved_at[w.wid] = now
            if n:
                moved += n
                self.d.set_assignment({**self.d.serves, **self.pins_for(self.d.serves)})
                log.info("pipeline %s at %.1f q/s: %s (%s step, %d worker(s) moved between tasks)", name, demand,
                         ", ".join(f"{t} {sum(1 for x in dec.task_of.values() if x == t)}" for t in pipe.tasks),
                         dec.plan.step, n)
        self.moves += moved
        return moved

    def pins_for(self, assignment: Mapping[str, str]) -> dict[str, str]:
        """The pins of the instances ``assignment`` names (the live ones)."""
        return {i: m for i, m in self.pins.items() if i in assignment}


__all__ = ["LOAD_WAIT_S", "PipelineLoop"]
