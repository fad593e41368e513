"""The workers the replicas accepted, in the lease table (``scaler.replicas.worker_table``; issue #27
deliverable 2) against moto in server mode: recorded, read back exactly beside the lease and the
other items, a newer registration kept against a late older write, forgotten on condition."""
from __future__ import annotations

from scaler.replicas.lease_table import DynamoLeaseTable, make_dynamodb_client
from scaler.replicas.apply_owners import WorkerItem
from scaler.replicas.worker_table import DynamoWorkerTable

T0 = 1_700_000_000.0


def _table(endpoint: str, cluster: str = "c1") -> DynamoWorkerTable:
    client = make_dynamodb_client("us-east-1", endpoint)
    DynamoLeaseTable("costscale-leases", client).ensure_table()
    return DynamoWorkerTable("costscale-leases", client, cluster)


def test_workers_are_recorded_and_read_back_per_cluster(moto_endpoint: str) -> None:
    t, other = _table(moto_endpoint), _table(moto_endpoint, "c10")
    g = WorkerItem("i-0g", "g4dn.xlarge", "10.0.0.5:50052", "ctl-a:50051", T0 + 0.25)
    r = WorkerItem("i-0r", "r5n.large", "10.0.0.6:50052", "ctl-b:50051", T0 + 1.5)
    assert t.record(r) and t.record(g)
    assert other.record(WorkerItem("i-9", "r5n.large", "10.0.1.1:50052", "x:1", T0))
    assert t.workers() == [g, r]                        # by id; c10's item is not c1's
    assert other.workers() == [WorkerItem("i-9", "r5n.large", "10.0.1.1:50052", "x:1", T0)]


def test_a_late_older_registration_never_replaces_a_newer_one(moto_endpoint: str) -> None:
    t = _table(moto_endpoint)
    new = WorkerItem("i-1", "r5n.large", "10.0.0.7:50052", "ctl-b:50051", T0 + 10)
    old = WorkerItem("i-1", "r5n.large", "10.0.0.7:50052", "ctl-a:50051", T0 + 2)
    assert t.record(new)
    assert not t.record(old)
    assert t.workers() == [new]
    again = WorkerItem("i-1", "r5n.large", "10.0.0.7:50052", "ctl-a:50051", T0 + 11)
    assert t.record(again) and t.workers() == [again]


def test_an_item_is_forgotten_only_if_it_is_still_the_registration_read(moto_endpoint: str) -> None:
    t = _table(moto_endpoint)
    first = WorkerItem("i-2", "r5n.large", "10.0.0.8:50052", "ctl-a:50051", T0)
    assert t.record(first)
    newer = WorkerItem("i-2", "r5n.large", "10.0.0.8:50052", "ctl-b:50051", T0 + 5)
    assert t.record(newer)
    assert not t.forget(first) and t.workers() == [newer]
    assert t.forget(newer) and t.workers() == []
