"""The EC2 cloud provider on boto3 (DESIGN "Actuators are narrow"; Kairos §5.2 and INFaaS §4.2.3
assume such a VM actuator under the planner).

Every instance is launched with the cluster, managed-by and intent (= ClientToken) tags in the
same run_instances call (TagSpecifications), so no instance exists untagged even for an instant.
Listing is always filtered by the cluster tag; termination verifies the tag on every id first
(DESIGN invariant 2). Cloud errors become the typed errors of ``scaler.cloud`` here:

* RequestLimitExceeded / Throttling → retried with exponential backoff and full jitter
  (sleep = U(0, min(cap, base·2^attempt)); injectable ``sleep`` and ``rng``), then ``Throttled``;
* InsufficientInstanceCapacity / InstanceLimitExceeded / Unsupported → ``InsufficientCapacity``;
* authentication and parameter errors → ``CloudConfigError``;
* anything else → ``CloudError``.

Launch is idempotent per ClientToken: before run_instances the instances already tagged with the
token are looked up and returned instead (moto ignores ClientToken; AWS honours it as well).
"""
from __future__ import annotations

import random
import shlex
import time
from datetime import datetime
from typing import Any, Callable, Sequence

from scaler.cloud import (
    CLUSTER_TAG,
    INTENT_TAG,
    MANAGED_BY_TAG,
    MANAGED_BY_VALUE,
    CloudConfigError,
    CloudError,
    InsufficientCapacity,
    ManagedInstance,
    NotManaged,
    Throttled,
)

THROTTLE_CODES = frozenset({"RequestLimitExceeded", "Throttling", "ThrottlingException", "RequestThrottled",
                            "TooManyRequestsException"})
CAPACITY_CODES = frozenset({"InsufficientInstanceCapacity", "InstanceLimitExceeded", "Unsupported",
                            "InsufficientHostCapacity", "VcpuLimitExceeded"})
AUTH_CODES = frozenset({"AuthFailure", "UnauthorizedOperation", "InvalidClientTokenId", "SignatureDoesNotMatch",
                        "OptInRequired", "Blocked", "MissingParameter", "MissingAuthenticationToken",
                        "ExpiredToken", "AccessDenied", "AccessDeniedException", "IdempotentParameterMismatch"})
NOT_TERMINATED = ["pending", "running", "shutting-down", "stopping", "stopped"]

BACKOFF_BASE_S = 0.2
BACKOFF_CAP_S = 20.0


def backoff_delay(attempt: int, u: float, base: float = BACKOFF_BASE_S, cap: float = BACKOFF_CAP_S) -> float:
    """Full-jitter exponential backoff: ``u`` ∈ [0, 1) times min(cap, base·2^attempt)."""
    return u * min(cap, base * (2 ** attempt))


def aws_call(op: str, call: Callable[[], Any], typed: Callable[[str, str], CloudError | None]) -> Any:
    """``call()`` (one boto3 call) at the error boundary: a ClientError becomes ``typed(code,
    message)``, the typed error to raise (None: the ClientError itself is raised, for a caller
    that judges that code); no credentials → ``CloudConfigError``; any other botocore failure (an
    unreachable endpoint) → ``CloudError``."""
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    try:
        return call()
    except ClientError as exc:
        err = exc.response.get("Error", {})
        code = str(err.get("Code", ""))
        mapped = typed(code, str(err.get("Message", "")) or code)
        if mapped is None:
            raise
        raise mapped from None
    except NoCredentialsError as exc:
        raise CloudConfigError(f"{op}: no AWS credentials ({exc})") from None
    except BotoCoreError as exc:
        raise CloudError(f"{op}: {exc}") from None


