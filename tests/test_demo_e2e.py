"""The demo path end to end: moto in server mode on 127.0.0.1, the real daemon, gRPC, local ONNX
workers. Checks that instances were launched and terminated through boto3, queries were served
through gRPC, and no process is left behind."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.slow


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except OSError:
        return False


def test_demo_end_to_end() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "daemon.cli", "demo", "--duration", "10", "--rate", "8", "--step-rate", "20", "--json"],
        capture_output=True, text=True, timeout=180, env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["instances_launched"] >= 1
    assert out["instances_live_after"] == []
    assert out["served"] > 0
    assert out["served"] + sum(out["errors"].values()) == out["sent"]
    assert sum(out["served_by_type"].values()) == out["served"]
    assert out["peak_cost_per_hour"] <= out["budget_per_hour"] + 1e-9
    assert out["worker_pids"], "no worker process was started"
    time.sleep(0.2)
    assert [p for p in out["worker_pids"] if _alive(p)] == []
