"""Pre-flight of the permissions by IAM's policy simulator (issue #38, deliverable 5), where the caller
may use it: ``iam:SimulatePrincipalPolicy`` on the caller's own principal (STS GetCallerIdentity:
a user's ARN as it is; an assumed role's session ARN ``arn:aws:sts::ACCOUNT:assumed-role/ROLE/SESSION``
as the role's, ``arn:aws:iam::ACCOUNT:role/ROLE``, a role with a path not known from it) for every
action the config needs: the statements of ``config/iam``'s documents its features use (control-host
always; replicas with ``lease.replicas``; s3-models with ``aws.buckets``; spot with a ``spot``
section, its queue statement with ``spot.interruption_queue``; control-host's ResolvePublicImages
when a type's image is one of AWS's public ``/aws/service/`` parameters), each simulated on its own resources
filled for the config (IAM API reference, SimulatePrincipalPolicy:
https://docs.aws.amazon.com/IAM/latest/APIReference/API_SimulatePrincipalPolicy.html) with its
conditions' keys given as context (``ec2:CreateAction`` RunInstances, the cluster tag, ...).

One line: every action allowed (ok); each action the simulator does not allow, with its decision
(``implicitDeny``, ``explicitDeny``: fail, the daemon's call will be refused); the simulator itself
refused (``AccessDenied``: warn, "skipped: not allowed to simulate": config/iam/doctor.json grants
it); it did not answer (warn). The simulator judges identity policies and permissions boundaries,
not an organization's SCPs: the DryRun (``permissions``) is the check AWS itself makes.

moto (5.x) has no SimulatePrincipalPolicy (an HTTP 500): tests answer with botocore's Stubber.
"""
from __future__ import annotations

import re
from typing import Any

from config.iam import as_list, load, render
from config.schema import Config
from config.sections.launch import image_parameters
from daemon.doctor.report import Clients, Finding, failure
from scaler.cloud.aws_client import DENIED_CODES

SIMULATE_ACTION = "iam:SimulatePrincipalPolicy"
_ASSUMED = re.compile(r"^arn:(aws[a-z-]*):sts::(\d+):assumed-role/([^/]+)/.+$")


def principal_arn(caller_arn: str) -> str:
    """The ARN the simulator takes for the caller: an assumed role's role, else the ARN itself."""
    m = _ASSUMED.match(caller_arn)
    return f"arn:{m.group(1)}:iam::{m.group(2)}:role/{m.group(3)}" if m else caller_arn


def needed_statements(cfg: Config, account: str) -> list[dict[str, Any]]:
    """The statements the config's features need, filled (module docstring)."""
    docs = ["control-host"] + (["replicas"] if cfg.lease.replicas else []) + \
        (["s3-models"] if cfg.aws.buckets else []) + (["spot"] if cfg.spot is not None else [])
    queue = (cfg.spot.interruption_queue or "").rstrip("/").rsplit("/", 1)[-1] if cfg.spot is not None else ""
    values = {"region": cfg.region, "account": account, "cluster": cfg.cluster, "table": cfg.lease.table,
              "bucket": cfg.aws.buckets[0] if cfg.aws.buckets else "", "queue": queue,
              "worker_role": cfg.launch.iam_instance_profile or "costscale-worker"}
    public_images = any(p.startswith("/aws/service/")
                        for p in image_parameters(cfg.launch, [t.type for t in cfg.instance_types]))
    out = []
    for name in docs:
        for st in render(load(name), values)["Statement"]:
            if (st["Sid"] == "SpotInterruptionQueue" and not queue) or \
                    (st["Sid"] == "ResolvePublicImages" and not public_images):
                continue
            out.append(st)
    return out


def _context(st: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"ContextKeyName": k, "ContextKeyValues": as_list(v), "ContextKeyType": "string"}
            for op in (st.get("Condition") or {}).values() for k, v in op.items()]


def check_simulated(cfg: Config, clients: Clients) -> Finding:
    """IAM's policy simulator on the caller for the actions the config needs (module docstring)."""
    try:
        who = clients("sts").get_caller_identity()
    except Exception as exc:       # noqa: BLE001
        code, msg = failure(exc, "sts")
        return Finding("warn", "simulate", f"skipped: the caller is not known ({msg})", "", code)
    arn = principal_arn(str(who.get("Arn", "")))
    if ":root" in arn:
        return Finding("warn", "simulate", "skipped: the caller is the account's root user, whom the simulator "
                       "does not take", "run the daemon as a role or user holding config/iam/control-host.json")
    iam = clients("iam")
    denied: list[str] = []
    named: set[str] = set()
    asked = 0
    for st in needed_statements(cfg, str(who.get("Account", ""))):
        ask: dict[str, Any] = {"PolicySourceArn": arn, "ActionNames": as_list(st["Action"]),
                               "ResourceArns": as_list(st["Resource"])}
        if _context(st):
            ask["ContextEntries"] = _context(st)
        try:
            results = [r for page in iam.get_paginator("simulate_principal_policy").paginate(**ask)
                       for r in page.get("EvaluationResults", [])]
        except Exception as exc:   # noqa: BLE001
            code, msg = failure(exc, "iam")
            if code in DENIED_CODES:
                return Finding("warn", "simulate", f"skipped: not allowed to simulate ({msg})",
                               f"attach config/iam/doctor.json (it grants {SIMULATE_ACTION}) to whoever runs doctor",
                               code)
            return Finding("warn", "simulate", f"the policy simulator did not answer: {msg}", "", code)
        asked += len(as_list(st["Action"]))
        for r in results:          # (an action may come back once per resource: each said once)
            if r.get("EvalDecision") != "allowed" and r["EvalActionName"] not in named:
                named.add(r["EvalActionName"])
                denied.append(f"{r['EvalActionName']} ({r.get('EvalDecision')}, Sid {st['Sid']})")
    if denied:
        return Finding("fail", "simulate", f"the policy simulator denies {arn} {len(denied)} of {asked} actions the "
                       f"config needs: {', '.join(denied)}", "attach the config/iam documents the config needs "
                       "(python -m config.iam NAME key=value prints one filled)", "implicitDeny" if all(
                           "implicitDeny" in d for d in denied) else "explicitDeny")
    return Finding("ok", "simulate", f"the policy simulator allows {arn} all {asked} actions the config needs")


__all__ = ["SIMULATE_ACTION", "check_simulated", "needed_statements", "principal_arn"]
