"""The cluster lease table on DynamoDB (the adapter under ``scaler.replicas.lease_decision``'s decision).

One item per cluster, keyed by the cluster name: ``owner`` (S), ``host`` (S), ``pid`` (N),
``since`` (N), ``expires_at`` (N, epoch s) and the fencing ``generation`` (N). Every write is a
PutItem conditional on the item the decision read (``attribute_not_exists`` when there was none;
the same owner, generation and expiry otherwise): of two daemons racing, one write lands and the
other gets False, never an overwrite. Reads are strongly consistent. ``ensure_table`` creates the
table (PAY_PER_REQUEST) when it is missing.

botocore retries transient faults (throttling, 5xx, dropped connections) in its standard mode
on the client ``scaler.cloud.aws_client`` builds (3 attempts in all, short timeouts). What it gives up
on becomes ``scaler.cloud.provider``'s typed errors here: no credentials, refused access or a bad table
name → ``CloudConfigError``; anything else (an unreachable endpoint) → ``CloudError``.
"""
from __future__ import annotations

from typing import Any

from scaler.cloud.aws_client import make_client
from scaler.replicas.dynamo_items import KEY, DynamoItems, num
from scaler.replicas.lease_decision import Lease

DEFAULT_TABLE = "costscale-leases"


def make_dynamodb_client(region: str, endpoint_url: str | None = None, max_attempts: int = 3) -> Any:
    """A boto3 DynamoDB client, botocore retrying in its standard mode (``scaler.cloud.aws_client``),
    with short timeouts (a renewal must finish well inside a third of the lease)."""
    return make_client("dynamodb", region, endpoint_url=endpoint_url, max_attempts=max_attempts, connect_timeout=3,
                       read_timeout=5)


def to_item(lease: Lease) -> dict[str, Any]:
    return {KEY: {"S": lease.cluster}, "owner": {"S": lease.owner}, "host": {"S": lease.host},
            "pid": {"N": str(lease.pid)}, "since": {"N": num(lease.since)},
            "expires_at": {"N": num(lease.expires_at)}, "generation": {"N": str(lease.generation)}}


def from_item(item: dict[str, Any]) -> Lease:
    return Lease(cluster=item[KEY]["S"], owner=item["owner"]["S"], host=item["host"]["S"],
                 pid=int(item["pid"]["N"]), since=float(item["since"]["N"]),
                 expires_at=float(item["expires_at"]["N"]), generation=int(item["generation"]["N"]))


class DynamoLeaseTable(DynamoItems):
    """``scaler.replicas.lease_holder.LeaseTable`` on one DynamoDB table (its calls, errors and creation:
    ``scaler.replicas.dynamo_items.DynamoItems``)."""

    def get(self, cluster: str) -> Lease | None:
        """The cluster's lease item (strongly consistent read), or None."""
        item = self.get_item(cluster)
        return from_item(item) if item else None

    def write(self, lease: Lease, expect: Lease | None) -> bool:
        """Put ``lease`` if the cluster's item is still ``expect`` (None: no item); False when
        another write came first."""
        if expect is None:
            return self.put_if(to_item(lease), "attribute_not_exists(#k)", {"#k": KEY})
        return self.put_if(to_item(lease), "#o = :o AND #g = :g AND #e = :e",
                           {"#o": "owner", "#g": "generation", "#e": "expires_at"},
                           {":o": {"S": expect.owner}, ":g": {"N": str(expect.generation)},
                            ":e": {"N": num(expect.expires_at)}})


__all__ = ["DEFAULT_TABLE", "DynamoLeaseTable", "from_item", "make_dynamodb_client", "to_item"]
