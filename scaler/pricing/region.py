"""On-demand $/hr of the allowed instance types in the daemon's region (AWS Price List API).

The shipped catalog (``config/instance_catalog.csv``) holds us-east-1 prices, and the budget
invariant (DESIGN invariant 1) rests on prices, so the daemon prices its own region:

* ``GetProducts`` on the ``pricing`` client (its endpoint in us-east-1), through botocore's
  paginator, one query per type: ServiceCode AmazonEC2, ``instanceType``, ``regionCode``,
  operatingSystem Linux, tenancy Shared, preInstalledSw NA, capacitystatus Used; botocore
  retries each request's transient faults in its standard mode (``scaler.cloud.aws_client``);
* each PriceList entry (a JSON string) gives its OnDemand terms' USD price per hour
  (``parse_on_demand``); where several products match, the dearest is taken (the safe side of a
  budget);
* prices are cached in a JSON file beside the state store (0600, :mod:`scaler.pricing.cache`) for
  ``CACHE_TTL_S``; a second start within it makes no request;
* when the API fails (no permission, no network, no product listed), a cached price of any age
  stands in, else the shipped table's, with one warning naming the region and that us-east-1
  prices are used;
* the config's ``price_per_hour`` overrides win over both (those types are not looked up:
  ``Config.full_catalog``); with ``aws.endpoint_url`` set (an emulator) the daemon has no price
  source (``daemon.aws.wiring``) and asks nothing.

An adapter (I/O): the decisions take the resulting catalog (``Config.with_region_prices``).
"""
from __future__ import annotations

import json
import logging
import re
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from config.schema import Config
from scaler.cloud.aws_client import make_client
from scaler.pricing.cache import Entry, cache_entry, read_cache, short_error, write_cache

log = logging.getLogger("costscale")

PRICING_REGION = "us-east-1"              # the Price List API's endpoint
CACHE_TTL_S = 7 * 24 * 3600.0             # a cached regional price is refreshed after a week
CACHE_VERSION = 1
BOX_USAGE = re.compile(r"(^|-)BoxUsage:")   # an instance-hour usage type (not a host's, not unused capacity)
PRODUCT_FILTERS = {"operatingSystem": "Linux", "tenancy": "Shared", "preInstalledSw": "NA", "capacitystatus": "Used"}


def cache_path_for(state_path: str) -> Path:
    """The price cache beside the state store."""
    return Path(state_path + ".prices.json")


