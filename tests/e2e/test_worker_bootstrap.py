"""Goal of issue #38: from a stock image to a serving worker, with no hand step.

The exact user data a launch sent to moto (read back with DescribeInstanceAttribute) runs under
bash on this machine, standing for an instance's first boot: the embedded IMDS
(:class:`daemon.local.imds.LocalImds`) gives the instance's id, type, address, region and instance
profile credentials; no package index is reachable (PIP_INDEX_URL on a closed port, this
machine's pip configuration and find-links neutralised); the wheelhouse is the one
``costscale bundle`` published to moto's S3 (built where the index is: the control host; its
downloads cached in the git-ignored ``.cache/bootstrap-wheelhouse``). The "stock image" is a bare
CPython 3.11 (this interpreter's base, no packages): the script makes the venv and installs
costscale's real dependency set from the wheelhouse. A worker results that registers with a live
dispatcher and answers a query; the time from the first line of user data to that answer is
printed (``-s``) and is BENCHMARKS.md's bootstrap row.
"""
from __future__ import annotations

import asyncio
import base64
import json
import os
import platform
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import boto3
import grpc
import pytest
import yaml

from daemon.cli import main as cli_main
from daemon.local.imds import LocalImds
from dispatcher.latency_model import LatencyModel
from dispatcher.proto import costscale_pb2 as pb, costscale_pb2_grpc as pbg
from dispatcher.server import Dispatcher
from config.schema import Config
from scaler.cloud.ec2 import Ec2Cloud
from scaler.cloud.user_data import worker_install
from tests.conftest import free_port
from tests.dispatch_helpers import make_config, run

pytestmark = pytest.mark.slow

CACHE = Path(__file__).resolve().parents[2] / ".cache" / "bootstrap-wheelhouse"
TYPE = "c5n.2xlarge"
BUCKET = "costscale-artifacts"


def _config(tmp_path: Path, endpoint: str) -> tuple[Path, Config]:
    base = make_config(cluster_token="s3cret-cluster").model_dump(mode="json", exclude_none=True)
    base["aws"] = {"endpoint_url": endpoint}
    base["launch"] = {"ami_id": "ami-12c6146b", "wheelhouse": f"s3://{BUCKET}/costscale/wheelhouse"}
    base["models"] = [{"name": "big", "qos_ms": 1000, "max_batch": 100, "profile": "rm2", "application": "ranking"}]
    path = tmp_path / "costscale.yaml"
    path.write_text(yaml.safe_dump(base))
    return path, Config.model_validate(base)


def _imds(instance_id: str) -> LocalImds:
    imds = LocalImds()
    creds = {"Code": "Success", "AccessKeyId": "ASIATESTING", "SecretAccessKey": "testing-secret",
             "Token": "testing-session", "Expiration": "2099-01-01T00:00:00Z"}
    imds.docs.update({("", "instance-id"): instance_id, ("", "instance-type"): TYPE, ("", "local-ipv4"): "127.0.0.1",
                      ("", "placement/region"): "us-east-1", ("", "iam/security-credentials/"): "costscale-worker",
                      ("", "iam/security-credentials/costscale-worker"): json.dumps(creds)})
    return imds


