"""The config a costscale stack's outputs fill (``costscale init --from-stack``; README "Deploy on
AWS"): what the stack knows (its names and ids) written in, and what it cannot know (the models,
the budget, the instance types, the workers' image, the control host's address, the clients' token)
left as ``FILL IN`` placeholders that ``costscale validate`` refuses until they are written (pure:
outputs in, YAML text out).

The mapping, for whoever writes the config by hand (:data:`MAPPING`):

======================================  =======================================================
output                                  config field
======================================  =======================================================
``ClusterName``                         ``cluster``
``Region``                              ``region``
``SubnetIds``                           ``launch.subnets`` (on-demand, in this order; spot zones too)
``WorkerSecurityGroupId``               ``launch.security_group_ids: [..]``
``WorkerInstanceProfileName``           ``launch.iam_instance_profile``
``DispatcherPort``                      ``dispatcher.listen`` (``0.0.0.0:PORT``), ``dispatcher.advertise``'s port
``WorkerPort``                          ``dispatcher.worker_port``
``TokenParameterName``                  ``dispatcher.token_parameter``
``LeaseTableName``                      ``lease.table``
``Replicas``                            ``lease.replicas``
``BucketName``                          ``aws.buckets: [..]``
``InterruptionQueueUrl`` (IncludeSpot)  ``spot.interruption_queue``
``ControlHostInstanceProfileName``,     not the config's: the control host's instance is launched
``ControlHostSecurityGroupId``          with them (README "Deploy on AWS")
======================================  =======================================================
"""
from __future__ import annotations

import json
import re
from typing import Mapping

#: each output the stack always has → the config field it fills
MAPPING: dict[str, str] = {
    "ClusterName": "cluster",
    "Region": "region",
    "SubnetIds": "launch.subnets",
    "WorkerSecurityGroupId": "launch.security_group_ids",
    "WorkerInstanceProfileName": "launch.iam_instance_profile",
    "DispatcherPort": "dispatcher.listen",
    "WorkerPort": "dispatcher.worker_port",
    "TokenParameterName": "dispatcher.token_parameter",
    "LeaseTableName": "lease.table",
    "Replicas": "lease.replicas",
    "BucketName": "aws.buckets",
    "ControlHostInstanceProfileName": "(the control host's instance)",
    "ControlHostSecurityGroupId": "(the control host's instance)",
}
#: outputs only some stacks have (their Condition) → the config field
OPTIONAL: dict[str, str] = {"InterruptionQueueUrl": "spot.interruption_queue"}
_PLAIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@-]*$")


def missing_outputs(outputs: Mapping[str, str]) -> list[str]:
    """The outputs a costscale stack always has that ``outputs`` lacks, in :data:`MAPPING`'s order."""
    return [k for k in MAPPING if not str(outputs.get(k, "")).strip()]


def _q(value: str) -> str:
    """``value`` as a YAML scalar (plain when that reads back as the same string)."""
    plain = _PLAIN.match(value) and value.lower() not in ("true", "false", "null", "yes", "no", "on", "off")
    return value if plain and not value.replace(".", "").isdigit() else json.dumps(value)


def subnets(outputs: Mapping[str, str]) -> list[str]:
    """The stack's subnets (``SubnetIds``, comma-separated)."""
    return [s.strip() for s in outputs["SubnetIds"].split(",") if s.strip()]


def config_text(stack: str, outputs: Mapping[str, str], endpoint_url: str | None = None) -> str:
    """The config file ``outputs`` (a costscale stack's, none of :func:`missing_outputs`) fill;
    ``endpoint_url``: an AWS emulator's (``aws.endpoint_url``)."""
    o = {k: str(v).strip() for k, v in outputs.items()}
    nets = subnets(o)
    port = o["DispatcherPort"]
    replicas = "true" if o["Replicas"] == "true" else "false"
    lines = [
        f"# costscale config from the CloudFormation stack {stack} (costscale init --from-stack {stack}).",
        "# The stack filled what it knows. Each FILL IN is yours to write: costscale validate refuses the file",
        "# until every one is. Then: costscale doctor THIS_FILE, costscale run THIS_FILE (README \"Deploy on AWS\").",
        f"cluster: {_q(o['ClusterName'])}",
        f"region: {_q(o['Region'])}",
        "",
        "# FILL IN: the hard ceiling on the summed $/hr of the cluster's running instances.",
        "budget_per_hour: null",
        "",
        "# FILL IN: the models served (README \"Models and variants\"), for example:",
        "#   - name: ncf",
        f"#     onnx: s3://{o['BucketName']}/models/ncf.onnx",
        "#     qos_ms: 5",
        "models: []",
        "",
        "# FILL IN: the EC2 instance types costscale may use, for example:",
        "#   - type: g4dn.xlarge",
        "#   - type: c5n.2xlarge",
        "instance_types: []",
        "",
        "launch:",
        f"  ami_id: null   # FILL IN: the workers' image in {o['Region']} (README \"Deploy on AWS\")",
        f"  subnets: [{', '.join(_q(n) for n in nets)}]   # the stack's SubnetIds: on-demand launches try them in this order",
        f"  security_group_ids: [{_q(o['WorkerSecurityGroupId'])}]   # admits the worker port from the control host",
        f"  iam_instance_profile: {_q(o['WorkerInstanceProfileName'])}   # reads the cluster token",
        "",
        "dispatcher:",
        f"  listen: 0.0.0.0:{port}   # the control host's security group admits it from AllowedCidr and the workers",
        f"  advertise: null   # FILL IN: the control host's private IP and port the workers dial (e.g. 10.0.1.10:{port})",
        f"  worker_port: {o['WorkerPort']}   # the workers' security group admits it from the control host",
        f"  token_parameter: {_q(o['TokenParameterName'])}   # the daemon creates this SecureString at its first start",
        "  auth_token_file: null   # FILL IN: the file of the token clients send (a listen beyond loopback needs one)",
        "",
        "lease:",
        f"  table: {_q(o['LeaseTableName'])}",
        f"  replicas: {replicas}   # the stack's IncludeReplicas",
        "",
        "aws:",
        f"  buckets: [{_q(o['BucketName'])}]   # models, offline jobs, the wheelhouse (encrypted, never public)",
    ]
    if endpoint_url:
        lines.append(f"  endpoint_url: {_q(endpoint_url)}   # an AWS emulator (costscale init --endpoint-url)")
    queue = o.get("InterruptionQueueUrl", "")
    if queue:
        lines += ["", "spot:", f"  interruption_queue: {_q(queue)}   # EventBridge sends it the interruption warnings",
                  "  # zones: {us-east-1a: subnet-...}   # for spot types: each zone with one of the stack's subnets"]
    return "\n".join(lines) + "\n"


__all__ = ["MAPPING", "OPTIONAL", "config_text", "missing_outputs", "subnets"]
