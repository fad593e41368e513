"""Prices per region: the Price List API (stubbed with botocore's Stubber: moto has no Pricing API,
so the PriceList entries below are built as AWS returns them, JSON strings), a 0600 disk cache,
the shipped us-east-1 table as the fallback with one warning, YAML overrides over both, and the
daemon holding its budget at the region's prices. Nothing leaves 127.0.0.1."""
from __future__ import annotations

import asyncio
import json
import logging
import stat
from pathlib import Path

import boto3
import pytest
from botocore.stub import Stubber

from config.schema import parse_config_text
from scaler.pricing.region import CACHE_TTL_S, RegionPrices, cache_path_for, parse_on_demand, price_filters, regional_config

REGION = "eu-west-3"
T0 = 1_700_000_000.0
SKU = "Q8RKBRHDSEXHYKAY"


def price_entry(itype: str, usd: str, *, usagetype: str | None = None, reserved_usd: str = "0.3100000000") -> str:
    """One PriceList entry of GetProducts (FormatVersion aws_v1), as the API returns it: a JSON string."""
    od = f"{SKU}.JRTCKXETXF"
    ri = f"{SKU}.4NA7Y494T4"
    return json.dumps({
        "product": {
            "productFamily": "Compute Instance",
            "attributes": {"instanceType": itype, "regionCode": REGION, "location": "EU (Paris)",
                           "locationType": "AWS Region", "operatingSystem": "Linux", "tenancy": "Shared",
                           "preInstalledSw": "NA", "capacitystatus": "Used", "licenseModel": "No License required",
                           "usagetype": usagetype or f"EUW3-BoxUsage:{itype}", "operation": "RunInstances",
                           "servicecode": "AmazonEC2", "marketoption": "OnDemand"},
            "sku": SKU,
        },
        "serviceCode": "AmazonEC2",
        "terms": {
            "OnDemand": {od: {"priceDimensions": {f"{od}.6YS6EN2CT7": {
                "unit": "Hrs", "endRange": "Inf", "beginRange": "0", "appliesTo": [],
                "description": f"${usd} per On Demand Linux {itype} Instance Hour", "rateCode": f"{od}.6YS6EN2CT7",
                "pricePerUnit": {"USD": usd}}},
                "sku": SKU, "effectiveDate": "2024-05-01T00:00:00Z", "offerTermCode": "JRTCKXETXF",
                "termAttributes": {}}},
            "Reserved": {ri: {"priceDimensions": {f"{ri}.6YS6EN2CT7": {
                "unit": "Hrs", "endRange": "Inf", "beginRange": "0", "appliesTo": [],
                "description": "Linux/UNIX (Amazon VPC), reserved", "rateCode": f"{ri}.6YS6EN2CT7",
                "pricePerUnit": {"USD": reserved_usd}}},
                "sku": SKU, "effectiveDate": "2024-05-01T00:00:00Z", "offerTermCode": "4NA7Y494T4",
                "termAttributes": {"LeaseContractLength": "1yr", "OfferingClass": "standard",
                                   "PurchaseOption": "No Upfront"}}},
        },
        "version": "20240501000000",
        "publicationDate": "2024-05-01T00:00:00Z",
    })


def request(itype: str, token: str | None = None) -> dict:
    req = {"ServiceCode": "AmazonEC2", "Filters": price_filters(itype, REGION), "FormatVersion": "aws_v1"}
    if token:
        req["NextToken"] = token
    return req


def pricing_client():  # type: ignore[no-untyped-def]
    return boto3.client("pricing", region_name="us-east-1")


CONFIG = """\
cluster: prices
region: {region}
budget_per_hour: {budget}
models:
  - name: rm2
    qos_ms: 350
instance_types:
  - type: r5n.large
  - type: g4dn.xlarge
  - type: t3.xlarge
    price_per_hour: 0.2
launch:
  ami_id: {ami}
dispatcher:
  listen: 127.0.0.1:0
state_path: {state}
model_scaling:
  generate_variants: false
"""


