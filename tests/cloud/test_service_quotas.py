"""The vCPU quotas read from Service Quotas (issue #38 deliverable 6; ``scaler.cloud.service_quotas``,
``daemon.aws.quotas``). moto answers GetServiceQuota for ``vpc`` only and has no
GetAWSDefaultServiceQuota, so botocore's Stubber answers here, each request exact: the applied value,
the AWS default where none is applied, a refusal (one line naming the action, never raised), and
the daemon's start reading them through an injected client, the config winning per family, the log
saying what was read and from where."""
from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from config.schema import parse_config_text
from config.sections.quotas import QuotasSpec
from daemon.aws.quotas import KnownQuotas
from scaler.cloud.service_quotas import read_quotas
from scaler.planner.quota import wanted_quotas


def _client() -> tuple[Any, Stubber]:
    c = boto3.client("service-quotas", region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s")
    return c, Stubber(c)


def _quota(code: str, value: float) -> dict[str, Any]:
    return {"Quota": {"ServiceCode": "ec2", "QuotaCode": code, "Value": value, "Unit": "None"}}


def _ask(code: str) -> dict[str, str]:
    return {"ServiceCode": "ec2", "QuotaCode": code}


def test_the_applied_value_else_the_aws_default_else_one_line() -> None:
    client, stub = _client()
    stub.add_response("get_service_quota", _quota("L-DB2E81BA", 64.0), _ask("L-DB2E81BA"))
    stub.add_client_error("get_service_quota", "NoSuchResourceException", "no applied value", 400, _ask("L-1216C47A"))
    stub.add_response("get_aws_default_service_quota", _quota("L-1216C47A", 5.0), _ask("L-1216C47A"))
    stub.add_client_error("get_service_quota", "AccessDeniedException",
                          "User: arn:aws:iam::1:user/h is not authorized to perform: servicequotas:GetServiceQuota",
                          400, _ask("L-3819A6DF"))
    with stub:
        got = read_quotas(client, [("on_demand", "g_vt"), ("on_demand", "standard"), ("spot", "g_vt"),
                                   ("spot", "high_memory")])
        stub.assert_no_pending_responses()
    assert got.limits == {("on_demand", "g_vt"): 64, ("on_demand", "standard"): 5}
    assert got.sources == {("on_demand", "g_vt"): "L-DB2E81BA applied", ("on_demand", "standard"): "L-1216C47A AWS default"}
    assert got.unread == {
        ("spot", "g_vt"): "spot g_vt (L-3819A6DF): AccessDeniedException: User: arn:aws:iam::1:user/h is not authorized "
                          "to perform: servicequotas:GetServiceQuota",
        ("spot", "high_memory"): "spot high_memory (None): AWS has no spot quota for high_memory"}
    assert got.codes == {("spot", "g_vt"): "AccessDeniedException", ("spot", "high_memory"): ""}


def test_a_refusal_without_the_action_in_its_message_is_named_and_an_outage_is_one_line() -> None:
    client, stub = _client()
    stub.add_client_error("get_service_quota", "AccessDeniedException", "Access denied", 400, _ask("L-1216C47A"))
    stub.add_client_error("get_service_quota", "NoSuchResourceException", "none", 400, _ask("L-34B43A08"))
    stub.add_client_error("get_aws_default_service_quota", "NoSuchResourceException", "none", 400, _ask("L-34B43A08"))
    with stub:
        got = read_quotas(client, [("on_demand", "standard"), ("spot", "standard")])
    assert got.limits == {}
    assert got.unread == {
        ("on_demand", "standard"): "on-demand standard (L-1216C47A): AccessDeniedException: Access denied (needs "
                                   "servicequotas:GetServiceQuota)",
        ("spot", "standard"): "spot standard (L-34B43A08): NoSuchResourceException: Service Quotas lists no L-34B43A08"}


CONFIG = """\
cluster: quotas
budget_per_hour: 2.5
models:
  - name: rm2
    qos_ms: 350
instance_types:
  - type: g4dn.xlarge
  - type: c5.2xlarge
    market: both
launch:
  ami_id: ami-1
spot:
  zones: {{us-east-1a: subnet-1}}
dispatcher:
  listen: 127.0.0.1:0
state_path: {state}
model_scaling:
  generate_variants: false
quotas:
  on_demand: {{standard: 16}}
"""


def test_the_families_read_are_those_the_configured_types_touch(tmp_path: Path) -> None:
    cfg = parse_config_text(CONFIG.format(state=tmp_path / "s.db"))
    assert wanted_quotas(cfg) == [("on_demand", "g_vt"), ("on_demand", "standard"), ("spot", "standard")]


def test_the_daemon_reads_the_quotas_at_start_the_config_wins_and_the_log_says_from_where(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Service Quotas refuses the G-and-VT read and says 32 for Standard; the config names Standard
    16: the daemon plans with standard 16 and no G-and-VT cap, and one warning names the quota not
    read."""
    from daemon.app import Daemon
    from scaler.cloud.fake import FakeCloud

    text = CONFIG.format(state=tmp_path / "s.db").replace("    market: both\n", "")
    cfg = parse_config_text(text.replace("spot:\n  zones: {us-east-1a: subnet-1}\n", ""))
    client, stub = _client()
    stub.add_client_error("get_service_quota", "AccessDeniedException", "Access denied", 400, _ask("L-DB2E81BA"))
    stub.add_response("get_service_quota", _quota("L-1216C47A", 32.0), _ask("L-1216C47A"))

    async def scenario() -> QuotasSpec | None:
        d = Daemon(cfg, None, cloud=FakeCloud("quotas"), listen="127.0.0.1:0", generate_variants=False)
        d.quotas = KnownQuotas(client)
        await d.start()
        try:
            return d.cfg.quotas
        finally:
            await d.stop(grace=0.0)

    with stub, caplog.at_level(logging.INFO):
        quotas = asyncio.run(scenario())
        stub.assert_no_pending_responses()
    assert quotas == QuotasSpec(on_demand={"standard": 16})
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("vCPU quotas")]
    assert said == [
        "vCPU quotas not read from Service Quotas: on-demand g_vt (L-DB2E81BA): AccessDeniedException: Access denied "
        "(needs servicequotas:GetServiceQuota); planning with the config's quotas or none there",
        "vCPU quotas: on-demand standard 16 (config)"]


def test_the_next_read_forgets_a_lowered_quota(tmp_path: Path) -> None:
    from scaler.cloud.provider import ManagedInstance

    cfg = parse_config_text(CONFIG.format(state=tmp_path / "s.db"))
    client, stub = _client()
    for _ in range(2):
        stub.add_response("get_service_quota", _quota("L-DB2E81BA", 64.0), _ask("L-DB2E81BA"))
        stub.add_response("get_service_quota", _quota("L-1216C47A", 32.0), _ask("L-1216C47A"))
        stub.add_response("get_service_quota", _quota("L-34B43A08", 8.0), _ask("L-34B43A08"))
    known = KnownQuotas(client)
    with stub:
        running = known.start(cfg, aws=False)
        assert running.quotas == QuotasSpec(on_demand={"standard": 16, "g_vt": 64}, spot={"standard": 8})
        live = [ManagedInstance(f"i-{k}", "g4dn.xlarge", "running") for k in range(3)]
        assert known.lower(running, ["g4dn.xlarge"], live)
        assert not known.lower(running, ["g4dn.xlarge"], live)           # the same again moves nothing
        running = known.applied(running)
        assert running.quotas.on_demand == {"standard": 16, "g_vt": 12}
        assert known.describe() == ("vCPU quotas: on-demand g_vt 12 (lowered by a refused launch), on-demand standard "
                                    "16 (config), spot standard 8 (Service Quotas L-34B43A08 applied)")
        assert known.refresh(running)
        assert known.applied(running).quotas.on_demand == {"standard": 16, "g_vt": 64}


def test_a_reloaded_config_brings_its_own_override_and_keeps_what_was_read(tmp_path: Path) -> None:
    cfg = parse_config_text(CONFIG.format(state=tmp_path / "s.db"))
    client, stub = _client()
    stub.add_response("get_service_quota", _quota("L-DB2E81BA", 64.0), _ask("L-DB2E81BA"))
    stub.add_response("get_service_quota", _quota("L-1216C47A", 32.0), _ask("L-1216C47A"))
    stub.add_response("get_service_quota", _quota("L-34B43A08", 8.0), _ask("L-34B43A08"))
    known = KnownQuotas(client)
    with stub:
        known.start(cfg, aws=False)
    reloaded = cfg.model_copy(update={"quotas": QuotasSpec(spot={"standard": 4})})
    assert known.adopt(reloaded).quotas == QuotasSpec(on_demand={"g_vt": 64, "standard": 32}, spot={"standard": 4})
    assert known.adopt(cfg.model_copy(update={"quotas": None})).quotas == \
        QuotasSpec(on_demand={"g_vt": 64, "standard": 32}, spot={"standard": 8})


def test_the_hourly_job_reads_again_and_says_when_the_quotas_moved(tmp_path: Path) -> None:
    from daemon.aws.quotas import REFRESH_S

    cfg = parse_config_text(CONFIG.format(state=tmp_path / "s.db"))
    client, stub = _client()
    for g_vt in (64.0, 64.0, 96.0):
        stub.add_response("get_service_quota", _quota("L-DB2E81BA", g_vt), _ask("L-DB2E81BA"))
        stub.add_response("get_service_quota", _quota("L-1216C47A", 32.0), _ask("L-1216C47A"))
        stub.add_response("get_service_quota", _quota("L-34B43A08", 8.0), _ask("L-34B43A08"))
    jobs: list[tuple[Any, dict[str, Any]]] = []

    class Scheduler:
        def add_job(self, fn: Any, trigger: str, **kw: Any) -> None:
            jobs.append((fn, {"trigger": trigger, **kw}))

    known = KnownQuotas(client)
    moved: list[int] = []
    with stub:
        running = known.start(cfg, aws=False)
        known.schedule(Scheduler(), lambda: running, lambda: moved.append(1))
        assert [kw for _, kw in jobs] == [{"trigger": "interval", "seconds": REFRESH_S, "max_instances": 1,
                                           "coalesce": True, "id": "quotas"}]
        asyncio.run(jobs[0][0]())           # the same values: nothing moved
        assert moved == []
        asyncio.run(jobs[0][0]())           # G and VT raised to 96
        assert moved == [1] and known.applied(running).quotas.on_demand == {"standard": 16, "g_vt": 96}
        stub.assert_no_pending_responses()
    assert KnownQuotas().schedule(Scheduler(), lambda: running, lambda: None) is None and len(jobs) == 1


def test_an_endpoint_that_does_not_answer_is_asked_once(tmp_path: Path) -> None:
    """A dead endpoint (port 9, closed here): the first read fails with no AWS code, the rest are not
    asked; one line each, nothing raised."""
    from scaler.cloud.service_quotas import make_quotas_client

    client = make_quotas_client("us-east-1", "http://127.0.0.1:9", max_attempts=1)
    got = read_quotas(client, [("on_demand", "g_vt"), ("spot", "g_vt")])
    assert got.limits == {} and got.codes == {("on_demand", "g_vt"): "", ("spot", "g_vt"): ""}
    assert got.unread[("on_demand", "g_vt")].startswith("on-demand g_vt (L-DB2E81BA): get_service_quota: Could not "
                                                        "connect to the endpoint URL")
    assert got.unread[("spot", "g_vt")] == "spot g_vt (L-3819A6DF): not asked (Service Quotas did not answer)"
