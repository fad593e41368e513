"""Which dispatcher replicas are alive: heartbeats in the lease table (pure; issue #27, deliverable 2).

Every dispatcher replica of a cluster writes a heartbeat item in the cluster's lease table
(``scaler.replicas.replica_table``) every ``ttl / 3`` (``scaler.replicas.lease_decision.RENEWALS_PER_TTL``): its replica id,
its process (``owner``: host, pid, nonce), its address, the highest version of the published
worker owners it has applied (``scaler.replicas.handoff``) and an expiry ``ttl`` ahead. The lease
holder counts a replica live while its item has not expired, by the holder's clock.

This module is the decision alone, data in and data out (no I/O, no clock: ``now`` is passed in),
in the shape of ``scaler.replicas.lease_decision.decide``:

* :func:`decide_beat`: write a new item (none yet), renew ours, take over an expired one (the same
  replica id restarted), or refuse (another live process already beats under this replica id:
  two processes with one id would both take that replica's workers);
* every write is conditional on the item as read (``BeatDecision.expect``), so of two processes
  racing for one replica id one wins;
* :func:`live_replicas`: the replica ids whose items have not expired at ``now``;
* :func:`crashed_here`: proof that a replica's process is gone, so its item may be deleted before
  it expires (issue #40: the dead owner's workers move at once, not a ttl later).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Iterable, Literal

from config.errors import UsageError
from scaler.replicas.lease_decision import utc

#: how long a replica's heartbeat lasts: a dead replica's workers move to the others within this
#: (plus one lease-holder round); the replica beats every third of it
REPLICA_TTL_S = 6.0

BeatAction = Literal["write", "renew", "take", "refuse"]


class ReplicaIdTaken(UsageError):
    """Another live process beats under this replica id: one line, exit 1 (the environment)."""

    exit_code = 1


@dataclass(frozen=True)
class Replica:
    """A dispatcher process asking to beat as ``replica`` of ``cluster`` (``owner`` unique per
    process: host, pid, nonce)."""

    cluster: str
    replica: str
    owner: str
    host: str
    address: str = ""


@dataclass(frozen=True)
class Beat:
    """One replica's heartbeat item, as stored (times in epoch seconds)."""

    cluster: str
    replica: str
    owner: str
    host: str
    address: str
    since: float          # when this process first beat under the replica id
    expires_at: float     # the replica is dead from then on unless it beats again
    applied: int = 0      # the highest published owners version it has applied

    def expired(self, now: float) -> bool:
        return self.expires_at <= now


@dataclass(frozen=True)
class BeatDecision:
    """Write ``write`` conditional on ``expect`` (None: no item may exist), or ``refuse``
    (``write`` None, ``expect`` the live item of the other process)."""

    action: BeatAction
    write: Beat | None
    expect: Beat | None


def decide_beat(item: Beat | None, me: Replica, now: float, ttl_s: float, applied: int) -> BeatDecision:
    """The heartbeat decision for ``me`` given its replica item as just read."""
    fresh = Beat(cluster=me.cluster, replica=me.replica, owner=me.owner, host=me.host, address=me.address,
                 since=now, expires_at=now + ttl_s, applied=applied)
    if item is None:
        return BeatDecision("write", fresh, None)
    if item.owner == me.owner:
        return BeatDecision("renew", replace(item, expires_at=now + ttl_s, applied=applied, address=me.address), item)
    if item.expired(now):
        return BeatDecision("take", fresh, item)
    return BeatDecision("refuse", None, item)


def live_replicas(beats: Iterable[Beat], now: float) -> list[str]:
    """The replica ids alive at ``now`` (their items not expired), sorted."""
    return sorted({b.replica for b in beats if not b.expired(now)})


def applied_versions(beats: Iterable[Beat], now: float) -> dict[str, int]:
    """Each live replica's applied version (what ``scaler.replicas.handoff.next_published`` reads)."""
    return {b.replica: b.applied for b in beats if not b.expired(now)}


def owner_pid(beat: Beat) -> int | None:
    """The pid of the process beating ``beat`` (its ``owner`` is ``host:pid:nonce``,
    ``daemon.aws.wiring.claimant``), None when it names none."""
    parts = beat.owner.rsplit(":", 2)
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None


def crashed_here(beat: Beat, host: str, alive: Callable[[int], bool], listening: Callable[[str], bool]) -> bool:
    """Proof that the process beating ``beat`` is gone, so that it sends no query to any worker
    and its heartbeat item may be deleted before it expires (what its clean stop does): it ran on
    this ``host``, its pid no longer runs (``alive``: a zombie counts as gone, it holds no socket)
    and its address refuses connections (``listening``: a process of another pid namespace under the
    same host name still listens there). A replica on another host is never proven gone: its
    heartbeat expires (a refused connect alone is no proof: a loopback address names this host's
    own ports, and a stopping replica closes its port once its queries ended but beats on)."""
    pid = owner_pid(beat)
    return (beat.host == host and pid is not None and bool(beat.address) and not alive(pid)
            and not listening(beat.address))


def taken_line(item: Beat, table: str) -> str:
    """Why a replica may not start: the process that beats under its id."""
    return (f"replica {item.replica} of cluster {item.cluster} is already running (host {item.host}, since "
            f"{utc(item.since)}, heartbeat until {utc(item.expires_at)}; DynamoDB table {table}); give this "
            "dispatcher another replica id, or wait until that heartbeat expires")


__all__ = ["REPLICA_TTL_S", "Beat", "BeatDecision", "Replica", "ReplicaIdTaken", "applied_versions", "crashed_here",
           "decide_beat", "live_replicas", "owner_pid", "taken_line"]
