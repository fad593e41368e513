"""A crashed owning replica's workers move at once, not a heartbeat ttl later (issue #40): the proof
that its process is gone (``scaler.replicas.membership.crashed_here``, pure) and a standby deleting
its heartbeat, then moving its workers, half a second after its last beat (the ttl is 6 s), on moto's
DynamoDB with a virtual clock (``daemon.replicas.shared_workers.ReplicaWorkers.forget_crashed``)."""
from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from scaler.replicas.membership import Beat, crashed_here, owner_pid
from tests.replicas.test_replica_workers import C, T0, Clock, Node


def _gone(pid: int) -> bool:
    return False


def _running(pid: int) -> bool:
    return True


def _refusing(address: str) -> bool:
    return False


def _listens(address: str) -> bool:
    return True


def test_a_replica_is_proven_gone_only_on_this_host_with_its_pid_exited_and_its_port_refusing() -> None:
    b = Beat("c", "a", "h:4242:ab12", "h", "127.0.0.1:9", T0, T0 + 6)
    assert owner_pid(b) == 4242 and owner_pid(replace(b, owner="own-a")) is None
    assert crashed_here(b, "h", _gone, _refusing)
    assert not crashed_here(b, "other", _gone, _refusing)      # another host: its heartbeat expires
    assert not crashed_here(b, "h", _running, _refusing)       # stopping: port closed, still beating
    assert not crashed_here(b, "h", _gone, _listens)           # another pid namespace listens there
    assert not crashed_here(replace(b, owner="own-a"), "h", _gone, _refusing)   # no pid to check
    assert not crashed_here(replace(b, address=""), "h", _gone, _refusing)


def test_a_crashed_sole_owners_workers_move_before_its_heartbeat_expires(moto_endpoint: str) -> None:
    """a owns both workers and crashes 0.5 s after its last beat: while its process runs (or its
    port answers) nothing moves; once proven gone, b deletes its heartbeat and b's rescue round
    gives b every worker at T0 + 0.5 s, 5.5 s before a's heartbeat would have expired."""
    clock = Clock()
    a, b = Node("a", moto_endpoint, clock), Node("b", moto_endpoint, clock)
    a.hb.me = replace(a.hb.me, owner="h:4242:n0")             # host:pid:nonce, as daemon.aws.wiring names it
    for n in (a, b):
        n.rw.base_type = lambda: None                         # no base workers: a single owner
        n.hb.beat(applied=0)
    for i in range(2):
        a.rw.record(f"i-c{i}", C, f"10.0.2.{i}:50052")
    first = a.rw.holder_round(generation=4, now=clock())
    assert set(first.published.owner.values()) == {"a"}
    for n in (a, b):
        n.round()
    assert sorted(a.held.workers) == ["i-c0", "i-c1"] and not b.held.workers
    clock.t += 0.5                                             # a dies; b's hop to a:1 fails
    b.round()
    assert b.rw.forget_crashed("a:1", "h", _running, _refusing) is None   # its pid runs: no proof
    assert b.rw.forget_crashed("a:1", "h", _gone, _listens) is None       # its port answers: no proof
    assert b.rw.forget_crashed("a:1", "elsewhere", _gone, _refusing) is None
    assert b.table.beat_item("a") is not None and b.rw.rescue_round(clock()) is None
    gone = b.rw.forget_crashed("a:1", "h", _gone, _refusing)
    assert gone is not None and gone.replica == "a" and b.table.beat_item("a") is None
    assert b.rw.forget_crashed("a:1", "h", _gone, _refusing) is None      # once
    b.hb.beat(applied=b.rw.applied)
    rnd = b.rw.rescue_round(clock())
    assert rnd is not None and rnd.wrote and rnd.live == ("b",)
    assert rnd.published.owner == {"i-c0": "b", "i-c1": "b"} and rnd.published.version == first.published.version + 1
    b.round()
    assert sorted(b.held.workers) == ["i-c0", "i-c1"] and clock() - T0 == 0.5
    # the replacement a launched registers; a held the lease, so b deals it until a new holder publishes
    clock.t += 1.0
    a.rw.record("i-c2", C, "10.0.2.2:50052")
    b.round()
    assert b.rw.rescue_round(clock()) is None                 # b owns the rest: not orphaned, holder not known gone
    b.rw.holder_crashed(clock())
    rnd = b.rw.rescue_round(clock())
    assert rnd is not None and rnd.wrote and rnd.published.owner == {"i-c0": "b", "i-c1": "b", "i-c2": "b"}
    b.round()
    assert sorted(b.held.workers) == ["i-c0", "i-c1", "i-c2"]
    a.rw.record("i-c3", C, "10.0.2.3:50052")
    assert b.rw.holder_round(generation=5, now=clock()).wrote  # a new holder published: the rescue ends
    b.round()
    assert b.rw.rescue_round(clock()) is None and b.rw.holder_gone is None