def price_filters(instance_type: str, region: str) -> list[dict[str, str]]:
    """GetProducts filters for one type's Linux, shared-tenancy, on-demand box usage in ``region``."""
    fields = {"instanceType": instance_type, "regionCode": region, **PRODUCT_FILTERS}
    return [{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in fields.items()]


def parse_on_demand(price_list: Iterable[str]) -> float | None:
    """The OnDemand USD price per hour in GetProducts' PriceList entries (JSON strings); the
    dearest where several products match; None when none has one."""
    found: list[float] = []
    for text in price_list:
        entry = json.loads(text) if isinstance(text, str) else text
        usage = str(entry.get("product", {}).get("attributes", {}).get("usagetype", ""))
        if usage and not BOX_USAGE.search(usage):   # e.g. EUW3-BoxUsage:r5n.large, BoxUsage:t3.xlarge
            continue
        for term in (entry.get("terms", {}).get("OnDemand") or {}).values():
            for dim in (term.get("priceDimensions") or {}).values():
                usd = dim.get("pricePerUnit", {}).get("USD")
                if dim.get("unit") == "Hrs" and usd is not None and float(usd) > 0:
                    found.append(float(usd))
    return max(found) if found else None


def make_pricing_client(max_attempts: int = 3) -> Any:
    """The Price List API's client, botocore retrying in its standard mode (``scaler.cloud.aws_client``)."""
    return make_client("pricing", PRICING_REGION, max_attempts=max_attempts, connect_timeout=3, read_timeout=10)


class RegionPrices:
    """Prices of one region: disk cache first, then the Price List API."""

    def __init__(self, region: str, cache_path: Path, *, client: Any = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.region = region
        self.cache_path = cache_path
        self._client = client
        self.clock = clock
        self.requests = 0       # GetProducts pages asked for (tests, logs)

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = make_pricing_client()
        return self._client

    # -- the cache (scaler.pricing.cache) -------------------------------------------------------
    def _read_cache(self) -> dict[str, Entry]:
        return read_cache(self.cache_path, CACHE_VERSION, lambda data: {
            t: cache_entry(e) for t, e in data.get("regions", {}).get(self.region, {}).items()}, {})

    def _write_cache(self, entries: dict[str, Entry]) -> None:
        regions = read_cache(self.cache_path, CACHE_VERSION,    # the other regions' prices are kept
                             lambda data: data["regions"] if isinstance(data.get("regions"), dict) else {}, {})
        regions[self.region] = entries
        write_cache(self.cache_path, {"version": CACHE_VERSION, "regions": regions}, "prices")

    # -- the API -----------------------------------------------------------------------------
    def fetch(self, instance_type: str) -> float | None:
        """One type's on-demand price from the Price List API (None: no product listed)."""
        pages = self.client.get_paginator("get_products").paginate(
            ServiceCode="AmazonEC2", Filters=price_filters(instance_type, self.region), FormatVersion="aws_v1")
        entries: list[str] = []
        for page in pages:
            self.requests += 1
            entries.extend(page.get("PriceList", []))
        return parse_on_demand(entries)

    def lookup(self, types: Sequence[str], fetch: bool = True) -> tuple[dict[str, float], str | None]:
        """Prices of ``types`` (fresh cache, else the API when ``fetch``, else a cached price of
        any age) and, when some type has no regional price, a warning line; those types are left
        out (the caller falls back to the table)."""
        cached = self._read_cache()
        now = self.clock()
        prices = {t: cached[t]["usd_per_hour"] for t in types
                  if t in cached and now - cached[t]["fetched_at"] < CACHE_TTL_S}
        todo = [t for t in types if t not in prices]
        unlisted: list[str] = []
        error: str | None = None
        if todo and fetch:
            fetched: dict[str, float] = {}
            for t in todo:
                try:
                    p = self.fetch(t)
                except Exception as exc:  # noqa: BLE001 - any failure: the fallback, with a warning
                    error = short_error(exc, "pricing")
                    break
                if p is None:
                    unlisted.append(t)
                else:
                    fetched[t] = p
            if fetched:
                cached.update({t: {"usd_per_hour": p, "fetched_at": now} for t, p in fetched.items()})
                self._write_cache(cached)
                prices.update(fetched)
        stale = {t: cached[t]["usd_per_hour"] for t in types if t not in prices and t in cached}
        prices.update(stale)
        table = [t for t in types if t not in prices]
        if not stale and not table:
            return prices, None
        why = (f"the Price List API failed ({error})" if error else
               f"no on-demand Linux price listed for {', '.join(unlisted)}" if unlisted else
               "prices not fetched on reload")
        parts = []
        if stale:
            parts.append(f"cached prices older than {CACHE_TTL_S / 86400:g} days for {', '.join(sorted(stale))}")
        if table:
            parts.append(f"the shipped us-east-1 on-demand prices for {', '.join(table)}")
        return prices, f"prices for region {self.region}: {why}; using {' and '.join(parts)}"


def regional_config(cfg: Config, prices: RegionPrices | None, fetch: bool = True, also: Sequence[str] = ()) -> Config:
    """``cfg`` with its region's prices under the YAML overrides; unchanged (the table's prices)
    without a price source (the daemon has none for an emulated cloud, ``aws.endpoint_url``).
    ``also``: catalog types to price beyond the allowed ones (``costscale plan --types``)."""
    if prices is None:
        log.debug("prices: emulated cloud (aws.endpoint_url), the shipped table's prices are used")
        return cfg
    wanted = [t.type for t in cfg.instance_types if not t.price_per_hour]
    overridden = {t.type for t in cfg.instance_types if t.price_per_hour}
    wanted += [t for t in dict.fromkeys(also) if t in cfg.full_catalog() and t not in wanted and t not in overridden]
    found, warning = prices.lookup(wanted, fetch=fetch)
    if warning:
        log.warning("%s", warning)
    if found:
        log.info("prices for %s: %s", cfg.region, ", ".join(f"{t} {p:g} $/hr" for t, p in sorted(found.items())))
    return cfg.with_region_prices(found)
