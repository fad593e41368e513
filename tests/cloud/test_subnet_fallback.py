"""On-demand capacity over several subnets (issue #38, deliverable 2; scaler.cloud.subnets): on moto
in server mode, with a zone's capacity refusal injected at botocore's before-call (above its retry
loop, as tests/cloud/test_cloud_faults.py's Stubber answers: each refusal is the call's one
answer), for RunInstances into one subnet only; every other call is moto's."""
from __future__ import annotations

from typing import Any

import pytest
from botocore.awsrequest import AWSResponse

from config.catalog import load_catalog
from config.schema import LaunchSpec
from scaler.cloud.ec2 import Ec2Cloud, make_ec2_client
from scaler.cloud.provider import INTENT_TAG, InsufficientCapacity
from scaler.cloud.subnets import SUBNET_COOLDOWN_S, subnet_order, subnet_token
from scaler.fleet.actuator import FleetActuator
from scaler.fleet.state import StateStore

AMI = "ami-12c6146b"
G4 = "g4dn.xlarge"


class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class Refuse:
    """RunInstances into a subnet of ``codes`` answered with that code; every RunInstances recorded
    as (SubnetId, ClientToken). moto starts MinCount instances where AWS starts up to MaxCount
    when it has the capacity: the others are sent to moto with MinCount = MaxCount."""

    def __init__(self) -> None:
        self.codes: dict[str, str] = {}
        self.calls: list[tuple[str, str]] = []

    def __call__(self, params: Any, **_: Any) -> Any:
        body = params.get("body") or {}
        if body.get("Action") != "RunInstances" or body.get("DryRun") == "true":
            return None
        subnet = body.get("SubnetId", "")
        self.calls.append((subnet, body.get("ClientToken", "")))
        code = self.codes.get(subnet)
        if code is None:
            body["MinCount"] = body["MaxCount"]
            return None
        parsed = {"Error": {"Code": code, "Message": f"no {code} here"}, "ResponseMetadata": {"HTTPStatusCode": 500}}
        return AWSResponse("http://127.0.0.1", 500, {}, None), parsed


@pytest.fixture()
def net(ec2_client: Any) -> dict[str, str]:
    vpc = ec2_client.create_vpc(CidrBlock="10.1.0.0/16")["Vpc"]["VpcId"]
    a = ec2_client.create_subnet(VpcId=vpc, CidrBlock="10.1.1.0/24", AvailabilityZone="us-east-1a")["Subnet"]["SubnetId"]
    b = ec2_client.create_subnet(VpcId=vpc, CidrBlock="10.1.2.0/24", AvailabilityZone="us-east-1b")["Subnet"]["SubnetId"]
    return {"a": a, "b": b}


def _cloud(endpoint: str, subnets: list[str], clock: Clock) -> tuple[Ec2Cloud, Refuse]:
    client = make_ec2_client("us-east-1", endpoint)
    refuse = Refuse()
    client.meta.events.register("before-call.ec2.RunInstances", refuse)
    cloud = Ec2Cloud("alpha", "us-east-1", LaunchSpec(ami_id=AMI, subnets=subnets), client=client, clock=clock)
    return cloud, refuse


def _subnet_of(ec2_client: Any, iid: str) -> str:
    return ec2_client.describe_instances(InstanceIds=[iid])["Reservations"][0]["Instances"][0]["SubnetId"]


def test_a_zones_capacity_refusal_goes_to_the_next_subnet_with_its_own_token(
        moto_endpoint: str, ec2_client: Any, net: dict[str, str]) -> None:
    a, b = net["a"], net["b"]
    clock = Clock()
    cloud, refuse = _cloud(moto_endpoint, [a, b], clock)
    refuse.codes[a] = "InsufficientInstanceCapacity"
    got = cloud.launch(G4, 2, "tok-1")
    assert len(got) == 2 and {_subnet_of(ec2_client, i.instance_id) for i in got} == {b}
    assert {i.tags[INTENT_TAG] for i in got} == {"tok-1"}             # the intent's token, whichever subnet
    assert refuse.calls == [(a, subnet_token("tok-1", a, [a, b])), (b, subnet_token("tok-1", b, [a, b]))]
    assert len({t for _, t in refuse.calls}) == 2 and all(len(t) <= 64 for _, t in refuse.calls)
    assert cloud.subnet_cooling == {(G4, a): 1000.0 + SUBNET_COOLDOWN_S}
    # the same intent again: found by its tag, no second launch
    again = cloud.launch(G4, 2, "tok-1")
    assert sorted(i.instance_id for i in again) == sorted(i.instance_id for i in got) and len(refuse.calls) == 2
    # within the cooldown the refused subnet is left out; another type still tries it first
    refuse.codes.clear()
    cloud.launch(G4, 1, "tok-2")
    assert refuse.calls[2:] == [(b, subnet_token("tok-2", b, [a, b]))]
    cloud.launch("c5.2xlarge", 1, "tok-3")
    assert refuse.calls[3][0] == a
    # after the cooldown, the first subnet again
    clock.t += SUBNET_COOLDOWN_S
    cloud.launch(G4, 1, "tok-4")
    assert refuse.calls[4:] == [(a, subnet_token("tok-4", a, [a, b]))]


