"""Pipeline queries, task by task (issue #26, Loki §3): a Submit whose ``application`` names a
configured pipeline runs its root task, then each task's outputs become requests of its children,
down the tree, and one reply carries the end-to-end result.

Each step is an ordinary query of the task's model through the dispatcher's own ``submit`` (by its
application name when the model is a registered application, so that accuracy scaling picks its
variant, each task on its own: Proteus per model, over the task's demand with its fan-out): it is
admitted, matched to an idle worker by the configured policy (Kairos by default), re-dispatched
elsewhere when its worker fails, counted in its model's demand window (so the fleet planner sees
each task's load) and in its model's outcomes.

- **Fan-out** (Loki §4.2): one request of a task makes ``factor`` requests of each child on
  average: the integer part always, one more with the fractional part's probability (a seeded
  generator). The counts seen are kept per (task, child) (:attr:`PipelineRunner.fanout`), the
  measured factor Loki feeds back to the planner; the configured value is the prior.
- **Data**: a step gets its parent's output tensors as inputs when the pipeline's query carried
  inputs; a query given as a batch size (emulation) passes the batch size down.
- **Deadlines and early dropping** (Loki §5.2): each task's budget is the dispatcher's predicted
  latency of its model at the batch on the fastest live type among the workers serving that model. Before a step runs, the time left of
  the pipeline's SLO must cover its task's budget and those below it
  (:func:`variants.pipelines.routing.step_slo`); if it does not, the request can no longer meet the
  end-to-end SLO and is dropped there with DEADLINE_EXCEEDED (counted in ``dropped_early``), and the
  query ends. A step that goes on gets as its SLO the time left minus what the tasks below need (with
  ``dispatcher.on_deadline: drop`` its admission also refuses it when no worker can meet that).
- **One answer**: every step succeeds and the reply has the leaves' outputs, the variants used
  (``task=variant`` for each task, in the tree's order, several when its requests went to several),
  the end-to-end latency and accuracy (the mean over the leaf requests of the product of the
  known accuracies along each one's path, a model without one unscored; 0 when none is known); or the first step's
  error ends the whole query with that one typed error: never half an answer.
- **Retries**: a pipeline query with an ``idempotency_key`` gives each step a key derived from it,
  so a retried Submit collects the steps already answered instead of running them again.

:class:`PipelineRunner` is a part of :class:`dispatcher.server.Dispatcher` (``d.pipelines``). It
takes the config's pipelines, the dispatcher's ``submit`` (a step is a query of its own, its
outcome recorded), the clock, the serving workers (:class:`ServingWorkers`: the registry), the
known models (:class:`KnownModels`: placement), the latency model and the base type (before any
worker serves, a task is budgeted on it).
"""
from __future__ import annotations

import asyncio
import math
import random
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Mapping, Protocol, Sequence, Union

import grpc

from config.sections.pipeline_graph import Pipeline
from config.sections.pipelines import PipelineSpec
from config.schema import ModelSpec
from dispatcher.policy import LatencyPredictor
from dispatcher.proto import costscale_pb2 as pb
from dispatcher.window import DemandWindow
from variants.pipelines.routing import step_slo

Outcome = Union[pb.SubmitReply, tuple[grpc.StatusCode, str]]
SC = grpc.StatusCode


class ServingWorkers(Protocol):
    """The live workers (``draining``, ``removed``, ``instance_type`` of each) and the model each
    serves (:class:`dispatcher.workers.registry.WorkerRegistry`)."""

    @property
    def workers(self) -> Mapping[str, Any]: ...

    @property
    def serves(self) -> Mapping[str, str]: ...


class KnownModels(Protocol):
    """The models and applications the dispatcher serves (:class:`dispatcher.workers.placement.VariantPlacement`)."""

    @property
    def models(self) -> Mapping[str, ModelSpec]: ...

    @property
    def apps(self) -> Mapping[str, ModelSpec]: ...


@dataclass
class _Step:
    """What one request of a task (and everything below it) produced."""

    outputs: list = field(default_factory=list)          # the leaves' output tensors
    leaf_accuracy: list[float | None] = field(default_factory=list)
    variants: dict[str, set[str]] = field(default_factory=dict)
    service_ms: float = 0.0                              # along the slowest path


