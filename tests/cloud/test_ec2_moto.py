"""scaler.cloud.ec2.Ec2Cloud against moto in server mode: tags, idempotency by intent, ownership."""
from __future__ import annotations

from typing import Any

import pytest

from config.schema import LaunchSpec
from scaler.cloud.provider import CLUSTER_TAG, INTENT_TAG, MANAGED_BY_TAG, NotManaged
from scaler.cloud.ec2 import Ec2Cloud, build_user_data, make_ec2_client

AMI = "ami-12c6146b"


def _cloud(endpoint: str, cluster: str = "alpha", client: Any = None, **kw: Any) -> Ec2Cloud:
    if client is None:
        client = _AwsLikeClient(make_ec2_client("us-east-1", endpoint))
    spec = LaunchSpec(ami_id=AMI, tags={"team": "ml"}, user_data="echo hello")
    return Ec2Cloud(cluster, "us-east-1", spec, endpoint_url=endpoint, client=client,
                    dispatcher="10.0.0.1:50051", **kw)


def _untagged(ec2_client) -> str:
    r = ec2_client.run_instances(ImageId=AMI, InstanceType="t3.xlarge", MinCount=1, MaxCount=1)
    return r["Instances"][0]["InstanceId"]


def _state(ec2_client, iid: str) -> str:
    r = ec2_client.describe_instances(InstanceIds=[iid])
    return r["Reservations"][0]["Instances"][0]["State"]["Name"]


def test_launch_list_terminate_with_tags(moto_endpoint: str, ec2_client) -> None:
    cloud = _cloud(moto_endpoint)
    got = cloud.launch("g4dn.xlarge", 2, "tok-1")
    assert len(got) == 2 and {i.instance_type for i in got} == {"g4dn.xlarge"}
    for i in got:
        assert i.tags[CLUSTER_TAG] == "alpha" and i.tags[MANAGED_BY_TAG] == "costscale"
        assert i.tags[INTENT_TAG] == "tok-1" and i.tags["team"] == "ml"
    listed = cloud.list_managed()
    assert sorted(i.instance_id for i in listed) == sorted(i.instance_id for i in got)
    assert all(i.live for i in listed)
    # tags are really on the EC2 side, user data carries the worker start
    attr = ec2_client.describe_instance_attribute(InstanceId=got[0].instance_id, Attribute="userData")
    import base64

    ud = base64.b64decode(attr["UserData"]["Value"]).decode()
    assert "echo hello" in ud and ud.rstrip().endswith("--dispatcher 10.0.0.1:50051")
    cloud.terminate([got[0].instance_id])
    assert [i.instance_id for i in cloud.list_managed() if i.live] == [got[1].instance_id]
    # another cluster sees nothing of ours and may not terminate it
    other = _cloud(moto_endpoint, cluster="beta")
    assert other.list_managed() == []
    with pytest.raises(NotManaged):
        other.terminate([got[1].instance_id])
    assert _state(ec2_client, got[1].instance_id) == "running"


def test_launch_is_idempotent_by_intent_tag(moto_endpoint: str, ec2_client) -> None:
    cloud = _cloud(moto_endpoint)
    a = cloud.launch("r5n.large", 3, "tok-same")
    b = cloud.launch("r5n.large", 3, "tok-same")
    assert sorted(i.instance_id for i in a) == sorted(i.instance_id for i in b)
    assert len(cloud.list_managed()) == 3
    assert sorted(i.instance_id for i in cloud.find_by_intent("tok-same")) == sorted(i.instance_id for i in a)
    assert cloud.find_by_intent("tok-other") == []


