"""The daemon's model loop on a virtual clock: ``daemon.loops.model_loop.ModelLoop.tick`` and
``Daemon._on_vm``, step for step, through the same pure decisions.

Every ``intervals.model_s`` :class:`ReplayModelLoop` snapshots the query loop (the workers taking
queries, their busy time and what they served since the last tick, each model's arrivals from the
demand window) into :class:`variants.infaas.model_decision.ModelInputs`, runs
:func:`variants.infaas.model_decision.decide` (variant state machine, model autoscaler, VM-autoscaler rules)
and turns its VM requests into the fleet planner's capacity hint with
:func:`variants.infaas.capacity_hint.next_capacity_hint` (rising only once the fleet holds its target,
:func:`scaler.fleet.step.fleet_settled`); a hint that moved :data:`scaler.fleet.step.HINT_REPLAN_DELTA`
replans at once (:func:`scaler.fleet.step.hint_replan`).

Each model's base variant only: a model without a family has no other variant with a profile until
a daemon generates and measures them (every worker holds the base variant and serves at the
profile); an application's members are the model loop's models in :mod:`sim.replay.infaas`.
"""
from __future__ import annotations

from config.profiles import ProfileTable
from config.schema import Config
from dispatcher.latency_model import LatencyModel
from scaler.fleet import step as fleet_step
from sim.replay.query_loop import QueryLoop
from variants.infaas.capacity_hint import next_capacity_hint
from variants.runtime.executor import ANY_HARDWARE
from variants.infaas.model_decision import (ModelDecision, ModelInputs, ModelLoopState, VariantCandidate, WorkerSnapshot,
                                     decide, model_params_for, profiled_ms)


class ReplayModelLoop:
    """The model loop over a :class:`sim.replay.query_loop.QueryLoop` (one model, its base variant)."""

    def __init__(self, cfg: Config, profiles: ProfileTable, predictor: LatencyModel, model_name: str) -> None:
        self.cfg, self.profiles, self.predictor = cfg, profiles, predictor
        self.params = model_params_for(cfg)
        self.model = cfg.model(model_name)
        self.state = ModelLoopState()
        self.last_at: float | None = None
        full = cfg.full_catalog()
        self.hardware = {t: it.hardware for t, it in full.items()}
        self.prices = {t: it.price_per_hour for t, it in full.items()}
        self.rounds = 0

    def _profile(self, model: str, itype: str, batch: float, stat: str) -> float:
        """``ModelLoop._profile``: the latency model's mean; the profile's p99 (0 when unprofiled)."""
        pkey = self.model.profile_name if model == self.model.name else model
        return profiled_ms(self.predictor.predict_ms, self.profiles, pkey, itype, batch, stat)

    def snapshot(self, q: QueryLoop, now: float, arrival_qps: float, mean_batch: float) -> ModelInputs:
        """``ModelLoop.snapshot`` over the query loop."""
        interval = max(now - self.last_at if self.last_at is not None else self.cfg.intervals.model_s, 1e-3)
        name = self.model.name
        workers = []
        for wid, (busy, served) in q.take_samples(now).items():
            itype = q.workers[wid].itype
            workers.append(WorkerSnapshot(wid, itype, self.hardware.get(itype, "cpu"), min(busy / interval, 1.0),
                                          (name,), tuple((name, int(b), float(ms)) for b, ms in served)))
        return ModelInputs(now=now, interval_s=interval, workers=tuple(workers),
                           variants=(VariantCandidate(name, name, ANY_HARDWARE),),
                           load_qps={name: arrival_qps}, mean_batch={name: mean_batch or 1.0},
                           slo_ms={name: self.model.qos_ms}, price_per_hour=self.prices, profile=self._profile)

    def tick(self, q: QueryLoop, now: float, arrival_qps: float, mean_batch: float) -> ModelDecision:
        inputs = self.snapshot(q, now, arrival_qps, mean_batch)
        self.last_at = now
        decision, self.state = decide(inputs, self.state, self.params)
        self.rounds += 1
        return decision

    def next_hint(self, hint: float, decision: ModelDecision, target: dict[str, int],
                  serving: dict[str, int]) -> float:
        """``Daemon._on_vm``: the new capacity hint."""
        return next_capacity_hint(hint, decision.vm, decision.shortfall_qps,
                                  settled=fleet_step.fleet_settled(target, serving))

__all__ = ["ReplayModelLoop"]
