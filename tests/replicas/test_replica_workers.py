"""Every replica knows every worker; each uses only those the published owners give it (issue #27,
deliverable 2b): ``scaler.replicas.apply_owners`` (pure) hand-computed, the owners round limited to the
owning replicas, and two replicas in one process on moto's DynamoDB with a virtual clock
(``daemon.replicas.shared_workers``), a worker never held by both at any step."""
from __future__ import annotations

import asyncio
import random

import pytest

from daemon.replicas.shared_workers import ReplicaWorkers
from scaler.replicas.lease_table import DynamoLeaseTable, make_dynamodb_client
from scaler.replicas.handoff import Published, Release
from scaler.replicas.heartbeat import ReplicaHeartbeat
from scaler.replicas.membership import Beat, Replica
from scaler.replicas.owners_round import owners_round
from scaler.replicas.replica_table import DynamoReplicaTable
from scaler.replicas.apply_owners import OwnedWorkers, WorkerItem, apply_owners, base_workers, round_workers
from scaler.replicas.worker_table import DynamoWorkerTable

T0 = 1_700_000_000.0
G, C = "g4dn.xlarge", "c5.2xlarge"


def _item(iid: str, t: str = C, addr: str | None = None, at: float = T0, replica: str = "a") -> WorkerItem:
    return WorkerItem(iid, t, addr or f"10.0.0.{iid[-1]}:50052", replica, at)


# -- pure ------------------------------------------------------------------------------------------

def test_apply_connects_its_own_drops_the_rest_and_applies_when_nothing_dropped_runs() -> None:
    pub = Published(4, {"i-1": "a", "i-2": "b", "i-3": "a"}, {"i-4": Release("a", 4, "b")})
    items = [_item("i-1"), _item("i-2"), _item("i-3"), _item("i-4")]
    d = apply_owners(pub, "a", items, held={"i-1": "10.0.0.1:50052", "i-4": "10.0.0.4:50052"},
                     busy=set(), valid=True, applied=3)
    assert d == OwnedWorkers(connect=(_item("i-3"),), drop=("i-4",), keep=("i-1",), applied=4)


def test_a_dropped_worker_still_running_holds_the_applied_version_back() -> None:
    pub = Published(4, {"i-1": "a"}, {"i-4": Release("a", 4, "b")})
    d = apply_owners(pub, "a", [_item("i-1"), _item("i-4")], held={"i-1": "10.0.0.1:50052", "i-4": "x:1"},
                     busy={"i-4"}, valid=True, applied=3)
    assert d.drop == ("i-4",) and d.applied == 3
    # a busy worker it keeps does not hold it back
    d = apply_owners(pub, "a", [_item("i-1")], held={"i-1": "10.0.0.1:50052"}, busy={"i-1"}, valid=True, applied=3)
    assert d == OwnedWorkers((), (), ("i-1",), 4)


def test_a_new_address_reconnects_and_a_lapsed_heartbeat_holds_nothing() -> None:
    pub = Published(2, {"i-1": "a"})
    d = apply_owners(pub, "a", [_item("i-1", addr="10.9.9.9:1")], held={"i-1": "10.0.0.1:50052"},
                     busy=set(), valid=True, applied=1)
    assert d.connect == (_item("i-1", addr="10.9.9.9:1"),) and d.drop == () and d.applied == 2
    d = apply_owners(pub, "a", [_item("i-1")], held={"i-1": "10.0.0.1:50052"}, busy=set(), valid=False, applied=1)
    assert d == OwnedWorkers((), ("i-1",), (), 1)
    assert apply_owners(None, "a", [_item("i-1")], {}, set(), True, 0) == OwnedWorkers((), (), (), 0)


def test_round_workers_keeps_live_instances_and_forgets_old_items_of_gone_ones() -> None:
    items = [_item("i-1", G, at=T0), _item("i-1", G, addr="n:2", at=T0 + 5), _item("i-2", at=T0), _item("i-3", at=T0 + 9)]
    rw = round_workers(items, {"i-1": G}, now=T0 + 10, grace_s=6.0)
    assert rw.workers == (("i-1", G),)
    assert rw.forget == (_item("i-2", at=T0),)          # i-3 is 1 s old: its listing may follow
    assert round_workers(items, None, T0 + 10, 6.0).forget == ()
    assert base_workers([("i-1", G), ("i-2", C), ("i-3", G)], G) == 2 and base_workers([("i-1", G)], None) == 0