def test_the_filters_are_the_linux_shared_on_demand_box_of_the_type_in_the_region() -> None:
    assert price_filters("g4dn.xlarge", REGION) == [
        {"Type": "TERM_MATCH", "Field": "instanceType", "Value": "g4dn.xlarge"},
        {"Type": "TERM_MATCH", "Field": "regionCode", "Value": "eu-west-3"},
        {"Type": "TERM_MATCH", "Field": "operatingSystem", "Value": "Linux"},
        {"Type": "TERM_MATCH", "Field": "tenancy", "Value": "Shared"},
        {"Type": "TERM_MATCH", "Field": "preInstalledSw", "Value": "NA"},
        {"Type": "TERM_MATCH", "Field": "capacitystatus", "Value": "Used"},
    ]


def test_the_on_demand_price_is_read_not_the_reserved_one_nor_another_usage() -> None:
    assert parse_on_demand([price_entry("r5n.large", "0.1750000000")]) == 0.175
    # a dedicated-host usage type is not the box usage; of two box usages the dearer stands
    assert parse_on_demand([price_entry("r5n.large", "0.9000000000", usagetype="EUW3-HostBoxUsage:r5n"),
                            price_entry("r5n.large", "0.1750000000"),
                            price_entry("r5n.large", "0.1800000000")]) == 0.18
    assert parse_on_demand([]) is None


def test_region_prices_come_from_the_api_through_the_paginator_and_are_cached_0600(tmp_path: Path) -> None:
    client = pricing_client()
    with Stubber(client) as stub:
        # g4dn.xlarge answers in two pages (the paginator follows NextToken); t3.xlarge has a YAML
        # override and is not asked for
        stub.add_response("get_products", {"FormatVersion": "aws_v1", "PriceList": [price_entry("r5n.large", "0.1750000000")]},
                          request("r5n.large"))
        stub.add_response("get_products", {"FormatVersion": "aws_v1", "PriceList": [], "NextToken": "page2"},
                          request("g4dn.xlarge"))
        stub.add_response("get_products", {"FormatVersion": "aws_v1", "PriceList": [price_entry("g4dn.xlarge", "0.6310000000")]},
                          request("g4dn.xlarge", "page2"))
        prices = RegionPrices(REGION, cache_path_for(str(tmp_path / "state.db")), client=client, clock=lambda: T0)
        cfg = regional_config(parse_config_text(CONFIG.format(region=REGION, budget=2.5, ami="ami-1",
                                                              state=tmp_path / "state.db")), prices)
        stub.assert_no_pending_responses()
    assert prices.requests == 3
    assert {t: it.price_per_hour for t, it in cfg.catalog().items()} == {
        "r5n.large": 0.175, "g4dn.xlarge": 0.631, "t3.xlarge": 0.2}      # the override wins
    cache = tmp_path / "state.db.prices.json"
    assert stat.S_IMODE(cache.stat().st_mode) == 0o600
    assert json.loads(cache.read_text()) == {"version": 1, "regions": {REGION: {
        "g4dn.xlarge": {"usd_per_hour": 0.631, "fetched_at": T0}, "r5n.large": {"usd_per_hour": 0.175, "fetched_at": T0}}}}


def test_a_second_lookup_within_the_ttl_makes_no_request(tmp_path: Path) -> None:
    path = cache_path_for(str(tmp_path / "state.db"))
    client = pricing_client()
    with Stubber(client) as stub:
        stub.add_response("get_products", {"FormatVersion": "aws_v1", "PriceList": [price_entry("r5n.large", "0.1750000000")]},
                          request("r5n.large"))
        assert RegionPrices(REGION, path, client=client, clock=lambda: T0).lookup(["r5n.large"]) == ({"r5n.large": 0.175}, None)
    idle = pricing_client()
    with Stubber(idle) as stub:        # no response queued: any request would raise
        again = RegionPrices(REGION, path, client=idle, clock=lambda: T0 + CACHE_TTL_S - 1)
        assert again.lookup(["r5n.large"]) == ({"r5n.large": 0.175}, None)
        assert again.requests == 0
        stub.assert_no_pending_responses()
    # past the TTL the API is asked again
    later = pricing_client()
    with Stubber(later) as stub:
        stub.add_response("get_products", {"FormatVersion": "aws_v1", "PriceList": [price_entry("r5n.large", "0.1800000000")]},
                          request("r5n.large"))
        assert RegionPrices(REGION, path, client=later, clock=lambda: T0 + CACHE_TTL_S).lookup(["r5n.large"]) == (
            {"r5n.large": 0.18}, None)