class PipelineRunner:
    """Runs the config's pipelines, each step through the dispatcher's ``submit`` (module docstring)."""

    def __init__(self, pipelines: Sequence[PipelineSpec], submit: Callable[[pb.SubmitRequest], Awaitable[Outcome]],
                 clock: Callable[[], float], workers: ServingWorkers, known: KnownModels,
                 predictor: LatencyPredictor, base_type: Callable[[], str], seed: int = 0) -> None:
        self.submit_step = submit
        self.clock = clock
        self.live = workers
        self.known = known
        self.predictor = predictor
        self.base_type = base_type
        self.graphs: dict[str, Pipeline] = {p.name: p.graph() for p in pipelines}
        self.rng = random.Random(seed)
        #: (pipeline, task, child) -> [requests of the task, requests made of the child]: the measured factor
        self.fanout: dict[tuple[str, str, str], list[int]] = {}
        self.dropped_early = 0
        self.served = 0
        #: each pipeline's queries where they enter (a valid one, before its first step): the pipeline's
        #: demand series (``daemon.loops.demand_minutes``, issue #39); its steps count in their models' windows
        self.windows: dict[str, DemandWindow] = {}

    def handles(self, r: pb.SubmitRequest) -> bool:
        return bool(r.application) and r.application in self.graphs and not r.model and not r.variant

    def measured_factor(self, pipeline: str, task: str, child: str) -> float | None:
        n = self.fanout.get((pipeline, task, child))
        return n[1] / n[0] if n and n[0] else None

    def _budgets(self, pipe: Pipeline, batch: int) -> dict[str, float]:
        """Each task's expected time: its model's predicted latency at ``batch`` on the fastest live
        type among the workers that serve it (with several models, each has its own; one pass)."""
        serves = self.live.serves
        wanted = set(pipe.models.values())
        types: dict[str, set[str]] = {m: set() for m in wanted}
        anyone: set[str] = set()
        for iid, w in self.live.workers.items():
            if w.draining or w.removed:
                continue
            anyone.add(w.instance_type)
            m = serves.get(iid)
            for model in (wanted if m is None else ({m} & wanted)):
                types[model].add(w.instance_type)
        out = {}
        for task, model in pipe.models.items():
            spec = self.known.models.get(model)
            key = spec.profile_name if spec is not None else model
            on = types[model] or anyone or {self.base_type()}     # an application's workers: any live one
            out[task] = min(float(self.predictor.predict_ms(key, t, batch)) for t in on)
        return out

    async def submit(self, r: pb.SubmitRequest) -> Outcome:
        pipe = self.graphs[r.application]
        batch = int(r.batch_size)
        if batch <= 0 and r.inputs:
            shape = list(r.inputs[0].shape)
            batch = int(shape[0]) if shape else 1
        if batch <= 0:
            return SC.INVALID_ARGUMENT, "give batch_size or inputs"
        slo = float(r.latency_slo_ms) if r.latency_slo_ms > 0 else pipe.slo_ms
        if not math.isfinite(slo):
            return SC.INVALID_ARGUMENT, f"latency_slo_ms must be a number, got {r.latency_slo_ms}"
        t0 = self.clock()
        self.windows.setdefault(pipe.name, DemandWindow()).record(batch, t0)
        budgets = self._budgets(pipe, batch)
        out = await self._run(pipe, pipe.root, list(r.inputs), batch, t0, slo, budgets, r.idempotency_key, "0", None)
        if isinstance(out, tuple):
            if out[0] == SC.DEADLINE_EXCEEDED:
                self.dropped_early += 1
            return out
        self.served += 1
        total_ms = (self.clock() - t0) * 1000.0
        used = ";".join(f"{t}={','.join(sorted(out.variants[t]))}" for t in pipe.tasks if t in out.variants)
        known = [a for a in out.leaf_accuracy if a is not None]
        acc = sum(known) / len(known) if known else 0.0
        return pb.SubmitReply(outputs=out.outputs, model=pipe.name, variant=used, total_ms=total_ms,
                              service_ms=out.service_ms, queue_ms=max(0.0, total_ms - out.service_ms),
                              slo_met=total_ms <= slo, accuracy=acc)

    async def _run(self, pipe: Pipeline, task: str, inputs: list, batch: int, t0: float, slo: float,
                   budgets: dict[str, float], key: str, path: str, acc_so_far: float | None) -> "_Step | tuple[SC, str]":
        """One request of ``task`` and, below it, its children's."""
        left_ms = slo - (self.clock() - t0) * 1000.0
        own_slo = step_slo(pipe, budgets, task, left_ms)
        if own_slo is None:                           # this task and those below no longer fit (Loki §5.2)
            return SC.DEADLINE_EXCEEDED, (f"pipeline {pipe.name}: dropped before {task}: {max(left_ms, 0.0):.0f} ms of "
                                          f"the {slo:g} ms SLO left, the tasks from here need more")
        model = pipe.models[task]
        # a registered application (a family's variants) is asked by its application name, so the
        # variant comes from its accuracy plan (or getVariant) as for any query of it
        app = model in self.known.apps
        req = pb.SubmitRequest(model="" if app else model, application=model if app else "", batch_size=batch,
                               inputs=inputs, latency_slo_ms=own_slo, idempotency_key=f"{key}/{path}" if key else "")
        rep = await self.submit_step(req)
        if isinstance(rep, tuple):
            code, msg = rep
            return code, f"pipeline {pipe.name}: task {task}: {msg}"
        # the product of the accuracies known along the path (a model with no measured accuracy is
        # unscored, as the planner takes it: variants.pipelines.inputs); None while none is known
        acc = (acc_so_far if acc_so_far is not None else 1.0) * rep.accuracy if rep.accuracy > 0 else acc_so_far
        children = pipe.edges.get(task, ())
        here = _Step(variants={task: {rep.variant or rep.model}}, service_ms=rep.service_ms)
        if not children:
            here.outputs = list(rep.outputs)
            here.leaf_accuracy = [acc]
            return here
        calls = []
        for e in children:
            f = pipe.factor(rep.variant, task, e.child) if rep.variant else e.factor
            n = int(f) + (1 if self.rng.random() < f - int(f) else 0)
            counts = self.fanout.setdefault((pipe.name, task, e.child), [0, 0])
            counts[0] += 1
            counts[1] += n
            child_inputs = list(rep.outputs) if inputs else []
            calls += [self._run(pipe, e.child, child_inputs, batch, t0, slo, budgets, key, f"{path}.{e.child}{i}", acc)
                      for i in range(n)]
        results = await asyncio.gather(*calls) if calls else []
        errors = [x for x in results if isinstance(x, tuple)]
        if errors:
            return errors[0]
        if not results:          # no child request made: this task's answer is the end of the path
            here.outputs = list(rep.outputs)
            here.leaf_accuracy = [acc]
            return here
        slowest = 0.0
        for x in results:
            assert not isinstance(x, tuple)
            here.outputs += x.outputs
            here.leaf_accuracy += x.leaf_accuracy
            for t, vs in x.variants.items():
                here.variants.setdefault(t, set()).update(vs)
            slowest = max(slowest, x.service_ms)
        here.service_ms += slowest
        return here


__all__ = ["PipelineRunner"]
