"""The cluster token is guarded by IAM, never by user data (issue #27, goal "Security"):

* every instance the daemon launches (on-demand and spot, several per call) carries user data
  that names the token's SSM parameter and holds no token: the test reads back what moto
  received (``describe_instance_attribute(Attribute='userData')``) for every instance it holds;
* a worker whose credentials lack ``ssm:GetParameter`` on that parameter cannot register: the
  ``costscale worker`` command exits 2 with one line naming the parameter and the permission, and
  a live dispatcher never lists it; the same command with a permitted user's keys registers.

IAM is enforced by moto's "IAM-like access control" in a moto server process of its own
(``tests.iam_helpers``: ``INITIAL_NO_AUTH_ACTION_COUNT``, ``/moto-api/reset-auth``). Limits of moto's
enforcement (moto issues #6514, #9581): SSM requests are checked against the resource ``*``, so a
policy's ``Resource`` must be ``*`` to match (a policy scoped to the parameter's ARN, as the README
advises on AWS, is refused by moto), and ``kms:Decrypt`` is not checked for a SecureString.
"""
from __future__ import annotations

import asyncio
import base64
import os
import sys
from pathlib import Path
from typing import Any, Iterator

import boto3
import pytest

from tests.iam_helpers import ACCOUNT, REGION, admin, as_user, create_user, enforce, moto_api
from tests.iam_helpers import iam_server  # noqa: F401  (the fixture)

REPO = Path(__file__).resolve().parents[2]
PARAM = "/costscale/perm/cluster-token"
TOKEN = "perm-token-0123456789abcdef"
#: what each IAM user may do (moto matches SSM requests against the resource "*": module docstring)
POLICIES: dict[str, list[dict[str, Any]]] = {
    "no-ssm": [{"Effect": "Allow", "Action": ["ec2:Describe*", "sts:GetCallerIdentity"], "Resource": "*"}],
    "denied": [{"Effect": "Allow", "Action": "ssm:*", "Resource": "*"},
               {"Effect": "Deny", "Action": "ssm:GetParameter", "Resource": "*"}],
    "permitted": [{"Effect": "Allow", "Action": ["ssm:GetParameter", "kms:Decrypt"], "Resource": "*"}],
}


@pytest.fixture()
def iam_keys(iam_server: str) -> Iterator[dict[str, dict[str, str]]]:
    """A fresh account on ``iam_server``: the token in its SecureString parameter, an IAM user per
    policy of :data:`POLICIES` with an access key; IAM enforced for the test, off again after it.
    Yields user -> the environment that makes boto3 (and ``costscale worker``) sign as that user."""
    enforce(iam_server, False)
    moto_api(iam_server, "reset")
    boto3.client("ssm", **admin(iam_server)).put_parameter(Name=PARAM, Value=TOKEN, Type="SecureString")
    keys = {user: create_user(iam_server, user, {f"{user}-policy": {"Version": "2012-10-17", "Statement": statements}})
            for user, statements in POLICIES.items()}
    enforce(iam_server, True)
    try:
        yield keys
    finally:
        enforce(iam_server, False)


def test_iam_is_enforced_on_the_parameter(iam_server: str, iam_keys: dict[str, dict[str, str]]) -> None:
    """The premise of the tests below: moto refuses GetParameter without the permission (and with
    the test's fake root keys), and answers it with."""
    from botocore.exceptions import ClientError

    def get(env: dict[str, str]) -> str:
        ssm = boto3.client("ssm", region_name=REGION, endpoint_url=iam_server, aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                           aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"], aws_session_token=None)
        return str(ssm.get_parameter(Name=PARAM, WithDecryption=True)["Parameter"]["Value"])

    assert get(iam_keys["permitted"]) == TOKEN
    for user in ("no-ssm", "denied"):
        with pytest.raises(ClientError) as exc:
            get(iam_keys[user])
        assert exc.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    with pytest.raises(ClientError):
        get({"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"})


@pytest.mark.parametrize("user", ["no-ssm", "denied"])
def test_the_worker_without_ssm_get_parameter_gets_no_token_and_one_line(
        user: str, iam_keys: dict[str, dict[str, str]], monkeypatch: pytest.MonkeyPatch) -> None:
    from config.errors import UsageError
    from daemon.commands.worker import _token_from_parameter

    as_user(monkeypatch, iam_keys[user])
    with pytest.raises(UsageError) as exc:
        _token_from_parameter(PARAM)
    msg = str(exc.value)
    assert exc.value.exit_code == 2 and exc.value.lines == [msg]
    assert msg == (f"--token-parameter: SSM in us-east-1 refused ssm:GetParameter on {PARAM} (AccessDenied: User: "
                   f"arn:aws:iam::{ACCOUNT}:user/{user} is not authorized to perform: ssm:GetParameter); the instance "
                   "profile needs ssm:GetParameter on it (and kms:Decrypt with a customer-managed key)")
    as_user(monkeypatch, iam_keys["permitted"])
    token, again = _token_from_parameter(PARAM)
    assert token == TOKEN and again() == TOKEN


def test_no_launch_carries_the_token_in_its_user_data(moto_endpoint: str, tmp_path: Path) -> None:
    """The daemon's own EC2 provider (``AwsWiring.open``, spot section included) launches on-demand
    (two in one call) and spot in two zones; every instance moto holds afterwards, read back through
    describe_instance_attribute, names the parameter and holds neither the token nor its variable."""
    from daemon.aws.wiring import AwsWiring
    from daemon.demos.demo_config import demo_config

    ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=moto_endpoint)
    ami = ec2.describe_images()["Images"][0]["ImageId"]
    base = demo_config(tmp_path, moto_endpoint, ami, 2.5, 2.0)
    raw = base.model_dump()
    raw["instance_types"] = [{**t, "market": "both"} for t in raw["instance_types"]]
    raw["spot"] = {"zones": {"us-east-1a": None, "us-east-1b": None}}
    cfg = type(base).model_validate(raw)
    token = cfg.dispatcher.token()
    assert token
    wiring = AwsWiring(cfg, None)
    cloud = wiring.open()
    try:
        itype = raw["instance_types"][0]["type"]
        launched = (cloud.launch(itype, 1, "intent-ud-od1") + cloud.launch(itype, 1, "intent-ud-od2")
                    + cloud.launch(f"{itype}@us-east-1a", 1, "intent-ud-a")
                    + cloud.launch(f"{itype}@us-east-1b", 1, "intent-ud-b"))
        ids = [i.instance_id for i in launched]
        held = [inst for res in ec2.describe_instances()["Reservations"] for inst in res["Instances"]]
        assert sorted(i["InstanceId"] for i in held) == sorted(ids) and len(ids) == 4
        assert sorted(i.get("InstanceLifecycle", "on-demand") for i in held) == ["on-demand", "on-demand", "spot",
                                                                                   "spot"]
        name = f"/costscale/{cfg.cluster}/cluster-token"
        for iid in ids:
            data = ec2.describe_instance_attribute(InstanceId=iid, Attribute="userData")["UserData"]["Value"]
            text = base64.b64decode(data).decode()
            assert token not in text and "COSTSCALE_CLUSTER_TOKEN" not in text, iid
            assert f"export COSTSCALE_TOKEN_PARAMETER={name}\n" in text, iid
        cloud.terminate(ids)
    finally:
        if wiring.lease is not None:
            wiring.lease.release()


