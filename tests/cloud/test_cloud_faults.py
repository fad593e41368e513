"""Cloud faults at the boundary: typed errors, capacity errors → replan, stuck pending. (botocore's
retries of transient faults: tests/cloud/test_aws_retries.py.)"""
from __future__ import annotations

import pytest
from botocore.stub import Stubber

from config.schema import LaunchSpec
from scaler.fleet.state import StateStore
from scaler.fleet.actuator import FleetActuator
from config.catalog import load_catalog
from scaler.cloud.provider import CloudConfigError, CloudError, InsufficientCapacity, Throttled, pool_of
from scaler.cloud.ec2 import Ec2Cloud, make_ec2_client
from scaler.cloud.fake import FakeCloud

CATALOG = load_catalog()
EMPTY = {"Reservations": []}


class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _stubbed() -> tuple[Ec2Cloud, Stubber]:
    """An Ec2Cloud whose client the Stubber answers (at botocore's before-call, above its retry
    loop: each stubbed error is the call's one answer, so the typed mapping shows alone)."""
    client = make_ec2_client("us-east-1", "http://127.0.0.1:9")  # never reached: the Stubber answers
    cloud = Ec2Cloud("alpha", "us-east-1", LaunchSpec(ami_id="ami-1"), client=client)
    return cloud, Stubber(client)


def test_error_mapping() -> None:
    cloud, stub = _stubbed()
    stub.add_response("describe_instances", EMPTY)  # the intent lookup before launching
    stub.add_client_error("run_instances", service_error_code="InsufficientInstanceCapacity", http_status_code=500)
    stub.add_response("describe_instances", EMPTY)
    stub.add_client_error("run_instances", service_error_code="InstanceLimitExceeded", http_status_code=400)
    stub.add_client_error("describe_instances", service_error_code="AuthFailure", http_status_code=401)
    stub.add_client_error("describe_instances", service_error_code="InvalidParameterValue", http_status_code=400)
    with stub:
        with pytest.raises(InsufficientCapacity) as ei:
            cloud.launch("g4dn.xlarge", 1, "t1")
        assert ei.value.instance_type == "g4dn.xlarge"
        with pytest.raises(InsufficientCapacity):
            cloud.launch("g5.xlarge", 1, "t2")
        with pytest.raises(CloudConfigError, match="AuthFailure"):
            cloud.list_managed()
        with pytest.raises(CloudConfigError, match="InvalidParameterValue"):
            cloud.list_managed()
        stub.add_client_error("describe_instances", service_error_code="RequestLimitExceeded", http_status_code=503)
        with pytest.raises(Throttled, match=r"^describe_instances: throttled by EC2 \(RequestLimitExceeded\)$"):
            cloud.list_managed()
        stub.add_client_error("describe_instances", service_error_code="InternalError", http_status_code=500)
        with pytest.raises(CloudError, match="^describe_instances: InternalError: InternalError$"):
            cloud.list_managed()
        stub.assert_no_pending_responses()


def _actuator(fake: FakeCloud, clock: Clock, tmp_path, budget: float = 2.0) -> FleetActuator:
    store = StateStore.open(tmp_path / "state.db")
    return FleetActuator(fake, store, CATALOG, budget, clock=clock, pending_timeout_s=600, capacity_cooldown_s=300)


def test_capacity_error_excludes_type_for_cooldown_and_replan_succeeds(tmp_path) -> None:
    clock = Clock()
    fake = FakeCloud("alpha", clock=clock)
    fake.fail_capacity("g4dn.xlarge")
    act = _actuator(fake, clock, tmp_path)
    rep = act.apply({"g4dn.xlarge": 2}, "p1")
    assert rep.unavailable == ["g4dn.xlarge"] and not rep.complete
    assert rep.shortfall == {"g4dn.xlarge": 2}
    assert act.unavailable_types() == {"g4dn.xlarge"}
    assert [s.status for s in act.store.intents(plan_id="p1")] == ["failed"]
    # the caller replans without it
    rep2 = act.apply({"c5n.2xlarge": 2}, "p2")
    assert rep2.complete and pool_of(fake.list_managed()) == {"c5n.2xlarge": 2}
    # still cooling down: a plan naming it does not even try the cloud
    n_launch = sum(1 for op, _ in fake.calls if op == "launch")
    clock.t += 299
    rep3 = act.apply({"c5n.2xlarge": 1, "g4dn.xlarge": 1}, "p3")
    assert sum(1 for op, _ in fake.calls if op == "launch") == n_launch
    assert rep3.shortfall == {"g4dn.xlarge": 1}
    # after the cooldown it is tried again (and now there is capacity)
    fake.fail_capacity("g4dn.xlarge", on=False)
    clock.t += 2
    assert act.unavailable_types() == set()
    rep4 = act.apply({"c5n.2xlarge": 1, "g4dn.xlarge": 1}, "p4")
    assert rep4.complete and pool_of(fake.list_managed()) == {"c5n.2xlarge": 1, "g4dn.xlarge": 1}


