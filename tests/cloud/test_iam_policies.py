"""The shipped IAM documents (``config/iam``) are complete and least-privilege, proven on moto with
IAM enforced (issue #38, deliverable 3; ``tests.iam_helpers``: a moto server of its own).

The daemon's AWS paths run with boto3 signing as IAM users that hold exactly the daemon's documents
(``config.iam.DAEMON_DOCUMENTS``: the control host's user: control-host, replicas, s3-models and
spot; the worker's: worker and worker-s3), filled for the run's cluster, table, bucket and queue (doctor.json,
which only ``costscale doctor`` uses, is proven by tests/cloud/test_iam_doctor.py):

* **start**: ``AwsWiring.open``: the cluster token published to SSM, the lease table created and
  the lease taken (DynamoDB);
* **fleet**: the actuator over ``Ec2Cloud`` (fenced by the lease): apply a pool of one (list,
  launch with the workers' instance profile, from the type family's image given as AWS's public SSM
  parameter: ssm:GetParameter), reconcile, apply an empty pool (terminate);
* **spot**: a spot launch in a zone and its termination; then **stop**: the lease given back; the
  spot prices (DescribeSpotPriceHistory); one warning read from the interruption queue (SQS
  receive and delete);
* **replicas**: a replica's heartbeat written, listed (Scan) and forgotten (DeleteItem);
* **quotas**: the vCPU quotas read from Service Quotas (``scaler.cloud.service_quotas``, what the
  daemon reads at start; moto lists no ``ec2`` quota and has no AWS default, which is no refusal);
* **s3**: a job output written, an input prefix listed, a model object read;
* **worker**: ``costscale worker``'s read of the cluster token as the worker's instance profile, and the
  bootstrap's reads of the wheelhouse manifest and a model from S3 (worker-s3).

With every document: no path fails (0 AccessDenied), and the IAM actions the paths call are exactly
the documents' actions (none granted and unused). Then each statement of each document is removed in
turn (all of them, parametrized): some path fails with the daemon's one line, naming an action of
that statement.

What moto cannot show (README "IAM policies"), so these hold on moto by reading, not by a failure:

* moto checks only the action of a request: ``ec2:CreateTags`` (which AWS checks for a RunInstances
  with TagSpecifications) and ``iam:PassRole`` (for its instance profile) are never asked, so the
  removal of TagWorkersAtLaunch or PassWorkerRole breaks nothing there (:data:`MOTO_BLIND`);
* moto has no Price List API (``pricing``), and the daemon asks it only without ``aws.endpoint_url``:
  RegionPrices is not exercised (tests/cloud/test_region_prices.py stubs it);
* ResolvePublicImages (ssm:GetParameter on AWS's public ``/aws/service/*`` parameters) is exercised
  by the fleet's launch, but moto judges SSM at ``*``, where PublishClusterToken grants the same
  action: its removal breaks nothing there. Its ARN is checked instead to match the public
  parameter the launch read, and PublishClusterToken's not to (so on AWS the read needs it);
* moto checks EC2, SSM and DynamoDB requests against the resource ``*``, so those statements run
  here with ``Resource: *`` (``tests.iam_helpers.moto_view``); their ARNs are checked instead to
  match the resources the paths touched
  (:func:`test_the_documents_arns_match_the_resources_the_paths_touched`). S3 and SQS statements
  run with their ARNs as shipped;
* moto judges a ``Condition`` with no request context, so it always holds there: the conditions
  (the cluster tag on terminate, ``ec2:CreateAction``, ``iam:PassedToService``) are shipped as
  AWS documents them, untested.
"""
from __future__ import annotations

import fnmatch
from pathlib import Path
from typing import Any, Callable

import boto3
import pytest

from config.iam import DAEMON_DOCUMENTS, DOCTOR, DOCUMENTS, as_list, load, readme_section, render, statements
from scaler.cloud.aws_client import client_error_line, iam_action, naming_action
from tests.iam_helpers import ACCOUNT, REGION, admin, as_user, create_user, enforce, moto_api, moto_view
from tests.iam_helpers import calls, iam_server  # noqa: F401  (the fixtures)

