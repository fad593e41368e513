"""``config/iam/doctor.json`` lets ``costscale doctor`` make every check, and each of its statements
is needed by the check its ``Sid`` names: proven on moto with IAM enforced (``tests.iam_helpers``: a
moto server of its own), as an IAM user holding control-host.json and doctor.json, nothing else.

The account is a good one for every check doctor makes: a VPC with a subnet (us-east-1a, which
offers c5.2xlarge) and a security group, the workers' instance profile, a launch template naming an
x86_64 image (so the image is read through DescribeLaunchTemplateVersions), the lease table, the
cluster token as a SecureString. The config names no ``aws.endpoint_url``: boto3 reaches moto through
``AWS_ENDPOINT_URL`` (the user's environment), so doctor treats the instances as real ones and reads
the worker subnet's route tables for the dispatcher address (``advertise`` in the VPC's CIDR), as it
does on AWS. ``costscale doctor --json`` runs as that user:

* with both documents: every check is ``ok`` (credentials, region, permissions, image, network,
  offerings, lease, token, dispatcher, prices), and the IAM actions doctor calls are exactly
  doctor.json's plus the ones control-host.json already grants (the DryRun, the table's description,
  the parameter's type, the prices) and ``sts:GetCallerIdentity`` (which no policy can refuse);
* each doctor.json statement removed in turn, and each action of it removed alone: the check the
  ``Sid`` names warns naming the action, with the refusal's code, and nothing fails (exit 0): a
  refused read is a warning, never a verdict.

What moto cannot show (README "IAM policies"):

* moto has no Price List API: ``pricing`` is answered by botocore's Stubber (the ``prices`` check's
  ``pricing:GetProducts`` is control-host's RegionPrices, recorded as called but not enforced); nor
  Service Quotas for ``ec2`` (the ``quotas`` check's ``servicequotas:GetServiceQuota``, control-host's
  ReadVcpuQuotas) nor IAM's policy simulator (doctor.json's DoctorSimulateCheck,
  :data:`MOTO_UNCHECKED`): the Stubber answers both, so they are recorded as called, not enforced;
* moto judges EC2 requests at the resource ``*``: doctor.json's statements are all ``Resource: *``
  as shipped (EC2's describe calls support no resource-level permission on AWS), so moto judges
  them as AWS would;
* moto never asks ``sts:GetCallerIdentity`` (AWS needs no permission for it either), nor the
  ``ec2:CreateTags`` and ``iam:PassRole`` a real DryRun with tags and an instance profile checks
  (control-host.json grants both; tests/cloud/test_iam_policies.py ``MOTO_BLIND``).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from botocore.stub import Stubber

from config.iam import DOCTOR, as_list, load, render, statements
from scaler.cloud.aws_client import DENIED_CODES
from tests.iam_helpers import ACCOUNT, REGION, admin, as_user, create_user, enforce, moto_api, moto_view
from tests.iam_helpers import calls, iam_server  # noqa: F401  (the fixtures)

CLUSTER = "doc"
TABLE = "costscale-leases"
WORKER_ROLE = "costscale-worker"
TEMPLATE = "costscale-workers"
ADVERTISE = "10.10.1.5:50051"
#: the check each doctor.json statement serves, by its Sid
SERVES = {"DoctorRegionCheck": "region", "DoctorImageCheck": "image", "DoctorNetworkCheck": "network",
          "DoctorOfferingsCheck": "offerings", "DoctorDispatcherCheck": "dispatcher"}
#: doctor.json statements whose actions moto never judges (the Stubber answers them): their check, and why
MOTO_UNCHECKED = {"DoctorSimulateCheck": ("simulate", "moto has no SimulatePrincipalPolicy: botocore's Stubber answers "
                                          "it, so removing the statement refuses nothing here "
                                          "(tests/daemon/test_doctor_quotas.py shows the refusal's line)")}
#: every check doctor makes on the good config, in its order
CHECKS = ["credentials", "region", "permissions", "simulate", "image", "network", "offerings", "quotas", "lease", "token",
          "dispatcher", "prices"]
#: what doctor calls beside doctor.json: control-host.json's (the DryRun, the lease table, the token
#: parameter's type, the prices) and GetCallerIdentity, which AWS allows every caller
BESIDE = {"ec2:RunInstances", "dynamodb:DescribeTable", "ssm:GetParameter", "pricing:GetProducts",
          "sts:GetCallerIdentity", "servicequotas:GetServiceQuota", "ec2:DescribeInstances"}
DOCTOR_ACTIONS = [(st["Sid"], a) for st in statements(DOCTOR) for a in as_list(st["Action"]) if st["Sid"] in SERVES]


def _values() -> dict[str, str]:
    return {"region": REGION, "account": ACCOUNT, "cluster": CLUSTER, "table": TABLE, "bucket": "unused",
            "queue": "unused", "worker_role": WORKER_ROLE}


def _doctor_policy(without_sid: str | None, without_action: str | None) -> dict[str, Any]:
    """doctor.json as shipped, less a statement (``without_sid``) or one action of every statement."""
    doc = load(DOCTOR)
    out = []
    for st in doc["Statement"]:
        if st["Sid"] == without_sid:
            continue
        st = dict(st, Action=[a for a in as_list(st["Action"]) if a != without_action])
        if st["Action"]:
            out.append(st)
    return {**doc, "Statement": out}


def _price_entry(itype: str, usd: str) -> str:
    return json.dumps({"product": {"attributes": {"instanceType": itype, "usagetype": f"BoxUsage:{itype}"}},
                       "terms": {"OnDemand": {"T": {"priceDimensions": {"D": {"unit": "Hrs",
                                                                             "pricePerUnit": {"USD": usd}}}}}}})


def good_account(endpoint: str, tmp: Path, policies: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A fresh moto account good for every check (module docstring), the user ``host`` holding
    ``policies``; returns the config (no ``aws.endpoint_url``) and the user's environment."""
    enforce(endpoint, False)
    moto_api(endpoint, "reset")
    root = admin(endpoint)
    ec2 = boto3.client("ec2", **root)
    vpc = ec2.create_vpc(CidrBlock="10.10.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.10.1.0/24", AvailabilityZone=f"{REGION}a")["Subnet"]["SubnetId"]
    group = ec2.create_security_group(GroupName="workers", Description="w", VpcId=vpc)["GroupId"]
    ami = next(i["ImageId"] for i in ec2.describe_images()["Images"] if i.get("Architecture") == "x86_64")
    ec2.create_launch_template(LaunchTemplateName=TEMPLATE, LaunchTemplateData={"ImageId": ami})
    iam = boto3.client("iam", **root)
    iam.create_role(RoleName=WORKER_ROLE, AssumeRolePolicyDocument="{}")
    iam.create_instance_profile(InstanceProfileName=WORKER_ROLE)
    iam.add_role_to_instance_profile(InstanceProfileName=WORKER_ROLE, RoleName=WORKER_ROLE)
    boto3.client("dynamodb", **root).create_table(
        TableName=TABLE, BillingMode="PAY_PER_REQUEST", KeySchema=[{"AttributeName": "cluster", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "cluster", "AttributeType": "S"}])
    boto3.client("ssm", **root).put_parameter(Name=f"/costscale/{CLUSTER}/cluster-token", Value="doc-secret-0123456789",
                                              Type="SecureString")
    env = create_user(endpoint, "host", policies)
    cfg = {"cluster": CLUSTER, "region": REGION, "budget_per_hour": 2.5, "models": [{"name": "rm2", "qos_ms": 350}],
           "instance_types": [{"type": "c5.2xlarge"}],
           "launch": {"launch_template": {"name": TEMPLATE}, "subnet_id": subnet, "security_group_ids": [group],
                      "iam_instance_profile": WORKER_ROLE},
           "dispatcher": {"listen": "127.0.0.1:0", "advertise": ADVERTISE, "cluster_token": "doc-secret-0123456789"},
           "lease": {"table": TABLE}, "state_path": str(tmp / "state.db"), "aws": {"max_attempts": 2}}
    return {"config": cfg, "env": env, "ami": ami, "subnet": subnet}



