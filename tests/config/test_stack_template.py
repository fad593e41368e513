"""The CloudFormation stack (``config/stack/costscale-stack.yaml``, issue #38 deliverable 4) is what
``python -m config.stack render`` builds from ``config/iam``, its IAM policies are the shipped
documents exactly (with CloudFormation substitutions for the placeholders), it passes cfn-lint, its
lease table is the table ``ensure_table`` creates, and nothing in it is open to the world."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from config.iam import DOCUMENTS, PLACEHOLDERS, load
from config.stack import TEMPLATE_PATH
from config.stack.template import CFN_VALUES, CONTROL_HOST_DOCS, SWITCHES, WORKER_DOCS, logical_id, render_yaml

ROOT = Path(__file__).resolve().parents[2]


def _template() -> dict[str, Any]:
    return dict(yaml.safe_load(TEMPLATE_PATH.read_text()))


def _unsub(value: Any) -> Any:
    """A template part with each ``Fn::Sub`` string back in config/iam's placeholders."""
    back = {v: "{" + k + "}" for k, v in CFN_VALUES.items()}
    if isinstance(value, dict) and set(value) == {"Fn::Sub"}:
        return re.sub(r"\$\{[^}]+\}", lambda m: back[m.group(0)], value["Fn::Sub"])
    if isinstance(value, list):
        return [_unsub(v) for v in value]
    if isinstance(value, dict):
        return {k: _unsub(v) for k, v in value.items()}
    return value


def test_the_shipped_template_is_the_render() -> None:
    assert TEMPLATE_PATH.read_text() == render_yaml(), \
        "run: python -m config.stack render > config/stack/costscale-stack.yaml"
    out = subprocess.run([sys.executable, "-m", "config.stack", "render"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    assert out == TEMPLATE_PATH.read_text()


def test_each_policy_is_a_shipped_document_exactly() -> None:
    resources = _template()["Resources"]
    policies = {k: r for k, r in resources.items() if r["Type"] == "AWS::IAM::Policy"}
    expected = {logical_id(d): (d, "ControlHostRole", c) for d, c in CONTROL_HOST_DOCS.items()}
    expected |= {logical_id(d): (d, "WorkerRole", c) for d, c in WORKER_DOCS.items()}
    assert sorted(policies) == sorted(expected)
    assert sorted(d for d, _, _ in expected.values()) == sorted(DOCUMENTS)       # every document, once
    for key, (doc, role, cond) in expected.items():
        res = policies[key]
        assert res["Properties"]["PolicyName"] == f"costscale-{doc}"
        assert res["Properties"]["Roles"] == [{"Ref": role}]
        assert res.get("Condition") == cond
        assert _unsub(res["Properties"]["PolicyDocument"]) == load(doc), doc
    # every placeholder of config/iam has its substitution, and each names what the stack holds
    assert set(CFN_VALUES) == set(PLACEHOLDERS)
    assert {"LeaseTable", "Bucket", "InterruptionQueue", "WorkerRole"} <= set(resources)
    assert set(_template()["Conditions"]) == {c for c, _, _ in SWITCHES.values()}


def test_cfn_lint_passes() -> None:
    # cfn-lint's console script (cfnlint has no __main__), under this interpreter
    code = "import sys; from cfnlint.runner import main; sys.argv[0] = 'cfn-lint'; sys.exit(main())"
    proc = subprocess.run([sys.executable, "-c", code, str(TEMPLATE_PATH)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_lease_table_is_the_one_ensure_table_creates() -> None:
    from scaler.replicas.dynamo_items import NOT_FOUND, DynamoItems

    class Recorder:
        created: dict[str, Any] = {}

        def describe_table(self, **kw: Any) -> Any:
            from botocore.exceptions import ClientError

            raise ClientError({"Error": {"Code": NOT_FOUND, "Message": "no table"}}, "DescribeTable")

        def create_table(self, **kw: Any) -> Any:
            Recorder.created = kw
            return {}

        def get_waiter(self, name: str) -> Any:
            return type("W", (), {"wait": lambda self, **kw: None})()

    DynamoItems("t", Recorder()).ensure_table()
    props = _template()["Resources"]["LeaseTable"]["Properties"]
    made = Recorder.created
    assert (props["KeySchema"], props["AttributeDefinitions"], props["BillingMode"]) == \
        (made["KeySchema"], made["AttributeDefinitions"], made["BillingMode"])


def test_nothing_is_open_to_the_world_and_the_bucket_is_locked() -> None:
    t = _template()
    text = json.dumps(t)
    assert "0.0.0.0/0" not in text and "::/0" not in text
    assert "Default" not in t["Parameters"]["AllowedCidr"]
    ingress = [r["Properties"] for r in t["Resources"].values() if r["Type"] == "AWS::EC2::SecurityGroupIngress"]
    assert sorted((i["GroupId"]["Fn::GetAtt"][0], i["FromPort"]["Ref"], json.dumps(i.get("CidrIp") or
                   i["SourceSecurityGroupId"])) for i in ingress) == [
        ("ControlHostSecurityGroup", "DispatcherPort", '{"Fn::GetAtt": ["WorkerSecurityGroup", "GroupId"]}'),
        ("ControlHostSecurityGroup", "DispatcherPort", '{"Ref": "AllowedCidr"}'),
        ("WorkerSecurityGroup", "WorkerPort", '{"Fn::GetAtt": ["ControlHostSecurityGroup", "GroupId"]}')]
    bucket = t["Resources"]["Bucket"]["Properties"]
    assert bucket["PublicAccessBlockConfiguration"] == {"BlockPublicAcls": True, "BlockPublicPolicy": True,
                                                        "IgnorePublicAcls": True, "RestrictPublicBuckets": True}
    assert bucket["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"] == \
        {"SSEAlgorithm": "AES256"}


def test_the_token_parameter_is_named_not_created() -> None:
    """CloudFormation cannot create a SecureString: the stack outputs the name the daemon creates
    (``scaler.cloud.token_parameter.DEFAULT_PARAMETER``), the one the IAM documents scope."""
    from scaler.cloud.token_parameter import DEFAULT_PARAMETER

    t = _template()
    assert not [r for r in t["Resources"].values() if r["Type"] == "AWS::SSM::Parameter"]
    assert _unsub(t["Outputs"]["TokenParameterName"]["Value"]) == DEFAULT_PARAMETER
    arn_tail = ":parameter" + DEFAULT_PARAMETER
    assert load("worker")["Statement"][0]["Resource"].endswith(arn_tail)
