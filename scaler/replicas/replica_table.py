"""Dispatcher replicas' items in the cluster lease table (issue #27, deliverable 2; the adapter
under ``scaler.replicas.membership`` and ``scaler.replicas.handoff``).

Two kinds of items beside a cluster's lease (keys from ``scaler.replicas.dynamo_items.item_key``):

* ``{cluster}#replica#{replica}``, one per replica: ``replica``, ``owner`` (the process: host,
  pid, nonce), ``host``, ``address``, ``since``, ``expires_at`` (epoch s) and ``applied`` (the
  published owners version it has applied). A write is conditional on the item as the decision
  read it (none; the same owner; or the same expiry of an expired item), so two processes racing
  for one replica id cannot both beat under it.
* ``{cluster}#owners``, one per cluster: the published worker owners (``version``, the mapping as
  JSON in ``owners``) and the lease ``generation`` of the holder that wrote it. A write lands only
  over the version its writer read, written under the writer's lease generation or an older one:
  a new lease holder goes on from the owners (and the handoffs) its predecessor published, and
  once it has written, a deposed holder's write never lands.
"""
from __future__ import annotations

import json
from typing import Any, Iterable

from scaler.replicas.dynamo_items import KEY, DynamoItems, item_key, num
from scaler.replicas.handoff import Published, Release
from scaler.replicas.membership import Beat

REPLICA = "replica"
OWNERS = "owners"


def beat_item(b: Beat) -> dict[str, Any]:
    return {KEY: {"S": item_key(b.cluster, REPLICA, b.replica)}, "replica": {"S": b.replica},
            "owner": {"S": b.owner}, "host": {"S": b.host}, "address": {"S": b.address or "-"},
            "since": {"N": num(b.since)}, "expires_at": {"N": num(b.expires_at)}, "applied": {"N": str(b.applied)}}


def beat_of(cluster: str, item: dict[str, Any]) -> Beat:
    address = item["address"]["S"]
    return Beat(cluster=cluster, replica=item["replica"]["S"], owner=item["owner"]["S"], host=item["host"]["S"],
                address="" if address == "-" else address, since=float(item["since"]["N"]),
                expires_at=float(item["expires_at"]["N"]), applied=int(item["applied"]["N"]))


def beats_in(cluster: str, items: Iterable[dict[str, Any]]) -> list[Beat]:
    """The heartbeats among a cluster's ``replica`` items, by replica id."""
    return sorted((beat_of(cluster, i) for i in items), key=lambda b: b.replica)


def owners_json(p: Published) -> str:
    return json.dumps({"owner": dict(sorted(p.owner.items())),
                       "releasing": {w: [r.owner, r.version, r.to] for w, r in sorted(p.releasing.items())}},
                      separators=(",", ":"))


def published_of(item: dict[str, Any]) -> tuple[Published, int]:
    """The published owners in an item, and the lease generation that wrote them."""
    data = json.loads(item["owners"]["S"])
    rel = {w: Release(str(o), int(v), str(t)) for w, (o, v, t) in data.get("releasing", {}).items()}
    return Published(int(item["version"]["N"]), dict(data.get("owner", {})), rel), int(item["generation"]["N"])


class DynamoReplicaTable(DynamoItems):
    """Replica heartbeats and the published worker owners of one cluster, in the lease table."""

    def __init__(self, table: str, client: Any, cluster: str) -> None:
        super().__init__(table, client)
        self.cluster = cluster

    # -- heartbeats ---------------------------------------------------------------------------
    def beat_item(self, replica: str) -> Beat | None:
        """A replica's heartbeat item (strongly consistent read), or None."""
        item = self.get_item(item_key(self.cluster, REPLICA, replica))
        return beat_of(self.cluster, item) if item else None

    def write_beat(self, beat: Beat, expect: Beat | None) -> bool:
        """Put ``beat`` if the replica's item is still ``expect`` (None: no item); False when
        another process's write came first."""
        if expect is None:
            return self.put_if(beat_item(beat), "attribute_not_exists(#k)", {"#k": KEY})
        return self.put_if(beat_item(beat), "#o = :o AND #e = :e", {"#o": "owner", "#e": "expires_at"},
                           {":o": {"S": expect.owner}, ":e": {"N": num(expect.expires_at)}})

    def beats(self) -> list[Beat]:
        """Every replica item of the cluster, live or expired (``replica_membership.live_replicas``
        says which are live)."""
        return beats_in(self.cluster, self.scan_prefix(item_key(self.cluster, REPLICA, "")))

    def forget(self, beat: Beat) -> bool:
        """Delete a replica's item (a clean stop) if it is still ``beat``'s; False otherwise."""
        return self.delete_if(item_key(self.cluster, REPLICA, beat.replica), "#o = :o",
                              {"#o": "owner"}, {":o": {"S": beat.owner}})

    # -- published owners -----------------------------------------------------------------------
    def owners(self) -> tuple[Published, int] | None:
        """The published owners and the lease generation that wrote them, or None (none yet)."""
        item = self.get_item(item_key(self.cluster, OWNERS))
        return published_of(item) if item else None

    def publish(self, published: Published, generation: int, expect_version: int | None) -> bool:
        """Write ``published`` under lease ``generation`` if the item still holds
        ``expect_version`` (None: no item yet) written under this generation or an older one;
        False when a newer version, or a holder of a newer generation, came first."""
        item = {KEY: {"S": item_key(self.cluster, OWNERS)}, "version": {"N": str(published.version)},
                "generation": {"N": str(generation)}, "owners": {"S": owners_json(published)}}
        if expect_version is None:
            return self.put_if(item, "attribute_not_exists(#k)", {"#k": KEY})
        return self.put_if(item, "#v = :v AND #g <= :g", {"#g": "generation", "#v": "version"},
                           {":g": {"N": str(generation)}, ":v": {"N": str(expect_version)}})


__all__ = ["REPLICA", "DynamoReplicaTable", "beat_item", "beat_of", "beats_in", "owners_json", "published_of"]
