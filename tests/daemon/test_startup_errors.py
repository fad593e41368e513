"""A daemon that cannot start says why in one line (exit 1 for the environment, 2 for the config),
never a traceback; a plan that fails at run time is one log line, retried on the fleet interval,
not a traceback every model tick. Nothing here leaves 127.0.0.1 (port 9 is the discard port,
closed here)."""
from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from config.schema import parse_config_text
from daemon.app import Daemon
from scaler.planner.base_aux import PlanError
from scaler.cloud.fake import FakeCloud

CONFIG = """\
cluster: startup
budget_per_hour: {budget}
models:
  - name: rm2
    qos_ms: 350
instance_types:
  - type: r5n.large
  - type: t3.xlarge
launch:
  ami_id: ami-1
dispatcher:
  listen: 127.0.0.1:0
state_path: {state}
model_scaling:
  generate_variants: false
aws:
  endpoint_url: http://127.0.0.1:9
"""


def _run(tmp_path: Path, budget: float, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(CONFIG.format(budget=budget, state=tmp_path / "state.db"))
    exe = Path(sys.executable).with_name("costscale")
    return subprocess.run([str(exe), "run", str(cfg)], capture_output=True, text=True, timeout=120, env=env)


def _no_aws_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"), AWS_CONFIG_FILE=str(tmp_path / "none"),
               AWS_EC2_METADATA_DISABLED="true")
    return env


def _lines(r: subprocess.CompletedProcess[str]) -> list[str]:
    return [ln for ln in r.stderr.splitlines() if ln.strip()]


def test_no_credentials_is_one_line_naming_the_fix(tmp_path: Path) -> None:
    r = _run(tmp_path, 2.5, _no_aws_env(tmp_path))
    assert r.returncode == 1
    assert _lines(r) == [_lines(r)[-1]] and "Traceback" not in r.stderr, r.stderr
    assert "no AWS credentials" in r.stderr and "instance role" in r.stderr


def test_unreachable_endpoint_is_one_line(tmp_path: Path) -> None:
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    r = _run(tmp_path, 2.5, env)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    # the cluster lease (DynamoDB at the same endpoint) is the first AWS call, before reconciling EC2
    assert _lines(r) == [_lines(r)[-1]]
    assert _lines(r)[-1].startswith("costscale: DynamoDB unreachable at http://127.0.0.1:9: describe_table: ")
    assert _lines(r)[-1].endswith("; check the network, region and aws.endpoint_url")


def test_a_budget_no_type_fits_is_refused_before_start(tmp_path: Path) -> None:
    r = _run(tmp_path, 0.1, dict(os.environ))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert _lines(r) == ["costscale: " + str(tmp_path / "c.yaml") + ": budget_per_hour: 0.1 $/hr buys no allowed "
                         "instance type (the cheapest, r5n.large, costs 0.149 $/hr)"]


def test_a_failed_plan_is_one_log_line_and_no_replan_every_model_tick(tmp_path: Path,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    cfg = parse_config_text(CONFIG.format(budget=2.5, state=tmp_path / "state.db"))

    async def scenario() -> tuple[int, str | None]:
        d = Daemon(cfg, None, cloud=FakeCloud("startup"), listen="127.0.0.1:0", generate_variants=False)
        await d.start()
        try:
            def no_pool(demand, keep=None):  # type: ignore[no-untyped-def]
                raise PlanError("no pool of r5n.large, t3.xlarge fits 0.1 $/hr")
            d.decide = no_pool  # type: ignore[method-assign]
            ticks = 0
            real_tick = d.fleet_tick

            async def counted(reason: str = "interval") -> None:
                nonlocal ticks
                ticks += 1
                await real_tick(reason)
            d.fleet_tick = counted  # type: ignore[method-assign]
            await d.fleet_tick("test")
            for _ in range(5):
                await d.model_tick()
            return ticks, d.status.last_error
        finally:
            await d.stop(grace=0.0)

    with caplog.at_level(logging.INFO):
        ticks, last_error = asyncio.run(scenario())
    assert ticks == 1                       # the model ticks did not force a replan each
    assert last_error == "no pool of r5n.large, t3.xlarge fits 0.1 $/hr"
    assert not [r for r in caplog.records if r.exc_info], "a failed plan logged a traceback"
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR] == [
        "fleet: no pool of r5n.large, t3.xlarge fits 0.1 $/hr"]
