"""Pre-flight of a launch (issue #38, deliverable 5): may the daemon launch what the config asks,
and would it boot? Spends nothing.

* ``permissions``: RunInstances with ``DryRun=True`` for every configured slot (each on-demand type
  in ``launch.subnet_id``, each spot type in each ``spot.zones`` subnet) with the very parameters
  the actuator sends (``Ec2Cloud.run_params``: image or launch template, security groups, instance
  profile, tags). ``DryRunOperation`` is a yes; any other code is that code's meaning
  (:data:`DRY_RUN_MEANING`). On AWS a DryRun checks the permission and the parameters (image,
  subnet, groups, profile); moto (5.x) checks the IAM action (with enforcement on) and the instance
  profile, then answers DryRunOperation without looking at the image, subnet or groups: those are
  the ``image`` and ``network`` checks' describe calls, which moto answers.
* ``image``: the image exists in the region (DescribeImages; through the launch template's
  default or named version when no ``ami_id`` is given) and its architecture is one each type
  supports (DescribeInstanceTypes' SupportedArchitectures; :func:`arch_of_type` where that is not
  answered). An x86_64 image on a Graviton type (or arm64 on an x86 type) is refused by
  RunInstances on AWS (InvalidParameterValue); moto launches it.
* ``offerings``: each type is offered in the zone it launches in (DescribeInstanceTypeOfferings;
  moto holds AWS's lists): on AWS a DryRun there answers Unsupported, moto's does not.
"""
from __future__ import annotations

import re
from typing import Any, Sequence

from config.schema import Config
from daemon.doctor.report import Clients, Finding, failure, unread
from scaler.cloud.ec2 import Ec2Cloud
from scaler.cloud.slots import slot_of, split_slot

#: what a DryRun's answer means and what to change (the code itself is printed beside it)
DRY_RUN_MEANING = {
    "UnauthorizedOperation": ("the daemon's credentials may not launch",
                              "grant ec2:RunInstances (config/iam/control-host.json)"),
    "AccessDenied": ("the daemon's credentials may not launch", "grant ec2:RunInstances (config/iam/control-host.json)"),
    "InvalidAMIID.NotFound": ("the image does not exist in the region", "set launch.ami_id to an image of this region"),
    "InvalidAMIID.Malformed": ("the image id is malformed", "set launch.ami_id to an ami-... id"),
    "InvalidSubnetID.NotFound": ("the subnet does not exist", "set launch.subnet_id (or spot.zones) to a subnet "
                                 "of this region"),
    "InvalidGroup.NotFound": ("a security group does not exist", "fix launch.security_group_ids"),
    "Unsupported": ("the type is not offered in that zone", "choose another subnet (zone) or type"),
    "NoSuchEntity": ("the instance profile does not exist", "fix launch.iam_instance_profile"),
    "InvalidParameterValue": ("EC2 refused a parameter", "fix the launch section"),
    "InvalidParameterCombination": ("EC2 refused the combination of parameters", "fix the launch section"),
    "InvalidLaunchTemplateName.NotFoundException": ("the launch template does not exist",
                                                    "fix launch.launch_template"),
    "InvalidLaunchTemplateId.NotFound": ("the launch template does not exist", "fix launch.launch_template"),
    "OptInRequired": ("the account is not subscribed to this region or image", "opt in, or choose another"),
    "AuthFailure": ("AWS did not accept the credentials", "check the daemon's credentials"),
    "VcpuLimitExceeded": ("the vCPU quota is below one instance", "ask for a higher quota (Service Quotas)"),
}
#: EC2 families whose processors are AWS Graviton (arm64): a letter g after the generation digit
GRAVITON = re.compile(r"^[a-z]+\d+g[a-z]*\.")


def arch_of_type(instance_type: str) -> list[str]:
    """The architectures of a type by its name, where DescribeInstanceTypes does not answer:
    Graviton families (``c7g``, ``t4g``, ``m6gd``, ``g5g``) arm64, the others x86_64."""
    return ["arm64"] if GRAVITON.match(instance_type) else ["x86_64"]


def slots(cfg: Config) -> list[str]:
    """Every slot the actuator may launch: each on-demand type, each spot type in each spot zone."""
    out: list[str] = []
    zones = list(cfg.spot.zones) if cfg.spot is not None else []
    for t in cfg.instance_types:
        if t.market in ("on_demand", "both"):
            out.append(t.type)
        if t.market in ("spot", "both"):
            out += [slot_of(t.type, z) for z in zones]
    return out


