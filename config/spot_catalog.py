"""The shipped spot price table (``config/spot_prices.csv``): Linux spot $/hr by instance type and
availability zone in us-east-1, with its source in the file's header (SkyPilot's AWS catalog, a
snapshot of EC2's spot price history at one commit). ``scaler.pricing.spot`` asks EC2 for the
current prices (``describe_spot_price_history``) and falls back to this table; the replay bills
spot at these prices unless the caller gives others.
"""
from __future__ import annotations

import csv
import functools
import io
from importlib import resources

from config.sections.spot import zone_region

#: type -> zone -> $/hr
SpotPrices = dict[str, dict[str, float]]


@functools.lru_cache(maxsize=1)
def _read_table_text() -> str:
    return resources.files("config").joinpath("spot_prices.csv").read_text(encoding="utf-8")


def load_spot_table(region: str | None = None) -> SpotPrices:
    """The shipped table (every row, or the rows of ``region``'s zones), as type -> zone -> $/hr."""
    rows = [ln for ln in _read_table_text().splitlines() if ln and not ln.startswith("#")]
    out: SpotPrices = {}
    for row in csv.DictReader(io.StringIO("\n".join(rows))):
        zone = row["zone"]
        if region is not None and zone_region(zone) != region:
            continue
        price = float(row["price_per_hour"])
        if not price > 0:
            raise ValueError(f"spot price table: bad price {row['price_per_hour']!r} for {row['instance_type']} "
                             f"in {zone}")
        out.setdefault(row["instance_type"], {})[zone] = price
    return out


__all__ = ["SpotPrices", "load_spot_table"]
