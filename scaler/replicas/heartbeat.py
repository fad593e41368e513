"""A dispatcher replica's heartbeat, as the replica keeps it (issue #27, deliverable 2).

``ReplicaHeartbeat`` applies ``scaler.replicas.membership.decide_beat`` to the replica table
(``scaler.replicas.replica_table``; anything with ``beat_item``, a conditional ``write_beat`` and ``forget``),
the way ``scaler.replicas.lease_holder.ClusterLease`` holds the cluster lease:

* ``beat(applied)`` every ``ttl / 3``: read, decide, write conditionally (again on a lost race);
  raises ``ReplicaIdTaken`` naming the other process when a live one beats under the same replica
  id; a failed call (no network) raises the cloud error and leaves the heartbeat as it was;
* ``valid()``: a beat landed and its local deadline has not passed: ``ttl x (1 - CLOCK_SAFETY)``
  after the start of the last write that landed, on the monotonic clock (the lease's
  ``scaler.replicas.lease_holder.LocalDeadline``). A replica sends queries
  to its workers only while its heartbeat is valid, so it stops before the lease holder, by its
  own wall clock, sees the item expire and gives its workers to the others
  (``scaler.replicas.handoff``): a worker is never in use by a dead replica and a live one at once;
* ``lapses``: how many times a beat landed after the deadline had passed. After a lapse the
  replica's workers may have moved: it uses none until it has applied owners read after the lapse;
* ``stop()`` on a clean stop: the item is deleted (if still ours), so the holder moves the workers
  at its next round instead of after the ttl.

``daemon.replicas.role`` beats and stops; ``valid()``, ``remaining_s()`` and ``lapses`` serve the
workers' handoff (``daemon.replicas.shared_workers``).
"""
from __future__ import annotations

import threading
import time
from typing import Callable, Protocol

from scaler.replicas.lease_holder import WRITE_ATTEMPTS, LocalDeadline
from scaler.replicas.membership import REPLICA_TTL_S, Beat, Replica, ReplicaIdTaken, decide_beat, taken_line


class ReplicaTable(Protocol):
    def beat_item(self, replica: str) -> Beat | None: ...

    def write_beat(self, beat: Beat, expect: Beat | None) -> bool: ...

    def forget(self, beat: Beat) -> bool: ...


class ReplicaHeartbeat:
    """The heartbeat of ``me`` (thread-safe: the beat job and the dispatcher's checks may run at
    the same time)."""

    def __init__(self, table: ReplicaTable, me: Replica, ttl_s: float = REPLICA_TTL_S, *, table_name: str = "",
                 clock: Callable[[], float] = time.time, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.table = table
        self.me = me
        self.ttl_s = ttl_s
        self.table_name = table_name
        self.clock = clock
        self.monotonic = monotonic
        self.held: Beat | None = None
        self.lapses = 0
        self.deadline = LocalDeadline(ttl_s)
        self._mu = threading.Lock()

    def _now(self) -> float:
        return round(self.clock(), 3)    # what the table stores (ms), so reads compare equal

    def beat(self, applied: int) -> Beat:
        """Write the heartbeat, reporting the published owners version ``applied``; raises
        ReplicaIdTaken when another live process beats under this replica id."""
        with self._mu:
            for _ in range(WRITE_ATTEMPTS):
                item = self.table.beat_item(self.me.replica)
                start = self.monotonic()
                d = decide_beat(item, self.me, self._now(), self.ttl_s, applied)
                if d.write is None:
                    assert d.expect is not None
                    self.held = None
                    raise ReplicaIdTaken(taken_line(d.expect, self.table_name))
                if self.table.write_beat(d.write, d.expect):
                    if self.held is not None and self.deadline.passed(start):
                        self.lapses += 1
                    self.held = d.write
                    self.deadline.landed(start)
                    return d.write
            item = self.table.beat_item(self.me.replica)
            self.held = None
            raise ReplicaIdTaken(taken_line(item, self.table_name) if item is not None else
                                 f"replica {self.me.replica} of cluster {self.me.cluster}: {WRITE_ATTEMPTS} heartbeat "
                                 "writes lost to other writers")

    def valid(self) -> bool:
        """A beat landed and the local deadline has not passed."""
        return self.held is not None and not self.deadline.passed(self.monotonic())

    def remaining_s(self) -> float:
        """Seconds until the local deadline (<= 0: not valid, or no beat landed)."""
        return self.deadline.at - self.monotonic() if self.held is not None else 0.0

    def stop(self) -> None:
        """Delete the heartbeat item if it is still ours (a clean stop)."""
        with self._mu:
            if self.held is not None:
                self.table.forget(self.held)
                self.held = None


__all__ = ["ReplicaHeartbeat", "ReplicaTable"]
