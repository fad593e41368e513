"""Replicas of one cluster as real ``costscale run`` processes on this host (issue #27),
against an EC2 and DynamoDB emulator (moto in server mode on loopback), with nginx's ``grpc_pass``
in front when the distribution's nginx is installed: what ``costscale demo --replicas``
(:mod:`daemon.demos.replicas`), ``bench/replicas/replica_failover_bench.py`` and ``tests/replicas/test_replicas_e2e.py``
start. An adapter: config files, processes, sockets, EC2 listings; it decides nothing.

Each replica gets its own directory (config, SQLite state store, log) and port; all of them share
the cluster name, the lease table (``costscale-leases`` in moto's DynamoDB) and a pinned pool, so the
lease holder's fleet loop holds that pool and a standby adopts it when it takes the lease over
(``daemon.replicas.role``). The workers run apart from every replica (:func:`start_local_fleet`:
``daemon.local.fleet``, one local worker per running instance), as on AWS where a worker runs on
its instance and outlives any control host; they register through the address the clients use
and the replicas share them by the published owners (``daemon.replicas.shared_workers``).
"""
from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Iterator

from config.budget import BUDGET_EPS
from scaler.cloud.provider import CLUSTER_TAG

#: the source tree ``costscale run`` is started in (``python -m daemon.cli``)
ROOT = Path(__file__).resolve().parents[2]
#: the distribution's nginx (``make bootstrap`` installs nginx-light); without it, gRPC's round_robin
NGINX = "/usr/sbin/nginx"
#: the replicas' cluster lease table in the emulator (``lease.table``'s default)
LEASE_TABLE = "costscale-leases"


def prices() -> dict[str, float]:
    """Each instance type's on-demand $/hr (the catalog), what the budget samples price pools at."""
    from config.catalog import load_catalog

    return {t: it.price_per_hour for t, it in load_catalog().items()}

#: one replica's config: rm2 on a pinned pool of ``{pool_type}`` x ``{pool_n}``, the lease shared
#: (``lease.replicas``), its ticks every ``{fleet_s}`` s so a new holder acts soon after a takeover;
#: ``{replica_id}``: the replica's directory name (a replica started again on the same port is a new
#: id: the dead one's heartbeat may still be live)
REPLICA_CONFIG = """\
cluster: {cluster}
budget_per_hour: {budget}
objective: min_cost
models:
  - name: rm2
    onnx: builtin:mlp
    qos_ms: 350
    max_batch: 1000
    profile: rm2
instance_types:
  - type: {pool_type}
launch:
  ami_id: {ami}
pinned_pool:
  {pool_type}: {pool_n}
dispatcher:
  listen: 127.0.0.1:{port}
  on_deadline: {on_deadline}
intervals:
  fleet_s: {fleet_s}
  model_s: 1
  reconcile_s: 30
state_path: {state}
model_scaling:
  generate_variants: false
lease:
  ttl_s: {ttl}
  replicas: true
  replica_id: {replica_id}
  unready_s: {unready}
aws:
  endpoint_url: {endpoint}
"""


@dataclass(frozen=True)
class ClusterSpec:
    """What every replica of the cluster shares."""

    cluster: str
    endpoint: str
    ami: str
    budget: float = 1.0
    pool_type: str = "r5n.large"
    pool_n: int = 2
    ttl_s: float = 6.0
    fleet_s: float = 2.0
    unready_s: float = 5.0    # a stopping replica's NOT_SERVING time (``lease.unready_s``)
    on_deadline: str = "drop"  # ``dispatcher.on_deadline``: best_effort refuses no query for its SLO

    @property
    def pool(self) -> dict[str, int]:
        return {self.pool_type: self.pool_n}

    def config_text(self, port: int, state: Path, replica_id: str) -> str:
        return REPLICA_CONFIG.format(cluster=self.cluster, replica_id=replica_id, budget=self.budget, pool_type=self.pool_type,
                                     pool_n=self.pool_n, ami=self.ami, port=port, fleet_s=f"{self.fleet_s:g}",
                                     state=state, ttl=f"{self.ttl_s:g}", endpoint=self.endpoint,
                                     unready=f"{self.unready_s:g}", on_deadline=self.on_deadline)


