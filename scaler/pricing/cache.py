"""The JSON price caches beside the state store, shared by the on-demand prices
(:mod:`scaler.pricing.region`, ``STATE.prices.json``) and the spot prices (:mod:`scaler.pricing.spot`,
``STATE.spot-prices.json``): read as one JSON object of a given version (anything else: no cache, so
the prices are asked again), written atomically and 0600, with one warning when it cannot be
written; each price an entry ``{"usd_per_hour", "fetched_at"}``. And what an AWS failure is called in
the fallback's warning (:func:`short_error`). An adapter (file I/O); it decides nothing.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Callable, TypeVar

from config.files import write_atomic
from scaler.cloud.aws_client import client_error_line

log = logging.getLogger("costscale")

T = TypeVar("T")
#: one cached price: $/hr and when it was fetched (epoch s)
Entry = dict[str, float]


def read_cache(path: Path, version: int, parse: Callable[[dict[str, Any]], T], empty: T) -> T:
    """``parse`` of the cache's JSON object when it is of ``version``; ``empty`` when the file is
    missing, unreadable, of another version or not of the shape ``parse`` expects."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or data.get("version") != version:
            return empty
        return parse(data)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return empty


def cache_entry(raw: Any) -> Entry:
    """One cached price as read (raises KeyError/TypeError/ValueError on a bad one)."""
    return {"usd_per_hour": float(raw["usd_per_hour"]), "fetched_at": float(raw["fetched_at"])}


def write_cache(path: Path, data: dict[str, Any], what: str) -> None:
    """Write ``data`` (its ``version`` included) atomically, 0600; a failure is one warning naming
    ``what`` (the prices kept only in memory until the next write)."""
    text = json.dumps(data, indent=1, sort_keys=True)
    try:
        write_atomic(path, text.encode())   # a mkstemp file: 0600
        path.chmod(0o600)
    except OSError as exc:
        log.warning("%s: cannot write the cache %s (%s)", what, path, exc.strerror or exc)


def short_error(exc: Exception, service: str = "") -> str:
    """An error in a few words (a botocore ClientError: its code and message, a refusal naming the
    IAM action of ``service``'s operation that failed: ``scaler.cloud.aws_client.client_error_line``)."""
    return client_error_line(exc, service)


__all__ = ["Entry", "cache_entry", "read_cache", "short_error", "write_cache"]
