"""Which dispatcher replica owns each worker (pure; issue #27, deliverable 2).

Several dispatcher replicas behind one address split the workers between them: each replica runs
the query loop's matching (Kairos §5.1) over the workers it owns only. Kairos serves one query per
worker at a time (§5.1: a worker is matched only when idle), so two replicas must never send to the
same worker: every worker has at most one owner. The lease holder (``scaler.replicas.lease_decision``) decides the
owners from the replicas alive by heartbeat (``scaler.replicas.membership``); the published mapping
moves a worker between two live replicas in two steps (``scaler.replicas.handoff``).

:func:`assign` decides the owners, with three rules, in this order:

1. **balance by type**: of each instance type's ``n`` workers, every live replica gets
   ``n // R`` or ``n // R + 1`` (``R`` replicas), so every shard's matching keeps a heterogeneous
   pool (Kairos §5.1's gain over FCFS comes from matching query sizes to types: a shard without the
   base type cannot serve the largest queries within the QoS);
2. **balance in total**: which replicas get a type's ``n mod R`` spare workers is chosen so that the
   replicas' totals differ by at most one;
3. **stickiness**: among the choices that keep rules 1 and 2, the fewest workers leave a live
   replica that owned them (a move drains the worker on its old replica first). Workers of a dead
   replica, new workers and workers without an owner are dealt to the replicas short of their
   quota, in id and name order.

Rules 2 and 3 together are a small assignment problem (which replica gets each type's spare
workers): solved exactly with ``scipy.optimize.milp`` (HiGHS), tested against a brute force.
"""
from __future__ import annotations

from typing import Collection, Mapping, Sequence

import numpy as np

Worker = tuple[str, str]      # (worker id, instance type)


def _spare_owners(types: Sequence[str], spare: Mapping[str, int], replicas: Sequence[str],
                  gain: Mapping[tuple[str, str], int]) -> set[tuple[str, str]]:
    """The (replica, type) pairs that get one of the type's spare workers: every type's ``spare``
    placed, each replica getting ``E // R`` or ``E // R + 1`` spares in all (``E`` the spares of
    every type), the most ``gain`` kept (1 where the replica already holds more than the type's
    even share, so the spare worker stays where it is). Ties go by a term
    ``eps (R - i) (T - j)`` (replica ``i`` of ``R`` and type ``j`` of ``T``, both by name) too small
    to outweigh one kept worker: the first replicas get spares first, and by the rearrangement
    inequality the first replica's is of the first type."""
    from scipy.optimize import Bounds, LinearConstraint, milp

    nr, nt = len(replicas), len(types)
    total = sum(spare.values())
    if total == 0:
        return set()
    nx = nr * nt                                    # x[r, t]: replica r gets one spare of type t
    c = np.zeros(nx + nr)                           # then y[r]: replica r gets E // R + 1 spares
    eps = 0.5 / (nr * nt) ** 2                      # the tie-break's terms add up to less than one gain
    for i, r in enumerate(replicas):
        for j, t in enumerate(types):
            c[i * nt + j] = -gain.get((r, t), 0) - eps * (nr - i) * (nt - j)
    rows, lo, hi = [], [], []
    for j, t in enumerate(types):                   # each type's spares are all placed
        a = np.zeros(nx + nr)
        a[[i * nt + j for i in range(nr)]] = 1
        rows.append(a)
        lo.append(spare[t])
        hi.append(spare[t])
    for i in range(nr):                             # a replica's spares: E // R, plus y[r]
        a = np.zeros(nx + nr)
        a[i * nt:(i + 1) * nt] = 1
        a[nx + i] = -1
        rows.append(a)
        lo.append(total // nr)
        hi.append(total // nr)
    a = np.zeros(nx + nr)
    a[nx:] = 1                                      # E mod R replicas get one more
    rows.append(a)
    lo.append(total % nr)
    hi.append(total % nr)
    res = milp(c, integrality=np.ones(nx + nr), bounds=Bounds(0, 1),
               constraints=LinearConstraint(np.array(rows), lo, hi), options={"mip_rel_gap": 0.0})
    if res.x is None:   # pragma: no cover - dealing the spares in turn is always feasible
        raise RuntimeError(f"no balanced placement of the spare workers: {res.message}")
    x = np.round(res.x[:nx]).astype(int)
    return {(replicas[i], types[j]) for i in range(nr) for j in range(nt) if x[i * nt + j]}


def assign(workers: Sequence[Worker], live_replicas: Collection[str], previous: Mapping[str, str]) -> dict[str, str]:
    """Worker id → the live replica that owns it, for ``workers`` ((id, type); every worker of the
    fleet that a dispatcher may serve with), given the owners held now (``previous``; owners that
    are not live are ignored). Empty when no replica is live. Raises ValueError on a worker id
    given twice. See the module docstring for the rules."""
    replicas = sorted(set(live_replicas))
    ids = [w for w, _ in workers]
    if len(set(ids)) != len(ids):
        dup = sorted({w for w in ids if ids.count(w) > 1})
        raise ValueError(f"worker ids given twice: {', '.join(dup)}")
    if not replicas:
        return {}
    by_type: dict[str, list[str]] = {}
    for w, t in sorted(workers):
        by_type.setdefault(t, []).append(w)
    types = sorted(by_type)
    nr = len(replicas)
    held: dict[tuple[str, str], int] = {}
    for t in types:
        for w in by_type[t]:
            p = previous.get(w)
            if p is not None:
                held[(p, t)] = held.get((p, t), 0) + 1
    even = {t: len(by_type[t]) // nr for t in types}
    spare = {t: len(by_type[t]) % nr for t in types}
    gain = {(r, t): 1 for r in replicas for t in types if held.get((r, t), 0) > even[t]}
    extra = _spare_owners(types, spare, replicas, gain)
    out: dict[str, str] = {}
    for t in types:
        quota = {r: even[t] + ((r, t) in extra) for r in replicas}
        left = []
        for w in by_type[t]:                        # keep
            p = previous.get(w)
            if p in quota and quota[p] > 0:
                quota[p] -= 1
                out[w] = p
            else:
                left.append(w)
        for r in replicas:                          # deal the rest
            while quota[r] > 0:
                out[left.pop(0)] = r
                quota[r] -= 1
    return out


def moved(previous: Mapping[str, str], current: Mapping[str, str], live_replicas: Collection[str]) -> dict[str, tuple[str, str]]:
    """Workers that leave a live replica: worker id → (from, to), ``to`` empty when it has no
    owner now. A worker of a dead replica is not a move (nothing drains it)."""
    live = set(live_replicas)
    return {w: (p, current.get(w, "")) for w, p in previous.items() if p in live and current.get(w) != p}


def ownership(owner: Mapping[str, str], workers: Sequence[Worker]) -> dict[str, dict[str, list[str]]]:
    """The owners for ``costscale status`` (not shown there yet): replica → instance type → its
    worker ids (sorted); the workers without an owner under the replica name ``""``."""
    out: dict[str, dict[str, list[str]]] = {}
    for w, t in sorted(workers):
        out.setdefault(owner.get(w, ""), {}).setdefault(t, []).append(w)
    return out


__all__ = ["Worker", "assign", "moved", "ownership"]
