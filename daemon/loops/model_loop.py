"""The model loop (DESIGN "Three loops": ~1 s; INFaaS §4.2 model-vertical scaling): the adapter.

Every ``intervals.model_s`` :class:`ModelLoop` snapshots the dispatcher (live workers, what each
served, the variants, each model's arrivals), runs the pure round
:func:`variants.infaas.model_decision.decide`, applies its Load/Unload placements with the Worker RPCs
(unloads first: they free the slots) and hands the VM-autoscaler's decisions to ``on_vm`` (the
daemon turns them into the fleet loop's capacity hint, :func:`variants.infaas.capacity_hint.next_capacity_hint`).
This loop never launches or terminates anything: the money invariant (DESIGN invariant 1) stays
with the fleet planner. With ``model_scaling.accuracy_scaling`` on, each round is the accuracy
planner's instead (:mod:`daemon.loops.accuracy_loop`, Proteus); the INFaaS autoscaler does not run.
"""
from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Awaitable, Callable, Mapping, Sequence

from daemon.loops.accuracy_loop import AccuracyLoop
from daemon.loops.pipeline_loop import PipelineLoop
from daemon.observe.recent import Recent
from variants.runtime.executor import ANY_HARDWARE
from variants.infaas.model_decision import (ModelDecision, ModelInputs, ModelLoopParams, ModelLoopState, Placement, model_params_for,
                                     VariantCandidate, WorkerSnapshot, above_floor, decide, profiled_ms)
from variants.infaas.model_split import decide_per_model
from variants.infaas.vm_autoscaler import VmDecision

if TYPE_CHECKING:
    from config.schema import Config

log = logging.getLogger("costscale.model")


