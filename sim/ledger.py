"""Dollars over virtual time: the hourly price of the managed instances that are pending or running
(DESIGN invariant 1 counts exactly these), integrated piecewise-constant between the instants the
pool changed, and the invariant checked at every change.

The replay observes the pool after each launch and termination (``FakeCloud.after_call``), so the
integral is exact: no sampling. Instance-hours are kept per type; dollars are Σ price × seconds /
3600 at the end, so a pinned g4dn.xlarge for two hours costs exactly 2 × 0.526.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from scaler.transitions import pool_cost

_EPS = 1e-9


@dataclass
class CostLedger:
    """Piecewise-constant pool over time; :meth:`observe` at each change, :meth:`close` at the end."""

    prices: Mapping[str, float]
    budget_per_hour: float
    start: float = 0.0
    pool: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)     # instance-seconds per type
    steps: list[tuple[float, float]] = field(default_factory=list)   # (time, $/hr from then on)
    violations: list[tuple[float, float]] = field(default_factory=list)
    peak_cost_per_hour: float = 0.0
    _since: float = 0.0
    end: float | None = None

    def __post_init__(self) -> None:
        self._since = self.start
        self.steps.append((self.start, pool_cost(self.pool, self.prices)))

    def _accrue(self, t: float) -> None:
        dt = t - self._since
        if dt > 0:
            for itype, n in self.pool.items():
                self.seconds[itype] = self.seconds.get(itype, 0.0) + n * dt
        self._since = max(self._since, t)

    def observe(self, t: float, pool: Mapping[str, int]) -> None:
        """The live pool from ``t`` on; a money-invariant violation is recorded, not raised."""
        new = {k: int(v) for k, v in pool.items() if v > 0}
        if new == self.pool:
            return
        self._accrue(t)
        self.pool = new
        cost = pool_cost(new, self.prices)
        self.peak_cost_per_hour = max(self.peak_cost_per_hour, cost)
        if cost > self.budget_per_hour + _EPS:
            self.violations.append((t, cost))
        if self.steps and self.steps[-1][0] == t:
            self.steps[-1] = (t, cost)
        else:
            self.steps.append((t, cost))

    def close(self, t_end: float) -> None:
        self._accrue(t_end)
        self.end = t_end

    @property
    def instance_hours(self) -> dict[str, float]:
        return {t: s / 3600.0 for t, s in sorted(self.seconds.items())}

    @property
    def cost_usd(self) -> float:
        return sum(self.prices[t] * s for t, s in self.seconds.items()) / 3600.0

    def cost_per_hour_at(self, t: float) -> float:
        """The $/hr in force at ``t``."""
        cost = 0.0
        for at, c in self.steps:
            if at > t:
                break
            cost = c
        return cost


__all__ = ["CostLedger"]
