"""The worker bootstrap script's choices (issue #38), run for real under bash in ``--plan`` mode:
which ONNX Runtime build a machine gets (NVIDIA on the PCI bus or its device node: the GPU build;
a Neuron device or none: the CPU build) and where it installs from (the wheelhouse when one is
set, else the index when it serves costscale==VERSION, else a one-line refusal); its S3 signature against
botocore's; the user data's size and shape; the unit it writes against ``systemd/``."""
from __future__ import annotations

import datetime
import hashlib
import http.server
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Iterator

import pytest

from scaler.cloud.provider import CloudConfigError
from scaler.cloud.user_data import (USER_DATA_LIMIT, WorkerInstall, bootstrap_script, build_user_data,
                                    onnxruntime_range, worker_install)
from tests.conftest import free_port

REPO = Path(__file__).resolve().parents[2]
SPEC = "<1.32,>=1.31.1"


def _script(tmp_path: Path) -> Path:
    path = tmp_path / "bootstrap.sh"
    path.write_text(bootstrap_script())
    return path


def plan(tmp_path: Path, sysroot: Path, index: str, wheelhouse: str = "", *args: str) -> subprocess.CompletedProcess:
    env = {"PATH": os.environ["PATH"], "COSTSCALE_VERSION": "0.1.0", "COSTSCALE_ONNXRUNTIME": SPEC,
           "COSTSCALE_WHEELHOUSE": wheelhouse, "PIP_INDEX_URL": index, "COSTSCALE_TEST_ROOT": str(tmp_path / "root"),
           "COSTSCALE_TEST_SYSROOT": str(sysroot), "COSTSCALE_TEST_PYTHON": sys._base_executable}
    return subprocess.run(["bash", str(_script(tmp_path)), *(args or ("--plan",))], env=env, capture_output=True,
                          text=True, timeout=60)


@pytest.fixture()
def index(tmp_path: Path) -> Iterator[str]:
    """A PEP 503 index on 127.0.0.1 that serves costscale 0.1.0 (and nothing else)."""
    page = tmp_path / "index" / "simple" / "costscale"
    page.mkdir(parents=True)
    (page / "index.html").write_text('<a href="costscale-0.1.0-py3-none-any.whl">costscale-0.1.0-py3-none-any.whl</a>')

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *a: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), lambda *a: Quiet(*a, directory=str(tmp_path / "index")))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple"
    finally:
        server.shutdown()
        server.server_close()


def _machine(tmp_path: Path, *, pci_vendor: str | None = None, dev: str | None = None) -> Path:
    root = tmp_path / "machine"
    (root / "dev").mkdir(parents=True, exist_ok=True)
    if pci_vendor:
        d = root / "sys" / "bus" / "pci" / "devices" / "0000:00:1e.0"
        d.mkdir(parents=True)
        (d / "vendor").write_text(pci_vendor + "\n")
    if dev:
        (root / "dev" / dev).write_text("")
    return root


@pytest.mark.parametrize("machine, hardware, build", [
    (dict(), "cpu", "onnxruntime"),
    (dict(pci_vendor="0x1d0f"), "cpu", "onnxruntime"),          # Amazon's ENA/NVMe: not a GPU
    (dict(pci_vendor="0x10de"), "gpu", "onnxruntime-gpu"),      # NVIDIA on the bus, no driver yet
    (dict(dev="nvidia0"), "gpu", "onnxruntime-gpu"),
    (dict(dev="neuron0"), "neuron", "onnxruntime"),
])
def test_the_hardware_picks_the_onnxruntime_build(tmp_path: Path, index: str, machine: dict, hardware: str,
                                                  build: str) -> None:
    out = plan(tmp_path, _machine(tmp_path, **machine), index)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [f"python: {sys._base_executable}", f"hardware: {hardware}",
                                       f"onnxruntime: {build}{SPEC}", f"source: index {index}"]


def test_the_wheelhouse_when_set_else_the_index_when_it_serves_the_version_else_a_refusal(tmp_path: Path,
                                                                                         index: str) -> None:
    machine = _machine(tmp_path)
    target = f"cp{sys.version_info[0]}{sys.version_info[1]}-{os.uname().machine}"
    closed = f"http://127.0.0.1:{free_port()}/simple"
    # a wheelhouse set wins over an index that serves the version (its wheels are the daemon's, sha256-checked)
    assert plan(tmp_path, machine, index, "s3://b/wh").stdout.splitlines()[-1] == f"source: wheelhouse s3://b/wh ({target})"
    assert plan(tmp_path, machine, index).stdout.splitlines()[-1] == f"source: index {index}"
    (tmp_path / "index" / "simple" / "costscale" / "index.html").write_text("costscale-0.0.9-py3-none-any.whl")
    assert plan(tmp_path, machine, index).stdout.splitlines()[-1] == (
        "source: none (the index does not serve costscale==0.1.0 and no wheelhouse is set)")
    assert plan(tmp_path, machine, closed, "s3://b/wh").stdout.splitlines()[-1] == f"source: wheelhouse s3://b/wh ({target})"
    assert plan(tmp_path, machine, closed).stdout.splitlines()[-1] == (
        "source: none (the index does not serve costscale==0.1.0 and no wheelhouse is set)")
    run = plan(tmp_path, machine, closed, "", "worker", "--listen", "127.0.0.1:0")
    assert run.returncode == 1
    assert run.stderr.strip().splitlines() == [
        f"costscale-bootstrap: error: the package index ({closed}) does not serve costscale==0.1.0 and no wheelhouse "
        "is set (launch.wheelhouse; costscale bundle)"]


