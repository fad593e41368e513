"""Each dispatcher replica's demand windows in the cluster lease table (issue #27, deliverable 3;
the adapter under ``scaler.replicas.demand``).

One item per replica, keyed ``{cluster}#demand#{replica}``: ``replica``, ``owner`` (the process
that wrote it, as in its heartbeat: ``scaler.replicas.membership.Replica.owner``), ``at`` (epoch s,
the publisher's clock) and ``windows``: every model's window as JSON (rates, counts, mean batch,
span, and the batch-size mix as two lists; a float's JSON text reads back as the same float). A
replica publishes with every heartbeat; the write is conditional: no item yet, the same process's
item, or an item older than ``replica_demand.DEMAND_MAX_AGE_S`` (the same replica id restarted),
so a second live process under one replica id cannot overwrite the first's numbers. The lease
holder reads every replica's item (:meth:`DynamoDemandTable.read`) and sums the live ones
(``replica_demand.merge_demand``).
"""
from __future__ import annotations

import json
from typing import Any, Iterable, Mapping

import numpy as np

from scaler.planner.batch_mix import BatchMix
from scaler.replicas.dynamo_items import KEY, DynamoItems, item_key, num
from scaler.replicas.demand import DEMAND_MAX_AGE_S, ModelWindow, ReplicaDemand
from scaler.replicas.membership import Replica

DEMAND = "demand"


def window_json(w: ModelWindow) -> dict[str, Any]:
    return {"arrival_qps": w.arrival_qps, "steady_qps": w.steady_qps, "count": w.count, "total": w.total,
            "mean_batch": w.mean_batch, "span_s": w.span_s,
            "sizes": [int(s) for s in w.mix.sizes], "fractions": [float(f) for f in w.mix.fractions]}


def window_of_json(d: Mapping[str, Any]) -> ModelWindow:
    mix = BatchMix(np.asarray(d["sizes"], dtype=np.int64), np.asarray(d["fractions"], dtype=float))
    return ModelWindow(arrival_qps=float(d["arrival_qps"]), steady_qps=float(d["steady_qps"]), count=int(d["count"]),
                       total=int(d["total"]), mean_batch=float(d["mean_batch"]), mix=mix, span_s=float(d["span_s"]))


def demands_in(items: Iterable[dict[str, Any]]) -> list[ReplicaDemand]:
    """The replicas' publications among a cluster's ``demand`` items, by replica id."""
    out = []
    for item in items:
        windows = {m: window_of_json(d) for m, d in json.loads(item["windows"]["S"]).items()}
        out.append(ReplicaDemand(item["replica"]["S"], float(item["at"]["N"]), windows))
    return sorted(out, key=lambda d: d.replica)


class DynamoDemandTable(DynamoItems):
    """The replicas' published demand windows of one cluster, in the lease table."""

    def __init__(self, table: str, client: Any, cluster: str, max_age_s: float = DEMAND_MAX_AGE_S) -> None:
        super().__init__(table, client)
        self.cluster = cluster
        self.max_age_s = max_age_s

    def publish(self, me: Replica, demand: ReplicaDemand) -> bool:
        """Write ``me``'s windows (``demand.replica`` must be ``me.replica``); False when another
        live process of the same replica id holds the item."""
        if demand.replica != me.replica:
            raise ValueError(f"replica {me.replica} cannot publish replica {demand.replica}'s demand")
        body = json.dumps({m: window_json(w) for m, w in sorted(demand.windows.items())}, separators=(",", ":"))
        item = {KEY: {"S": item_key(self.cluster, DEMAND, me.replica)}, "replica": {"S": me.replica},
                "owner": {"S": me.owner}, "at": {"N": num(demand.at)}, "windows": {"S": body}}
        return self.put_if(item, "attribute_not_exists(#k) OR #o = :o OR #a <= :old",
                           {"#k": KEY, "#o": "owner", "#a": "at"},
                           {":o": {"S": me.owner}, ":old": {"N": num(demand.at - self.max_age_s)}})

    def read(self) -> list[ReplicaDemand]:
        """Every replica's published windows (stale ones included: the merge drops them)."""
        return demands_in(self.scan_prefix(item_key(self.cluster, DEMAND, "")))

    def forget(self, me: Replica) -> bool:
        """Delete ``me``'s item if this process wrote it (a clean stop)."""
        return self.delete_if(item_key(self.cluster, DEMAND, me.replica), "#o = :o", {"#o": "owner"},
                              {":o": {"S": me.owner}})


__all__ = ["DEMAND", "DynamoDemandTable", "demands_in", "window_json", "window_of_json"]
