"""The cluster token in SSM Parameter Store (issue #27, "No secret in user data").

Workers register with the cluster token, and the dispatcher calls them with it. Written into each
worker's user data, anyone allowed ``ec2:DescribeInstanceAttribute`` (and every process on the
instance, through the metadata service) could read it. Instead the daemon keeps it in a
``SecureString`` parameter (``dispatcher.token_parameter``, default ``/costscale/<cluster>/cluster-token``,
encrypted with the account's ``aws/ssm`` key); user data names the parameter, and the worker reads
it with its instance profile (``ssm:GetParameter``). The parameter is the source of truth: the
daemon writes its token there only when the parameter does not exist yet, and otherwise uses the
parameter's value. To rotate, write a new value into the parameter (``aws ssm put-parameter
--overwrite``): every dispatcher and worker reads it again every minute and switches without a
restart (:class:`dispatcher.auth.TokenRing` keeps the old one valid meanwhile).

Errors become ``scaler.cloud.provider``'s typed errors (:func:`scaler.cloud.aws_client.aws_call`): refused access
→ :class:`ParameterRefused` (a ``CloudConfigError`` that keeps the parameter, SSM's code and its
message apart, so the worker can name the permission it lacks in one line); no credentials →
``CloudConfigError``; anything else → ``CloudError``. The value is never logged.
"""
from __future__ import annotations

from typing import Any

from scaler.cloud.aws_client import after, aws_call, iam_action, make_client
from scaler.cloud.provider import CloudConfigError, CloudError

#: the parameter's name when the config names none (``{cluster}``: the cluster's name)
DEFAULT_PARAMETER = "/costscale/{cluster}/cluster-token"
NOT_FOUND = "ParameterNotFound"
EXISTS = "ParameterAlreadyExists"
CONFIG_CODES = frozenset({"AccessDeniedException", "AccessDenied", "UnrecognizedClientException",
                          "InvalidClientTokenId", "ExpiredTokenException", "KMSAccessDeniedException",
                          "ValidationException", "InvalidKeyId", "KMSNotFoundException"})


class ParameterRefused(CloudConfigError):
    """SSM refused a call on the parameter (an IAM denial, bad or expired keys, the KMS key)."""

    def __init__(self, op: str, parameter: str, code: str, detail: str) -> None:
        super().__init__(f"ssm {op} {parameter}: {code}: {detail}")
        self.op, self.parameter, self.code, self.detail = op, parameter, code, detail


def parameter_name(template: str, cluster: str) -> str:
    """The parameter of ``cluster``: ``{cluster}`` in ``template`` replaced by its name."""
    return template.replace("{cluster}", cluster)


def make_ssm_client(region: str, endpoint_url: str | None = None, max_attempts: int = 3) -> Any:
    """A boto3 SSM client (botocore's standard retries, short timeouts)."""
    return make_client("ssm", region, endpoint_url=endpoint_url, max_attempts=max_attempts, connect_timeout=3,
                       read_timeout=5)


class TokenParameter:
    """One SecureString parameter holding the cluster token."""

    def __init__(self, client: Any, name: str) -> None:
        self.client, self.name = client, name

    def _call(self, op: str, judged: tuple[str, ...] = (), **kwargs: Any) -> Any:
        def typed(code: str, msg: str, attempts: int) -> CloudError | None:
            if code in judged:
                return None
            if code in CONFIG_CODES:
                return ParameterRefused(op, self.name, code, msg)
            return CloudError(f"ssm {op} {self.name}: {code}: {msg}{after(attempts)}")

        return aws_call(f"ssm {op}", lambda: getattr(self.client, op)(**kwargs), typed, iam_action("ssm", op))

    def read(self) -> str | None:
        """The token the parameter holds (decrypted); None when there is no such parameter."""
        from botocore.exceptions import ClientError

        try:
            resp = self._call("get_parameter", (NOT_FOUND,), Name=self.name, WithDecryption=True)
        except ClientError:
            return None
        value = str((resp.get("Parameter") or {}).get("Value", "")).strip()
        return value or None

    def publish(self, token: str) -> str:
        """The token to use: the parameter's when it exists, else ``token``, written there now
        (SecureString, never overwriting: of two daemons racing, the first write wins)."""
        from botocore.exceptions import ClientError

        held = self.read()
        if held is not None:
            return held
        try:
            self._call("put_parameter", (EXISTS,), Name=self.name, Value=token, Type="SecureString", Overwrite=False,
                       Description="costscale cluster token: workers register with it (rotate: overwrite it)")
        except ClientError:
            return self.read() or token
        return token


__all__ = ["DEFAULT_PARAMETER", "ParameterRefused", "TokenParameter", "make_ssm_client", "parameter_name"]
