"""Spot $/hr per instance type and availability zone from EC2 (issue #28): an adapter (I/O).

* ``DescribeSpotPriceHistory`` on the EC2 client, through botocore's paginator, for the allowed
  spot types in the configured zones, product ``Linux/UNIX`` (``Linux/UNIX (Amazon VPC)`` is the
  same price), ``StartTime`` now: EC2 then answers with the price in force now per type and zone
  (the latest entry of each pair is taken; botocore retries transient faults in its standard mode,
  ``scaler.cloud.aws_client``). IAM: ``ec2:DescribeSpotPriceHistory``.
* Prices are cached in a JSON file beside the state store (0600, :mod:`scaler.pricing.cache`) for
  :data:`CACHE_TTL_S`; a lookup within it asks nothing, one after it refreshes (the daemon looks up
  again every fleet interval, so a price that moved is seen within the hour). A pair EC2 answers
  with no price (a type not offered in a zone) is not asked for again within the hour either.
* When EC2 fails (no permission, no network) a cached price of any age stands in, else the shipped
  table's (``config/spot_prices.csv``), with one warning line; a pair neither knows is left out, and
  the decisions plan that type on-demand in that zone (``scaler.spot.market``).

The decisions take the result as a plain mapping (``SpotMarket.from_config``).
"""
from __future__ import annotations

import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from config.spot_catalog import SpotPrices, load_spot_table
from scaler.cloud.aws_client import make_client
from scaler.pricing.cache import Entry, cache_entry, read_cache, short_error, write_cache

#: a cached spot price is asked for again after this long (s)
CACHE_TTL_S = 3600.0
CACHE_VERSION = 1
#: the Linux products (EC2-Classic's name and the VPC one report the same price)
PRODUCTS = ("Linux/UNIX", "Linux/UNIX (Amazon VPC)")


def cache_path_for(state_path: str) -> Path:
    """The spot price cache beside the state store."""
    return Path(state_path + ".spot-prices.json")


def parse_history(entries: Iterable[Mapping[str, Any]], types: Sequence[str], zones: Sequence[str]) -> SpotPrices:
    """The latest price of each (type, zone) in ``DescribeSpotPriceHistory`` entries, for the
    ``types`` and ``zones`` asked (other products, types and zones ignored)."""
    best: dict[tuple[str, str], tuple[Any, float]] = {}
    for e in entries:
        t, z = e.get("InstanceType"), e.get("AvailabilityZone")
        if t not in types or z not in zones or e.get("ProductDescription", PRODUCTS[0]) not in PRODUCTS:
            continue
        price = float(e["SpotPrice"])
        if not price > 0:
            continue
        stamp = e.get("Timestamp")
        key = stamp.timestamp() if isinstance(stamp, datetime) else str(stamp or "")
        if (t, z) not in best or key >= best[(t, z)][0]:
            best[(t, z)] = (key, price)
    out: SpotPrices = {}
    for (t, z), (_, p) in sorted(best.items()):
        out.setdefault(t, {})[z] = p
    return out