class MemOwners:
    def __init__(self, beats: list[Beat]) -> None:
        self._beats = beats
        self.held: tuple[Published, int] | None = None

    def beats(self) -> list[Beat]:
        return self._beats

    def owners(self) -> tuple[Published, int] | None:
        return self.held

    def publish(self, published: Published, generation: int, expect_version: int | None) -> bool:
        self.held = (published, generation)
        return True


def _beat(r: str, applied: int = 0) -> Beat:
    return Beat("c", r, f"o-{r}", "h", f"{r}:1", T0, T0 + 6, applied)


def test_owners_round_gives_workers_to_the_owning_replicas_only() -> None:
    table = MemOwners([_beat("a"), _beat("b"), _beat("c")])
    workers = [(f"i-g{i}", G) for i in range(4)] + [("i-c0", C)]
    rnd = owners_round(table, workers, 1, T0 + 1, owning=lambda live, cur: ("a", "b"))
    assert rnd.wrote and set(rnd.published.owner.values()) == {"a", "b"}
    assert sorted(w for w, r in rnd.published.owner.items() if r == "a" and w.startswith("i-g")) == ["i-g0", "i-g1"]
    # default: every live replica owns
    table2 = MemOwners([_beat("a"), _beat("b"), _beat("c")])
    assert set(owners_round(table2, workers, 1, T0 + 1).published.owner.values()) == {"a", "b", "c"}


# -- two replicas on moto, a virtual clock ----------------------------------------------------------

class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> float:
        return self.t


class FakeHeld:
    """A dispatcher's registry: held workers (id → address), the ones running a query, drained."""

    def __init__(self) -> None:
        self.workers: dict[str, str] = {}
        self.running: set[str] = set()
        self.draining: set[str] = set()

    def held(self) -> dict[str, str]:
        return dict(self.workers)

    def busy(self) -> set[str]:
        return set(self.running) & set(self.workers)

    def connect(self, item: WorkerItem) -> None:
        self.workers[item.instance_id] = item.address
        self.draining.discard(item.instance_id)

    def keep(self, iid: str) -> None:
        self.draining.discard(iid)

    def drop(self, iid: str) -> None:
        if iid in self.running:
            self.draining.add(iid)
        else:
            self.workers.pop(iid, None)
            self.draining.discard(iid)

    def matchable(self) -> set[str]:
        return set(self.workers) - self.draining


class Node:
    def __init__(self, name: str, endpoint: str, clock: Clock) -> None:
        client = make_dynamodb_client("us-east-1", endpoint)
        DynamoLeaseTable("costscale-leases", client).ensure_table()
        self.name = name
        self.table = DynamoReplicaTable("costscale-leases", client, "ha")
        self.hb = ReplicaHeartbeat(self.table, Replica("ha", name, f"own-{name}", "h", f"{name}:1"), 6.0,
                                   clock=clock, monotonic=clock)
        self.held = FakeHeld()
        self.rw = ReplicaWorkers(name, DynamoWorkerTable("costscale-leases", client, "ha"), self.table, self.hb,
                                 self.held, clock, base_type=lambda: G, cloud_view=lambda: None)
        self.alive = True

    def round(self) -> None:
        """read → apply → beat, as ``ReplicaRole.beat`` does."""
        self.rw.apply(*self.rw.read())
        self.hb.beat(applied=self.rw.applied)


def _check_never_shared(nodes: list[Node]) -> None:
    a, b = nodes
    both = set(a.held.workers) & set(b.held.workers)
    # held by both is allowed only while the old one drains it (no new query) and the new one
    # cannot have it: a worker is *used* (matchable or running) by at most one replica
    used_a = a.held.matchable() | (a.held.running & set(a.held.workers))
    used_b = b.held.matchable() | (b.held.running & set(b.held.workers))
    assert not (used_a & used_b), f"worker used by two replicas: {sorted(used_a & used_b)}"
    assert not both, f"worker held by two replicas: {sorted(both)}"


