"""Shared fixtures. Nothing here reaches beyond 127.0.0.1: AWS credentials are fake, and every
boto3 client is pointed at a moto server bound to loopback."""
from __future__ import annotations

import os
import socket
from typing import TYPE_CHECKING, Iterator

import pytest
from hypothesis import settings

if TYPE_CHECKING:
    from variants.families.family import Member

# Hypothesis: `make test` (and so CI) draws the same examples on every run, so a pass or a failure
# repeats on any machine; `HYPOTHESIS_PROFILE=explore make test` draws new ones each run (a random
# draw found the CBC preprocessing bug of variants/accuracy/milp.CBC_OPTIONS, and then spent CI's
# five-minute test timeout shrinking it). tests/README.md "Hypothesis".
settings.register_profile("repeat", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeat"))

# Fake credentials for every test: a boto3 call that escaped to real AWS would fail to sign in.
for _k, _v in {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SECURITY_TOKEN": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}.items():
    os.environ[_k] = _v
os.environ.pop("AWS_PROFILE", None)


def _moto_amis_without_the_region_lists() -> None:
    """moto's EC2 backend holds its own 44 images (``ec2/resources/amis.json``) plus, by default,
    about 1,260 region lists (``latest_amis``, ``ecs/optimized_amis``): it builds all of them again
    after every ``moto_reset`` (0.3 s) and renders all of them in every ``describe_images`` (1.9 s
    on this machine). ``MOTO_AMIS_PATH`` (moto ``ec2/models/__init__.py``: set before moto is
    imported) makes it load only the file named: here moto's own list, in its order, so the first
    image (what the tests launch from) and ``ami-12c6146b`` are the ones they were. No test
    reads the region lists. Set in the environment, so the demos' subprocesses get it too."""
    if "MOTO_AMIS_PATH" in os.environ:
        return
    import atexit
    import json
    import shutil
    import tempfile

    from moto.utilities.utils import load_resource   # moto's package data; does not load the EC2 models

    folder = tempfile.mkdtemp(prefix="costscale-tests-amis-")
    atexit.register(shutil.rmtree, folder, True)
    path = os.path.join(folder, "amis.json")
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(load_resource("ec2/resources/amis.json"), fh)
    os.environ["MOTO_AMIS_PATH"] = path


_moto_amis_without_the_region_lists()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def moto_server() -> Iterator[str]:
    """A moto server in server mode on 127.0.0.1 (one per test session); yields its endpoint URL.
    Tests that need a clean account call ``moto_reset(endpoint)``."""
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


def moto_reset(endpoint: str) -> None:
    """Reset every moto backend (POST /moto-api/reset)."""
    import urllib.request

    req = urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST")
    with urllib.request.urlopen(req, timeout=10) as resp:  # loopback only
        resp.read()


@pytest.fixture(scope="session")
def digits_members(tmp_path_factory: pytest.TempPathFactory) -> list["Member"]:
    """The digits family (:mod:`variants.families.digits`) trained, exported and measured once per
    test session (about 8 s of CPU on an idle machine, several times that on a loaded one); the
    tests only read its members and their ONNX files. Training is deterministic
    (``tests/variants/test_families.py::test_digits_training_is_deterministic``), so every test sees what a
    build of its own would give."""
    from variants.families import digits as dg

    return dg.build(tmp_path_factory.mktemp("digits"))


@pytest.fixture()
def moto_endpoint(moto_server: str) -> str:
    """The session's moto endpoint, reset to an empty account for this test."""
    moto_reset(moto_server)
    return moto_server


@pytest.fixture()
def ec2_client(moto_endpoint: str):
    import boto3

    return boto3.client("ec2", region_name="us-east-1", endpoint_url=moto_endpoint)


@pytest.fixture()
def botocore_backoff(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """botocore's retry backoff without the waiting: each delay its standard retry mode computes
    (``ExponentialBackoff.delay_amount``, the backoff of ``botocore.retries.standard``) is recorded
    in the returned list, in order, and the retry goes out at once. Its retry decisions, quota and
    attempt counting are untouched."""
    from botocore.retries import standard

    delays: list[float] = []
    computed = standard.ExponentialBackoff.delay_amount

    def record(self: standard.ExponentialBackoff, context: standard.RetryContext) -> float:
        delays.append(computed(self, context))
        return 0.0

    monkeypatch.setattr(standard.ExponentialBackoff, "delay_amount", record)
    return delays


#: test files that run long while using little CPU (a daemon under light load for minutes): collected
#: first, so pytest-xdist's ``--dist loadfile`` starts them beside the rest, not after it
IDLE_LONG = ("tests/soak/",)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    first = [i for i in items if i.nodeid.startswith(IDLE_LONG)]
    if first:
        items[:] = first + [i for i in items if not i.nodeid.startswith(IDLE_LONG)]
