"""Dispatcher replicas alive by heartbeat in the lease table (issue #27, deliverable 2): the beat
decision (pure), the replica items on DynamoDB against moto in server mode on 127.0.0.1, and the
lease holder's round on the virtual clock (``sim.clock.VirtualClock``): a replica whose heartbeat
stops stops using its workers before the holder sees it expire, and its workers move to the live
replicas in the first round after."""
from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from scaler.replicas.lease_table import DynamoLeaseTable, make_dynamodb_client
from scaler.replicas.lease_decision import Claimant, Lease
from scaler.replicas.handoff import Published, Release
from scaler.replicas.heartbeat import ReplicaHeartbeat
from scaler.replicas.membership import (REPLICA_TTL_S, Beat, BeatDecision, Replica, ReplicaIdTaken, applied_versions,
                                       decide_beat, live_replicas)
from scaler.replicas.owners_round import owners_round
from scaler.replicas.replica_table import DynamoReplicaTable
from sim.clock import VirtualClock

T0 = 1_700_000_000.0          # 2023-11-14T22:13:20Z
A = Replica(cluster="c1", replica="a", owner="h1:11:aaaa", host="h1", address="10.0.0.1:50051")
A2 = Replica(cluster="c1", replica="a", owner="h9:99:ffff", host="h9", address="10.0.0.9:50051")


def beat_of(me: Replica, since: float, expires_at: float, applied: int = 0) -> Beat:
    return Beat(cluster=me.cluster, replica=me.replica, owner=me.owner, host=me.host, address=me.address,
                since=since, expires_at=expires_at, applied=applied)


# -- the decision ----------------------------------------------------------------------------------

def test_a_first_beat_is_written_on_condition_that_no_item_exists_and_renewed_by_its_process() -> None:
    assert decide_beat(None, A, T0, 6, 0) == BeatDecision("write", beat_of(A, T0, T0 + 6), None)
    mine = beat_of(A, T0, T0 + 6)
    assert decide_beat(mine, A, T0 + 2, 6, 3) == BeatDecision("renew", beat_of(A, T0, T0 + 8, 3), mine)


def test_another_process_under_the_same_id_is_refused_while_live_and_takes_over_once_expired() -> None:
    live = beat_of(A, T0, T0 + 6, 4)
    assert decide_beat(live, A2, T0 + 5.999, 6, 0) == BeatDecision("refuse", None, live)
    assert decide_beat(live, A2, T0 + 6, 6, 0) == BeatDecision("take", beat_of(A2, T0 + 6, T0 + 12), live)


def test_live_replicas_are_those_not_expired_with_the_versions_they_applied() -> None:
    beats = [beat_of(Replica("c1", r, f"o-{r}", "h"), T0, T0 + e, v) for r, e, v in (("b", 6, 2), ("a", 3, 5), ("c", 9, 1))]
    assert live_replicas(beats, T0 + 3) == ["b", "c"]
    assert applied_versions(beats, T0 + 3) == {"b": 2, "c": 1}


