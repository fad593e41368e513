"""``costscale doctor``: broken setups against moto, each caught by the right check with one line
(``ok|warn|fail  CHECK  found; change (CODE)``), no traceback, ``--json`` the same; and, where it
is cheap to show, how ``costscale run`` fails later without the check (README "Pre-flight:
costscale doctor" lists every setup and what only a real account shows).

Each setup is the good account of :func:`account` (one VPC with a subnet and a group, a second VPC,
the lease table, a bucket) with one thing broken. moto answers a RunInstances DryRun after checking
only the IAM action and the instance profile, so the image, subnet and groups are the describe
checks' (``daemon.doctor.launch``)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

import boto3
import pytest
import yaml

from daemon.cli import main
from scaler.cloud.provider import CloudConfigError, CloudError
from tests.iam_helpers import admin, as_user, create_user, enforce, moto_api
from tests.iam_helpers import iam_server  # noqa: F401  (the fixture)

REGION = "us-east-1"


@pytest.fixture()
def account(moto_endpoint: str) -> dict[str, str]:
    """A good account on the session's moto: VPC a (subnet in us-east-1a, a group), VPC b (a
    subnet and a group), the lease table, a bucket; the ids by name, and the images by arch."""
    ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=moto_endpoint)
    ids: dict[str, str] = {"endpoint": moto_endpoint}
    for name, cidr in (("a", "10.10.0.0/16"), ("b", "10.20.0.0/16")):
        vpc = ec2.create_vpc(CidrBlock=cidr)["Vpc"]["VpcId"]
        ids[f"subnet_{name}"] = ec2.create_subnet(VpcId=vpc, CidrBlock=cidr.replace("0.0/16", "1.0/24"),
                                                  AvailabilityZone=f"{REGION}a")["Subnet"]["SubnetId"]
        ids[f"sg_{name}"] = ec2.create_security_group(GroupName=f"workers-{name}", Description="w",
                                                      VpcId=vpc)["GroupId"]
    images = ec2.describe_images()["Images"]
    ids["ami_x86"] = next(i["ImageId"] for i in images if i.get("Architecture") == "x86_64")
    ids["ami_arm"] = next(i["ImageId"] for i in images if i.get("Architecture") == "arm64")
    boto3.client("dynamodb", region_name=REGION, endpoint_url=moto_endpoint).create_table(
        TableName="costscale-leases", BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "cluster", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "cluster", "AttributeType": "S"}])
    boto3.client("s3", region_name=REGION, endpoint_url=moto_endpoint).create_bucket(Bucket="costscale-models")
    return ids


def good_config(ids: dict[str, str], tmp_path: Path) -> dict[str, Any]:
    return {"cluster": "doc", "region": REGION, "budget_per_hour": 2.5,
            "models": [{"name": "rm2", "qos_ms": 350}], "instance_types": [{"type": "c5.2xlarge"}],
            "launch": {"ami_id": ids["ami_x86"], "subnet_id": ids["subnet_a"], "security_group_ids": [ids["sg_a"]]},
            "dispatcher": {"listen": "127.0.0.1:0"}, "state_path": str(tmp_path / "state.db"),
            "aws": {"endpoint_url": ids["endpoint"], "max_attempts": 2, "buckets": ["costscale-models"]}}


def doctor(cfg: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str], dict]:
    """``costscale doctor`` on ``cfg``, then again with ``--json``: (exit code, lines, parsed JSON)."""
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    code = main(["doctor", str(path)])
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err, out
    lines = out.out.splitlines()
    assert main(["doctor", str(path), "--json"]) == code
    result = json.loads(capsys.readouterr().out)
    assert [c["line"] for c in result["checks"]] == lines and result["ok"] is (code == 0)
    return code, lines, result


def line_of(lines: list[str], check: str) -> str:
    """The one line of ``check``, its padding collapsed (``fail dispatcher workers ...``)."""
    found = [ln for ln in lines if ln.split()[1] == check]
    assert len(found) == 1, lines
    return " ".join(found[0].split())


def test_a_good_setup_passes_with_warnings_only(account: dict[str, str], tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    code, lines, result = doctor(good_config(account, tmp_path), tmp_path, capsys)
    assert code == 0, lines
    assert [ln.split()[1] for ln in lines] == ["credentials", "region", "permissions", "simulate", "image", "network",
                                              "offerings", "quotas", "lease", "buckets", "dispatcher", "prices"]
    assert line_of(lines, "permissions").startswith("ok permissions DryRun of RunInstances allowed for 1")
    assert "moto answers a DryRun" in line_of(lines, "permissions")
    assert line_of(lines, "prices").startswith("warn") and "shipped table" in line_of(lines, "prices")


# --- the broken setups: (name, change to the good config, check, status, phrase) --------------------

def _set(path: str, value: Callable[[dict[str, str]], Any]) -> Callable[[dict[str, Any], dict[str, str]], None]:
    def change(cfg: dict[str, Any], ids: dict[str, str]) -> None:
        *parents, last = path.split(".")
        node = cfg
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value(ids)
    return change


def _spot_in_wrong_zone(cfg: dict[str, Any], ids: dict[str, str]) -> None:
    cfg["instance_types"] = [{"type": "c5.2xlarge", "market": "spot"}]
    cfg["spot"] = {"zones": {f"{REGION}b": ids["subnet_a"]}}          # subnet a lies in us-east-1a


def _template_only(cfg: dict[str, Any], ids: dict[str, str]) -> None:
    cfg["launch"].pop("ami_id")
    cfg["launch"]["launch_template"] = {"name": "no-such-template"}


def _subnet_in_zone_e(cfg: dict[str, Any], ids: dict[str, str]) -> None:
    """A subnet of VPC a in us-east-1e, where AWS (and moto's copy of its lists) offers no c5.2xlarge."""
    ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=ids["endpoint"])
    vpc = ec2.describe_subnets(SubnetIds=[ids["subnet_a"]])["Subnets"][0]["VpcId"]
    cfg["launch"]["subnet_id"] = ec2.create_subnet(VpcId=vpc, CidrBlock="10.10.5.0/24",
                                                   AvailabilityZone=f"{REGION}e")["Subnet"]["SubnetId"]


