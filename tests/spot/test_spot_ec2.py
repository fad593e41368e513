"""Spot launches on scaler.cloud.ec2.Ec2Cloud against moto (issue #28 phase 2, deliverable 3): the market
options, the zone's subnet, the slot and market tags, the slot read back from a listing (what
reconcile after a restart sees), and the spot capacity error codes typed as InsufficientCapacity."""
from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from config.schema import LaunchSpec
from config.sections.spot import SpotSpec
from scaler.cloud.provider import InsufficientCapacity
from scaler.cloud.ec2 import (MARKET_TAG, SLOT_TAG, SPOT_CAPACITY_CODES, Ec2Cloud, instance_slot, make_ec2_client,
                        spot_market_options)

AMI = "ami-12c6146b"


def _subnets(ec2_client: Any, zones: list[str]) -> dict[str, str]:
    vpc = ec2_client.describe_vpcs(Filters=[{"Name": "isDefault", "Values": ["true"]}])["Vpcs"][0]["VpcId"]
    out = {}
    for k, z in enumerate(zones):
        out[z] = ec2_client.create_subnet(VpcId=vpc, CidrBlock=f"172.31.{100 + k}.0/24",
                                          AvailabilityZone=z)["Subnet"]["SubnetId"]
    return out


def _cloud(endpoint: str, spot: SpotSpec | None, client: Any = None) -> Ec2Cloud:
    return Ec2Cloud("alpha", "us-east-1", LaunchSpec(ami_id=AMI), endpoint_url=endpoint,
                    client=client or make_ec2_client("us-east-1", endpoint), spot=spot)


def test_spot_slot_launches_spot_in_the_zones_subnet_and_lists_back_as_its_slot(moto_endpoint: str,
                                                                                ec2_client: Any) -> None:
    subnets = _subnets(ec2_client, ["us-east-1a", "us-east-1c"])
    cloud = _cloud(moto_endpoint, SpotSpec(zones=subnets, max_price=0.4))
    got = cloud.launch("g4dn.xlarge@us-east-1c", 1, "tok-spot-1")
    assert [i.instance_type for i in got] == ["g4dn.xlarge@us-east-1c"]
    desc = ec2_client.describe_instances(InstanceIds=[got[0].instance_id])["Reservations"][0]["Instances"][0]
    assert desc["InstanceType"] == "g4dn.xlarge"
    assert desc["InstanceLifecycle"] == "spot"
    assert desc["SubnetId"] == subnets["us-east-1c"]
    assert desc["Placement"]["AvailabilityZone"] == "us-east-1c"
    tags = {t["Key"]: t["Value"] for t in desc["Tags"]}
    assert tags[SLOT_TAG] == "g4dn.xlarge@us-east-1c" and tags[MARKET_TAG] == "spot"
    od = cloud.launch("g4dn.xlarge", 1, "tok-od-1")
    desc_od = ec2_client.describe_instances(InstanceIds=[od[0].instance_id])["Reservations"][0]["Instances"][0]
    assert "InstanceLifecycle" not in desc_od
    assert {t["Key"]: t["Value"] for t in desc_od["Tags"]}[MARKET_TAG] == "on_demand"
    # a restart: the listing gives each instance its slot back
    listed = {i.instance_id: i.instance_type for i in _cloud(moto_endpoint, None).list_managed()}
    assert listed == {got[0].instance_id: "g4dn.xlarge@us-east-1c", od[0].instance_id: "g4dn.xlarge"}
    # idempotent per ClientToken, as on-demand
    assert [i.instance_id for i in cloud.launch("g4dn.xlarge@us-east-1c", 1, "tok-spot-1")] == [got[0].instance_id]


class _Recording:
    """A client that records run_instances' arguments and answers with a given EC2 error code."""

    def __init__(self, code: str | None = None) -> None:
        self.code, self.calls = code, []

    def get_paginator(self, op: str) -> Any:
        class P:
            def paginate(self, **kw: Any) -> list[dict[str, Any]]:
                return [{"Reservations": []}]
        return P()

    def run_instances(self, **kw: Any) -> dict[str, Any]:
        self.calls.append(kw)
        if self.code:
            raise ClientError({"Error": {"Code": self.code, "Message": "no"}}, "RunInstances")
        return {"Instances": []}


def test_market_options_are_one_time_terminate_with_max_price_only_when_set() -> None:
    assert spot_market_options(None) == {"MarketType": "spot", "SpotOptions": {
        "SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"}}
    assert spot_market_options(0.25)["SpotOptions"]["MaxPrice"] == "0.250000"
    rec = _Recording()
    cloud = Ec2Cloud("alpha", "us-east-1", LaunchSpec(ami_id=AMI, subnet_id="subnet-launch"), client=rec,
                     spot=SpotSpec(zones={"us-east-1a": None, "us-east-1d": "subnet-d"}))
    cloud.launch("c5.xlarge@us-east-1a", 1, "t1")
    cloud.launch("c5.xlarge@us-east-1d", 1, "t2")
    cloud.launch("c5.xlarge", 1, "t3")
    a, d, od = rec.calls
    assert a["SubnetId"] == "subnet-launch" and a["Placement"] == {"AvailabilityZone": "us-east-1a"}
    assert d["SubnetId"] == "subnet-d" and d["InstanceType"] == "c5.xlarge"
    assert "InstanceMarketOptions" not in od and "Placement" not in od and od["SubnetId"] == "subnet-launch"


@pytest.mark.parametrize("code", sorted(SPOT_CAPACITY_CODES | {"InsufficientInstanceCapacity"}))
def test_spot_capacity_codes_are_insufficient_capacity_of_the_slot(code: str) -> None:
    cloud = Ec2Cloud("alpha", "us-east-1", LaunchSpec(ami_id=AMI), client=_Recording(code), max_attempts=1,
                     spot=SpotSpec(zones={"us-east-1a": None}))
    with pytest.raises(InsufficientCapacity) as err:
        cloud.launch("c5.xlarge@us-east-1a", 1, "t1")
    assert err.value.instance_type == "c5.xlarge@us-east-1a"


def test_slot_of_an_untagged_spot_instance_comes_from_its_lifecycle_and_zone() -> None:
    inst = {"InstanceType": "c5.xlarge", "InstanceLifecycle": "spot", "Placement": {"AvailabilityZone": "us-east-1d"}}
    assert instance_slot(inst, {}) == "c5.xlarge@us-east-1d"
    assert instance_slot({**inst, "InstanceLifecycle": None}, {}) == "c5.xlarge"
    assert instance_slot(inst, {SLOT_TAG: "m5.large@us-east-1a"}) == "c5.xlarge@us-east-1d"   # a tag for another type


def test_the_fake_cloud_boots_a_spot_slot_as_its_type() -> None:
    from scaler.cloud.fake import FakeCloud

    cloud = FakeCloud("t", boot_s=5.0, boot_by_type={"r5n.large": 60.0, "r5n.large@us-east-1c": 90.0})
    assert cloud.boot_for("r5n.large@us-east-1a") == 60.0 and cloud.boot_for("r5n.large") == 60.0
    assert cloud.boot_for("r5n.large@us-east-1c") == 90.0 and cloud.boot_for("t3.xlarge@us-east-1a") == 5.0