def test_a_quota_refusal_is_not_a_zones_and_tries_no_other_subnet(
        moto_endpoint: str, ec2_client: Any, net: dict[str, str]) -> None:
    a, b = net["a"], net["b"]
    cloud, refuse = _cloud(moto_endpoint, [a, b], Clock())
    for code in ("VcpuLimitExceeded", "InstanceLimitExceeded"):
        refuse.codes[a] = code
        with pytest.raises(InsufficientCapacity, match=code):
            cloud.launch(G4, 1, f"tok-{code}")
    assert [s for s, _ in refuse.calls] == [a, a] and cloud.subnet_cooling == {}
    assert ec2_client.describe_instances()["Reservations"] == []


def test_no_subnet_left_is_the_types_capacity_error_and_the_fleet_cools_the_type(
        moto_endpoint: str, ec2_client: Any, net: dict[str, str], tmp_path: Any) -> None:
    a, b = net["a"], net["b"]
    clock = Clock()
    cloud, refuse = _cloud(moto_endpoint, [a, b], clock)
    refuse.codes.update({a: "InsufficientInstanceCapacity", b: "Unsupported"})
    act = FleetActuator(cloud, StateStore.open(tmp_path / "s.db"), load_catalog(), 2.0, clock=clock,
                        capacity_cooldown_s=300)
    rep = act.apply({G4: 1}, "p1")
    assert rep.unavailable == [G4] and rep.shortfall == {G4: 1} and not rep.complete
    assert [s.status for s in act.store.intents(plan_id="p1")] == ["failed"]     # one intent for the launch
    assert [s for s, _ in refuse.calls] == [a, b]
    assert cloud.subnet_cooling == {(G4, a): 1300.0, (G4, b): 1300.0}
    with pytest.raises(InsufficientCapacity, match=f"{a}: refused within 300 s; {b}: refused within 300 s"):
        cloud.launch(G4, 1, "tok-late")
    assert len(refuse.calls) == 2                    # nothing asked of EC2 while every subnet cools
    assert ec2_client.describe_instances()["Reservations"] == []


def test_the_fleet_launches_within_budget_in_the_subnet_that_has_capacity(
        moto_endpoint: str, ec2_client: Any, net: dict[str, str], tmp_path: Any) -> None:
    """The slot stays the type (an on-demand price is the region's, whatever the zone): the budget
    check is the one it was, and the instances count in the type's slot."""
    a, b = net["a"], net["b"]
    clock = Clock()
    cloud, refuse = _cloud(moto_endpoint, [a, b], clock)
    refuse.codes[a] = "InsufficientInstanceCapacity"
    act = FleetActuator(cloud, StateStore.open(tmp_path / "s.db"), load_catalog(), 1.1, clock=clock)
    rep = act.apply({G4: 2}, "p1")                 # 2 x 0.526 = 1.052 $/hr <= 1.1
    live = [i for i in cloud.list_managed() if i.live]
    assert rep.complete and [i.instance_type for i in live] == [G4, G4]
    assert {_subnet_of(ec2_client, i.instance_id) for i in live} == {b} and [s for s, _ in refuse.calls] == [a, b]
    assert [s.status for s in act.store.intents(plan_id="p1")] == ["done"]
    with pytest.raises(ValueError, match="over the budget"):
        act.apply({G4: 3}, "p2")                   # 1.578 $/hr: refused before any launch, as ever
    assert len(refuse.calls) == 2


def test_one_subnet_keeps_the_intents_token_and_order_is_pure() -> None:
    assert subnet_token("tok", "subnet-a", ["subnet-a"]) == "tok"
    assert subnet_token("tok", None, []) == "tok"
    assert subnet_token("x" * 64, "subnet-a", ["subnet-a", "subnet-b"]) != subnet_token("x" * 64, "subnet-b",
                                                                                         ["subnet-a", "subnet-b"])
    assert len(subnet_token("x" * 64, "subnet-a", ["subnet-a", "subnet-b"])) == 64
    assert subnet_order(["s1", "s2", "s3"], {"s1": 10.0, "s3": 5.0}, 5.0) == ["s2", "s3"]
