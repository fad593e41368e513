"""Shared fixtures. Nothing here reaches beyond 127.0.0.1: AWS credentials are fake, and every
boto3 client is pointed at a moto server bound to loopback."""
from __future__ import annotations

import os
import socket
from typing import Iterator

import pytest
from hypothesis import settings

# Hypothesis: `make test` (and so CI) draws the same examples on every run, so a pass or a failure
# repeats on any machine; `HYPOTHESIS_PROFILE=explore make test` draws new ones each run (a random
# draw found the CBC preprocessing bug of variants/accuracy_milp.CBC_OPTIONS, and then spent CI's
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
