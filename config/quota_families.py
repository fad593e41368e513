"""Which AWS running-vCPU quota an instance type counts against, and how many vCPUs it takes (pure data).

AWS caps the vCPUs of *running* instances per region and per instance family, On-Demand and Spot
apart (EC2 User Guide, "Amazon EC2 instance quotas" / "On-Demand Instance quotas",
https://docs.aws.amazon.com/ec2/latest/instancetypes/ec2-instance-quotas.html, and "Spot Instance
quotas", https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/using-spot-limits.html):

- Running On-Demand **Standard** (A, C, D, H, I, M, R, T, Z) instances, and "All Standard (A, C, D,
  H, I, M, R, T, Z) Spot Instance Requests";
- **G and VT** (``g4dn``, ``g5``, ``vt1``), **P**, **Inf**, **F**, **X**, **DL**, **Trn** and
  **High Memory** (``u-*``): each its own On-Demand quota and its own Spot quota.

A quota counts vCPUs, so an instance takes its type's vCPUs (``vcpu`` in
``config/instance_catalog.csv``) of its family's quota. :data:`FAMILY_LETTERS` is the docs' table;
:func:`quota_family` maps a type name to its family by the letters before its generation digit.
"""
from __future__ import annotations

import re

#: the quota families (the config's names) and the type-name prefixes AWS lists under each
FAMILY_LETTERS: dict[str, tuple[str, ...]] = {
    "standard": ("a", "c", "d", "h", "i", "m", "r", "t", "z"),
    "g_vt": ("g", "vt"),
    "p": ("p",),
    "inf": ("inf",),
    "f": ("f",),
    "x": ("x",),
    "dl": ("dl",),
    "trn": ("trn",),
    "high_memory": ("u",),
}
#: the families' names as the config and ``--quota`` spell them
FAMILIES: tuple[str, ...] = tuple(FAMILY_LETTERS)
#: the docs' name of each family's On-Demand quota (what ``costscale plan`` tells the user to raise)
FAMILY_TITLES: dict[str, str] = {
    "standard": "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances",
    "g_vt": "Running On-Demand G and VT instances",
    "p": "Running On-Demand P instances",
    "inf": "Running On-Demand Inf instances",
    "f": "Running On-Demand F instances",
    "x": "Running On-Demand X instances",
    "dl": "Running On-Demand DL instances",
    "trn": "Running On-Demand Trn instances",
    "high_memory": "Running On-Demand High Memory instances",
}
SPOT_TITLES: dict[str, str] = {
    "standard": "All Standard (A, C, D, H, I, M, R, T, Z) Spot Instance Requests",
    "g_vt": "All G and VT Spot Instance Requests",
    "p": "All P Spot Instance Requests",
    "inf": "All Inf Spot Instance Requests",
    "f": "All F Spot Instance Requests",
    "x": "All X Spot Instance Requests",
    "dl": "All DL Spot Instance Requests",
    "trn": "All Trn Spot Instance Requests",
    "high_memory": "All High Memory Spot Instance Requests",
}

#: each family's Service Quotas code (service ``ec2``) of its running On-Demand vCPU quota, and of its
#: Spot one ("All ... Spot Instance Requests"; High Memory has none): what ``service-quotas
#: get-service-quota --service-code ec2 --quota-code CODE`` reads (AWS CLI reference,
#: https://docs.aws.amazon.com/cli/latest/reference/service-quotas/get-service-quota.html, whose
#: example reads L-1216C47A; the codes are listed by ``list-aws-default-service-quotas --service-code
#: ec2`` and on the Service Quotas console's EC2 page). P's Spot code is "All P4, P3 and P2 Spot
#: Instance Requests" (P5 has a Spot quota of its own, L-C4BD4855, which costscale does not read).
ON_DEMAND_CODES: dict[str, str] = {
    "standard": "L-1216C47A", "g_vt": "L-DB2E81BA", "p": "L-417A185B", "inf": "L-1945791B", "f": "L-74FC7D96",
    "x": "L-7295265B", "dl": "L-6E869C2A", "trn": "L-2C3B7624", "high_memory": "L-43DA4232",
}
SPOT_CODES: dict[str, str] = {
    "standard": "L-34B43A08", "g_vt": "L-3819A6DF", "p": "L-7212CCBC", "inf": "L-B5D1601B", "f": "L-88CF9481",
    "x": "L-E3A00192", "dl": "L-85EED4F7", "trn": "L-6B0D517C",
}


def quota_code(market: str, family: str) -> str | None:
    """The Service Quotas code of ``family``'s running-vCPU quota in ``market`` (``on_demand`` or
    ``spot``); None where AWS has none (High Memory Spot)."""
    return (SPOT_CODES if market == "spot" else ON_DEMAND_CODES).get(family)


def quota_title(market: str, family: str) -> str:
    """The quota's name as AWS writes it (what to raise)."""
    return (SPOT_TITLES if market == "spot" else FAMILY_TITLES)[family]


_PREFIX = re.compile(r"^([a-z]+?)(?:-|\d)")


def quota_family(instance_type: str) -> str:
    """The quota family of ``instance_type`` (``g4dn.xlarge`` -> ``g_vt``, ``inf1.xlarge`` -> ``inf``,
    ``c5n.2xlarge`` -> ``standard``). Raises ValueError for a name no family lists."""
    m = _PREFIX.match(instance_type.lower())
    letters = m.group(1) if m else ""
    best = ""
    fam = ""
    for name, prefixes in FAMILY_LETTERS.items():
        for p in prefixes:      # the longest listed prefix wins ("inf" over "i", "dl" over "d")
            if letters == p and len(p) > len(best):
                best, fam = p, name
    if not fam:
        raise ValueError(f"instance type {instance_type!r}: no vCPU quota family lists {letters!r}")
    return fam


__all__ = ["FAMILIES", "FAMILY_LETTERS", "FAMILY_TITLES", "ON_DEMAND_CODES", "SPOT_CODES", "SPOT_TITLES", "quota_code",
           "quota_family", "quota_title"]
