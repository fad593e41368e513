"""When a worker may pass from one dispatcher replica to another (pure; issue #27, deliverable 2).

Kairos runs one query per worker at a time (§5.1), so a worker must never be in use by two
replicas, not even for the seconds in which the replicas learn of a new owner. The lease holder
publishes the owners as a numbered :class:`Published` mapping (the ``version`` goes up by one at
every change); each replica *applies* a version (it stops sending to the workers that are no longer
its own, waits until its queries in flight on them are done, then takes the ones that are new) and
reports the highest version it has applied in its heartbeat (``scaler.replicas.membership``).

:func:`next_published` turns the owners :func:`scaler.replicas.owner_assignment.assign` wants into the
next published mapping, by two rules:

* a worker whose owner is **dead** (its heartbeat expired) or who has no owner goes to its new
  owner at once: a replica acts on its workers only while its own heartbeat is valid, and it
  stops a safety margin *before* the lease holder sees it expire (``scaler.replicas.heartbeat``);
* a worker that leaves a **live** replica is first published without an owner (:class:`Release`,
  the version that released it), and given to its new owner only once the old one has applied
  that version (or died); a worker in handoff that is wanted back by the replica releasing it
  goes back to it at once.

So a worker in use by a replica is owned by it in the version the replica applied, and every
later owner was granted it only after that replica had applied a version in which it was no longer
its own: at most one replica uses a worker at any time (tested over random join, leave and apply
sequences).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Collection, Mapping


@dataclass(frozen=True)
class Release:
    """A worker on its way from ``owner`` (a live replica) to ``to``: given to ``to`` once
    ``owner`` has applied ``version`` (the version that took it away)."""

    owner: str
    version: int
    to: str


@dataclass(frozen=True)
class Published:
    """The owners as the lease holder published them: ``owner`` (worker → replica) and the
    workers in handoff (``releasing``, owned by nobody meanwhile), numbered ``version``."""

    version: int = 0
    owner: Mapping[str, str] = field(default_factory=dict)
    releasing: Mapping[str, Release] = field(default_factory=dict)

    def intended(self) -> dict[str, str]:
        """Where every worker is or is going: the ``previous`` of the next
        :func:`scaler.replicas.owner_assignment.assign` (a worker in handoff sticks to its new owner)."""
        out = dict(self.owner)
        out.update({w: r.to for w, r in self.releasing.items()})
        return out

    def owning(self) -> frozenset[str]:
        """The replicas that own a worker or are receiving one (a handoff's new owner)."""
        return frozenset(self.owner.values()) | {r.to for r in self.releasing.values()}

    def workers_of(self, replica: str) -> frozenset[str]:
        """The workers ``replica`` may use once it has applied this version."""
        return frozenset(w for w, r in self.owner.items() if r == replica)


def next_published(current: Published, desired: Mapping[str, str], live: Collection[str],
                   applied: Mapping[str, int]) -> Published:
    """The mapping to publish after ``current`` for the owners ``desired`` (worker → live
    replica; workers not in it are given to nobody: gone from the fleet, or no replica live),
    given the live replicas and the highest version each has applied. ``current`` itself when
    nothing changes (no new version)."""
    live_set = set(live)
    version = current.version + 1
    owner: dict[str, str] = {}
    releasing: dict[str, Release] = {}
    for w in sorted(desired):
        to = desired[w]
        had = current.owner.get(w)
        if had == to:
            owner[w] = to
        elif had is not None and had in live_set:               # take it from a live replica first
            releasing[w] = Release(had, version, to)
        else:
            rel = current.releasing.get(w)
            if rel is not None and rel.owner != to and rel.owner in live_set and applied.get(rel.owner, 0) < rel.version:
                releasing[w] = Release(rel.owner, rel.version, to)   # still in use by rel.owner
            else:
                owner[w] = to
    if owner == dict(current.owner) and releasing == dict(current.releasing):
        return current
    return Published(version, owner, releasing)


__all__ = ["Published", "Release", "next_published"]
