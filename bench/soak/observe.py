"""What the soak reads from outside the daemon at each sample: ``/metrics`` (series, tasks, channels,
ticks, queries by code), the SQLite state store (file size, rows per table, and the rows its pruner
would still forget at a cutoff older than the configured one: what is kept beyond the bound), the
audit log's files, and the cluster's instances in EC2 (moto)."""
from __future__ import annotations

import sqlite3
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from scaler.fleet.retention import prune_history, row_counts

DAY_S = 86400.0


def scrape(port: int) -> dict[str, Any]:
    """One ``/metrics`` scrape: the series count and the figures the soak plots."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=20) as resp:   # loopback only
        text = resp.read().decode()
    series = 0
    out: dict[str, Any] = {"queries": Counter(), "ticks": {}}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            series += 1
            if s.name == "costscale_queries_total":
                out["queries"][s.labels["code"]] += int(s.value)
            elif s.name == "costscale_loop_ticks_total":
                out["ticks"][f"{s.labels['loop']}_{s.labels['outcome']}"] = int(s.value)
            elif s.name in ("costscale_asyncio_tasks", "costscale_grpc_worker_channels", "costscale_workers",
                            "costscale_pool_cost_dollars_per_hour", "costscale_budget_dollars_per_hour"):
                out[s.name.removeprefix("costscale_")] = s.value
    out["series"] = series
    return out


def store_sample(path: Path, now_v: float, retention_days: float, slack_s: float, demand_days: int) -> dict[str, Any]:
    """The store's size (db + WAL, bytes), rows per table, and ``beyond``: the rows (``table:key``) the
    pruner (:func:`scaler.fleet.retention.prune_history`, on a copy) would still forget at a cutoff
    ``slack_s`` older than ``retention_days`` before the daemon's ``now_v``, and the demand minutes older
    than ``demand_days`` and ``slack_s``; ``demand_oldest``: the oldest demand minute held (None: none). A row may appear here for one sample: a plan recorded long ago
    becomes prunable only when a newer one supersedes it; kept over two samples, the pruner missed it."""
    size = sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())
    src = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    try:
        copy = sqlite3.connect(":memory:", isolation_level=None)
        src.backup(copy)
    finally:
        src.close()
    try:
        rows = row_counts(copy)
        before = _keys(copy)
        old = {f"demand_minutes:{r[0]}:{r[1]}" for r in copy.execute(
            "SELECT series, minute FROM demand_minutes WHERE minute < ?", ((now_v - demand_days * DAY_S - slack_s) / 60.0,))}
        oldest = copy.execute("SELECT MIN(minute) FROM demand_minutes").fetchone()[0]
        prune_history(copy, now_v - retention_days * DAY_S - slack_s, 1_000_000)
        beyond = sorted((before - _keys(copy)) | old)
    finally:
        copy.close()
    return {"size": size, "rows": rows, "beyond": beyond, "demand_oldest": oldest}


def _keys(conn: sqlite3.Connection) -> set[str]:
    """Every row of the pruned tables, by table and key."""
    return {f"{t}:{r[0]}" for t, k in (("plans", "plan_id"), ("intents", "client_token"), ("instances", "instance_id"),
                                        ("unavailable", "instance_type"))
            for r in conn.execute(f"SELECT {k} FROM {t}")}


def audit_sample(path: Path) -> dict[str, int]:
    """The audit log's files (the live one and its rotated copies): how many, and their bytes."""
    files = [p for p in path.parent.glob(path.name + "*") if p.is_file()]
    return {"files": len(files), "bytes": sum(p.stat().st_size for p in files),
            "largest": max((p.stat().st_size for p in files), default=0)}


def ec2_instances(ec2: Any, cluster: str) -> list[dict[str, str]]:
    """The cluster's instances ever launched: id, type, state and intent tag (its ClientToken)."""
    out = []
    pages = ec2.get_paginator("describe_instances").paginate(
        Filters=[{"Name": "tag:costscale:cluster", "Values": [cluster]}])
    for page in pages:
        for r in page["Reservations"]:
            for i in r["Instances"]:
                tags = {t["Key"]: t["Value"] for t in i.get("Tags", [])}
                out.append({"id": i["InstanceId"], "type": i["InstanceType"], "state": i["State"]["Name"],
                            "intent": tags.get("costscale:intent", "")})
    return out


def known_to_store(path: Path) -> tuple[set[str], dict[str, int]]:
    """The instance ids the store knows (instances live or gone, and those its intents name) and
    each launch intent's count, by ClientToken."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    try:
        ids = {r[0] for r in conn.execute("SELECT instance_id FROM instances")}
        ids |= {r[0] for r in conn.execute("SELECT j.value FROM intents i, json_each(i.instance_ids) j")}
        counts = {r[0]: int(r[1]) for r in conn.execute("SELECT client_token, count FROM intents WHERE kind = 'launch'")}
    finally:
        conn.close()
    return ids, counts


__all__ = ["audit_sample", "ec2_instances", "known_to_store", "scrape", "store_sample"]
