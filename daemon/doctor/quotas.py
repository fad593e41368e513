"""Pre-flight of the vCPU quotas (issue #38, deliverables 5 and 6): does the account's Service Quotas
headroom hold the planned peak of every quota the config's types touch? Reads only.

* **The quotas**: each (market, family) the configured types run in
  (``scaler.planner.quota.wanted_quotas``), read as the daemon reads them
  (``scaler.cloud.service_quotas``: the applied value, else the AWS default). The config's
  ``quotas`` section is not what is checked: it is what the daemon is told; this is what AWS enforces.
* **In use**: every running or pending instance of the account in the region (DescribeInstances
  without the cluster's filter: the account's other instances draw on the same quotas), its vCPUs
  (the catalog's, else its CpuOptions), counted per family and market (``InstanceLifecycle`` spot).
* **The planned peak** of a family in a market: the most vCPUs the budget buys there, one type of the
  family at the budget (``scaler.planner.quota.budget_peaks``: ``floor(budget / price) x vCPUs``). Not
  the pool ``costscale plan`` picks: that pick rests on the demand and the profiles, which move, and
  the daemon plans again as they do; the budget is the pool's only fixed bound, so a quota whose
  headroom holds what the budget buys never binds, and one that does not is the quota to raise.

Verdicts, one line for all of them (the worst first): **fail** when a family's quota is 0 in every
market its types may run in (nothing of it can launch: ``VcpuLimitExceeded``); **warn** when the
peak exceeds the headroom (quota minus in use: the planner stays within the quota, but the budget is
not bought; the line names the quota code to raise and to what), or when a quota cannot be read;
**ok** otherwise.
"""
from __future__ import annotations

from typing import Any

from config.quota_families import quota_code, quota_family, quota_title
from config.schema import Config
from daemon.doctor.report import Clients, Finding, failure
from scaler.cloud.aws_client import DENIED_CODES
from scaler.cloud.service_quotas import GET_ACTION, read_quotas
from scaler.planner.quota import budget_peaks, quota_markets, wanted_quotas

Key = tuple[str, str]


def _market(market: str) -> str:
    return market.replace("_", "-")


def in_use(cfg: Config, ec2: Any) -> dict[Key, int]:
    """vCPUs of the account's running and pending instances per (market, family)."""
    catalog = cfg.full_catalog()
    out: dict[Key, int] = {}
    pages = ec2.get_paginator("describe_instances").paginate(
        Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}])
    for page in pages:
        for res in page.get("Reservations", []):
            for inst in res.get("Instances", []):
                itype = inst.get("InstanceType", "")
                cpu = inst.get("CpuOptions") or {}
                n = int(catalog[itype].vcpu) if itype in catalog else \
                    int(cpu.get("CoreCount", 0)) * int(cpu.get("ThreadsPerCore", 1))
                try:
                    key = ("spot" if inst.get("InstanceLifecycle") == "spot" else "on_demand", quota_family(itype))
                except ValueError:
                    continue
                out[key] = out.get(key, 0) + n
    return out


def check_quotas(cfg: Config, clients: Clients) -> Finding:
    """Service Quotas headroom for the planned peak (module docstring)."""
    wanted = wanted_quotas(cfg)
    read = read_quotas(clients("service-quotas"), wanted)
    try:
        used = in_use(cfg, clients("ec2"))
    except Exception as exc:       # noqa: BLE001 - then the headroom is the quota itself
        code, msg = failure(exc, "ec2")
        used, unused = {}, f"; the instances running not listed ({code or msg})"
    else:
        unused = ""
    peak = budget_peaks(cfg)
    fails: list[Finding] = []
    warns: list[Finding] = []
    for family, markets in sorted(quota_markets(cfg).items()):
        known = {m: read.limits[(m, family)] for m in markets if (m, family) in read.limits}
        if known and len(known) == len(markets) and not any(known.values()):
            m = sorted(markets)[0]
            types = ", ".join(t.type for t in cfg.instance_types if quota_family(t.type) == family)
            need = max(peak[(m, family)][0], 1)
            fails.append(Finding("fail", "quotas", f"the {' and '.join(_market(x) for x in sorted(markets))} vCPU "
                                 f"quota of {family} is 0 ({', '.join(quota_code(x, family) or '' for x in sorted(markets))}"
                                 f"): no {types} can launch", f"raise \"{quota_title(m, family)}\" "
                                 f"({quota_code(m, family)}) to at least {need} vCPUs (Service Quotas), or drop "
                                 f"the type{unused}", "VcpuLimitExceeded"))
            continue
        for m in sorted(markets):
            key = (m, family)
            if key in read.unread:
                code = read.codes.get(key, "")
                fix = (f"grant {GET_ACTION} (config/iam/control-host.json); the daemon plans with the config's "
                       "quotas or none there") if code in DENIED_CODES else \
                    "the daemon plans with the config's quotas or none there"
                warns.append(Finding("warn", "quotas", f"quota not read: {read.unread[key]}", fix, code))
                continue
            vcpus, pool = peak[key]
            room = read.limits[key] - used.get(key, 0)
            if vcpus > room:
                code = quota_code(m, family)
                warns.append(Finding(
                    "warn", "quotas", f"{_market(m)} {family}: the budget buys up to {vcpus} vCPUs ({pool}) but "
                    f"{code} leaves {max(room, 0)} (quota {read.limits[key]} - {used.get(key, 0)} in use): the plan "
                    f"stays within the quota and the budget is not bought{unused}",
                    f"raise \"{quota_title(m, family)}\" ({code}) to {used.get(key, 0) + vcpus} vCPUs "
                    "(Service Quotas)"))
    worst = fails or warns
    if worst:
        more = f" (and {len(worst) - 1} more)" if len(worst) > 1 else ""
        f = worst[0]
        return Finding(f.status, f.check, f.found + more, f.change, f.code)
    parts = [f"{_market(m)} {fam} {read.limits[(m, fam)]} ({read.sources[(m, fam)]}, {used.get((m, fam), 0)} in use, "
             f"peak {peak[(m, fam)][0]})" for m, fam in wanted]
    return Finding("ok", "quotas", f"vCPU headroom holds the budget's peak: {'; '.join(parts)}{unused}")


__all__ = ["check_quotas", "in_use"]
