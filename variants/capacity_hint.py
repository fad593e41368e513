"""The capacity hint the model loop hands the fleet loop (INFaaS §4.2.3 VM-autoscaler; §4.2.2 step d).

The model loop never launches or terminates a worker: it only scales the demand the fleet planner
plans for, one ``step`` per round within ``[lo, hi]``, so the money invariant (DESIGN invariant 1)
stays with the planner.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from variants.vm_autoscaler import VmDecision


@dataclass(frozen=True)
class HintParams:
    step: float = 0.1
    lo: float = 0.5
    hi: float = 2.0


def next_capacity_hint(hint: float, decisions: Sequence[VmDecision], unmet_qps: Mapping[str, float],
                       p: HintParams = HintParams()) -> float:
    """The fleet planner plans for demand × hint. INFaaS §4.2.3 "add" (or load the model
    autoscaler could not place, §4.2.2 step d) raises it; "remove" lowers it; otherwise it
    relaxes toward 1."""
    if any(d.action == "add" for d in decisions) or any(q > 1e-6 for q in unmet_qps.values()):
        return min(p.hi, hint + p.step)
    if any(d.action == "remove" for d in decisions):
        return max(p.lo, hint - p.step)
    if hint > 1.0:
        return max(1.0, hint - p.step / 4)
    if hint < 1.0:
        return min(1.0, hint + p.step / 4)
    return hint
