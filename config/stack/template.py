"""The CloudFormation template of a costscale deployment, built from the shipped IAM documents
(issue #38, deliverable 4): ``costscale-stack.yaml`` beside this module is this builder's output
(``python -m config.stack render``; ``tests/config/test_stack_template.py`` fails when the two differ).

Each IAM policy of the stack is a document of ``config/iam`` with its placeholders turned into
CloudFormation substitutions (:data:`CFN_VALUES`, :func:`cfn_policy`): ``{region}`` →
``${AWS::Region}``, ``{cluster}`` → ``${ClusterName}``, ``{table}`` → the lease table's name, and so
on, each string that holds one wrapped in ``Fn::Sub``. Nothing is copied by hand, so the stack
cannot drift from the documents the IAM tests prove.

What the stack holds, and why:

* two roles and their instance profiles: the control host's (``control-host.json``; and, each behind a
  Condition, ``replicas.json``, ``s3-models.json``, ``spot.json`` and ``doctor.json``) and the workers'
  (``worker.json``, ``worker-s3.json``); their names carry the cluster's, hence ``CAPABILITY_NAMED_IAM``;
* two security groups in ``VpcId``: the control host's admits the dispatcher port from ``AllowedCidr``
  (the clients; no default, so nothing is open to 0.0.0.0/0 unless asked) and from the workers' group
  (registration); the workers' admits the worker port from the control host's group only;
* the lease table, its key schema the one ``scaler.replicas.dynamo_items.DynamoItems.ensure_table``
  creates (``cluster``, a string, HASH; on demand);
* the S3 bucket (models, offline jobs, the wheelhouse): SSE-S3 by default, every public access block
  on, bucket-owner-enforced ownership, kept when the stack is deleted;
* with ``IncludeSpot``: the interruption queue, and the EventBridge rule that sends it the "EC2 Spot
  Instance Interruption Warning" events (``spot.interruption_queue``);
* **no SSM parameter.** The cluster token is a ``SecureString``, which CloudFormation cannot create
  (the ``AWS::SSM::Parameter`` resource takes ``String`` or ``StringList`` only; the SSM API reference
  of PutParameter's ``Type``: "SecureString isn't currently supported for CloudFormation templates").
  A ``String`` would hold the token in clear text, and a value in the template would sit in the
  stack's own description. So the daemon creates the SecureString at its first start, as it does
  without a stack (``scaler.cloud.token_parameter.TokenParameter.publish``, never overwriting), and
  the stack only scopes IAM to its name (``/costscale/<cluster>/cluster-token``: the control host may
  get and put it, the workers get it) and outputs that name.
"""
from __future__ import annotations

import re
from typing import Any

from config.iam import DOCUMENTS, load, render

#: each IAM placeholder as the CloudFormation substitution that fills it in the stack
CFN_VALUES: dict[str, str] = {
    "region": "${AWS::Region}",
    "account": "${AWS::AccountId}",
    "cluster": "${ClusterName}",
    "table": "${LeaseTable}",
    "bucket": "${Bucket}",
    "queue": "${InterruptionQueue.QueueName}",
    "worker_role": "${WorkerRole}",
}
#: the token parameter's name (``scaler.cloud.token_parameter.DEFAULT_PARAMETER``, the IAM documents' ARN)
TOKEN_PARAMETER = "/costscale/${ClusterName}/cluster-token"
#: the control host's documents, each with the Condition that includes it (None: always)
CONTROL_HOST_DOCS: dict[str, str | None] = {
    "control-host": None, "replicas": "Replicas", "s3-models": "S3Models", "spot": "Spot", "doctor": "Doctor"}
WORKER_DOCS: dict[str, str | None] = {"worker": None, "worker-s3": None}
#: the switches: parameter → (its Condition, its default, what it adds)
SWITCHES: dict[str, tuple[str, str, str]] = {
    "IncludeSpot": ("Spot", "false", "spot.json on the control host, the interruption queue and its EventBridge rule"),
    "IncludeReplicas": ("Replicas", "false", "replicas.json on the control host (lease.replicas: several daemons)"),
    "IncludeS3Models": ("S3Models", "true", "s3-models.json on the control host (models and offline jobs in the bucket)"),
    "IncludeDoctor": ("Doctor", "true", "doctor.json on the control host (the reads costscale doctor makes)"),
}
_SUB = re.compile(r"\$\{[A-Za-z0-9:.]+\}")


