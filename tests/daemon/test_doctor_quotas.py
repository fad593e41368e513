"""``costscale doctor``'s vCPU quota headroom and IAM policy simulator checks (issue #38, deliverables
5 and 6): broken setups on the session's moto, each caught in one line (text and ``--json``), no
traceback. moto has no Service Quotas for ``ec2`` and no SimulatePrincipalPolicy, so botocore's
Stubber answers those two services, each request exact; EC2 (the instances running in the account,
and every other check) is moto's."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import boto3
import pytest
from botocore.stub import Stubber

from config.iam import as_list
from config.schema import parse_config_text
from daemon.doctor import checks
from daemon.doctor.simulate import needed_statements, principal_arn
from tests.daemon.test_doctor import account, doctor, good_config, line_of  # noqa: F401  (account: the fixture)

REGION = "us-east-1"
ACCOUNT = "123456789012"


def _quota(code: str, value: float) -> dict[str, Any]:
    return {"Quota": {"ServiceCode": "ec2", "QuotaCode": code, "Value": value, "Unit": "None"}}


def _ask(code: str) -> dict[str, str]:
    return {"ServiceCode": "ec2", "QuotaCode": code}


def _stubbed(monkeypatch: pytest.MonkeyPatch, fill: Callable[[str, Stubber], None]) -> dict[str, Stubber]:
    """``daemon.doctor.checks.clients_for`` with the ``service-quotas`` and ``iam`` clients stubbed
    (``fill(service, stubber)`` queues their answers), the others moto's."""
    made = checks.clients_for
    stubs: dict[str, Stubber] = {}

    def clients_for(cfg: Any) -> Any:
        real = made(cfg)

        def client(service: str) -> Any:
            if service not in ("service-quotas", "iam"):
                return real(service)
            if service not in stubs:
                c = boto3.client(service, region_name=REGION, aws_access_key_id="k", aws_secret_access_key="s")
                stubs[service] = Stubber(c)
                fill(service, stubs[service])
                stubs[service].activate()
            return stubs[service].client
        return client

    monkeypatch.setattr(checks, "clients_for", clients_for)
    return stubs


def _caller(endpoint: str) -> str:
    return str(boto3.client("sts", region_name=REGION, endpoint_url=endpoint).get_caller_identity()["Arn"])


def _simulate(stub: Stubber, cfg: Any, arn: str, denied: dict[str, str] | None = None) -> None:
    """One SimulatePrincipalPolicy per needed statement, each action allowed but ``denied``'s."""
    denied = denied or {}
    for st in needed_statements(cfg, ACCOUNT):
        ask: dict[str, Any] = {"PolicySourceArn": principal_arn(arn), "ActionNames": as_list(st["Action"]),
                               "ResourceArns": as_list(st["Resource"])}
        cond = [{"ContextKeyName": k, "ContextKeyValues": as_list(v), "ContextKeyType": "string"}
                for op in (st.get("Condition") or {}).values() for k, v in op.items()]
        if cond:
            ask["ContextEntries"] = cond
        stub.add_response("simulate_principal_policy", {"IsTruncated": False, "EvaluationResults": [
            {"EvalActionName": a, "EvalDecision": denied.get(a, "allowed")} for a in as_list(st["Action"])]}, ask)


def _config(ids: dict[str, str], tmp_path: Path, **over: Any) -> dict[str, Any]:
    cfg = good_config(ids, tmp_path)
    cfg.update(over)
    return cfg


