"""The model loop per model inside the joint pool (pure; issue #24 deliverable 4).

When the fleet gives each model workers of its own (:mod:`scaler.fleet.worker_assignment`), the INFaaS
round (:func:`variants.infaas.model_decision.decide`: variant states, model autoscaler, VM-autoscaler
rules; INFaaS §4.2) runs once per model over that model's workers, its variants and its own load,
so that the autoscaler never loads a model onto another model's worker nor unloads a model from
the workers planned for it. A worker's variants of other models (a worker starts with every
configured model loaded) are left out of its snapshot: nothing routes those queries to it.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Mapping

from variants.infaas.model_decision import ModelDecision, ModelInputs, ModelLoopParams, ModelLoopState, decide


def split_by_model(inputs: ModelInputs, serves: Mapping[str, str]) -> dict[str, ModelInputs]:
    """One round's inputs per model: the workers that serve it (those without an assignment serve
    any), with only its variants loaded, its variants, and its load, batch and SLO."""
    model_of = {v.name: v.model for v in inputs.variants}
    models = sorted({v.model for v in inputs.variants})
    out = {}
    for m in models:
        workers = tuple(replace(w, loaded=tuple(v for v in w.loaded if model_of.get(v, v) == m),
                                served=tuple(s for s in w.served if model_of.get(s[0], s[0]) == m))
                        for w in inputs.workers if serves.get(w.worker, m) == m)
        out[m] = replace(inputs, workers=workers, variants=tuple(v for v in inputs.variants if v.model == m),
                         load_qps={m: inputs.load_qps.get(m, 0.0)}, mean_batch={m: inputs.mean_batch.get(m, 1.0)},
                         slo_ms={m: inputs.slo_ms[m]} if m in inputs.slo_ms else {})
    return out


def decide_per_model(inputs: ModelInputs, serves: Mapping[str, str], states: Mapping[str, ModelLoopState],
                     params: ModelLoopParams) -> tuple[ModelDecision, dict[str, ModelLoopState]]:
    """:func:`decide` for each model over its own workers (:func:`split_by_model`), merged: the
    placements, VM decisions and reports of all, each model's unmet load and shortfall."""
    new_states: dict[str, ModelLoopState] = {}
    parts: list[ModelDecision] = []
    for m, sub in split_by_model(inputs, serves).items():
        dec, new_states[m] = decide(sub, states.get(m, ModelLoopState()), params)
        parts.append(dec)
    merged = ModelDecision(
        placements=tuple(p for d in parts for p in d.placements),
        plan=None,
        vm=tuple(v for d in parts for v in d.vm),
        states={k: s for d in parts for k, s in d.states.items()},
        reports=tuple(r for d in parts for r in d.reports),
        unmet_qps={m: q for d in parts for m, q in d.unmet_qps.items()},
        shortfall_qps={m: q for d in parts for m, q in d.shortfall_qps.items()},
    )
    return merged, new_states


__all__ = ["decide_per_model", "split_by_model"]
