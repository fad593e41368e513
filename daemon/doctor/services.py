"""Pre-flight of the services beside EC2 (issue #38, deliverable 5): the DynamoDB lease table, the
SSM parameter of the cluster token, the S3 buckets. Describe and head calls only: nothing is
created or written, and the token is never decrypted nor printed (GetParameter without decryption,
only its type is read).

* ``lease``: DescribeTable. A missing table is a warning (``costscale run`` creates it, with
  dynamodb:CreateTable); a table of another key than the lease's (a string hash key ``cluster``,
  ``scaler.replicas.dynamo_items``) fails: every lease read is refused (ValidationException).
* ``token``: the parameter's name is not reserved (AWS refuses a name under ``aws`` or ``ssm``:
  AccessDeniedException, ValidationException) and, when it exists, is a SecureString (a String
  hands the token to anyone allowed ssm:GetParameter). Missing: a warning (the daemon writes it).
* ``buckets``: HeadBucket of each ``aws.buckets`` (404: no such bucket; 403: not allowed).
"""
from __future__ import annotations

from config.schema import Config
from config.sections.security import is_loopback
from daemon.doctor.report import Clients, Finding, failure
from scaler.cloud.token_parameter import parameter_name
from scaler.replicas.dynamo_items import KEY

#: the first path element of a parameter name AWS keeps for itself (case-insensitive)
RESERVED_PREFIXES = ("aws", "ssm")


def check_lease_table(cfg: Config, clients: Clients) -> Finding:
    """The lease table exists with the lease's key, or is missing (the daemon creates it)."""
    name = cfg.lease.table
    try:
        table = clients("dynamodb").describe_table(TableName=name).get("Table", {})
    except Exception as exc:       # noqa: BLE001
        code, msg = failure(exc, "dynamodb")
        if code == "ResourceNotFoundException":
            return Finding("warn", "lease", f"table {name} does not exist", "costscale run creates it "
                           "(PAY_PER_REQUEST; needs dynamodb:CreateTable)", code)
        return Finding("fail", "lease", f"table {name} not described: {msg}", "grant dynamodb:DescribeTable on it "
                       "(config/iam/control-host.json)", code)
    keys = {k["AttributeName"]: k["KeyType"] for k in table.get("KeySchema", [])}
    types = {a["AttributeName"]: a["AttributeType"] for a in table.get("AttributeDefinitions", [])}
    if keys != {KEY: "HASH"} or types.get(KEY) != "S":
        shown = ", ".join(f"{k} {v} {types.get(k, '?')}" for k, v in keys.items())
        return Finding("fail", "lease", f"table {name} is keyed {shown}: the lease needs a string hash key "
                       f"'{KEY}' alone, and every lease read would be refused", "name another lease.table (the "
                       "daemon creates it) or delete this one", "ValidationException")
    status = table.get("TableStatus", "ACTIVE")
    if status != "ACTIVE":
        return Finding("warn", "lease", f"table {name} is {status}", "wait until it is ACTIVE")
    return Finding("ok", "lease", f"table {name} is ACTIVE with key '{KEY}'")


def token_parameter_used(cfg: Config) -> bool:
    """Whether the daemon keeps a cluster token in SSM: a parameter is named and a token is
    configured, or the dispatcher listens beyond loopback (a token is then generated)."""
    d = cfg.dispatcher
    return bool(d.token_parameter) and (bool(d.cluster_token or d.cluster_token_file) or not is_loopback(d.listen))


def check_token_parameter(cfg: Config, clients: Clients) -> Finding:
    """The token parameter's name is allowed and, when it exists, it is a SecureString."""
    name = parameter_name(cfg.dispatcher.token_parameter or "", cfg.cluster)
    first = name.lstrip("/").split("/")[0].lower()
    if first.startswith(RESERVED_PREFIXES):
        return Finding("fail", "token", f"parameter {name} is under a name AWS reserves (aws*, ssm*): "
                       "PutParameter is refused", "set dispatcher.token_parameter to another name, such as "
                       "/costscale/{cluster}/cluster-token", "AccessDeniedException")
    try:
        param = clients("ssm").get_parameter(Name=name, WithDecryption=False).get("Parameter", {})
    except Exception as exc:       # noqa: BLE001
        code, msg = failure(exc, "ssm")
        if code == "ParameterNotFound":
            return Finding("warn", "token", f"parameter {name} does not exist", "costscale run writes the cluster "
                           "token there (needs ssm:PutParameter)", code)
        return Finding("fail", "token", f"parameter {name} not read: {msg}", "grant ssm:GetParameter on it "
                       "(config/iam/control-host.json)", code)
    kind = param.get("Type", "?")
    if kind != "SecureString":
        return Finding("warn", "token", f"parameter {name} is a {kind}, not a SecureString", "overwrite it as a "
                       "SecureString (aws ssm put-parameter --type SecureString --overwrite)")
    return Finding("ok", "token", f"parameter {name} exists (SecureString)")


def check_buckets(cfg: Config, clients: Clients) -> Finding:
    """HeadBucket of every ``aws.buckets``."""
    s3 = clients("s3")
    for bucket in cfg.aws.buckets:
        try:
            s3.head_bucket(Bucket=bucket)
        except Exception as exc:       # noqa: BLE001
            code, msg = failure(exc, "s3")
            if code in ("404", "NoSuchBucket", "NotFound"):
                return Finding("fail", "buckets", f"bucket {bucket} does not exist", "create it, or fix aws.buckets",
                               "NoSuchBucket")
            if code in ("403", "AccessDenied"):
                return Finding("fail", "buckets", f"bucket {bucket} refused the daemon", "grant s3:ListBucket on it "
                               "(config/iam/s3-models.json)", "AccessDenied")
            return Finding("fail", "buckets", f"bucket {bucket} not reached: {msg}", "check the bucket's region "
                           "and the network", code)
    return Finding("ok", "buckets", f"{len(cfg.aws.buckets)} bucket(s) reachable ({', '.join(cfg.aws.buckets)})")


__all__ = ["check_buckets", "check_lease_table", "check_token_parameter", "token_parameter_used"]