def test_the_simulators_requests_are_the_config_documents_statements(account: dict[str, str],  # noqa: F811
                                                                     tmp_path: Path) -> None:
    cfg = parse_config_text(__import__("yaml").safe_dump(good_config(account, tmp_path)))
    sts = needed_statements(cfg, ACCOUNT)
    assert [st["Sid"] for st in sts] == [
        "ListClusterInstances", "LaunchWorkers", "TagWorkersAtLaunch", "TerminateClusterInstances", "PassWorkerRole",
        "ClusterLease", "CreateLeaseTable", "PublishClusterToken", "ReadVcpuQuotas", "RegionPrices",
        "ReadModelsAndJobInputs", "ListJobInputPrefixes", "WriteJobOutputs"]
    assert sts[3]["Resource"] == f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance/*"
    assert sts[3]["Condition"] == {"StringEquals": {"ec2:ResourceTag/costscale:cluster": "doc"}}
    assert principal_arn("arn:aws:sts::111122223333:assumed-role/costscale-host/i-0abc") == \
        "arn:aws:iam::111122223333:role/costscale-host"
    assert principal_arn("arn:aws:iam::111122223333:user/ops") == "arn:aws:iam::111122223333:user/ops"


def test_a_g_and_vt_quota_of_0_with_a_g4dn_type_fails_the_quotas_check(
        account: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str],  # noqa: F811
        monkeypatch: pytest.MonkeyPatch) -> None:
    raw = _config(account, tmp_path, instance_types=[{"type": "g4dn.xlarge"}])
    cfg = parse_config_text(__import__("yaml").safe_dump(raw))
    arn = _caller(account["endpoint"])

    def fill(service: str, stub: Stubber) -> None:
        for _ in range(2):                      # text, then --json
            if service == "service-quotas":
                stub.add_response("get_service_quota", _quota("L-DB2E81BA", 0.0), _ask("L-DB2E81BA"))
            else:
                _simulate(stub, cfg, arn)
    stubs = _stubbed(monkeypatch, fill)
    code, lines, result = doctor(raw, tmp_path, capsys)
    assert code == 1
    # 2.5 $/hr buys 4 g4dn.xlarge at 0.526 $/hr: 16 vCPUs
    assert line_of(lines, "quotas") == (
        "fail quotas the on-demand vCPU quota of g_vt is 0 (L-DB2E81BA): no g4dn.xlarge can launch; raise \"Running "
        "On-Demand G and VT instances\" (L-DB2E81BA) to at least 16 vCPUs (Service Quotas), or drop the type "
        "(VcpuLimitExceeded)")
    assert next(c for c in result["checks"] if c["check"] == "quotas")["code"] == "VcpuLimitExceeded"
    assert line_of(lines, "simulate") == f"ok simulate the policy simulator allows {arn} all 17 actions the config needs"
    for s in stubs.values():
        s.assert_no_pending_responses()


def test_a_peak_over_the_headroom_warns_naming_the_quota_to_raise_and_by_how_much(
        account: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str],  # noqa: F811
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Standard's quota 16 vCPUs; another c5.2xlarge of the account runs (8, outside the cluster);
    2.5 $/hr buys 7 c5.2xlarge (56 vCPUs): headroom 8, raise to 8 + 56 = 64."""
    ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=account["endpoint"])
    ec2.run_instances(ImageId=account["ami_x86"], InstanceType="c5.2xlarge", MinCount=1, MaxCount=1)
    raw = _config(account, tmp_path)
    cfg = parse_config_text(__import__("yaml").safe_dump(raw))
    arn = _caller(account["endpoint"])

    def fill(service: str, stub: Stubber) -> None:
        for _ in range(2):
            if service == "service-quotas":
                stub.add_response("get_service_quota", _quota("L-1216C47A", 16.0), _ask("L-1216C47A"))
            else:
                _simulate(stub, cfg, arn)
    _stubbed(monkeypatch, fill)
    code, lines, _ = doctor(raw, tmp_path, capsys)
    assert code == 0, lines
    assert line_of(lines, "quotas") == (
        "warn quotas on-demand standard: the budget buys up to 56 vCPUs (7 x c5.2xlarge) but L-1216C47A leaves 8 "
        "(quota 16 - 8 in use): the plan stays within the quota and the budget is not bought; raise \"Running "
        "On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances\" (L-1216C47A) to 64 vCPUs (Service Quotas)")


def test_headroom_for_the_peak_is_ok_and_says_what_was_read(
        account: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str],  # noqa: F811
        monkeypatch: pytest.MonkeyPatch) -> None:
    raw = _config(account, tmp_path)
    cfg = parse_config_text(__import__("yaml").safe_dump(raw))
    arn = _caller(account["endpoint"])

    def fill(service: str, stub: Stubber) -> None:
        for _ in range(2):
            if service == "service-quotas":
                stub.add_client_error("get_service_quota", "NoSuchResourceException", "none", 400, _ask("L-1216C47A"))
                stub.add_response("get_aws_default_service_quota", _quota("L-1216C47A", 64.0), _ask("L-1216C47A"))
            else:
                _simulate(stub, cfg, arn)
    _stubbed(monkeypatch, fill)
    _, lines, _ = doctor(raw, tmp_path, capsys)
    assert line_of(lines, "quotas") == ("ok quotas vCPU headroom holds the budget's peak: on-demand standard 64 "
                                        "(L-1216C47A AWS default, 0 in use, peak 56)")


def test_an_action_the_simulator_denies_fails_in_one_line_naming_it(
        account: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str],  # noqa: F811
        monkeypatch: pytest.MonkeyPatch) -> None:
    raw = _config(account, tmp_path)
    cfg = parse_config_text(__import__("yaml").safe_dump(raw))
    arn = _caller(account["endpoint"])

    def fill(service: str, stub: Stubber) -> None:
        for _ in range(2):
            if service == "service-quotas":
                stub.add_response("get_service_quota", _quota("L-1216C47A", 64.0), _ask("L-1216C47A"))
            else:
                _simulate(stub, cfg, arn, {"ec2:TerminateInstances": "implicitDeny"})
    _stubbed(monkeypatch, fill)
    code, lines, result = doctor(raw, tmp_path, capsys)
    assert code == 1
    assert line_of(lines, "simulate") == (
        f"fail simulate the policy simulator denies {arn} 1 of 17 actions the config needs: ec2:TerminateInstances "
        "(implicitDeny, Sid TerminateClusterInstances); attach the config/iam documents the config needs (python -m "
        "config.iam NAME key=value prints one filled) (implicitDeny)")
    assert [c["status"] for c in result["checks"] if c["check"] == "simulate"] == ["fail"]


def test_a_caller_not_allowed_to_simulate_is_a_warning_and_so_is_a_quota_not_read(
        account: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str],  # noqa: F811
        monkeypatch: pytest.MonkeyPatch) -> None:
    raw = _config(account, tmp_path)
    arn = _caller(account["endpoint"])

    def fill(service: str, stub: Stubber) -> None:
        for _ in range(2):
            if service == "service-quotas":
                stub.add_client_error("get_service_quota", "AccessDeniedException", "Access denied", 400,
                                      _ask("L-1216C47A"))
            else:
                stub.add_client_error("simulate_principal_policy", "AccessDenied",
                                      f"User: {arn} is not authorized to perform: iam:SimulatePrincipalPolicy", 403)
    _stubbed(monkeypatch, fill)
    code, lines, _ = doctor(raw, tmp_path, capsys)
    assert code == 0, lines
    assert line_of(lines, "simulate") == (
        f"warn simulate skipped: not allowed to simulate (User: {arn} is not authorized to perform: "
        "iam:SimulatePrincipalPolicy); attach config/iam/doctor.json (it grants iam:SimulatePrincipalPolicy) to "
        "whoever runs doctor (AccessDenied)")
    assert line_of(lines, "quotas") == (
        "warn quotas quota not read: on-demand standard (L-1216C47A): AccessDeniedException: Access denied (needs "
        "servicequotas:GetServiceQuota); grant servicequotas:GetServiceQuota (config/iam/control-host.json); the "
        "daemon plans with the config's quotas or none there (AccessDeniedException)")
