"""Items of the cluster lease table on DynamoDB: the calls every adapter on that table shares.

The lease table (``scaler.replicas.lease_table``, key ``cluster`` (S), PAY_PER_REQUEST) holds one lease item
per cluster, keyed by the cluster name, and, for clusters run by several dispatcher replicas
(issue #27), items keyed ``{cluster}#{kind}#{name}`` (a replica's heartbeat, its demand windows, the
published worker owners: ``scaler.replicas.replica_table``, ``scaler.replicas.demand_table``). A cluster name is a
config ``Name`` (letters, digits, ``.``, ``_``, ``-``), so no such key is ever a cluster's lease.

:class:`DynamoItems` is one table and its client: every write is a PutItem or DeleteItem
conditional on what the caller read (a failed condition comes back as False, never an overwrite),
every read strongly consistent; listing a cluster's items of some kinds is one Scan with a
``begins_with`` filter on the key through botocore's paginator (the table holds a few items per
cluster and replica, so a Scan reads a page or two; a table shared by thousands of clusters would
want a sort key instead).

botocore retries transient faults (throttling, 5xx, dropped connections) in its standard mode on
the client ``scaler.cloud.aws_client`` builds. What it gives up on becomes ``scaler.cloud.provider``'s typed
errors here: no credentials, refused access or a bad table name → ``CloudConfigError``; anything
else (an unreachable endpoint) → ``CloudError``.
"""
from __future__ import annotations

from typing import Any

from scaler.cloud.aws_client import AUTH_CODES, after, aws_call, iam_action
from scaler.cloud.provider import CloudConfigError, CloudError

KEY = "cluster"
CONDITION_FAILED = "ConditionalCheckFailedException"
NOT_FOUND = "ResourceNotFoundException"
IN_USE = "ResourceInUseException"       # a create_table that another daemon started first
CONFIG_CODES = AUTH_CODES | {"UnrecognizedClientException", "InvalidSignatureException",
                             "MissingAuthenticationTokenException", "ExpiredTokenException", "ValidationException"}
TABLE_WAIT = {"Delay": 1, "MaxAttempts": 120}   # a new table is ACTIVE within seconds
SEP = "#"                                       # in item keys: {cluster}#{kind}#{name}


def item_key(cluster: str, kind: str, name: str = "") -> str:
    """The key of a cluster's item of ``kind`` (``replica``, ``demand``, ``owners``)."""
    return f"{cluster}{SEP}{kind}{SEP}{name}" if name else f"{cluster}{SEP}{kind}"


def num(t: float) -> str:
    """A number as DynamoDB's number string, to the millisecond (so a read gives it back exactly
    and a condition on it compares equal)."""
    return f"{round(t, 3):.3f}"


class DynamoItems:
    """One DynamoDB table (the lease table) and its client."""

    def __init__(self, table: str, client: Any) -> None:
        self.table = table
        self.client = client

    def _typed(self, op: str, judged: tuple[str, ...] = ()) -> Any:
        """The error boundary of ``op``: the ``judged`` codes (a failed condition, no table yet, a
        table being created) stay ClientErrors for the caller, the rest become typed cloud errors."""
        def typed(code: str, msg: str, attempts: int) -> CloudError | None:
            if code in judged:
                return None
            if code == NOT_FOUND:
                return CloudConfigError(f"{op}: table {self.table} not found ({msg})")
            if code in CONFIG_CODES:
                return CloudConfigError(f"{op}: {code}: {msg}")
            return CloudError(f"{op}: {code}: {msg}{after(attempts)}")

        return typed

    def _call(self, op: str, judged: tuple[str, ...] = (), **kwargs: Any) -> Any:
        """One DynamoDB call at the error boundary (:meth:`_typed`)."""
        return aws_call(op, lambda: getattr(self.client, op)(**kwargs), self._typed(op, judged),
                        iam_action("dynamodb", op))

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

    def get_item(self, key: str) -> dict[str, Any] | None:
        """The item under ``key`` (strongly consistent read), or None."""
        resp = self._call("get_item", TableName=self.table, Key={KEY: {"S": key}}, ConsistentRead=True)
        return resp.get("Item") or None

    def put_if(self, item: dict[str, Any], condition: str, names: dict[str, str],
               values: dict[str, Any] | None = None) -> bool:
        """Put ``item`` if ``condition`` holds on the item it replaces; False when it does not."""
        kw: dict[str, Any] = {"TableName": self.table, "Item": item, "ConditionExpression": condition,
                              "ExpressionAttributeNames": names}
        if values:
            kw["ExpressionAttributeValues"] = values
        return self._conditional("put_item", kw)

    def delete_if(self, key: str, condition: str, names: dict[str, str], values: dict[str, Any] | None = None) -> bool:
        """Delete the item under ``key`` if ``condition`` holds on it; False when it does not."""
        kw: dict[str, Any] = {"TableName": self.table, "Key": {KEY: {"S": key}}, "ConditionExpression": condition,
                              "ExpressionAttributeNames": names}
        if values:
            kw["ExpressionAttributeValues"] = values
        return self._conditional("delete_item", kw)

    def _conditional(self, op: str, kw: dict[str, Any]) -> bool:
        from botocore.exceptions import ClientError

        try:
            self._call(op, (CONDITION_FAILED,), **kw)
        except ClientError as exc:
            if self._code(exc) == CONDITION_FAILED:
                return False
            raise
        return True

    def scan_prefix(self, *prefixes: str) -> list[dict[str, Any]]:
        """Every item whose key begins with one of ``prefixes`` (one consistent Scan, all pages)."""
        values = {f":p{i}": {"S": p} for i, p in enumerate(prefixes)}
        condition = " OR ".join(f"begins_with(#k, {v})" for v in values)

        def pages() -> list[dict[str, Any]]:
            paginator = self.client.get_paginator("scan")
            out: list[dict[str, Any]] = []
            for page in paginator.paginate(TableName=self.table, ConsistentRead=True, FilterExpression=condition,
                                           ExpressionAttributeNames={"#k": KEY}, ExpressionAttributeValues=values):
                out.extend(page.get("Items", []))
            return out

        return list(aws_call("scan", pages, self._typed("scan"), "dynamodb:Scan"))


__all__ = ["CONDITION_FAILED", "CONFIG_CODES", "DynamoItems", "IN_USE", "KEY", "NOT_FOUND", "SEP", "TABLE_WAIT",
           "item_key", "num"]