def _stock_env(root: Path, imds: LocalImds, s3_endpoint: str) -> dict[str, str]:
    """A first boot's environment: nothing of this machine's pip set-up, no index reachable."""
    return {"PATH": os.environ["PATH"], "HOME": str(root / "root"), "LANG": "C.UTF-8",
            "COSTSCALE_TEST_IMDS": imds.url, "COSTSCALE_TEST_S3_ENDPOINT": s3_endpoint,
            "COSTSCALE_TEST_ROOT": str(root), "COSTSCALE_TEST_PYTHON": sys._base_executable,
            "PIP_INDEX_URL": f"http://127.0.0.1:{free_port()}/simple", "PIP_CONFIG_FILE": "/dev/null",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def test_the_exact_user_data_turns_a_stock_python_into_a_serving_worker(moto_endpoint: str, tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    boto3.client("s3", region_name="us-east-1", endpoint_url=moto_endpoint).create_bucket(Bucket=BUCKET)
    config, cfg = _config(tmp_path, moto_endpoint)
    py = f"{sys.version_info[0]}.{sys.version_info[1]}"
    t_bundle = time.monotonic()
    assert cli_main(["bundle", str(config), "--python", py, "--arch", platform.machine(), "--no-gpu",
                     "--cache", str(CACHE)]) == 0
    bundle_s = time.monotonic() - t_bundle
    assert f"costscale/wheelhouse: costscale {worker_install().version}" in capsys.readouterr().out
    (own,) = (CACHE / "own").glob("costscale-*.whl")     # the script ships in the package (package data)
    assert "scaler/cloud/bootstrap/costscale-worker-bootstrap.sh" in zipfile.ZipFile(own).namelist()

    async def body() -> float:
        d = Dispatcher(cfg, LatencyModel())
        port = await d.start("127.0.0.1:0")
        worker_port = free_port()
        cloud = Ec2Cloud(cfg.cluster, cfg.region, cfg.launch, endpoint_url=moto_endpoint,
                         dispatcher=f"127.0.0.1:{port}", cluster_token=cfg.dispatcher.token(),
                         models=[("big", "builtin:mlp")], worker_port=worker_port,
                         install=worker_install(cfg.launch.wheelhouse))
        (inst,) = cloud.launch(TYPE, 1, "tok-bootstrap")
        d.allow_instance(inst.instance_id, TYPE)
        ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=moto_endpoint)
        attr = ec2.describe_instance_attribute(InstanceId=inst.instance_id, Attribute="userData")
        user_data = tmp_path / "user-data"
        user_data.write_bytes(base64.b64decode(attr["UserData"]["Value"]))
        imds = _imds(inst.instance_id)
        log = open(tmp_path / "boot.log", "wb")
        t0 = time.monotonic()
        proc = await asyncio.create_subprocess_exec("bash", str(user_data), stdout=log, stderr=log,
                                                    env=_stock_env(tmp_path, imds, moto_endpoint),
                                                    start_new_session=True)
        try:
            while inst.instance_id not in d.workers:            # wait on the registration, not a clock
                assert proc.returncode is None, (tmp_path / "boot.log").read_text()[-3000:]
                await asyncio.sleep(0.2)
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
                try:
                    reply = await pbg.InferenceStub(ch).Submit(pb.SubmitRequest(model="big", batch_size=1), timeout=30)
                except grpc.aio.AioRpcError as exc:
                    reply = (exc.code(), exc.details())
            took = time.monotonic() - t0
            assert isinstance(reply, pb.SubmitReply) and reply.instance_id == inst.instance_id and len(reply.outputs) == 1, \
                (reply, (tmp_path / "boot.log").read_text()[-3000:])
            boot = (tmp_path / "boot.log").read_text()
            assert "from the wheelhouse" in boot and "fetched" in boot
            assert "testing-secret" not in boot and "s3cret-cluster" not in boot   # no secret in the log
            env_file = tmp_path / "etc" / "costscale" / "worker.env"
            assert oct(env_file.stat().st_mode & 0o777) == "0o600"
            assert f'COSTSCALE_INSTANCE_ID="{inst.instance_id}"' in env_file.read_text()
            return took
        finally:
            if proc.returncode is None:
                os.killpg(proc.pid, signal.SIGTERM)
                await proc.wait()
            log.close()
            imds.close()
            await d.stop(0.5)

    took = run(body, timeout=280)
    print(f"\nbootstrap: bundle {bundle_s:.1f} s (cache {CACHE}); user data start -> first answer {took:.1f} s")


def test_bake_installs_without_starting_and_a_baked_image_installs_nothing(moto_endpoint: str, tmp_path: Path) -> None:
    """The image recipe's step (``--bake``: what Image Builder or Packer runs): costscale and the
    unit in place, no worker started; run again on the baked image, it installs nothing."""
    from scaler.cloud.user_data import SCRIPT_NAME, bootstrap_script

    boto3.client("s3", region_name="us-east-1", endpoint_url=moto_endpoint).create_bucket(Bucket=BUCKET)
    config, cfg = _config(tmp_path, moto_endpoint)
    py = f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert cli_main(["bundle", str(config), "--python", py, "--arch", platform.machine(), "--no-gpu",
                     "--cache", str(CACHE)]) == 0
    install = worker_install(cfg.launch.wheelhouse)
    script = tmp_path / SCRIPT_NAME             # as an image recipe fetches it: from the wheelhouse's prefix
    s3 = boto3.client("s3", region_name="us-east-1", endpoint_url=moto_endpoint)
    script.write_bytes(s3.get_object(Bucket=BUCKET, Key=f"costscale/wheelhouse/{SCRIPT_NAME}")["Body"].read())
    assert script.read_text() == bootstrap_script()
    imds = _imds("i-image-builder")
    env = {**_stock_env(tmp_path, imds, moto_endpoint), "COSTSCALE_VERSION": install.version,
           "COSTSCALE_ONNXRUNTIME": install.onnxruntime, "COSTSCALE_WHEELHOUSE": str(install.wheelhouse)}
    try:
        first = subprocess.run(["bash", str(script), "--bake"], env=env, capture_output=True, text=True, timeout=240)
        again = subprocess.run(["bash", str(script), "--bake"], env=env, capture_output=True, text=True, timeout=60)
    finally:
        imds.close()
    assert first.returncode == 0, first.stderr[-3000:]
    assert "from the wheelhouse" in first.stderr and first.stderr.rstrip().endswith("written (not started)")
    venv = tmp_path / "opt" / "costscale" / "venv"
    got = subprocess.run([str(venv / "bin" / "python"), "-c", "import importlib.metadata as m; print(m.version('costscale'))"],
                         capture_output=True, text=True)
    assert got.stdout.strip() == install.version
    assert (tmp_path / "etc" / "systemd" / "system" / "costscale-worker.service").is_file()
    assert not (tmp_path / "etc" / "costscale" / "worker.env").exists()       # nothing of an instance baked in
    assert again.returncode == 0
    assert f"costscale-bootstrap: costscale {install.version} and onnxruntime already in {venv}: nothing to install" \
        in again.stderr.splitlines()
