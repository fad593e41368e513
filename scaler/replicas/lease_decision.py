"""The cluster lease: which daemon owns a cluster's fleet, across hosts (one owner per cluster).

The state-file lock (``scaler.fleet.state``) keeps a second daemon off one host; two daemons with the
same ``cluster`` on two hosts would still adopt, park and terminate each other's instances. The
cure is the standard leader lease: one item per cluster in a shared table, written only with
conditional writes, renewed by its holder, taken over only once it has expired. This module is
the decision alone, data in and data out (no I/O, no clock: ``now`` is passed in):

* ``decide(item, me, held, now, ttl_s)``: given the item as read and the time, *take* it (no item,
  expired, released, or its holder a dead process on this host), *renew* it (ours), *refuse*
  (another live holder) or, for a holder renewing, find it *lost* (another owner, or the
  ``generation`` moved);
* every take of a new holder adds one to ``generation`` (a fencing counter: it never goes back,
  a release keeps it), and every write is conditional on the item as it was read
  (``LeaseDecision.expect``), so of two daemons racing for one expired lease one wins;
* ``held_line`` / ``lost_line``: the one line a refused or fenced daemon prints.

The table adapter is ``scaler.replicas.lease_table`` (DynamoDB); ``scaler.replicas.lease_holder`` holds a lease for
the daemon and fences its cloud.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Literal

from config.errors import UsageError

#: renewals per ttl: a holder renews every ttl/3, so two renewals may fail before the lease lapses
RENEWALS_PER_TTL = 3

Action = Literal["take", "renew", "refuse", "lost"]


class LeaseError(UsageError):
    """The daemon does not own its cluster: one line, exit 1 (the environment, not the config)."""

    exit_code = 1


class LeaseHeld(LeaseError):
    """Another live daemon holds the cluster's lease: this one must not start."""


class LeaseLost(LeaseError):
    """The lease this daemon held has another owner now: it must stop acting on the fleet."""


@dataclass(frozen=True)
class Claimant:
    """A daemon process asking for its cluster's lease: ``owner`` is unique per process (host,
    pid, nonce)."""

    cluster: str
    owner: str
    host: str
    pid: int


@dataclass(frozen=True)
class Lease:
    """The lease item of one cluster, as stored (times in epoch seconds)."""

    cluster: str
    owner: str
    host: str
    pid: int
    since: float          # when this holder took it
    expires_at: float     # it is free from then on unless renewed
    generation: int       # fencing counter: +1 at every change of holder

    def expired(self, now: float) -> bool:
        return self.expires_at <= now


@dataclass(frozen=True)
class LeaseDecision:
    """What to do with the item read: ``write`` it conditional on ``expect`` (None: no item may
    exist), or give up (``refuse``, ``lost``: ``write`` is None, ``expect`` the holder's item)."""

    action: Action
    write: Lease | None
    expect: Lease | None


def renew_interval_s(ttl_s: float) -> float:
    """How often a holder renews its lease."""
    return ttl_s / RENEWALS_PER_TTL


def decide(item: Lease | None, me: Claimant, held: Lease | None, now: float, ttl_s: float, *,
           holder_gone: bool = False) -> LeaseDecision:
    """The lease decision for ``me`` given the cluster's ``item`` as just read.

    ``held`` is the lease ``me`` holds (None when asking for it). ``holder_gone``: the caller saw
    that the item's holder is a process of this host that no longer runs (a crash): its lease is
    taken at once instead of after it expires."""
    if held is not None:
        if item is None or item.owner != held.owner or item.generation != held.generation:
            return LeaseDecision("lost", None, item)
        return LeaseDecision("renew", replace(item, expires_at=now + ttl_s), item)
    if item is None:
        return LeaseDecision("take", _new(me, 1, now, ttl_s), None)
    if item.owner == me.owner:      # ours already (a write whose answer was lost): keep it
        return LeaseDecision("renew", replace(item, expires_at=now + ttl_s), item)
    if item.expired(now) or holder_gone:
        return LeaseDecision("take", _new(me, item.generation + 1, now, ttl_s), item)
    return LeaseDecision("refuse", None, item)


def released(held: Lease, now: float) -> Lease:
    """The item a holder writes on a clean stop: expired now, its generation kept (the next
    holder's is one more, so fencing tokens never repeat)."""
    return replace(held, expires_at=min(held.expires_at, now))


def _new(me: Claimant, generation: int, now: float, ttl_s: float) -> Lease:
    return Lease(cluster=me.cluster, owner=me.owner, host=me.host, pid=me.pid, since=now, expires_at=now + ttl_s,
                 generation=generation)


def utc(t: float) -> str:
    """Epoch seconds as an ISO-8601 UTC time to the second (``2025-01-02T03:04:05Z``)."""
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def holder_text(lease: Lease) -> str:
    """``host h1 pid 4242 since …, lease expires …``: who holds a lease, for one line."""
    return f"host {lease.host} pid {lease.pid} since {utc(lease.since)}, lease expires {utc(lease.expires_at)}"


def held_line(lease: Lease, table: str) -> str:
    """Why a daemon is refused: the holder, and what to do."""
    return (f"cluster {lease.cluster} is owned by another costscale daemon ({holder_text(lease)}; "
            f"DynamoDB table {table}); stop that daemon, or if it crashed wait until its lease expires")


def lost_line(cluster: str, now_holder: Lease | None) -> str:
    """Why a running daemon stopped acting on its fleet."""
    who = (f"to {holder_text(now_holder)}, generation {now_holder.generation}" if now_holder is not None
           else "(its item was deleted)")
    return f"lease of cluster {cluster} lost {who}: stopped launching and terminating instances"