def _sub(value: Any) -> Any:
    """``value`` with each string holding a substitution wrapped in ``Fn::Sub``."""
    if isinstance(value, str):
        return {"Fn::Sub": value} if _SUB.search(value) else value
    if isinstance(value, list):
        return [_sub(v) for v in value]
    if isinstance(value, dict):
        return {k: _sub(v) for k, v in value.items()}
    return value


def cfn_policy(name: str) -> dict[str, Any]:
    """The shipped document ``name`` with CloudFormation substitutions for its placeholders
    (KeyError naming a placeholder :data:`CFN_VALUES` lacks)."""
    return dict(_sub(render(load(name), CFN_VALUES)))


def logical_id(doc: str) -> str:
    """The policy resource of document ``doc``: ``control-host`` → ``ControlHostPolicy``."""
    return "".join(part.capitalize() for part in re.split(r"[-_]", doc)) + "Policy"


def _role(who: str) -> dict[str, Any]:
    return {"Type": "AWS::IAM::Role", "Properties": {
        "RoleName": {"Fn::Sub": f"costscale-${{ClusterName}}-{who}"},
        "Description": {"Fn::Sub": f"costscale cluster ${{ClusterName}}: the {who}"},
        "AssumeRolePolicyDocument": {"Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}]}}}


def _profile(who: str, role: str) -> dict[str, Any]:
    return {"Type": "AWS::IAM::InstanceProfile", "Properties": {
        "InstanceProfileName": {"Fn::Sub": f"costscale-${{ClusterName}}-{who}"}, "Roles": [{"Ref": role}]}}


def _policies(docs: dict[str, str | None], role: str) -> dict[str, Any]:
    out = {}
    for doc, cond in docs.items():
        if doc not in DOCUMENTS:
            raise KeyError(f"no IAM document {doc!r}")
        res: dict[str, Any] = {"Type": "AWS::IAM::Policy", "Properties": {
            "PolicyName": f"costscale-{doc}", "Roles": [{"Ref": role}], "PolicyDocument": cfn_policy(doc)}}
        if cond:
            res["Condition"] = cond
        out[logical_id(doc)] = res
    return out


def _group(who: str, text: str) -> dict[str, Any]:
    return {"Type": "AWS::EC2::SecurityGroup", "Properties": {
        "GroupDescription": {"Fn::Sub": f"costscale ${{ClusterName}}: {text}"}, "VpcId": {"Ref": "VpcId"},
        "Tags": [{"Key": "Name", "Value": {"Fn::Sub": f"costscale-${{ClusterName}}-{who}"}},
                 {"Key": "costscale:cluster", "Value": {"Ref": "ClusterName"}}]}}


def _ingress(group: str, port: str, text: str, **source: Any) -> dict[str, Any]:
    return {"Type": "AWS::EC2::SecurityGroupIngress", "Properties": {
        "GroupId": {"Fn::GetAtt": [group, "GroupId"]}, "IpProtocol": "tcp", "FromPort": {"Ref": port},
        "ToPort": {"Ref": port}, "Description": text, **source}}


def _parameters() -> dict[str, Any]:
    params: dict[str, Any] = {
        "ClusterName": {"Type": "String", "AllowedPattern": "^[A-Za-z0-9][A-Za-z0-9._-]{0,39}$",
                        "Description": "the config's cluster (1-40 letters, digits, '.', '_', '-': role names "
                                       "carry it, and IAM allows 64 characters)"},
        "VpcId": {"Type": "AWS::EC2::VPC::Id", "Description": "the VPC of the control host and the workers"},
        "SubnetIds": {"Type": "List<AWS::EC2::Subnet::Id>",
                      "Description": "the subnets workers launch into (one per availability zone), in VpcId"},
        "AllowedCidr": {"Type": "String",
                        "AllowedPattern": r"^(\d{1,3}\.){3}\d{1,3}/(\d|[12]\d|3[0-2])$",
                        "Description": "the clients that may reach the dispatcher port (no default: say which)"},
        "DispatcherPort": {"Type": "Number", "Default": 50051, "MinValue": 1, "MaxValue": 65535,
                           "Description": "dispatcher.listen's port: clients and workers' registration"},
        "WorkerPort": {"Type": "Number", "Default": 50052, "MinValue": 1, "MaxValue": 65535,
                       "Description": "dispatcher.worker_port: the dispatcher calls the workers there"},
    }
    for name, (_, default, text) in SWITCHES.items():
        params[name] = {"Type": "String", "AllowedValues": ["true", "false"], "Default": default,
                        "Description": text}
    return params


def _spot_resources() -> dict[str, Any]:
    return {
        "InterruptionQueue": {"Type": "AWS::SQS::Queue", "Condition": "Spot", "Properties": {
            "QueueName": {"Fn::Sub": "costscale-${ClusterName}-spot-warnings"}, "SqsManagedSseEnabled": True,
            "MessageRetentionPeriod": 3600}},
        "InterruptionRule": {"Type": "AWS::Events::Rule", "Condition": "Spot", "Properties": {
            "Description": {"Fn::Sub": "costscale ${ClusterName}: spot interruption warnings to the queue"},
            "EventPattern": {"source": ["aws.ec2"], "detail-type": ["EC2 Spot Instance Interruption Warning"]},
            "Targets": [{"Id": "costscale-spot-warnings", "Arn": {"Fn::GetAtt": ["InterruptionQueue", "Arn"]}}]}},
        "InterruptionQueuePolicy": {"Type": "AWS::SQS::QueuePolicy", "Condition": "Spot", "Properties": {
            "Queues": [{"Ref": "InterruptionQueue"}],
            "PolicyDocument": {"Version": "2012-10-17", "Statement": [{
                "Sid": "EventBridgeSendsWarnings", "Effect": "Allow", "Principal": {"Service": "events.amazonaws.com"},
                "Action": "sqs:SendMessage", "Resource": {"Fn::GetAtt": ["InterruptionQueue", "Arn"]},
                "Condition": {"ArnEquals": {"aws:SourceArn": {"Fn::GetAtt": ["InterruptionRule", "Arn"]}}}}]}}},
    }


def _resources() -> dict[str, Any]:
    res: dict[str, Any] = {
        "ControlHostRole": _role("control-host"),
        "ControlHostInstanceProfile": _profile("control-host", "ControlHostRole"),
        **_policies(CONTROL_HOST_DOCS, "ControlHostRole"),
        "WorkerRole": _role("worker"),
        "WorkerInstanceProfile": _profile("worker", "WorkerRole"),
        **_policies(WORKER_DOCS, "WorkerRole"),
        "ControlHostSecurityGroup": _group("control-host", "the control host (the dispatcher)"),
        "WorkerSecurityGroup": _group("worker", "the workers"),
        "DispatcherFromClients": _ingress("ControlHostSecurityGroup", "DispatcherPort", "clients to the dispatcher",
                                          CidrIp={"Ref": "AllowedCidr"}),
        "DispatcherFromWorkers": _ingress("ControlHostSecurityGroup", "DispatcherPort", "workers register",
                                          SourceSecurityGroupId={"Fn::GetAtt": ["WorkerSecurityGroup", "GroupId"]}),
        "WorkerFromDispatcher": _ingress("WorkerSecurityGroup", "WorkerPort", "the dispatcher calls its workers",
                                         SourceSecurityGroupId={"Fn::GetAtt": ["ControlHostSecurityGroup", "GroupId"]}),
        "LeaseTable": {"Type": "AWS::DynamoDB::Table", "DeletionPolicy": "Delete", "UpdateReplacePolicy": "Delete",
                       "Properties": {
                           "TableName": {"Fn::Sub": "costscale-${ClusterName}-leases"}, "BillingMode": "PAY_PER_REQUEST",
                           "KeySchema": [{"AttributeName": "cluster", "KeyType": "HASH"}],
                           "AttributeDefinitions": [{"AttributeName": "cluster", "AttributeType": "S"}]}},
        "Bucket": {"Type": "AWS::S3::Bucket", "DeletionPolicy": "Retain", "UpdateReplacePolicy": "Retain",
                   "Properties": {
                       "BucketEncryption": {"ServerSideEncryptionConfiguration": [
                           {"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]},
                       "PublicAccessBlockConfiguration": {
                           "BlockPublicAcls": True, "BlockPublicPolicy": True, "IgnorePublicAcls": True,
                           "RestrictPublicBuckets": True},
                       "OwnershipControls": {"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]},
                       "Tags": [{"Key": "costscale:cluster", "Value": {"Ref": "ClusterName"}}]}},
        **_spot_resources(),
    }
    return res


def _output(value: Any, text: str, condition: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"Description": text, "Value": value}
    if condition:
        out["Condition"] = condition
    return out


def _outputs() -> dict[str, Any]:
    return {
        "ClusterName": _output({"Ref": "ClusterName"}, "cluster"),
        "Region": _output({"Ref": "AWS::Region"}, "region"),
        "SubnetIds": _output({"Fn::Join": [",", {"Ref": "SubnetIds"}]}, "launch.subnets (comma-separated)"),
        "WorkerSecurityGroupId": _output({"Fn::GetAtt": ["WorkerSecurityGroup", "GroupId"]}, "launch.security_group_ids"),
        "WorkerInstanceProfileName": _output({"Ref": "WorkerInstanceProfile"}, "launch.iam_instance_profile"),
        "ControlHostInstanceProfileName": _output({"Ref": "ControlHostInstanceProfile"},
                                                  "the instance profile of the control host's instance"),
        "ControlHostSecurityGroupId": _output({"Fn::GetAtt": ["ControlHostSecurityGroup", "GroupId"]},
                                              "the security group of the control host's instance"),
        "DispatcherPort": _output({"Ref": "DispatcherPort"}, "dispatcher.listen's port"),
        "WorkerPort": _output({"Ref": "WorkerPort"}, "dispatcher.worker_port"),
        "LeaseTableName": _output({"Ref": "LeaseTable"}, "lease.table"),
        "TokenParameterName": _output({"Fn::Sub": TOKEN_PARAMETER},
                                      "dispatcher.token_parameter (the daemon creates the SecureString)"),
        "BucketName": _output({"Ref": "Bucket"}, "aws.buckets"),
        "Replicas": _output({"Ref": "IncludeReplicas"}, "lease.replicas"),
        "InterruptionQueueUrl": _output({"Ref": "InterruptionQueue"}, "spot.interruption_queue", "Spot"),
    }


def template() -> dict[str, Any]:
    """The stack's template, as a dict in CloudFormation's JSON form."""
    return {
        "AWSTemplateFormatVersion": "2010-09-09",
        "Description": "costscale: the roles, instance profiles, security groups, lease table and bucket of one "
                       "cluster (generated by python -m config.stack render from config/iam)",
        "Parameters": _parameters(),
        "Conditions": {cond: {"Fn::Equals": [{"Ref": name}, "true"]} for name, (cond, _, _) in SWITCHES.items()},
        "Resources": _resources(),
        "Outputs": _outputs(),
    }


HEADER = ("# costscale's CloudFormation stack (README \"Deploy on AWS\"). Generated: edit config/stack/template.py or\n"
          "# config/iam/*.json, then `python -m config.stack render > config/stack/costscale-stack.yaml`.\n")


def render_yaml() -> str:
    """The template as the YAML shipped in ``costscale-stack.yaml``."""
    import yaml

    return HEADER + yaml.safe_dump(template(), sort_keys=False, width=120, default_flow_style=False)


__all__ = ["CFN_VALUES", "CONTROL_HOST_DOCS", "SWITCHES", "TOKEN_PARAMETER", "WORKER_DOCS", "cfn_policy", "logical_id",
           "render_yaml", "template"]