@dataclass
class ReplicaProcess:
    """One ``costscale run`` process: its directory, port and log."""

    name: str
    proc: subprocess.Popen[bytes]
    dir: Path
    port: int

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def log(self) -> Path:
        return self.dir / "daemon.log"

    @property
    def state(self) -> Path:
        return self.dir / "state.db"

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def alive(self) -> bool:
        return self.proc.poll() is None


def start_replica(root: Path, name: str, spec: ClusterSpec, port: int, *, log_format: str = "text") -> ReplicaProcess:
    """``costscale run CONFIG`` for replica ``name`` under ``root/name``, its output to
    ``daemon.log`` there (``log_format`` json: one object per line with its UTC time, ``ts``)."""
    d = root / name
    d.mkdir(parents=True)
    cfg = d / "costscale.yaml"
    cfg.write_text(spec.config_text(port, d / "state.db", name))
    with open(d / "daemon.log", "wb") as out:
        p = subprocess.Popen([sys.executable, "-m", "daemon.cli", "run", str(cfg),
                              "--log-format", log_format], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                             env=dict(os.environ, PYTHONUNBUFFERED="1"))
    return ReplicaProcess(name, p, d, port)


def start_local_fleet(root: Path, config: Path, target: str) -> subprocess.Popen[bytes]:
    """The workers of the cluster ``config`` names, apart from the replicas: ``python -m
    daemon.local.fleet`` (one local worker per running instance in the emulator), each worker
    registering at ``target`` (the balancer, or ``ipv4:H:P,H:P``); its log is ``root/fleet.log``."""
    with open(root / "fleet.log", "wb") as out:
        return subprocess.Popen([sys.executable, "-m", "daemon.local.fleet", str(config), "--dispatcher", target],
                                cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONUNBUFFERED="1"))


def fleet_worker_pids(root: Path) -> list[int]:
    """Every worker process :func:`start_local_fleet` started (its log's ``started worker pid``)."""
    import re

    log = root / "fleet.log"
    return [int(p) for p in re.findall(r"started worker pid (\d+)", log.read_text(errors="replace"))] if log.exists() else []


def stop_processes(*procs: subprocess.Popen[bytes] | None, grace_s: float = 60.0) -> None:
    """SIGTERM every process still running, then wait for each (SIGKILL after ``grace_s``)."""
    for p in procs:
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        if p is not None:
            try:
                p.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)


