"""moto's IAM enforcement for tests: a moto server process of its own whose checks the tests switch
on and off, IAM users holding given policies, and boto3 signing as one of them.

moto's "IAM-like access control" (docs.getmoto.org, "IAM-like Access Control") checks every request
once ``INITIAL_NO_AUTH_ACTION_COUNT`` requests have passed; ``/moto-api/reset-auth`` sets that count
(``0``: from the next request on; ``inf``: never). It is a process-wide setting of moto, so it runs
in a server of its own on another 127.0.0.1 port, never in the session's shared server
(tests/conftest.py). Used by tests/cloud/test_token_permission.py and tests/cloud/test_iam_policies.py.

What moto's enforcement checks (moto 5.x, ``moto/core/responses.py``, ``moto/iam/access_control.py``),
which :func:`moto_view` follows:

* the action of the request, ``service:Operation`` (S3: the IAM action, ``s3:ListBucket`` for a
  listing); never the extra actions AWS checks beside it (``ec2:CreateTags`` for a
  RunInstances with TagSpecifications, ``iam:PassRole`` for its instance profile, ``kms:Decrypt``
  for a SecureString);
* the resource ``*`` for EC2, SSM, DynamoDB and most services: a statement whose ``Resource`` is an
  ARN never matches there (moto issues #6514, #9581); S3 (the bucket's or the object's ARN) and SQS
  (the queue's ARN) are checked against the real ARN;
* a ``Condition`` is judged with no request context (``moto/iam/policy_conditions.py``: no value
  for its key, so it holds): moto never refuses for a condition, nor shows that one holds.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from typing import Any, Iterator

import boto3
import botocore.client
import pytest

from scaler.cloud.aws_client import iam_action
from tests.conftest import free_port

REGION = "us-east-1"
#: moto's default account (the IAM users live in it)
ACCOUNT = "123456789012"
#: services whose requests moto checks against the real resource ARN (the others: ``*``)
ARN_CHECKED = ("s3", "sqs")


def moto_api(endpoint: str, path: str, body: bytes = b"") -> None:
    """POST to moto's own API (``reset``, ``reset-auth``)."""
    req = urllib.request.Request(f"{endpoint}/moto-api/{path}", data=body, method="POST",
                                 headers={"Content-Type": "application/octet-stream"})
    with urllib.request.urlopen(req, timeout=10) as resp:  # loopback only
        resp.read()


def enforce(endpoint: str, on: bool) -> None:
    """moto's IAM checks from the next request on (``0``), or never (``inf``)."""
    moto_api(endpoint, "reset-auth", b"0" if on else b"inf")


@pytest.fixture(scope="module")
def iam_server() -> Iterator[str]:
    """A moto server process of its own on 127.0.0.1 whose IAM enforcement the tests switch."""
    port = free_port()
    env = dict(os.environ, INITIAL_NO_AUTH_ACTION_COUNT="inf")
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        up = False
        while not up:                            # until it answers, or died: waits on the process, not a sleep
            try:
                moto_api(endpoint, "reset")
                up = True
            except OSError:
                try:
                    proc.wait(timeout=0.05)
                    break                        # exited: it will not answer
                except subprocess.TimeoutExpired:
                    pass
        assert up, f"moto server did not start (exit {proc.poll()})"
        yield endpoint
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def admin(endpoint: str) -> dict[str, Any]:
    """boto3 client arguments for moto's unchecked root keys (only while enforcement is off)."""
    return {"region_name": REGION, "endpoint_url": endpoint, "aws_access_key_id": "testing",
            "aws_secret_access_key": "testing", "aws_session_token": None}


def create_user(endpoint: str, user: str, policies: dict[str, dict[str, Any]]) -> dict[str, str]:
    """An IAM user holding each of ``policies`` (name → document) as an inline policy, and its
    access key as the environment that makes boto3 (and a ``costscale`` process) sign as it."""
    iam = boto3.client("iam", **admin(endpoint))
    iam.create_user(UserName=user)
    for name, doc in policies.items():
        iam.put_user_policy(UserName=user, PolicyName=name, PolicyDocument=json.dumps(doc))
    key = iam.create_access_key(UserName=user)["AccessKey"]
    return {"AWS_ACCESS_KEY_ID": key["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"],
            "AWS_ENDPOINT_URL": endpoint, "AWS_DEFAULT_REGION": REGION}


def as_user(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    """boto3's credential chain (what ``make_client`` uses) resolves to ``env``'s keys from now on
    (a new default session: the old one holds the keys it resolved first)."""
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
    for k in ("AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)


def _service(action: str) -> str:
    return action.split(":", 1)[0]


def moto_view(doc: dict[str, Any]) -> dict[str, Any]:
    """A (filled) policy document as moto can judge it (module docstring): each statement's
    ``Resource`` ``*`` unless every action is of a service moto checks against ARNs (S3, SQS),
    whose ARNs are kept. The actions and conditions are never changed."""
    out = []
    for st in doc["Statement"]:
        st = dict(st)
        actions = [st["Action"]] if isinstance(st["Action"], str) else st["Action"]
        if not all(_service(a) in ARN_CHECKED for a in actions):
            st["Resource"] = "*"
        out.append(st)
    return {**doc, "Statement": out}


@pytest.fixture()
def calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, list[Any]]]:
    """The IAM action of every boto3 call made while the test runs (botocore's ``_make_api_call``),
    each with the parameters of its calls."""
    seen: dict[str, list[Any]] = {}
    orig = botocore.client.BaseClient._make_api_call

    def record(self: Any, operation_name: str, api_params: Any) -> Any:
        seen.setdefault(iam_action(self.meta.service_model.signing_name, operation_name), []).append(api_params)
        return orig(self, operation_name, api_params)

    monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", record)
    yield seen


__all__ = ["ACCOUNT", "ARN_CHECKED", "REGION", "admin", "as_user", "calls", "create_user", "enforce", "iam_server",
           "moto_api", "moto_view"]