SETUPS = [
    ("missing-ami", _set("launch.ami_id", lambda ids: "ami-0000deadbeef0000"), "image", "fail",
     "does not exist in us-east-1", "InvalidAMIID.NotFound"),
    ("arm64-image-for-x86-type", _set("launch.ami_id", lambda ids: ids["ami_arm"]), "image", "fail",
     "is arm64 but c5.2xlarge run(s) x86_64 only", "InvalidParameterValue"),
    ("missing-launch-template", _template_only, "image", "fail", "launch template no-such-template does not exist",
     "InvalidLaunchTemplateName.NotFoundException"),
    ("missing-subnet", _set("launch.subnet_id", lambda ids: "subnet-0badc0ffee0000000"), "network", "fail",
     "does not exist in the region", "InvalidSubnetID.NotFound"),
    ("group-of-another-vpc", _set("launch.security_group_ids", lambda ids: [ids["sg_b"]]), "network", "fail",
     "lie in 2 VPCs", "InvalidParameter"),
    ("missing-security-group", _set("launch.security_group_ids", lambda ids: ["sg-0badc0ffee0000000"]), "network",
     "fail", "does not exist in the region", "InvalidGroup.NotFound"),
    ("spot-subnet-in-another-zone", _spot_in_wrong_zone, "network", "fail", "lies in us-east-1a",
     "InvalidParameterCombination"),
    ("type-not-offered-in-the-zone", _subnet_in_zone_e, "offerings", "fail",
     "not offered: c5.2xlarge in us-east-1e: every launch there is refused", "Unsupported"),
    ("missing-instance-profile", _set("launch.iam_instance_profile", lambda ids: "no-such-profile"), "permissions",
     "fail", "the instance profile does not exist", "NoSuchEntity"),
    ("missing-bucket", _set("aws.buckets", lambda ids: ["costscale-no-such-bucket"]), "buckets", "fail",
     "bucket costscale-no-such-bucket does not exist", "NoSuchBucket"),
    ("reserved-token-parameter", lambda cfg, ids: cfg["dispatcher"].update(
        token_parameter="/aws/costscale/{cluster}/token", cluster_token="doc-token-0123456789"), "token", "fail",
     "under a name AWS reserves", "AccessDeniedException"),
    ("region-not-enabled", _set("region", lambda ids: "mx-central-1"), "region", "fail",
     "is not enabled for the account", "OptInRequired"),
]


