"""Per-type launch settings before any launch (issue #38, deliverables 2 and 5): what ``costscale
validate`` refuses from the config alone (one line each, naming the field and its YAML line), and
the broken setups ``costscale doctor`` catches against moto with one line (the good account and the
helpers of tests/daemon/test_doctor.py): an image of the wrong architecture for a type, an image
parameter that does not resolve, subnets of two VPCs, two on-demand subnets in one zone; and how
the launch fails later without the check, where moto shows it."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml

from daemon.cli import main
from scaler.cloud.provider import CloudConfigError
from tests.daemon.test_doctor import REGION, _cloud, account, doctor, good_config, line_of  # noqa: F401  (fixture)

GRAVITON = "c7g.2xlarge"
#: an x86_64 image of moto's own list other than the account's ``ami_x86`` (moto/ec2/resources/amis.json)
OTHER_X86 = "ami-760aaa0f"
MISSING = "/aws/service/deeplearning/ami/x86_64/no-such-image/latest/ami-id"


def _validate(cfg: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str], str]:
    path = tmp_path / "v.yaml"
    text = yaml.safe_dump(cfg, sort_keys=False)
    path.write_text(text)
    rc = main(["validate", str(path)])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return rc, [ln for ln in err.splitlines() if ln.startswith("costscale: ") and " warning: " not in ln], text


def _line_no(text: str, needle: str) -> int:
    return next(i for i, ln in enumerate(text.splitlines(), 1) if needle in ln)


def _put(ids: dict[str, str], name: str, value: str) -> str:
    boto3.client("ssm", region_name=REGION, endpoint_url=ids["endpoint"]).put_parameter(
        Name=name, Value=value, Type="String")
    return name


def test_validate_refuses_a_family_without_image_and_each_architecture_mismatch(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = {"cluster": "v", "budget_per_hour": 5, "models": [{"name": "m", "qos_ms": 100}],
           "aws": {"endpoint_url": "http://127.0.0.1:5000"},
           "instance_types": [{"type": t} for t in ("c5.2xlarge", "r5n.large", "g4dn.xlarge", "inf1.xlarge")],
           "launch": {"subnets": ["subnet-a", "subnet-b"], "by_type": {
               "r5n": {"ami_id": "ami-0arm", "architecture": "arm64"},
               "g4dn": {"ssm_parameter": "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-arm64"},
               "inf1": {"ssm_parameter": "/aws/service/deeplearning/ami/x86_64/base/latest/ami-id"}}}}
    rc, lines, text = _validate(cfg, tmp_path, capsys)
    v = tmp_path / "v.yaml"
    assert rc == 2 and lines == [
        f"costscale: {v}: line {_line_no(text, 'launch:')}: launch: type family c5 (c5.2xlarge) has no image: give "
        "launch.by_type.c5 an ami_id, ssm_parameter or launch_template, or a default launch.ami_id",
        f"costscale: {v}: line {_line_no(text, 'architecture: arm64')}: launch.by_type.r5n.architecture: the image "
        "is declared arm64 but r5n.large run(s) x86_64 only: RunInstances refuses it (give launch.by_type.r5n an "
        "x86_64 image)",
        f"costscale: {v}: line {_line_no(text, 'kernel-default-arm64')}: launch.by_type.g4dn.ssm_parameter: the "
        "parameter's name says arm64 but g4dn.xlarge run(s) x86_64 only: give the x86_64 parameter"]
    # the x86_64 image declared, an image for every family: valid
    cfg["launch"]["by_type"]["r5n"]["architecture"] = "x86_64"
    cfg["launch"]["by_type"]["g4dn"]["ssm_parameter"] = MISSING
    cfg["launch"]["ami_id"] = "ami-0default"
    rc, lines, _ = _validate(cfg, tmp_path, capsys)
    assert rc == 0 and lines == [], lines


def test_an_x86_image_declared_for_a_graviton_type_is_refused_by_the_types_architecture() -> None:
    """The shipped catalog holds no Graviton type yet (each type needs a profile or an estimate), so
    a catalog with one: the section's x86_64 image for a c7g, and an arm64 parameter for it."""
    from dataclasses import replace

    from config.catalog import load_catalog
    from config.schema import LaunchSpec
    from config.sections.launch import launch_problems

    catalog = {**load_catalog(), GRAVITON: replace(load_catalog()["c5.2xlarge"], name=GRAVITON, architecture="arm64")}
    spec = LaunchSpec(ami_id="ami-0x86", architecture="x86_64")
    assert launch_problems(spec, [GRAVITON, "c5.2xlarge"], catalog) == [
        (("launch", "architecture"), f"the image is declared x86_64 but {GRAVITON} run(s) arm64 only: RunInstances "
                                     "refuses it (give launch.by_type.c7g an arm64 image)")]
    arm = LaunchSpec(ssm_parameter="/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-arm64")
    assert launch_problems(arm, [GRAVITON], catalog) == []
    assert launch_problems(arm, ["c5.2xlarge"], catalog)[0][0] == ("launch", "ssm_parameter")