def test_untagged_instance_survives_everything(moto_endpoint: str, ec2_client) -> None:
    stranger = _untagged(ec2_client)
    cloud = _cloud(moto_endpoint)
    mine = cloud.launch("t3.xlarge", 1, "tok-x")
    assert stranger not in {i.instance_id for i in cloud.list_managed()}
    with pytest.raises(NotManaged, match=stranger):
        cloud.terminate([stranger])
    with pytest.raises(NotManaged):  # a mixed list is refused as a whole
        cloud.terminate([mine[0].instance_id, stranger])
    assert _state(ec2_client, mine[0].instance_id) == "running"
    with pytest.raises(NotManaged):
        cloud.terminate(["i-0123456789abcdef0"])  # unknown id: not ours either
    cloud.terminate([mine[0].instance_id])
    assert _state(ec2_client, stranger) == "running"


class _AwsLikeClient:
    """Wraps a boto3 client on moto. moto's run_instances starts MinCount instances, where AWS
    starts up to MaxCount when there is capacity: this wrapper records what was asked and makes
    moto start min(MaxCount, cap) instances (cap < MaxCount: EC2's partial success)."""

    def __init__(self, inner: Any, cap: int | None = None) -> None:
        self.inner, self.cap, self.max_counts = inner, cap, []

    def run_instances(self, **kw: Any) -> Any:
        self.max_counts.append((kw["MinCount"], kw["MaxCount"]))
        n = kw["MaxCount"] if self.cap is None else min(kw["MaxCount"], self.cap)
        kw["MinCount"] = kw["MaxCount"] = n
        return self.inner.run_instances(**kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_partial_multi_launch_returns_what_it_got(moto_endpoint: str) -> None:
    wrapped = _AwsLikeClient(make_ec2_client("us-east-1", moto_endpoint), cap=2)
    cloud = _cloud(moto_endpoint, client=wrapped)
    got = cloud.launch("c5n.2xlarge", 5, "tok-p")
    assert wrapped.max_counts == [(1, 5)]
    assert len(got) == 2
    assert len(cloud.list_managed()) == 2
    # the same token again does not launch the missing three: the intent is spent
    assert len(cloud.launch("c5n.2xlarge", 5, "tok-p")) == 2 and wrapped.max_counts == [(1, 5)]


def test_plain_moto_starts_min_count_and_we_return_it(moto_endpoint: str) -> None:
    cloud = Ec2Cloud("alpha", "us-east-1", LaunchSpec(ami_id=AMI), endpoint_url=moto_endpoint)
    assert len(cloud.launch("m5.xlarge", 3, "tok-m")) == 1  # MinCount=1: a partial success


def test_user_data_shape() -> None:
    ud = build_user_data("c1", "h:1", "#!/bin/bash\necho pre", cluster_token="s3cr'et")
    assert ud.startswith("#!/bin/bash\n") and ud.count("#!/bin/bash") == 1
    assert ud.rstrip().endswith("--dispatcher h:1")
    assert 'exec costscale worker --listen 0.0.0.0:50052 --advertise "$COSTSCALE_ADDRESS:50052"' in ud
    assert "export COSTSCALE_INSTANCE_ID=$(md instance-id)" in ud
    assert "export COSTSCALE_INSTANCE_TYPE=$(md instance-type)" in ud
    ud2 = build_user_data("c1", "h:1", models=[("ncf", "/opt/models/ncf.onnx")])
    assert "--model ncf=/opt/models/ncf.onnx --dispatcher h:1" in ud2
    assert "export COSTSCALE_CLUSTER_TOKEN='s3cr'\"'\"'et'" in ud


def test_launched_workers_serve_on_the_configured_worker_port(moto_endpoint: str, ec2_client) -> None:
    """``dispatcher.worker_port`` reaches the user-data of every instance the daemon launches."""
    import base64

    cloud = _cloud(moto_endpoint, worker_port=50099)
    (inst,) = cloud.launch("t3.xlarge", 1, "tok-port")
    attr = ec2_client.describe_instance_attribute(InstanceId=inst.instance_id, Attribute="userData")
    ud = base64.b64decode(attr["UserData"]["Value"]).decode()
    assert 'exec costscale worker --listen 0.0.0.0:50099 --advertise "$COSTSCALE_ADDRESS:50099"' in ud
    assert "--dispatcher 10.0.0.1:50051" in ud
