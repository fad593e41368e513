"""The audit log: ``log_format: json`` (or ``costscale run --log-format json``) writes one JSON
object per line, and a decision is an event with what it takes to reconstruct the spend: the plan with its rule and
demand, each launch and termination with instance ids, type, intent id and the pool's $/hr after.
With ``audit_log`` the same events go to
their own file, which a SIGHUP reopens after logrotate moved it. Against moto in server mode on 127.0.0.1."""
from __future__ import annotations

import json
from itertools import accumulate
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import boto3
import pytest

pytestmark = pytest.mark.slow
R5 = 0.149   # r5n.large $/hr (config/instance_catalog.csv)


def test_json_audit_trail_of_a_daemon_run(moto_endpoint: str, tmp_path: Path) -> None:
    ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=moto_endpoint)
    ami = ec2.describe_images()["Images"][0]["ImageId"]
    cfg = tmp_path / "costscale.yaml"
    cfg.write_text(f"""\
cluster: audit
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
metrics:
  listen: 127.0.0.1:0
intervals:
  fleet_s: 1
state_path: {tmp_path / "state.db"}
on_shutdown: terminate
log_format: json
audit_log:
  path: {tmp_path / "audit" / "audit.log"}
pinned_pool:
  r5n.large: 2
aws:
  endpoint_url: {moto_endpoint}
""")
    log = tmp_path / "daemon.log"
    with log.open("w") as logf:
        proc = subprocess.Popen([sys.executable, "-m", "daemon.cli", "run", str(cfg)],   # log_format: json
                                stdout=logf, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60      # a hang guard, not a measurement
        while time.monotonic() < deadline and log.read_text().count('"event": "launch"') < 2:
            assert proc.poll() is None, log.read_text()[-3000:]
            time.sleep(0.1)
        # logrotate: the audit file moved, then SIGHUP (a reload): the events after go to a new file
        audit_file = tmp_path / "audit" / "audit.log"
        audit_file.rename(tmp_path / "audit" / "audit.log.1")
        proc.send_signal(signal.SIGHUP)
        while time.monotonic() < deadline and '"message": "reloaded ' not in log.read_text():
            assert proc.poll() is None, log.read_text()[-3000:]
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, log.read_text()[-3000:]
    lines = [ln for ln in log.read_text().splitlines() if ln.strip()]
    records = [json.loads(ln) for ln in lines]          # every line is one JSON object
    assert all({"ts", "level", "logger", "message"} <= set(r) for r in records)
    events = [r for r in records if r["logger"] == "costscale.audit"]
    plan = next(e for e in events if e["event"] == "plan")
    assert plan["target"] == {"r5n.large": 2} and plan["cost_per_hour"] == pytest.approx(2 * R5)
    assert plan["reason"].startswith("pinned pool (config)") and plan["demand_qps"] == 0.0
    # moto gives MinCount: the second instance comes under a top-up intent of its own
    launches = [e for e in events if e["event"] == "launch"]
    launched = [i for e in launches for i in e["instance_ids"]]
    assert len(launched) == 2 and all(e["instance_type"] == "r5n.large" and e["intent"] for e in launches)
    assert len({e["intent"] for e in launches}) == len(launches)
    # each launch says what the pool costs once it is in
    assert [e["cost_per_hour_after"] for e in launches] == pytest.approx(
        list(accumulate(R5 * len(e["instance_ids"]) for e in launches)))
    # the shutdown's terminations (on_shutdown: terminate) close the trail: the pool costs nothing after
    term = [e for e in events if e["event"] == "terminate"]
    assert sorted(i for e in term for i in e["instance_ids"]) == sorted(launched)
    assert term[-1]["cost_per_hour_after"] == 0.0 and term[-1]["intent"]
    assert term[-1]["reason"] == "on_shutdown: terminate"
    # the audit file holds the same events: those before the move in the moved file, the shutdown's after
    moved, fresh = ([json.loads(ln) for ln in (tmp_path / "audit" / n).read_text().splitlines()]
                    for n in ("audit.log.1", "audit.log"))
    assert [e["event"] for e in moved + fresh] == [e["event"] for e in events]
    assert {e["event"] for e in moved} >= {"plan", "launch"} and "terminate" not in {e["event"] for e in moved}
    assert [e for e in fresh if e["event"] == "terminate"] == term
    assert all(stat.S_IMODE((tmp_path / "audit" / n).stat().st_mode) == 0o600 for n in ("audit.log.1", "audit.log"))
