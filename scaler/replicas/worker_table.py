"""The workers a cluster's replicas accepted, in the cluster lease table (issue #27, deliverable 2;
an adapter on ``scaler.replicas.dynamo_items``; wired by ``daemon.replicas.shared_workers``).

A worker registers with whichever replica it reaches (its ``--dispatcher`` address may be a
balancer in front of the replicas). The accepting replica records it as one item keyed
``{cluster}#worker#{instance id}``: ``instance_type``, ``address`` (where the worker listens),
``replica`` (the one that accepted it) and ``at`` (epoch s, the accepting replica's clock). Every
replica reads these items to connect to the workers the published owners give it
(``scaler.replicas.owners_round``, ``scaler.replicas.handoff``, ``scaler.replicas.owning_replicas``).

The write is conditional: no item yet, or an item recorded at the same time or earlier, so a late
write of an older registration (a replica that stalled) never replaces a newer one (the worker
re-registered elsewhere after a failover). The lease holder deletes the items of instances the
cloud no longer lists (:meth:`DynamoWorkerTable.forget`, conditional on the item it read).
"""
from __future__ import annotations

from typing import Any

from scaler.replicas.dynamo_items import KEY, DynamoItems, item_key, num
from scaler.replicas.apply_owners import WorkerItem   # the item as data (pure), stored here

WORKER = "worker"


def worker_item(cluster: str, w: WorkerItem) -> dict[str, Any]:
    return {KEY: {"S": item_key(cluster, WORKER, w.instance_id)}, "instance_id": {"S": w.instance_id},
            "instance_type": {"S": w.instance_type}, "address": {"S": w.address}, "replica": {"S": w.replica},
            "at": {"N": num(w.at)}}


def worker_of(item: dict[str, Any]) -> WorkerItem:
    return WorkerItem(instance_id=item["instance_id"]["S"], instance_type=item["instance_type"]["S"],
                      address=item["address"]["S"], replica=item["replica"]["S"], at=float(item["at"]["N"]))


class DynamoWorkerTable(DynamoItems):
    """The registered workers of one cluster, in the lease table."""

    def __init__(self, table: str, client: Any, cluster: str) -> None:
        super().__init__(table, client)
        self.cluster = cluster

    def record(self, w: WorkerItem) -> bool:
        """Record ``w``; False when a registration recorded later is there already."""
        return self.put_if(worker_item(self.cluster, w), "attribute_not_exists(#k) OR #a <= :at",
                           {"#k": KEY, "#a": "at"}, {":at": {"N": num(w.at)}})

    def workers(self) -> list[WorkerItem]:
        """Every recorded worker of the cluster, by instance id."""
        items = self.scan_prefix(item_key(self.cluster, WORKER, ""))
        return sorted((worker_of(i) for i in items), key=lambda w: w.instance_id)

    def forget(self, w: WorkerItem) -> bool:
        """Delete ``w``'s item if it is still the registration read (its instance is gone)."""
        return self.delete_if(item_key(self.cluster, WORKER, w.instance_id), "#a = :at", {"#a": "at"},
                              {":at": {"N": num(w.at)}})


__all__ = ["DynamoWorkerTable", "worker_item", "worker_of"]
