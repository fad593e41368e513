"""costscale's CloudFormation stack (``config/stack/costscale-stack.yaml``) created in moto, and the
config ``costscale init --from-stack`` writes from it completed the way a user completes it (the
models, the budget, the types, the image). Used by tests/cloud/test_stack_moto.py."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import yaml

from config.stack import TEMPLATE_PATH

REGION = "us-east-1"
ZONES = ("us-east-1a", "us-east-1b")


@dataclass(frozen=True)
class Deployed:
    stack: str
    vpc: str
    subnets: list[str]
    outputs: dict[str, str]


def deploy(client_args: dict[str, Any], stack: str, cluster: str, **switches: bool) -> Deployed:
    """A VPC with a subnet in each of :data:`ZONES`, and the stack created over it (``switches``:
    ``IncludeSpot=True`` and the like)."""
    ec2 = boto3.client("ec2", **client_args)
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnets = [ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.0.{i}.0/24", AvailabilityZone=z)["Subnet"]["SubnetId"]
               for i, z in enumerate(ZONES)]
    params = {"ClusterName": cluster, "VpcId": vpc, "SubnetIds": ",".join(subnets), "AllowedCidr": "10.1.0.0/16",
              **{k: "true" if v else "false" for k, v in switches.items()}}
    cfn = boto3.client("cloudformation", **client_args)
    cfn.create_stack(StackName=stack, TemplateBody=TEMPLATE_PATH.read_text(), Capabilities=["CAPABILITY_NAMED_IAM"],
                     Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in params.items()])
    desc = cfn.describe_stacks(StackName=stack)["Stacks"][0]
    assert desc["StackStatus"] == "CREATE_COMPLETE", desc["StackStatus"]
    return Deployed(stack, vpc, subnets, {o["OutputKey"]: o["OutputValue"] for o in desc["Outputs"]})


def complete(path: Path, ami: str, state: Path, token_file: Path) -> str:
    """The config at ``path`` (``costscale init``'s) with its FILL INs written as a test's user
    writes them: one model, a budget, one r5n.large pinned, a moto image; the dispatcher on
    loopback (nothing here leaves 127.0.0.1, so no client token) with the cluster token of
    ``token_file`` (beyond loopback the daemon generates one), the loops an hour apart (the test
    drives the fleet tick). Returns the YAML text."""
    raw = yaml.safe_load(path.read_text())
    raw.update(budget_per_hour=1.0, models=[{"name": "rm2", "qos_ms": 350}], instance_types=[{"type": "r5n.large"}],
               pinned_pool={"r5n.large": 1}, state_path=str(state), intervals={"fleet_s": 3600, "reconcile_s": 3600},
               model_scaling={"generate_variants": False})
    raw["launch"]["ami_id"] = ami
    raw["dispatcher"].update(listen="127.0.0.1:0", advertise=None, auth_token_file=None,
                             cluster_token_file=str(token_file))
    return str(yaml.safe_dump(raw, sort_keys=False))


__all__ = ["Deployed", "REGION", "ZONES", "complete", "deploy"]
