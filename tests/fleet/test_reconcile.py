"""Crash repair by reconciliation (DESIGN invariant 3), crash points simulated in-process on the
FakeCloud and on moto; the state store's WAL mode and its one-daemon lock."""
from __future__ import annotations

import os
from typing import Any, Callable

import pytest

from config.schema import LaunchSpec
from scaler.fleet.state import StateLocked, StateStore
from scaler.fleet.actuator import FleetActuator
from config.catalog import load_catalog
from scaler.cloud.provider import CloudProvider, ManagedInstance, pool_of
from scaler.cloud.ec2 import Ec2Cloud
from scaler.cloud.fake import FakeCloud

CATALOG = load_catalog()
PRICE = {t: it.price_per_hour for t, it in CATALOG.items()}
# 2 × g4dn (1.052) running, budget 1.2 → 6 × r5n (0.894): retire, launch 4, retire, launch 2.
BUDGET = 1.2
START = {"g4dn.xlarge": 2}
TARGET = {"r5n.large": 6}


class Crash(Exception):
    """The process dies here (not a CloudError: nothing in the actuator catches it)."""


class CrashingCloud:
    """Wraps a cloud; the ``at``-th call (any method) crashes ``before`` or ``after`` it acted."""

    def __init__(self, inner: CloudProvider, at: int, phase: str,
                 check: Callable[[], None] | None = None) -> None:
        self.inner, self.at, self.phase, self.n, self.check = inner, at, phase, 0, check
        self.cluster = inner.cluster

    def _call(self, fn: Callable[..., Any], *a: Any) -> Any:
        self.n += 1
        if self.n == self.at and self.phase == "before":
            raise Crash(f"before call {self.n}")
        r = fn(*a)
        if self.check:
            self.check()
        if self.n == self.at and self.phase == "after":
            raise Crash(f"after call {self.n}")
        return r

    def launch(self, *a: Any) -> list[ManagedInstance]:
        return self._call(self.inner.launch, *a)

    def terminate(self, *a: Any) -> None:
        return self._call(self.inner.terminate, *a)

    def list_managed(self) -> list[ManagedInstance]:
        return self._call(self.inner.list_managed)

    def find_by_intent(self, *a: Any) -> list[ManagedInstance]:
        return self._call(self.inner.find_by_intent, *a)


def _money_check(cloud: CloudProvider) -> Callable[[], None]:
    def check() -> None:
        cost = sum(PRICE[i.instance_type] for i in cloud.list_managed() if i.live)
        assert cost <= BUDGET + 1e-9, f"over budget: {cost}"
    return check


def _crash_then_recover(make_cloud: Callable[[], Any], tmp_path, at: int, phase: str) -> tuple[Any, bool]:
    """Start pool START, then apply TARGET with a crash at call ``at``; restart (new actuator on the
    same store file), reconcile, apply, reconcile. Returns the raw cloud and whether it crashed."""
    raw = make_cloud()
    db = tmp_path / f"s-{at}-{phase}.db"
    with StateStore.open(db) as store:
        assert FleetActuator(raw, store, CATALOG, BUDGET).apply(START, "p0").complete
    crashed = False
    store = StateStore.open(db)
    try:
        FleetActuator(CrashingCloud(raw, at, phase, _money_check(raw)), store, CATALOG, BUDGET).apply(TARGET, "p1")
    except Crash:
        crashed = True
    finally:
        store.close()  # the lock goes with the process
    with StateStore.open(db) as store:
        act = FleetActuator(CrashingCloud(raw, 0, "never", _money_check(raw)), store, CATALOG, BUDGET)
        act.reconcile()
        rep = act.apply(TARGET, "p1")
        act.reconcile()
        assert rep.complete, rep
        assert not store.open_intents()
    return raw, crashed


def test_fake_every_crash_point(tmp_path) -> None:
    crashes = 0
    for at in range(1, 9):
        for phase in ("before", "after"):
            fake = FakeCloud("alpha")
            stranger = fake.add_unmanaged("t3.xlarge")
            raw, crashed = _crash_then_recover(lambda: fake, tmp_path, at, phase)
            crashes += crashed
            assert pool_of(fake.list_managed()) == TARGET
            # no duplicates: every launch beyond the 2 start + 6 target instances would show here
            launched = [i for i in fake.all_instances() if i.tags]
            assert len(launched) == 2 + 6, (at, phase)
            assert {i.instance_id: i.state for i in fake.all_instances()}[stranger] == "running"
    assert crashes == 14  # 7 cloud calls in the transition, each crashed before and after


@pytest.mark.parametrize("at,phase", [(3, "before"), (4, "after"), (6, "before"), (7, "after"), (9, "after"),
                                      (12, "before"), (14, "after")])
def test_moto_crash_points(moto_endpoint: str, ec2_client, tmp_path, at: int, phase: str) -> None:
    stranger = ec2_client.run_instances(ImageId="ami-12c6146b", InstanceType="t3.xlarge", MinCount=1,
                                        MaxCount=1)["Instances"][0]["InstanceId"]
    cloud = Ec2Cloud("alpha", "us-east-1", LaunchSpec(ami_id="ami-12c6146b"), endpoint_url=moto_endpoint)
    _, crashed = _crash_then_recover(lambda: cloud, tmp_path, at, phase)
    assert crashed
    assert pool_of(cloud.list_managed()) == TARGET
    resv = ec2_client.describe_instances()["Reservations"]
    every = [i for r in resv for i in r["Instances"]]
    assert len(every) == 1 + 2 + 6  # the stranger, the start pool, the target: nothing launched twice
    assert {i["InstanceId"]: i["State"]["Name"] for i in every}[stranger] == "running"