REPO = Path(__file__).resolve().parents[2]
CONTROL_DOCS = ("control-host", "replicas", "s3-models", "spot")
WORKER_DOCS = ("worker", "worker-s3")
BUCKET = "costscale-models"
QUEUE = "costscale-spot-warnings"
WORKER_ROLE = "costscale-worker"
ZONE = "us-east-1a"
#: (document, Sid) of every statement shipped
ALL_STATEMENTS = [(doc, st["Sid"]) for doc in DOCUMENTS for st in statements(doc)]
#: those of the daemon's documents, which the paths below prove (doctor.json: tests/cloud/test_iam_doctor.py)
DAEMON_STATEMENTS = [(doc, sid) for doc, sid in ALL_STATEMENTS if doc in DAEMON_DOCUMENTS]
#: statements whose actions moto never checks: their removal breaks no path on moto (module docstring)
MOTO_BLIND = {
    "TagWorkersAtLaunch": "moto checks ec2:RunInstances only, not the ec2:CreateTags AWS checks for TagSpecifications",
    "PassWorkerRole": "moto checks ec2:RunInstances only, not the iam:PassRole AWS checks for IamInstanceProfile",
    "RegionPrices": "moto has no Price List API; the daemon asks it only on AWS (no aws.endpoint_url)",
    "ResolvePublicImages": "moto judges SSM at *, where PublishClusterToken's ssm:GetParameter grants the read too",
}
#: the fleet's type family launches from AWS's public parameter (moto 5 holds its us-east-1 value)
PUBLIC_IMAGE = "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64"
PUBLIC_AMI = "ami-0d27e0fb3bac4d724"

Lines = dict[str, "str | None"]


def _values(cfg: Any) -> dict[str, str]:
    return {"region": REGION, "account": ACCOUNT, "cluster": cfg.cluster, "table": cfg.lease.table, "bucket": BUCKET,
            "queue": QUEUE, "worker_role": WORKER_ROLE}


def _policies(docs: tuple[str, ...], values: dict[str, str], without: str | None) -> dict[str, dict[str, Any]]:
    """The documents, filled and as moto judges them, less the statement ``without``."""
    out = {}
    for name in docs:
        doc = moto_view(render(load(name), values))
        doc["Statement"] = [st for st in doc["Statement"] if st["Sid"] != without]
        if doc["Statement"]:
            out[name] = doc
    return out


class Account:
    """One fresh moto account for a run: an AMI, the workers' instance profile, the bucket with a
    model and an input, the queue with one interruption warning, the two users; IAM enforced."""

    def __init__(self, endpoint: str, tmp: Path, without: str | None = None) -> None:
        from daemon.demos.basic import demo_config

        enforce(endpoint, False)
        moto_api(endpoint, "reset")
        root = admin(endpoint)
        ec2 = boto3.client("ec2", **root)
        ami = ec2.describe_images()["Images"][0]["ImageId"]
        iam = boto3.client("iam", **root)
        iam.create_role(RoleName=WORKER_ROLE, AssumeRolePolicyDocument="{}")
        iam.create_instance_profile(InstanceProfileName=WORKER_ROLE)
        iam.add_role_to_instance_profile(InstanceProfileName=WORKER_ROLE, RoleName=WORKER_ROLE)
        s3 = boto3.client("s3", **root)
        s3.create_bucket(Bucket=BUCKET)
        s3.put_object(Bucket=BUCKET, Key="models/m.onnx", Body=b"onnx")
        s3.put_object(Bucket=BUCKET, Key="inputs/a.npy", Body=b"npy")
        s3.put_object(Bucket=BUCKET, Key="wheelhouse/manifest.json", Body=b"{}")
        sqs = boto3.client("sqs", **root)
        self.queue_url = sqs.create_queue(QueueName=QUEUE)["QueueUrl"]
        sqs.send_message(QueueUrl=self.queue_url, MessageBody=_warning("i-0interrupted"))
        base = demo_config(tmp, endpoint, ami, 2.5, 2.0)
        raw = base.model_dump()
        raw["launch"]["iam_instance_profile"] = WORKER_ROLE
        raw["launch"]["by_type"] = {"g4dn": {"ssm_parameter": PUBLIC_IMAGE}}
        self.cfg = type(base).model_validate(raw)
        values = _values(self.cfg)
        self.control = create_user(endpoint, "control-host", _policies(CONTROL_DOCS, values, without))
        self.worker = create_user(endpoint, "worker", _policies(WORKER_DOCS, values, without))
        self.endpoint, self.tmp = endpoint, tmp
        enforce(endpoint, True)


def _warning(iid: str) -> str:
    import json

    return json.dumps({"version": "0", "source": "aws.ec2", "detail-type": "EC2 Spot Instance Interruption Warning",
                       "time": "2026-11-26T10:28:00Z", "region": REGION,
                       "detail": {"instance-id": iid, "instance-action": "terminate"}})


def _first_line(fn: Callable[[], None]) -> str | None:
    """None when ``fn`` runs through; else the one line of the error it raised."""
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - any failure is the path's line
        return str(exc)
    return None