def test_an_api_error_falls_back_to_the_table_with_one_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    client = pricing_client()
    with Stubber(client) as stub:
        stub.add_client_error("get_products", "AccessDeniedException", "not authorized to perform pricing:GetProducts",
                              http_status_code=400, expected_params=request("r5n.large"))
        prices = RegionPrices(REGION, cache_path_for(str(tmp_path / "state.db")), client=client, clock=lambda: T0)
        with caplog.at_level(logging.WARNING, logger="costscale"):
            cfg = regional_config(parse_config_text(CONFIG.format(region=REGION, budget=2.5, ami="ami-1",
                                                                  state=tmp_path / "state.db")), prices)
        stub.assert_no_pending_responses()      # one failure: the other types are not asked
    assert [r.getMessage() for r in caplog.records] == [
        "prices for region eu-west-3: the Price List API failed (AccessDeniedException: not authorized to perform "
        "pricing:GetProducts); using the shipped us-east-1 on-demand prices for r5n.large, g4dn.xlarge"]
    assert {t: it.price_per_hour for t, it in cfg.catalog().items()} == {
        "r5n.large": 0.149, "g4dn.xlarge": 0.526, "t3.xlarge": 0.2}
    assert not (tmp_path / "state.db.prices.json").exists()


def test_an_api_error_uses_a_stale_cached_price_before_the_table(tmp_path: Path) -> None:
    path = cache_path_for(str(tmp_path / "state.db"))
    path.write_text(json.dumps({"version": 1, "regions": {REGION: {"r5n.large": {"usd_per_hour": 0.175, "fetched_at": T0}}}}))
    client = pricing_client()
    with Stubber(client) as stub:
        stub.add_client_error("get_products", "ThrottlingException", "Rate exceeded", http_status_code=400)
        got = RegionPrices(REGION, path, client=client, clock=lambda: T0 + CACHE_TTL_S + 1).lookup(["r5n.large", "g4dn.xlarge"])
    assert got == ({"r5n.large": 0.175}, "prices for region eu-west-3: the Price List API failed (ThrottlingException: "
                   "Rate exceeded); using cached prices older than 7 days for r5n.large and the shipped us-east-1 "
                   "on-demand prices for g4dn.xlarge")


def test_a_reload_reads_the_cache_only(tmp_path: Path) -> None:
    idle = pricing_client()
    with Stubber(idle):
        got = RegionPrices(REGION, cache_path_for(str(tmp_path / "s.db")), client=idle).lookup(["r5n.large"], fetch=False)
    assert got == ({}, "prices for region eu-west-3: prices not fetched on reload; using the shipped us-east-1 "
                       "on-demand prices for r5n.large")


def test_an_emulated_cloud_asks_no_price(tmp_path: Path, moto_endpoint: str) -> None:
    from daemon.aws.wiring import AwsWiring

    cfg = parse_config_text(CONFIG.format(region=REGION, budget=2.5, ami="ami-1", state=tmp_path / "s.db")
                            + f"aws:\n  endpoint_url: {moto_endpoint}\n")
    wiring = AwsWiring(cfg, None)
    assert wiring.prices is None
    assert wiring.priced(cfg).catalog() == cfg.catalog()
    assert cfg.catalog()["r5n.large"].price_per_hour == 0.149


def _priced_daemon_config(tmp_path: Path, endpoint: str, budget: float, extra: str = ""):  # type: ignore[no-untyped-def]
    ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=endpoint)
    ami = ec2.describe_images()["Images"][0]["ImageId"]
    return parse_config_text(CONFIG.format(region=REGION, budget=budget, ami=ami, state=tmp_path / "state.db")
                             .replace("  - type: g4dn.xlarge\n  - type: t3.xlarge\n    price_per_hour: 0.2\n", "")
                             .replace("    qos_ms: 350\n", "    qos_ms: 350\n    max_batch: 256\n")
                             + f"workload:\n  batch_dist: fixed:64\naws:\n  endpoint_url: {endpoint}\n" + extra)