def preflight_cloud(cfg: Config, client: Any) -> Ec2Cloud:
    """The EC2 adapter as the daemon builds it, with no token in its user data (a DryRun sends it)."""
    param = cfg.dispatcher.token_parameter or None
    return Ec2Cloud(cfg.cluster, cfg.region, cfg.launch, client=client, dispatcher=cfg.dispatcher.advertise,
                    token_parameter=param, models=[(m.name, m.onnx) for m in cfg.models],
                    worker_port=cfg.dispatcher.worker_port, spot=cfg.spot)


def check_permissions(cfg: Config, clients: Clients, only_first: bool = False) -> Finding:
    """DryRun of RunInstances per slot (module docstring); ``only_first``: the first slot alone
    (``costscale run``'s fast subset)."""
    cloud = preflight_cloud(cfg, clients("ec2"))
    todo = slots(cfg)[:1] if only_first else slots(cfg)
    refused: list[tuple[str, str, str]] = []
    for slot in todo:
        try:
            code, msg = cloud.dry_run(slot)
        except Exception as exc:       # noqa: BLE001 - an unreachable endpoint, no credentials: one line
            code, msg = failure(exc, "ec2")
            return Finding("fail", "permissions", f"DryRun of RunInstances ({slot}) did not answer: {msg}",
                           "check credentials, region and the network", code)
        if code != "DryRunOperation":
            refused.append((slot, code, msg))
    if refused:
        slot, code, msg = refused[0]
        meaning, change = DRY_RUN_MEANING.get(code, (f"EC2 refused the launch: {msg}", "fix the launch section"))
        if code in ("UnauthorizedOperation", "AccessDenied"):
            meaning = f"{meaning}: {msg}"
        more = f" (and {len(refused) - 1} more of {len(todo)} launches)" if len(refused) > 1 else ""
        return Finding("fail", "permissions", f"DryRun of RunInstances {slot}: {meaning}{more}", change, code)
    note = ("; moto answers a DryRun after checking the IAM action and instance profile only: the image, subnet "
            "and groups are checked by describe calls") if cfg.aws.endpoint_url else ""
    return Finding("ok", "permissions", f"DryRun of RunInstances allowed for {len(todo)} launch(es) "
                                        f"({', '.join(todo)}){note}")


def _template_image(ec2: Any, lt: Any) -> tuple[str | None, Finding | None]:
    """The image of the launch template's version, or the finding that it cannot be read."""
    ref = {"LaunchTemplateId": lt.id} if lt.id else {"LaunchTemplateName": lt.name}
    try:
        versions = ec2.describe_launch_template_versions(Versions=[lt.version], **ref).get("LaunchTemplateVersions", [])
    except Exception as exc:       # noqa: BLE001
        code, msg = failure(exc, "ec2")
        name = lt.id or lt.name
        denied = unread("image", f"launch template {name}", code, msg)
        if denied is not None:
            return None, denied
        found = (f"launch template {name} does not exist in the region" if "NotFound" in code
                 else f"launch template {name} not read: {msg}")
        return None, Finding("fail", "image", found, "fix launch.launch_template", code)
    data = (versions[0].get("LaunchTemplateData") or {}) if versions else {}
    return data.get("ImageId"), None


def type_architectures(ec2: Any, types: Sequence[str],
                       refused: list[tuple[str, str]] | None = None) -> dict[str, list[str]]:
    """Each type's supported architectures (DescribeInstanceTypes; :func:`arch_of_type` for a type
    it does not answer). An IAM refusal of the read is appended to ``refused`` as (code, message):
    the check says so (a warning naming ec2:DescribeInstanceTypes) rather than pass on the table."""
    out: dict[str, list[str]] = {}
    try:
        for it in ec2.describe_instance_types(InstanceTypes=list(types)).get("InstanceTypes", []):
            archs = (it.get("ProcessorInfo") or {}).get("SupportedArchitectures") or []
            if archs:
                out[it["InstanceType"]] = list(archs)
    except Exception as exc:       # noqa: BLE001 - the table below stands in
        code, msg = failure(exc, "ec2")
        if refused is not None and unread("image", "", code, msg) is not None:
            refused.append((code, msg))
    return {t: out.get(t) or arch_of_type(t) for t in types}