def build_user_data(cluster: str, dispatcher: str | None, extra: str | None = None,
                    cluster_token: str | None = None, models: Sequence[tuple[str, str]] = (),
                    worker_port: int = 50052, worker_flags: Sequence[str] = ()) -> str:
    """The worker's cloud-init script: the user's extra lines, then ``costscale worker``
    (with ``worker_flags``: the TLS files, :func:`config.security.worker_tls_flags`).

    The instance learns its own id, type and private address from the instance metadata service
    (IMDSv2, token-based) and registers with the dispatcher under them; the dispatcher accepts only
    instances the daemon launched. ``models`` are (name, ONNX spec) pairs to serve."""
    lines = ["#!/bin/bash", "set -euo pipefail"]
    if extra:
        body = extra[len("#!/bin/bash"):] if extra.startswith("#!/bin/bash") else extra
        lines.append(body.strip("\n"))
    lines += [
        "IMDS=http://169.254.169.254/latest",
        'IMDS_TOKEN=$(curl -fsS -X PUT "$IMDS/api/token" -H "X-aws-ec2-metadata-token-ttl-seconds: 300")',
        'md() { curl -fsS -H "X-aws-ec2-metadata-token: $IMDS_TOKEN" "$IMDS/meta-data/$1"; }',
        "export COSTSCALE_INSTANCE_ID=$(md instance-id)",
        "export COSTSCALE_INSTANCE_TYPE=$(md instance-type)",
        "COSTSCALE_ADDRESS=$(md local-ipv4)",
        f"export COSTSCALE_CLUSTER={shlex.quote(cluster)}",
    ]
    if cluster_token:
        lines.append(f"export COSTSCALE_CLUSTER_TOKEN={shlex.quote(cluster_token)}")
    cmd = f"exec costscale worker --listen 0.0.0.0:{int(worker_port)} --advertise \"$COSTSCALE_ADDRESS:{int(worker_port)}\""
    for name, spec in models:
        cmd += f" --model {shlex.quote(f'{name}={spec}')}"
    if dispatcher:
        cmd += f" --dispatcher {shlex.quote(dispatcher)}"
    cmd += "".join(f" {shlex.quote(f)}" for f in worker_flags)
    lines.append(cmd)
    return "\n".join(lines) + "\n"


def make_ec2_client(region: str, endpoint_url: str | None = None) -> Any:
    """A boto3 EC2 client with botocore's own retries off (this module retries, with jitter)."""
    import boto3
    from botocore.config import Config as BotoConfig

    cfg = BotoConfig(retries={"total_max_attempts": 1, "mode": "standard"}, connect_timeout=5, read_timeout=30)
    return boto3.client("ec2", region_name=region, endpoint_url=endpoint_url, config=cfg)


def _epoch(v: Any) -> float:
    if isinstance(v, datetime):
        return v.timestamp()
    if isinstance(v, (int, float)):
        return float(v)
    return 0.0


def _to_managed(inst: dict[str, Any]) -> ManagedInstance:
    tags = {t["Key"]: t["Value"] for t in inst.get("Tags", []) or []}
    return ManagedInstance(
        instance_id=inst["InstanceId"],
        instance_type=inst.get("InstanceType", ""),
        state=(inst.get("State") or {}).get("Name", "pending"),
        launch_time=_epoch(inst.get("LaunchTime")),
        private_ip=inst.get("PrivateIpAddress"),
        tags=tags,
    )


