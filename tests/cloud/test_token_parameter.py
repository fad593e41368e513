"""No secret in user data (issue #27, deliverable 5): the cluster token lives in an SSM SecureString
parameter, user data names the parameter, the worker reads it with its instance profile, and a
token overwritten in the parameter is picked up by the dispatcher and the workers without a
restart (the old one stays valid meanwhile). moto serves SSM and EC2 on 127.0.0.1."""
from __future__ import annotations

import asyncio
import base64
from pathlib import Path

import boto3
import grpc
import pytest

from config.errors import UsageError
from dispatcher.auth import TokenRing
from dispatcher.latency_model import LatencyModel
from dispatcher.proto import costscale_pb2 as pb, costscale_pb2_grpc as pbg
from dispatcher.server import Dispatcher
from scaler.cloud.ec2 import Ec2Cloud, build_user_data
from scaler.cloud.token_parameter import TokenParameter, parameter_name


class _Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_a_rotated_token_stays_valid_for_the_grace_and_is_sent_for_half_of_it() -> None:
    clock = _Clock()
    ring = TokenRing("old", grace_s=600.0, clock=clock)
    assert ring.accepts("old") and not ring.accepts("new") and ring.outbound() == "old"
    assert not ring.set("old") and ring.set("new")
    clock.t += 299.0             # first half: both accepted, the old one still sent (a peer may not know the new)
    assert ring.accepts("new") and ring.accepts("old") and ring.outbound() == "old"
    clock.t += 2.0               # second half: the new one sent, the old still accepted
    assert ring.outbound() == "new" and ring.accepts("old")
    clock.t += 300.0             # past the grace: the old one refused
    assert ring.accepts("new") and not ring.accepts("old") and not ring.accepts(None)
    with pytest.raises(ValueError):
        TokenRing("")


def test_user_data_names_the_parameter_never_the_token() -> None:
    text = build_user_data("c1", "10.0.0.5:50051", cluster_token="s3cret-token",
                           token_parameter="/costscale/c1/cluster-token")
    assert "s3cret-token" not in text
    assert "export COSTSCALE_TOKEN_PARAMETER=/costscale/c1/cluster-token" in text
    assert "export AWS_DEFAULT_REGION=$(md placement/region)" in text
    # without a parameter (dispatcher.token_parameter: '') the token goes in, as before
    assert "export COSTSCALE_CLUSTER_TOKEN=s3cret-token" in build_user_data("c1", None, cluster_token="s3cret-token")
    assert parameter_name("/costscale/{cluster}/cluster-token", "prod") == "/costscale/prod/cluster-token"


def test_the_parameter_is_a_securestring_and_its_value_wins(moto_endpoint: str) -> None:
    ssm = boto3.client("ssm", region_name="us-east-1", endpoint_url=moto_endpoint)
    p = TokenParameter(ssm, "/costscale/wins/cluster-token")
    assert p.read() is None
    assert p.publish("first") == "first"
    desc = ssm.describe_parameters(ParameterFilters=[{"Key": "Name", "Values": [p.name]}])["Parameters"]
    assert [d["Type"] for d in desc] == ["SecureString"]
    # a later daemon with another token uses the parameter's (it may have been rotated there)
    assert p.publish("second") == "first" and p.read() == "first"


def test_a_launched_instance_has_the_parameter_name_in_its_user_data(moto_endpoint: str) -> None:
    from config.schema import LaunchSpec

    ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=moto_endpoint)
    ami = ec2.describe_images()["Images"][0]["ImageId"]
    cloud = Ec2Cloud("ud-check", "us-east-1", LaunchSpec(ami_id=ami), client=ec2, dispatcher="10.0.0.5:50051",
                     token_parameter="/costscale/ud-check/cluster-token")
    [inst] = cloud.launch("c5n.2xlarge", 1, "intent-ud-1")
    raw = ec2.describe_instance_attribute(InstanceId=inst.instance_id, Attribute="userData")["UserData"]["Value"]
    text = base64.b64decode(raw).decode()
    assert "COSTSCALE_TOKEN_PARAMETER=/costscale/ud-check/cluster-token" in text
    assert "COSTSCALE_CLUSTER_TOKEN" not in text