def check_image(cfg: Config, clients: Clients) -> Finding:
    """The image exists in the region and fits every type's architecture (module docstring)."""
    ec2 = clients("ec2")
    ami = cfg.launch.ami_id
    if not ami and cfg.launch.launch_template is not None:
        ami, bad = _template_image(ec2, cfg.launch.launch_template)
        if bad is not None:
            return bad
        if not ami:
            return Finding("warn", "image", "the launch template names no image and launch.ami_id is unset",
                           "set an ImageId in the template or launch.ami_id")
    elif cfg.launch.launch_template is not None:
        _, bad = _template_image(ec2, cfg.launch.launch_template)
        if bad is not None and bad.status == "fail":    # (not read: ami_id is the image all the same)
            return bad
    try:
        images = ec2.describe_images(ImageIds=[ami]).get("Images", [])
    except Exception as exc:       # noqa: BLE001
        code, msg = failure(exc, "ec2")
        denied = unread("image", f"image {ami}", code, msg)
        if denied is not None:
            return denied
        if code.startswith("InvalidAMIID"):
            images = []
        else:
            return Finding("fail", "image", f"image {ami} not read: {msg}", "check ec2:DescribeImages", code)
    if not images:
        return Finding("fail", "image", f"image {ami} does not exist in {cfg.region} (or is not shared with the "
                       "account)", "set launch.ami_id to an image of this region", "InvalidAMIID.NotFound")
    arch = images[0].get("Architecture", "x86_64")
    types = sorted({split_slot(s)[0] for s in slots(cfg)})
    refused: list[tuple[str, str]] = []
    archs = type_architectures(ec2, types, refused)
    wrong = [t for t in types if arch not in archs[t]]
    if wrong:
        need = sorted({a for t in wrong for a in archs[t]})
        return Finding("fail", "image", f"image {ami} is {arch} but {', '.join(wrong)} run(s) {'/'.join(need)} "
                       "only: RunInstances refuses it on AWS", "give an image of that architecture, or drop the "
                       "type", "InvalidParameterValue")
    if refused:
        code, msg = refused[0]
        return unread("image", f"image {ami} exists ({arch}); the architectures of {', '.join(types)} (taken from "
                      "their names)", code, msg) or Finding("warn", "image", msg)
    return Finding("ok", "image", f"image {ami} exists ({arch}), fits {', '.join(types)}")


def slot_zones(cfg: Config, ec2: Any) -> dict[str, str]:
    """The zone each slot launches in, where the config fixes it: a spot slot's zone, an on-demand
    type's ``launch.subnet_id`` zone (DescribeSubnets); none named: EC2 picks, and it is left out."""
    out: dict[str, str] = {}
    subnet_zone = None
    if cfg.launch.subnet_id and any("@" not in s for s in slots(cfg)):
        subnets = ec2.describe_subnets(SubnetIds=[cfg.launch.subnet_id]).get("Subnets", [])
        subnet_zone = subnets[0].get("AvailabilityZone") if subnets else None
    for slot in slots(cfg):
        zone = split_slot(slot)[1] or subnet_zone
        if zone:
            out[slot] = zone
    return out


def check_offerings(cfg: Config, clients: Clients) -> Finding:
    """Each type is offered in the zone it launches in (DescribeInstanceTypeOfferings): a type not
    offered there is refused at every launch (Unsupported), which the fleet takes for a want of
    capacity and plans around, again and again."""
    ec2 = clients("ec2")
    try:
        zones = slot_zones(cfg, ec2)
        types = sorted({split_slot(s)[0] for s in zones})
        offered: set[tuple[str, str]] = set()
        if types:
            pages = ec2.get_paginator("describe_instance_type_offerings").paginate(
                LocationType="availability-zone", Filters=[{"Name": "instance-type", "Values": types}])
            offered = {(o["InstanceType"], o["Location"]) for page in pages for o in page.get("InstanceTypeOfferings", [])}
    except Exception as exc:       # noqa: BLE001
        code, msg = failure(exc, "ec2")
        return unread("offerings", "the types' zones", code, msg) or Finding(
            "warn", "offerings", f"the types' zones not checked: {msg}", "the network check names the subnet", code)
    if not zones:
        return Finding("ok", "offerings", "no zone named: EC2 picks a zone that offers each type")
    missing = [f"{split_slot(s)[0]} in {z}" for s, z in zones.items() if (split_slot(s)[0], z) not in offered]
    if missing:
        return Finding("fail", "offerings", f"not offered: {', '.join(missing)}: every launch there is refused",
                       "name a subnet (spot.zones: a zone) that offers the type, or drop the type", "Unsupported")
    return Finding("ok", "offerings", f"{len(zones)} launch(es) in zones that offer their type "
                                      f"({', '.join(sorted(set(zones.values())))})")


__all__ = ["DRY_RUN_MEANING", "arch_of_type", "check_image", "check_offerings", "check_permissions", "preflight_cloud",
           "slot_zones", "slots", "type_architectures"]
