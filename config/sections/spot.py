"""Spot capacity in the config (issue #28): ``instance_types[].market`` and the ``spot`` section.

* ``market``: ``on_demand`` (the default: the type runs on-demand only), ``spot`` (spot only; when no
  zone can give a spot instance, ``spot.fallback`` decides: launch it on-demand, or not at all) or
  ``both`` (spot where a zone has capacity, on-demand otherwise, whatever ``spot.fallback`` says).
* ``spot.zones``: the availability zones spot capacity is spread over, each with the subnet its
  instances launch into (``null``: the launch's one subnet, or the default VPC's). Spreading
  over independent failure domains is SpotHedge's first rule (EuroSys '25, §4.1 "spread").
* ``spot.overprovision``: spot instances held beyond the plan as a safeguard against preemptions
  (SpotHedge §4.2 "overprovision", ``N_extra``; the paper's default is 1 or 2), bought only within
  the budget.
* ``spot.max_price``: the most costscale pays per spot instance-hour (EC2 ``MaxPrice``; default the
  type's on-demand price, EC2's own default); a zone priced above it is treated as out of capacity.
* ``spot.interruption_queue``: an SQS queue URL an EventBridge rule sends the "EC2 Spot Instance
  Interruption Warning" to (optional; the workers watch IMDS themselves, ``worker.spot_watch``).
* ``spot.fallback``: ``on_demand`` (SpotHedge §4.3 "dynamic fallback": on-demand covers what spot
  cannot, and is retired once spot runs again) or ``none``.

What is checked here (pydantic, one line naming the field and its YAML line): a spot type with no
zones, a zone outside the config's region, a zone named twice. What needs prices
(:func:`spot_problems`, run by ``costscale validate`` and ``costscale run``): a fallback the budget
cannot buy. Pure: no I/O beyond what the caller passes.
"""
from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Mapping, Sequence

from pydantic import Field, field_validator

from config.budget import BUDGET_EPS
from config.fields import Strict

Market = Literal["on_demand", "spot", "both"]
#: an availability zone's name: its region and one letter (us-east-1a, eu-west-3c; us-gov-west-1b)
ZONE_RE = re.compile(r"^([a-z]{2}(?:-gov)?-[a-z]+-\d+)([a-z])$")


class SpotSpec(Strict):
    """The ``spot`` section (module docstring)."""

    zones: dict[str, str | None] = Field(
        default_factory=dict, description="availability zone -> the subnet its spot instances launch into "
                                           "(null: the launch's one subnet, or the default VPC's); spot is spread "
                                           "over them")
    overprovision: Annotated[int, Field(ge=0, le=16)] = Field(
        1, description="spot instances held beyond the plan as a safeguard against preemptions (SpotHedge's "
                       "N_extra; 1 or 2 in the paper), only within the budget")
    max_price: Annotated[float, Field(gt=0)] | None = Field(
        None, description="the most paid per spot instance-hour ($/hr; default: the type's on-demand price)")
    fallback: Literal["on_demand", "none"] = Field(
        "on_demand", description="market: spot types when no zone has spot capacity: launch on-demand, or nothing "
                                 "(market: both always falls back to on-demand)")

    interruption_queue: str | None = Field(
        None, description="an SQS queue URL that EventBridge sends 'EC2 Spot Instance Interruption Warning' events "
                          "to: the daemon reads it beside the workers' own IMDS watch (optional)")

    @field_validator("interruption_queue")
    @classmethod
    def _queue_url(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith(("https://", "http://")):
            raise ValueError(f"{v!r} is not an SQS queue URL (https://sqs.REGION.amazonaws.com/ACCOUNT/NAME)")
        return v

    @field_validator("zones")
    @classmethod
    def _zone_names(cls, v: dict[str, str | None]) -> dict[str, str | None]:
        for z in v:
            if not ZONE_RE.match(z):
                raise ValueError(f"{z!r} is not an availability zone name (for example us-east-1a)")
        return v


def zone_region(zone: str) -> str:
    """``us-east-1a`` -> ``us-east-1``."""
    m = ZONE_RE.match(zone)
    if m is None:
        raise ValueError(f"{zone!r} is not an availability zone name")
    return m.group(1)


def spot_types(instance_types: Sequence[Any]) -> list[str]:
    """The allowed types that may run spot (``market: spot`` or ``both``)."""
    return [t.type for t in instance_types if getattr(t, "market", "on_demand") != "on_demand"]


def check_spot(instance_types: Sequence[Any], spot: SpotSpec | None, region: str) -> None:
    """The config's spot rules that need no price (raises ValueError naming the field, which the
    loader puts on its YAML line): a spot type needs ``spot.zones``; every zone lies in ``region``."""
    for i, t in enumerate(instance_types):
        if getattr(t, "market", "on_demand") != "on_demand" and (spot is None or not spot.zones):
            raise ValueError(f"instance_types[{i}].market: {t.market} needs spot.zones (the availability zones of "
                             f"{region} to spread {t.type} spot instances over)")
    for z in (spot.zones if spot is not None else {}):
        if zone_region(z) != region:
            raise ValueError(f"spot.zones: {z} is not a zone of region {region}")


def spot_problems(instance_types: Sequence[Any], spot: SpotSpec | None, on_demand: Mapping[str, float],
                  budget: float) -> list[str]:
    """One line per spot setting the budget cannot honour (``on_demand``: $/hr by type): a type
    that falls back to on-demand (``market: both``, or ``spot`` with ``fallback: on_demand``) whose
    on-demand price alone is over the budget. (Minimum counts are checked at on-demand prices for
    every type by ``config.checks.config_problems``, so a fallback can always hold them.)"""
    if spot is None:
        return []
    out: list[str] = []
    for t in instance_types:
        market = getattr(t, "market", "on_demand")
        falls_back = market == "both" or (market == "spot" and spot.fallback == "on_demand")
        if market != "on_demand" and falls_back and on_demand[t.type] > budget + BUDGET_EPS:
            how = "market: both" if market == "both" else "spot.fallback: on_demand"
            out.append(f"spot.fallback: {how} cannot buy one on-demand {t.type} ({on_demand[t.type]:g} $/hr) "
                       f"within budget_per_hour {budget:g}; set market: spot with spot.fallback: none for it, "
                       "or raise the budget")
    return out


__all__ = ["Market", "SpotSpec", "ZONE_RE", "check_spot", "spot_problems", "spot_types", "zone_region"]