def _stub_region(monkeypatch: pytest.MonkeyPatch, cfg, usd: str) -> Stubber:  # type: ignore[no-untyped-def]
    """The daemon's wiring with a stubbed Price List API (the emulator has none) quoting ``usd``."""
    import daemon.app as app
    from daemon.aws.wiring import AwsWiring

    client = pricing_client()
    stub = Stubber(client)
    stub.add_response("get_products", {"FormatVersion": "aws_v1", "PriceList": [price_entry("r5n.large", usd)]},
                      request("r5n.large"))
    prices = RegionPrices(REGION, cache_path_for(cfg.state_path), client=client)

    class PricedWiring(AwsWiring):
        def __init__(self, cfg, listen):  # type: ignore[no-untyped-def]
            super().__init__(cfg, listen, prices=prices)

    monkeypatch.setattr(app, "AwsWiring", PricedWiring)
    return stub


def test_the_daemon_holds_its_budget_at_the_regions_prices(tmp_path: Path, moto_endpoint: str,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """r5n.large costs 0.149 $/hr in the table and 0.2 here: a budget of 0.3 buys 2 at the table's
    price (the pick), 1 at the region's. The planner ranks the pools at 0.2, the actuator and the
    dispatcher's catalog price it at 0.2, and EC2 holds 1."""
    from daemon.app import Daemon

    cfg = _priced_daemon_config(tmp_path, moto_endpoint, 0.3)
    stub = _stub_region(monkeypatch, cfg, "0.2000000000")

    async def scenario() -> tuple[float, float, list[float], dict[str, int], dict[str, int]]:
        d = Daemon(cfg, None, listen="127.0.0.1:0", generate_variants=False)
        with stub:
            await d.start()
        try:
            await d.fleet_tick("test")
            assert d.actuator is not None and d.dispatcher is not None and d.status.plan is not None
            return (d.actuator.price("r5n.large"), d.dispatcher._prices["r5n.large"],
                    [round(cost, 4) for _, cost, _ in d.status.plan.plans[0].ranked], d.status.target, d.status.pool())
        finally:
            await d.stop(grace=0.0)

    actuator_price, dispatcher_price, pool_costs, target, pool = asyncio.run(scenario())
    assert (actuator_price, dispatcher_price) == (0.2, 0.2)
    assert pool_costs == [0.2]              # at the table's 0.149: 0.298 and 0.149
    assert target == pool == {"r5n.large": 1}


def test_a_pinned_pool_over_the_budget_at_the_regions_prices_is_refused_in_one_line(
        tmp_path: Path, moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from config.errors import ConfigError
    from daemon.app import Daemon

    cfg = _priced_daemon_config(tmp_path, moto_endpoint, 0.45, "pinned_pool:\n  r5n.large: 3\n")
    stub = _stub_region(monkeypatch, cfg, "0.2000000000")

    async def scenario() -> ConfigError:
        d = Daemon(cfg, None, listen="127.0.0.1:0", generate_variants=False)
        try:
            with stub, pytest.raises(ConfigError) as err:
                await d.start()
            return err.value
        finally:
            await d.stop(grace=0.0)

    err = asyncio.run(scenario())
    assert err.exit_code == 2
    assert err.lines == ["at the on-demand prices of eu-west-3: pinned_pool: costs 0.600 $/hr, over budget_per_hour 0.45"]


# -- costscale plan --region-prices ------------------------------------------------------------

def _plan_config(tmp_path: Path, extra: str = "") -> str:
    path = tmp_path / "costscale.yaml"
    path.write_text(CONFIG.format(region=REGION, budget=2.5, ami="ami-1", state=tmp_path / "state.db") + extra)
    return str(path)


def _pricing_stub(monkeypatch: pytest.MonkeyPatch, *responses: tuple[str, str]) -> Stubber:
    """The Price List API ``costscale plan`` reaches through ``daemon.aws.wiring``, stubbed: each
    (type, usd) answered in turn (none: any request raises)."""
    import scaler.pricing.region as region_prices

    client = pricing_client()
    stub = Stubber(client)
    for itype, usd in responses:
        stub.add_response("get_products", {"FormatVersion": "aws_v1", "PriceList": [price_entry(itype, usd)]},
                          request(itype))
    monkeypatch.setattr(region_prices, "make_pricing_client", lambda max_attempts=3: client)
    return stub


def test_plan_region_prices_prices_the_pool_like_the_daemon_and_caches_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from daemon.cli import main

    cfg = _plan_config(tmp_path)
    region = {"r5n.large": 0.175, "g4dn.xlarge": 0.631, "t3.xlarge": 0.2}      # t3.xlarge: the YAML override
    stub = _pricing_stub(monkeypatch, ("r5n.large", "0.1750000000"), ("g4dn.xlarge", "0.6310000000"))
    with stub:
        assert main(["plan", cfg, "--region-prices", "--json"]) == 0
        stub.assert_no_pending_responses()
    out, err = capsys.readouterr()
    plan = json.loads(out)
    assert err == ""
    assert plan["cost_per_hour"] == pytest.approx(sum(region[t] * n for t, n in plan["chosen"].items()), abs=1e-6)
    assert all(r["cost_per_hour"] == pytest.approx(sum(region[t] * n for t, n in r["pool"].items()), abs=1e-6)
               for r in plan["ranked"])
    assert json.loads((tmp_path / "state.db.prices.json").read_text())["regions"][REGION]["r5n.large"][
        "usd_per_hour"] == 0.175
    # a second plan within the cache's TTL asks nothing; without the flag the table prices it
    with _pricing_stub(monkeypatch) as idle:
        assert main(["plan", cfg, "--region-prices"]) == 0
        idle.assert_no_pending_responses()
        assert main(["plan", cfg, "--json"]) == 0
    text, table = capsys.readouterr().out.split("\n{", 1)
    assert text.startswith(f"prices ({REGION}): ") and "r5n.large 0.175" in text.splitlines()[0]
    table_plan = json.loads("{" + table)
    assert table_plan["cost_per_hour"] == pytest.approx(
        sum({"r5n.large": 0.149, "g4dn.xlarge": 0.526, "t3.xlarge": 0.2}[t] * n for t, n in table_plan["chosen"].items()),
        abs=1e-6)


def test_plan_region_prices_falls_back_to_the_table_with_one_warning_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from daemon.cli import main

    cfg = _plan_config(tmp_path)
    stub = _pricing_stub(monkeypatch)
    stub.add_client_error("get_products", "AccessDeniedException", "not authorized to perform pricing:GetProducts",
                          http_status_code=400, expected_params=request("r5n.large"))
    with stub:
        assert main(["plan", cfg, "--region-prices", "--json"]) == 0
    out, err = capsys.readouterr()
    assert err.splitlines() == [
        "costscale: warning: prices for region eu-west-3: the Price List API failed (AccessDeniedException: not "
        "authorized to perform pricing:GetProducts); using the shipped us-east-1 on-demand prices for r5n.large, "
        "g4dn.xlarge"]
    plan = json.loads(out)
    table = {"r5n.large": 0.149, "g4dn.xlarge": 0.526, "t3.xlarge": 0.2}
    assert plan["cost_per_hour"] == pytest.approx(sum(table[t] * n for t, n in plan["chosen"].items()), abs=1e-6)


def test_plan_region_prices_prices_the_types_flag_and_an_emulator_keeps_the_table(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from daemon.cli import main

    cfg = _plan_config(tmp_path)
    stub = _pricing_stub(monkeypatch, ("r5n.large", "0.1750000000"), ("g4dn.xlarge", "0.6310000000"),
                         ("c5n.2xlarge", "0.5000000000"))
    with stub:
        assert main(["plan", cfg, "--region-prices", "--types", "g4dn.xlarge,c5n.2xlarge", "--json"]) == 0
        stub.assert_no_pending_responses()
    plan = json.loads(capsys.readouterr().out)
    assert set(plan["chosen"]) == {"g4dn.xlarge", "c5n.2xlarge"}
    assert plan["cost_per_hour"] == pytest.approx(
        sum({"g4dn.xlarge": 0.631, "c5n.2xlarge": 0.5}[t] * n for t, n in plan["chosen"].items()), abs=1e-6)
    emulated = _plan_config(tmp_path, "aws:\n  endpoint_url: http://127.0.0.1:9\n")
    with _pricing_stub(monkeypatch) as idle:
        assert main(["plan", emulated, "--region-prices", "--json"]) == 0
        idle.assert_no_pending_responses()
    assert capsys.readouterr().err.splitlines() == [
        "costscale: warning: plan --region-prices: aws.endpoint_url is set (an emulated cloud, no Price List API): "
        "the shipped us-east-1 prices are used, as the daemon does"]
