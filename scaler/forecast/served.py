"""``mode: shadow``'s capacity estimate of what each pool would have served (issue #39 deliverable 4;
pure, shared by the daemon and the replay).

Shadow prices the pool planning ahead would have held beside the one applied
(:class:`scaler.forecast.state.ShadowLedger`); this estimates what each would have *served*, from
capacity only: per model and minute, the measured arrival rate against the capacity in force of
each pool, the share served within SLO estimated as

    sum over minutes of min(arrivals, capacity) / sum of arrivals

A pool's capacity for a model is the q/s the planner computes for the model's share of it at the
model's SLO (``scaler.planner.joint_plan.ModelShare.capacity_qps``: Kairos' upper bound of the share,
the figure ``min_cost`` sizes the pool by, :mod:`scaler.planner.choose`). It is set at each planning
tick (:meth:`ServedLedger.note`, on the history's clock) and held until the next. An instance asked
for serves only once it has booted: a rise in capacity counts ``boot_s`` after the tick that asked
for it, a fall at once (:func:`effective_capacity`: ``min(c(s), c(s - boot_s))``); a minute's capacity
is that step function's mean over the minute (:func:`minute_capacity`). A minute with no capacity
known for a pool over all of it (before the first plan has booted, or a tick with no plan for the
model) is left out of that pool's sums.

An estimate, not a measurement: a pool at its capacity bound is counted as serving all of it within
SLO and queueing across minutes is not modelled, so it reads high where the bound is optimistic and
a burst inside a minute goes unseen (BENCHMARKS "forecast-shadow-served" compares it with the
replay's attainment).
"""
from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from scaler.forecast.history import MINUTE_S

#: the two pools shadow compares: the one applied and the one planning ahead would have asked for
POOLS = ("applied", "ahead")

Note = tuple[float, "float | None"]    # (time, capacity from then on; None: not known)


def step_at(notes: Sequence[Note], t: float) -> float | None:
    """The capacity in force at ``t`` under ``notes`` (sorted by time; None before the first)."""
    i = bisect_right([n[0] for n in notes], t)
    return notes[i - 1][1] if i else None


def effective_capacity(notes: Sequence[Note], t: float, boot_s: float) -> float | None:
    """The capacity serving at ``t``: a rise counts ``boot_s`` after it was asked for, a fall at once."""
    now, then = step_at(notes, t), step_at(notes, t - boot_s)
    if now is None or then is None:
        return None
    return min(now, then)


def minute_capacity(notes: Sequence[Note], minute: int, boot_s: float) -> float | None:
    """The mean of :func:`effective_capacity` over ``minute`` (None: not known all through it)."""
    a, b = minute * float(MINUTE_S), (minute + 1) * float(MINUTE_S)
    cuts = sorted({a, b} | {x for t, _ in notes for x in (t, t + boot_s) if a < x < b})
    total = 0.0
    for lo, hi in zip(cuts, cuts[1:]):
        c = effective_capacity(notes, lo, boot_s)     # constant on [lo, hi): every step inside is a cut
        if c is None:
            return None
        total += c * (hi - lo)
    return total / (b - a)


def served_share(arrivals: Sequence[float], capacities: Sequence[float | None]) -> float | None:
    """``sum(min(a, c)) / sum(a)`` over the minutes whose capacity is known (None: no arrivals there)."""
    pairs = [(a, c) for a, c in zip(arrivals, capacities) if c is not None]
    arrived = sum(a for a, _ in pairs)
    if arrived <= 0:
        return None
    return sum(min(a, c) for a, c in pairs) / arrived


@dataclass
class PoolSums:
    """One pool's running sums for one model: arrivals and arrivals within capacity (q/s x minutes)."""

    arrived: float = 0.0
    within: float = 0.0
    minutes: int = 0


@dataclass
class ServedLedger:
    """Each pool's capacity notes per model and the running sums (module docstring). The daemon and
    the replay call :meth:`note` at every planning tick of ``mode: shadow`` and :meth:`minute` at
    every ended minute with its measured rates."""

    notes: dict[str, dict[str, list[Note]]] = field(default_factory=lambda: {p: {} for p in POOLS})
    sums: dict[str, dict[str, PoolSums]] = field(default_factory=lambda: {p: {} for p in POOLS})
    last: dict[str, dict[str, float | None]] = field(default_factory=lambda: {p: {} for p in POOLS})

    def note(self, now: float, capacities: Mapping[str, Mapping[str, float] | None], models: Sequence[str]) -> None:
        """A planning tick at ``now`` (the history's clock): per pool, each model's capacity from now on
        (a pool given as None, or a model it lacks: not known)."""
        for pool in POOLS:
            caps = capacities.get(pool)
            per = self.notes[pool]
            for m in models:
                c = None if caps is None or m not in caps else float(caps[m])
                per.setdefault(m, []).append((now, c))

    def minute(self, minute: int, rates: Mapping[str, float], boot_s: float) -> None:
        """An ended minute's measured rates against each pool's capacity in force; the notes no later
        minute reads are dropped."""
        keep_from = (minute + 1) * float(MINUTE_S) - boot_s
        for pool in POOLS:
            for m, qps in rates.items():
                notes = self.notes[pool].get(m)
                if not notes:
                    continue
                cap = minute_capacity(notes, minute, boot_s)
                self.last[pool][m] = cap
                if cap is not None:
                    s = self.sums[pool].setdefault(m, PoolSums())
                    s.arrived += max(0.0, qps)
                    s.within += min(max(0.0, qps), cap)
                    s.minutes += 1
                i = bisect_right([n[0] for n in notes], keep_from)
                if i > 1:
                    del notes[:i - 1]

    def share(self, pool: str, model: str | None = None) -> float | None:
        """The estimated share served within SLO of ``pool`` (one model's, or all models' arrivals)."""
        got = [s for m, s in self.sums[pool].items() if model is None or m == model]
        arrived = sum(s.arrived for s in got)
        return sum(s.within for s in got) / arrived if arrived > 0 else None

    def percent(self, pool: str, model: str | None = None) -> float | None:
        """:meth:`share` in percent, to 4 decimals, as the audit event and the replay report it."""
        x = self.share(pool, model)
        return None if x is None else round(100.0 * x, 4)

    def totals(self, pool: str) -> tuple[float, float]:
        """(queries arrived, queries within capacity) of ``pool`` over the minutes counted (rates x 60 s)."""
        got = self.sums[pool].values()
        return (sum(s.arrived for s in got) * MINUTE_S, sum(s.within for s in got) * MINUTE_S)


def plan_capacities(plan: object) -> dict[str, float] | None:
    """Each model's capacity under a joint plan (``JointPlan.models[m].capacity_qps``; None: no plan)."""
    models = getattr(plan, "models", None)
    if models is None:
        return None
    return {m: float(s.capacity_qps) for m, s in models.items()}


__all__ = ["POOLS", "PoolSums", "ServedLedger", "effective_capacity", "minute_capacity", "plan_capacities",
           "served_share", "step_at"]
