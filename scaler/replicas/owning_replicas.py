"""How many dispatcher replicas own workers, which ones, and where the others forward (pure;
issue #27, deliverable 2).

Splitting a small pool over replicas loses most of its allowable throughput: measured in
BENCHMARKS.md "shard-matching", two shards of the 2.5 $/hr Kairos pools serve 0.00-0.81x what one
shard serves, because a shard without a base (GPU) instance cannot serve the large queries within
the QoS (Kairos §5.1: the matching's gain comes from sending each query size to the type that
serves it best; §5.2: the base type is the one that serves every size). At 10 $/hr, with 3-8 base
instances, two shards keep 0.94-0.99x. So the number of owning replicas is a decision:

1. **owners**: ``k = max(1, min(live replicas, base workers // MIN_BASE_PER_OWNER))``: only as many
   replicas own workers as keep at least ``MIN_BASE_PER_OWNER`` base-type workers each
   (``scaler.replicas.owner_assignment.assign`` splits each type evenly over the owners, so each owner
   gets ``base // k >= MIN_BASE_PER_OWNER`` of them), and at least one;
2. **which**: the lease holder first (when it is live: it is the replica that runs the fleet loop
   and survives longest in the role), then the live replicas that own workers now (sticky: a change
   of owner drains workers), then the others in id order;
3. **forwarding**: every live replica that owns no worker forwards its queries to the owning
   replicas, one after the other (round robin over all of them), so each owner matches ``1 / k``
   of the queries whatever ``R`` (dealing whole forwarders over the owners gave one owner of
   ``R = 4, k = 3`` half the queries on a third of the workers: 0.72x of one shard against 0.88x
   spread, BENCHMARKS.md "shard-matching"), and a forwarder whose owner died tries the others.

No I/O, no clock: the caller passes the live replicas (``scaler.replicas.membership.live_replicas``),
the holder, the base-type worker count and the current owners. Wired by
``daemon.replicas.shared_workers`` (the holder's owners round).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Collection, Sequence

#: base-type (GPU) workers each owning replica keeps at least, so every shard can serve the largest
#: queries (BENCHMARKS.md "shard-matching": 1 base per shard lost 0.19-1.0 of one shard's throughput)
MIN_BASE_PER_OWNER = 2


@dataclass(frozen=True)
class OwningReplicas:
    """The replicas that own workers (in the order chosen) and, for each live replica that owns
    none, the owning replicas it forwards its queries to, in turn (rule 3: every owner, in id
    order)."""

    owners: tuple[str, ...]
    forward_to: dict[str, tuple[str, ...]] = field(default_factory=dict)


def owner_count(live: int, base_workers: int, min_base: int = MIN_BASE_PER_OWNER) -> int:
    """How many of ``live`` replicas own workers (rule 1); 0 when none is live."""
    if live <= 0:
        return 0
    if min_base < 1:
        raise ValueError(f"min_base must be >= 1, not {min_base}")
    return max(1, min(live, max(0, base_workers) // min_base))


def owning_replicas(live: Collection[str], holder: str | None, base_workers: int,
                    current_owners: Sequence[str] = (), min_base: int = MIN_BASE_PER_OWNER) -> OwningReplicas:
    """The owning replicas and the forwarding of the others (module docstring, rules 1-3)."""
    replicas = sorted(set(live))
    k = owner_count(len(replicas), base_workers, min_base)
    if k == 0:
        return OwningReplicas(())
    order: list[str] = []
    if holder is not None and holder in replicas:
        order.append(holder)
    order += sorted(r for r in set(current_owners) if r in replicas and r not in order)
    order += [r for r in replicas if r not in order]
    owners = tuple(order[:k])
    spread = tuple(sorted(owners))
    return OwningReplicas(owners, {r: spread for r in replicas if r not in owners})


def arrival_shares(owning: OwningReplicas) -> dict[str, Fraction]:
    """Each owning replica's share of the queries when the balancer in front deals them evenly over
    the ``R`` live replicas (gRPC round_robin, an NLB; DESIGN "Beyond one control host"): its own
    ``1 / R`` plus, from each of the ``R - k`` forwarders, ``1 / (R k)`` (rule 3: a forwarder's
    queries go to every owner in turn), so ``1 / k`` each. Empty when nothing is owned."""
    live = len(owning.owners) + len(owning.forward_to)
    if not owning.owners:
        return {}
    received = {o: Fraction(1, live) for o in owning.owners}
    for targets in owning.forward_to.values():
        for t in targets:
            received[t] += Fraction(1, live * len(targets))
    return received


__all__ = ["MIN_BASE_PER_OWNER", "OwningReplicas", "arrival_shares", "owner_count", "owning_replicas"]
