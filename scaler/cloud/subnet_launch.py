"""One on-demand launch over several subnets (issue #38, deliverable 2; the decisions and why:
:mod:`scaler.cloud.subnets`): each open subnet in order of preference, each with its own
ClientToken, until one gives instances. A zone's capacity refusal
(:data:`scaler.cloud.subnets.ZONE_CAPACITY_CODES`) puts that subnet out for the type for
:data:`scaler.cloud.subnets.SUBNET_COOLDOWN_S` and tries the next; any other error (a quota's
VcpuLimitExceeded, a refused permission, throttling) ends the launch as it came. No subnet left:
``InsufficientCapacity`` naming each subnet's refusal, and the fleet's cooldown takes the type out.
"""
from __future__ import annotations

from typing import Any

from scaler.cloud.aws_client import aws_call, iam_action
from scaler.cloud.provider import CloudError, InsufficientCapacity
from scaler.cloud.subnets import SUBNET_COOLDOWN_S, ZONE_CAPACITY_CODES, subnet_order


def launch_over_subnets(cloud: Any, itype: str, count: int, client_token: str,
                        tags: dict[str, str] | None) -> dict[str, Any]:
    """RunInstances' answer from the first subnet that launched (``cloud``: an
    ``scaler.cloud.ec2.Ec2Cloud``: its client, ``run_params``, error mapping, clock and
    ``subnet_cooling``, (type, subnet) -> end of the cooldown)."""
    subnets = cloud.subnets()
    now = cloud.clock()
    cooling = {s: until for (t, s), until in cloud.subnet_cooling.items() if t == itype}
    order = subnet_order(subnets, cooling, now)
    refused = [f"{s}: refused within {SUBNET_COOLDOWN_S:g} s" for s in subnets if s not in order]
    for subnet in order:
        codes: list[str] = []

        def typed(code: str, msg: str, attempts: int) -> CloudError:
            codes.append(code)
            return cloud._typed("run_instances", itype)(code, msg, attempts)

        kw = cloud.run_params(itype, count, client_token, tags, subnet=subnet)
        try:
            return aws_call("run_instances", lambda: cloud.client.run_instances(**kw), typed,   # noqa: B023
                            iam_action("ec2", "run_instances"))
        except InsufficientCapacity:
            if not codes or codes[-1] not in ZONE_CAPACITY_CODES:      # a quota: every zone refuses alike
                raise
            cloud.subnet_cooling[(itype, subnet)] = now + SUBNET_COOLDOWN_S
            refused.append(f"{subnet}: {codes[-1]}")
    raise InsufficientCapacity(itype, f"run_instances: {itype} has no capacity in any subnet ({'; '.join(refused)})")


__all__ = ["launch_over_subnets"]
