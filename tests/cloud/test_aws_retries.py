"""Transient AWS faults are retried by botocore (its standard retry mode, ``scaler.cloud.aws_client``),
not by hand: a 5xx and a dropped connection are retried and the call succeeds, throttling past the
last attempt is one ``Throttled``, and a fleet tick on moto goes on through faults on every call.

Faults are injected at botocore's ``before-send`` event (``tests/aws_faults.py``), inside its retry
loop; ``botocore_backoff`` (conftest) records the delays botocore computes and sends each retry at
once. Everything runs against moto on 127.0.0.1 or is answered by the hook."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from botocore.stub import Stubber

from config.catalog import load_catalog
from config.schema import LaunchSpec
from scaler.fleet.actuator import FleetActuator
from scaler.cloud.aws_client import RETRY_MODE, client_config
from scaler.cloud.provider import CloudConfigError, CloudError, InsufficientCapacity, Throttled
from scaler.cloud.ec2 import Ec2Cloud, make_ec2_client
from scaler.replicas.lease_decision import Lease
from scaler.replicas.lease_table import DynamoLeaseTable, make_dynamodb_client
from scaler.pricing.region import RegionPrices
from scaler.fleet.state import StateStore
from tests.aws_faults import Faults, http_error, read_timeout, refused, reset

AMI = "ami-12c6146b"
CATALOG = load_catalog()


def _cloud(endpoint: str, max_attempts: int = 8) -> tuple[Ec2Cloud, Faults]:
    client = make_ec2_client("us-east-1", endpoint, max_attempts)
    return Ec2Cloud("alpha", "us-east-1", LaunchSpec(ami_id=AMI), client=client), Faults(client)


def test_every_client_is_built_in_botocores_standard_retry_mode() -> None:
    assert RETRY_MODE == "standard"
    assert client_config(8, connect_timeout=5, read_timeout=30).retries == {"mode": "standard", "total_max_attempts": 8}
    ec2 = Ec2Cloud("alpha", "us-east-1", LaunchSpec(ami_id=AMI), endpoint_url="http://127.0.0.1:9", max_attempts=5)
    assert ec2.client.meta.config.retries == {"mode": "standard", "total_max_attempts": 5}
    assert make_ec2_client("us-east-1", "http://127.0.0.1:9").meta.config.retries["total_max_attempts"] == 8
    dynamo = make_dynamodb_client("us-east-1", "http://127.0.0.1:9")
    assert dynamo.meta.config.retries == {"mode": "standard", "total_max_attempts": 3}
    with pytest.raises(ValueError, match="max_attempts must be >= 1"):
        client_config(0, connect_timeout=1, read_timeout=1)


def test_a_5xx_is_retried_and_the_launch_succeeds_once_under_its_client_token(
        moto_endpoint: str, ec2_client, botocore_backoff: list[float]) -> None:  # noqa: ANN001
    cloud, faults = _cloud(moto_endpoint)
    faults.queue("DescribeInstances", http_error(500, "InternalError"), http_error(503, "Unavailable"))
    faults.queue("RunInstances", http_error(503, "ServiceUnavailable"), http_error(502, "BadGateway"))
    (inst,) = cloud.launch("m5.xlarge", 1, "tok-5xx")
    # the intent lookup: one call, three attempts; the launch: one call, three attempts
    (lookup,) = faults.calls("DescribeInstances")
    assert [a.number for a in lookup] == [1, 2, 3] and lookup[-1].fault is None
    (run,) = faults.calls("RunInstances")
    assert [str(a.fault) for a in run] == ["503 ServiceUnavailable", "502 BadGateway", "None"]
    assert {a.params["ClientToken"] for a in run} == {"tok-5xx"}      # every retry keeps the token
    assert len(botocore_backoff) == 4                                 # botocore's retry handler backed off 4 times
    assert all(0 <= d <= 0.05 * 2 ** 1 for d in botocore_backoff)     # the non-throttling backoff (base 50 ms)
    # moto holds the one instance, which lists (the listing's own fault retried too)
    faults.queue("DescribeInstances", http_error(504, "GatewayTimeout"))
    assert [i.instance_id for i in cloud.list_managed()] == [inst.instance_id]
    assert len(ec2_client.describe_instances()["Reservations"]) == 1


def test_a_dropped_connection_is_retried_and_the_listing_succeeds(
        moto_endpoint: str, botocore_backoff: list[float]) -> None:
    cloud, faults = _cloud(moto_endpoint)
    launched = cloud.launch("t3.xlarge", 1, "tok-net")
    faults.queue("DescribeInstances", reset(), refused(), read_timeout())
    assert [i.instance_id for i in cloud.list_managed()] == [launched[0].instance_id]
    last = faults.calls("DescribeInstances")[-1]
    assert [str(a.fault) for a in last] == ["ConnectionClosedError", "EndpointConnectionError", "ReadTimeoutError",
                                            "None"]
    assert len(botocore_backoff) == 3


def test_throttling_past_the_last_attempt_is_one_throttled_error(
        moto_endpoint: str, botocore_backoff: list[float]) -> None:
    # the default client: 8 attempts in all
    cloud = Ec2Cloud("alpha", "us-east-1", LaunchSpec(ami_id=AMI), endpoint_url=moto_endpoint)
    faults = Faults(cloud.client)
    faults.always("DescribeInstances", http_error(503, "RequestLimitExceeded"))
    with pytest.raises(Throttled) as ei:
        cloud.list_managed()
    assert str(ei.value) == "describe_instances: throttled by EC2 (RequestLimitExceeded) after 8 attempts"
    assert ei.value.retryable
    (call,) = faults.calls("DescribeInstances")
    assert len(call) == 8 and len(botocore_backoff) == 7
    # the throttling backoff: base 1 s, doubling, capped at 20 s (each a uniform draw below it)
    assert all(0 <= d <= min(2 ** i, 20) for i, d in enumerate(botocore_backoff))
    # a throttled launch ends the same way, after its intent lookup
    faults.clear()
    faults.always("RunInstances", http_error(400, "Throttling"))
    with pytest.raises(Throttled, match=r"^run_instances: throttled by EC2 \(Throttling\) after 8 attempts$"):
        cloud.launch("m5.xlarge", 1, "tok-thr")


def test_what_botocore_gives_up_on_keeps_its_typed_error(moto_endpoint: str, botocore_backoff: list[float]) -> None:
    cloud, faults = _cloud(moto_endpoint, max_attempts=3)
    faults.always("DescribeInstances", http_error(500, "InternalError"))
    with pytest.raises(CloudError) as ei:
        cloud.list_managed()
    assert type(ei.value) is CloudError
    assert str(ei.value) == "describe_instances: InternalError: injected InternalError after 3 attempts"
    faults.clear()
    faults.always("DescribeInstances", reset())
    with pytest.raises(CloudError, match="^describe_instances: Connection was closed") as ei2:
        cloud.list_managed()
    assert type(ei2.value) is CloudError
    assert len(faults.calls("DescribeInstances")[-1]) == 3
    # EC2 sends a capacity error as a 500: botocore retries it too, then it is InsufficientCapacity
    faults.clear()
    faults.always("RunInstances", http_error(500, "InsufficientInstanceCapacity"))
    with pytest.raises(InsufficientCapacity) as ei3:
        cloud.launch("g4dn.xlarge", 1, "tok-ice")
    assert ei3.value.instance_type == "g4dn.xlarge" and len(faults.calls("RunInstances")[-1]) == 3


def test_an_endpoint_that_keeps_failing_drains_the_retry_quota_and_calls_stop_retrying(
        moto_endpoint: str, botocore_backoff: list[float]) -> None:
    """Standard mode's circuit breaker: retries draw from the client's retry quota, successes
    refill it; while an endpoint keeps failing, a call soon gets one attempt instead of eight."""
    cloud, faults = _cloud(moto_endpoint)
    faults.always("DescribeInstances", http_error(500, "InternalError"))
    made: list[int] = []
    while not made or (made[-1] > 1 and len(made) < 100):
        with pytest.raises(CloudError) as ei:
            cloud.list_managed()
        made.append(len(faults.calls("DescribeInstances")[-1]))
    assert made[0] == 8 and made[-1] == 1, made
    assert str(ei.value) == "describe_instances: InternalError: injected InternalError"
    faults.clear()
    assert cloud.list_managed() == []          # the endpoint is back: the call goes through


def test_a_client_error_is_not_retried(moto_endpoint: str, botocore_backoff: list[float]) -> None:
    cloud, faults = _cloud(moto_endpoint)
    faults.queue("DescribeInstances", http_error(401, "AuthFailure"))
    with pytest.raises(CloudConfigError, match="AuthFailure"):
        cloud.list_managed()
    faults.queue("DescribeInstances", http_error(400, "InvalidParameterValue"))
    with pytest.raises(CloudConfigError, match="InvalidParameterValue"):
        cloud.list_managed()
    assert [len(c) for c in faults.calls("DescribeInstances")] == [1, 1] and botocore_backoff == []


def test_the_listing_follows_every_page_through_the_paginator() -> None:
    client = make_ec2_client("us-east-1", "http://127.0.0.1:9")      # never reached: the Stubber answers
    cloud = Ec2Cloud("alpha", "us-east-1", LaunchSpec(ami_id=AMI), client=client)
    filters = [{"Name": "tag:costscale:cluster", "Values": ["alpha"]},
               {"Name": "instance-state-name", "Values": ["pending", "running", "shutting-down", "stopping", "stopped"]}]

    def page(iid: str) -> dict:  # type: ignore[type-arg]
        return {"Reservations": [{"Instances": [{"InstanceId": iid, "InstanceType": "t3.xlarge",
                                                 "State": {"Name": "running"}}]}]}

    with Stubber(client) as stub:
        stub.add_response("describe_instances", {**page("i-1"), "NextToken": "p2"}, {"Filters": filters})
        stub.add_response("describe_instances", {**page("i-2"), "NextToken": "p3"}, {"Filters": filters, "NextToken": "p2"})
        stub.add_response("describe_instances", page("i-3"), {"Filters": filters, "NextToken": "p3"})
        assert [i.instance_id for i in cloud.list_managed()] == ["i-1", "i-2", "i-3"]
        stub.assert_no_pending_responses()


def test_a_fleet_tick_goes_on_through_transient_faults_on_every_call(
        moto_endpoint: str, ec2_client, tmp_path: Path, botocore_backoff: list[float]) -> None:  # noqa: ANN001
    cloud, faults = _cloud(moto_endpoint)
    # every call's first two attempts fail, a reset then a 503; the third reaches moto
    faults.per_call(reset(), http_error(503, "Unavailable"))
    act = FleetActuator(cloud, StateStore.open(tmp_path / "state.db"), CATALOG, 2.0)
    rep = act.apply({"m5.xlarge": 2, "t3.xlarge": 1}, "p1")
    assert rep.complete and rep.errors == [], rep.summary()
    assert moto_pool(ec2_client) == {"m5.xlarge": 2, "t3.xlarge": 1}   # no launch twice
    runs = faults.calls("RunInstances")
    assert len(runs) == 3          # moto starts MinCount=1: 2 m5.xlarge launches (one a top-up), 1 t3.xlarge
    assert all(len(c) == 3 and len({a.params["ClientToken"] for a in c}) == 1 for c in runs)
    assert {i.status for i in act.store.intents(plan_id="p1")} == {"done"}
    # scale in, and reconcile, through the same faults
    rep2 = act.apply({"m5.xlarge": 1}, "p2")
    assert rep2.complete and len(rep2.terminated) == 2, rep2.summary()
    assert [len(c) for c in faults.calls("TerminateInstances")] == [3, 3]      # one per type retired
    settled = act.reconcile()
    assert settled.summary() == "no change"
    assert moto_pool(ec2_client) == {"m5.xlarge": 1}
    assert all(len(c) == 3 for c in faults.calls("DescribeInstances"))
    assert len(botocore_backoff) == 2 * len({a.call for a in faults.attempts})


def test_a_fleet_tick_throttled_past_the_last_attempt_fails_its_intent_and_the_next_one_launches(
        moto_endpoint: str, ec2_client, tmp_path: Path, botocore_backoff: list[float]) -> None:  # noqa: ANN001
    cloud, faults = _cloud(moto_endpoint, max_attempts=4)
    faults.always("RunInstances", http_error(503, "RequestLimitExceeded"))
    act = FleetActuator(cloud, StateStore.open(tmp_path / "state.db"), CATALOG, 2.0)
    rep = act.apply({"m5.xlarge": 1}, "p1")
    assert rep.errors == ["launch m5.xlarge: run_instances: throttled by EC2 (RequestLimitExceeded) after 4 attempts"]
    assert [i.status for i in act.store.intents(plan_id="p1")] == ["failed"]
    assert ec2_client.describe_instances()["Reservations"] == []
    faults.clear()
    assert act.apply({"m5.xlarge": 1}, "p1").complete
    assert moto_pool(ec2_client) == {"m5.xlarge": 1}


def moto_pool(ec2_client) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """The live instances moto holds by type, seen through a client without faults."""
    pool: dict[str, int] = {}
    for r in ec2_client.describe_instances()["Reservations"]:
        for i in r["Instances"]:
            if i["State"]["Name"] in ("pending", "running"):
                pool[i["InstanceType"]] = pool.get(i["InstanceType"], 0) + 1
    return pool


def test_the_lease_tables_calls_are_retried_by_botocore(moto_endpoint: str, botocore_backoff: list[float]) -> None:
    client = make_dynamodb_client("us-east-1", moto_endpoint)
    faults = Faults(client)
    table = DynamoLeaseTable("costscale-leases", client)
    faults.queue("DescribeTable", reset())
    faults.queue("PutItem", http_error(500, "InternalServerError"))
    faults.queue("GetItem", http_error(400, "ThrottlingException"))
    assert table.ensure_table()
    lease = Lease(cluster="alpha", owner="h:1:ab", host="h", pid=1, since=1.0, expires_at=61.0, generation=1)
    assert table.write(lease, None)
    assert table.get("alpha") == lease
    assert [len(c) for c in faults.calls("PutItem")] == [2] and [len(c) for c in faults.calls("GetItem")] == [2]
    faults.always("GetItem", http_error(500, "InternalServerError"))
    with pytest.raises(CloudError, match="^get_item: InternalServerError: injected InternalServerError after 3 attempts$"):
        table.get("alpha")


def test_the_price_list_calls_are_retried_by_botocore(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      botocore_backoff: list[float]) -> None:
    import scaler.pricing.region as region_prices
    from tests.cloud.test_region_prices import price_entry

    made = region_prices.make_pricing_client()
    assert made.meta.config.retries == {"mode": "standard", "total_max_attempts": 3}
    body = json.dumps({"FormatVersion": "aws_v1", "PriceList": [price_entry("r5n.large", "0.1750000000")]}).encode()
    faults = Faults(made, answer=lambda op: (200, body))      # Pricing has no moto: the hook answers every attempt
    faults.queue("GetProducts", http_error(503, "ServiceUnavailableException"), reset())
    prices = RegionPrices("eu-west-3", tmp_path / "p.json", client=made, clock=lambda: 1_700_000_000.0)
    assert prices.lookup(["r5n.large"]) == ({"r5n.large": 0.175}, None)
    assert [len(c) for c in faults.calls("GetProducts")] == [3]


def test_an_error_body_botocore_could_not_parse_gives_its_own_code_and_one_line() -> None:
    """moto's IAM denial on a JSON service (SSM) is an XML document: botocore's code is the bare
    status "403" and its message the raw body; the boundary reads the document's Code and Message."""
    from scaler.cloud.aws_client import error_fields

    body = ('<?xml version="1.0" encoding="utf-8"?>\n<ErrorResponse><Errors><Error><Code>AccessDenied</Code>'
            '<Message>User: arn:aws:iam::123456789012:user/u is not authorized to perform: ssm:GetParameter'
            '</Message><Type>Sender</Type></Error></Errors></ErrorResponse>')
    assert error_fields({"Code": "403", "Message": body}) == (
        "AccessDenied", "User: arn:aws:iam::123456789012:user/u is not authorized to perform: ssm:GetParameter")
    ns = '<Response xmlns="http://ec2.amazonaws.com/doc/"><Errors><Error><Code>Blocked</Code></Error></Errors></Response>'
    assert error_fields({"Code": "400", "Message": ns}) == ("Blocked", "Blocked")
    # a parsed error is kept, its message on one line; a body that is not XML is only put on one line
    assert error_fields({"Code": "AccessDeniedException", "Message": "not\n  allowed"}) == (
        "AccessDeniedException", "not allowed")
    assert error_fields({"Code": "502", "Message": "<html>\n<body>Bad gateway</html>"}) == (
        "502", "<html> <body>Bad gateway</html>")
    assert error_fields({}) == ("", "")
