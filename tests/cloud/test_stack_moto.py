"""costscale's CloudFormation stack created in moto (server mode, 127.0.0.1), ``costscale init
--from-stack`` writing the config its outputs fill, and the daemon started on that config: it takes
its lease in the stack's table and launches into the stack's subnet with the stack's security group
and the workers' instance profile (issue #38, deliverable 4)."""
from __future__ import annotations

import asyncio
import base64
import stat
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml

from config.errors import ConfigError
from daemon.cli import main
from tests.conftest import free_port
from tests.stack_helpers import REGION, Deployed, complete, deploy

STACK, CLUSTER = "costscale-prod", "prod"


def _args(endpoint: str) -> dict[str, Any]:
    return {"region_name": REGION, "endpoint_url": endpoint}


def _init(endpoint: str, out: Path, *extra: str, stack: str = STACK) -> int:
    return main(["init", "--from-stack", stack, "--region", REGION, "--out", str(out), "--endpoint-url", endpoint,
                 *extra])


def _group_id(endpoint: str, name: str) -> str:
    ec2 = boto3.client("ec2", **_args(endpoint))
    groups = ec2.describe_security_groups(Filters=[{"Name": "tag:Name", "Values": [name]}])["SecurityGroups"]
    return str(groups[0]["GroupId"])


def _bucket(endpoint: str) -> str:
    """The account's one bucket (the stack's)."""
    (bucket,) = boto3.client("s3", **_args(endpoint)).list_buckets()["Buckets"]
    return str(bucket["Name"])