async def _worker(dispatcher_port: int, iid: str, keys: dict[str, str], cache: Path) -> asyncio.subprocess.Process:
    """``costscale worker`` as user data starts it, signing to AWS with ``keys`` (its "instance profile")."""
    env = {k: v for k, v in os.environ.items() if k not in ("AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_REGION",
                                                            "COSTSCALE_CLUSTER_TOKEN")}
    # this checkout's code (the installed ``costscale`` script may point at another one)
    env.update(keys, PYTHONPATH=str(REPO), COSTSCALE_TOKEN_PARAMETER=PARAM, COSTSCALE_INSTANCE_ID=iid,
               COSTSCALE_INSTANCE_TYPE="c5n.2xlarge")
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "daemon.cli", "worker", "--listen", "127.0.0.1:0", "--dispatcher", f"127.0.0.1:{dispatcher_port}",
        "--model", "rm2=builtin:mlp", "--cache-dir", str(cache), "--threads", "1", "--register-attempts", "40",
        cwd=REPO, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)


def test_a_worker_without_ssm_get_parameter_cannot_register_and_one_with_it_does(
        iam_keys: dict[str, dict[str, str]], tmp_path: Path) -> None:
    """A live dispatcher expecting both instances, whose token is the parameter's. The worker of a
    user without ssm:GetParameter exits 2 with one line and is never listed; the same command with
    the permitted user's keys reads the token and registers."""
    from dispatcher.latency_model import LatencyModel
    from dispatcher.server import Dispatcher
    from tests.dispatcher.test_modelless import _cfg

    base = _cfg(tmp_path)
    cfg = base.model_copy(update={"dispatcher": base.dispatcher.model_copy(update={"cluster_token": TOKEN})})

    async def go() -> None:
        d = Dispatcher(cfg, LatencyModel())
        port = await d.start("127.0.0.1:0")
        for iid in ("i-denied", "i-permitted"):
            d.allow_instance(iid, "c5n.2xlarge")
        permitted: asyncio.subprocess.Process | None = None
        try:
            denied = await _worker(port, "i-denied", iam_keys["no-ssm"], tmp_path / "cache")
            out, err = await asyncio.wait_for(denied.communicate(), 60)
            assert denied.returncode == 2, err.decode()
            assert err.decode() == (
                f"costscale: --token-parameter: SSM in us-east-1 refused ssm:GetParameter on {PARAM} (AccessDenied: "
                f"User: arn:aws:iam::{ACCOUNT}:user/no-ssm is not authorized to perform: ssm:GetParameter); the "
                "instance profile needs ssm:GetParameter on it (and kms:Decrypt with a customer-managed key)\n")
            assert out == b"" and "i-denied" not in d.workers
            permitted = await _worker(port, "i-permitted", iam_keys["permitted"], tmp_path / "cache")
            assert permitted.stdout is not None
            first = (await asyncio.wait_for(permitted.stdout.readline(), 60)).decode()
            assert first.startswith("listening 127.0.0.1:"), first
            while "i-permitted" not in d.workers and permitted.returncode is None:   # until it registers (or exits)
                await asyncio.sleep(0.025)
            assert set(d.workers) == {"i-permitted"}, permitted.returncode
            assert await d.workers["i-permitted"].client.health(10)
        finally:
            if permitted is not None and permitted.returncode is None:
                permitted.terminate()
                await asyncio.wait_for(permitted.wait(), 20)
            await d.stop(0.0)

    asyncio.run(asyncio.wait_for(go(), 120))