def test_the_pure_modules_import_no_cloud_sdk() -> None:
    code = ("import sys, scaler.replicas.membership, scaler.replicas.owner_assignment, scaler.replicas.handoff, "
            "scaler.replicas.demand; print(sorted(m for m in ('boto3', 'botocore') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.strip() == "[]", out.stderr


# -- the items on moto -------------------------------------------------------------------------------

def _tables(endpoint: str, cluster: str = "c1") -> tuple[DynamoReplicaTable, DynamoLeaseTable]:
    client = make_dynamodb_client("us-east-1", endpoint)
    lease = DynamoLeaseTable("costscale-leases", client)
    lease.ensure_table()
    return DynamoReplicaTable("costscale-leases", client, cluster), lease


def test_replica_items_live_beside_the_lease_and_a_racing_write_loses(moto_endpoint: str) -> None:
    table, leases = _tables(moto_endpoint)
    other = DynamoReplicaTable("costscale-leases", table.client, "c10")      # a cluster whose name extends c1's
    holder = Lease("c1", "ctl:1:x", "ctl", 1, T0, T0 + 60, 3)
    assert leases.write(holder, None)
    first = beat_of(A, T0, T0 + 6)
    assert table.write_beat(first, None) is True
    assert table.write_beat(beat_of(A2, T0, T0 + 6), None) is False             # both read "no item"
    assert table.write_beat(beat_of(A2, T0 + 6, T0 + 12), beat_of(A, T0, T0 + 5)) is False   # a stale read
    assert other.write_beat(Beat("c10", "z", "o", "h", "", T0, T0 + 6), None)
    assert table.beats() == [first] and table.beat_item("a") == first
    assert leases.get("c1") == holder                                          # the lease item untouched
    assert table.forget(beat_of(A2, T0, T0 + 6)) is False                      # not A2's to delete
    assert table.forget(first) is True and table.beats() == []


def test_the_owners_are_published_under_the_lease_generation_and_a_deposed_holder_is_refused(moto_endpoint: str) -> None:
    table, _ = _tables(moto_endpoint)
    p1 = Published(1, {"w0": "a", "w1": "b"}, {"w2": Release("a", 1, "b")})
    assert table.owners() is None
    assert table.publish(p1, 2, None) is True
    assert table.publish(p1, 2, None) is False                                 # an item exists now
    assert table.owners() == (p1, 2)
    p2 = Published(2, {"w0": "a", "w1": "b", "w2": "b"}, {})
    assert table.publish(p2, 1, 1) is False                                    # an older holder: fenced
    assert table.publish(p2, 2, 0) is False                                    # a stale read
    assert table.publish(p2, 3, 1) is True                                     # the next holder goes on
    assert table.publish(Published(3, {}, {}), 2, 2) is False                  # the deposed one no more
    assert table.owners() == (p2, 3)


# -- heartbeats and the holder's round on the virtual clock -------------------------------------------

WORKERS = [("g0", "g4dn.xlarge"), ("g1", "g4dn.xlarge"), ("g2", "g4dn.xlarge")] + [
    (f"r{k}", "r5n.large") for k in range(6)]


def test_a_dead_replicas_workers_move_to_the_live_ones_in_the_first_round_after_its_heartbeat_expires(
        moto_endpoint: str) -> None:
    table, _ = _tables(moto_endpoint)
    clock = VirtualClock(T0)
    beats = {r: ReplicaHeartbeat(table, Replica("c1", r, f"h-{r}:1:n", f"h-{r}"), REPLICA_TTL_S,
                                 clock=clock.now, monotonic=clock.now) for r in "abc"}
    applied = {r: 0 for r in "abc"}
    for hb in beats.values():
        hb.beat(0)
    first = owners_round(table, WORKERS, generation=1, now=clock.now())
    assert first.live == ("a", "b", "c") and first.wrote and first.published.version == 1
    assert Counter((first.published.owner[w], t) for w, t in WORKERS) == Counter(
        {(r, t): n for r in "abc" for t, n in (("g4dn.xlarge", 1), ("r5n.large", 2))})
    for r in "abc":
        applied[r] = first.published.version
    c_had = sorted(first.published.workers_of("c"))
    kept = {w: r for w, r in first.published.owner.items() if r in "ab"}
    seen: dict[float, tuple[bool, tuple[str, ...], bool]] = {}
    for k in range(1, 9):                           # a round every second; a and b beat every ttl / 3
        clock.advance_to(T0 + k)
        if k % 2 == 0:
            for r in "ab":
                beats[r].beat(applied[r])
        rnd = owners_round(table, WORKERS, generation=1, now=clock.now())
        seen[k] = (beats["c"].valid(), rnd.live, rnd.wrote)
        if k == REPLICA_TTL_S:                      # the first round that sees c dead moves its workers
            moved_to = rnd.published
    # c's last beat was at T0: it stops using its workers at 0.8 ttl, the holder sees it dead at ttl
    assert seen == {1: (True, ("a", "b", "c"), False), 2: (True, ("a", "b", "c"), False),
                    3: (True, ("a", "b", "c"), False), 4: (True, ("a", "b", "c"), False),
                    5: (False, ("a", "b", "c"), False), 6: (False, ("a", "b"), True),
                    7: (False, ("a", "b"), False), 8: (False, ("a", "b"), False)}
    assert not moved_to.releasing and moved_to.version == 2
    assert sorted(w for w in c_had if moved_to.owner[w] in ("a", "b")) == c_had
    assert all(moved_to.owner[w] == r for w, r in kept.items())                 # a's and b's stay put
    # g4dn: 3 over 2, its spare to a (the first by name); r5n: 3 each
    assert Counter((moved_to.owner[w], t) for w, t in WORKERS) == Counter(
        {("a", "g4dn.xlarge"): 2, ("b", "g4dn.xlarge"): 1, ("a", "r5n.large"): 3, ("b", "r5n.large"): 3})
    assert beats["a"].valid() and beats["b"].valid()


def test_a_replica_joining_gets_its_share_only_after_the_old_owners_applied_the_release(moto_endpoint: str) -> None:
    table, _ = _tables(moto_endpoint)
    clock = VirtualClock(T0)
    hb = {r: ReplicaHeartbeat(table, Replica("c1", r, f"h-{r}:1:n", f"h-{r}"), clock=clock.now, monotonic=clock.now)
          for r in "ab"}
    hb["a"].beat(0)
    one = owners_round(table, WORKERS, 1, clock.now()).published
    assert one.workers_of("a") == {w for w, _ in WORKERS}
    hb["a"].beat(one.version)
    hb["b"].beat(0)
    two = owners_round(table, WORKERS, 1, clock.now())
    assert set(two.published.releasing) == set(two.moving) and len(two.moving) == 4   # b's share: released first
    assert not two.published.workers_of("b")
    assert owners_round(table, WORKERS, 1, clock.now()).wrote is False          # a has not applied it yet
    hb["a"].beat(two.published.version)                                           # a applied and says so
    three = owners_round(table, WORKERS, 1, clock.now()).published
    assert three.workers_of("b") == set(two.moving) and not three.releasing
    assert three.workers_of("a") == {w for w, _ in WORKERS} - set(two.moving)


def test_a_second_process_under_a_live_replica_id_is_refused_in_one_line_and_takes_over_after_expiry(
        moto_endpoint: str) -> None:
    table, _ = _tables(moto_endpoint)
    clock = VirtualClock(T0)
    first = ReplicaHeartbeat(table, A, 6, table_name="costscale-leases", clock=clock.now, monotonic=clock.now)
    second = ReplicaHeartbeat(table, A2, 6, table_name="costscale-leases", clock=clock.now, monotonic=clock.now)
    first.beat(0)
    with pytest.raises(ReplicaIdTaken) as taken:
        second.beat(0)
    assert taken.value.exit_code == 1
    assert str(taken.value) == (
        "replica a of cluster c1 is already running (host h1, since 2023-11-14T22:13:20Z, heartbeat until "
        "2023-11-14T22:13:26Z; DynamoDB table costscale-leases); give this dispatcher another replica id, or wait "
        "until that heartbeat expires")
    clock.advance_to(T0 + 6)
    assert second.beat(0) == beat_of(A2, T0 + 6, T0 + 12) and second.valid()
    with pytest.raises(ReplicaIdTaken):                                          # the first comes back: refused
        first.beat(0)
    assert not first.valid()


def test_a_beat_after_the_local_deadline_counts_a_lapse(moto_endpoint: str) -> None:
    table, _ = _tables(moto_endpoint)
    clock = VirtualClock(T0)
    hb = ReplicaHeartbeat(table, A, 6, clock=clock.now, monotonic=clock.now)
    hb.beat(0)
    clock.advance_to(T0 + 4.7)
    assert hb.valid()
    hb.beat(0)
    clock.advance_to(T0 + 4.7 + 4.8)                                             # 6 × (1 − 0.2) after the last
    assert not hb.valid()
    hb.beat(0)                                                                   # still its item: renewed
    assert hb.valid() and hb.lapses == 1
    hb.stop()
    assert table.beats() == [] and not hb.valid()
