"""scaler.pricing.spot: spot $/hr from describe_spot_price_history (moto serves it, at its fixed
0.00001 $/hr, through botocore's paginator; botocore's Stubber for real-looking prices and failures),
a 0600 cache refreshed after an hour, and the shipped table as the fallback with one warning line.
Nothing leaves 127.0.0.1."""
from __future__ import annotations

import stat
from datetime import datetime, timezone
from pathlib import Path

import boto3
from botocore.stub import Stubber

from scaler.pricing.spot import CACHE_TTL_S, SpotPriceSource, cache_path_for, parse_history

T0 = 1_700_000_000.0
G, R = "g4dn.xlarge", "r5n.large"
A, C = "us-east-1a", "us-east-1c"


def entry(itype: str, zone: str, price: str, at: float, product: str = "Linux/UNIX") -> dict:
    return {"InstanceType": itype, "AvailabilityZone": zone, "SpotPrice": price, "ProductDescription": product,
            "Timestamp": datetime.fromtimestamp(at, tz=timezone.utc)}


def test_the_latest_price_of_each_type_and_zone_is_taken() -> None:
    entries = [entry(G, A, "0.2100", T0 - 600), entry(G, A, "0.2158", T0 - 60), entry(G, C, "0.2039", T0 - 900),
               entry(G, C, "0.5000", T0 - 60, product="Windows"), entry(R, A, "0.0545", T0 - 30),
               entry("p3.2xlarge", A, "0.9", T0), entry(G, "us-east-1d", "0.3", T0)]
    assert parse_history(entries, [G, R], [A, C]) == {G: {A: 0.2158, C: 0.2039}, R: {A: 0.0545}}


def test_moto_serves_describe_spot_price_history_through_the_paginator(moto_endpoint: str, tmp_path: Path) -> None:
    client = boto3.client("ec2", region_name="us-east-1", endpoint_url=moto_endpoint)
    src = SpotPriceSource("us-east-1", tmp_path / "s.json", client=client, clock=lambda: T0)
    got = src.fetch([G, R], [A, C])
    assert got == {G: {A: 0.00001, C: 0.00001}, R: {A: 0.00001, C: 0.00001}} and src.requests >= 1


def _stubbed(tmp_path: Path, now: list[float]) -> tuple[SpotPriceSource, Stubber]:
    client = boto3.client("ec2", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(client)
    src = SpotPriceSource("us-east-1", tmp_path / "state.db.spot-prices.json", client=client, clock=lambda: now[0])
    return src, stub


def test_prices_are_cached_0600_and_asked_again_after_an_hour(tmp_path: Path) -> None:
    now = [T0]
    src, stub = _stubbed(tmp_path, now)
    stub.add_response("describe_spot_price_history", {"SpotPriceHistory": [
        entry(G, A, "0.2158", T0 - 60), entry(G, C, "0.2039", T0 - 60)]}, expected_params={
        "InstanceTypes": [G], "ProductDescriptions": ["Linux/UNIX", "Linux/UNIX (Amazon VPC)"],
        "StartTime": datetime.fromtimestamp(T0, tz=timezone.utc),
        "Filters": [{"Name": "availability-zone", "Values": [A, C]}]})
    stub.add_response("describe_spot_price_history", {"SpotPriceHistory": [
        entry(G, A, "0.3000", T0 + CACHE_TTL_S), entry(G, C, "0.2039", T0 - 60)]})
    with stub:
        assert src.lookup([G], [A, C]) == ({G: {A: 0.2158, C: 0.2039}}, None)
        assert src.requests == 1
        now[0] = T0 + CACHE_TTL_S - 1
        assert src.lookup([G], [A, C]) == ({G: {A: 0.2158, C: 0.2039}}, None)
        assert src.requests == 1                                   # fresh: nothing asked
        now[0] = T0 + CACHE_TTL_S
        assert src.lookup([G], [A, C]) == ({G: {A: 0.3, C: 0.2039}}, None)
        assert src.requests == 2                                   # an hour old: refreshed
    assert stat.S_IMODE(src.cache_path.stat().st_mode) == 0o600
    assert cache_path_for("/var/lib/costscale/state.db") == Path("/var/lib/costscale/state.db.spot-prices.json")


def test_a_pair_ec2_lists_no_price_for_is_not_asked_again_within_the_hour(tmp_path: Path) -> None:
    now = [T0]
    src, stub = _stubbed(tmp_path, now)
    for _ in range(2):                    # once at T0, once an hour later: never on the lookups in between
        stub.add_response("describe_spot_price_history", {"SpotPriceHistory": [entry(G, A, "0.2158", T0 - 60)]})
    with stub:
        first = src.lookup([G], [A, C])
        now[0] = T0 + 60
        assert src.lookup([G], [A, C]) == first and src.requests == 1
        now[0] = T0 + CACHE_TTL_S
        src.lookup([G], [A, C])
        assert src.requests == 2
    assert first == ({G: {A: 0.2158, C: 0.2039}}, "spot prices in us-east-1: no spot price listed; using the shipped "
                                                   "table's for g4dn.xlarge@us-east-1c")


def test_a_failure_falls_back_to_the_cache_then_the_table_with_one_warning(tmp_path: Path) -> None:
    now = [T0]
    src, stub = _stubbed(tmp_path, now)
    stub.add_response("describe_spot_price_history", {"SpotPriceHistory": [entry(G, A, "0.2500", T0)]})
    stub.add_client_error("describe_spot_price_history", "UnauthorizedOperation",
                          "You are not authorized to perform this operation.")
    with stub:
        src.lookup([G], [A])
        now[0] = T0 + 2 * CACHE_TTL_S
        prices, warning = src.lookup([G, R], [A, "us-east-1e"])
    assert prices == {G: {A: 0.25}, R: {A: 0.0545}}
    assert warning == ("spot prices in us-east-1: describe_spot_price_history failed (UnauthorizedOperation: You are "
                       "not authorized to perform this operation. (needs ec2:DescribeSpotPriceHistory)); using cached prices older than 1 h for "
                       "g4dn.xlarge@us-east-1a; the shipped table's for r5n.large@us-east-1a; none for "
                       "g4dn.xlarge@us-east-1e, r5n.large@us-east-1e (planned on-demand there)")


def test_without_fetching_the_table_answers(tmp_path: Path) -> None:
    src = SpotPriceSource("us-east-1", tmp_path / "s.json", client=object(), clock=lambda: T0)
    prices, warning = src.lookup([G], [A, C], fetch=False)
    assert prices == {G: {A: 0.2158, C: 0.2039}} and src.requests == 0
    assert warning == ("spot prices in us-east-1: not fetched; using the shipped table's for g4dn.xlarge@us-east-1a, "
                       "g4dn.xlarge@us-east-1c")
