"""Confirmed max_throughput picks, kept per planning question (issue #16 deliverable 2).

The daemon confirms the similarity pick with Kairos+ (``scaler.planner.confirm.confirm_pick``, the
simulator as evaluator) off the fleet tick, and the fleet decision
(:func:`scaler.planner.model_plan.plan_fleet`) then reads the confirmed pool from here instead of the
bound's pick. A confirmation answers one question: the model, its batch mix, QoS, budget, the
types allowed (with their bounds and prices), ξ and the dispatcher's policy. :func:`pick_key` is
that question (the types' latency profiles fingerprinted, and the number of pools it may
simulate included), with the mix reduced to its quartiles and 95th percentile in 25 % bins
(:func:`mix_signature`): a measured mix moves a little from window to window, and a pick made for
one holds for the next. Plain data, no I/O.
"""
from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Hashable

import numpy as np

from config.profiles import LatencyProfile
from scaler.planner.batch_mix import BatchMix
from scaler.planner.plan_inputs import Plan, PlanInputs

#: the mix's signature: its batch size at these quantiles, each in a geometric bin of ratio
#: :data:`MIX_BIN_RATIO` (a pick holds across a few percent of batch size; two draws of one
#: distribution then share their signature, or fall on two neighbouring ones)
MIX_QUANTILES = (0.25, 0.5, 0.75, 0.95)
MIX_BIN_RATIO = 1.25
#: confirmed picks kept (oldest forgotten first)
CACHE_SIZE = 64

PickKey = Hashable


def mix_signature(mix: BatchMix) -> tuple[int, ...]:
    """The geometric bin (:data:`MIX_BIN_RATIO`) of the mix's batch size at each of :data:`MIX_QUANTILES`."""
    if not len(mix.sizes):
        return ()
    cdf = np.cumsum(mix.fractions)
    idx = np.minimum(np.searchsorted(cdf, np.asarray(MIX_QUANTILES) - 1e-9), len(mix.sizes) - 1)
    sizes = np.maximum(mix.sizes[idx].astype(float), 1.0)
    return tuple(int(b) for b in np.floor(np.log(sizes) / np.log(MIX_BIN_RATIO)))


def profile_digest(profile: LatencyProfile) -> str:
    """The profile's numbers, fingerprinted: a type profiled again (the daemon refreshes a drifted
    profile) asks a new question."""
    h = hashlib.blake2b(digest_size=12)
    for a in (profile.batch_sizes, profile.mean_ms, profile.p50_ms, profile.p99_ms):
        h.update(np.ascontiguousarray(a, dtype=float).tobytes())
    return h.hexdigest()


def pick_key(inputs: PlanInputs, policy: str, evaluations: int) -> PickKey:
    """The planning question a confirmation answers (see the module docstring), and how many pools
    answer it (``confirm_evaluations``)."""
    types = tuple((t, inputs.bounds.get(t, (0, None)), round(float(inputs.prices[t]), 6),
                   profile_digest(inputs.profiles[t])) for t in inputs.allowed)
    key = (inputs.model, round(inputs.qos_ms, 6), round(inputs.budget_per_hour, 6), types, round(inputs.xi, 6),
           inputs.qos_stat, policy, evaluations, mix_signature(inputs.mix))
    return key if inputs.quota is None else key + (inputs.quota.key(inputs.allowed),)   # the vCPU quotas


class PickCache:
    """Confirmed plans by :func:`pick_key`; at most ``size``, the oldest forgotten first. Read by the
    fleet decision (in a worker thread) and written by the confirmer on the event loop: ``get`` does
    not reorder, so a read never races a write on the order."""

    def __init__(self, size: int = CACHE_SIZE) -> None:
        self.size = size
        self._plans: OrderedDict[PickKey, Plan] = OrderedDict()

    def get(self, key: PickKey) -> Plan | None:
        return self._plans.get(key)

    def put(self, key: PickKey, plan: Plan) -> None:
        self._plans[key] = plan
        while len(self._plans) > self.size:
            self._plans.popitem(last=False)

    def __contains__(self, key: object) -> bool:
        return key in self._plans

    def __len__(self) -> int:
        return len(self._plans)


__all__ = ["CACHE_SIZE", "MIX_BIN_RATIO", "MIX_QUANTILES", "PickCache", "PickKey", "mix_signature", "pick_key"]
