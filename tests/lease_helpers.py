"""Daemons of one cluster against moto in server mode, as the cluster lease and the replicas tests
start them (``tests/replicas/test_cluster_lease.py``, ``tests/replicas/test_replicas.py``, ``tests/replicas/test_replicas_e2e.py``):
the config, written under a directory per control host, and the cluster's live instances."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import boto3

from config.schema import Config, parse_config_text
from daemon.demos.replica_cluster import live_instances

#: one r5n.large pinned, the ticks an hour apart (a test drives them); ``{extra}``: top-level lines
#: after ``state_path``, ``{lease}``: lines of the lease section after ``ttl_s`` (a test that
#: inserts a bad line asserts the line number its error names)
DAEMON_CONFIG = """\
cluster: {cluster}
budget_per_hour: 1.0
models:
  - name: rm2
    qos_ms: 350
instance_types:
  - type: r5n.large
launch:
  ami_id: {ami}
dispatcher:
  listen: 127.0.0.1:0
intervals:
  fleet_s: 3600
  reconcile_s: 3600
state_path: {state}
{extra}pinned_pool:
  r5n.large: 1
model_scaling:
  generate_variants: false
lease:
  ttl_s: {ttl}
{lease}aws:
  endpoint_url: {endpoint}
"""


def daemon_config_text(cluster: str, *, ami: str = "ami-1", state: str | Path = "/tmp/x.db",
                       endpoint: str = "http://127.0.0.1:9", ttl: float = 60, extra: str = "", lease: str = "") -> str:
    """:data:`DAEMON_CONFIG` filled in (the defaults: a config that is only parsed, never run)."""
    return DAEMON_CONFIG.format(cluster=cluster, ami=ami, state=state, endpoint=endpoint, ttl=ttl, extra=extra,
                                lease=lease)


def moto_ami(endpoint: str) -> str:
    """An image moto knows, to launch from."""
    ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=endpoint)
    return str(ec2.describe_images()["Images"][0]["ImageId"])


def daemon_config(tmp_path: Path, endpoint: str, host: str, cluster: str, *, ttl: float = 60, extra: str = "",
                  lease: str = "") -> Config:
    """The config of the daemon on control host ``host``: its state under ``tmp_path/host``, the
    text also written there as ``costscale.yaml`` (for ``costscale run``)."""
    d = tmp_path / host
    d.mkdir(exist_ok=True)
    text = daemon_config_text(cluster, ami=moto_ami(endpoint), state=d / "state.db", endpoint=endpoint, ttl=ttl,
                              extra=extra, lease=lease)
    (d / "costscale.yaml").write_text(text)
    return parse_config_text(text)


def live_ids(endpoint: str, cluster: str) -> list[str]:
    """The ids of the cluster's pending and running instances, sorted."""
    ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=endpoint)
    return [iid for iid, _ in live_instances(ec2, cluster)]
