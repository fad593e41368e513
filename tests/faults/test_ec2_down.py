"""The EC2 endpoint down for 60 s, then back (issue #40, deliverable 2): every connection to it refused
(botocore's EndpointConnectionError, retried and backed off by botocore as a real refused connect
would be) from virtual second 25 to 85, mid pool change. The fleet loop holds (the ticks in the
window fail, reported in one line, nothing launched), then resumes: the pool reaches the target, no
ClientToken is sent twice, every launch had its write-ahead intent, the budget held at every
launch, no orphan. One seeded point; ``bench/faults/fleet_faults_bench.py`` runs more
(``tests/fleet_faults.py`` says how the rig works). About 5 s of CPU (pytest's start included; 44 s
wall at a load average of 20 on 2 cores)."""
from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.fleet_faults import BUDGET, Window, run_seed

SEED = 1
DOWN = Window(25.0, 85.0)


@pytest.mark.timeout(120)
def test_ec2_down_for_60s_holds_the_fleet_loop_then_resumes_without_a_double_launch(
        moto_endpoint: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="costscale"):
        led = run_seed(moto_endpoint, tmp_path, SEED, 12, DOWN.end, ec2_down=DOWN)
    assert led.excursions == [] and led.peak <= BUDGET
    assert led.duplicates == [] and len(set(led.sent)) == len(led.sent) > 0
    assert led.without_intent == []
    assert led.orphans == [] and led.pool_ok
    assert led.integrity == "ok"
    # the loop held: the ticks that started in the window failed, naming the unreachable endpoint
    assert len(led.failed_ticks) == 6
    assert all("Could not connect to the endpoint URL" in err for _, err in led.failed_ticks)
    # in one line (no traceback, not repeated while it lasts), then one when ticks apply again
    assert [r for r in caplog.records if r.name == "costscale" and r.exc_info] == []
    failed = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR and r.name == "costscale"]
    assert failed == [f"fleet: {led.failed_ticks[0][1]}"]
    assert failed[0].startswith('fleet: describe_instances: Could not connect to the endpoint URL: "http://127.0.0.1:')
    assert [r.getMessage() for r in caplog.records if "apply again" in r.getMessage()] == [
        f"fleet: ticks apply again (they failed: {led.failed_ticks[0][1]})"]
    assert led.recovered_after_s == 7.0