def _answer(service: str, stub: Stubber, cfg: Any) -> None:
    """The stubbed services' answers for one doctor run on the good account."""
    from daemon.doctor.simulate import needed_statements

    if service == "pricing":
        stub.add_response("get_products", {"FormatVersion": "aws_v1", "PriceList": [_price_entry("c5.2xlarge", "0.34")]})
    elif service == "service-quotas":
        stub.add_response("get_service_quota", {"Quota": {"QuotaCode": "L-1216C47A", "Value": 64.0}},
                          {"ServiceCode": "ec2", "QuotaCode": "L-1216C47A"})
    else:
        for st in needed_statements(cfg, ACCOUNT):
            stub.add_response("simulate_principal_policy", {"IsTruncated": False, "EvaluationResults": [
                {"EvalActionName": a, "EvalDecision": "allowed"} for a in as_list(st["Action"])]})


def run_doctor_as(endpoint: str, tmp: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                  doctor_policy: dict[str, Any], calls: dict[str, list[Any]] | None = None) -> tuple[int, list[dict]]:
    """``costscale doctor --json`` on the good account as a user holding control-host.json and
    ``doctor_policy`` (filled, as moto judges them): (exit code, the checks)."""
    from daemon.cli import main
    from daemon.doctor import checks

    policies = {"control-host": moto_view(render(load("control-host"), _values())),
                "doctor": moto_view(render(doctor_policy, _values()))}
    try:
        acct = good_account(endpoint, tmp, policies)
        path = tmp / "c.yaml"
        path.write_text(yaml.safe_dump(acct["config"]))
        as_user(monkeypatch, acct["env"])
        made = checks.clients_for

        def clients_for(cfg: Any) -> Any:          # moto has no Price List API, no Service Quotas for ec2 and no
            real = made(cfg)                       # policy simulator: botocore's Stubber answers them

            def client(service: str) -> Any:
                c = real(service)
                if service in ("pricing", "service-quotas", "iam") and not getattr(c, "_stubbed", False):
                    stub = Stubber(c)
                    _answer(service, stub, cfg)
                    stub.activate()
                    c._stubbed = True
                return c
            return client

        monkeypatch.setattr(checks, "clients_for", clients_for)
        enforce(endpoint, True)
        if calls is not None:
            calls.clear()
        rc = main(["doctor", str(path), "--json"])
    finally:
        enforce(endpoint, False)
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err, out
    return rc, json.loads(out.out)["checks"]