@pytest.mark.parametrize("launch,phrase", [
    ({"subnet_id": "subnet-a", "subnets": ["subnet-b"]}, "launch: give subnets or subnet_id"),
    ({"subnets": ["subnet-a", "subnet-a"]}, "launch.subnets: subnet(s) named twice: subnet-a"),
    ({"by_type": {"g4dm": {"ami_id": "ami-1"}}}, "line 13: launch.by_type.g4dm: neither an instance type nor a type family"),
    ({"by_type": {"g4dn": {"ami_id": "ami-1", "ssm_parameter": "/p"}}}, "launch.by_type.g4dn: give ami_id or "
                                                                         "ssm_parameter, not both"),
])
def test_validate_refuses_a_malformed_launch_section(launch: dict[str, Any], phrase: str, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    cfg = {"cluster": "v", "budget_per_hour": 5, "models": [{"name": "m", "qos_ms": 100}],
           "aws": {"endpoint_url": "http://127.0.0.1:5000"},
           "instance_types": [{"type": "c5.2xlarge"}], "launch": {"ami_id": "ami-1", **launch}}
    if "ssm_parameter" in str(launch):
        cfg["launch"].pop("ami_id")
    rc, lines, _ = _validate(cfg, tmp_path, capsys)
    assert rc == 2 and len(lines) == 1 and phrase in lines[0], lines


def _two_subnets(ids: dict[str, str], other_vpc: bool = False, same_zone: bool = False) -> str:
    """A second subnet: in VPC a and us-east-1b (good), VPC b (``other_vpc``), or us-east-1a (``same_zone``)."""
    ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=ids["endpoint"])
    if other_vpc:
        return ids["subnet_b"]
    vpc = ec2.describe_subnets(SubnetIds=[ids["subnet_a"]])["Subnets"][0]["VpcId"]
    zone = f"{REGION}a" if same_zone else f"{REGION}b"
    return ec2.create_subnet(VpcId=vpc, CidrBlock="10.10.7.0/24", AvailabilityZone=zone)["Subnet"]["SubnetId"]


def _per_type(ids: dict[str, str], tmp_path: Path, r5n_image: str, subnets: list[str]) -> dict[str, Any]:
    cfg = good_config(ids, tmp_path)
    cfg["instance_types"] = [{"type": "c5.2xlarge"}, {"type": "r5n.large"}]
    cfg["launch"].pop("subnet_id")
    cfg["launch"].update(subnets=subnets, by_type={"r5n": {"ami_id": r5n_image}})
    return cfg


