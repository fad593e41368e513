"""The boto3 clients costscale builds (EC2, DynamoDB, the Price List API) and the error boundary of
one call on them.

Retries are botocore's own, in its ``standard`` retry mode, on every client: ``client_config``
is the one place that sets it. botocore then retries, with its exponential backoff and full
jitter (capped at 20 s), every transient fault of a call:

* throttling (RequestLimitExceeded, Throttling, ThrottlingException, TooManyRequestsException, an
  HTTP 429, ...);
* a 500/502/503/504 (InternalError, Unavailable, ServiceUnavailable, ...) and RequestTimeout;
* a dropped connection, a refused connect or a read timeout (botocore's ConnectionError and
  HTTPClientError: ConnectionClosedError, EndpointConnectionError, ReadTimeoutError);

up to ``total_max_attempts`` attempts in all, each a new signed request of the same parameters
(a RunInstances retried keeps its ClientToken, which is what makes the retry safe: EC2 launches
once per token). A per-client retry quota (a token bucket that retries draw from and successes
refill) stops retrying for a while when an endpoint keeps failing, so an outage costs one attempt
per call instead of ``total_max_attempts``.

Why ``standard`` and not ``adaptive``: adaptive is standard plus a client-side rate limiter (a
token bucket that, once throttled, makes every later request of the client wait for a token,
without bound by ``total_max_attempts``), and AWS marks it experimental. costscale makes a few
calls a tick; when EC2 throttles it, the account's shared API budget is spent by others, which one
process's limiter cannot see, and a limiter that stalls every call of the client would also stall
the terminations of a shutdown and the listings of reconciliation. Standard's bounded retries
with backoff are what the fleet loop needs: a call ends, retried or failed, in bounded time, and
the next tick tries again.

``aws_call`` is the error boundary: what botocore gives up on becomes ``scaler.cloud.provider``'s typed
errors, judged by each adapter (``typed``), with the number of attempts made. The code and message
it hands them are one line each (``error_fields``): when botocore could not parse an error body
(an XML error document from an endpoint of a JSON service, as moto's IAM checks send, or a proxy's
page), botocore's code is the bare HTTP status and its message the raw body; the document's own
``Code`` and ``Message`` are used then.
"""
from __future__ import annotations

from typing import Any, Callable

from scaler.cloud.provider import CloudConfigError, CloudError

RETRY_MODE = "standard"
EC2_MAX_ATTEMPTS = 8          # the EC2 default (config ``aws.max_attempts``)

# The AWS error codes every adapter (EC2, DynamoDB, SSM) types its errors by, one home:
#: throttling that outlasted botocore's retries: the call is refused for now, nothing happened
THROTTLE_CODES = frozenset({"RequestLimitExceeded", "Throttling", "ThrottlingException", "RequestThrottled",
                            "TooManyRequestsException", "EC2ThrottledException"})
#: a refusal that is the same on every retry (credentials, permissions, opt-in, a reused client
#: token with other parameters): a configuration error, not a transient fault
AUTH_CODES = frozenset({"AuthFailure", "UnauthorizedOperation", "InvalidClientTokenId", "SignatureDoesNotMatch",
                        "OptInRequired", "Blocked", "MissingParameter", "MissingAuthenticationToken",
                        "ExpiredToken", "AccessDenied", "AccessDeniedException", "IdempotentParameterMismatch"})

# (code, message, attempts made) → the typed error to raise, or None: the ClientError itself.
Typed = Callable[[str, str, int], "CloudError | None"]


def client_config(max_attempts: int, *, connect_timeout: float, read_timeout: float, **extra: Any) -> Any:
    """A botocore ``Config``: botocore's ``standard`` retry mode with ``max_attempts`` attempts in
    all (1: no retry), the given timeouts, and any other Config option in ``extra``."""
    from botocore.config import Config as BotoConfig

    if max_attempts < 1:
        raise ValueError("max_attempts must be >= 1")
    return BotoConfig(retries={"mode": RETRY_MODE, "total_max_attempts": int(max_attempts)},
                      connect_timeout=connect_timeout, read_timeout=read_timeout, **extra)


def make_client(service: str, region: str, *, max_attempts: int, connect_timeout: float, read_timeout: float,
                endpoint_url: str | None = None) -> Any:
    """A boto3 client of ``service`` with :func:`client_config`'s retries."""
    import boto3

    cfg = client_config(max_attempts, connect_timeout=connect_timeout, read_timeout=read_timeout)
    return boto3.client(service, region_name=region, endpoint_url=endpoint_url, config=cfg)


def attempts_made(response: dict[str, Any]) -> int:
    """The attempts a call made (botocore's ``RetryAttempts`` of the response metadata, plus one)."""
    meta = response.get("ResponseMetadata") or {}
    try:
        return int(meta.get("RetryAttempts", 0)) + 1
    except (TypeError, ValueError):
        return 1


def error_fields(error: dict[str, Any]) -> tuple[str, str]:
    """The code and the one-line message of a ClientError's ``Error`` (module docstring): botocore's,
    or, when its code is a bare HTTP status and its message an XML error document, the document's
    ``Code`` and ``Message``; whitespace (newlines included) collapsed."""
    import xml.etree.ElementTree as ET

    code, message = str(error.get("Code", "")), str(error.get("Message", ""))
    if code.isdigit() and message.lstrip().startswith("<"):
        try:
            root = ET.fromstring(message.strip())
        except ET.ParseError:
            root = None
        if root is not None:
            found = {el.tag.rpartition("}")[2]: (el.text or "").strip() for el in root.iter()}
            code = found.get("Code") or code
            message = found.get("Message") or code
    return code, " ".join(message.split()) or code


def aws_call(op: str, call: Callable[[], Any], typed: Typed) -> Any:
    """``call()`` (one boto3 call, botocore retrying inside it) at the error boundary: a
    ClientError becomes ``typed(code, message, attempts)``, the typed error to raise (None: the
    ClientError itself is raised, for a caller that judges that code); no credentials →
    ``CloudConfigError``; any other botocore failure (an unreachable endpoint, a connection that
    kept dropping) → ``CloudError``."""
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    try:
        return call()
    except ClientError as exc:
        code, message = error_fields(exc.response.get("Error", {}))
        mapped = typed(code, message, attempts_made(exc.response))
        if mapped is None:
            raise
        raise mapped from None
    except NoCredentialsError as exc:
        raise CloudConfigError(f"{op}: no AWS credentials ({exc})") from None
    except BotoCoreError as exc:
        raise CloudError(f"{op}: {exc}") from None


def after(attempts: int) -> str:
    """`` after N attempts`` for a message, when the call was retried."""
    return f" after {attempts} attempts" if attempts > 1 else ""
