"""Pre-flight of the network (issue #38, deliverable 5): where workers land and whether they can
dial the dispatcher. Reads only.

* ``network``: every subnet named (``launch.subnets`` or ``subnet_id``, each ``spot.zones`` subnet)
  and every security group (``launch.security_group_ids``) exists (DescribeSubnets,
  DescribeSecurityGroups), all lie in one VPC (RunInstances refuses a group of another VPC than its
  subnet: InvalidParameter "Security group ... and subnet ... belong to different networks"), each
  spot zone's subnet lies in that zone (a spot launch asks for the zone and the subnet together),
  and the on-demand subnets lie in distinct zones (a warning: two in one zone give no fallback, a
  zone's capacity refusal being the zone's; :func:`shared_zones`).
* ``dispatcher``: the address workers dial (``dispatcher.advertise``, else ``listen``) is neither
  loopback nor ``0.0.0.0`` when the instances are real (EC2 is not an emulator on this host), and,
  as far as the worker subnets' route tables tell, a route covers it (warn only: a security group,
  a network ACL or a firewall may still stop it, and a DNS name is not resolved here).
"""
from __future__ import annotations

import ipaddress
from typing import Any
from urllib.parse import urlparse

from config.hostport import split_hostport
from config.schema import Config
from config.sections.security import is_loopback
from daemon.doctor.report import Clients, Finding, failure, unread


def named_subnets(cfg: Config) -> list[str]:
    """The subnets workers launch into, as the config names them (none: the default VPC's)."""
    out = list(cfg.launch.subnet_ids)
    for subnet in (cfg.spot.zones.values() if cfg.spot is not None else []):
        if subnet and subnet not in out:
            out.append(subnet)
    return out


def real_instances(cfg: Config) -> bool:
    """True unless EC2 is an emulator on this host (its instances are local worker processes)."""
    host = urlparse(cfg.aws.endpoint_url).hostname if cfg.aws.endpoint_url else None
    return not (host is not None and is_loopback(f"{host}:0"))


def _described(call: Any, key: str, what: str, field: str) -> tuple[list[dict[str, Any]], Finding | None]:
    try:
        return call().get(key, []), None
    except Exception as exc:       # noqa: BLE001
        code, msg = failure(exc, "ec2")
        denied = unread("network", what, code, msg)
        if denied is not None:
            return [], denied
        found = f"{what} does not exist in the region: {msg}" if "NotFound" in code else f"{what} not read: {msg}"
        return [], Finding("fail", "network", found, f"fix {field}", code)


def check_network(cfg: Config, clients: Clients) -> Finding:
    """Subnets and groups exist, share one VPC, and the spot zones are their subnets' (module docstring)."""
    ec2 = clients("ec2")
    subnets_named, groups_named = named_subnets(cfg), list(cfg.launch.security_group_ids)
    subnets: list[dict[str, Any]] = []
    groups: list[dict[str, Any]] = []
    if subnets_named:
        subnets, bad = _described(lambda: ec2.describe_subnets(SubnetIds=subnets_named), "Subnets",
                                  f"subnet {', '.join(subnets_named)}", "launch.subnets / spot.zones")
        if bad is not None:
            return bad
    if groups_named:
        groups, bad = _described(lambda: ec2.describe_security_groups(GroupIds=groups_named), "SecurityGroups",
                                 f"security group {', '.join(groups_named)}", "launch.security_group_ids")
        if bad is not None:
            return bad
    vpcs: dict[str, list[str]] = {}
    for s in subnets:
        vpcs.setdefault(s["VpcId"], []).append(s["SubnetId"])
    for g in groups:
        vpcs.setdefault(g.get("VpcId", "EC2-Classic"), []).append(g["GroupId"])
    if len(vpcs) > 1:
        where = "; ".join(f"{v}: {', '.join(ids)}" for v, ids in sorted(vpcs.items()))
        return Finding("fail", "network", f"subnets and security groups lie in {len(vpcs)} VPCs ({where}): "
                       "RunInstances refuses a group of another VPC than its subnet",
                       "name subnets and groups of one VPC", "InvalidParameter")
    zone_of = {s["SubnetId"]: s.get("AvailabilityZone") for s in subnets}
    for zone, subnet in (cfg.spot.zones.items() if cfg.spot is not None else []):
        if subnet and zone_of.get(subnet) != zone:
            return Finding("fail", "network", f"spot.zones names {subnet} for {zone} but it lies in "
                           f"{zone_of.get(subnet)}", "name a subnet of that zone", "InvalidParameterCombination")
    if not subnets_named and not groups_named:
        return Finding("ok", "network", "no subnet or security group named: EC2 uses the default VPC's")
    shared = shared_zones(cfg.launch.subnet_ids, zone_of)
    if shared:
        return Finding("warn", "network", f"on-demand subnets share a zone ({shared}): a capacity refusal there "
                       "is the zone's, the second subnet gives no fallback", "name one subnet per zone in "
                       "launch.subnets")
    vpc = next(iter(vpcs))
    zones = sorted({z for z in zone_of.values() if z})
    return Finding("ok", "network", f"{len(subnets)} subnet(s) ({', '.join(zones) or 'default'}) and {len(groups)} "
                                    f"security group(s) in {vpc}")


