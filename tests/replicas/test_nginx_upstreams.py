"""The demo's nginx (``daemon.demos.replica_cluster.nginx_config``) keeps every replica in its
upstream (issue #40, the 467 failed attempts at the failover bench's first kill point): one replica
refuses a connection once (a worker registering before it listened), starts listening, then the
other dies. With nginx's default ``max_fails=1 fail_timeout=10s`` the first was still marked down
and every query got 502 "no live upstreams" until the mark expired; with ``max_fails=0`` each query
goes to the live replica. Real nginx (installed by ``make test``'s bootstrap), two in-process gRPC
health servers, no sleeps."""
from __future__ import annotations

import asyncio
import signal
import subprocess
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from daemon.demos.replica_cluster import NGINX, free_port, start_nginx


async def _server(port: int) -> grpc.aio.Server:
    s = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), s)
    s.add_insecure_port(f"127.0.0.1:{port}")
    await s.start()
    return s


def test_a_replica_refused_once_still_takes_every_query_when_the_other_dies(tmp_path: Path) -> None:
    assert Path(NGINX).exists(), f"{NGINX} missing: the bootstrap installs nginx (apt-get install nginx-light)"
    front, pa, pb = free_port(), free_port(), free_port()
    ng = start_nginx(tmp_path, front, [pa, pb])

    async def scenario() -> tuple[list[str], list[str]]:
        a = await _server(pa)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{front}") as ch:
            stub = health_pb2_grpc.HealthStub(ch)

            async def codes(n: int) -> list[str]:
                out = []
                for _ in range(n):
                    try:
                        await stub.Check(health_pb2.HealthCheckRequest(), timeout=5.0)
                        out.append("OK")
                    except grpc.aio.AioRpcError as exc:
                        out.append(exc.code().name)
                return out
            first = await codes(2)             # round robin: one of them tried b first (refused), then a
            b = await _server(pb)
            await a.stop(None)                 # a dies: its port refuses
            after = await codes(10)
            await b.stop(None)
        return first, after
    try:
        first, after = asyncio.run(scenario())
    finally:
        ng.send_signal(signal.SIGTERM)
        ng.wait(timeout=10)
    log = (tmp_path / "nginx" / "error.log").read_text()
    assert first == ["OK", "OK"] and "Connection refused" in log     # b was refused once
    assert after == ["OK"] * 10
    assert "no live upstreams" not in log
