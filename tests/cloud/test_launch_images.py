"""Per-type launch images (issue #38, deliverable 2): the image of a type is its entry's, else its
family's, else the section's; an SSM parameter resolves to its AMI id through moto's SSM (moto
holds AWS's public ``/aws/service/ami-amazon-linux-latest`` parameters), cached per parameter with a
refresh; the type's extra user data follows the section's and the family's."""
from __future__ import annotations

import base64
from typing import Any

import boto3
import pytest

from config.schema import LaunchSpec
from config.sections.launch import arch_in_name, family_of, image_for
from scaler.cloud.ec2 import Ec2Cloud, make_ec2_client
from scaler.cloud.image_parameter import IMAGE_PARAMETER_TTL_S, ImageUnresolved

#: moto 5.2's values of AWS's public parameters in us-east-1 (moto/ssm/resources/ami-amazon-linux-latest)
AL2023_ARM = "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-arm64"
AL2023 = "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64"
AL2023_AMI = "ami-0d27e0fb3bac4d724"
MISSING = "/aws/service/deeplearning/ami/x86_64/no-such-image/latest/ami-id"


class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _spec(**kw: Any) -> LaunchSpec:
    return LaunchSpec.model_validate({
        "ami_id": "ami-12c6146b", "user_data": "echo base",
        "by_type": {"c5": {"ssm_parameter": AL2023, "architecture": "x86_64", "user_data": "echo c5"},
                    "c5.2xlarge": {"user_data": "echo big"},
                    "g4dn": {"ami_id": "ami-999844e0", "user_data": "echo gpu"},
                    "inf1.xlarge": {"launch_template": {"name": "neuron-lt"}}},
        **kw})


def _cloud(endpoint: str, clock: Clock, spec: LaunchSpec | None = None) -> Ec2Cloud:
    ssm = boto3.client("ssm", region_name="us-east-1", endpoint_url=endpoint)
    return Ec2Cloud("alpha", "us-east-1", spec or _spec(), client=make_ec2_client("us-east-1", endpoint),
                    ssm_client=ssm, clock=clock, dispatcher="10.0.0.1:50051")


def _user_data(kw: dict[str, Any]) -> str:
    ud = kw["UserData"]
    return ud if isinstance(ud, str) else base64.b64decode(ud).decode()


def test_the_most_specific_image_wins_and_user_data_joins_every_level() -> None:
    spec = _spec()
    big = image_for(spec, "c5.2xlarge")
    assert big is not None and (big.ssm_parameter, big.ami_id, big.architecture) == (AL2023, None, "x86_64")
    assert big.source == ("launch", "by_type", "c5") and big.user_data == "echo base\necho c5\necho big"
    gpu = image_for(spec, "g4dn.2xlarge")
    assert gpu is not None and (gpu.ami_id, gpu.source, gpu.user_data) == (
        "ami-999844e0", ("launch", "by_type", "g4dn"), "echo base\necho gpu")
    inf = image_for(spec, "inf1.xlarge")
    assert inf is not None and (inf.ami_id, inf.launch_template.name, inf.source) == (
        None, "neuron-lt", ("launch", "by_type", "inf1.xlarge"))      # the template's image, not the default AMI
    plain = image_for(spec, "r5n.large")
    assert plain is not None and (plain.ami_id, plain.source, plain.user_data) == (
        "ami-12c6146b", ("launch",), "echo base")
    assert image_for(LaunchSpec(by_type={"g4dn": {"ami_id": "ami-1"}}), "c5.2xlarge") is None
    with pytest.raises(ValueError, match="give ami_id, ssm_parameter or launch_template"):
        LaunchSpec(subnets=["subnet-a"])
    assert family_of("inf1.xlarge") == "inf1" and family_of("c7g.2xlarge") == "c7g"
    assert image_for(spec, "c5n.2xlarge").source == ("launch",)      # c5n is a family of its own, not c5's


def test_architecture_in_a_parameter_name() -> None:
    assert arch_in_name(AL2023_ARM) == "arm64"
    assert arch_in_name("/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-amazon-linux-2023/"
                        "latest/ami-id") == "x86_64"
    assert arch_in_name("/aws/service/canonical/ubuntu/server/22.04/stable/current/amd64/hvm/ebs-gp2/ami-id") == \
        "x86_64"
    assert arch_in_name("/costscale/images/gpu") is None