def _helper(tmp_path: Path):
    """The script's embedded Python helper, imported as a module."""
    text = bootstrap_script()
    body = text.split("<<'PYHELPER'\n", 1)[1].split("\nPYHELPER\n", 1)[0]
    path = tmp_path / "bootstrap_helper.py"
    path.write_text(body)
    import importlib.util

    spec = importlib.util.spec_from_file_location("bootstrap_helper", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_s3_signature_is_botocores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import botocore.auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    helper = _helper(tmp_path)
    now = datetime.datetime(2026, 11, 29, 8, 30, 5, tzinfo=datetime.timezone.utc)
    url = "https://my-bucket.s3.eu-west-1.amazonaws.com/costscale/wh/wheels/numpy-2.4.6-cp311-cp311-manylinux_2_27_x86_64.whl"
    ours = helper.sigv4_headers(url, "eu-west-1", "ASIAEXAMPLE", "secret/key+x", "session-token", now)
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: now.replace(tzinfo=None))
    req = AWSRequest(method="GET", url=url)
    botocore.auth.S3SigV4Auth(Credentials("ASIAEXAMPLE", "secret/key+x", "session-token"), "s3", "eu-west-1").add_auth(req)
    assert ours["authorization"] == req.headers["Authorization"]
    assert ours["x-amz-content-sha256"] == req.headers["X-Amz-Content-SHA256"] == hashlib.sha256(b"").hexdigest()
    assert helper.object_url("my.bucket", "a b/c.whl", "eu-west-1") == "https://s3.eu-west-1.amazonaws.com/my.bucket/a%20b/c.whl"


def test_the_unit_it_writes_is_the_shipped_one() -> None:
    text = bootstrap_script()
    unit = text.split("<<'UNIT'\n", 1)[1].split("\nUNIT\n", 1)[0] + "\n"
    shipped = (REPO / "systemd" / "costscale-worker.service").read_text()
    assert unit == shipped
    assert "Restart=on-failure" in shipped and "StandardOutput=journal" in shipped
    assert "EnvironmentFile=/etc/costscale/worker.env" in shipped


def test_the_user_data_fits_ec2s_16_kb_and_is_the_same_at_every_retry() -> None:
    install = WorkerInstall("0.1.0", SPEC, "s3://costscale-artifacts/costscale/wheelhouse")
    flags = ["--dispatcher-ca", "/etc/costscale/tls/ca.crt", "--tls-cert", "/etc/costscale/tls/worker.crt",
             "--tls-key", "/etc/costscale/tls/worker.key", "--tls-client-ca", "/etc/costscale/tls/ca.crt"]
    kw = dict(models=[("resnet50", "s3://models/resnet50-v1.onnx"), ("mlp", "builtin:mlp")], worker_flags=flags,
              token_parameter="/costscale/prod/cluster-token", spot_watch=True, install=install)
    ud = build_user_data("prod", "10.0.0.10:50051", "#!/bin/bash\necho extra", **kw)
    assert ud == build_user_data("prod", "10.0.0.10:50051", "#!/bin/bash\necho extra", **kw)
    assert len(ud.encode()) < 12 * 1024                     # room for 4 KB of launch.user_data
    assert "export COSTSCALE_VERSION=0.1.0\n" in ud and f"export COSTSCALE_ONNXRUNTIME='{SPEC}'\n" in ud
    assert ud.rstrip().splitlines()[-1].startswith(
        'exec "$BOOT" worker --listen "$COSTSCALE_ADDRESS:50052" --advertise "$COSTSCALE_ADDRESS:50052" '
        "--model resnet50=s3://models/resnet50-v1.onnx --model mlp=builtin:mlp --dispatcher 10.0.0.10:50051")
    with pytest.raises(CloudConfigError, match=f"over EC2's {USER_DATA_LIMIT}"):
        build_user_data("prod", "10.0.0.10:50051", "echo " + "x" * 8000, **kw)


def test_the_user_data_carries_the_script_it_ships(tmp_path: Path) -> None:
    ud = build_user_data("c1", "10.0.0.1:50051", install=WorkerInstall("0.1.0", SPEC))
    packed = ud.split("<<'COSTSCALE_BOOTSTRAP' | gunzip > \"$BOOT\"\n", 1)[1].split("\nCOSTSCALE_BOOTSTRAP\n", 1)[0]
    out = subprocess.run(["bash", "-c", "base64 -d | gunzip"], input=packed, capture_output=True, text=True)
    assert out.stdout == bootstrap_script()


def test_the_launch_names_this_daemons_version_and_onnxruntime_range() -> None:
    from importlib.metadata import requires, version

    got = worker_install("s3://b/p")
    assert got == WorkerInstall(version("costscale"), onnxruntime_range(requires("costscale")), "s3://b/p")
    assert onnxruntime_range(["onnx>=1.15", "onnxruntime<1.32,>=1.31.1", "onnxruntime-gpu>=2"]) == "<1.32,>=1.31.1"
    assert re.fullmatch(r"[<>=!~0-9.,]+", got.onnxruntime)
