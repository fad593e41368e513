"""Capacity slots: where an instance runs and at what price (issue #28).

A slot is the key the actuator, the ledger and the fake cloud count instances by: an instance type
alone for on-demand capacity (``g4dn.xlarge``, as before spot existed, so a config without spot
sees no change), ``TYPE@ZONE`` for spot capacity in one availability zone
(``g4dn.xlarge@us-east-1a``). The budget invariant (DESIGN invariant 1) then holds per slot at the
price that slot is billed at now, with the actuator's own ordering and write-ahead intents.

The fleet's other decisions (the planner, parking, which model an instance serves, the query loop's
latency model) work on instance types: :func:`typed` gives them the same instances with their slot
replaced by the type. Pure: no I/O.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from scaler.cloud.provider import ManagedInstance

#: between the instance type and the zone of a spot slot
SPOT_SEP = "@"


def slot_of(instance_type: str, zone: str | None = None) -> str:
    """The on-demand slot of ``instance_type`` (``zone`` None), or its spot slot in ``zone``."""
    return instance_type if zone is None else f"{instance_type}{SPOT_SEP}{zone}"


def split_slot(slot: str) -> tuple[str, str | None]:
    """``g4dn.xlarge@us-east-1a`` -> (``g4dn.xlarge``, ``us-east-1a``); an on-demand slot -> (type, None)."""
    itype, sep, zone = slot.partition(SPOT_SEP)
    return (itype, zone) if sep else (itype, None)


def base_type(slot: str) -> str:
    """The instance type of a slot."""
    return split_slot(slot)[0]


def is_spot(slot: str) -> bool:
    return SPOT_SEP in slot


def market_of(slot: str) -> str:
    """``spot`` or ``on_demand``."""
    return "spot" if is_spot(slot) else "on_demand"


def typed(instances: Sequence[ManagedInstance]) -> list[ManagedInstance]:
    """The instances as the type-level decisions see them: each one's slot replaced by its type."""
    return [i if not is_spot(i.instance_type) else replace(i, instance_type=base_type(i.instance_type))
            for i in instances]


def pool_by_type(pool: dict[str, int]) -> dict[str, int]:
    """A pool counted by slot, counted by type."""
    out: dict[str, int] = {}
    for slot, n in pool.items():
        if n:
            t = base_type(slot)
            out[t] = out.get(t, 0) + int(n)
    return out


__all__ = ["SPOT_SEP", "base_type", "is_spot", "market_of", "pool_by_type", "slot_of", "split_slot", "typed"]
