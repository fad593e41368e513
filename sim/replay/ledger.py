"""Dollars over virtual time: the hourly price of the managed instances that are pending or running
(DESIGN invariant 1 counts exactly these), integrated piecewise-constant between the instants the
pool changed, and the invariant checked at every change.

The replay observes the pool after each launch and termination (``FakeCloud.after_call``), so the
integral is exact: no sampling. Instance-hours are kept per type; dollars are Σ price × seconds /
3600 at the end, so a pinned g4dn.xlarge for two hours costs exactly 2 × 0.526.

With spot capacity (issue #28) the pool is counted by slot (``scaler.cloud.slots``: a type, or
``TYPE@ZONE`` for spot) and a slot's price may move (:meth:`CostLedger.reprice`): the seconds before
a move are billed at the old price, the budget is checked at the new one. A price step is applied
at the same instant as the fleet's answer to it, so the check after a reprice waits for the pool to
change at that instant or for time to pass (:meth:`CostLedger._check_pending`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from config.budget import BUDGET_EPS
from scaler.planner.pools import pool_cost



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
    _billed: dict[str, float] = field(default_factory=dict)   # $ per slot before its price last moved
    _segment: dict[str, float] = field(default_factory=dict)  # instance-seconds per slot since then
    _pending: float | None = None                             # a reprice's time, its check not done yet
    _repriced: bool = False

    def __post_init__(self) -> None:
        self._since = self.start
        self.steps.append((self.start, pool_cost(self.pool, self.prices)))

    def _accrue(self, t: float) -> None:
        dt = t - self._since
        if dt > 0:
            self._check_pending()
            for itype, n in self.pool.items():
                self.seconds[itype] = self.seconds.get(itype, 0.0) + n * dt
                self._segment[itype] = self._segment.get(itype, 0.0) + n * dt
        self._since = max(self._since, t)

    def _check_pending(self) -> None:
        """The budget at a reprice's instant, once nothing more changed at it."""
        if self._pending is not None:
            cost = pool_cost(self.pool, self.prices)
            if cost > self.budget_per_hour + BUDGET_EPS:
                self.violations.append((self._pending, cost))
            self._pending = None

    def reprice(self, t: float, prices: Mapping[str, float]) -> None:
        """Slot prices from ``t`` on (those not named keep theirs)."""
        self._accrue(t)
        for k, sec in self._segment.items():
            self._billed[k] = self._billed.get(k, 0.0) + self.prices[k] * sec / 3600.0
        self._segment = {}
        self._repriced = True
        self.prices = {**self.prices, **prices}
        cost = pool_cost(self.pool, self.prices)
        self.peak_cost_per_hour = max(self.peak_cost_per_hour, cost)
        self._record(t, cost)
        self._pending = t

    def _record(self, t: float, cost: float) -> None:
        if self.steps and self.steps[-1][0] == t:
            self.steps[-1] = (t, cost)
        else:
            self.steps.append((t, cost))

    def observe(self, t: float, pool: Mapping[str, int]) -> None:
        """The live pool from ``t`` on; a money-invariant violation is recorded, not raised."""
        new = {k: int(v) for k, v in pool.items() if v > 0}
        if new == self.pool:
            return
        self._accrue(t)
        self.pool = new
        cost = pool_cost(new, self.prices)
        self.peak_cost_per_hour = max(self.peak_cost_per_hour, cost)
        if self._pending != t and cost > self.budget_per_hour + BUDGET_EPS:
            self.violations.append((t, cost))     # (at a reprice's instant: once the fleet has answered it)
        self._record(t, cost)

    def close(self, t_end: float) -> None:
        self._accrue(t_end)
        self._check_pending()
        self.end = t_end

    @property
    def instance_hours(self) -> dict[str, float]:
        return {t: s / 3600.0 for t, s in sorted(self.seconds.items())}

    @property
    def cost_usd(self) -> float:
        if not self._repriced:        # one price per slot all along: the exact Σ price × seconds
            return sum(self.prices[t] * s for t, s in self.seconds.items()) / 3600.0
        return sum(self.cost_by_slot.values())

    @property
    def cost_by_slot(self) -> dict[str, float]:
        """Dollars per slot (type, or ``TYPE@ZONE`` for spot), each second at the price it was billed at."""
        out = dict(self._billed)
        for k, sec in self._segment.items():
            out[k] = out.get(k, 0.0) + self.prices[k] * sec / 3600.0
        return dict(sorted(out.items()))

    def cost_per_hour_at(self, t: float) -> float:
        """The $/hr in force at ``t``."""
        cost = 0.0
        for at, c in self.steps:
            if at > t:
                break
            cost = c
        return cost


__all__ = ["CostLedger"]