def nginx_config(d: Path, port: int, upstream: list[int]) -> str:
    """nginx in the foreground on 127.0.0.1:``port``: HTTP/2 cleartext, ``grpc_pass`` to an upstream
    of the replicas (its default ``grpc_next_upstream error timeout`` tries the next replica when
    one refuses the connection); ``upstream.log``: one line per request, the replicas tried.

    ``max_fails=0``: nginx never marks a replica unavailable. With its default (``max_fails=1
    fail_timeout=10s``) one refused connect takes a replica out for 10 s; a standby refused once
    (a worker registering before it listened, or a respawned replica's port) and the holder killed
    within those 10 s left nginx with no live upstream, answering every query 502 ("no live
    upstreams", UNAVAILABLE to the client) until the mark expired: the 467 failed attempts at the
    first kill point of ``bench/replicas/replica_failover_bench.py`` (issue #40). A refused connect
    on loopback costs microseconds, so trying a dead replica on every query costs nothing."""
    servers = "".join(f"    server 127.0.0.1:{p} max_fails=0;\n" for p in upstream)
    temp = " ".join(f"{k}_temp_path {d / k};" for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    return f"""daemon off;
worker_processes 1;
pid {d / 'nginx.pid'};
error_log {d / 'error.log'} warn;
events {{ worker_connections 256; }}
http {{
  log_format upstreams '$status $upstream_addr $upstream_status';
  access_log {d / 'upstream.log'} upstreams;
  {temp}
  upstream costscale {{
{servers}  }}
  server {{
    listen 127.0.0.1:{port} http2;
    location / {{ grpc_pass grpc://costscale; }}
  }}
}}
"""


def start_nginx(root: Path, port: int, upstream: list[int], limit_s: float = 10.0) -> subprocess.Popen[bytes]:
    """:data:`NGINX` with :func:`nginx_config` under ``root/nginx``, once it listens."""
    d = root / "nginx"
    d.mkdir(parents=True)
    (d / "nginx.conf").write_text(nginx_config(d, port, upstream))
    p = subprocess.Popen([NGINX, "-p", str(d), "-c", str(d / "nginx.conf")], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if listening(port):
            return p
        if p.poll() is not None:
            raise RuntimeError(f"nginx exited: {(p.stderr.read() if p.stderr else b'').decode().strip()}")
        time.sleep(0.05)
    stop_processes(p, grace_s=5)
    raise RuntimeError("nginx did not listen")


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def serves(port: int, timeout: float, model: str = "rm2") -> bool:
    """Wait until a query sent to this replica alone is answered."""
    import grpc

    from dispatcher.proto import costscale_pb2 as pb, costscale_pb2_grpc as pbg

    deadline = time.monotonic() + timeout
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        stub = pbg.InferenceStub(ch)
        while time.monotonic() < deadline:
            try:
                await stub.Submit(pb.SubmitRequest(model=model, batch_size=4), timeout=5.0)
                return True
            except grpc.aio.AioRpcError:
                await asyncio.sleep(0.5)
    return False


def ec2_client(endpoint: str) -> Any:
    import boto3

    return boto3.client("ec2", region_name="us-east-1", endpoint_url=endpoint)


def live_instances(ec2: Any, cluster: str) -> list[tuple[str, str]]:
    """(instance id, type) of the cluster's pending and running instances, by id."""
    res = ec2.describe_instances(Filters=[{"Name": f"tag:{CLUSTER_TAG}", "Values": [cluster]},
                                          {"Name": "instance-state-name", "Values": ["pending", "running"]}])
    return sorted((i["InstanceId"], i["InstanceType"]) for r in res["Reservations"] for i in r["Instances"])


class BudgetSampler(threading.Thread):
    """Polls describe_instances every ``period_s``; keeps each sample's (wall time, Σ $/hr of the
    cluster's pending and running instances), the figure DESIGN invariant 1 bounds by the budget."""

    def __init__(self, endpoint: str, cluster: str, budget: float, period_s: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.ec2 = ec2_client(endpoint)
        self.cluster, self.budget, self.period_s = cluster, budget, period_s
        self.price = prices()
        self.stop = threading.Event()
        self.samples: list[tuple[float, float]] = []

    def run(self) -> None:
        while not self.stop.is_set():
            cost = sum(self.price[t] for _, t in live_instances(self.ec2, self.cluster))
            self.samples.append((time.time(), cost))
            self.stop.wait(self.period_s)

    @property
    def peak(self) -> float:
        return max((c for _, c in self.samples), default=0.0)

    @property
    def over(self) -> list[float]:
        """The samples over the budget (empty: the budget held)."""
        return [c for _, c in self.samples if c > self.budget + BUDGET_EPS]

    def peak_between(self, t0: float, t1: float) -> tuple[float, int]:
        """The highest $/hr sampled in [t0, t1) (wall time) and how many samples."""
        got = [c for t, c in self.samples if t0 <= t < t1]
        return max(got, default=0.0), len(got)


def json_log_lines(text: str) -> Iterator[tuple[float, str]]:
    """(UNIX time, message) of each JSON line of a ``--log-format json`` log (other lines skipped)."""
    for line in text.splitlines():
        if not line.startswith("{"):
            continue
        try:
            rec = json.loads(line)
            yield datetime.fromisoformat(rec["ts"]).timestamp(), str(rec.get("message", ""))
        except (ValueError, KeyError, TypeError):
            continue


def first_line_after(text: str, needle: str, t0: float) -> float | None:
    """The time of the first JSON log line at or after ``t0`` whose message contains ``needle``."""
    return next((t for t, msg in json_log_lines(text) if t >= t0 and needle in msg), None)


__all__ = ["BudgetSampler", "ClusterSpec", "fleet_worker_pids", "start_local_fleet", "LEASE_TABLE", "NGINX", "REPLICA_CONFIG", "ReplicaProcess",
           "ec2_client", "first_line_after", "free_port", "json_log_lines", "listening", "live_instances",
           "nginx_config", "prices", "serves", "start_nginx", "start_replica", "stop_processes"]
