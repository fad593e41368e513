"""The lease holder's round over the dispatcher replicas' workers (issue #27, deliverable 2).

Run by the daemon that holds the cluster lease, every replica heartbeat period (``ttl / 3``), on
the replica table (``scaler.replicas.replica_table``; anything with ``beats``, ``owners`` and a conditional
``publish``):

1. the replicas alive by heartbeat at ``now``, and the owners version each has applied
   (``scaler.replicas.membership``);
2. the owners published last (and the handoffs in flight), as the previous holder left them if the
   lease moved;
3. the owners wanted (``scaler.replicas.owner_assignment.assign``: balanced by type, sticky), over the
   owning replicas only when the caller names them (``scaler.replicas.owning_replicas``: as many as keep
   >= 2 base-type workers each; the others own none and forward);
4. the next published mapping (``scaler.replicas.handoff.next_published``), written conditionally
   under the holder's lease generation; nothing is written when nothing changed.

A dead replica's workers are granted to the live ones in the first round after its heartbeat
expires: within ``REPLICA_TTL_S`` plus one round of its last beat. Not wired into the daemon yet
(``daemon.replicas.role`` beats and merges demand; no replica owns workers).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Collection, Protocol, Sequence

from scaler.replicas.owner_assignment import Worker, assign, moved
from scaler.replicas.handoff import Published, next_published
from scaler.replicas.membership import Beat, applied_versions, live_replicas


class OwnersTable(Protocol):
    def beats(self) -> list[Beat]: ...

    def owners(self) -> tuple[Published, int] | None: ...

    def publish(self, published: Published, generation: int, expect_version: int | None) -> bool: ...


@dataclass(frozen=True)
class OwnersRound:
    """What a round found and did: the live replicas, the owners in force after it, the workers
    leaving a live replica (worker → (from, to)), and whether a new version was written
    (``lost``: another writer came first; the next round reads again)."""

    live: tuple[str, ...]
    published: Published
    moving: dict[str, tuple[str, str]]
    wrote: bool
    lost: bool = False


def owners_round(table: OwnersTable, workers: Sequence[Worker], generation: int, now: float,
                 owning: Callable[[list[str], Published], Collection[str]] | None = None) -> OwnersRound:
    """One round (module docstring) for ``workers`` (every worker of the fleet), by the holder of
    lease ``generation``, at ``now`` (epoch s, the holder's clock). ``owning(live, current)``: the
    live replicas that may own workers (default: every live one)."""
    beats = table.beats()
    live = live_replicas(beats, now)
    held = table.owners()
    current = held[0] if held is not None else Published()
    owners = live if owning is None else [r for r in owning(live, current) if r in live]
    desired = assign(workers, owners, current.intended())
    nxt = next_published(current, desired, live, applied_versions(beats, now))
    moving = moved(current.owner, desired, live)
    if nxt is current:
        return OwnersRound(tuple(live), current, moving, False)
    if not table.publish(nxt, generation, current.version if held is not None else None):
        return OwnersRound(tuple(live), current, moving, False, lost=True)
    return OwnersRound(tuple(live), nxt, moving, True)


__all__ = ["OwnersRound", "OwnersTable", "owners_round"]
