"""When the fleet loop should replan early, and which demand it plans for (pure).

The fleet job replans on its interval; between intervals the model loop (≈1 s) checks whether the
measured demand or batch mix moved enough to replan at once (DESIGN "Three loops": a faster loop
never waits for a slower one).
"""
from __future__ import annotations

from dataclasses import dataclass

from scaler.batch_mix import BatchMix

MIN_SAMPLES_FOR_MEASURED_MIX = 200


@dataclass(frozen=True)
class DemandView:
    """What the planner works from: arrival rate (q/s) and batch mix, and where they came from."""

    qps: float
    mix: BatchMix
    measured: bool


def demand_for_planning(measured_qps: float, measured_mix: BatchMix | None, samples: int,
                        declared_qps: float, declared_mix: BatchMix) -> DemandView:
    """Measured demand once the window holds enough queries; the declared workload before that.
    The rate is never planned below the declared forecast."""
    if measured_mix is not None and samples >= MIN_SAMPLES_FOR_MEASURED_MIX and len(measured_mix.sizes):
        return DemandView(max(measured_qps, declared_qps), measured_mix, True)
    return DemandView(max(measured_qps, declared_qps), declared_mix, False)


def significant_change(planned: DemandView | None, now: DemandView, rel: float = 0.25, min_qps_delta: float = 2.0) -> bool:
    """True when demand moved by more than ``rel`` (and ``min_qps_delta`` q/s) or the mean batch size
    moved by more than ``rel`` since the last plan."""
    if planned is None:
        return True
    dq = abs(now.qps - planned.qps)
    if dq > min_qps_delta and dq > rel * max(planned.qps, 1e-9):
        return True
    m0, m1 = planned.mix.mean(), now.mix.mean()
    return m0 > 0 and abs(m1 - m0) > rel * m0
