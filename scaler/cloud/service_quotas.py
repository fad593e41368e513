"""The account's running-vCPU quotas as Service Quotas states them (issue #38 deliverable 6): an
adapter, read by the daemon at start and every hour (``daemon.aws.quotas``) and by ``costscale
doctor`` (``daemon.doctor.quotas``).

For each (market, family) asked, ``GetServiceQuota`` with service code ``ec2`` and the family's quota
code (:func:`config.quota_families.quota_code`) gives the value applied to the account (Service
Quotas API reference, GetServiceQuota:
https://docs.aws.amazon.com/servicequotas/2019-06-24/apireference/API_GetServiceQuota.html: "Retrieves
the applied quota value ... If the applied quota value is not available for a quota, the quota is not
retrieved", answered ``NoSuchResourceException``); then the AWS default applies, which
``GetAWSDefaultServiceQuota`` gives
(https://docs.aws.amazon.com/servicequotas/2019-06-24/apireference/API_GetAWSDefaultServiceQuota.html).
A quota's ``Value`` is a number of vCPUs (a float on the wire): its whole part is the limit.

A quota that cannot be read (refused by IAM: the line names ``servicequotas:GetServiceQuota``; an
endpoint that does not answer; throttled past botocore's retries) is never raised: it is left out
of :attr:`QuotaRead.limits` and said in one line of :attr:`QuotaRead.unread`, and the caller plans
with the config's value or no cap. After a read that got no answer at all (no error code: the
endpoint unreachable) the remaining quotas are not asked, so a dead endpoint costs the daemon's start
one read's timeouts, not one per family. Calls go through :func:`scaler.cloud.aws_client.aws_call`
(botocore's standard retries).

moto (5.x) answers GetServiceQuota only for ``vpc`` quotas (``NoSuchResourceException`` for every
``ec2`` code) and has no GetAWSDefaultServiceQuota (HTTP 500): tests answer with botocore's Stubber.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Sequence

from config.quota_families import quota_code
from scaler.cloud.aws_client import aws_call, make_client
from scaler.cloud.provider import CloudError

SERVICE = "service-quotas"
#: the IAM actions of the two reads (IAM's prefix is ``servicequotas``)
GET_ACTION = "servicequotas:GetServiceQuota"
DEFAULT_ACTION = "servicequotas:GetAWSDefaultServiceQuota"
#: attempts per read: a quota not read is planned without (or with the config's), not waited on
QUOTA_ATTEMPTS = 2
#: the longest AWS message a line quotes (an emulator's error page is kilobytes)
MAX_MESSAGE = 160


class QuotaNotRead(CloudError):
    """One quota could not be read: ``code`` the AWS error code ('' when none came back)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}" if code else message)
        self.code = code


@dataclass(frozen=True)
class QuotaRead:
    """What Service Quotas said: ``limits`` (market, family) -> vCPUs; ``sources`` the code and
    whether the value is the account's applied one or AWS's default; ``unread`` one line per
    quota not read, and ``codes`` its AWS error code."""

    limits: dict[tuple[str, str], int] = field(default_factory=dict)
    sources: dict[tuple[str, str], str] = field(default_factory=dict)
    unread: dict[tuple[str, str], str] = field(default_factory=dict)
    codes: dict[tuple[str, str], str] = field(default_factory=dict)


def make_quotas_client(region: str, endpoint_url: str | None = None, max_attempts: int = QUOTA_ATTEMPTS) -> Any:
    """A Service Quotas client (standard retries, short timeouts)."""
    return make_client(SERVICE, region, max_attempts=max_attempts, connect_timeout=3, read_timeout=5,
                       endpoint_url=endpoint_url)


def _typed(code: str, message: str, attempts: int) -> CloudError | None:
    if code == "NoSuchResourceException":
        return None                    # no applied value: the caller asks for the default
    title = re.search(r"<title>(.*?)</title>", message, re.S | re.I)     # an emulator's error page: its title
    text = " ".join((title.group(1) if title else message).split())
    return QuotaNotRead(code, text if len(text) <= MAX_MESSAGE else text[:MAX_MESSAGE - 3] + "...")


def _value(answer: dict[str, Any]) -> int:
    return int(float((answer.get("Quota") or {}).get("Value", 0)))


def read_one(client: Any, market: str, family: str) -> tuple[int, str]:
    """(vCPUs, source) of one quota; QuotaNotRead (or CloudError) when it cannot be read."""
    from botocore.exceptions import ClientError

    code = quota_code(market, family)
    if code is None:
        raise QuotaNotRead("", f"AWS has no {market} quota for {family}")
    ask = {"ServiceCode": "ec2", "QuotaCode": code}
    try:
        got = aws_call("get_service_quota", lambda: client.get_service_quota(**ask), _typed, GET_ACTION)
        return _value(got), f"{code} applied"
    except ClientError:                # NoSuchResourceException: the AWS default applies
        pass
    try:
        got = aws_call("get_aws_default_service_quota", lambda: client.get_aws_default_service_quota(**ask), _typed,
                       DEFAULT_ACTION)
    except ClientError as exc:         # no default either
        raise QuotaNotRead("NoSuchResourceException", f"Service Quotas lists no {code}") from exc
    return _value(got), f"{code} AWS default"


def read_quotas(client: Any, wanted: Sequence[tuple[str, str]]) -> QuotaRead:
    """Each (market, family) of ``wanted`` read (module docstring); never raises."""
    out = QuotaRead()
    silent = ""                        # the endpoint did not answer: the other quotas are not asked
    for market, family in wanted:
        key, name = (market, family), f"{market.replace('_', '-')} {family} ({quota_code(market, family)})"
        if silent:
            out.unread[key], out.codes[key] = f"{name}: not asked ({silent})", ""
            continue
        try:
            out.limits[key], out.sources[key] = read_one(client, market, family)
        except QuotaNotRead as exc:
            out.unread[key], out.codes[key] = f"{name}: {exc}", exc.code
        except Exception as exc:       # noqa: BLE001 - no answer (CloudError from aws_call), or anything else
            out.unread[key], out.codes[key] = f"{name}: {exc}", ""
            silent = "Service Quotas did not answer"
    return out


__all__ = ["DEFAULT_ACTION", "GET_ACTION", "QuotaNotRead", "QuotaRead", "make_quotas_client", "read_one", "read_quotas"]
