"""Holding the cluster lease for a running daemon, and the fence it puts on the daemon's cloud.

``ClusterLease`` applies ``scaler.replicas.lease_decision.decide`` to a lease table (``scaler.replicas.lease_table`` on
DynamoDB; anything with ``get`` and a conditional ``write``):

* ``acquire()`` at start: read, decide, write conditionally (again on a lost race); raises
  ``LeaseHeld`` naming the holder (host, pid, since, expiry) when another live daemon holds it;
* ``renew()`` every ttl/3 (the daemon's APScheduler job); raises ``LeaseLost`` once the item has
  another owner or generation, and calls ``on_lost`` once; a failed call (no network) raises the
  cloud error and leaves the lease as it was;
* ``valid()``: held, not lost, and the local deadline (:class:`LocalDeadline`) not passed:
  ttl x (1 - CLOCK_SAFETY) after the last write that landed, on the monotonic clock (the share
  given up covers clock skew between hosts: another host takes over by its own wall clock);
  ``check()``, the fence's question, also wants ttl x ``ACT_RESERVE`` left for the act itself;
* ``release()`` on a clean stop: the item expires now, its generation kept.

``FencedCloud`` wraps the daemon's ``CloudProvider``: every launch and terminate first asks the
lease (renewing it on the spot when less than its act reserve is left) and is refused with ``Fenced`` when
the daemon does not own the cluster; listing is not fenced. Each launched instance is tagged with
the lease generation it was launched under. A call that began before a loss finishes: EC2 has no
conditional writes, and the new owner adopts what it finds by the cluster tag.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, Protocol

from config.errors import UsageError
from config.pids import pid_running
from scaler.cloud.provider import CloudConfigError, CloudError, CloudProvider, ManagedInstance
from scaler.replicas.lease_decision import Claimant, Lease, LeaseDecision, LeaseHeld, LeaseLost, decide, held_line, lost_line, released, utc

#: share of the ttl a holder gives up: it stops acting this much before the lease's expiry
CLOCK_SAFETY = 0.2
#: share of the ttl an act (a launch, a terminate) needs left on the local deadline when it starts:
#: with less (a renewal job late, DynamoDB unreachable) the fence renews first and refuses the act
#: when that renewal does not land, so an act that takes a while (EC2 answers in seconds) still ends
#: before the lease can expire by the table's clock (issue #40: one began 0.15 s before the deadline
#: and ended after the expiry). Renewals every ttl/3 leave at least ttl x (0.8 - 1/3) = 0.47 ttl, more
#: than this: in steady state the fence adds no write
ACT_RESERVE = 0.4
WRITE_ATTEMPTS = 3   # read-decide-write rounds lost to other writers before giving up
GENERATION_TAG = "costscale:lease-generation"   # on each launched instance: the lease it was launched under


class LocalDeadline:
    """Until when this host may trust a write it landed in a shared table (the lease, a replica's
    heartbeat): ``ttl x (1 - CLOCK_SAFETY)`` after the write *began*, on the monotonic clock.
    Another host judges the item expired by its own wall clock; the share given up covers the skew
    between the two clocks, and counting from the start covers the write's own latency."""

    def __init__(self, ttl_s: float) -> None:
        self.ttl_s = ttl_s
        self.at = 0.0        # monotonic s; nothing landed yet: passed

    def landed(self, started: float) -> None:
        """A write begun at ``started`` (monotonic s) landed."""
        self.at = started + self.ttl_s * (1 - CLOCK_SAFETY)

    def passed(self, now: float) -> bool:
        """The deadline has passed at ``now`` (monotonic s)."""
        return now >= self.at


class LeaseTable(Protocol):
    def get(self, cluster: str) -> Lease | None: ...

    def write(self, lease: Lease, expect: Lease | None) -> bool: ...


class Fenced(CloudConfigError, UsageError):
    """A launch or terminate refused: this daemon does not own the cluster (now). A
    ``CloudConfigError`` so the actuator stops at once, a ``UsageError`` so the fleet loop logs
    it as one line."""


