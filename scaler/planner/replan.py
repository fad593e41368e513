"""When the fleet loop should replan early, and which demand it plans for (pure).

The fleet job replans on its interval; between intervals the model loop (≈1 s) checks whether the
measured demand or batch mix moved enough to replan at once (DESIGN "Three loops": a faster loop
never waits for a slower one).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from scaler.planner.batch_mix import BatchMix

MIN_SAMPLES_FOR_MEASURED_MIX = 200
#: the arrival rate that sees a load step within seconds is counted over this horizon (s)
SHORT_HORIZON_S = 10.0
#: the rate the fleet plans from is counted over this horizon (s): Poisson noise of a 10 s count at
#: 27 q/s is 6 % (one σ), and the scale-in window kept the highest of ~10 such readings (+10-15 %)
STEADY_HORIZON_S = 60.0
#: a short-horizon rate this many standard deviations (Poisson, at the steady rate) above the
#: steady rate is a rise, planned for at once. Checked every second over overlapping windows, 3σ
#: fired a few times an hour at a steady 106 q/s (the replay: 11 → 13 r5n.large and back, eight
#: times in 40 minutes); 4σ sees a 4x step one second later than 3σ
RISE_Z = 4.0


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


def planning_rate(short_qps: float, steady_qps: float, short_s: float = SHORT_HORIZON_S,
                  z: float = RISE_Z) -> float:
    """The arrival rate to plan for: the steady rate (:data:`STEADY_HORIZON_S`), unless the count of
    the last ``short_s`` seconds is more than ``z`` standard deviations above what the steady rate
    expects of it (a Poisson count: σ = √(expected)), when the short-horizon rate is the demand.
    A load step is seen within a second or two, as with the short rate alone, while a short count
    that is only noise no longer buys an instance (the replay: a steady 27 q/s read as 32 q/s once
    in 12 minutes, and the pool held a fourth r5n.large for the rest of the phase)."""
    expected = steady_qps * short_s
    if short_qps * short_s - expected > z * math.sqrt(max(expected, 1.0)):
        return short_qps
    return steady_qps


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
