"""Which subnet an on-demand launch goes to, and what a zone's refusal changes (issue #38,
deliverable 2: on-demand capacity over several availability zones). Pure: no I/O, no clock.

``launch.subnets`` names the on-demand subnets in order of preference (a subnet lies in one zone).
A launch tries them in that order, leaving out each subnet that refused this type for want of
capacity within :data:`SUBNET_COOLDOWN_S`, and goes to the next on such a refusal: the fallback
across zones that spot capacity has (``scaler.spot.market.zone_order``), inside the on-demand slot.

Why inside the slot, not an on-demand slot per zone as spot has (``TYPE@ZONE``): an on-demand
instance costs the same in every zone of a region (the Price List API prices a type per region), so
the budget check (DESIGN invariant 1), the planner and the ledger, which count by slot and price,
have nothing to learn from the zone; spot needs a slot per zone because its price is the zone's.
The fleet's own cooldown (``FleetActuator.capacity_cooldown_s``) marks the type out only when every
subnet refused.

The refusals that move to the next subnet are the zone's capacity (:data:`ZONE_CAPACITY_CODES`).
Not ``VcpuLimitExceeded`` nor ``InstanceLimitExceeded``: those are the account's quota in the region
(Service Quotas), which every zone would refuse alike.

One write-ahead intent per launch, one ClientToken per subnet tried (:func:`subnet_token`): EC2
answers a ClientToken reused with other parameters (another SubnetId) with
IdempotentParameterMismatch ("Ensuring idempotency", EC2 API reference), so each subnet's attempt
has its own token, derived from the intent's and the subnet's id (the same subnet, the same token,
whatever the order: a retry after a crash is answered with that launch). Every instance carries the
intent's token as its intent tag, so ``find_by_intent`` finds it whichever subnet gave it.
"""
from __future__ import annotations

import hashlib
from typing import Mapping, Sequence

#: s: a subnet that refused a type for want of capacity is left out for that type this long (the
#: spot zones' cooldown, ``scaler.spot.market.ZONE_COOLDOWN_S``, and the actuator's default)
SUBNET_COOLDOWN_S = 300.0
#: EC2 codes of a launch refused for want of capacity in the zone asked: the next subnet may have it
ZONE_CAPACITY_CODES = frozenset({"InsufficientInstanceCapacity", "InsufficientHostCapacity", "Unsupported"})
#: EC2's ClientToken is at most 64 ASCII characters
TOKEN_MAX = 64
_HASH = 8


def subnet_token(client_token: str, subnet: str | None, subnets: Sequence[str]) -> str:
    """The ClientToken of the intent ``client_token``'s attempt in ``subnet``: the intent's own with
    at most one subnet configured (as before several existed), else the intent's cut short and a
    hash of the intent and the subnet (≤ :data:`TOKEN_MAX` characters)."""
    if len(subnets) <= 1 or subnet is None:
        return client_token
    h = hashlib.sha256(f"{client_token}\x1f{subnet}".encode()).hexdigest()[:_HASH]
    return f"{client_token[:TOKEN_MAX - _HASH - 1]}-{h}"


def subnet_order(subnets: Sequence[str], cooling_until: Mapping[str, float], now: float) -> list[str]:
    """The subnets to try, best first: the configured order less those cooling down at ``now``
    (``cooling_until``: subnet -> the end of its cooldown for this type)."""
    return [s for s in subnets if cooling_until.get(s, 0.0) <= now]


__all__ = ["SUBNET_COOLDOWN_S", "TOKEN_MAX", "ZONE_CAPACITY_CODES", "subnet_order", "subnet_token"]
