"""The EC2 instance catalog: hardware class, size and on-demand $/hr of each allowed type.

The data file ``config/instance_catalog.csv`` ships with the package (us-east-1 on-demand prices;
Kairos §7 Table 3 for g4dn.xlarge, c5n.2xlarge, r5n.large, t3.xlarge). The daemon prices its own
region from the AWS Price List API (``scaler.pricing.region``; this table is the offline fallback),
and the YAML config may override any price.
"""
from __future__ import annotations

import csv
import functools
import io
from dataclasses import dataclass, replace
from importlib import resources
from typing import Literal, Mapping

Hardware = Literal["gpu", "cpu", "inferentia"]
#: the processor architectures EC2 images and types come in (DescribeImages ``Architecture``;
#: DescribeInstanceTypes ``ProcessorInfo.SupportedArchitectures``), as the catalog names them
Architecture = Literal["x86_64", "arm64"]
ARCHITECTURES: tuple[str, ...] = ("x86_64", "arm64")


@dataclass(frozen=True)
class InstanceType:
    name: str
    hardware: Hardware
    vcpu: int
    memory_gib: float
    accelerator: str
    price_per_hour: float
    #: the processor's: arm64 for AWS Graviton families (c7g, m6g, t4g, g5g...), else x86_64
    architecture: Architecture = "x86_64"


@functools.lru_cache(maxsize=1)
def _read_catalog_text() -> str:
    """The shipped CSV, read once per process (config validation looks up every listed type)."""
    return resources.files("config").joinpath("instance_catalog.csv").read_text(encoding="utf-8")


def _architecture(row: Mapping[str, str]) -> Architecture:
    arch = row.get("architecture") or "x86_64"
    if arch not in ARCHITECTURES:
        raise ValueError(f"instance catalog: bad architecture {arch!r} for {row['instance_type']}")
    return arch  # type: ignore[return-value]


def load_catalog(price_overrides: Mapping[str, float] | None = None) -> dict[str, InstanceType]:
    """Return the shipped catalog keyed by type name, with ``price_overrides`` applied."""
    rows = [ln for ln in _read_catalog_text().splitlines() if ln and not ln.startswith("#")]
    catalog: dict[str, InstanceType] = {}
    for row in csv.DictReader(io.StringIO("\n".join(rows))):
        hw = row["hardware"]
        if hw not in ("gpu", "cpu", "inferentia"):
            raise ValueError(f"instance catalog: bad hardware class {hw!r} for {row['instance_type']}")
        catalog[row["instance_type"]] = InstanceType(
            name=row["instance_type"],
            hardware=hw,  # type: ignore[arg-type]
            vcpu=int(row["vcpu"]),
            memory_gib=float(row["memory_gib"]),
            accelerator=row["accelerator"],
            price_per_hour=float(row["price_per_hour"]),
            architecture=_architecture(row),
        )
    for name, price in (price_overrides or {}).items():
        if name not in catalog:
            raise KeyError(name)
        catalog[name] = replace(catalog[name], price_per_hour=float(price))
    return catalog


def known_types() -> list[str]:
    return sorted(load_catalog())
