"""Issue #38: a worker of another costscale or protocol version, or one that sends none, is refused
at registration with one line naming both versions; the worker prints it and exits 1 (so systemd's
restart limits apply, systemd/costscale-worker.service)."""
from __future__ import annotations

import asyncio
import os
import sys

import grpc

from config.version import PROTOCOL_VERSION, costscale_version, version_mismatch
from dispatcher.latency_model import LatencyModel
from dispatcher.proto import costscale_pb2 as pb, costscale_pb2_grpc as pbg
from dispatcher.server import Dispatcher
from tests.dispatch_helpers import make_config, run


def test_the_refusal_names_both_versions() -> None:
    assert version_mismatch("0.1.0", 1, "0.1.0", 1) is None
    assert version_mismatch("0.0.9", 1, "0.1.0", 1) == (
        "version mismatch: worker runs costscale 0.0.9 (protocol 1), dispatcher runs costscale 0.1.0 (protocol 1); "
        "install costscale==0.1.0 on the worker")
    assert version_mismatch("0.1.0", 2, "0.1.0", 1) == (
        "version mismatch: worker runs costscale 0.1.0 (protocol 2), dispatcher runs costscale 0.1.0 (protocol 1); "
        "install costscale==0.1.0 on the worker")
    assert version_mismatch("", 0, "0.1.0", 1) == (
        "version mismatch: worker runs no version (a worker older than costscale's version check), dispatcher "
        "runs costscale 0.1.0 (protocol 1); install costscale==0.1.0 on the worker")


def test_the_dispatcher_refuses_another_version_and_an_old_worker_and_takes_its_own() -> None:
    async def body() -> list[pb.RegisterWorkerReply]:
        d = Dispatcher(make_config(), LatencyModel())
        port = await d.start("127.0.0.1:0")
        d.allow_instance("i-v", "c5n.2xlarge")
        base = dict(instance_id="i-v", instance_type="c5n.2xlarge", address="127.0.0.1:1")
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
                ctl = pbg.ControlStub(ch)
                return [await ctl.RegisterWorker(pb.RegisterWorkerRequest(**base, **v), timeout=10) for v in (
                    dict(costscale_version="0.0.9", protocol_version=PROTOCOL_VERSION),
                    dict(costscale_version=costscale_version(), protocol_version=PROTOCOL_VERSION + 1),
                    {},
                    dict(costscale_version=costscale_version(), protocol_version=PROTOCOL_VERSION))]
        finally:
            await d.stop(0.1)

    other, protocol, old, same = run(body)
    mine = costscale_version()
    assert not other.accepted and other.message == version_mismatch("0.0.9", PROTOCOL_VERSION, mine, PROTOCOL_VERSION)
    assert not protocol.accepted and f"(protocol {PROTOCOL_VERSION + 1})" in protocol.message
    assert not old.accepted and old.message.startswith("version mismatch: worker runs no version")
    assert same.accepted, same.message


def test_a_refused_worker_prints_both_versions_and_exits_1() -> None:
    """The real ``costscale worker`` against a dispatcher of another version (its registry's
    version set apart): one line on stderr, exit 1."""
    async def body() -> tuple[int, str, int]:
        d = Dispatcher(make_config(), LatencyModel())
        port = await d.start("127.0.0.1:0")
        d.worker_registry.version = "9.9.9"
        d.allow_instance("i-old", "c5n.2xlarge")
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "daemon.cli", "worker", "--listen", "127.0.0.1:0", "--instance-id", "i-old",
            "--instance-type", "c5n.2xlarge", "--dispatcher", f"127.0.0.1:{port}",
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE, env={**os.environ, "PYTHONPATH": os.getcwd()})
        try:
            _, err = await proc.communicate()
            return proc.returncode or 0, err.decode(), port
        finally:
            await d.stop(0.1)

    code, err, port = run(body, timeout=120)
    lines = [ln for ln in err.splitlines() if "refused this worker" in ln]
    assert code == 1
    assert lines == [f"costscale: dispatcher 127.0.0.1:{port} refused this "
                     f"worker: version mismatch: worker runs costscale {costscale_version()} (protocol "
                     f"{PROTOCOL_VERSION}), dispatcher runs costscale 9.9.9 (protocol {PROTOCOL_VERSION}); install "
                     "costscale==9.9.9 on the worker"]