def test_two_replicas_share_workers_without_double_booking(moto_endpoint: str) -> None:
    clock = Clock()
    a, b = Node("a", moto_endpoint, clock), Node("b", moto_endpoint, clock)
    for n in (a, b):
        n.hb.beat(applied=0)
    # b accepts four GPU and two CPU workers; every replica learns of them through the table
    for i in range(4):
        b.rw.record(f"i-g{i}", G, f"10.0.1.{i}:50052")
    a.rw.record("i-c0", C, "10.0.2.0:50052")
    a.rw.record("i-c1", C, "10.0.2.1:50052")
    rnd = a.rw.holder_round(generation=1, now=clock())     # a holds the lease: 4 base → 2 owners
    assert rnd.wrote and sorted(set(rnd.published.owner.values())) == ["a", "b"]
    for n in (a, b):
        n.round()
        _check_never_shared([a, b])
    assert sorted(a.held.workers) == ["i-c0", "i-g0", "i-g1"] and sorted(b.held.workers) == ["i-c1", "i-g2", "i-g3"]
    assert a.rw.applied == b.rw.applied == rnd.published.version


@pytest.mark.parametrize("seed", [27, 28, 29])
def test_random_rounds_never_double_book_and_a_dead_replicas_workers_move(moto_endpoint: str, seed: int) -> None:
    clock = Clock()
    a, b = Node("a", moto_endpoint, clock), Node("b", moto_endpoint, clock)
    nodes = [a, b]
    for n in nodes:
        n.hb.beat(applied=0)
    for i in range(4):
        a.rw.record(f"i-g{i}", G, f"10.0.1.{i}:50052")
    rng = random.Random(seed)
    moves = 0
    base = [2]           # the base-type count the holder sees; changing it moves workers

    a.rw.base_type = lambda: G if base[0] else None
    for step in range(150):
        clock.t += rng.choice([0.25, 0.5, 1.0])
        for n in nodes:                           # each beats at least every 2 s of the ttl's 6
            if clock.t - n.hb.held.expires_at + 6.0 >= 2.0:   # type: ignore[union-attr]
                n.round()
        action = rng.random()
        if action < 0.3:
            base[0] = rng.choice([0, 2])         # 0: one owner (a), 2: both own
            moves += len(a.rw.holder_round(generation=1, now=clock()).moving)
        elif action < 0.6:
            n = rng.choice(nodes)
            if n.alive:
                n.round()
        elif action < 0.85:                       # queries start and end on held workers
            n = rng.choice(nodes)
            for w in list(n.held.matchable()):
                if rng.random() < 0.7:
                    n.held.running.add(w)
        else:
            n = rng.choice(nodes)
            n.held.running.clear()
        _check_never_shared(nodes)
    assert moves >= 5                             # the sequence did move workers between live replicas
    # b dies (no more beats): after its ttl the holder gives every worker to a
    for n in nodes:
        n.held.running.clear()
    b.alive = False
    clock.t += 7.0
    a.round()
    b.rw.expire()                                  # b's deadline passed: it holds nothing
    a.rw.holder_round(generation=1, now=clock())
    a.round()
    _check_never_shared(nodes)
    assert sorted(a.held.workers) == ["i-g0", "i-g1", "i-g2", "i-g3"] and b.held.workers == {}


def test_expire_runs_on_the_loop_at_the_deadline(moto_endpoint: str) -> None:
    clock = Clock()
    a = Node("a", moto_endpoint, clock)
    a.hb.beat(applied=0)
    a.rw.record("i-c0", C, "10.0.2.0:50052")
    a.rw.holder_round(generation=1, now=clock())
    a.round()
    assert a.held.workers == {"i-c0": "10.0.2.0:50052"}

    async def main() -> None:
        a.rw.arm_expiry()
        clock.t += 10.0                       # past ttl x (1 - CLOCK_SAFETY) = 4.8 s
        a.rw.arm_expiry()                     # remaining <= 0: fires at once
        for _ in range(100):
            if not a.held.workers:
                return
            await asyncio.sleep(0)
        raise AssertionError("expire did not run")

    asyncio.run(main())
    assert a.held.workers == {}




def test_owners_orphaned_only_when_workers_are_owned_and_no_owner_is_live() -> None:
    from scaler.replicas.apply_owners import owners_orphaned
    pub = Published(3, {"i-1": "a", "i-2": "a"}, {"i-3": Release("a", 3, "b")})
    assert not owners_orphaned(pub, ["b"])                  # b is getting i-3: an owner is live
    assert not owners_orphaned(pub, ["a", "c"])
    assert owners_orphaned(pub, ["c"])
    assert owners_orphaned(Published(2, {"i-1": "a"}), [])
    assert not owners_orphaned(Published(), ["c"]) and not owners_orphaned(None, ["c"])