def run_paths(acct: Account, monkeypatch: pytest.MonkeyPatch) -> Lines:
    """Every path of the module docstring as the account's users: path → its failure line, or None."""
    from config.errors import UsageError
    from daemon.aws.spot_queue import failure_line, read_once
    from daemon.aws.wiring import AwsWiring
    from daemon.commands.worker import _token_from_parameter
    from dispatcher.object_store import S3Objects
    from scaler.cloud.aws_client import make_client
    from scaler.fleet.actuator import FleetActuator
    from scaler.fleet.state import StateStore
    from scaler.pricing.spot import SpotPriceSource
    from scaler.replicas.lease_table import make_dynamodb_client
    from scaler.replicas.membership import Beat
    from scaler.replicas.replica_table import DynamoReplicaTable

    cfg, endpoint = acct.cfg, acct.endpoint
    lines: Lines = {}
    itype = cfg.instance_types[0].type
    as_user(monkeypatch, acct.control)
    wiring = AwsWiring(cfg, None)
    opened: list[Any] = []
    lines["start"] = _first_line(lambda: opened.append(wiring.open()))

    def fleet() -> None:
        act = FleetActuator(opened[0], StateStore.open(str(acct.tmp / "fleet.db")), cfg.catalog(), cfg.budget_per_hour)
        for rep in (act.apply({itype: 1}, "iam-1"), act.reconcile(), act.apply({}, "iam-2")):
            if getattr(rep, "errors", None):
                raise RuntimeError(rep.errors[0])
        assert not opened[0].list_managed()

    def spot_launch() -> None:
        ids = [i.instance_id for i in opened[0].launch(f"{itype}@{ZONE}", 1, "iam-spot-1")]
        assert ids
        opened[0].terminate(ids)

    def stop() -> None:
        wiring.lease.release()

    def spot_prices() -> None:
        src = SpotPriceSource(REGION, acct.tmp / "spot.json", endpoint_url=endpoint)
        _, warning = src.lookup([itype], [ZONE])
        if warning and "failed" in warning:
            raise RuntimeError(warning)

    def spot_queue() -> None:
        sqs = make_client("sqs", REGION, max_attempts=1, connect_timeout=3, read_timeout=5, endpoint_url=endpoint)
        got: list[Any] = []
        try:
            read_once(sqs, acct.queue_url, lambda *a: got.append(a), wait_s=0)
        except Exception as exc:  # noqa: BLE001
            raise RuntimeError(failure_line(acct.queue_url, exc)) from None
        assert [g[0] for g in got] == ["i-0interrupted"]

    def replicas() -> None:
        table = DynamoReplicaTable(cfg.lease.table, make_dynamodb_client(REGION, endpoint), cfg.cluster)
        beat = Beat(cluster=cfg.cluster, replica="r1", owner="o1", host="h", address="127.0.0.1:1", since=1.0,
                    expires_at=2e9)
        assert table.write_beat(beat, None) and table.beats() == [beat] and table.forget(beat)

    def quotas() -> None:
        from scaler.cloud.aws_client import DENIED_CODES
        from scaler.cloud.service_quotas import make_quotas_client, read_quotas

        got = read_quotas(make_quotas_client(REGION, endpoint, max_attempts=1), [("on_demand", "standard")])
        denied = [line for key, line in got.unread.items() if got.codes[key] in DENIED_CODES]
        if denied:          # (moto lists no ec2 quota, and has no AWS default: not a refusal)
            raise RuntimeError(denied[0])

    def s3() -> None:
        objects = S3Objects(REGION, endpoint)
        objects.put(f"s3://{BUCKET}/outputs/job-1.npy", b"out")
        assert objects.list(f"s3://{BUCKET}/inputs/") == [f"s3://{BUCKET}/inputs/a.npy"]
        assert objects.get(f"s3://{BUCKET}/models/m.onnx") == b"onnx"

    for name, path in (("fleet", fleet), ("spot launch", spot_launch), ("stop", stop), ("spot prices", spot_prices),
                       ("spot queue", spot_queue), ("replicas", replicas), ("quotas", quotas), ("s3", s3)):
        lines[name] = "not run: start failed" if not opened and name in ("fleet", "spot launch", "stop") else _first_line(path)
    as_user(monkeypatch, acct.worker)

    def worker() -> None:
        try:
            _token_from_parameter(f"/costscale/{cfg.cluster}/cluster-token")
        except UsageError as exc:
            raise RuntimeError(str(exc)) from None
        # the bootstrap's reads (its own SigV4 GET, the same action and resource): the wheelhouse, a model
        objects = S3Objects(REGION, endpoint)
        assert objects.get(f"s3://{BUCKET}/wheelhouse/manifest.json") == b"{}"
        assert objects.get(f"s3://{BUCKET}/models/m.onnx") == b"onnx"

    lines["worker"] = _first_line(worker)
    return lines



