"""Pre-flight of a launch (issue #38, deliverable 5): may the daemon launch what the config asks,
and would it boot? Spends nothing.

* ``permissions``: RunInstances with ``DryRun=True`` for every configured launch (each on-demand type
  in each of ``launch.subnets``, each spot type in each ``spot.zones`` subnet) with the very
  parameters the actuator sends (``Ec2Cloud.run_params``: the type's image or launch template, its
  SSM parameter resolved, security groups, instance profile, tags). ``DryRunOperation`` is a yes;
  any other code is that code's meaning (:data:`DRY_RUN_MEANING`); a type whose image parameter
  does not resolve is not tried (a warning: the ``image`` check fails it). On AWS a DryRun checks the permission and the parameters (image,
  subnet, groups, profile); moto (5.x) checks the IAM action (with enforcement on) and the instance
  profile, then answers DryRunOperation without looking at the image, subnet or groups: those are
  the ``image`` and ``network`` checks' describe calls, which moto answers.
* ``image``: each type's image (:mod:`daemon.doctor.images`).
* ``offerings``: each type is offered in each zone it launches in (DescribeInstanceTypeOfferings;
  moto holds AWS's lists): on AWS a DryRun there answers Unsupported, moto's does not.
"""
from __future__ import annotations

import re
from typing import Any, Sequence

from config.catalog import load_catalog
from config.schema import Config
from daemon.doctor.report import Clients, Finding, failure, unread
from scaler.cloud.ec2 import Ec2Cloud
from scaler.cloud.image_parameter import ImageUnresolved
from scaler.cloud.slots import slot_of, split_slot
from scaler.cloud.provider import CloudConfigError
from scaler.cloud.user_data import worker_install