def test_an_ssm_image_is_resolved_once_per_refresh_and_sent_with_the_types_user_data(moto_endpoint: str) -> None:
    clock = Clock()
    cloud = _cloud(moto_endpoint, clock)
    kw = cloud.run_params("c5.2xlarge", 2, "tok-1")
    assert kw["ImageId"] == AL2023_AMI and "LaunchTemplate" not in kw
    ud = _user_data(kw)
    assert ud.index("echo base") < ud.index("echo c5") < ud.index("echo big") < ud.index("costscale worker")
    cloud.run_params("c5.2xlarge", 1, "tok-2")
    assert cloud.images.reads == 1                     # cached
    clock.t += IMAGE_PARAMETER_TTL_S
    assert cloud.run_params("c5.2xlarge", 1, "tok-3")["ImageId"] == AL2023_AMI
    assert cloud.images.reads == 2                     # read again after the refresh interval
    g = cloud.run_params("g4dn.xlarge", 1, "tok-4")
    assert g["ImageId"] == "ami-999844e0" and "echo c5" not in _user_data(g)
    t = cloud.run_params("inf1.xlarge", 1, "tok-5")
    assert "ImageId" not in t and t["LaunchTemplate"] == {"Version": "$Default", "LaunchTemplateName": "neuron-lt"}
    assert cloud.images.reads == 2


def test_an_ssm_image_launches_on_moto(moto_endpoint: str, ec2_client: Any) -> None:
    cloud = _cloud(moto_endpoint, Clock())
    got = cloud.launch("c5.2xlarge", 1, "tok-al2023")
    desc = ec2_client.describe_instances(InstanceIds=[got[0].instance_id])["Reservations"][0]["Instances"][0]
    assert desc["ImageId"] == AL2023_AMI and desc["InstanceType"] == "c5.2xlarge"


def test_a_parameter_that_does_not_resolve_is_a_config_error_with_ssms_code(moto_endpoint: str) -> None:
    spec = LaunchSpec.model_validate({"by_type": {"g4dn": {"ssm_parameter": MISSING}}})
    cloud = _cloud(moto_endpoint, Clock(), spec)
    with pytest.raises(ImageUnresolved) as ei:
        cloud.launch("g4dn.xlarge", 1, "tok-x")
    assert ei.value.code == "ParameterNotFound" and ei.value.parameter == MISSING
    code, msg = cloud.dry_run("g4dn.xlarge")
    assert code == "ParameterNotFound" and MISSING in msg and "\n" not in msg


def test_a_transient_failure_keeps_the_image_read_before(moto_endpoint: str) -> None:
    from scaler.cloud.provider import CloudError

    clock = Clock()
    cloud = _cloud(moto_endpoint, clock)
    assert cloud.image_id(cloud.image_of("c5.2xlarge")) == AL2023_AMI
    clock.t += IMAGE_PARAMETER_TTL_S

    class Down:
        def get_parameter(self, **_: Any) -> Any:
            from botocore.exceptions import EndpointConnectionError
            raise EndpointConnectionError(endpoint_url="http://127.0.0.1:9")

    cloud._ssm = Down()
    assert cloud.image_id(cloud.image_of("c5.2xlarge")) == AL2023_AMI and cloud.images.reads == 2
    fresh = _cloud(moto_endpoint, clock)
    fresh._ssm = Down()
    with pytest.raises(CloudError, match="get_parameter"):
        fresh.image_id(fresh.image_of("c5.2xlarge"))


def test_the_example_config_gives_the_gpu_family_its_parameter_and_two_subnets() -> None:
    from pathlib import Path

    from config.schema import load_config

    cfg = load_config(Path(__file__).resolve().parents[2] / "config" / "costscale.example.yaml")
    assert len(cfg.launch.subnet_ids) == 2
    gpu, cpu = image_for(cfg.launch, "g4dn.xlarge"), image_for(cfg.launch, "c5n.2xlarge")
    assert gpu is not None and gpu.ssm_parameter is not None and arch_in_name(gpu.ssm_parameter) == "x86_64"
    assert cpu is not None and cpu.ami_id == cfg.launch.ami_id and cpu.source == ("launch",)
