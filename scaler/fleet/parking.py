"""Scale-in in two steps: park surplus instances warm, retire them only after a hold (pure).

When the fleet planner's target has fewer instances of a type than are running, the surplus is not
terminated at once. It is *parked*: the dispatcher stops giving it queries and its model variants
are unloaded (the model-vertical "scale down" of INFaaS §4.2.2, which frees the worker), so the
surplus serves nothing and costs only its rent. After ``hold_s`` of being parked (INFaaS §4.2.3:
remove a VM only after sustained low use, with a cooldown) a parked instance is retired. When load comes
back while an instance is still parked, the planner's target includes it again and it is
*unparked*: its variants are loaded back (a replica in well under a second) before the fleet loop
asks EC2 for anything new -- the model-level answer to a spike comes first, new instances second.

Three rules keep this safe:

* money first (DESIGN invariant 1): the held instances ride on top of the planner's target only
  while that sum fits the budget and costs no more than the dearest target the planner asked for
  within the last ``hold_s`` (warm spares are capacity that was recently needed, not extra: a
  planner alternating between two pools does not end up paying for both); otherwise the most
  expensive held instances retire now, so a launch the target needs is never blocked by them;
* make-before-break: while an instance of the target is not serving yet (pending, or not
  registered with the dispatcher), surplus instances that serve keep serving -- a swap from one
  type to another does not lose capacity while the new type boots;
* instances that serve nothing (pending or unregistered surplus) are parked first.

Everything comes in as arguments (instances, target, the ids registered with the dispatcher, the
time); :class:`ParkState` carries the timers between rounds.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Collection, Mapping, Sequence

from config.budget import BUDGET_EPS
from scaler.cloud.provider import ManagedInstance, pool_of
from scaler.planner.pools import pool_cost

#: s: float noise in a parked instance's hold (a time, not money)
_HOLD_EPS_S = 1e-9


@dataclass(frozen=True)
class ParkState:
    parked: Mapping[str, float] = field(default_factory=dict)       # instance id -> parked since
    recent: tuple[tuple[float, float], ...] = ()                    # (time, $/hr) of recent targets


@dataclass(frozen=True)
class ParkDecision:
    """``target``: what the actuator is asked for (the planner's target plus the instances held);
    ``retire``: the ids it must retire first: parked ones whose hold is over (oldest parked first),
    then held ones that do not fit the money rules (parked, then surplus still serving); ``park``/``unpark``: ids whose state changes this round; ``held``: type -> number
    of surplus instances kept on top of the planner's target."""

    target: dict[str, int]
    park: tuple[str, ...] = ()
    unpark: tuple[str, ...] = ()
    retire: tuple[str, ...] = ()
    held: dict[str, int] = field(default_factory=dict)
    serving_surplus: tuple[str, ...] = ()   # surplus kept serving while the target comes up


def decide_parking(
    instances: Sequence[ManagedInstance],
    target: Mapping[str, int],
    ready: set[str] | frozenset[str],
    prices: Mapping[str, float],
    budget: float,
    now: float,
    state: ParkState = ParkState(),
    hold_s: float = 120.0,
    prefer: Collection[str] = (),
) -> tuple[ParkDecision, ParkState]:
    """One round. ``instances``: the managed instances (only live ones count); ``target``: the
    planner's pool (type -> count, within ``budget``); ``ready``: ids registered with the
    dispatcher (serving or able to); ``hold_s`` 0 retires surplus at once (no parking);
    ``prefer``: instances to park or retire first when a type has surplus (several models: those
    their model no longer wants, :func:`scaler.fleet.worker_assignment.released`)."""
    tgt = {t: int(n) for t, n in target.items() if int(n) > 0}
    live = [i for i in instances if i.live]
    by_type: dict[str, list[ManagedInstance]] = {}
    for i in live:
        by_type.setdefault(i.instance_type, []).append(i)
    parked = {iid: since for iid, since in state.parked.items() if any(i.instance_id == iid for i in live)}
    # no history (first round, or after a restart): the pool running now is what was last asked for
    seed = state.recent or ((now, pool_cost(pool_of(live), prices)),)
    recent = tuple((t, c) for t, c in seed if now - t < hold_s) + ((now, pool_cost(tgt, prices)),)
    if hold_s <= 0:
        surplus_ids = []
        for t, insts in sorted(by_type.items()):
            extra = len(insts) - tgt.get(t, 0)
            # parked ones go first (they serve nothing), then those not serving yet, then the newest
            order = sorted(insts, key=lambda i: (i.instance_id not in parked, i.instance_id not in prefer,
                                                 i.instance_id in ready, -i.launch_time, i.instance_id))
            surplus_ids += [i.instance_id for i in order[:max(extra, 0)]]
        back = tuple(sorted(x for x in parked if x not in surplus_ids))
        return (ParkDecision(dict(tgt), unpark=back, retire=tuple(surplus_ids)),
                ParkState({x: -math.inf for x in surplus_ids}, ()))

    # is every instance the target counts on serving? (make-before-break across types)
    up = all(sum(1 for i in by_type.get(t, []) if i.instance_id in ready and i.instance_id not in parked) >= n
             for t, n in tgt.items())
    park: list[str] = []
    unpark: list[str] = []
    serving_surplus: list[str] = []
    for t, insts in sorted(by_type.items()):
        extra = max(len(insts) - tgt.get(t, 0), 0)
        # which parked ones stay parked first: not registered, then the longest parked
        mine = sorted((i for i in insts if i.instance_id in parked),
                      key=lambda i: (i.instance_id in ready, parked[i.instance_id], i.instance_id))
        if len(mine) > extra:        # the target needs them again: registered, newest parked come back first
            for i in mine[extra:][::-1]:
                unpark.append(i.instance_id)
                del parked[i.instance_id]
            continue
        others = sorted((i for i in insts if i.instance_id not in parked),
                        key=lambda i: (i.instance_id not in prefer, i.instance_id in ready, -i.launch_time,
                                       i.instance_id))
        for i in others[: extra - len(mine)]:
            if i.instance_id in ready and not up:
                serving_surplus.append(i.instance_id)    # keeps serving until the target is up
            else:
                park.append(i.instance_id)
                parked[i.instance_id] = now

    # parked for the whole hold: retired (oldest parked first). A retired id stays in the state
    # (hold over) until it is gone: if its termination fails it is retired again next round, or
    # unparked if the target needs it by then -- never left parked and forgotten.
    retire = sorted((x for x in parked if now - parked[x] >= hold_s - _HOLD_EPS_S), key=lambda x: (parked[x], x))
    held_parked = [x for x in parked if x not in retire]

    # money first: parked instances stay while the pool fits the dearest recent target (and so the
    # budget); surplus still serving stays while it fits the budget. Dearest first, oldest parked first.
    type_of = {i.instance_id: i.instance_type for i in live}
    eff = dict(tgt)
    for x in held_parked + serving_surplus:
        eff[type_of[x]] = eff.get(type_of[x], 0) + 1
    cap = min(budget, max(c for _, c in recent))
    for group, limit in ((sorted(held_parked, key=lambda x: (-prices[type_of[x]], parked[x], x)), cap),
                         (sorted(serving_surplus, key=lambda x: (-prices[type_of[x]], x)), budget)):
        for x in group:
            if pool_cost(eff, prices) <= limit + BUDGET_EPS:
                break
            eff[type_of[x]] -= 1
            retire.append(x)
            parked[x] = -math.inf       # retiring (see above)
            if x in serving_surplus:
                serving_surplus.remove(x)
    eff = {t: n for t, n in eff.items() if n > 0}
    held = {t: eff.get(t, 0) - tgt.get(t, 0) for t in eff if eff.get(t, 0) > tgt.get(t, 0)}
    park = [x for x in park if x not in retire]   # parked and retired in one round: just retired
    return (ParkDecision(eff, tuple(park), tuple(unpark), tuple(retire), held, tuple(serving_surplus)),
            ParkState(parked, recent))


__all__ = ["ParkDecision", "ParkState", "decide_parking"]
