"""Every replica item of a cluster in the lease table, read in one Scan (issue #27): the heartbeats
(``scaler.replicas.replica_table``), the demand windows (``scaler.replicas.demand_table``), the registered workers
(``scaler.replicas.worker_table``) and the published owners. A Scan reads the whole table whatever its
filter, so a replica's heartbeat round reads them once (``daemon.replicas.role``) instead of a Scan per
kind and again for the owners round. An adapter on ``scaler.replicas.dynamo_items``.

``at`` is when the Scan began (epoch s, the reader's clock): a heartbeat the Scan returns with
``expires_at <= at`` had expired before the Scan read it, so judging liveness at ``at`` never
calls a replica dead that renewed in between (the handoff's argument, ``scaler.replicas.handoff``).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from scaler.replicas.demand_table import DEMAND, demands_in
from scaler.replicas.dynamo_items import KEY, SEP, DynamoItems, item_key
from scaler.replicas.demand import ReplicaDemand
from scaler.replicas.handoff import Published
from scaler.replicas.membership import Beat
from scaler.replicas.replica_table import OWNERS, REPLICA, beats_in, published_of
from scaler.replicas.apply_owners import WorkerItem
from scaler.replicas.worker_table import WORKER, worker_of


@dataclass(frozen=True)
class ClusterItems:
    """A cluster's replica items as one Scan read them at ``at``."""

    at: float
    beats: tuple[Beat, ...] = ()
    demands: tuple[ReplicaDemand, ...] = ()
    workers: tuple[WorkerItem, ...] = ()
    owners: tuple[Published, int] | None = None

    def live_addresses(self) -> dict[str, str]:
        """The replicas live at ``at``: id → heartbeat address."""
        return {b.replica: b.address for b in self.beats if not b.expired(self.at)}

    def with_own(self, beat: Beat | None, demand: ReplicaDemand | None) -> "ClusterItems":
        """These items with this replica's heartbeat and demand as it just wrote them (after the
        Scan), in place of what the Scan read of them."""
        beats = self.beats if beat is None else tuple(sorted(
            [b for b in self.beats if b.replica != beat.replica] + [beat], key=lambda b: b.replica))
        demands = self.demands if demand is None else tuple(sorted(
            [d for d in self.demands if d.replica != demand.replica] + [demand], key=lambda d: d.replica))
        return replace(self, beats=beats, demands=demands)


def read_cluster(table: DynamoItems, cluster: str, at: float) -> ClusterItems:
    """``cluster``'s heartbeats, demand windows, workers and published owners, in one Scan begun at
    ``at``."""
    kinds: dict[str, list[dict[str, Any]]] = {REPLICA: [], DEMAND: [], WORKER: [], OWNERS: []}
    owners_key = item_key(cluster, OWNERS)
    for item in table.scan_prefix(*(item_key(cluster, k) + SEP for k in (REPLICA, DEMAND, WORKER)), owners_key):
        key = item[KEY]["S"]
        kinds[OWNERS if key == owners_key else key.split(SEP)[1]].append(item)
    return ClusterItems(at, tuple(beats_in(cluster, kinds[REPLICA])), tuple(demands_in(kinds[DEMAND])),
                        tuple(sorted(map(worker_of, kinds[WORKER]), key=lambda w: w.instance_id)),
                        published_of(kinds[OWNERS][0]) if kinds[OWNERS] else None)


__all__ = ["ClusterItems", "read_cluster"]
