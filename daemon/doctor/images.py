"""Pre-flight of the images (issue #38, deliverables 2 and 5): each type's image exists in the
region and runs on it. Reads only.

Each configured type has its image (``config.sections.launch.image_for``: its ``launch.by_type``
entry, its family's, or the section's). For each distinct image:

* an SSM parameter resolves to an AMI id (GetParameter, as the launch resolves it: AWS's public
  ``/aws/service/*`` parameters need control-host.json's ResolvePublicImages); a parameter that
  does not exist or may not be read fails (every launch of its types would);
* a launch template exists, and names an image when no AMI is given beside it
  (DescribeLaunchTemplateVersions);
* the AMI exists in the region (DescribeImages) and its ``Architecture`` is one each of its types
  supports (DescribeInstanceTypes' SupportedArchitectures; ``arch_of_type`` where that is not
  answered): an x86_64 image on a Graviton type (or arm64 on an x86 one) is refused by RunInstances
  on AWS (InvalidParameterValue), moto launches it; an ``architecture`` declared beside the image
  that is not the image's is a warning (``validate`` judged the types by it).

One line for all: the first failure (and how many more), else the first warning, else every image
with its types.
"""
from __future__ import annotations

from typing import Any

from config.schema import Config
from config.sections.launch import ImageChoice, family_of, image_for
from daemon.doctor.launch import slots, type_architectures
from daemon.doctor.report import Clients, Finding, failure, unread
from scaler.cloud.slots import split_slot

Loc = tuple[Any, ...]


def _field(source: Loc, name: str) -> str:
    return ".".join(str(p) for p in source + (name,))


def _template_image(ec2: Any, lt: Any, field: str) -> tuple[str | None, Finding | None]:
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
        return None, Finding("fail", "image", found, f"fix {field}", code)
    data = (versions[0].get("LaunchTemplateData") or {}) if versions else {}
    return data.get("ImageId"), None


def _parameter_image(ssm: Any, name: str, field: str) -> tuple[str | None, Finding | None]:
    """The AMI id an SSM parameter holds, or the finding that it does not resolve."""
    try:
        value = str(ssm.get_parameter(Name=name)["Parameter"]["Value"]).strip()
    except Exception as exc:       # noqa: BLE001
        code, msg = failure(exc, "ssm")
        if code == "ParameterNotFound":
            return None, Finding("fail", "image", f"image parameter {name} does not exist in the region", f"fix "
                                 f"{field} (aws ssm get-parameters-by-path --path /aws/service/... lists them)", code)
        if code in ("AccessDeniedException", "AccessDenied"):
            return None, Finding("fail", "image", f"image parameter {name} may not be read: {msg}", "grant "
                                 "ssm:GetParameter on it (config/iam/control-host.json ResolvePublicImages covers "
                                 "/aws/service/*)", code)
        return None, Finding("fail", "image", f"image parameter {name} not read: {msg}", f"check {field}", code)
    if not value.startswith("ami-"):
        return None, Finding("fail", "image", f"image parameter {name} holds {value[:40]!r}, not an AMI id",
                             f"fix {field}", "NotAnImage")
    return value, None


def _resolve(choice: ImageChoice, clients: Clients) -> tuple[str | None, str, Finding | None]:
    """(AMI id, how it was named, or the finding that stops the check of this image)."""
    ec2 = clients("ec2")
    named = ""
    if choice.launch_template is not None:
        ami, bad = _template_image(ec2, choice.launch_template, _field(choice.source, "launch_template"))
        if bad is not None and (bad.status == "fail" or not (choice.ami_id or choice.ssm_parameter)):
            return None, "", bad
        if not (choice.ami_id or choice.ssm_parameter):
            if not ami:
                return None, "", Finding("warn", "image", f"the launch template of {'.'.join(choice.source)} "
                                         "names no image", "set an ImageId in the template, or an ami_id beside it")
            return ami, f" (template {choice.launch_template.name or choice.launch_template.id})", None
    if choice.ssm_parameter:
        ami, bad = _parameter_image(clients("ssm"), choice.ssm_parameter, _field(choice.source, "ssm_parameter"))
        return ami, f" ({choice.ssm_parameter})", bad
    return choice.ami_id, "", None


def _check_one(cfg: Config, clients: Clients, choice: ImageChoice, types: list[str],
               archs: dict[str, list[str]]) -> Finding:
    """One image against its types (module docstring)."""
    ami, named, bad = _resolve(choice, clients)
    if bad is not None:
        return bad
    field = _field(choice.source, "ssm_parameter" if choice.ssm_parameter else "ami_id")
    try:
        images = clients("ec2").describe_images(ImageIds=[ami]).get("Images", [])
    except Exception as exc:       # noqa: BLE001
        code, msg = failure(exc, "ec2")
        denied = unread("image", f"image {ami}", code, msg)
        if denied is not None:
            return denied
        if not code.startswith("InvalidAMIID"):
            return Finding("fail", "image", f"image {ami} not read: {msg}", "check ec2:DescribeImages", code)
        images = []
    if not images:
        return Finding("fail", "image", f"image {ami}{named} does not exist in {cfg.region} (or is not shared with "
                       "the account)", f"set {field} to an image of this region", "InvalidAMIID.NotFound")
    arch = images[0].get("Architecture", "x86_64")
    wrong = [t for t in types if arch not in archs[t]]
    if wrong:
        need = sorted({a for t in wrong for a in archs[t]})
        return Finding("fail", "image", f"image {ami}{named} is {arch} but {', '.join(wrong)} run(s) "
                       f"{'/'.join(need)} only: RunInstances refuses it on AWS", f"give launch.by_type."
                       f"{family_of(wrong[0])} an image of that architecture, or drop the type", "InvalidParameterValue")
    if choice.architecture and choice.architecture != arch:
        return Finding("warn", "image", f"image {ami}{named} is {arch} but {_field(choice.source, 'architecture')} "
                       f"says {choice.architecture}", "fix the declared architecture")
    return Finding("ok", "image", f"image {ami}{named} exists ({arch}), fits {', '.join(types)}")


def check_image(cfg: Config, clients: Clients) -> Finding:
    """Each type's image exists, resolves and fits its types (module docstring)."""
    types = sorted({split_slot(s)[0] for s in slots(cfg)})
    groups: dict[Loc, tuple[ImageChoice, list[str]]] = {}
    missing: list[str] = []
    for t in types:
        choice = image_for(cfg.launch, t)
        if choice is None:
            missing.append(t)
        else:
            groups.setdefault(choice.source, (choice, []))[1].append(t)
    if missing:
        return Finding("fail", "image", f"no image for {', '.join(missing)}", f"give launch.by_type."
                       f"{family_of(missing[0])} an image, or launch.ami_id")
    refused: list[tuple[str, str]] = []
    archs = type_architectures(clients("ec2"), types, refused)
    found = [_check_one(cfg, clients, choice, ts, archs) for choice, ts in groups.values()]
    fails = [f for f in found if f.status == "fail"]
    if fails:
        more = f" (and {len(fails) - 1} more of {len(found)} images)" if len(fails) > 1 else ""
        return Finding("fail", "image", fails[0].found + more, fails[0].change, fails[0].code)
    warns = [f for f in found if f.status == "warn"]
    if warns:
        return warns[0]
    if refused:
        code, msg = refused[0]
        return unread("image", f"{'; '.join(f.found for f in found)}; the architectures of {', '.join(types)} "
                      "(taken from their names)", code, msg) or Finding("warn", "image", msg)
    return Finding("ok", "image", "; ".join(f.found for f in found))


__all__ = ["check_image"]
