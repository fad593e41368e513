"""The cluster lease table on DynamoDB (the adapter under ``scaler.lease``'s decision).

One item per cluster, keyed by the cluster name: ``owner`` (S), ``host`` (S), ``pid`` (N),
``since`` (N), ``expires_at`` (N, epoch s) and the fencing ``generation`` (N). Every write is a
PutItem conditional on the item the decision read (``attribute_not_exists`` when there was none;
the same owner, generation and expiry otherwise): of two daemons racing, one write lands and the
other gets False, never an overwrite. Reads are strongly consistent. ``ensure_table`` creates the
table (PAY_PER_REQUEST) when it is missing.

botocore retries transient faults (throttling, 5xx, dropped connections) in its standard mode
on the client ``scaler.aws_client`` builds (3 attempts in all, short timeouts). What it gives up
on becomes ``scaler.cloud``'s typed errors here: no credentials, refused access or a bad table
name → ``CloudConfigError``; anything else (an unreachable endpoint) → ``CloudError``.
"""
from __future__ import annotations

from typing import Any

from scaler.aws_client import after, aws_call, make_client
from scaler.cloud import CloudConfigError, CloudError
from scaler.ec2 import AUTH_CODES
from scaler.lease import Lease

DEFAULT_TABLE = "costscale-leases"
KEY = "cluster"
CONDITION_FAILED = "ConditionalCheckFailedException"
NOT_FOUND = "ResourceNotFoundException"
IN_USE = "ResourceInUseException"       # a create_table that another daemon started first
CONFIG_CODES = AUTH_CODES | {"UnrecognizedClientException", "InvalidSignatureException",
                             "MissingAuthenticationTokenException", "ExpiredTokenException", "ValidationException"}
TABLE_WAIT = {"Delay": 1, "MaxAttempts": 120}   # a new table is ACTIVE within seconds


def make_dynamodb_client(region: str, endpoint_url: str | None = None, max_attempts: int = 3) -> Any:
    """A boto3 DynamoDB client, botocore retrying in its standard mode (``scaler.aws_client``),
    with short timeouts (a renewal must finish well inside a third of the lease)."""
    return make_client("dynamodb", region, endpoint_url=endpoint_url, max_attempts=max_attempts, connect_timeout=3,
                       read_timeout=5)


def to_item(lease: Lease) -> dict[str, Any]:
    return {KEY: {"S": lease.cluster}, "owner": {"S": lease.owner}, "host": {"S": lease.host},
            "pid": {"N": str(lease.pid)}, "since": {"N": _num(lease.since)},
            "expires_at": {"N": _num(lease.expires_at)}, "generation": {"N": str(lease.generation)}}


def from_item(item: dict[str, Any]) -> Lease:
    return Lease(cluster=item[KEY]["S"], owner=item["owner"]["S"], host=item["host"]["S"],
                 pid=int(item["pid"]["N"]), since=float(item["since"]["N"]),
                 expires_at=float(item["expires_at"]["N"]), generation=int(item["generation"]["N"]))


def _num(t: float) -> str:
    """Epoch seconds to the millisecond, as DynamoDB's number string (so a read gives it back
    exactly and a condition on it compares equal)."""
    return f"{round(t, 3):.3f}"


class DynamoLeaseTable:
    """``scaler.cluster_lease.LeaseTable`` on one DynamoDB table."""

    def __init__(self, table: str, client: Any) -> None:
        self.table = table
        self.client = client

    def _call(self, op: str, judged: tuple[str, ...] = (), **kwargs: Any) -> Any:
        """One DynamoDB call; the ``judged`` error codes (a failed condition, no table yet, a table
        being created) come back as the ClientError for the caller, the rest as typed cloud errors."""
        def typed(code: str, msg: str, attempts: int) -> CloudError | None:
            if code in judged:
                return None
            if code == NOT_FOUND:
                return CloudConfigError(f"{op}: table {self.table} not found ({msg})")
            if code in CONFIG_CODES:
                return CloudConfigError(f"{op}: {code}: {msg}")
            return CloudError(f"{op}: {code}: {msg}{after(attempts)}")

        return aws_call(op, lambda: getattr(self.client, op)(**kwargs), typed)

    @staticmethod
    def _code(exc: Exception) -> str:
        return str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))

    def ensure_table(self) -> bool:
        """Create the table (key ``cluster``, PAY_PER_REQUEST) if it is missing and wait until it
        is ACTIVE; True when this call created it."""
        from botocore.exceptions import ClientError, WaiterError

        try:
            self._call("describe_table", (NOT_FOUND,), TableName=self.table)
            return False
        except ClientError as exc:
            if self._code(exc) != NOT_FOUND:
                raise
        created = True
        try:
            self._call("create_table", (IN_USE,), TableName=self.table, BillingMode="PAY_PER_REQUEST",
                       KeySchema=[{"AttributeName": KEY, "KeyType": "HASH"}],
                       AttributeDefinitions=[{"AttributeName": KEY, "AttributeType": "S"}])
        except ClientError as exc:
            if self._code(exc) != IN_USE:
                raise
            created = False
        try:
            self.client.get_waiter("table_exists").wait(TableName=self.table, WaiterConfig=TABLE_WAIT)
        except WaiterError as exc:
            raise CloudError(f"table {self.table} not ACTIVE: {exc}") from None
        return created

    def get(self, cluster: str) -> Lease | None:
        """The cluster's lease item (strongly consistent read), or None."""
        resp = self._call("get_item", TableName=self.table, Key={KEY: {"S": cluster}}, ConsistentRead=True)
        item = resp.get("Item")
        return from_item(item) if item else None

    def write(self, lease: Lease, expect: Lease | None) -> bool:
        """Put ``lease`` if the cluster's item is still ``expect`` (None: no item); False when
        another write came first."""
        from botocore.exceptions import ClientError

        kw: dict[str, Any] = {"TableName": self.table, "Item": to_item(lease)}
        if expect is None:
            kw.update(ConditionExpression="attribute_not_exists(#k)", ExpressionAttributeNames={"#k": KEY})
        else:
            kw.update(ConditionExpression="#o = :o AND #g = :g AND #e = :e",
                      ExpressionAttributeNames={"#o": "owner", "#g": "generation", "#e": "expires_at"},
                      ExpressionAttributeValues={":o": {"S": expect.owner}, ":g": {"N": str(expect.generation)},
                                                 ":e": {"N": _num(expect.expires_at)}})
        try:
            self._call("put_item", (CONDITION_FAILED,), **kw)
        except ClientError as exc:
            if self._code(exc) == CONDITION_FAILED:
                return False
            raise
        return True