class ClusterLease:
    """The lease of ``me.cluster`` as this daemon holds it (thread-safe: the renewal job and the
    fence may renew at the same time)."""

    def __init__(self, table: LeaseTable, me: Claimant, ttl_s: float, *, table_name: str = "",
                 clock: Callable[[], float] = time.time, monotonic: Callable[[], float] = time.monotonic,
                 alive: Callable[[int], bool] = pid_running, on_lost: Callable[[LeaseLost], None] | None = None) -> None:
        self.table = table
        self.me = me
        self.ttl_s = ttl_s
        self.table_name = table_name
        self.clock = clock
        self.monotonic = monotonic
        self.alive = alive
        self.on_lost = on_lost
        self.held: Lease | None = None
        self.taken_from: Lease | None = None   # the expired (or dead) holder's item acquire() replaced
        self.lost: LeaseLost | None = None
        self.lost_to: Lease | None = None      # the item that took it over (None: deleted)
        self.renew_error: str | None = None    # the last failed renewal, until one lands
        self.deadline = LocalDeadline(ttl_s)
        self._mu = threading.Lock()

    def _now(self) -> float:
        return round(self.clock(), 3)    # what the table stores (ms), so reads compare equal

    def _gone(self, item: Lease | None) -> bool:
        """The item's holder is a process of this host that no longer runs (it crashed)."""
        return item is not None and item.host == self.me.host and not self.alive(item.pid)

    def _settle(self, held: Lease | None) -> tuple[LeaseDecision, Lease | None]:
        """Read, decide, write conditionally; again while another writer came in between."""
        for _ in range(WRITE_ATTEMPTS):
            item = self.table.get(self.me.cluster)
            start = self.monotonic()
            d = decide(item, self.me, held, self._now(), self.ttl_s, holder_gone=self._gone(item))
            if d.write is None:
                return d, item
            if self.table.write(d.write, d.expect):
                self.held, self.renew_error = d.write, None
                self.deadline.landed(start)
                return d, d.write
        item = self.table.get(self.me.cluster)
        return LeaseDecision("refuse" if held is None else "lost", None, item), item

    def acquire(self) -> Lease:
        """Take the cluster's lease, or raise LeaseHeld naming its live holder."""
        with self._mu:
            d, item = self._settle(None)
            if d.write is None:
                assert item is not None
                raise LeaseHeld(held_line(item, self.table_name))
            self.taken_from = d.expect if d.action == "take" else None
            return d.write

    def renew(self) -> Lease | None:
        """Extend the lease; LeaseLost once another daemon owns it (``on_lost`` is called once).
        None when it is not held (released at stop)."""
        with self._mu:
            if self.lost is not None:
                raise self.lost
            if self.held is None:
                return None
            try:
                d, item = self._settle(self.held)
            except CloudError as exc:
                self.renew_error = str(exc)
                raise
            if d.action == "lost":
                self.lost, self.lost_to = LeaseLost(lost_line(self.me.cluster, item)), item
                self.held = None
                if self.on_lost is not None:
                    self.on_lost(self.lost)
                raise self.lost
            assert d.write is not None
            return d.write

    def valid(self) -> bool:
        """Held, not lost, and inside the local deadline."""
        return self.held is not None and self.lost is None and not self.deadline.passed(self.monotonic())

    def why_not(self) -> str:
        """Why the lease does not let the daemon act (for a refused call)."""
        if self.lost is not None:
            return str(self.lost)
        if self.held is None:
            return f"the lease of cluster {self.me.cluster} is not held"
        return (f"the lease of cluster {self.me.cluster} (until {utc(self.held.expires_at)}) could not be renewed"
                + (f": {self.renew_error}" if self.renew_error else ""))

    def check(self) -> str | None:
        """None when the daemon may act on its fleet now: held, not lost, and at least
        ``ttl x ACT_RESERVE`` left on the local deadline (renewing first when less is left), else
        why not."""
        def ready() -> bool:
            return self.valid() and self.deadline.at - self.monotonic() >= self.ttl_s * ACT_RESERVE
        if not ready() and self.held is not None and self.lost is None:
            try:
                self.renew()
            except (LeaseLost, CloudError):
                pass
        return None if ready() else self.why_not()

    def release(self) -> None:
        """Give the lease back (clean stop): the item expires now; raises LeaseLost if it was
        lost meanwhile. Another writer having come first is not an error."""
        with self._mu:
            if self.lost is not None:
                raise self.lost
            if self.held is not None:
                self.table.write(released(self.held, self._now()), self.held)
                self.held = None


class FencedCloud:
    """A ``CloudProvider`` that launches and terminates only while the daemon owns its cluster."""

    def __init__(self, cloud: CloudProvider, lease: ClusterLease) -> None:
        self.inner = cloud
        self.lease = lease
        self.cluster = cloud.cluster

    def _fence(self, op: str) -> None:
        why = self.lease.check()
        if why is not None:
            raise Fenced(f"{op} refused: {why}")

    def launch(self, instance_type: str, count: int, client_token: str,
               tags: dict[str, str] | None = None) -> list[ManagedInstance]:
        self._fence(f"launch of {count} {instance_type}")
        held = self.lease.held
        gen = {GENERATION_TAG: str(held.generation)} if held is not None else {}
        return self.inner.launch(instance_type, count, client_token, {**(tags or {}), **gen})

    def terminate(self, instance_ids: list[str]) -> None:
        if instance_ids:
            self._fence(f"terminate {', '.join(sorted(instance_ids))}")
        self.inner.terminate(instance_ids)

    def list_managed(self) -> list[ManagedInstance]:
        return self.inner.list_managed()

    def find_by_intent(self, client_token: str) -> list[ManagedInstance]:
        return self.inner.find_by_intent(client_token)

    def __getattr__(self, name: str) -> Any:    # the provider's other attributes (client, ...)
        return getattr(self.inner, name)
