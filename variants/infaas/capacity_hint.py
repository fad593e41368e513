"""The capacity hint the model loop hands the fleet loop (INFaaS §4.2.3 VM-autoscaler; §4.2.2 step d).

The model loop never launches or terminates a worker: it only scales the demand the fleet planner
plans for, one ``step`` per round within ``[lo, hi]``, so the money invariant (DESIGN invariant 1)
stays with the planner.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from variants.infaas.vm_autoscaler import VmDecision


@dataclass(frozen=True)
class HintParams:
    step: float = 0.1
    lo: float = 0.5
    hi: float = 2.0


def next_capacity_hint(hint: float, decisions: Sequence[VmDecision], unmet_qps: Mapping[str, float],
                       p: HintParams = HintParams(), *, settled: bool = True) -> float:
    """The fleet planner plans for demand × hint. INFaaS §4.2.3 "add" for variants Interfered on
    every worker of a hardware class (measured slower than profiled: the planner's capacities are
    too high), or load the model autoscaler could not place (§4.2.2 step d; ``unmet_qps``: the
    caller passes ``ModelDecision.shortfall_qps``, what is missing below the load itself, not the
    autoscaler's headroom on top), raises it; "remove"
    lowers it; otherwise it relaxes toward 1. An "add" for utilization or Overloaded variants alone
    does not: the fleet planner already sizes the pool for the measured demand plus headroom with
    an SLO-checked simulation, and a hint on top bought capacity the load did not need (issue #12:
    Kairos matching keeps the fastest worker above 80 % busy at any load, so the hint sat at 1.1-1.2).

    ``settled``: the fleet holds its whole target (every instance of the planned pool serves). Until
    then the hint does not rise: the demand the model loop cannot place yet is what the instances
    still booting were planned for, and raising the hint then bought a pool for twice the demand
    (issue #12: hint 1.1 → 1.88 within seconds of start)."""
    if not settled:
        return max(1.0, hint - p.step / 4) if hint > 1.0 else hint
    if any(d.action == "add" and d.interfered for d in decisions) or any(q > 1e-6 for q in unmet_qps.values()):
        return min(p.hi, hint + p.step)
    if any(d.action == "remove" for d in decisions):
        return max(p.lo, hint - p.step)
    if hint > 1.0:
        return max(1.0, hint - p.step / 4)
    if hint < 1.0:
        return min(1.0, hint + p.step / 4)
    return hint