@pytest.mark.slow
def test_control_host_and_doctor_documents_make_every_check_ok_calling_exactly_their_actions(
        iam_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        calls: dict[str, list[Any]]) -> None:
    rc, found = run_doctor_as(iam_server, tmp_path, monkeypatch, capsys, load(DOCTOR), calls)
    assert rc == 0 and [c["check"] for c in found] == CHECKS, found
    assert [c["line"] for c in found if c["status"] != "ok"] == [], found
    by = {c["check"]: c["found"] for c in found}
    assert "(x86_64), fits c5.2xlarge" in by["image"]
    assert by["dispatcher"].startswith(f"workers dial {ADVERTISE}: routed from every worker subnet (10.10.0.0/16 via local")
    assert by["token"].endswith("(SecureString)") and "c5.2xlarge in us-east-1: 0.34" in by["prices"]
    doctor = {a for st in statements(DOCTOR) for a in as_list(st["Action"])}
    control = {a for st in statements("control-host") for a in as_list(st["Action"])}
    assert set(calls) == doctor | BESIDE, (sorted(set(calls) - doctor - BESIDE), sorted(doctor | BESIDE - set(calls)))
    assert not doctor & control and BESIDE - {"sts:GetCallerIdentity"} <= control
    assert all(kw.get("DryRun") for kw in calls["ec2:RunInstances"])       # doctor launches nothing


@pytest.mark.slow
@pytest.mark.parametrize("sid", list(SERVES))
def test_each_doctor_statement_removed_makes_its_check_warn_naming_the_action(
        sid: str, iam_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    actions = as_list(next(st for st in statements(DOCTOR) if st["Sid"] == sid)["Action"])
    rc, found = run_doctor_as(iam_server, tmp_path, monkeypatch, capsys, _doctor_policy(sid, None))
    by = {c["check"]: c for c in found}
    assert rc == 0 and [c["check"] for c in found] == CHECKS, found
    mine = by[SERVES[sid]]
    assert mine["status"] == "warn" and mine["code"] in DENIED_CODES, mine
    assert any(a in mine["line"] for a in actions) and "config/iam/doctor.json" in mine["line"] + mine["change"], mine
    for c in found:        # nothing fails; whatever else warns was refused one of the same actions
        assert c["status"] == "ok" or (c["status"] == "warn" and any(a in c["line"] for a in actions)), c


@pytest.mark.slow
@pytest.mark.parametrize("sid,action", DOCTOR_ACTIONS, ids=[a for _, a in DOCTOR_ACTIONS])
def test_each_doctor_action_removed_alone_makes_its_check_warn_naming_it(
        sid: str, action: str, iam_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    rc, found = run_doctor_as(iam_server, tmp_path, monkeypatch, capsys, _doctor_policy(None, action))
    by = {c["check"]: c for c in found}
    assert rc == 0, found
    mine = by[SERVES[sid]]
    assert mine["status"] == "warn" and action in mine["line"] and mine["code"] in DENIED_CODES, mine
    assert "\n" not in mine["line"]
    for c in found:
        assert c["status"] == "ok" or (c["status"] == "warn" and action in c["line"]), c


def test_doctor_document_is_describe_calls_at_star_one_statement_per_check() -> None:
    """EC2's describe calls support no resource-level permission (AWS: ``Resource: *``), and none of
    them needs a condition; each Sid names a check doctor makes; no action is granted twice, nor one
    control-host.json already grants."""
    sts = statements(DOCTOR)
    assert [st["Sid"] for st in sts] == list(SERVES) + list(MOTO_UNCHECKED)
    assert set(SERVES.values()) | {c for c, _ in MOTO_UNCHECKED.values()} <= set(CHECKS)
    for st in sts:
        assert st["Effect"] == "Allow" and st["Resource"] == "*" and "Condition" not in st, st
        assert all(a.startswith("ec2:Describe") for a in as_list(st["Action"])) or \
            as_list(st["Action"]) == ["iam:SimulatePrincipalPolicy"], st
    actions = [a for st in sts for a in as_list(st["Action"])]
    assert len(actions) == len(set(actions))
    assert render(load(DOCTOR), {}) == load(DOCTOR)      # no placeholder to fill