@pytest.mark.slow
def test_every_path_succeeds_with_the_documents_and_calls_exactly_their_actions(
        iam_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, calls: dict[str, list[Any]]) -> None:
    """0 refusals; every action granted is called and none called is not granted; the two that moto
    never asks for are needed by what the launches send (TagSpecifications: ``ec2:CreateTags``;
    IamInstanceProfile: ``iam:PassRole``), and every launch sends both."""
    try:
        acct = Account(iam_server, tmp_path)
        calls.clear()                      # the paths' calls only, not the account's setup
        lines = run_paths(acct, monkeypatch)
    finally:
        enforce(iam_server, False)
    assert lines == {p: None for p in lines} and len(lines) == 10, lines
    granted = {a for doc in DAEMON_DOCUMENTS for st in statements(doc) if st["Sid"] not in MOTO_BLIND
               for a in as_list(st["Action"])}
    assert set(calls) == granted, (sorted(set(calls) - granted), sorted(granted - set(calls)))
    assert [kw["Name"] for kw in calls["ssm:GetParameter"] if kw["Name"].startswith("/aws/")] == [PUBLIC_IMAGE]
    launches = calls["ec2:RunInstances"]
    assert len(launches) == 2 and any("InstanceMarketOptions" in kw for kw in launches)
    assert {kw["ImageId"] for kw in launches} == {PUBLIC_AMI}      # both from the parameter, read once
    for kw in launches:
        assert {t["ResourceType"] for t in kw["TagSpecifications"]} == {"instance", "volume"}
        assert kw["IamInstanceProfile"] == {"Name": WORKER_ROLE}


