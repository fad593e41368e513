"""Loki's pipeline round on the virtual clock (issue #26): :func:`variants.pipelines.scaling.decide`
over the workers of a pipeline's task lanes, each model tick, as the model loop runs it.

- **When** (the accuracy round's trigger, :func:`variants.accuracy.trigger.replan`, on the pipeline's
  root rate): at the first look, at once on a burst, every ``replan_s`` when the demand moved, and
  at once when the pipeline's workers changed (one joined, left, or was parked). No round runs
  while the last one's loads are in flight.
- **Its workers**: every live worker of the pipeline's task lanes, with the task and variant it
  serves (a worker the last round moved and that is still loading counts with its new task).
- **Applying a decision**: a worker that changes task is pinned to the task's model
  (:attr:`sim.replay.workers.ReplayWorkers.pins`, kept over the fleet's own assignment of instances to
  models) and moves lanes with a load (:meth:`sim.replay.workers.ReplayWorkers.assign`); the others'
  variants and every task's routing change ``load_s`` later (:meth:`sim.replay.variant_lane.VariantLoop.set_plan`),
  and a moved worker takes its variant and routing when it joins its new lane.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Mapping, MutableMapping

from config.sections.pipeline_graph import Pipeline
from dispatcher.window import DemandWindow
from sim.replay.query_loop import QueryLoop
from sim.replay.variant_lane import VariantLoop
from variants.accuracy.planner import VariantProfile
from variants.accuracy.plan_round import AccuracyRoundParams
from variants.pipelines.scaling import (PipelineDecision, PipelineWorker, RoundState, decide, due, round_params,
                                       task_qos, with_measured)

if TYPE_CHECKING:
    from config.schema import Config
    from sim.replay.pipelines import PipelineReplay


class ReplayPipelineRound:
    """One pipeline's round (see the module docstring). ``lanes``: model -> its lane; ``pins``: the
    fleet's instance -> model overrides (shared); ``sync``: the fleet's worker sync (applies pins)."""

    def __init__(self, pipe: Pipeline, lanes: Mapping[str, QueryLoop], windows: Mapping[str, DemandWindow],
                 task_qos_ms: Mapping[str, float], params: AccuracyRoundParams, load_s: float,
                 schedule: Callable[[float, Callable[[], None]], None], now: Callable[[], float],
                 pins: MutableMapping[str, str], sync: Callable[[], None],
                 floors: Mapping[str, float] | None = None,
                 fanout: Callable[[], Mapping[tuple[str, str], tuple[int, int]]] | None = None) -> None:
        self.pipe = pipe
        self.fanout = fanout or (lambda: {})          # (task, child) -> (requests, made): the measured factors
        self.floors = dict(floors or {})              # task -> its model's min_accuracy
        self.lanes = {t: lanes[m] for t, m in pipe.models.items()}
        self.windows = {t: windows[m] for t, m in pipe.models.items()}
        self.task_qos_ms = dict(task_qos_ms)
        self.params, self.load_s, self.schedule, self.now = params, load_s, schedule, now
        self.pins, self.sync = pins, sync
        self.state = RoundState()
        self.last: PipelineDecision | None = None
        self.pending_until = float("-inf")
        self.decisions: list[tuple[float, PipelineDecision]] = []
        self.moves = 0
        self.swaps = 0
        self._itype: dict[str, str] = {}                  # worker -> type, at the last decision
        self._applied: dict[str, frozenset[str]] = {}     # task -> its lane's workers when last applied

    def owned(self) -> list[str]:
        """The models whose variants the round places (a family's; a plain model's task keeps its
        model loop's INFaaS round, as live)."""
        return [self.pipe.models[t] for t, lane in self.lanes.items() if isinstance(lane, VariantLoop)]

    # -- inputs --------------------------------------------------------------------------------
    def _top(self, task: str) -> str:
        lane = self.lanes[task]
        return lane.app.top if isinstance(lane, VariantLoop) else lane.times.model

    def workers(self) -> list[PipelineWorker]:
        """The live workers of the task lanes, and those moving in (pinned, not yet joined)."""
        out: dict[str, PipelineWorker] = {}
        seen: set[str] = set()
        for task, lane in self.lanes.items():
            for wid, w in lane.workers.items():
                seen.add(wid)
                if not (w.draining or w.leaving):
                    variant = w.variant if isinstance(lane, VariantLoop) else lane.times.model
                    out[wid] = PipelineWorker(wid, w.itype, task, variant)
        last = self.last
        if last is not None:          # moved by the last round, in no lane yet (its load not done)
            for wid, task in last.task_of.items():
                itype = self._itype.get(wid)
                if wid not in seen and itype is not None and self.pins.get(wid) == self.pipe.models[task]:
                    out[wid] = PipelineWorker(wid, itype, task, last.variant_of[wid])
        return sorted(out.values(), key=lambda w: w.wid)

    def variants(self, types: set[str]) -> dict[str, list[VariantProfile]]:
        """Each task's variants at its window's mean batch on ``types`` (as batch 1)."""
        out: dict[str, list[VariantProfile]] = {}
        for task, lane in self.lanes.items():
            batch = self.windows[task].mean_batch() or 1.0
            pred = lane.times.predictor
            if isinstance(lane, VariantLoop):
                app = lane.app
                floor = self.floors.get(task, 0.0)
                out[task] = [VariantProfile(app.name, v, acc, {t: {1: float(pred.predict_ms(v, t, batch))}
                                                                for t in sorted(types) if (v, t) in app.latency})
                             for v, acc in app.variants if acc >= floor - 1e-12 or v == app.top]
            else:
                m = lane.times.model
                out[task] = [VariantProfile(m, m, 1.0, {t: {1: float(pred.predict_ms(m, t, batch))} for t in sorted(types)})]
        return out

    def rate(self, window_s: float) -> float:
        return self.windows[self.pipe.root].arrival_rate(self.now(), window_s)

    # -- the round -----------------------------------------------------------------------------
    def tick(self, now: float) -> PipelineDecision | None:
        if self.pending_until > now:
            return None
        self._reapply(now)
        workers = self.workers()
        members = tuple((w.wid, w.itype) for w in workers)
        demand, self.state = due(self.state, members, now, self.rate, self.params.trigger)
        if demand is None:
            return None
        self._itype = {w.wid: w.itype for w in workers}
        dec = decide(with_measured(self.pipe, self.fanout()), self.variants({w.itype for w in workers}), workers,
                     demand, self.task_qos_ms, beta=self.params.beta, time_limit_s=self.params.time_limit_s)
        if dec is None:
            return None
        self.last = dec
        self.decisions.append((now, dec))
        moved = [w for w in workers if dec.task_of[w.wid] != w.task]
        swapped = [w for w in workers if dec.task_of[w.wid] == w.task and dec.variant_of[w.wid] != w.variant]
        self.moves += len(moved)
        self.swaps += len(swapped)
        for w in workers:
            self.pins[w.wid] = self.pipe.models[dec.task_of[w.wid]]
        if moved:
            self.sync()                     # the fleet's assignment takes the pins: the moves start
        if moved or swapped:
            self.pending_until = now + self.load_s
            self.schedule(now + self.load_s, lambda: self._apply(self.now()))
        else:
            self._apply(now)
        return dec

    def _apply(self, now: float) -> None:
        dec = self.last
        if dec is None:
            return
        for task, lane in self.lanes.items():
            if isinstance(lane, VariantLoop):
                placement = {w: v for w, v in dec.variant_of.items() if dec.task_of[w] == task}
                lane.set_plan(placement, dec.routing.get(task, {}), now)
        self._applied = {t: frozenset(lane.workers) for t, lane in self.lanes.items()}

    def _reapply(self, now: float) -> None:
        """A moved worker that joined its lane since the decision takes its variant and routing."""
        if self.last is None or not self._applied:
            return
        if any(frozenset(lane.workers) != self._applied.get(t) for t, lane in self.lanes.items()):
            self._apply(now)

    def summary(self) -> dict[str, object]:
        """What the round did: plans made, how many by step 2, workers moved between tasks, variant
        swaps, the most workers a task held."""
        steps = [d.plan.step for _, d in self.decisions]
        most: dict[str, int] = {}
        for _, d in self.decisions:
            for t in self.pipe.tasks:
                most[t] = max(most.get(t, 0), sum(1 for x in d.task_of.values() if x == t))
        return {"scaling": "loki", "rounds": len(self.decisions), "accuracy_steps": steps.count("accuracy"),
                "moves": self.moves, "swaps": self.swaps, "most_workers": most}


def pipeline_rounds(cfg: "Config", pipes: "PipelineReplay", lanes: Mapping[str, QueryLoop],
                    windows: Mapping[str, DemandWindow], now: Callable[[], float], pins: MutableMapping[str, str],
                    sync: Callable[[], None], load_s: float,
                    schedule: Callable[[float, Callable[[], None]], None]) -> list[ReplayPipelineRound]:
    """A round for each pipeline with traffic whose ``scaling`` is ``loki``, over the fleet's
    ``windows``, clock (``now``), worker ``pins`` and worker ``sync``."""
    out = []
    for spec in cfg.pipelines:
        pipe = pipes.graphs.get(spec.name)
        if pipe is None or spec.scaling != "loki":
            continue
        out.append(ReplayPipelineRound(pipe, lanes, windows, task_qos(cfg, pipe), round_params(cfg), load_s,
                                       schedule, now, pins, sync,
                                       {t: cfg.model(m).min_accuracy for t, m in pipe.models.items()},
                                       lambda n=spec.name: {(t, c): (v[0], v[1]) for (p, t, c), v in pipes.fanout.items()
                                                            if p == n}))
    return out


__all__ = ["ReplayPipelineRound", "pipeline_rounds"]