def test_stuck_pending_terminated_after_timeout(tmp_path) -> None:
    clock = Clock()
    fake = FakeCloud("alpha", clock=clock, boot_s=30)
    fake.stick_pending("r5n.large")
    act = _actuator(fake, clock, tmp_path)
    rep = act.apply({"r5n.large": 1, "t3.xlarge": 1}, "p1")
    assert rep.complete
    stuck = rep.launched["r5n.large"][0]
    clock.t += 600  # exactly the timeout: not yet
    assert act.reconcile().terminated_stuck == []
    clock.t += 1
    r = act.reconcile()
    assert r.terminated_stuck == [stuck]
    assert {i.instance_id: i.state for i in fake.all_instances()}[stuck] in ("shutting-down", "terminated")
    assert pool_of(fake.list_managed()) == {"t3.xlarge": 1}  # the healthy one (booted after 30 s) stays
    # the next apply replaces it (here with a type that boots)
    fake.stick_pending("r5n.large", on=False)
    assert act.apply({"r5n.large": 1, "t3.xlarge": 1}, "p1").complete
    assert pool_of(fake.list_managed()) == {"r5n.large": 1, "t3.xlarge": 1}


def test_throttled_apply_stops_and_marks_intent_failed(tmp_path) -> None:
    clock = Clock()
    fake = FakeCloud("alpha", clock=clock)
    act = _actuator(fake, clock, tmp_path)
    fake.before_call.append(lambda op, args: fake.throttle_next(1) if op == "launch" else None)
    rep = act.apply({"m5.xlarge": 2}, "p1")
    assert not rep.complete and any("throttled" in e for e in rep.errors)
    assert [i.status for i in act.store.intents(plan_id="p1")] == ["failed"]
    fake.before_call.clear()
    assert act.apply({"m5.xlarge": 2}, "p1").complete
    assert pool_of(fake.list_managed()) == {"m5.xlarge": 2}


def test_partial_launch_is_topped_up_within_budget(tmp_path) -> None:
    clock = Clock()
    fake = FakeCloud("alpha", clock=clock)
    act = _actuator(fake, clock, tmp_path, budget=1.0)
    fake.limit_next_launch(1)
    rep = act.apply({"m5.xlarge": 4}, "p1")  # 4 × 0.192 = 0.768
    assert rep.complete and len(rep.launched["m5.xlarge"]) == 4
    assert fake.run_instances_calls == 2  # 1 of 4, then the other 3 under a derived token
    toks = [i.client_token for i in act.store.intents(plan_id="p1")]
    assert len(set(toks)) == 2 and all(len(t) <= 64 for t in toks)


def test_drain_before_terminate_sync_async_and_failing(tmp_path) -> None:
    import asyncio

    clock = Clock()
    fake = FakeCloud("alpha", clock=clock)
    events: list[tuple[str, str]] = []
    fake.before_call.append(lambda op, args: events.append((op, ",".join(args.get("instance_ids", [])))))

    def sync_drain(iid: str) -> bool:
        events.append(("drain", iid))
        return True

    async def async_drain(iid: str) -> bool:
        await asyncio.sleep(0)
        events.append(("adrain", iid))
        return True

    async def slow_drain(iid: str) -> bool:
        await asyncio.sleep(10)
        return True

    store = StateStore.open(tmp_path / "d.db")
    for drain, kind in ((sync_drain, "drain"), (async_drain, "adrain")):
        act = FleetActuator(fake, store, CATALOG, 2.0, clock=clock, drain=drain)
        assert act.apply({"m5.xlarge": 2}, f"up-{kind}").complete
        events.clear()
        rep = act.apply({"m5.xlarge": 1}, f"down-{kind}")
        (victim,) = rep.terminated
        assert rep.drained == {victim: True}
        assert events.index((kind, victim)) < events.index(("terminate", victim))
    # a drain that times out (or raises) reports False and the retirement still happens
    act = FleetActuator(fake, store, CATALOG, 2.0, clock=clock, drain=slow_drain, drain_timeout_s=0.05)
    assert act.apply({"m5.xlarge": 2}, "up-slow").complete
    rep = act.apply({"m5.xlarge": 1}, "down-slow")
    assert list(rep.drained.values()) == [False] and len(rep.terminated) == 1
    assert pool_of(fake.list_managed()) == {"m5.xlarge": 1}


def test_a_failed_drain_is_logged_with_the_instance_and_the_error_and_the_retirement_goes_ahead(tmp_path,
                                                                                                caplog) -> None:
    clock = Clock()
    fake = FakeCloud("alpha", clock=clock)

    def broken_drain(iid: str) -> bool:
        raise RuntimeError("worker unreachable")

    act = FleetActuator(fake, StateStore.open(tmp_path / "d.db"), CATALOG, 2.0, clock=clock, drain=broken_drain)
    assert act.apply({"m5.xlarge": 2}, "up").complete
    with caplog.at_level("WARNING", logger="costscale"):
        rep = act.apply({"m5.xlarge": 1}, "down")
    (victim,) = rep.terminated
    assert rep.drained == {victim: False}
    (line,) = [r.getMessage() for r in caplog.records if "drain" in r.getMessage()]
    assert victim in line and "RuntimeError: worker unreachable" in line


def test_the_actuator_prices_only_the_catalog_and_the_other_prices_it_is_given(tmp_path) -> None:
    act = FleetActuator(FakeCloud("alpha"), StateStore.open(tmp_path / "p.db"), {"m5.xlarge": CATALOG["m5.xlarge"]},
                        2.0, other_prices={"r5n.large": 0.5})
    assert act.price("m5.xlarge") == CATALOG["m5.xlarge"].price_per_hour
    assert act.price("r5n.large") == 0.5
    with pytest.raises(ValueError, match="c5.xlarge"):
        act.price("c5.xlarge")
