"""A type's image given as an SSM parameter, resolved to its AMI id (issue #38, deliverable 2;
``config.sections.launch``).

AWS publishes the current image of its distributions as public parameters (``/aws/service/
ami-amazon-linux-latest/...``, the Deep Learning AMIs' ``/aws/service/deeplearning/ami/...``; "Query
for the latest Amazon Linux AMI IDs using Systems Manager Parameter Store", AWS docs), read with
``ssm:GetParameter`` on ``arn:aws:ssm:REGION::parameter/aws/service/*`` (no account in the ARN:
config/iam/control-host.json, ResolvePublicImages). RunInstances also takes
``resolve:ssm:NAME`` as ImageId, but then the DryRun, the doctor's DescribeImages and the audit log
would not know the image; resolving here names the AMI in every one of them.

Each parameter is read once per :data:`IMAGE_PARAMETER_TTL_S` (a new image is released at most a
few times a month; a launch burst reads it once); a refresh that fails for a transient reason
(throttled, unreachable) keeps the value read before. A parameter that does not exist, may not be
read, or whose value is not an AMI id is :class:`ImageUnresolved` (a ``CloudConfigError``: the
fleet does not retry it), with SSM's code.
"""
from __future__ import annotations

import time
from typing import Any, Callable

from scaler.cloud.aws_client import THROTTLE_CODES, after, aws_call
from scaler.cloud.provider import CloudConfigError, CloudError, Throttled

#: s: how long a resolved parameter is used before it is read again
IMAGE_PARAMETER_TTL_S = 3600.0
#: SSM codes that are the config's or the credentials' fault (not retried, not taken for transient)
REFUSED_CODES = frozenset({"ParameterNotFound", "ParameterVersionNotFound", "AccessDeniedException", "AccessDenied",
                           "UnrecognizedClientException", "InvalidClientTokenId", "ExpiredTokenException",
                           "ValidationException"})


class ImageUnresolved(CloudConfigError):
    """The SSM parameter naming a type's image gave no AMI id."""

    def __init__(self, parameter: str, code: str, detail: str) -> None:
        super().__init__(f"image parameter {parameter}: {code}: {detail}")
        self.parameter, self.code, self.detail = parameter, code, detail


class ImageParameters:
    """SSM parameters → AMI ids, each cached for ``ttl_s`` (module docstring). ``client``: a
    callable giving the boto3 SSM client (built on first use)."""

    def __init__(self, client: Callable[[], Any], clock: Callable[[], float] = time.monotonic,
                 ttl_s: float = IMAGE_PARAMETER_TTL_S) -> None:
        self._client, self.clock, self.ttl_s = client, clock, ttl_s
        self._cache: dict[str, tuple[str, float]] = {}      # name -> (AMI id, read again after)
        self.reads = 0                                      # GetParameter calls made

    def resolve(self, name: str) -> str:
        now = self.clock()
        cached = self._cache.get(name)
        if cached is not None and now < cached[1]:
            return cached[0]
        try:
            value = self._read(name)
        except ImageUnresolved:
            raise
        except CloudError:
            if cached is not None:          # a transient failure: the image read before still stands
                return cached[0]
            raise
        self._cache[name] = (value, now + self.ttl_s)
        return value

    def _read(self, name: str) -> str:
        def typed(code: str, msg: str, attempts: int) -> CloudError:
            if code in REFUSED_CODES:
                return ImageUnresolved(name, code, msg)
            if code in THROTTLE_CODES:
                return Throttled(f"get_parameter {name}: throttled by SSM ({code}){after(attempts)}")
            return CloudError(f"get_parameter {name}: {code}: {msg}{after(attempts)}")

        self.reads += 1
        resp = aws_call("get_parameter", lambda: self._client().get_parameter(Name=name), typed, "ssm:GetParameter")
        value = str((resp.get("Parameter") or {}).get("Value", "")).strip()
        if not value.startswith("ami-"):
            raise ImageUnresolved(name, "NotAnImage", f"its value {value[:40]!r} is not an AMI id (ami-...)")
        return value


__all__ = ["IMAGE_PARAMETER_TTL_S", "ImageParameters", "ImageUnresolved", "REFUSED_CODES"]
