"""``costscale init --from-stack NAME [--region R] [--out PATH] [--force]``: a config file from a
costscale CloudFormation stack's outputs (issue #38, deliverable 4; ``config/stack/costscale-stack.yaml``).

Reads the stack with ``cloudformation:DescribeStacks`` and writes :func:`config.stack.outputs.config_text`
to PATH (default ``costscale.yaml``), mode 0600, never over an existing file without ``--force``. What the
stack cannot know is left as ``FILL IN`` placeholders that ``costscale validate`` refuses until written.
A missing stack, a stack not (yet) complete, or one without costscale's outputs: one line, exit 2;
AWS unreachable: one line, exit 1. ``--endpoint-url``: an emulator (moto), also written as
``aws.endpoint_url``."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from config.errors import UsageError

#: the statuses of a stack whose outputs are those of its template (CloudFormation's StackStatus values)
READY = frozenset({"CREATE_COMPLETE", "UPDATE_COMPLETE", "UPDATE_ROLLBACK_COMPLETE", "IMPORT_COMPLETE",
                   "IMPORT_ROLLBACK_COMPLETE"})


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("init", help="write a config file from a costscale CloudFormation stack's outputs")
    p.add_argument("--from-stack", required=True, metavar="NAME", help="the stack (config/stack/costscale-stack.yaml)")
    p.add_argument("--region", help="the stack's region (default: the AWS configuration's)")
    p.add_argument("--out", default="costscale.yaml", metavar="PATH", help="the config file to write [costscale.yaml]")
    p.add_argument("--force", action="store_true", help="overwrite PATH if it exists")
    p.add_argument("--endpoint-url", metavar="URL", help="an AWS emulator (moto) instead of AWS; written into the "
                                                         "config as aws.endpoint_url")
    p.set_defaults(func=run)


def _region(given: str | None) -> str:
    if given:
        return given
    import boto3

    region = boto3.session.Session().region_name
    if not region:
        raise UsageError("costscale init: no AWS region configured: give --region")
    return str(region)


def stack_outputs(name: str, region: str, endpoint_url: str | None) -> dict[str, str]:
    """The outputs of stack ``name`` (OutputKey → OutputValue); UsageError for a missing or unready stack."""
    from scaler.cloud.aws_client import AUTH_CODES, after, aws_call, iam_action, make_client
    from scaler.cloud.provider import CloudConfigError, CloudError

    def typed(code: str, msg: str, attempts: int) -> CloudError:
        if code == "ValidationError" and "does not exist" in msg:
            return CloudConfigError(f"stack {name} not found in {region}")
        if code == "ValidationError" or code in AUTH_CODES or "Token" in code or "Signature" in code:
            return CloudConfigError(f"describe stack {name}: {code}: {msg}")      # the caller's to fix: exit 2
        return CloudError(f"describe stack {name}: {code}: {msg}{after(attempts)}")  # throttled, 5xx: exit 1

    cfn = make_client("cloudformation", region, endpoint_url=endpoint_url, max_attempts=3, connect_timeout=5,
                      read_timeout=15)
    try:
        resp = aws_call("cloudformation describe_stacks", lambda: cfn.describe_stacks(StackName=name), typed,
                        iam_action("cloudformation", "DescribeStacks"))
    except CloudConfigError as exc:
        raise UsageError(f"costscale init: {exc}") from None
    stacks: list[dict[str, Any]] = resp.get("Stacks") or []
    if not stacks:
        raise UsageError(f"costscale init: stack {name} not found in {region}")
    status = str(stacks[0].get("StackStatus", ""))
    if status not in READY:
        raise UsageError(f"costscale init: stack {name} is {status}, not complete: wait for it, or fix and redeploy it")
    return {str(o["OutputKey"]): str(o.get("OutputValue", "")) for o in stacks[0].get("Outputs") or []}


def write_new(path: Path, text: str, force: bool) -> None:
    """``text`` into ``path`` as a 0600 file: created (refused when it exists) or, with ``force``,
    replaced atomically."""
    from config.files import replace_atomic

    if force:
        replace_atomic(path, lambda tmp: (tmp.write_text(text), os.chmod(tmp, 0o600)))
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise UsageError(f"costscale init: {path} exists: give --force to overwrite it, or --out another path") from None
    except OSError as exc:
        raise UsageError(f"costscale init: cannot write {path}: {exc.strerror}") from None
    with os.fdopen(fd, "w") as f:
        f.write(text)


def run(args: argparse.Namespace) -> int:
    from config.stack.outputs import config_text, missing_outputs
    from scaler.cloud.provider import CloudError

    out = Path(args.out)
    if out.exists() and not args.force:     # before any AWS call (the write itself refuses too: O_EXCL)
        raise UsageError(f"costscale init: {out} exists: give --force to overwrite it, or --out another path")
    region = _region(args.region)
    try:
        outputs = stack_outputs(args.from_stack, region, args.endpoint_url)
    except CloudError as exc:
        print(f"costscale init: {exc}", file=sys.stderr)
        return 1
    missing = missing_outputs(outputs)
    if missing:
        raise UsageError(f"costscale init: stack {args.from_stack} has no output {', '.join(missing)}: is it made from "
                         "config/stack/costscale-stack.yaml?")
    text = config_text(args.from_stack, outputs, args.endpoint_url)
    write_new(out, text, args.force)
    print(f"{out}: written from stack {args.from_stack} ({region}); fill in each FILL IN, then costscale validate {out}")
    return 0