# moto's CloudFormation has no AWS::SQS::QueuePolicy (its server skips it with a UserWarning): the
# EventBridge rule's delivery to the queue is not shown on moto, only the queue, the rule and the URL
def test_init_writes_the_config_the_stack_outputs_fill(moto_endpoint: str, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    d = deploy(_args(moto_endpoint), STACK, CLUSTER, IncludeSpot=True, IncludeReplicas=True)
    out = tmp_path / "costscale.yaml"
    assert _init(moto_endpoint, out) == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert capsys.readouterr().out == (f"{out}: written from stack {STACK} ({REGION}); fill in each FILL IN, then "
                                       f"costscale validate {out}\n")
    raw = yaml.safe_load(out.read_text())
    worker_sg = _group_id(moto_endpoint, "costscale-prod-worker")
    assert (raw["cluster"], raw["region"]) == (CLUSTER, REGION)
    assert raw["launch"] == {"ami_id": None, "subnets": d.subnets, "security_group_ids": [worker_sg],
                             "iam_instance_profile": "costscale-prod-worker"}
    assert raw["dispatcher"] == {"listen": "0.0.0.0:50051", "advertise": None, "worker_port": 50052,
                                 "token_parameter": "/costscale/prod/cluster-token", "auth_token_file": None}
    assert raw["lease"] == {"table": "costscale-prod-leases", "replicas": True}
    assert raw["aws"] == {"buckets": [_bucket(moto_endpoint)], "endpoint_url": moto_endpoint}
    assert raw["spot"] == {"interruption_queue": d.outputs["InterruptionQueueUrl"]}
    assert d.outputs["InterruptionQueueUrl"].endswith("/costscale-prod-spot-warnings")
    # the placeholders: validate refuses the file, naming each one left to fill
    from config.checks import load_checked_config

    with pytest.raises(ConfigError) as refused:
        load_checked_config(str(out))
    named = " ".join(refused.value.lines)
    for field in ("budget_per_hour", "models", "instance_types", "ami_id"):
        assert field in named, (field, refused.value.lines)


def test_init_refuses_an_existing_file_a_missing_stack_and_a_stack_of_another_kind(
        moto_endpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    deploy(_args(moto_endpoint), STACK, CLUSTER)
    out = tmp_path / "costscale.yaml"
    out.write_text("mine\n")
    out.chmod(0o644)
    assert _init(moto_endpoint, out) == 2
    assert capsys.readouterr().err == (f"costscale init: {out} exists: give --force to overwrite it, "
                                       "or --out another path\n")
    assert out.read_text() == "mine\n"
    assert _init(moto_endpoint, out, "--force") == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o600 and out.read_text().startswith("# costscale config from")
    capsys.readouterr()

    assert _init(moto_endpoint, tmp_path / "b.yaml", stack="nope") == 2
    assert capsys.readouterr().err == "costscale init: stack nope not found in us-east-1\n"

    other = '{"Resources": {"Q": {"Type": "AWS::SQS::Queue"}}, "Outputs": {"Region": {"Value": {"Ref": "AWS::Region"}}}}'
    boto3.client("cloudformation", **_args(moto_endpoint)).create_stack(StackName="other", TemplateBody=other)
    assert _init(moto_endpoint, tmp_path / "c.yaml", stack="other") == 2
    err = capsys.readouterr().err
    assert err.startswith("costscale init: stack other has no output ClusterName, SubnetIds, ") and \
        err.endswith(": is it made from config/stack/costscale-stack.yaml?\n") and err.count("\n") == 1
    assert not (tmp_path / "b.yaml").exists() and not (tmp_path / "c.yaml").exists()


def test_init_says_in_one_line_when_aws_cannot_be_reached(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          botocore_backoff: list[float]) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    assert _init(closed, tmp_path / "a.yaml") == 1
    assert capsys.readouterr().err == (f"costscale init: cloudformation describe_stacks: Could not connect to the "
                                       f'endpoint URL: "{closed}/"\n')
    assert len(botocore_backoff) == 2 and not (tmp_path / "a.yaml").exists()     # 3 attempts in all


def _start_and_tick(cfg: Any) -> tuple[int, str]:
    """The daemon started on ``cfg`` and one fleet tick: (its lease's generation, its owner)."""
    from daemon.app import Daemon

    async def scenario() -> tuple[int, str]:
        d = Daemon(cfg, None, listen="127.0.0.1:0")
        await d.start()
        try:
            await d.fleet_tick("test")
            assert d.aws is not None and d.aws.lease is not None and d.aws.lease.held is not None
            return d.aws.lease.held.generation, d.aws.lease.held.owner
        finally:
            await d.stop(grace=0.0)

    return asyncio.run(scenario())


def test_the_daemon_runs_on_the_config_from_the_stack(moto_endpoint: str, tmp_path: Path) -> None:
    from config.schema import parse_config_text
    from scaler.replicas.lease_table import DynamoLeaseTable, make_dynamodb_client
    from tests.lease_helpers import moto_ami

    d: Deployed = deploy(_args(moto_endpoint), STACK, CLUSTER)
    out = tmp_path / "costscale.yaml"
    assert _init(moto_endpoint, out) == 0
    token = tmp_path / "cluster-token"
    token.write_text("s3cret-cluster-token\n")
    token.chmod(0o600)
    cfg = parse_config_text(complete(out, moto_ami(moto_endpoint), tmp_path / "state.db", token))
    generation, owner = _start_and_tick(cfg)

    lease = DynamoLeaseTable("costscale-prod-leases", make_dynamodb_client(REGION, moto_endpoint)).get(CLUSTER)
    assert lease is not None and (lease.generation, lease.owner) == (generation, owner) == (1, owner)
    ec2 = boto3.client("ec2", **_args(moto_endpoint))
    res = ec2.describe_instances(Filters=[{"Name": "tag:costscale:cluster", "Values": [CLUSTER]}])
    (inst,) = [i for r in res["Reservations"] for i in r["Instances"]]
    profile = boto3.client("iam", **_args(moto_endpoint)).get_instance_profile(
        InstanceProfileName=d.outputs["WorkerInstanceProfileName"])["InstanceProfile"]
    assert inst["InstanceType"] == "r5n.large"
    assert [g["GroupId"] for g in inst["SecurityGroups"]] == [d.outputs["WorkerSecurityGroupId"]]
    assert inst["IamInstanceProfile"]["Arn"] == profile["Arn"]
    assert (inst["SubnetId"], inst["VpcId"]) == (d.subnets[0], d.vpc)
    # the cluster token: created by the daemon as a SecureString under the stack's name for it
    ssm = boto3.client("ssm", **_args(moto_endpoint))
    param = ssm.get_parameter(Name=d.outputs["TokenParameterName"], WithDecryption=True)["Parameter"]
    assert (param["Type"], param["Value"]) == ("SecureString", "s3cret-cluster-token")
    user_data = base64.b64decode(ec2.describe_instance_attribute(InstanceId=inst["InstanceId"], Attribute="userData")
                                 ["UserData"]["Value"]).decode()
    assert d.outputs["TokenParameterName"] in user_data and "s3cret" not in user_data
