"""``costscale demo --serve``: the local sandbox prints its endpoints and ``ready``; a stock
tritonclient sends ModelInfer to it; ``costscale status --json`` and ``/metrics`` agree on pool
cost, instances and served counts; Ctrl-C terminates every instance and exits 0 (issue 14's
acceptance)."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[2]


def _status(api: str) -> dict[str, Any]:
    r = subprocess.run([sys.executable, "-m", "daemon.cli", "status", "--dispatcher", api, "--json"], cwd=REPO,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _metrics(url: str) -> dict[tuple[str, tuple], float]:
    with urllib.request.urlopen(url, timeout=10) as resp:  # loopback only
        text = resp.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def _view(st: dict[str, Any]) -> tuple:
    return (st["pool_cost_per_hour"], json.dumps(st["instances"], sort_keys=True), st["served"],
            st["models"]["rm2"]["served"])


@pytest.mark.slow
def test_sandbox_serves_a_stock_client_and_status_agrees_with_metrics() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "daemon.cli", "demo", "--serve", "--listen", "127.0.0.1:0",
                             "--metrics", "127.0.0.1:0", "--pool", "r5n.large=1"], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        lines: list[str] = []
        while "ready" not in lines:
            line = proc.stdout.readline()
            assert line, f"the sandbox ended before ready: {proc.stderr.read() if proc.stderr else ''}"
            lines.append(line.strip())
        ends = dict(x.split(": ", 1) for x in lines if ": " in x)
        assert lines[-5:] == [f"api: {ends['api']}", f"oip: {ends['oip']}", f"metrics: {ends['metrics']}",
                              f"ec2: {ends['ec2']}", "ready"]
        assert ends["oip"] == ends["api"] and ends["metrics"].endswith("/metrics")
        client = subprocess.run([sys.executable, str(REPO / "tests" / "oip_client.py"), "--infer", ends["oip"],
                                 "rm2", "5"], cwd=REPO, capture_output=True, text=True, timeout=120)
        assert client.returncode == 0, client.stderr
        assert json.loads(client.stdout) == {"OK": 5}
        # a pool change between two reads (a fleet tick) would make them differ: read until status is
        # the same before and after the scrape, then compare
        for _ in range(10):
            before, m, after = _status(ends["api"]), _metrics(ends["metrics"]), _status(ends["api"])
            if _view(before) == _view(after):
                break
        st = after
        assert st["served"] == 5 and st["models"]["rm2"]["served"] == 5
        assert m[("costscale_queries_total", (("code", "OK"), ("model", "rm2")))] == 5
        assert m[("costscale_pool_cost_dollars_per_hour", ())] == pytest.approx(st["pool_cost_per_hour"])
        assert st["instances"] == {"r5n.large": {"running": 1}}
        for itype, states in st["instances"].items():
            for state in ("pending", "running", "parked", "draining"):
                assert m[("costscale_instances", (("instance_type", itype), ("market", "on_demand"), ("state", state), ("zone", "")))] == states.get(state, 0)
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "every instance terminated, every worker stopped" in out