@pytest.mark.parametrize("name,change,check,status,phrase,code", SETUPS, ids=[s[0] for s in SETUPS])
def test_a_broken_setup_is_caught_by_its_check_in_one_line(
        name: str, change: Callable[[dict[str, Any], dict[str, str]], None], check: str, status: str, phrase: str,
        code: str, account: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = good_config(account, tmp_path)
    change(cfg, account)
    rc, lines, result = doctor(cfg, tmp_path, capsys)
    assert rc == 1
    line = line_of(lines, check)
    assert line.startswith(f"{status} {check} "), line
    assert phrase in line and line.endswith(f"({code})"), line
    assert [c["check"] for c in result["checks"] if c["status"] == "fail"] == [check], lines
    assert next(c for c in result["checks"] if c["check"] == check)["code"] == code


def test_a_lease_table_of_another_key_fails_and_its_reads_are_refused(moto_endpoint: str, tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """Setup 12: a table named as the lease's but keyed ``id``; without the check the daemon's first
    lease read is refused (one line at start, after the config passed every offline check)."""
    from scaler.replicas.lease_table import DynamoLeaseTable, make_dynamodb_client

    ids = {"endpoint": moto_endpoint, "ami_x86": boto3.client("ec2", region_name=REGION, endpoint_url=moto_endpoint)
           .describe_images()["Images"][0]["ImageId"]}
    boto3.client("dynamodb", region_name=REGION, endpoint_url=moto_endpoint).create_table(
        TableName="costscale-leases", BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}])
    cfg = good_config({**ids, "subnet_a": "", "sg_a": ""}, tmp_path)
    cfg["launch"] = {"ami_id": ids["ami_x86"]}
    cfg["aws"].pop("buckets")
    rc, lines, _ = doctor(cfg, tmp_path, capsys)
    line = line_of(lines, "lease")
    assert rc == 1 and line.startswith("fail lease ") and "string hash key 'cluster'" in line, lines
    with pytest.raises(CloudError):
        DynamoLeaseTable("costscale-leases", make_dynamodb_client(REGION, moto_endpoint)).get("doc")


