"""A kill point of the replicas demo and its verdict (``costscale demo --replicas``,
:mod:`daemon.demos.replicas`; ``bench/replicas/replica_failover_bench.py``): when the lease holder is killed
(:class:`KillPoint`, drawn by :func:`seeded_points`) and what one kill's figures must show to pass
(:class:`PointResult`): every query ended once (answered, or failed with a typed code), the fleet
acted again within the lease ttl and 5 s, the budget held in every sample, no orphan, no duplicate,
and the pool as pinned.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

KILL_MOMENTS = ("tick", "launch")


@dataclass(frozen=True)
class KillPoint:
    """When the holder is killed: ``offset_s`` into the load, then ``delay_s`` after the holder's
    next fleet tick (``tick``) or after an instance of the pool is lost (``launch``)."""

    offset_s: float
    moment: str = "tick"
    delay_s: float = 0.0


def seeded_points(n: int, seed: int, fleet_s: float, offset_s: tuple[float, float] = (4.0, 10.0)) -> list[KillPoint]:
    """``n`` kill points from ``seed``: offsets uniform in ``offset_s``, moments half each, delays
    uniform over a fleet interval (``tick``) or a fleet interval and a second (``launch``: before,
    during or after the replacement launch)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        moment = KILL_MOMENTS[int(rng.integers(0, 2))]
        delay = rng.uniform(0.0, fleet_s + (1.0 if moment == "launch" else 0.0))
        out.append(KillPoint(round(float(rng.uniform(*offset_s)), 2), moment, round(float(delay), 2)))
    return out


@dataclass
class PointResult:
    """One kill point's figures (module docstring)."""

    point: KillPoint
    killed: str
    new_holder: str
    sent: int
    answered: int
    failed: dict[str, int]
    handover_sent: int
    handover_failed: int
    twice: int
    unanswered: int
    retries: int
    failed_attempts: int
    recovered_share: float | None
    lease_taken_s: float | None
    resumed_s: float | None
    ttl_s: float
    budget: float
    peak_before: float
    peak_during: float
    peak_after: float
    over_budget_samples: int
    samples: int
    orphans: list[str]
    duplicates: int
    pool: dict[str, int]
    live_after: dict[str, int]
    lost: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def failed_pct(self) -> float:
        return 100.0 * sum(self.failed.values()) / self.sent if self.sent else 0.0

    @property
    def handover_failed_pct(self) -> float:
        return 100.0 * self.handover_failed / self.handover_sent if self.handover_sent else 0.0

    @property
    def budget_held(self) -> bool:
        return self.over_budget_samples == 0 and self.samples > 0

    @property
    def resumed_in_time(self) -> bool:
        return self.resumed_s is not None and self.resumed_s <= self.ttl_s + 5.0

    @property
    def answered_once(self) -> bool:
        """Every query ended once: answered, or failed with a typed code (none twice, none lost):
        UNAVAILABLE (a client's retries ran out), or DEADLINE_EXCEEDED (``on_deadline: drop``
        refused a query that could no longer meet its SLO behind the backlog the failover left)."""
        return self.twice == 0 and self.unanswered == 0 and set(self.failed) <= {"UNAVAILABLE", "DEADLINE_EXCEEDED"}

    @property
    def passed(self) -> bool:
        return (self.answered_once and self.resumed_in_time and self.budget_held and not self.orphans
                and self.duplicates == 0 and self.live_after == self.pool)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(failed_pct=round(self.failed_pct, 3), handover_failed_pct=round(self.handover_failed_pct, 3),
                   budget_held=self.budget_held, resumed_in_time=self.resumed_in_time,
                   answered_once=self.answered_once, passed=self.passed)
        return out


__all__ = ["KILL_MOMENTS", "KillPoint", "PointResult", "seeded_points"]
