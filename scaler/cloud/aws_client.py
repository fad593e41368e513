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

A refusal by IAM names the permission it lacks (``config/iam``'s documents grant them): EC2's
``UnauthorizedOperation`` says only "You are not authorized to perform this operation" and S3's
``AccessDenied`` only "Access Denied", so for a code of :data:`DENIED_CODES` whose message does not
name the IAM action, the action of the call (:func:`iam_action`) is added: ``(needs ec2:RunInstances)``.
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

#: a refusal by IAM (or an SCP, a key policy): the message should name the action refused
DENIED_CODES = frozenset({"AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "AuthorizationError",
                          "KMSAccessDeniedException"})
#: IAM actions whose name is not their API operation's (``service:Operation`` → the action)
IAM_ACTION_OF = {"s3:ListObjectsV2": "s3:ListBucket", "s3:HeadObject": "s3:GetObject"}

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
                endpoint_url: str | None = None, **extra: Any) -> Any:
    """A boto3 client of ``service`` with :func:`client_config`'s retries (``extra``: other Config
    options, e.g. ``s3={"addressing_style": "path"}``)."""
    import boto3

    cfg = client_config(max_attempts, connect_timeout=connect_timeout, read_timeout=read_timeout, **extra)
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


def iam_action(service: str, operation: str) -> str:
    """The IAM action of one call: ``service`` is IAM's prefix (``ec2``, ``ssm``, ``dynamodb``,
    ``s3``, ``sqs``, ``pricing``), ``operation`` botocore's method name (``run_instances``) or the
    API's (``RunInstances``)."""
    api = operation if operation[:1].isupper() else "".join(p[:1].upper() + p[1:] for p in operation.split("_"))
    name = f"{service}:{api}"
    return IAM_ACTION_OF.get(name, name)


def naming_action(code: str, message: str, action: str) -> str:
    """``message``, with `` (needs ACTION)`` added when ``code`` is a refusal by IAM and the message
    does not name ``action`` already (module docstring)."""
    if code not in DENIED_CODES or not action or action.lower() in message.lower():
        return message
    return f"{message} (needs {action})" if message else f"needs {action}"


def client_error_line(exc: Exception, service: str = "") -> str:
    """``CODE: message`` of a botocore ClientError in one line (:func:`error_fields`), a refusal
    naming the action of the operation that failed (``service``: IAM's prefix); other errors:
    ``Type: text``."""
    err = getattr(exc, "response", {}).get("Error", {}) if hasattr(exc, "response") else {}
    if not err.get("Code"):
        return f"{type(exc).__name__}: {exc}"
    code, message = error_fields(err)
    operation = str(getattr(exc, "operation_name", "") or "")
    message = naming_action(code, message, iam_action(service, operation) if service and operation else "")
    return f"{code}: {message}".rstrip(": ")


def aws_call(op: str, call: Callable[[], Any], typed: Typed, action: str = "") -> Any:
    """``call()`` (one boto3 call, botocore retrying inside it) at the error boundary: a
    ClientError becomes ``typed(code, message, attempts)``, the typed error to raise (None: the
    ClientError itself is raised, for a caller that judges that code); a refusal's message names
    ``action``, the call's IAM action (:func:`naming_action`); no credentials →
    ``CloudConfigError``; any other botocore failure (an unreachable endpoint, a connection that
    kept dropping) → ``CloudError``."""
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    try:
        return call()
    except ClientError as exc:
        code, message = error_fields(exc.response.get("Error", {}))
        mapped = typed(code, naming_action(code, message, action), attempts_made(exc.response))
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
