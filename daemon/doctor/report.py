"""What one pre-flight check found (issue #38, deliverable 5): a :class:`Finding` per check, its one
line (``ok|warn|fail  CHECK  what it found; what to change (AWS error code)``), the JSON of a whole
run, the exit code (1 on any fail), and the one-line text of an AWS failure (never a traceback,
never a secret: a message is cut at :data:`MAX_DETAIL` characters, an HTML error page to its title).

Also the clients the checks call: botocore's standard retries with few attempts and short
timeouts (``scaler.cloud.aws_client``), at the config's ``aws.endpoint_url`` when one is set.
"""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from typing import Any, Callable, Literal, Sequence

from config.schema import Config
from scaler.cloud.aws_client import DENIED_CODES, client_error_line, error_fields, make_client
from scaler.pricing.region import PRICING_REGION

Status = Literal["ok", "warn", "fail"]
#: the longest AWS message a line quotes (an emulator's error page is kilobytes)
MAX_DETAIL = 200
#: attempts per pre-flight call: a check that waits a minute on a dead endpoint helps nobody
DOCTOR_ATTEMPTS = 2


@dataclass(frozen=True)
class Finding:
    """One check's verdict: ``found`` what it saw, ``change`` what to do (empty when ok), ``code``
    the AWS error code behind it (empty when none)."""

    status: Status
    check: str
    found: str
    change: str = ""
    code: str = ""

    def line(self) -> str:
        """``STATUS  CHECK  found; change (code)`` on one line."""
        text = self.found + (f"; {self.change}" if self.change else "") + (f" ({self.code})" if self.code else "")
        return f"{self.status:<4}  {self.check:<11}  {' '.join(text.split())}"


def exit_code(findings: Sequence[Finding]) -> int:
    """1 when any check failed, else 0 (warnings pass)."""
    return 1 if any(f.status == "fail" for f in findings) else 0


def as_json(findings: Sequence[Finding]) -> str:
    """The run as JSON: ``{"ok": bool, "checks": [{status, check, found, change, code, line}]}``."""
    return json.dumps({"ok": exit_code(findings) == 0,
                       "checks": [{**asdict(f), "line": f.line()} for f in findings]}, indent=2)


def short(text: str) -> str:
    """``text`` on one line, at most :data:`MAX_DETAIL` characters; an HTML page by its title."""
    title = re.search(r"<title>(.*?)</title>", text, re.S | re.I)
    flat = " ".join((title.group(1) if title else text).split())
    return flat if len(flat) <= MAX_DETAIL else flat[:MAX_DETAIL - 3] + "..."


def failure(exc: BaseException, service: str = "") -> tuple[str, str]:
    """(AWS error code, one-line message) of a failed call: a ClientError's code and message (a
    refusal naming its IAM action), else ('', the exception's first line)."""
    err = getattr(exc, "response", None)
    if isinstance(err, dict) and (err.get("Error") or {}).get("Code"):
        code, _ = error_fields(err["Error"])
        line = client_error_line(exc, service)
        return code, short(line[len(code) + 2:] if line.startswith(f"{code}: ") else line)
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return "", short(text)


def unread(check: str, what: str, code: str, msg: str) -> Finding | None:
    """The warning for a read the caller may not make (an IAM refusal of a describe call the daemon
    itself never makes, so control-host.json does not grant it: config/iam/doctor.json does);
    None for any other failure (the check judges it)."""
    if code not in DENIED_CODES:
        return None
    return Finding("warn", check, f"{what} not checked: {msg}", "attach config/iam/doctor.json (doctor's reads) to "
                   "whoever runs it", code)


Clients = Callable[[str], Any]


def clients_for(cfg: Config) -> Clients:
    """A factory of boto3 clients (``service`` → client) for the checks: the config's region and
    endpoint, :data:`DOCTOR_ATTEMPTS` attempts, short timeouts; S3 path-style at an emulator."""
    made: dict[str, Any] = {}

    def client(service: str) -> Any:
        if service not in made:
            extra = {"s3": {"addressing_style": "path"}} if service == "s3" and cfg.aws.endpoint_url else {}
            region = PRICING_REGION if service == "pricing" else cfg.region
            made[service] = make_client(service, region, max_attempts=DOCTOR_ATTEMPTS, connect_timeout=3,
                                        read_timeout=10, endpoint_url=cfg.aws.endpoint_url, **extra)
        return made[service]

    return client


__all__ = ["Clients", "Finding", "MAX_DETAIL", "Status", "as_json", "clients_for", "exit_code", "failure", "short",
           "unread"]