#: what a DryRun's answer means and what to change (the code itself is printed beside it)
DRY_RUN_MEANING = {
    "UnauthorizedOperation": ("the daemon's credentials may not launch",
                              "grant ec2:RunInstances (config/iam/control-host.json)"),
    "AccessDenied": ("the daemon's credentials may not launch", "grant ec2:RunInstances (config/iam/control-host.json)"),
    "InvalidAMIID.NotFound": ("the image does not exist in the region", "set launch.ami_id to an image of this region"),
    "InvalidAMIID.Malformed": ("the image id is malformed", "set launch.ami_id to an ami-... id"),
    "InvalidSubnetID.NotFound": ("the subnet does not exist", "set launch.subnets (or spot.zones) to subnets "
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
    "ParameterNotFound": ("the type's image parameter does not exist", "fix its launch ssm_parameter"),
    "AccessDeniedException": ("the image parameter may not be read", "grant ssm:GetParameter on it "
                              "(config/iam/control-host.json ResolvePublicImages)"),
    "NotAnImage": ("the type's image parameter holds no AMI id", "fix its launch ssm_parameter"),
}
#: EC2 families whose processors are AWS Graviton (arm64): a letter g after the generation digit
GRAVITON = re.compile(r"^[a-z]+\d+g[a-z]*\.")


def arch_of_type(instance_type: str) -> list[str]:
    """The architectures of a type where DescribeInstanceTypes does not answer: the catalog's
    ``architecture``, else by its name: Graviton families (``c7g``, ``t4g``, ``m6gd``, ``g5g``)
    arm64, the others x86_64."""
    known = load_catalog().get(instance_type)
    if known is not None:
        return [known.architecture]
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


def launches(cfg: Config) -> list[tuple[str, str | None]]:
    """Every launch the actuator may make, as (slot, subnet): each on-demand type in each of
    ``launch.subnets`` (none named: EC2's pick), each spot slot in its zone's subnet (None here)."""
    subnets: list[str | None] = list(cfg.launch.subnet_ids) or [None]
    return [(slot, subnet) for slot in slots(cfg) for subnet in (subnets if "@" not in slot else [None])]


def _launch_name(slot: str, subnet: str | None, cfg: Config) -> str:
    return f"{slot} in {subnet}" if subnet is not None and len(cfg.launch.subnet_ids) > 1 else slot


def preflight_cloud(cfg: Config, client: Any, ssm: Any = None) -> Ec2Cloud:
    """The EC2 adapter as the daemon builds it, with no token in its user data (a DryRun sends it);
    ``ssm`` resolves the images given as SSM parameters. The user data is the daemon's, the worker
    bootstrap included (``launch.bootstrap``), so the DryRun sends what a launch sends (its size
    too); without this package's metadata the daemon's start says so, and the DryRun goes without."""
    param = cfg.dispatcher.token_parameter or None
    install = None
    if cfg.launch.bootstrap:
        try:
            install = worker_install(cfg.launch.wheelhouse)
        except CloudConfigError:
            install = None
    return Ec2Cloud(cfg.cluster, cfg.region, cfg.launch, client=client, dispatcher=cfg.dispatcher.advertise,
                    token_parameter=param, models=[(m.name, m.onnx) for m in cfg.models],
                    worker_port=cfg.dispatcher.worker_port, spot=cfg.spot, ssm_client=ssm, install=install)


def check_permissions(cfg: Config, clients: Clients, only_first: bool = False) -> Finding:
    """DryRun of RunInstances per type and subnet (module docstring); ``only_first``: the first
    launch alone (``costscale run``'s fast subset)."""
    cloud = preflight_cloud(cfg, clients("ec2"), clients("ssm"))
    todo = launches(cfg)[:1] if only_first else launches(cfg)
    refused: list[tuple[str, str, str]] = []
    unresolved: list[str] = []      # types whose image parameter does not resolve: the image check's line
    for slot, subnet in todo:
        name = _launch_name(slot, subnet, cfg)
        try:
            cloud.image_id(cloud.image_of(split_slot(slot)[0]))
        except ImageUnresolved:
            unresolved.append(name)
            continue
        except Exception:              # noqa: BLE001 - the DryRun below says it in its own words
            pass
        try:
            code, msg = cloud.dry_run(slot, subnet)
        except Exception as exc:       # noqa: BLE001 - an unreachable endpoint, no credentials: one line
            code, msg = failure(exc, "ec2")
            return Finding("fail", "permissions", f"DryRun of RunInstances ({name}) did not answer: {msg}",
                           "check credentials, region and the network", code)
        if code != "DryRunOperation":
            refused.append((name, code, msg))
    if refused:
        name, code, msg = refused[0]
        meaning, change = DRY_RUN_MEANING.get(code, (f"EC2 refused the launch: {msg}", "fix the launch section"))
        if code in ("UnauthorizedOperation", "AccessDenied", "AccessDeniedException"):
            meaning = f"{meaning}: {msg}"
        more = f" (and {len(refused) - 1} more of {len(todo)} launches)" if len(refused) > 1 else ""
        return Finding("fail", "permissions", f"DryRun of RunInstances {name}: {meaning}{more}", change, code)
    if unresolved:
        return Finding("warn", "permissions", f"DryRun of RunInstances not tried for {', '.join(unresolved)}: the "
                       "image parameter does not resolve (the image check says why)", "fix the image, then run "
                       "doctor again")
    note = ("; moto answers a DryRun after checking the IAM action and instance profile only: the image, subnet "
            "and groups are checked by describe calls") if cfg.aws.endpoint_url else ""
    return Finding("ok", "permissions", f"DryRun of RunInstances allowed for {len(todo)} launch(es) "
                                        f"({', '.join(_launch_name(s, n, cfg) for s, n in todo)}){note}")


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


def slot_zones(cfg: Config, ec2: Any) -> list[tuple[str, str]]:
    """The zones each slot launches in, where the config fixes them, as (slot, zone): a spot slot's
    zone, an on-demand type's subnets' zones (DescribeSubnets); none named: EC2 picks, left out."""
    zone_of: dict[str, str] = {}
    if cfg.launch.subnet_ids and any("@" not in s for s in slots(cfg)):
        zone_of = {sn["SubnetId"]: sn.get("AvailabilityZone", "")
                   for sn in ec2.describe_subnets(SubnetIds=cfg.launch.subnet_ids).get("Subnets", [])}
    out: list[tuple[str, str]] = []
    for slot in slots(cfg):
        zone = split_slot(slot)[1]
        zones = [zone] if zone else [zone_of[sn] for sn in cfg.launch.subnet_ids if zone_of.get(sn)]
        out += [(slot, z) for z in dict.fromkeys(zones)]
    return out


def check_offerings(cfg: Config, clients: Clients) -> Finding:
    """Each type is offered in the zones it launches in (DescribeInstanceTypeOfferings): a type not
    offered there is refused at every launch (Unsupported), which the fleet takes for a want of
    capacity and plans around, again and again. An on-demand type offered in some of its subnets'
    zones only is a warning: the launch falls back to those (``scaler.cloud.subnets``)."""
    ec2 = clients("ec2")
    try:
        zones = slot_zones(cfg, ec2)
        types = sorted({split_slot(s)[0] for s, _ in zones})
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
    missing = [(s, z) for s, z in zones if (split_slot(s)[0], z) not in offered]
    somewhere = {s for s, z in zones if (split_slot(s)[0], z) in offered and "@" not in s}
    text = ", ".join(f"{split_slot(s)[0]} in {z}" for s, z in missing)
    if any(s not in somewhere for s, _ in missing):
        return Finding("fail", "offerings", f"not offered: {text}: every launch there is refused",
                       "name a subnet (spot.zones: a zone) that offers the type, or drop the type", "Unsupported")
    if missing:
        return Finding("warn", "offerings", f"not offered: {text}: those launches fall back to the type's other "
                       "subnets", "name subnets in zones that offer the type", "Unsupported")
    return Finding("ok", "offerings", f"{len(zones)} launch(es) in zones that offer their type "
                                      f"({', '.join(sorted({z for _, z in zones}))})")


__all__ = ["DRY_RUN_MEANING", "arch_of_type", "check_offerings", "check_permissions", "launches", "preflight_cloud",
           "slot_zones", "slots", "type_architectures"]
