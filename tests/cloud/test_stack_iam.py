"""The stack's roles, with moto's IAM enforcement on (``tests.iam_helpers``: a moto server of its
own): the policies CloudFormation put on the control host's role resolve to the shipped documents
filled with the stack's own names, and an IAM user holding exactly those policies runs the daemon's
launch path on the config ``costscale init --from-stack`` wrote (the token published, the lease taken
in the stack's table, a worker launched, the lease given back), 0 refusals; the workers' policy
reads the token.

moto judges EC2, SSM and DynamoDB requests at ``Resource: *`` (tests/iam_helpers.py), so the user
holds the stack's policies as moto can judge them (``moto_view``); their ARNs are compared with
the shipped documents filled with the stack's names instead, which
tests/cloud/test_iam_policies.py matches against the resources the paths touch.
"""
from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import boto3
import pytest

from config.iam import load, render
from daemon.cli import main
from tests.iam_helpers import ACCOUNT, REGION, admin, as_user, create_user, enforce, moto_api, moto_view
from tests.iam_helpers import iam_server  # noqa: F401  (the fixture)
from tests.stack_helpers import complete, deploy

STACK, CLUSTER = "costscale-iam", "iam"


def _role_policies(iam: Any, role: str) -> dict[str, dict[str, Any]]:
    """The inline policies of ``role`` as IAM holds them (policy name → document)."""
    names = iam.list_role_policies(RoleName=role)["PolicyNames"]
    out = {}
    for name in names:
        doc = iam.get_role_policy(RoleName=role, PolicyName=name)["PolicyDocument"]
        out[name] = doc if isinstance(doc, dict) else json.loads(doc)
    return out


@pytest.mark.slow
def test_the_control_host_role_of_the_stack_runs_the_launch_path_under_iam_enforcement(
        iam_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
        capsys: pytest.CaptureFixture[str]) -> None:
    from daemon.app import Daemon
    from daemon.commands.worker import _token_from_parameter
    from tests.lease_helpers import moto_ami

    enforce(iam_server, False)
    moto_api(iam_server, "reset")
    root = admin(iam_server)
    d = deploy(root, STACK, CLUSTER)
    iam = boto3.client("iam", **root)
    control = _role_policies(iam, f"costscale-{CLUSTER}-control-host")
    worker = _role_policies(iam, f"costscale-{CLUSTER}-worker")
    values = {"region": REGION, "account": ACCOUNT, "cluster": CLUSTER, "table": d.outputs["LeaseTableName"],
              "bucket": d.outputs["BucketName"], "worker_role": f"costscale-{CLUSTER}-worker", "queue": "-"}
    # the defaults: control-host, s3-models and doctor on the control host (no spot, no replicas)
    assert sorted(control) == ["costscale-control-host", "costscale-doctor", "costscale-s3-models"]
    for name, doc in {**control, **worker}.items():
        assert doc == render(load(name.removeprefix("costscale-")), values), name
    assert sorted(worker) == ["costscale-worker", "costscale-worker-s3"]

    out = tmp_path / "costscale.yaml"
    assert main(["init", "--from-stack", STACK, "--region", REGION, "--out", str(out),
                 "--endpoint-url", iam_server]) == 0
    token = tmp_path / "cluster-token"
    token.write_text("stack-iam-token\n")
    token.chmod(0o600)
    from config.schema import parse_config_text

    cfg = parse_config_text(complete(out, moto_ami(iam_server), tmp_path / "state.db", token))
    host = create_user(iam_server, "control-host", {n: moto_view(doc) for n, doc in control.items()})
    workers = create_user(iam_server, "worker", {n: moto_view(doc) for n, doc in worker.items()})
    # the premise (enforcement is on): the same role less its control-host policy is refused at start
    bare = create_user(iam_server, "bare", {n: moto_view(doc) for n, doc in control.items()
                                            if n != "costscale-control-host"})

    async def scenario() -> int:
        daemon = Daemon(cfg, None, listen="127.0.0.1:0")
        await daemon.start()
        try:
            await daemon.fleet_tick("test")
            assert daemon.aws is not None and daemon.aws.lease is not None and daemon.aws.lease.held is not None
            return daemon.aws.lease.held.generation
        finally:
            await daemon.stop(grace=0.0)

    async def refused() -> str:
        daemon = Daemon(cfg, None, listen="127.0.0.1:0")
        try:
            await daemon.start()
        except Exception as exc:  # noqa: BLE001 - the start's one line, whatever its type
            return str(exc)
        finally:
            await daemon.stop(grace=0.0)
        return ""

    try:
        enforce(iam_server, True)
        as_user(monkeypatch, bare)
        line = asyncio.run(refused())
        capsys.readouterr()
        denied = main(["init", "--from-stack", STACK, "--region", REGION, "--out", str(tmp_path / "b.yaml"),
                       "--endpoint-url", iam_server])
        denied_err = capsys.readouterr().err
        as_user(monkeypatch, host)
        generation = asyncio.run(scenario())
        as_user(monkeypatch, workers)
        read, _ = _token_from_parameter(d.outputs["TokenParameterName"])
    finally:
        enforce(iam_server, False)
    assert "ssm:GetParameter" in line and "\n" not in line, line
    # init as a user who may not read stacks: one line naming the action, exit 2
    assert denied == 2 and denied_err.count("\n") == 1, denied_err
    assert denied_err.startswith(f"costscale init: describe stack {STACK}: AccessDenied") and \
        "cloudformation:DescribeStacks" in denied_err, denied_err
    assert generation == 1
    assert read == "stack-iam-token"
    ec2 = boto3.client("ec2", **root)
    (inst,) = [i for r in ec2.describe_instances(Filters=[{"Name": "tag:costscale:cluster", "Values": [CLUSTER]}])
               ["Reservations"] for i in r["Instances"]]
    assert [g["GroupId"] for g in inst["SecurityGroups"]] == [d.outputs["WorkerSecurityGroupId"]]