def test_a_good_per_type_setup_with_two_zones_dry_runs_each_type_in_each_subnet(
        account: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    second = _two_subnets(account)
    a = account["subnet_a"]
    cfg = _per_type(account, tmp_path, OTHER_X86, [a, second])
    cfg["launch"].pop("ami_id")
    cfg["launch"]["by_type"]["c5"] = {"ssm_parameter": _put(account, "/costscale/images/c5", account["ami_x86"])}
    rc, lines, _ = doctor(cfg, tmp_path, capsys)
    assert rc == 0, lines
    assert line_of(lines, "permissions").startswith(
        f"ok permissions DryRun of RunInstances allowed for 4 launch(es) (c5.2xlarge in {a}, c5.2xlarge in {second}, "
        f"r5n.large in {a}, r5n.large in {second})")
    assert line_of(lines, "image") == (f"ok image image {account['ami_x86']} (/costscale/images/c5) exists (x86_64), "
                                       f"fits c5.2xlarge; image {OTHER_X86} exists (x86_64), fits r5n.large")
    assert line_of(lines, "network").startswith(f"ok network 2 subnet(s) ({REGION}a, {REGION}b)")


def _setups(ids: dict[str, str], tmp_path: Path) -> dict[str, tuple[dict[str, Any], str, str, str, str]]:
    """name -> (config, check, status, phrase, code)."""
    a = ids["subnet_a"]
    arm_for_r5n = _per_type(ids, tmp_path, ids["ami_arm"], [a])
    arm_parameter = good_config(ids, tmp_path)
    arm_parameter["launch"]["by_type"] = {"c5": {"ssm_parameter": _put(ids, "/costscale/images/c5", ids["ami_arm"])}}
    missing = good_config(ids, tmp_path)
    missing["launch"]["by_type"] = {"c5": {"ssm_parameter": MISSING}}
    other_vpc = good_config(ids, tmp_path)
    other_vpc["launch"].pop("subnet_id")
    other_vpc["launch"]["subnets"] = [a, _two_subnets(ids, other_vpc=True)]
    one_zone = good_config(ids, tmp_path)
    one_zone["launch"].pop("subnet_id")
    one_zone["launch"]["subnets"] = [a, _two_subnets(ids, same_zone=True)]
    return {
        "arm64-image-for-an-x86-family": (arm_for_r5n, "image", "fail", "is arm64 but r5n.large run(s) x86_64 "
                                          "only: RunInstances refuses it on AWS; give launch.by_type.r5n",
                                          "InvalidParameterValue"),
        "arm64-image-parameter-for-x86-family": (arm_parameter, "image", "fail", "(/costscale/images/c5) is arm64 "
                                                 "but c5.2xlarge run(s) x86_64 only", "InvalidParameterValue"),
        "image-parameter-not-found": (missing, "image", "fail", f"image parameter {MISSING} does not exist in the "
                                      "region; fix launch.by_type.c5.ssm_parameter", "ParameterNotFound"),
        "on-demand-subnet-of-another-vpc": (other_vpc, "network", "fail", "lie in 2 VPCs", "InvalidParameter"),
        "two-on-demand-subnets-in-one-zone": (one_zone, "network", "warn", f"on-demand subnets share a zone "
                                              f"({REGION}a: {a}", ""),
    }


NAMES = ["arm64-image-for-an-x86-family", "arm64-image-parameter-for-x86-family", "image-parameter-not-found",
         "on-demand-subnet-of-another-vpc", "two-on-demand-subnets-in-one-zone"]


@pytest.mark.parametrize("name", NAMES)
def test_a_broken_launch_setup_is_caught_by_its_check_in_one_line(
        name: str, account: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg, check, status, phrase, code = _setups(account, tmp_path)[name]
    rc, lines, result = doctor(cfg, tmp_path, capsys)
    line = line_of(lines, check)
    assert rc == (1 if status == "fail" else 0) and line.startswith(f"{status} {check} "), lines
    assert phrase in line and (line.endswith(f"({code})") if code else not line.endswith(")")), line
    assert [c["check"] for c in result["checks"] if c["status"] == "fail"] == ([check] if status == "fail" else [])
    if name == "image-parameter-not-found":     # the DryRun is not tried without an image, and says so
        assert line_of(lines, "permissions").startswith("warn permissions DryRun of RunInstances not tried for "
                                                        "c5.2xlarge: the image parameter does not resolve")


def test_without_the_check_an_unresolved_image_fails_the_first_launch_and_runs_preflight_stops(
        account: dict[str, str], tmp_path: Path) -> None:
    from config.schema import parse_config_text
    from daemon.doctor.checks import PreflightFailed, preflight

    cfg = _setups(account, tmp_path)["image-parameter-not-found"][0]
    with pytest.raises(CloudConfigError, match=f"image parameter {MISSING}: ParameterNotFound"):
        _cloud(cfg, tmp_path).launch("c5.2xlarge", 1, "tok-1")
    with pytest.raises(PreflightFailed) as err:
        preflight(parse_config_text(yaml.safe_dump(cfg)))
    assert " ".join(str(err.value).split()).startswith(f"fail image image parameter {MISSING} does not exist")


def test_without_the_check_the_token_and_the_bucket_are_refused_later(account: dict[str, str]) -> None:
    from dispatcher.object_store import ObjectError, S3Objects
    from scaler.cloud.token_parameter import TokenParameter, make_ssm_client

    with pytest.raises(CloudConfigError, match="reserved parameter name"):
        TokenParameter(make_ssm_client(REGION, account["endpoint"]), "/aws/costscale/doc/token").publish("t" * 20)
    with pytest.raises(ObjectError, match="NoSuchBucket"):
        S3Objects(REGION, account["endpoint"]).get("s3://costscale-no-such-bucket/model.onnx")


def test_an_x86_image_for_a_graviton_type_fails_the_image_check(account: dict[str, str], tmp_path: Path) -> None:
    """The catalog holds no arm64 type yet, so the config is built past its type check
    (``model_construct``): the default x86_64 image for a c7g (moto's DescribeInstanceTypes: arm64)."""
    from config.schema import InstanceTypeSpec, parse_config_text
    from daemon.doctor.images import check_image
    from daemon.doctor.report import clients_for

    cfg = parse_config_text(yaml.safe_dump(good_config(account, tmp_path)))
    cfg.instance_types.append(InstanceTypeSpec.model_construct(type=GRAVITON, market="on_demand"))
    found = check_image(cfg, clients_for(cfg))
    assert (found.status, found.code) == ("fail", "InvalidParameterValue")
    assert f"is x86_64 but {GRAVITON} run(s) arm64 only" in found.line() and "launch.by_type.c7g" in found.line()


def test_the_type_table_stands_in_for_describe_instance_types() -> None:
    from daemon.doctor.launch import arch_of_type

    assert [arch_of_type(t) for t in (GRAVITON, "t4g.xlarge", "m6gd.large", "g5g.xlarge", "c5.2xlarge",
                                      "g4dn.xlarge", "inf2.xlarge")] == [["arm64"]] * 4 + [["x86_64"]] * 3
