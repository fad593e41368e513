"""Pre-flight of the account (issue #38, deliverable 5): whose credentials the daemon holds (STS
GetCallerIdentity, which needs no permission), whether the config's region is one the account
may use (EC2 DescribeRegions with every region: ``not-opted-in`` is a region every call of which
AWS refuses), and whether the Price List API answers (a warning when not: the shipped us-east-1
table prices the plan instead, ``scaler.pricing.region``). Reads only; spends nothing.
"""
from __future__ import annotations

from config.schema import Config
from daemon.doctor.report import Clients, Finding, failure, unread

CREDENTIALS_FIX = "give the daemon AWS credentials (an instance role, AWS_PROFILE or the standard credential chain)"


def check_credentials(clients: Clients) -> Finding:
    """Who signs the daemon's calls: fail with no credentials, or keys AWS does not accept."""
    from botocore.exceptions import NoCredentialsError

    try:
        who = clients("sts").get_caller_identity()
    except NoCredentialsError:
        return Finding("fail", "credentials", "no AWS credentials found", CREDENTIALS_FIX, "NoCredentials")
    except Exception as exc:       # noqa: BLE001 - every failure is one line
        code, msg = failure(exc, "sts")
        if not code:        # no answer: an endpoint that cannot be reached, not a verdict on the keys
            return Finding("fail", "credentials", f"STS did not answer: {msg}",
                           "check the network, region and aws.endpoint_url")
        return Finding("fail", "credentials", f"STS refused the credentials: {msg}", CREDENTIALS_FIX, code)
    return Finding("ok", "credentials", f"signed as {who.get('Arn', '?')} (account {who.get('Account', '?')})")


def check_region(cfg: Config, clients: Clients) -> Finding:
    """The region is listed for the account and enabled (opted in where it needs to be)."""
    try:
        regions = clients("ec2").describe_regions(AllRegions=True).get("Regions", [])
    except Exception as exc:       # noqa: BLE001
        code, msg = failure(exc, "ec2")
        denied = unread("region", f"region {cfg.region}", code, msg)
        if denied is not None:
            return denied
        return Finding("fail", "region", f"EC2 DescribeRegions in {cfg.region} failed: {msg}",
                       "check region and the network", code)
    found = {r.get("RegionName"): r.get("OptInStatus", "") for r in regions}
    if cfg.region not in found:
        return Finding("fail", "region", f"region {cfg.region} is not one of the account's {len(found)} regions",
                       "set region to one the account lists (aws ec2 describe-regions --all-regions)")
    if found[cfg.region] == "not-opted-in":
        return Finding("fail", "region", f"region {cfg.region} is not enabled for the account (not-opted-in): every "
                       "call there is refused", "enable it (Account settings, AWS Regions) or choose another region",
                       "OptInRequired")
    return Finding("ok", "region", f"{cfg.region} is enabled ({found[cfg.region] or 'listed'})")


def check_prices(cfg: Config, clients: Clients) -> Finding:
    """One GetProducts of the first allowed type: warn when the Price List API cannot be read."""
    if cfg.aws.endpoint_url:
        return Finding("warn", "prices", f"EC2 is an emulator at {cfg.aws.endpoint_url}: no Price List API there",
                       "the shipped table's us-east-1 prices are used")
    from scaler.pricing.region import parse_on_demand, price_filters

    first = cfg.instance_types[0].type
    try:
        page = clients("pricing").get_products(ServiceCode="AmazonEC2", Filters=price_filters(first, cfg.region),
                                               FormatVersion="aws_v1", MaxResults=10)
    except Exception as exc:       # noqa: BLE001
        code, msg = failure(exc, "pricing")
        return Finding("warn", "prices", f"the Price List API was not read: {msg}",
                       "the shipped table's us-east-1 prices are used (grant pricing:GetProducts)", code)
    price = parse_on_demand(page.get("PriceList", []))
    if price is None:
        return Finding("warn", "prices", f"the Price List API lists no on-demand price of {first} in {cfg.region}",
                       "the shipped table's price is used")
    return Finding("ok", "prices", f"the Price List API answers ({first} in {cfg.region}: {price:g} $/hr)")


__all__ = ["check_credentials", "check_prices", "check_region"]