def test_the_standby_deals_for_a_crashed_holder_two_ttls_at_most(moto_endpoint: str) -> None:
    clock = Clock()
    b = Node("b", moto_endpoint, clock)
    b.rw.base_type = lambda: None
    b.hb.beat(applied=0)
    b.rw.record("i-c0", C, "10.0.2.0:50052")
    b.rw.holder_round(generation=4, now=clock())
    b.round()
    b.rw.holder_crashed(clock())
    assert b.rw.holder_gone == (4, T0 + 12.0)
    clock.t += 12.5
    b.hb.beat(applied=b.rw.applied)
    b.rw.record("i-c1", C, "10.0.2.1:50052")
    assert b.rw.rescue_round(clock()) is None                 # 12 s on: the new holder deals it


def test_a_standby_takes_the_lease_at_once_when_the_crashed_replica_held_it(moto_endpoint: str) -> None:
    """The holder's process proven gone on this host at a failed hop: the standby takes its lease
    then (generation + 1, the dead holder's lease 6 s from expiring) and runs the fleet loop's
    takeover, not at its next lease retry or the ttl (issue #40, the 12 q/s failover points)."""
    import asyncio

    from tests.replicas.test_replicas import _two_roles

    holder, standby, _ = _two_roles(moto_endpoint)
    first = holder.lease.held
    assert first is not None and first.pid == 1
    led: list[int] = []

    async def on_lead() -> None:
        led.append(standby.lease_generation() or 0)

    async def no_beat() -> None:
        return None

    standby.on_lead, standby.beat = on_lead, no_beat   # type: ignore[method-assign]
    dead = Beat("ha", "10.0.0.1:5", first.owner, "h", "10.0.0.1:5", T0, T0 + 6)
    dealt: list[float] = []

    class Crashed:     # the part of ReplicaWorkers a failed hop asks: the holder's process proven gone
        beats: dict[str, Beat] = {}

        def forget_crashed(self, address: str, host: str, alive: object, listening: object) -> Beat | None:
            return dead if address == dead.address else None

        def holder_crashed(self, now: float) -> None:
            dealt.append(now)

    standby.workers = Crashed()                                  # type: ignore[assignment]

    async def hop_failed(alive_after: bool) -> None:
        standby.lease.alive = lambda pid: alive_after or pid != 1   # pid 1: the holder's
        standby.suspect("10.0.0.1:5")
        while standby._tasks:
            await asyncio.gather(*list(standby._tasks))

    asyncio.run(hop_failed(alive_after=True))   # its pid still runs (the lease item's): nothing taken
    assert not standby.leading() and led == [] and len(dealt) == 1
    asyncio.run(hop_failed(alive_after=False))
    assert standby.leading() and led == [first.generation + 1] and len(dealt) == 2
    taken = standby.lease.held
    assert taken is not None and taken.since < first.expires_at   # before the dead holder's lease expired


def test_a_holder_exited_but_not_reaped_holds_no_lease() -> None:
    """A zombie (exited, its parent has not waited for it yet) acts no more: on this host its lease
    is free at once, as a dead process's (``scaler.replicas.lease_holder``'s default check)."""
    import subprocess
    import sys
    import time

    from config.pids import pid_alive, pid_running as _running

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        end = time.monotonic() + 30
        while Path(f"/proc/{child.pid}/stat").read_text().split()[2] != "Z":   # not reaped: no wait() yet
            assert time.monotonic() < end
            time.sleep(0.01)
        assert pid_alive(child.pid) and not _running(child.pid)
    finally:
        child.wait()
    assert _running(os.getpid())
    import inspect

    from scaler.replicas.lease_holder import ClusterLease
    assert inspect.signature(ClusterLease).parameters["alive"].default is _running   # the lease's own check


def test_a_lease_taken_at_the_retry_from_a_dead_holder_of_this_host_moves_its_workers_too(moto_endpoint: str) -> None:
    """The standby's lease retry finds the holder's process gone (this host): it takes the lease and
    checks the dead holder's replica at once (its heartbeat deleted when proven), so the workers the
    dead holder owned move now; before, the new holder served with no worker until the dead one's
    heartbeat expired (4 of 48 queries refused after 5.1-5.5 s at a kill point of the failover bench)."""
    import asyncio

    from tests.replicas.test_replicas import _two_roles

    holder, standby, _ = _two_roles(moto_endpoint)
    first = holder.lease.held
    assert first is not None
    dead = Beat("ha", "10.0.0.1:5", first.owner, "h", "10.0.0.1:5", T0, T0 + 6)
    checked: list[str] = []

    class Crashed:
        beats = {dead.address: dead}

        def forget_crashed(self, address: str, host: str, alive: object, listening: object) -> Beat | None:
            checked.append(address)
            return dead

        def holder_crashed(self, now: float) -> None:
            return None

    async def no_beat() -> None:
        return None

    async def on_lead() -> None:
        return None

    standby.workers, standby.beat, standby.on_lead = Crashed(), no_beat, on_lead   # type: ignore[assignment]
    standby.lease.alive = lambda pid: pid != 1            # the holder (pid 1) has exited

    async def retry() -> None:
        await standby.try_lead()
        while standby._tasks:
            await asyncio.gather(*list(standby._tasks))

    asyncio.run(retry())
    assert standby.leading() and standby.lease_generation() == first.generation + 1
    assert checked == ["10.0.0.1:5"]
