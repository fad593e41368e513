"""Hardware emulation for local runs: pad a query's service time to the profile of the instance
type the worker stands for (DESIGN "Where it runs"; profiles from Kairos §7 measurements).

The worker computes the real result, then sleeps the remainder so that the query's service time is
``max(compute, profiled latency)`` for its batch size.
"""
from __future__ import annotations

from config.profiles import LatencyProfile, Stat


def padded_service_ms(profile: LatencyProfile | None, batch: int, compute_ms: float, stat: Stat = "mean",
                      speed_factor: float = 1.0) -> float:
    """Service time (ms) a query of ``batch`` should take: the larger of the real compute time and
    the profiled latency (batch rounded up to the profile grid) times the variant's ``speed_factor``
    (its measured latency relative to the model's base variant); ``compute_ms`` without a profile."""
    if compute_ms < 0:
        raise ValueError("compute_ms must be >= 0")
    if profile is None:
        return float(compute_ms)
    target = float(profile.latency_ms(max(int(batch), 1), stat)) * (speed_factor if speed_factor > 0 else 1.0)
    return max(float(compute_ms), target)


def padding_ms(profile: LatencyProfile | None, batch: int, compute_ms: float, elapsed_ms: float, stat: Stat = "mean",
               speed_factor: float = 1.0) -> float:
    """How long to sleep now, ``elapsed_ms`` into the query, to reach the padded service time."""
    return max(0.0, padded_service_ms(profile, batch, compute_ms, stat, speed_factor) - float(elapsed_ms))
