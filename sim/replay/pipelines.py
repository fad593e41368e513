"""Pipelines in the replay (issue #26): a pipeline's queries run task by task through the models'
query loops on the one virtual clock, as ``dispatcher.pipeline_exec.PipelineRunner`` runs them live.

- A pipeline query arrives at its root task's model lane (beside that model's own queries, if the
  trace has any). When a request of a task is served, each child task gets ``factor`` requests
  (the integer part, one more with the fractional part's probability; a seeded generator), with the
  parent's batch, arriving at the child's model lane at that instant.
- Before a request is made, the time left of the pipeline's SLO must cover its task's expected time
  and the budgets of the tasks below it (:func:`variants.pipelines.routing.step_slo`; a task's
  expected time is its model's predicted latency at the batch on the fastest type its lane has); if
  not, the query is dropped there (``dropped_early``), as live. A request's own SLO is the time left
  less what the tasks below need (the lane admits and orders it by that, ``QueryLoop.qos_of``).
- A pipeline query is served when every request it made was; its latency is from its arrival to
  its last request's answer.
- The fleet sees each task's load in its model's demand window: the lanes record every request.

Each step is a query of its lane, in the lane's figures too. The lanes run in the tree's order at
each step of the replay's clock (a parent's completions before the child's lane runs), so a child
request never arrives in a lane's past. Limits, one line each: a model is a task of at most one
pipeline (one parent lane per lane), and a model below a pipeline's root has no queries of its own
in the trace. A pipeline with ``scaling: loki`` (the default) has Loki's round place its tasks'
workers and variants together (:mod:`sim.replay.pipeline_round`); with ``per_task`` each task runs
its model's variants as a model would.
"""
from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from config.sections.pipeline_graph import Pipeline
from config.profiles import ProfileTable
from config.schema import Config
from sim.metrics import nearest_rank
from sim.replay.query_loop import QueryLoop
from sim.workload import Workload
from variants.pipelines.routing import step_slo


def split_workloads(cfg: Config, workload: Any, model: str | None) -> tuple[Any, dict[str, Workload]]:
    """(the models' workloads, the pipelines' workloads): a mapping's pipeline names taken out; a
    single workload for ``model`` that names a pipeline becomes that pipeline's."""
    names = {p.name for p in cfg.pipelines}
    if isinstance(workload, Workload):
        return ({}, {model: workload}) if model in names else (workload, {})
    return ({m: w for m, w in workload.items() if m not in names},
            {m: w for m, w in workload.items() if m in names and len(w)})