def test_standbys_move_the_workers_of_a_dead_sole_owner_within_the_heartbeat_ttl(moto_endpoint: str) -> None:
    """The holder a owns every worker (no base type: one owner) and dies; the lease is not taken
    yet. Until a's heartbeat expires (6 s) no standby moves anything; then the first standby's
    rescue round gives every worker to the live replicas in one version, the second finds an owner
    live and writes nothing, and a worker is never used by two replicas."""
    clock = Clock()
    a, b, c = (Node(n, moto_endpoint, clock) for n in "abc")
    for n in (a, b, c):
        n.rw.base_type = lambda: None                         # no base workers: a single owner
        n.hb.beat(applied=0)
    for i in range(3):
        a.rw.record(f"i-c{i}", C, f"10.0.2.{i}:50052")
    first = a.rw.holder_round(generation=4, now=clock())
    assert set(first.published.owner.values()) == {"a"}
    for n in (a, b, c):
        n.round()
    assert sorted(a.held.workers) == ["i-c0", "i-c1", "i-c2"] and not b.held.workers and not c.held.workers
    assert b.rw.rescue_round(clock()) is None                 # a is live: nothing to rescue
    # a dies at t0 (its last beat was at t0); b and c keep beating
    clock.t += 3.0
    for n in (b, c):
        n.round()
    assert b.rw.rescue_round(clock()) is None                 # 3 s < the 6 s ttl: a may still be working
    clock.t += 3.5                                             # a's item expired by the standbys' clock
    a.rw.expire()                                              # and a, by its own deadline (4.8 s), holds nothing
    assert a.held.workers == {}
    for n in (b, c):
        n.hb.beat(applied=n.rw.applied)
    rnd = b.rw.rescue_round(clock())
    assert rnd is not None and rnd.wrote
    assert set(rnd.published.owner) == {"i-c0", "i-c1", "i-c2"} and set(rnd.published.owner.values()) == {"b"}
    assert rnd.published.version == first.published.version + 1
    assert c.rw.rescue_round(clock()) is None                 # b owns them now: c writes nothing
    for n in (b, c):
        n.round()
        _check_never_shared([b, c])
    assert sorted(b.held.workers) == ["i-c0", "i-c1", "i-c2"] and c.held.workers == {}
    # the generation stays the dead holder's: a new holder (generation 5) still writes over it
    assert b.table.owners()[1] == 4                            # type: ignore[index]
    b.rw.base_type = lambda: None
    assert b.rw.holder_round(generation=5, now=clock()).lost is False


def test_the_cluster_items_are_read_in_one_scan(moto_endpoint: str) -> None:
    """Heartbeats, workers and the published owners of a round: one Scan (``scaler.replicas.cluster_scan``),
    what ``ReplicaWorkers.read`` gives, and the same owners round on them as on the table."""
    from scaler.replicas.cluster_scan import read_cluster

    clock = Clock()
    a, b = Node("a", moto_endpoint, clock), Node("b", moto_endpoint, clock)
    for n in (a, b):
        n.hb.beat(applied=0)
    a.rw.record("i-c0", C, "10.0.2.0:50052")
    a.rw.holder_round(generation=1, now=clock())
    scans: list[str] = []
    a.table.client.meta.events.register("before-call.dynamodb.Scan", lambda **kw: scans.append("scan"))
    a.table.client.meta.events.register("before-call.dynamodb.GetItem", lambda **kw: scans.append("get"))
    items = read_cluster(a.table, "ha", clock())
    assert scans == ["scan"]
    assert [x.replica for x in items.beats] == ["a", "b"] and [w.instance_id for w in items.workers] == ["i-c0"]
    assert items.owners is not None and items.owners[0].owner == {"i-c0": "a"} and items.owners[1] == 1
    assert a.rw.seen(items) == a.rw.read() == (items.owners[0], list(items.workers), {"a": "a:1", "b": "b:1"})
    clock.t += 7.0                                     # b's heartbeat expired; a's renewed
    a.hb.beat(applied=1)
    later = read_cluster(a.table, "ha", clock())
    assert later.live_addresses() == {"a": "a:1"}