class Ec2Cloud:
    """``scaler.cloud.CloudProvider`` on boto3 EC2."""

    def __init__(
        self,
        cluster: str,
        region: str,
        launch: Any,  # config.schema.LaunchSpec (duck-typed so scaler does not import daemon)
        *,
        endpoint_url: str | None = None,
        max_attempts: int = 8,
        client: Any = None,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
        dispatcher: str | None = None,
        cluster_token: str | None = None,
        models: Sequence[tuple[str, str]] = (),
        worker_port: int = 50052,
        worker_flags: Sequence[str] = (),
    ) -> None:
        if max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")
        self.cluster = cluster
        self.launch_spec = launch
        self.max_attempts = max_attempts
        self.client = client if client is not None else make_ec2_client(region, endpoint_url)
        self.sleep = sleep
        self.rng = rng if rng is not None else random.Random()
        self.dispatcher = dispatcher
        self.cluster_token = cluster_token
        self.models = tuple(models)
        self.worker_port = worker_port
        self.worker_flags = tuple(worker_flags)

    # -- the error boundary ------------------------------------------------------------------
    def _call(self, op: str, instance_type: str | None = None, **kwargs: Any) -> Any:
        def typed(code: str, msg: str) -> CloudError:
            if code in THROTTLE_CODES:   # retried below; raised after the last attempt
                return Throttled(f"{op}: throttled by EC2 ({code}) after {self.max_attempts} attempts")
            if code in CAPACITY_CODES:
                return InsufficientCapacity(instance_type or "?", f"{op}: {code}: {msg}")
            if code in AUTH_CODES or code.startswith("Invalid"):
                return CloudConfigError(f"{op}: {code}: {msg}")
            return CloudError(f"{op}: {code}: {msg}")

        for attempt in range(self.max_attempts):
            try:
                return aws_call(op, lambda: getattr(self.client, op)(**kwargs), typed)
            except Throttled:
                if attempt + 1 >= self.max_attempts:
                    raise
                self.sleep(backoff_delay(attempt, self.rng.random()))
        raise AssertionError("unreachable")

    def _describe(self, filters: list[dict[str, Any]]) -> list[ManagedInstance]:
        out: list[ManagedInstance] = []
        token: str | None = None
        while True:
            kw: dict[str, Any] = {"Filters": filters}
            if token:
                kw["NextToken"] = token
            resp = self._call("describe_instances", **kw)
            for res in resp.get("Reservations", []):
                for inst in res.get("Instances", []):
                    out.append(_to_managed(inst))
            token = resp.get("NextToken")
            if not token:
                return out

    def _cluster_filter(self) -> dict[str, Any]:
        return {"Name": f"tag:{CLUSTER_TAG}", "Values": [self.cluster]}

    # -- CloudProvider -----------------------------------------------------------------------
    def list_managed(self) -> list[ManagedInstance]:
        return self._describe([self._cluster_filter(),
                               {"Name": "instance-state-name", "Values": NOT_TERMINATED}])

    def find_by_intent(self, client_token: str) -> list[ManagedInstance]:
        """Instances (any state, terminated included) launched under ``client_token``."""
        return self._describe([self._cluster_filter(), {"Name": f"tag:{INTENT_TAG}", "Values": [client_token]}])

    def launch(self, instance_type: str, count: int, client_token: str,
               tags: dict[str, str] | None = None) -> list[ManagedInstance]:
        if count < 1:
            return []
        found = self.find_by_intent(client_token)
        if found:
            return found
        spec = self.launch_spec
        all_tags = dict(getattr(spec, "tags", {}) or {})
        all_tags.update(tags or {})
        all_tags.update({CLUSTER_TAG: self.cluster, MANAGED_BY_TAG: MANAGED_BY_VALUE, INTENT_TAG: client_token})
        tag_list = [{"Key": k, "Value": v} for k, v in all_tags.items()]
        kw: dict[str, Any] = {
            "InstanceType": instance_type,
            "MinCount": 1,
            "MaxCount": int(count),
            "ClientToken": client_token,
            "TagSpecifications": [{"ResourceType": "instance", "Tags": tag_list},
                                  {"ResourceType": "volume", "Tags": tag_list}],
            "UserData": build_user_data(self.cluster, self.dispatcher, getattr(spec, "user_data", None),
                                        self.cluster_token, self.models, self.worker_port, self.worker_flags),
        }
        if getattr(spec, "ami_id", None):
            kw["ImageId"] = spec.ami_id
        lt = getattr(spec, "launch_template", None)
        if lt is not None:
            ref: dict[str, Any] = {"Version": lt.version}
            if lt.id:
                ref["LaunchTemplateId"] = lt.id
            else:
                ref["LaunchTemplateName"] = lt.name
            kw["LaunchTemplate"] = ref
        if getattr(spec, "subnet_id", None):
            kw["SubnetId"] = spec.subnet_id
        if getattr(spec, "security_group_ids", None):
            kw["SecurityGroupIds"] = list(spec.security_group_ids)
        if getattr(spec, "key_name", None):
            kw["KeyName"] = spec.key_name
        prof = getattr(spec, "iam_instance_profile", None)
        if prof:
            kw["IamInstanceProfile"] = {"Arn": prof} if prof.startswith("arn:") else {"Name": prof}
        resp = self._call("run_instances", instance_type=instance_type, **kw)
        # Partial success (MinCount=1 < MaxCount) is returned as what EC2 gave.
        return [_to_managed(i) for i in resp.get("Instances", [])]

    def terminate(self, instance_ids: list[str]) -> None:
        ids = sorted(set(instance_ids))
        if not ids:
            return
        # Verify ownership with a filter (no error for unknown ids), then terminate only those.
        seen = self._describe([{"Name": "instance-id", "Values": ids}])
        owned = {i.instance_id for i in seen if i.tags.get(CLUSTER_TAG) == self.cluster}
        bad = [i for i in ids if i not in owned]
        if bad:
            raise NotManaged(f"refusing to terminate {', '.join(bad)}: not tagged {CLUSTER_TAG}={self.cluster}")
        live = [i.instance_id for i in seen if i.instance_id in owned and i.state != "terminated"]
        if live:
            self._call("terminate_instances", InstanceIds=live)