class PipelineReplay:
    """The pipelines with queries in the workload, over the lanes (module docstring)."""

    def __init__(self, cfg: Config, loads: Mapping[str, Workload], pipeline_loads: Mapping[str, Workload],
                 seed: int = 0, profiles: ProfileTable | None = None) -> None:
        self.cfg, self.profiles = cfg, profiles
        self.graphs: dict[str, Pipeline] = {p.name: p.graph() for p in cfg.pipelines if p.name in pipeline_loads}
        self.loads = dict(pipeline_loads)
        self.task_of: dict[str, tuple[str, str]] = {}          # model -> (pipeline, task)
        for spec in cfg.pipelines:
            for t in spec.tasks:
                if spec.name in self.graphs and t.application is not None:
                    raise ValueError(f"pipeline {spec.name}: task {t.name!r} names application {t.application!r}, which "
                                     "only a running daemon knows: the replay needs a model entry (with its family)")
        for name, g in self.graphs.items():
            for task, model in g.models.items():
                if model in self.task_of:
                    other = self.task_of[model]
                    raise ValueError(f"model {model!r} is a task of two pipelines' replays ({other[0]}.{other[1]} and "
                                     f"{name}.{task}): the replay runs a model for one task")
                self.task_of[model] = (name, task)
                if task != g.root and len(loads.get(model, ())):
                    raise ValueError(f"model {model!r} has queries of its own and is task {task!r} below the root of "
                                     f"pipeline {name!r}: the replay takes it from the pipeline only")
        self.rng = np.random.default_rng([seed, 26])
        self.root_at: dict[str, np.ndarray] = {n: np.asarray(w.arrivals, dtype=float) for n, w in self.loads.items()}
        self.pending: dict[str, np.ndarray] = {n: np.ones(len(w), dtype=np.int64) for n, w in self.loads.items()}
        self.done_at: dict[str, np.ndarray] = {n: np.full(len(w), np.nan) for n, w in self.loads.items()}
        self.dropped: dict[str, np.ndarray] = {n: np.zeros(len(w), dtype=bool) for n, w in self.loads.items()}
        self.fanout: dict[tuple[str, str, str], list[int]] = {}
        self.req: dict[str, dict[int, tuple[str, int]]] = {m: {} for m in self.task_of}   # lane query -> (pipeline, its query)
        self.next_slot: dict[str, int] = {}
        self._root_index: dict[str, np.ndarray] = {}                 # pipeline query -> its root lane query
        #: lane query -> the product of the accuracies served along its path so far (variants' lanes only)
        self.acc_in: dict[str, dict[int, float]] = {m: {} for m in self.task_of}
        self.leaf_acc: dict[str, dict[int, list[float]]] = {n: {} for n in self.loads}
        self.lanes: dict[str, QueryLoop] = {}

    # -- the lanes' workloads ----------------------------------------------------------------------
    def lane_workloads(self, loads: Mapping[str, Workload]) -> dict[str, Workload]:
        """``loads`` with each pipeline's root queries merged into its root model's, and a slot (+inf
        until made) for every request a task below the root may get."""
        out = dict(loads)
        for name, g in self.graphs.items():
            root_model = g.models[g.root]
            own, pipe = loads.get(root_model), self.loads[name]
            arr = np.concatenate([own.arrivals, pipe.arrivals]) if own is not None else np.asarray(pipe.arrivals)
            bat = np.concatenate([own.batches, pipe.batches]) if own is not None else np.asarray(pipe.batches)
            order = np.argsort(arr, kind="stable")
            n_own = 0 if own is None else len(own)
            where = np.empty(len(arr), dtype=np.int64)
            where[order] = np.arange(len(arr))
            self._root_index[name] = where[n_own:]                       # pipeline query -> lane query
            for k, lq in enumerate(self._root_index[name]):
                self.req[root_model][int(lq)] = (name, k)
            out[root_model] = Workload(arr[order], np.asarray(bat)[order])
            for task in g.tasks:
                if task == g.root:
                    continue
                path, most = g.path_to(task), 1            # the most requests one query can make of it
                for p, c in zip(path, path[1:]):
                    most *= math.ceil(next(e.factor for e in g.edges[p] if e.child == c))
                slots = len(pipe) * most
                out[g.models[task]] = Workload(np.full(slots, np.inf), np.ones(slots, dtype=np.int64))
                self.next_slot[g.models[task]] = 0
        return out

    def attach(self, lanes: Mapping[str, QueryLoop]) -> None:
        """Hook the lanes: each served request makes its children's; the root requests' own SLOs."""
        self.lanes = dict(lanes)
        for model, (name, task) in self.task_of.items():
            lane = lanes[model]
            lane.on_served = (lambda q, now, m=model: self._served(m, q, now))
            if task == self.graphs[name].root:
                g = self.graphs[name]
                for k, lq in enumerate(self._root_index[name]):
                    b = int(lane._bat[int(lq)])
                    own = step_slo(g, self._budgets(g, b), g.root, g.slo_ms)
                    if own is None:                              # it cannot meet the SLO from the start
                        self.dropped[name][k] = True
                    lane.qos_of[int(lq)] = own if own is not None else 0.0   # 0: the lane refuses it

    def ordered(self, lanes: Mapping[str, QueryLoop]) -> list[QueryLoop]:
        """The lanes, every task's after its parent's."""
        def depth(model: str) -> int:
            if model not in self.task_of:
                return 0
            name, task = self.task_of[model]
            return len(self.graphs[name].path_to(task))
        return [lanes[m] for m in sorted(lanes, key=depth)]

    # -- the steps ---------------------------------------------------------------------------------
    def _expected_ms(self, model: str, batch: int) -> float:
        lane = self.lanes[model]
        types = {w.itype for w in lane.workers.values() if not (w.draining or w.leaving)}
        if not types:             # before any worker serves: the allowed types it has a profile on
            types = {t for t in self.cfg.catalog() if self.profiles is None or self.profiles.has(lane.times.model, t)}
        pred = lane.times.predictor
        return min((float(pred.predict_ms(lane.times.model, t, batch)) for t in types), default=0.0)

    def _budgets(self, g: Pipeline, batch: int) -> dict[str, float]:
        return {t: (self._expected_ms(m, batch) if m in self.lanes else 0.0) for t, m in g.models.items()}

    def _served(self, model: str, q: int, now: float) -> None:
        tag = self.req[model].get(q)
        if tag is None:
            return                                    # the model's own query
        name, k = tag
        g = self.graphs[name]
        _, task = self.task_of[model]
        lane = self.lanes[model]
        batch = int(lane._bat[q])
        self.pending[name][k] -= 1
        acc = self.acc_in[model].pop(q, 1.0)
        if hasattr(lane, "vaccuracy") and lane.qvariant[q] >= 0:       # a family's variant served it
            acc *= float(lane.vaccuracy[lane.qvariant[q]])
        if not g.edges.get(task):
            self.leaf_acc[name].setdefault(k, []).append(acc)
        if not self.dropped[name][k]:
            budgets = None
            for e in g.edges.get(task, ()):
                n = int(e.factor) + (1 if self.rng.random() < e.factor - int(e.factor) else 0)
                counts = self.fanout.setdefault((name, task, e.child), [0, 0])
                counts[0] += 1
                counts[1] += n
                if n == 0:
                    continue
                budgets = budgets or self._budgets(g, batch)
                own = step_slo(g, budgets, e.child, g.slo_ms - (now - self.root_at[name][k]) * 1000.0)
                if own is None:
                    self.dropped[name][k] = True      # it can no longer meet the SLO: dropped here
                    break
                child = self.lanes[g.models[e.child]]
                for _ in range(n):
                    slot = self.next_slot[g.models[e.child]]
                    self.next_slot[g.models[e.child]] = slot + 1
                    child.set_arrival(slot, now, batch)
                    child.qos_of[slot] = own
                    self.req[g.models[e.child]][slot] = (name, k)
                    self.acc_in[g.models[e.child]][slot] = acc
                    self.pending[name][k] += 1
        if self.pending[name][k] == 0 and not self.dropped[name][k]:
            self.done_at[name][k] = now

    # -- the end -----------------------------------------------------------------------------------
    def close(self) -> None:
        """Drop the slots no request took."""
        for model, n in self.next_slot.items():
            self.lanes[model].trim(n)

    def summary(self) -> dict[str, dict[str, Any]]:
        out = {}
        for name, g in self.graphs.items():
            n = len(self.root_at[name])
            ok = ~np.isnan(self.done_at[name])
            lat = np.where(ok, (self.done_at[name] - self.root_at[name]) * 1000.0, np.inf)
            within = ok & (lat <= g.slo_ms)
            served_lat = lat[ok]
            factors = {f"{t}>{c}": round(v[1] / v[0], 4) for (p, t, c), v in self.fanout.items() if p == name and v[0]}
            per_query = [float(np.mean(self.leaf_acc[name][k])) for k in np.flatnonzero(ok) if k in self.leaf_acc[name]]
            top_of = {t: (float(lane.vaccuracy.max()) if hasattr(lane := self.lanes[m], "vaccuracy") else 1.0)
                      for t, m in g.models.items()}
            # the most accurate end to end: each task's top variant, every leaf's path weighted alike
            top = float(np.mean([math.prod(top_of[t] for t in g.path_to(leaf)) for leaf in g.leaves()]))
            out[name] = {"queries": n, "served": int(ok.sum()), "within_slo": int(within.sum()),
                         "slo_attainment": round(float(within.sum()) / n, 6) if n else 1.0,
                         "dropped_early": int(self.dropped[name].sum()),
                         "p99_ms": round(nearest_rank(served_lat, 99), 3) if len(served_lat) else None,
                         "slo_ms": g.slo_ms, "measured_factors": factors,
                         "accuracy": round(float(np.mean(per_query)), 6) if per_query else None,
                         "top_accuracy": round(top, 6)}
        return out


__all__ = ["PipelineReplay", "split_workloads"]