class ModelLoop:
    """Reads the dispatcher, calls :func:`decide`, applies placements through the Worker RPCs and
    hands VM decisions to ``on_vm`` (the daemon turns them into a capacity hint for the fleet)."""

    def __init__(self, dispatcher, profiles, params: ModelLoopParams = ModelLoopParams(),
                 on_vm: Callable[[Sequence[VmDecision], Mapping[str, float]], Awaitable[None]] | None = None,
                 follows_config: bool = False) -> None:
        self.d = dispatcher
        self.profiles = profiles
        self.params = params
        self.follows_config = follows_config   # a reload sets params from the config (model_params_for)
        self.on_vm = on_vm
        self.state = ModelLoopState()
        self.states: dict[str, ModelLoopState] = {}     # per model, when models have workers of their own
        self.last_at: float | None = None
        self.rounds = 0
        self.applied: Recent[Placement] = Recent()    # (placements skipped because the worker was parked meanwhile are in neither)
        self.failed: Recent[tuple[Placement, str]] = Recent()
        self.interval_s = 1.0
        self.accuracy = AccuracyLoop(dispatcher)
        self.pipelines = PipelineLoop(dispatcher, getattr(dispatcher.cfg, "pipelines", ()))

    def reload(self, cfg: Config) -> None:
        """A reloaded config (SIGHUP): the loop's parameters and interval from it, unless its
        parameters were given explicitly (``follows_config`` false: both are kept)."""
        if self.follows_config:
            self.params = model_params_for(cfg)
            self.interval_s = cfg.intervals.model_s

    def _profile(self, model: str, itype: str, batch: float, stat: str) -> float:
        """Mean: the dispatcher's latency model (profile, else what it has learned). p99: the
        profile; 0 for an unprofiled pair (the state machine then skips the interference check)."""
        spec = self.d._models.get(model)
        pkey = spec.profile_name if spec is not None else model
        return profiled_ms(self.d.predictor.predict_ms, self.profiles, pkey, itype, batch, stat)

    def snapshot(self, now: float) -> ModelInputs:
        d = self.d
        interval = max(now - self.last_at if self.last_at is not None else self.interval_s, 1e-3)
        samples = d.take_samples()
        workers = []
        for iid, w in list(d.workers.items()):
            if w.draining or w.removed:
                continue
            served = tuple((v, int(b), float(ms)) for v, b, ms, off in samples.get(iid, []) if not off)
            workers.append(WorkerSnapshot(iid, w.instance_type, w.hardware, d.utilization(w, now),
                                          tuple(sorted(d.loaded_on(w))), served))
        variants = []
        for name, meta in d._variant_meta.items():
            variants.append(VariantCandidate(name, meta.model, meta.hardware, d.speed_factor(name),
                                             max(meta.load_latency_ms / 1000.0, 0.1)))
        if not variants:  # no registry: the config models as their own base variants
            variants = [VariantCandidate(m.name, m.name, ANY_HARDWARE) for m in d.cfg.models]
        else:             # none below its application's floor (models[].min_accuracy): it would serve nothing
            apps = d.placement.apps
            floor_of = {n: max(m.min_accuracy, apps[m.application].min_accuracy if m.application in apps else 0.0)
                        for n, m in d._models.items()}
            variants = list(above_floor(variants, {n: meta.accuracy for n, meta in d._variant_meta.items()}, floor_of))
        load: dict[str, float] = {}
        mean_batch: dict[str, float] = {}
        for model in sorted({v.model for v in variants}):
            snap = d.window_snapshot(model)        # each model's own arrivals (after routing)
            load[model] = snap.arrival_qps
            mean_batch[model] = snap.mean_batch or 1.0
        return ModelInputs(now=now, interval_s=interval, workers=tuple(workers), variants=tuple(variants),
                           load_qps=load, mean_batch=mean_batch,
                           slo_ms={n: m.qos_ms for n, m in d._models.items()},
                           price_per_hour=dict(d._prices), profile=self._profile)

    async def tick(self, now: float) -> ModelDecision | None:
        if self.pipelines.graphs:               # Loki's round first: it may move workers between tasks
            await self.pipelines.tick(now)
        if self.params.accuracy is not None:   # accuracy scaling: the accuracy planner places the variants
            self.d.take_samples()               # the INFaaS round that reads them does not run in this mode
            await self.accuracy.tick(now, self.params.accuracy)
            self.rounds += 1
            if self.on_vm is not None:
                last = self.accuracy.state.last
                await self.on_vm((), last.unmet_qps() if last is not None else {})
            return None
        self.accuracy.reset()                   # turned off by a reload: getVariant routes again
        inputs = self.snapshot(now)
        self.last_at = now
        if self.d.serves and len(self.d.cfg.models) > 1:   # each model on its own workers (issue #24)
            decision, self.states = decide_per_model(inputs, self.d.serves, self.states, self.params)
        else:
            decision, self.state = decide(inputs, self.state, self.params)
        self.rounds += 1
        self.d.variant_states = dict(decision.states)
        unloads = [p for p in decision.placements if p.action == "unload"]
        loads = [p for p in decision.placements if p.action == "load"]
        for batch in (unloads, loads):  # unloads first: they free the slots
            # a worker parked (or drained) since the snapshot is the fleet's now: leave it alone
            batch = [p for p in batch if (w := self.d.workers.get(p.worker)) is not None and not w.draining]
            results = await asyncio.gather(*(
                (self.d.unload_variant if p.action == "unload" else self.d.load_variant)(p.worker, p.variant)
                for p in batch), return_exceptions=True)
            for p, r in zip(batch, results):
                ok = not isinstance(r, BaseException) and r[0]
                if ok:
                    self.applied.append(p)
                else:
                    self.failed.append((p, str(r if isinstance(r, BaseException) else r[1])))
        if decision.placements:
            log.info("model loop: %s", ", ".join(f"{p.action} {p.variant} on {p.worker}" for p in decision.placements))
        if self.on_vm is not None:
            await self.on_vm(decision.vm, decision.shortfall_qps)
        return decision