def test_no_credentials_is_one_fail_line_and_nothing_else(account: dict[str, str], tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
    for k in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    rc, lines, _ = doctor(good_config(account, tmp_path), tmp_path, capsys)
    assert rc == 1 and len(lines) == 1
    assert lines[0].startswith("fail  credentials  no AWS credentials found; give the daemon AWS credentials")
    assert lines[0].endswith("(NoCredentials)")


def test_loopback_advertise_with_real_instances_fails_the_dispatcher_check(
        account: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Real-looking instances: no ``aws.endpoint_url`` in the config (boto3 reaches moto through
    ``AWS_ENDPOINT_URL``). ``advertise: 127.0.0.1`` passes ``validate`` (only a loopback listen
    without advertise is refused); each worker would dial itself and never register."""
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
    monkeypatch.setenv("AWS_ENDPOINT_URL", account["endpoint"])
    monkeypatch.setenv("AWS_ENDPOINT_URL_PRICING", "http://127.0.0.1:9")    # moto has no Price List API
    cfg = good_config(account, tmp_path)
    cfg["aws"].pop("endpoint_url")
    cfg["dispatcher"]["advertise"] = "127.0.0.1:50051"
    rc, lines, _ = doctor(cfg, tmp_path, capsys)
    line = line_of(lines, "dispatcher")
    assert rc == 1 and line.startswith("fail dispatcher workers would dial 127.0.0.1:50051"), lines
    assert "no worker would ever register" in line
    # the same account with the VPC's own address: routed (the VPC's local route)
    cfg["dispatcher"]["advertise"] = "10.10.1.10:50051"
    rc, lines, _ = doctor(cfg, tmp_path, capsys)
    assert line_of(lines, "dispatcher").startswith("ok dispatcher workers dial 10.10.1.10:50051: routed"), lines
    # an address of another network: no route of the subnet's table reaches it (warn only)
    cfg["dispatcher"]["advertise"] = "192.168.7.7:50051"
    rc, lines, _ = doctor(cfg, tmp_path, capsys)
    assert line_of(lines, "dispatcher").startswith("warn dispatcher no route of"), lines
    assert line_of(lines, "prices").startswith("warn prices the Price List API was not read"), lines


# --- how `costscale run` fails later without the check (where moto shows it) ------------------------

def _cloud(cfg: dict[str, Any], tmp_path: Path) -> Any:
    from config.schema import parse_config_text
    from scaler.cloud.ec2 import Ec2Cloud

    c = parse_config_text(yaml.safe_dump(cfg))
    return Ec2Cloud(c.cluster, c.region, c.launch, endpoint_url=c.aws.endpoint_url, max_attempts=1)


@pytest.mark.parametrize("name", ["missing-subnet", "missing-launch-template", "missing-instance-profile",
                                  "missing-security-group"])
def test_without_the_check_the_first_launch_fails(name: str, account: dict[str, str], tmp_path: Path) -> None:
    """What the actuator's first launch meets in moto for the setups moto refuses too (the others
    launch in moto and fail only on AWS: README)."""
    setup = next(s for s in SETUPS if s[0] == name)
    cfg = good_config(account, tmp_path)
    setup[1](cfg, account)
    with pytest.raises(CloudError) as err:
        _cloud(cfg, tmp_path).launch("c5.2xlarge", 1, "tok-1")
    assert setup[5] in str(err.value)


# --- a user without ec2:RunInstances (moto's IAM enforcement, tests/iam_helpers.py) ------------------

#: what the user may do: everything doctor reads, and no launch
NO_LAUNCH = [{"Effect": "Allow", "Action": ["sts:GetCallerIdentity", "ec2:Describe*", "dynamodb:DescribeTable",
                                            "dynamodb:GetItem", "pricing:GetProducts"], "Resource": "*"}]


@pytest.fixture()
def no_launch_user(iam_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """A fresh account on the IAM-enforcing moto, a user holding :data:`NO_LAUNCH`, boto3 signing
    as it; yields the config of a setup that is good but for the permission."""
    enforce(iam_server, False)
    moto_api(iam_server, "reset")
    ami = boto3.client("ec2", **admin(iam_server)).describe_images()["Images"][0]["ImageId"]
    env = create_user(iam_server, "no-launch", {"no-launch": {"Version": "2012-10-17", "Statement": NO_LAUNCH}})
    as_user(monkeypatch, env)
    enforce(iam_server, True)
    try:
        yield {"cluster": "doc", "region": REGION, "budget_per_hour": 2.5, "models": [{"name": "rm2", "qos_ms": 350}],
               "instance_types": [{"type": "c5.2xlarge"}], "launch": {"ami_id": ami},
               "dispatcher": {"listen": "127.0.0.1:0"}, "state_path": str(tmp_path / "state.db"),
               "model_scaling": {"generate_variants": False},
               "aws": {"endpoint_url": iam_server, "max_attempts": 2}, "env": env}
    finally:
        enforce(iam_server, False)


def test_a_user_without_run_instances_fails_the_permissions_check(no_launch_user: dict[str, Any], tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    cfg = {k: v for k, v in no_launch_user.items() if k != "env"}
    rc, lines, result = doctor(cfg, tmp_path, capsys)
    line = line_of(lines, "permissions")
    assert rc == 1 and line.startswith("fail permissions DryRun of RunInstances c5.2xlarge: the daemon's "
                                       "credentials may not launch"), lines
    # moto sends AccessDenied; AWS sends UnauthorizedOperation (an encoded message): both mean the same here
    assert "ec2:RunInstances" in line and line.endswith("(AccessDenied)"), line
    assert [c["check"] for c in result["checks"] if c["status"] == "fail"] == ["permissions"], lines
    # without the check: the actuator's first launch is refused, naming the same action
    with pytest.raises(CloudConfigError, match="ec2:RunInstances"):
        _cloud(cfg, tmp_path).launch("c5.2xlarge", 1, "tok-1")


@pytest.mark.slow
def test_costscale_run_stops_at_the_same_line_before_anything_is_launched(no_launch_user: dict[str, Any],
                                                                          tmp_path: Path) -> None:
    """``costscale run``'s fast pre-flight: exit 1, the permissions line doctor prints, no traceback,
    and no instance (the DryRun launched nothing)."""
    cfg = {k: v for k, v in no_launch_user.items() if k != "env"}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("AWS_")}, **no_launch_user["env"]}
    exe = Path(sys.executable).with_name("costscale")
    r = subprocess.run([str(exe), "run", str(path)], capture_output=True, text=True, timeout=120, env=env)
    lines = [ln for ln in r.stderr.splitlines() if "pre-flight" in ln or ln.startswith("costscale:")]
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert lines[-1].startswith("costscale: fail  permissions  DryRun of RunInstances c5.2xlarge"), r.stderr
    assert "ec2:RunInstances" in lines[-1] and lines[-1].endswith("(costscale doctor CONFIG checks the rest)")
    enforce(cfg["aws"]["endpoint_url"], False)
    ec2 = boto3.client("ec2", **admin(cfg["aws"]["endpoint_url"]))
    assert [i for r_ in ec2.describe_instances()["Reservations"] for i in r_["Instances"]] == []


def test_runs_fast_preflight_stops_on_a_verdict_and_lets_the_emulator_launch_any_image(
        account: dict[str, str], tmp_path: Path) -> None:
    """``costscale run``'s fast subset (``daemon.doctor.checks.preflight``): a DryRun refusal stops
    the start with doctor's line; an image moto does not list does not (moto launches any id), nor
    does an endpoint that does not answer (the daemon's start names the service)."""
    from config.schema import parse_config_text
    from daemon.doctor.checks import PreflightFailed, preflight

    def parsed(change: Callable[[dict[str, Any], dict[str, str]], None] | None) -> Any:
        cfg = good_config(account, tmp_path)
        if change is not None:
            change(cfg, account)
        return parse_config_text(yaml.safe_dump(cfg))

    assert [f.check for f in preflight(parsed(None))] == ["credentials", "permissions", "image"]
    profile = next(s for s in SETUPS if s[0] == "missing-instance-profile")[1]
    with pytest.raises(PreflightFailed) as err:
        preflight(parsed(profile))
    assert err.value.exit_code == 1 and str(err.value).startswith("fail  permissions  DryRun of RunInstances")
    missing_ami = next(s for s in SETUPS if s[0] == "missing-ami")[1]
    assert [f.status for f in preflight(parsed(missing_ami))] == ["ok", "ok", "fail"]
    dead = parsed(lambda cfg, ids: cfg["aws"].update(endpoint_url="http://127.0.0.1:9"))
    assert [(f.check, f.code) for f in preflight(dead)] == [("credentials", "")]


def test_the_shipped_control_host_policy_passes_doctor_and_runs_preflight(iam_server: str, tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str],
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A user holding exactly config/iam/control-host.json: the DryRun is allowed; doctor's own reads
    the daemon never makes (DescribeRegions, DescribeImages, ...) are refused and are warnings, never a
    fail, so ``costscale run``'s pre-flight lets a least-privilege control host start."""
    from config.iam import load, render
    from config.schema import parse_config_text
    from daemon.doctor.checks import preflight
    from tests.iam_helpers import ACCOUNT, moto_view

    enforce(iam_server, False)
    moto_api(iam_server, "reset")
    ami = boto3.client("ec2", **admin(iam_server)).describe_images()["Images"][0]["ImageId"]
    values = {"region": REGION, "account": ACCOUNT, "cluster": "doc", "table": "costscale-leases", "bucket": "b",
              "queue": "q", "worker_role": "w"}
    env = create_user(iam_server, "host", {"control-host": moto_view(render(load("control-host"), values))})
    as_user(monkeypatch, env)
    cfg = {"cluster": "doc", "region": REGION, "budget_per_hour": 2.5, "models": [{"name": "rm2", "qos_ms": 350}],
           "instance_types": [{"type": "c5.2xlarge"}], "launch": {"ami_id": ami},
           "dispatcher": {"listen": "127.0.0.1:0"}, "state_path": str(tmp_path / "state.db"),
           "aws": {"endpoint_url": iam_server, "max_attempts": 2}}
    enforce(iam_server, True)
    try:
        rc, lines, _ = doctor(cfg, tmp_path, capsys)
        assert rc == 0, lines
        assert line_of(lines, "permissions").startswith("ok permissions DryRun of RunInstances allowed"), lines
        assert line_of(lines, "image").startswith(f"warn image image {ami} not checked"), lines
        assert "ec2:DescribeImages" in line_of(lines, "image")
        assert [f.status for f in preflight(parse_config_text(yaml.safe_dump(cfg)))] == ["ok", "ok", "warn"]
    finally:
        enforce(iam_server, False)


def test_a_config_error_is_exit_2_and_the_dry_run_carries_no_token(account: dict[str, str], tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """A usage or config error is one line, exit 2, as for every command; the DryRun's user data
    (sent to EC2) names the token's parameter or nothing, never the token."""
    import base64

    from config.schema import parse_config_text
    from daemon.doctor.launch import preflight_cloud

    assert main(["doctor", str(tmp_path / "missing.yaml")]) == 2
    assert capsys.readouterr().err.strip() == f"costscale: {tmp_path / 'missing.yaml'}: no such file"
    for parameter in ("/costscale/{cluster}/cluster-token", ""):
        cfg = good_config(account, tmp_path)
        cfg["dispatcher"].update(cluster_token="doc-secret-0123456789", token_parameter=parameter)
        params = preflight_cloud(parse_config_text(yaml.safe_dump(cfg)), None).run_params("c5.2xlarge", 1, "t")
        user_data = params["UserData"]
        user_data = base64.b64decode(user_data).decode() if not user_data.startswith("#!") else user_data
        assert "doc-secret" not in user_data
