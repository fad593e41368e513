"""Spot availability traces for the replay (``costscale replay --spot-trace FILE``, issue #28).

A CSV with the header ``timestamp_s,zone,instance_type,available``: from ``timestamp_s`` (seconds
from the replay's start) on, spot capacity of ``instance_type`` in ``zone`` is there (1) or not (0),
until the next row for that zone and type; ``instance_type`` ``*`` stands for every type. Before a
zone's first row its capacity is there. Lines starting with ``#`` are comments (the source of the
data). The SpotHedge artifact's AWS traces have this shape: one row per zone every 300 s
(``examples/traces/README.md``).

:func:`read_spot_trace` parses and checks a file (one line per problem: a ``ValueError`` the CLI
turns into exit 2); :meth:`SpotTrace.changes` lists the moments availability moves, the replay's
events.
"""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

from config.sections.spot import ZONE_RE

HEADER = ("timestamp_s", "zone", "instance_type", "available")
#: ``instance_type`` of a row that holds for every type in its zone
ANY_TYPE = "*"


@dataclass(frozen=True)
class SpotChange:
    """From ``at_s`` on, spot capacity of ``instance_type`` (or every type: ``*``) in ``zone`` is
    ``available``."""

    at_s: float
    zone: str
    instance_type: str
    available: bool


@dataclass(frozen=True)
class SpotTrace:
    rows: tuple[SpotChange, ...]          # every row, in time order (stable for ties)
    source: str = ""

    @property
    def zones(self) -> list[str]:
        return sorted({r.zone for r in self.rows})

    @property
    def types(self) -> list[str]:
        return sorted({r.instance_type for r in self.rows})

    def changes(self) -> list[SpotChange]:
        """The rows that change something: each (zone, type)'s availability when it differs from the
        one before (there at first)."""
        state: dict[tuple[str, str], bool] = {}
        out = []
        for r in self.rows:
            k = (r.zone, r.instance_type)
            if state.get(k, True) != r.available:
                out.append(r)
            state[k] = r.available
        return out

    def available(self, zone: str, instance_type: str, t: float) -> bool:
        """Whether spot capacity of ``instance_type`` is there in ``zone`` at ``t`` (a type's own rows
        and the zone's ``*`` rows, the latest at or before ``t`` winning)."""
        state = True
        for r in self.rows:
            if r.at_s > t:
                break
            if r.zone == zone and r.instance_type in (instance_type, ANY_TYPE):
                state = r.available
        return state

    def available_share(self, zone: str, instance_type: str, duration_s: float) -> float:
        """The share of ``[0, duration_s)`` capacity is there (reports, tests)."""
        points = sorted({0.0, *(r.at_s for r in self.rows if r.at_s < duration_s and r.zone == zone
                                and r.instance_type in (instance_type, ANY_TYPE))})
        ends = points[1:] + [duration_s]
        up = sum(e - s for s, e in zip(points, ends) if self.available(zone, instance_type, s))
        return up / duration_s if duration_s > 0 else 1.0


def read_spot_trace(path: str | Path) -> SpotTrace:
    """Parse ``path``; ``ValueError`` with one line (file, line, field) when it is not a spot trace."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ValueError(f"{p}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{p}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None
    lines = [(k + 1, ln) for k, ln in enumerate(text.splitlines()) if ln.strip() and not ln.startswith("#")]
    if not lines:
        raise ValueError(f"{p}: empty: expected the header {','.join(HEADER)}")
    head_no, head = lines[0]
    if tuple(h.strip() for h in head.split(",")) != HEADER:
        raise ValueError(f"{p}: line {head_no}: expected the header {','.join(HEADER)}")
    rows: list[SpotChange] = []
    for (no, ln), rec in zip(lines[1:], csv.reader([ln for _, ln in lines[1:]])):
        if len(rec) != 4:
            raise ValueError(f"{p}: line {no}: expected 4 fields ({','.join(HEADER)}), got {len(rec)}")
        t_txt, zone, itype, avail = (x.strip() for x in rec)
        try:
            t = float(t_txt)
        except ValueError:
            raise ValueError(f"{p}: line {no}: timestamp_s {t_txt!r} is not a number") from None
        if not math.isfinite(t) or t < 0:
            raise ValueError(f"{p}: line {no}: timestamp_s must be a finite number >= 0")
        if not ZONE_RE.match(zone):
            raise ValueError(f"{p}: line {no}: zone {zone!r} is not an availability zone name")
        if not itype:
            raise ValueError(f"{p}: line {no}: instance_type is empty (a type, or * for every type)")
        if avail not in ("0", "1"):
            raise ValueError(f"{p}: line {no}: available must be 0 or 1, not {avail!r}")
        rows.append(SpotChange(t, zone, itype, avail == "1"))
    rows.sort(key=lambda r: r.at_s)
    return SpotTrace(tuple(rows), str(p))


__all__ = ["ANY_TYPE", "HEADER", "SpotChange", "SpotTrace", "read_spot_trace"]
