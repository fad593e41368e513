"""The ``launch`` section: how instances are launched on EC2 (RunInstances parameters), per instance
type or type family (issue #38, deliverable 2).

A heterogeneous fleet needs an image per kind of hardware: a g4dn an NVIDIA driver image, an inf1
the Neuron runtime, a Graviton type (c7g, m7g, t4g, g5g...) an arm64 image. ``launch.by_type`` maps
an instance type (``inf1.xlarge``) or a type family (``g4dn``: the part of the type before the dot,
EC2's "instance family") to its own image and extra user data:

* the image is one of ``ami_id``, ``ssm_parameter`` (a parameter whose value is an AMI id, such as
  the public ``/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-arm64`` or a Deep
  Learning AMI's ``/aws/service/deeplearning/ami/x86_64/.../latest/ami-id``: resolved at launch by
  ssm:GetParameter) and ``launch_template`` (a template may come with either of the other two,
  which then overrides the template's image, as RunInstances' ImageId does);
* the image of a type is the most specific one given: the type's entry, else its family's, else
  the section's own (``launch.ami_id`` / ``ssm_parameter`` / ``launch_template``), taken whole
  with the ``architecture`` declared beside it;
* its user data is ``launch.user_data``, then the family's ``user_data``, then the type's, in that
  order (costscale's worker start comes after them all).

What can be checked without AWS (:func:`launch_problems`, run at every load of a file): each
configured type has an image; a declared ``architecture`` is the type's (the catalog's
``architecture`` column: an x86_64 image on a Graviton type, or arm64 on an x86 one, is refused by
RunInstances with InvalidParameterValue); an SSM parameter whose name says x86_64/amd64 or
arm64/aarch64 says the type's. The architecture of an AMI id is known only to EC2:
``costscale doctor`` reads it (DescribeImages), and resolves each SSM parameter.

On-demand capacity may name several subnets (``subnets``, in order of preference; ``subnet_id``
is the one-subnet shorthand): a launch refused for want of capacity in one subnet's zone goes to
the next (``scaler.cloud.subnets``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any, Sequence

from pydantic import Field, field_validator, model_validator

from config.catalog import Architecture, InstanceType, load_catalog
from config.fields import Strict

#: an architecture as image and parameter names spell it, to the catalog's name for it
_ARCH_WORDS = {"x86_64": "x86_64", "amd64": "x86_64", "arm64": "arm64", "aarch64": "arm64"}
_ARCH_IN_NAME = re.compile(r"(?<![a-z0-9])(x86_64|amd64|arm64|aarch64)(?![a-z0-9])")

Loc = tuple[Any, ...]


class LaunchTemplateRef(Strict):
    id: str | None = None
    name: str | None = None
    version: str = "$Default"

    @model_validator(mode="after")
    def _one(self) -> "LaunchTemplateRef":
        if bool(self.id) == bool(self.name):
            raise ValueError("give exactly one of id or name")
        return self


class TypeLaunch(Strict):
    """``launch.by_type.KEY``: the image and extra user data of one instance type or type family."""

    ami_id: str | None = None
    ssm_parameter: str | None = Field(None, description="an SSM parameter whose value is the AMI id "
                                                        "(e.g. /aws/service/ami-amazon-linux-latest/...)")
    launch_template: LaunchTemplateRef | None = None
    architecture: Architecture | None = Field(None, description="the image's (x86_64 or arm64): checked "
                                                                "against the types'")
    user_data: str | None = Field(None, description="extra cloud-init lines for these types, after launch.user_data")

    @model_validator(mode="after")
    def _image(self) -> "TypeLaunch":
        if self.ami_id and self.ssm_parameter:
            raise ValueError("give ami_id or ssm_parameter, not both")
        return self

    def has_image(self) -> bool:
        return bool(self.ami_id or self.ssm_parameter or self.launch_template is not None)


class LaunchSpec(Strict):
    """How instances are launched on EC2 (run_instances parameters)."""

    ami_id: str | None = Field(None, description="the default image (types without one of their own in by_type)")
    ssm_parameter: str | None = Field(None, description="the default image as an SSM parameter holding its AMI id")
    launch_template: LaunchTemplateRef | None = None
    architecture: Architecture | None = Field(None, description="the default image's architecture, if declared")
    subnet_id: str | None = Field(None, description="one subnet (shorthand for subnets: [ID])")
    subnets: list[str] = Field(default_factory=list, description="on-demand subnets in order of preference: a "
                                                                  "capacity refusal in one tries the next")
    security_group_ids: list[str] = Field(default_factory=list)
    key_name: str | None = None
    iam_instance_profile: str | None = None
    user_data: str | None = Field(None, description="extra cloud-init; costscale appends its worker start")
    bootstrap: bool = Field(True, description="the worker installs costscale (the daemon's exact version), its "
                            "ONNX Runtime build and models at boot from a stock image (issue #38); false: the image "
                            "already has costscale on its PATH")
    wheelhouse: str | None = Field(None, pattern=r"^s3://[^/]+/.", description="s3://BUCKET/PREFIX of a wheelhouse "
                                   "from `costscale bundle`: workers install from it when the package index is out "
                                   "of reach")
    tags: dict[str, str] = Field(default_factory=dict)
    pending_timeout_s: Annotated[float, Field(gt=0)] = 600.0
    by_type: dict[str, TypeLaunch] = Field(default_factory=dict, description="per instance type or type family "
                                                                             "(g4dn, inf1, inf1.xlarge)")

    @field_validator("by_type")
    @classmethod
    def _keys(cls, v: dict[str, TypeLaunch]) -> dict[str, TypeLaunch]:
        catalog = load_catalog()
        families = {family_of(t) for t in catalog}
        bad = [k for k in v if k not in catalog and k not in families]
        if bad:
            raise ValueError(f"{', '.join(bad)}: neither an instance type nor a type family of the catalog "
                             f"(families: {', '.join(sorted(families))})")
        return v

    @field_validator("subnets")
    @classmethod
    def _distinct(cls, v: list[str]) -> list[str]:
        dup = sorted({s for s in v if v.count(s) > 1})
        if dup:
            raise ValueError(f"subnet(s) named twice: {', '.join(dup)}")
        return v

    @model_validator(mode="after")
    def _one_each(self) -> "LaunchSpec":
        if self.ami_id and self.ssm_parameter:
            raise ValueError("give ami_id or ssm_parameter, not both")
        if self.subnet_id and self.subnets:
            raise ValueError("give subnets or subnet_id (the one-subnet shorthand), not both")
        if not (self.ami_id or self.ssm_parameter or self.launch_template is not None or self.by_type):
            raise ValueError("give ami_id, ssm_parameter or launch_template (the default image), or an image per "
                             "type family in by_type")
        return self

    @property
    def subnet_ids(self) -> list[str]:
        """The on-demand subnets in order of preference (empty: the default VPC's, EC2 picks)."""
        return list(self.subnets) if self.subnets else ([self.subnet_id] if self.subnet_id else [])


def family_of(instance_type: str) -> str:
    """The type family: the part of the type before the dot (``g4dn.xlarge`` -> ``g4dn``)."""
    return instance_type.split(".", 1)[0]


def arch_in_name(name: str) -> str | None:
    """The architecture an image or parameter name spells (x86_64/amd64, arm64/aarch64), if one."""
    found = {_ARCH_WORDS[m] for m in _ARCH_IN_NAME.findall(name.lower())}
    return found.pop() if len(found) == 1 else None


@dataclass(frozen=True)
class ImageChoice:
    """A type's image as the config gives it (module docstring): exactly one level's image fields,
    the ``architecture`` declared there, and the joined user data of every level."""

    ami_id: str | None
    ssm_parameter: str | None
    launch_template: LaunchTemplateRef | None
    architecture: str | None
    user_data: str | None
    source: Loc          # where the image is given: ("launch",) or ("launch", "by_type", KEY)


def image_for(spec: Any, instance_type: str) -> ImageChoice | None:
    """The image of ``instance_type`` (type entry > family entry > the section's), None when no level
    gives one. ``spec`` is a :class:`LaunchSpec` (or an object with its fields)."""
    by_type: dict[str, TypeLaunch] = dict(getattr(spec, "by_type", None) or {})
    family = family_of(instance_type)
    entries = [(k, by_type[k]) for k in (family, instance_type) if k in by_type]     # family, then type
    parts = [getattr(spec, "user_data", None)] + [e.user_data for _, e in entries]
    user_data = "\n".join(p.strip("\n") for p in parts if p) or None
    for key, entry in reversed(entries):        # the type's entry first, then the family's
        if entry.has_image():
            return ImageChoice(entry.ami_id, entry.ssm_parameter, entry.launch_template, entry.architecture,
                               user_data, ("launch", "by_type", key))
    ami, param, lt = (getattr(spec, "ami_id", None), getattr(spec, "ssm_parameter", None),
                      getattr(spec, "launch_template", None))
    if not (ami or param or lt is not None):
        return None
    return ImageChoice(ami, param, lt, getattr(spec, "architecture", None), user_data, ("launch",))


def image_parameters(spec: Any, types: Sequence[str]) -> list[str]:
    """The SSM parameters the images of ``types`` are given as (each once, in the types' order)."""
    out: list[str] = []
    for t in types:
        choice = image_for(spec, t)
        if choice is not None and choice.ssm_parameter and choice.ssm_parameter not in out:
            out.append(choice.ssm_parameter)
    return out


def launch_problems(spec: LaunchSpec, types: Sequence[str],
                    catalog: dict[str, InstanceType] | None = None) -> list[tuple[Loc, str]]:
    """What the config alone shows would fail at launch (module docstring): (field path, one line)
    per problem, each naming the types it concerns."""
    catalog = catalog or load_catalog()
    grouped: dict[tuple[Loc, str], list[str]] = {}
    for t in types:
        arch = catalog[t].architecture
        choice = image_for(spec, t)
        if choice is None:
            grouped.setdefault((("launch",), f"none:{family_of(t)}"), []).append(t)
            continue
        if choice.architecture and choice.architecture != arch:
            grouped.setdefault((choice.source + ("architecture",), f"arch:{choice.architecture}"), []).append(t)
        named = arch_in_name(choice.ssm_parameter) if choice.ssm_parameter else None
        if named and named != arch:
            grouped.setdefault((choice.source + ("ssm_parameter",), f"param:{named}"), []).append(t)
    out: list[tuple[Loc, str]] = []
    for (loc, kind), ts in grouped.items():
        what, _, value = kind.partition(":")
        listed = ", ".join(ts)
        need = "/".join(sorted({catalog[t].architecture for t in ts}))
        if what == "none":
            out.append((loc, f"type family {value} ({listed}) has no image: give launch.by_type.{value} an ami_id, "
                             "ssm_parameter or launch_template, or a default launch.ami_id"))
        elif what == "arch":
            out.append((loc, f"the image is declared {value} but {listed} run(s) {need} only: RunInstances "
                             f"refuses it (give launch.by_type.{family_of(ts[0])} an {need} image)"))
        else:
            out.append((loc, f"the parameter's name says {value} but {listed} run(s) {need} only: give the "
                             f"{need} parameter"))
    return out


__all__ = ["ImageChoice", "LaunchSpec", "LaunchTemplateRef", "TypeLaunch", "arch_in_name", "family_of", "image_for",
           "image_parameters", "launch_problems"]
