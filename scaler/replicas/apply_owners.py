"""Which workers one dispatcher replica connects to and drops, after reading the published owners
(pure; issue #27, deliverable 2).

Every replica reads, each heartbeat round, the published owners (``scaler.replicas.handoff``:
numbered versions) and the registered workers (``scaler.replicas.worker_table``: id, type, address, who
accepted it). :func:`apply_owners` says what the replica does with them:

* **drop** the workers it holds that the version does not give it: no new query goes to them; one
  whose query is still running stays until that query ends (Kairos §5.1: one query per worker, so
  it must not be matched by the next owner before), and is removed in a later round;
* **connect** the workers the version gives it that it does not hold (or holds at another address:
  the worker restarted and registered again);
* **applied**: the version it reports in its heartbeat. It is the version read only once no
  dropped worker is still running a query; until then it stays at the previous one, so the lease
  holder does not grant those workers to their next owner (``next_published``'s handoff rule).

A replica whose heartbeat is not valid (``scaler.replicas.heartbeat``: its local deadline passed)
holds no worker: everything is dropped and nothing connected; after the lapse it starts again from
owners read afterwards.

:func:`round_workers` is what the lease holder's owners round runs over: the registered workers of
instances the cloud lists (the others are forgotten once older than a heartbeat ttl).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Mapping, Sequence

from scaler.replicas.owner_assignment import Worker
from scaler.replicas.handoff import Published


@dataclass(frozen=True)
class WorkerItem:
    """One registered worker, as ``scaler.replicas.worker_table`` stores it: where it listens, which replica
    accepted it, and when (epoch s, that replica's clock)."""

    instance_id: str
    instance_type: str
    address: str
    replica: str
    at: float


@dataclass(frozen=True)
class OwnedWorkers:
    """What one replica does after reading the owners: ``connect`` these workers, ``drop`` these
    ids (removed at once when idle, else drained first), ``keep`` the ones it holds and owns (one
    it was draining because it was dropped and is given back: taking queries again), and report
    version ``applied``."""

    connect: tuple[WorkerItem, ...]
    drop: tuple[str, ...]
    keep: tuple[str, ...]
    applied: int


def apply_owners(published: Published | None, me: str, items: Sequence[WorkerItem], held: Mapping[str, str],
                 busy: Collection[str], valid: bool, applied: int) -> OwnedWorkers:
    """The decision for replica ``me`` (module docstring): ``held`` is worker id → address of the
    workers it holds now, ``busy`` those running a query, ``valid`` whether its heartbeat is,
    ``applied`` the version it reported last."""
    mine = published.workers_of(me) if (published is not None and valid) else frozenset()
    drop = tuple(sorted(w for w in held if w not in mine))
    connect = tuple(i for i in sorted(items, key=lambda i: i.instance_id)
                    if i.instance_id in mine and held.get(i.instance_id) != i.address)
    done = published is not None and valid and not any(w in busy for w in drop)
    keep = tuple(sorted(w for w in held if w in mine))
    return OwnedWorkers(connect, drop, keep, published.version if done else applied)   # type: ignore[union-attr]


@dataclass(frozen=True)
class RoundWorkers:
    """The holder's view of the registered workers: those its owners round assigns, and the items
    of instances gone to forget."""

    workers: tuple[Worker, ...]
    forget: tuple[WorkerItem, ...]


def round_workers(items: Sequence[WorkerItem], live: Mapping[str, str] | None, now: float,
                  grace_s: float) -> RoundWorkers:
    """``items`` against the cloud's live instances (id → type; None: not listed yet, all kept):
    a worker of a live instance takes part (one item per id, the newest); an item of an instance
    not live is forgotten once older than ``grace_s`` (a registration may precede the listing)."""
    newest: dict[str, WorkerItem] = {}
    for i in items:
        if i.instance_id not in newest or newest[i.instance_id].at < i.at:
            newest[i.instance_id] = i
    keep = [i for i in newest.values() if live is None or i.instance_id in live]
    gone = [i for i in newest.values() if live is not None and i.instance_id not in live and now - i.at > grace_s]
    return RoundWorkers(tuple(sorted((i.instance_id, i.instance_type) for i in keep)),
                        tuple(sorted(gone, key=lambda i: i.instance_id)))


def forward_targets(published: Published | None, me: str, live: Mapping[str, str], holds_workers: bool) -> tuple[str, ...]:
    """The addresses a replica that holds no worker forwards its queries to, in turn
    (``scaler.replicas.owning_replicas`` rule 3: every live owning replica, in id order), given the live
    replicas (id → heartbeat address); empty when it holds or is given workers, or no other
    replica owns any."""
    if holds_workers or published is None:
        return ()
    owning = published.owning()
    if me in owning:
        return ()
    return tuple(live[r] for r in sorted(owning) if r in live and live[r])


def no_live_owner(published: Published | None, me: str, live: Mapping[str, str], holds_workers: bool) -> bool:
    """True when this replica holds no worker and is given none, and no live replica owns one: a
    query here can only wait for the next owners round (its owners died), so it is held
    (``dispatcher.forwarding``)."""
    if holds_workers or published is None:
        return False
    owning = published.owning()
    return me not in owning and not any(r in live for r in owning)


def owners_orphaned(published: Published | None, live: Collection[str]) -> bool:
    """Workers are owned (or on their way to an owner) and none of their owners is live: the
    owning replicas died and nobody serves their workers until an owners round moves them
    (``daemon.replicas.shared_workers.ReplicaWorkers.rescue_round``)."""
    if published is None:
        return False
    owning = published.owning()
    return bool(owning) and not owning & set(live)


def base_workers(workers: Sequence[Worker], base_type: str | None) -> int:
    """How many of ``workers`` are of the base type (``scaler.replicas.owning_replicas``'s rule 1; none known: 0)."""
    return sum(1 for _, t in workers if base_type is not None and t == base_type)


__all__ = ["OwnedWorkers", "RoundWorkers", "WorkerItem", "apply_owners", "base_workers", "forward_targets", "no_live_owner", "owners_orphaned", "round_workers"]