def _store_and_fake(tmp_path) -> tuple[StateStore, FakeCloud, FleetActuator]:
    store = StateStore.open(tmp_path / "st.db")
    fake = FakeCloud("alpha")
    return store, fake, FleetActuator(fake, store, CATALOG, BUDGET)


def test_intent_recorded_not_sent_is_reissued_with_same_token(tmp_path) -> None:
    store, fake, act = _store_and_fake(tmp_path)
    store.record_plan("p1", {"m5.xlarge": 2}, BUDGET, 0.0)
    store.record_intent("tok-a", "launch", "p1", "m5.xlarge", 2, 0, 0.0)
    r = act.reconcile()
    assert r.reissued == ["tok-a"]
    assert {i.intent for i in fake.list_managed()} == {"tok-a"} and len(fake.list_managed()) == 2
    assert store.get_intent("tok-a").status == "done"  # type: ignore[union-attr]
    assert act.apply({"m5.xlarge": 2}, "p1").launched == {}


def test_intent_of_superseded_plan_is_rolled_back(tmp_path) -> None:
    store, fake, act = _store_and_fake(tmp_path)
    store.record_plan("p1", {"m5.xlarge": 2}, BUDGET, 0.0)
    store.record_intent("tok-a", "launch", "p1", "m5.xlarge", 2, 0, 0.0)
    store.set_intent_status("tok-a", "sent", 0.0)
    store.record_plan("p2", {"r5n.large": 1}, BUDGET, 1.0)
    r = act.reconcile()
    assert r.rolled_back == ["tok-a"] and fake.list_managed() == []


def test_sent_and_launched_but_not_recorded_done_is_adopted(tmp_path) -> None:
    store, fake, act = _store_and_fake(tmp_path)
    store.record_plan("p1", {"m5.xlarge": 2}, BUDGET, 0.0)
    store.record_intent("tok-b", "launch", "p1", "m5.xlarge", 2, 0, 0.0)
    store.set_intent_status("tok-b", "sent", 0.0)
    ids = sorted(i.instance_id for i in fake.launch("m5.xlarge", 2, "tok-b"))  # then the crash
    r = act.reconcile()
    assert r.finished == ["tok-b"] and sorted(r.adopted) == []  # known through the intent already
    it = store.get_intent("tok-b")
    assert it is not None and it.status == "done" and sorted(it.instance_ids) == ids
    assert act.apply({"m5.xlarge": 2}, "p1").launched == {} and fake.run_instances_calls == 1


def test_terminate_intent_half_done_is_finished(tmp_path) -> None:
    store, fake, act = _store_and_fake(tmp_path)
    assert act.apply({"m5.xlarge": 3}, "p0").complete
    victims = sorted(i.instance_id for i in fake.list_managed())[:2]
    store.record_plan("p1", {"m5.xlarge": 1}, BUDGET, 1.0)
    store.record_intent("tok-t", "terminate", "p1", "m5.xlarge", 2, 0, 1.0, victims)
    store.set_intent_status("tok-t", "sent", 1.0)
    fake.terminate(victims[:1])  # half done, then the crash
    r = act.reconcile()
    assert r.finished == ["tok-t"] and r.terminated_unwanted == []
    assert pool_of(fake.list_managed()) == {"m5.xlarge": 1}
    assert {i.instance_id for i in fake.list_managed() if i.live}.isdisjoint(victims)


def test_adopt_without_plan_terminates_nothing(tmp_path) -> None:
    store, fake, act = _store_and_fake(tmp_path)
    ids = sorted(i.instance_id for i in fake.launch("m5.xlarge", 2, "old-daemon"))
    r = act.reconcile()
    assert sorted(r.adopted) == ids and r.terminated_unwanted == []
    assert sorted(store.known_instances()) == ids
    # once a plan exists, what it does not want goes (and the adopted ones count toward it)
    store.record_plan("p1", {"m5.xlarge": 1}, BUDGET, 0.0)
    r2 = act.reconcile()
    assert len(r2.terminated_unwanted) == 1 and pool_of(fake.list_managed()) == {"m5.xlarge": 1}


def test_wal_mode_and_lock(tmp_path) -> None:
    path = tmp_path / "state.db"
    s1 = StateStore.open(path)
    assert s1.journal_mode() == "wal"
    with pytest.raises(StateLocked) as ei:
        StateStore.open(path)
    msg = str(ei.value)
    assert msg.startswith(f"another costscale daemon (pid {os.getpid()}) holds {path}.lock")
    assert ei.value.exit_code == 2
    s1.close()
    s2 = StateStore.open(path)  # released on close
    s2.close()


def test_lock_released_when_holder_is_killed(tmp_path) -> None:
    import signal
    import subprocess
    import sys

    path = tmp_path / "state.db"
    code = ("import sys, time; from scaler.fleet.state import StateStore; s = StateStore.open(sys.argv[1]); "
            "print('locked', flush=True); time.sleep(60)")
    p = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "locked"
        with pytest.raises(StateLocked, match=f"pid {p.pid}"):
            StateStore.open(path)
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    StateStore.open(path).close()