@pytest.mark.slow
def test_enforcement_is_on_a_user_without_policies_fails_from_the_start(
        iam_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The premise: the same paths as a user with no policy at all fail, each with its line."""
    try:
        acct = Account(iam_server, tmp_path)
        enforce(iam_server, False)
        acct.control = create_user(iam_server, "nobody", {})
        acct.worker = acct.control
        enforce(iam_server, True)
        lines = run_paths(acct, monkeypatch)
    finally:
        enforce(iam_server, False)
    assert all(lines.values()), lines
    assert "SSM in us-east-1 refused the daemon" in str(lines["start"]) and "ssm:GetParameter" in str(lines["start"])


@pytest.mark.slow
@pytest.mark.parametrize("doc,sid", DAEMON_STATEMENTS, ids=[f"{d}:{s}" for d, s in DAEMON_STATEMENTS])
def test_each_statement_removed_breaks_a_path_with_a_line_naming_its_action(
        doc: str, sid: str, iam_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    st = next(s for s in statements(doc) if s["Sid"] == sid)
    actions = as_list(st["Action"])
    try:
        lines = run_paths(Account(iam_server, tmp_path, without=sid), monkeypatch)
    finally:
        enforce(iam_server, False)
    failed = {p: line for p, line in lines.items() if line}
    if sid in MOTO_BLIND:      # moto never asks for these actions: nothing may fail (module docstring)
        assert not failed, (MOTO_BLIND[sid], failed)
        return
    naming = {p: line for p, line in failed.items() if any(a in line for a in actions)}
    assert naming, (actions, failed)
    for line in naming.values():
        assert "\n" not in line and ("AccessDenied" in line or "not authorized" in line), line


@pytest.mark.slow
def test_the_documents_arns_match_the_resources_the_paths_touched(
        iam_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What moto cannot check for EC2, SSM and DynamoDB (it judges them at ``*``): the shipped ARNs,
    filled for the run, match the ARNs of the table, the parameter, the instances, the queue and
    the bucket the paths used (IAM's ``*`` wildcard), and no statement has a ``*`` resource that
    AWS lets one scope."""
    try:
        acct = Account(iam_server, tmp_path)
        lines = run_paths(acct, monkeypatch)
        enforce(iam_server, False)
        root = admin(iam_server)
        table = boto3.client("dynamodb", **root).describe_table(TableName=acct.cfg.lease.table)["Table"]["TableArn"]
        param = boto3.client("ssm", **root).get_parameter(
            Name=f"/costscale/{acct.cfg.cluster}/cluster-token")["Parameter"]["ARN"]
        queue = boto3.client("sqs", **root).get_queue_attributes(
            QueueUrl=acct.queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        iids = [i["InstanceId"] for r in boto3.client("ec2", **root).describe_instances()["Reservations"]
                for i in r["Instances"]]
    finally:
        enforce(iam_server, False)
    assert not any(lines.values()) and iids, lines
    touched = {"ClusterLease": [table], "CreateLeaseTable": [table], "ReplicaItems": [table],
               "PublishClusterToken": [param], "ReadClusterToken": [param], "SpotInterruptionQueue": [queue],
               "ResolvePublicImages": [f"arn:aws:ssm:{REGION}::parameter{PUBLIC_IMAGE}"],
               "TerminateClusterInstances": [f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance/{i}" for i in iids],
               "LaunchWorkers": [f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance/{i}" for i in iids],
               "TagWorkersAtLaunch": [f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance/{i}" for i in iids],
               "PassWorkerRole": [f"arn:aws:iam::{ACCOUNT}:role/{WORKER_ROLE}"],
               "ReadModelsAndJobInputs": [f"arn:aws:s3:::{BUCKET}/models/m.onnx"],
               "ReadWheelhouseAndModels": [f"arn:aws:s3:::{BUCKET}/wheelhouse/manifest.json",
                                           f"arn:aws:s3:::{BUCKET}/models/m.onnx"],
               "ListJobInputPrefixes": [f"arn:aws:s3:::{BUCKET}"],
               "WriteJobOutputs": [f"arn:aws:s3:::{BUCKET}/outputs/job-1.npy"]}
    #: actions AWS allows only on ``*`` (no resource-level permissions): doctor.json's are all EC2 describe calls
    star_only = {"ListClusterInstances", "RegionPrices", "SpotPriceHistory", "ReadVcpuQuotas"} | \
        {st["Sid"] for st in statements(DOCTOR)}
    for doc in DOCUMENTS:
        for st in render(load(doc), _values(acct.cfg))["Statement"]:
            res = as_list(st["Resource"])
            if st["Sid"] in star_only:
                assert res == ["*"], st
                continue
            assert "*" not in res and st["Sid"] in touched, st
            for arn in touched[st["Sid"]]:
                assert any(fnmatch.fnmatchcase(arn, pattern) for pattern in res), (st["Sid"], arn, res)
            if st["Sid"] == "PublishClusterToken":      # on AWS only ResolvePublicImages grants the public read
                assert not any(fnmatch.fnmatchcase(touched["ResolvePublicImages"][0], p) for p in res)


def test_the_readme_lists_exactly_the_documents() -> None:
    text = (REPO / "README.md").read_text()
    begin, end = "<!-- iam-policies: generated by config.iam.readme_section; do not edit -->\n", "<!-- /iam-policies -->"
    assert begin in text and end in text
    assert text.split(begin, 1)[1].split(end, 1)[0] == readme_section(), \
        "README's IAM list differs from config/iam: paste config.iam.readme_section() between the markers"


def test_every_document_is_shipped_with_a_sid_per_statement() -> None:
    for doc in DOCUMENTS:
        assert (REPO / "config" / "iam" / f"{doc}.json").is_file()
        sids = [st.get("Sid") for st in statements(doc)]
        assert all(sids) and len(set(sids)) == len(sids), doc
    all_sids = [s for _, s in ALL_STATEMENTS]
    assert len(set(all_sids)) == len(all_sids)


def test_a_refusal_names_the_action_only_where_the_message_does_not() -> None:
    from botocore.exceptions import ClientError

    assert iam_action("ec2", "run_instances") == "ec2:RunInstances"
    assert iam_action("s3", "ListObjectsV2") == "s3:ListBucket"
    assert naming_action("UnauthorizedOperation", "You are not authorized to perform this operation.",
                         "ec2:RunInstances") == "You are not authorized to perform this operation. (needs ec2:RunInstances)"
    named = "User: u is not authorized to perform: ssm:GetParameter"
    assert naming_action("AccessDenied", named, "ssm:GetParameter") == named
    assert naming_action("Throttling", "slow down", "ec2:RunInstances") == "slow down"
    exc = ClientError({"Error": {"Code": "AccessDenied", "Message": "Access Denied"}}, "GetObject")
    assert client_error_line(exc, "s3") == "AccessDenied: Access Denied (needs s3:GetObject)"


def test_python_m_config_iam_prints_a_filled_document_or_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from config.iam.__main__ import main

    assert main(["worker", "region=eu-west-3", "account=111122223333", "cluster=prod"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["Statement"][0]["Resource"] == "arn:aws:ssm:eu-west-3:111122223333:parameter/costscale/prod/cluster-token"
    assert main(["spot", "region=eu-west-3"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no value for account, queue" in err