def test_the_worker_reads_its_token_from_the_parameter_or_says_why_not(moto_endpoint: str,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from daemon.commands.worker import _token_from_parameter

    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    with pytest.raises(UsageError, match="--token-parameter: no region"):
        _token_from_parameter("/costscale/w/cluster-token")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with pytest.raises(UsageError, match="SSM parameter /costscale/w/cluster-token does not exist in us-east-1"):
        _token_from_parameter("/costscale/w/cluster-token")
    ssm = boto3.client("ssm", region_name="us-east-1", endpoint_url=moto_endpoint)
    TokenParameter(ssm, "/costscale/w/cluster-token").publish("w-token")
    token, again = _token_from_parameter("/costscale/w/cluster-token")
    assert token == "w-token"
    ssm.put_parameter(Name="/costscale/w/cluster-token", Value="w-token-2", Type="SecureString", Overwrite=True)
    assert again() == "w-token-2"


def test_rotation_reaches_the_dispatcher_and_a_worker_without_a_restart(moto_endpoint: str, tmp_path: Path) -> None:
    """The parameter holds A; a worker (reading it) registers and serves. The parameter is
    overwritten with B and the dispatcher reads it first: the worker, which has not, is still called
    (the dispatcher presents A for half the grace), and a new worker presenting B registers. The
    first worker reads B (its minute, shortened here): it takes B and still A. Past half the grace
    the dispatcher presents B, which both workers take; past the grace, A is refused."""
    from dispatcher.workers.client import WorkerClient
    from tests.dispatcher.test_modelless import _cfg
    from worker.options import WorkerOptions
    from worker.server import serve_worker

    ssm = boto3.client("ssm", region_name="us-east-1", endpoint_url=moto_endpoint)
    param = TokenParameter(ssm, "/costscale/rot/cluster-token")
    param.publish("token-A")
    base = _cfg(tmp_path)
    cfg = base.model_copy(update={"dispatcher": base.dispatcher.model_copy(update={"cluster_token": "token-A"})})

    async def go() -> None:
        d = Dispatcher(cfg, LatencyModel())
        port = await d.start("127.0.0.1:0")
        clock = _Clock()
        assert d._token is not None
        d._token.clock = clock
        stop = asyncio.Event()
        tasks: list[asyncio.Task] = []   # type: ignore[type-arg]
        refresh = {"s": 3600.0}

        def worker(iid: str, token: str) -> WorkerOptions:
            d.allow_instance(iid, "c5n.2xlarge")
            return WorkerOptions(instance_id=iid, instance_type="c5n.2xlarge", models={"rm2": "builtin:mlp"},
                                 cache_dir=tmp_path / "cache", threads=1, listen="127.0.0.1:0",
                                 dispatcher=f"127.0.0.1:{port}", token=token, token_fetch=param.read,
                                 token_refresh_s=refresh["s"], register_attempts=20, register_backoff_s=0.05)

        async def registered(iid: str) -> None:
            for _ in range(400):
                if iid in d.workers or any(t.done() for t in tasks):
                    break
                await asyncio.sleep(0.025)
            assert iid in d.workers, [t.result() for t in tasks if t.done()]

        async def takes(iid: str, token: str) -> bool:
            c = WorkerClient(d.workers[iid].address, token=token)
            try:
                await c.health(10)
                return True
            except grpc.aio.AioRpcError as exc:
                assert exc.code() == grpc.StatusCode.UNAUTHENTICATED
                return False
            finally:
                await c.close()

        try:
            refresh["s"] = 0.1                      # the first worker reads its parameter every 0.1 s
            ssm.put_parameter(Name=param.name, Value="token-A", Type="SecureString", Overwrite=True)
            tasks.append(asyncio.create_task(serve_worker(worker("i-1", "token-A"), stop=stop)))
            await registered("i-1")
            assert await d.workers["i-1"].client.health(10)
            assert await takes("i-1", "token-A") and not await takes("i-1", "token-B")
            ssm.put_parameter(Name=param.name, Value="token-B", Type="SecureString", Overwrite=True)
            assert d.set_cluster_token(param.read() or "")          # the dispatcher's minute
            assert d.cluster_token() == "token-A"                    # presented while workers catch up
            assert await d.workers["i-1"].client.health(10)
            refresh["s"] = 3600.0
            tasks.append(asyncio.create_task(serve_worker(worker("i-2", "token-B"), stop=stop)))
            await registered("i-2")                                  # a new worker presents B: accepted
            for _ in range(400):                                     # the first worker reads B
                if await takes("i-1", "token-B"):
                    break
                await asyncio.sleep(0.025)
            assert await takes("i-1", "token-B") and await takes("i-1", "token-A")
            clock.t += 301.0                                         # past half the grace: B presented
            assert d.cluster_token() == "token-B"
            assert await d.workers["i-1"].client.health(10) and await d.workers["i-2"].client.health(10)
            clock.t += 300.0                                         # past the grace: A refused
            assert not d._token.accepts("token-A") and d._token.accepts("token-B")
        finally:
            stop.set()
            for t in tasks:
                await asyncio.wait_for(t, 15)
            await d.stop(0.0)

    asyncio.run(asyncio.wait_for(go(), 120))


def test_the_daemon_keeps_the_token_in_ssm_and_follows_its_rotation(moto_endpoint: str, tmp_path: Path) -> None:
    """AwsWiring.open (what the daemon runs at start): the token into its parameter, the EC2 provider
    naming the parameter in user data; every minute the parameter is read again and a new value
    reaches the dispatcher (``attach``). Without ssm:PutParameter: one line naming the permission."""
    from daemon.aws.wiring import AwsWiring, DaemonError
    from daemon.demos.demo_config import demo_config

    ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=moto_endpoint)
    ami = ec2.describe_images()["Images"][0]["ImageId"]
    cfg = demo_config(tmp_path, moto_endpoint, ami, 2.5, 2.0)
    token = cfg.dispatcher.token()
    assert token
    wiring = AwsWiring(cfg, None)
    cloud = wiring.open()
    name = f"/costscale/{cfg.cluster}/cluster-token"
    ssm = boto3.client("ssm", region_name="us-east-1", endpoint_url=moto_endpoint)
    assert ssm.get_parameter(Name=name, WithDecryption=True)["Parameter"]["Value"] == token
    [inst] = cloud.launch("r5n.large", 1, "intent-daemon-1")
    raw = ec2.describe_instance_attribute(InstanceId=inst.instance_id, Attribute="userData")["UserData"]["Value"]
    text = base64.b64decode(raw).decode()
    assert token not in text and f"COSTSCALE_TOKEN_PARAMETER={name}" in text

    class _D:
        def __init__(self) -> None:
            self.tokens: list[str] = []

        def set_cluster_token(self, t: str) -> bool:
            changed = not self.tokens or self.tokens[-1] != t
            self.tokens.append(t)
            return changed

    d = _D()
    wiring.attach(d)
    ssm.put_parameter(Name=name, Value="rotated-token", Type="SecureString", Overwrite=True)
    asyncio.run(wiring._refresh_token())
    assert d.tokens == [token, "rotated-token"]
    cloud.terminate([inst.instance_id])
    if wiring.lease is not None:
        wiring.lease.release()

    class _Denied:
        def get_parameter(self, **kw: object) -> None:
            from botocore.exceptions import ClientError
            raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": "not allowed"}}, "GetParameter")

    other = demo_config(tmp_path / "b", moto_endpoint, ami, 2.5, 2.0)
    with pytest.raises(DaemonError) as exc:
        AwsWiring(other, None, ssm=_Denied()).open()
    assert "SSM in us-east-1 refused the daemon" in str(exc.value) and "ssm:PutParameter" in str(exc.value)


def test_validate_warns_when_the_token_would_go_into_user_data() -> None:
    from config.checks import config_warnings
    from config.schema import load_config

    cfg = load_config(Path(__file__).resolve().parents[2] / "config/costscale.example.yaml")
    raw = cfg.model_dump()
    raw["dispatcher"].update({"cluster_token": "x", "token_parameter": ""})
    warned = [w for w in config_warnings(type(cfg).model_validate(raw)) if w.startswith("dispatcher.token_parameter")]
    assert len(warned) == 1 and "user data" in warned[0]
    raw["dispatcher"]["token_parameter"] = "/costscale/{cluster}/cluster-token"
    assert not [w for w in config_warnings(type(cfg).model_validate(raw)) if w.startswith("dispatcher.token_parameter")]
