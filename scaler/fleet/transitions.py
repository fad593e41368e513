"""Pool transitions that never leak money: the ordered steps from the current pool to a target.

A fleet-loop decision (Kairos §5.2, INFaaS §4.2.3 "VM autoscaler") names a target pool; this
module decides *how* to get there under DESIGN invariant 1: at every instant the summed hourly
price of pending + running managed instances stays within the budget. Launches only go into
headroom; when the headroom is too short for the next launch, the most expensive surplus
instances are retired (drained, then terminated) first. Surplus that is not needed for headroom
is retired last, so serving capacity is kept while the new pool comes up (make-before-break).

Each launch/terminate step carries a deterministic ClientToken (DESIGN invariant 3), so a crash
at any point can be repaired by looking the token up, never by launching twice.

Pure: no I/O, no clock.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import Literal, Mapping, Sequence, Union

from config.budget import BUDGET_EPS
from scaler.cloud.provider import ManagedInstance
from scaler.planner.pools import pool_cost, pool_digest

StepKind = Literal["drain", "terminate", "launch"]

TOKEN_MAX = 64


@dataclass(frozen=True)
class Step:
    """One actuation: ``launch`` ``count`` instances of ``instance_type`` under ``client_token``,
    or ``drain``/``terminate`` the instances ``instance_ids`` (``count`` of them)."""

    kind: StepKind
    instance_type: str
    count: int
    instance_ids: tuple[str, ...] = ()
    client_token: str = ""
    seq: int = -1




def client_token(cluster: str, plan_id: str, digest: str, instance_type: str, seq: int, kind: str = "launch") -> str:
    """Deterministic EC2 ClientToken f(cluster, plan id, pool digest, type, sequence), ≤ 64 ASCII chars.

    The readable prefix is the cluster name (cut to 20 chars) and the sequence number; the rest is
    a SHA-256 of every input, so distinct inputs give distinct tokens whatever their lengths.
    """
    h = hashlib.sha256("\x1f".join([cluster, plan_id, digest, instance_type, str(seq), kind]).encode()).hexdigest()
    prefix = "".join(c if c.isalnum() or c in "-_." else "_" for c in cluster[:20])
    tok = f"{prefix}-{'t' if kind == 'terminate' else 'l'}{seq}-{h[:32]}"
    return tok[:TOKEN_MAX]


Current = Mapping[str, Union[int, Sequence[ManagedInstance]]]


def _retire_order(instances: Sequence[ManagedInstance], first: Sequence[str] = ()) -> list[str]:
    """Which instances of one type go first: the ids in ``first`` in that order (parked ones,
    :mod:`scaler.fleet.parking`), then pending (not serving yet, maybe stuck), then the newest, then by
    id (deterministic)."""
    rank = {iid: k for k, iid in enumerate(first)}
    live = [i for i in instances if i.live]
    live.sort(key=lambda i: (rank.get(i.instance_id, len(rank)), i.state != "pending", -i.launch_time, i.instance_id))
    return [i.instance_id for i in live]






def plan_transition(
    current: Current,
    target: Mapping[str, int],
    prices: Mapping[str, float],
    budget: float,
    *,
    cluster: str = "",
    plan_id: str = "",
    seq_start: int = 0,
    retire_first: Sequence[str] = (),
) -> list[Step]:
    """Steps from ``current`` (type → live instances, or type → count) to ``target`` (type → count).

    Invariant (DESIGN 1): replaying the steps in order, the hourly price of the live pool never
    exceeds ``budget`` (a terminate lowers it before the next launch raises it). ``target`` must
    itself fit the budget; the current pool need not (it is brought down first).
    Sequence numbers (and so the ClientTokens) start at ``seq_start``: the actuator passes the
    next unused number of the plan, so a replanned remainder never reuses a spent token.
    Instances are retired in ``retire_first`` order before any other of their type.
    """
    for t, n in target.items():
        if int(n) < 0:
            raise ValueError(f"target count for {t} is negative ({n})")
        if int(n) > 0 and t not in prices:
            raise ValueError(f"no price for target type {t}")
    tgt = {t: int(n) for t, n in target.items() if int(n) > 0}
    tgt_cost = pool_cost(tgt, prices)
    if tgt_cost > budget + BUDGET_EPS:
        raise ValueError(f"target pool costs {tgt_cost:.4f}/hr, over the budget {budget:.4f}/hr")

    ids: dict[str, list[str] | None] = {}
    cur: dict[str, int] = {}
    for t, v in current.items():
        if isinstance(v, int):
            cur[t], ids[t] = int(v), None
        else:
            order = _retire_order(v, retire_first)
            cur[t], ids[t] = len(order), order
        if cur[t] and t not in prices:
            raise ValueError(f"no price for current type {t}")
    cur = {t: n for t, n in cur.items() if n > 0}

    digest = pool_digest(tgt)
    seq = seq_start
    cost = pool_cost(cur, prices)
    surplus: dict[str, int] = {t: n - tgt.get(t, 0) for t, n in cur.items() if n > tgt.get(t, 0)}
    missing: dict[str, int] = {t: n - cur.get(t, 0) for t, n in tgt.items() if n > cur.get(t, 0)}
    taken: dict[str, int] = {t: 0 for t in surplus}
    steps: list[Step] = []

    def retire(group: dict[str, int]) -> None:
        nonlocal seq, cost
        chosen: dict[str, tuple[str, ...]] = {}
        for t in sorted(group):
            k = group[t]
            if ids.get(t) is not None:
                lst = ids[t]
                assert lst is not None
                chosen[t] = tuple(lst[taken[t]:taken[t] + k])
            else:
                chosen[t] = ()
            taken[t] += k
        for t in sorted(group):
            steps.append(Step("drain", t, group[t], chosen[t]))
        for t in sorted(group):
            tok = client_token(cluster, plan_id, digest, t, seq, "terminate")
            steps.append(Step("terminate", t, group[t], chosen[t], tok, seq))
            seq += 1
            cost -= prices[t] * group[t]
            surplus[t] -= group[t]

    while missing:
        progressed = False
        for t in sorted(missing):
            room = budget - cost
            n = min(missing[t], int(math.floor((room + BUDGET_EPS) / prices[t]))) if room > -BUDGET_EPS else 0
            if n > 0:
                steps.append(Step("launch", t, n, (), client_token(cluster, plan_id, digest, t, seq), seq))
                seq += 1
                cost += prices[t] * n
                missing[t] -= n
                progressed = True
        missing = {t: n for t, n in missing.items() if n > 0}
        if not missing or progressed:
            continue
        # Headroom is short: retire the most expensive surplus until one more instance of the
        # cheapest missing type fits.
        need = min(prices[t] for t in missing) - (budget - cost)
        group: dict[str, int] = {}
        freed = 0.0
        for t in sorted((t for t, n in surplus.items() if n > 0), key=lambda t: (-prices[t], t)):
            while surplus[t] - group.get(t, 0) > 0 and freed < need - BUDGET_EPS:
                group[t] = group.get(t, 0) + 1
                freed += prices[t]
            if freed >= need - BUDGET_EPS:
                break
        if not group:  # cannot happen when the target fits the budget
            raise AssertionError("no surplus left to retire but launches do not fit")
        retire(group)
    rest = {t: n for t, n in surplus.items() if n > 0}
    if rest:
        retire(rest)
    return steps


@dataclass
class ReplayResult:
    pool: dict[str, int]
    peak_cost: float
    costs: list[float] = field(default_factory=list)


def replay(current: Mapping[str, int], steps: Sequence[Step], prices: Mapping[str, float]) -> ReplayResult:
    """Apply ``steps`` to a count pool; returns the final pool and the cost after every step
    (the money invariant checked step by step, as the transition tests do)."""
    pool = {t: int(n) for t, n in current.items()}
    costs = [pool_cost(pool, prices)]
    for s in steps:
        if s.kind == "launch":
            pool[s.instance_type] = pool.get(s.instance_type, 0) + s.count
        elif s.kind == "terminate":
            pool[s.instance_type] = pool.get(s.instance_type, 0) - s.count
            if pool[s.instance_type] < 0:
                raise ValueError(f"step terminates more {s.instance_type} than exist")
        costs.append(pool_cost(pool, prices))
    return ReplayResult({t: n for t, n in pool.items() if n > 0}, max(costs), costs)