class SpotPriceSource:
    """Spot prices of one region's zones: the cache first, then EC2, then the shipped table."""

    def __init__(self, region: str, cache_path: Path, *, client: Any = None, clock: Callable[[], float] = time.time,
                 endpoint_url: str | None = None, max_attempts: int = 3) -> None:
        self.region, self.cache_path, self.clock = region, cache_path, clock
        self._client, self._endpoint, self._attempts = client, endpoint_url, max_attempts
        self.requests = 0       # pages asked for (tests, logs)
        self._unlisted: dict[tuple[str, str], float] = {}   # (type, zone) EC2 answered without a price -> when

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = make_client("ec2", self.region, max_attempts=self._attempts, connect_timeout=3,
                                       read_timeout=10, endpoint_url=self._endpoint)
        return self._client

    def fetch(self, types: Sequence[str], zones: Sequence[str]) -> SpotPrices:
        """The prices in force now, from EC2 (raises what botocore gives up on)."""
        start = datetime.fromtimestamp(self.clock(), tz=timezone.utc)
        pages = self.client.get_paginator("describe_spot_price_history").paginate(
            InstanceTypes=list(types), ProductDescriptions=list(PRODUCTS), StartTime=start,
            Filters=[{"Name": "availability-zone", "Values": list(zones)}])
        entries: list[Mapping[str, Any]] = []
        for page in pages:
            self.requests += 1
            entries.extend(page.get("SpotPriceHistory", []))
        return parse_history(entries, types, zones)

    def _read_cache(self) -> dict[str, dict[str, Entry]]:
        return read_cache(self.cache_path, CACHE_VERSION, lambda data: {} if data.get("region") != self.region else {
            t: {z: cache_entry(e) for z, e in by_zone.items()} for t, by_zone in data.get("prices", {}).items()}, {})

    def _write_cache(self, entries: dict[str, dict[str, Entry]]) -> None:
        write_cache(self.cache_path, {"version": CACHE_VERSION, "region": self.region, "prices": entries},
                    "spot prices")

    def lookup(self, types: Sequence[str], zones: Sequence[str], fetch: bool = True) -> tuple[SpotPrices, str | None]:
        """Prices of ``types`` in ``zones``: fresh cache entries, else EC2 (when ``fetch``), else
        cached ones of any age, else the shipped table; and one warning line when some came from the
        last two or are missing."""
        cached = self._read_cache()
        now = self.clock()
        want = [(t, z) for t in types for z in zones]
        fresh = {(t, z) for t, z in want if now - cached.get(t, {}).get(z, {}).get("fetched_at", -1e18) < CACHE_TTL_S}
        # asked within the hour: fresh, or listed by EC2 with no price (asked again after the hour, not each lookup)
        asked = fresh | {k for k in want if now - self._unlisted.get(k, -1e18) < CACHE_TTL_S}
        error: str | None = None
        if fetch and len(asked) < len(want):
            try:
                got = self.fetch(types, zones)
            except Exception as exc:  # noqa: BLE001 - any failure: the fallback, with a warning
                error = short_error(exc, "ec2")
            else:
                for t, z in want:
                    if z in got.get(t, {}):
                        cached.setdefault(t, {})[z] = {"usd_per_hour": got[t][z], "fetched_at": now}
                        fresh.add((t, z))
                        self._unlisted.pop((t, z), None)
                    else:
                        self._unlisted[(t, z)] = now
                if got:
                    self._write_cache(cached)
        table = load_spot_table(self.region) if any(z not in cached.get(t, {}) for t, z in want) else {}
        out: SpotPrices = {}
        stale, from_table, missing = [], [], []
        for t, z in want:
            if z in cached.get(t, {}):
                out.setdefault(t, {})[z] = cached[t][z]["usd_per_hour"]
                if (t, z) not in fresh:
                    stale.append(f"{t}@{z}")
            elif z in table.get(t, {}):
                out.setdefault(t, {})[z] = table[t][z]
                from_table.append(f"{t}@{z}")
            else:
                missing.append(f"{t}@{z}")
        if not (stale or from_table or missing):
            return out, None
        why = f"describe_spot_price_history failed ({error})" if error else "not fetched" if not fetch else \
            "no spot price listed"
        parts = [f"cached prices older than {CACHE_TTL_S / 3600:g} h for {', '.join(stale)}" if stale else "",
                 f"the shipped table's for {', '.join(from_table)}" if from_table else "",
                 f"none for {', '.join(missing)} (planned on-demand there)" if missing else ""]
        return out, f"spot prices in {self.region}: {why}; using " + "; ".join(p for p in parts if p)


__all__ = ["CACHE_TTL_S", "PRODUCTS", "SpotPriceSource", "cache_path_for", "parse_history"]