def shared_zones(subnets: list[str], zone_of: dict[str, str | None]) -> str:
    """``ZONE: SUBNET, SUBNET`` for each zone holding more than one of ``subnets``; empty when none."""
    by_zone: dict[str, list[str]] = {}
    for s in subnets:
        if zone_of.get(s):
            by_zone.setdefault(str(zone_of[s]), []).append(s)
    return "; ".join(f"{z}: {', '.join(ss)}" for z, ss in sorted(by_zone.items()) if len(ss) > 1)


def _covering_routes(ec2: Any, subnets: list[str], ip: ipaddress.IPv4Address | ipaddress.IPv6Address
                     ) -> dict[str, list[str]]:
    """For each subnet, the routes of its table (its own, else its VPC's main table) whose
    destination holds ``ip``: ``CIDR via TARGET``."""
    described = ec2.describe_subnets(SubnetIds=subnets).get("Subnets", [])
    out: dict[str, list[str]] = {}
    for s in described:
        tables = ec2.describe_route_tables(Filters=[{"Name": "association.subnet-id", "Values": [s["SubnetId"]]}]
                                           ).get("RouteTables", [])
        if not tables:
            tables = [t for t in ec2.describe_route_tables(Filters=[{"Name": "vpc-id", "Values": [s["VpcId"]]}]
                                                           ).get("RouteTables", [])
                      if any(a.get("Main") for a in t.get("Associations", []))]
        hits = []
        for t in tables:
            for r in t.get("Routes", []):
                cidr = r.get("DestinationCidrBlock") or r.get("DestinationIpv6CidrBlock")
                if cidr and r.get("State", "active") == "active" and ip in ipaddress.ip_network(cidr, strict=False):
                    target = r.get("GatewayId") or r.get("NatGatewayId") or r.get("TransitGatewayId") or \
                        r.get("VpcPeeringConnectionId") or r.get("NetworkInterfaceId") or "?"
                    hits.append(f"{cidr} via {target}")
        out[s["SubnetId"]] = hits
    return out


def check_dispatcher(cfg: Config, clients: Clients) -> Finding:
    """The address workers dial (module docstring)."""
    d = cfg.dispatcher
    address = d.advertise or d.listen
    host, _ = split_hostport(address)
    host = host.strip("[]")
    if not real_instances(cfg):
        return Finding("ok", "dispatcher", f"workers dial {address}: EC2 is an emulator on this host (local workers)")
    if is_loopback(address) or host in ("0.0.0.0", "::"):
        return Finding("fail", "dispatcher", f"workers would dial {address}, which on an instance is the instance "
                       "itself: no worker would ever register", "set dispatcher.advertise to the control host's "
                       "private address (HOST:PORT)")
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return Finding("ok", "dispatcher", f"workers dial {address} (a DNS name: the route tables are not checked)")
    subnets = named_subnets(cfg)
    if not subnets:
        return Finding("ok", "dispatcher", f"workers dial {address} (no subnet named: the routes are not checked)")
    try:
        routes = _covering_routes(clients("ec2"), subnets, ip)
    except Exception as exc:       # noqa: BLE001
        code, msg = failure(exc, "ec2")
        return unread("dispatcher", f"the routes of {', '.join(subnets)} to {address}", code, msg) or Finding(
            "warn", "dispatcher", f"the route tables of {', '.join(subnets)} were not read: {msg}",
            "check the routes by hand", code)
    # a private address is reached only by a route more specific than the default one (local, peering, ...)
    usable = {s: [r for r in hits if not (ip.is_private and r.split(" ")[0] in ("0.0.0.0/0", "::/0"))]
              for s, hits in routes.items()}
    blind = [s for s, hits in usable.items() if not hits]
    if blind:
        return Finding("warn", "dispatcher", f"no route of {', '.join(blind)}'s table reaches {address}",
                       "advertise an address in the workers' VPC, or add a route (peering, transit gateway)")
    first = next(iter(usable.values()))[0]
    return Finding("ok", "dispatcher", f"workers dial {address}: routed from every worker subnet ({first})")


__all__ = ["check_dispatcher", "check_network", "named_subnets", "real_instances", "shared_zones"]
