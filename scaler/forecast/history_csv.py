"""A demand history from a user's own logs: the CSV ``timestamp,model,qps`` (issue #39 deliverable 1;
pure: the caller opens the file and hands its lines over).

- ``timestamp``: seconds. Where a timestamp is negative it counts back from ``negative_from``: the
  replay passes 0, its trace's start (``costscale replay --history``: negative = before the trace);
  ``costscale history import`` passes now, so a positive timestamp is epoch seconds and a negative
  one is seconds before now.
- ``model``: a model's or a pipeline's name (``known``: the names allowed; another one is refused
  at its row).
- ``qps``: the arrival rate measured at that time, finite and >= 0.

Several rows in one minute (a log per second) make that minute's rate their mean; a minute with no
row stays unknown (:mod:`scaler.forecast.history`). A header naming the three columns comes first
(any order; more columns are ignored). A bad row raises :class:`ValueError` naming the source and
the line, which the commands print as one line (exit 2).
"""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from typing import Callable, Collection, Iterable

import numpy as np

from scaler.forecast.history import DEFAULT_RETENTION_S, MINUTE_S, DemandHistory

COLUMNS = ("timestamp", "model", "qps")
#: rows between two progress calls
PROGRESS_EVERY = 100_000


@dataclass(frozen=True)
class ParsedHistory:
    """Each series' minutes and rates (the mean of its rows in each minute), and the rows read."""

    minutes: dict[str, np.ndarray]
    rates: dict[str, np.ndarray]
    rows: int

    def histories(self, retention_s: float = DEFAULT_RETENTION_S) -> dict[str, DemandHistory]:
        """One :class:`DemandHistory` per series (the newest ``retention_s`` of each kept)."""
        return {m: DemandHistory.from_minutes(self.minutes[m], self.rates[m], retention_s) for m in self.minutes}


def parse_history_csv(lines: Iterable[str], source: str, *, negative_from: float = 0.0,
                      known: Collection[str] | None = None,
                      before: tuple[float, str] | None = None,
                      progress: Callable[[int], None] | None = None) -> ParsedHistory:
    """Parse ``lines`` (module docstring); ``before`` = (time, what): a row at or after that time is
    refused (the import: now; the replay: the trace's start, 0); ``progress(rows)`` every
    :data:`PROGRESS_EVERY` rows."""
    reader = csv.reader(lines)
    try:
        header = next(reader)
    except StopIteration:
        raise ValueError(f"{source}: empty file; expected a header {','.join(COLUMNS)}") from None
    except csv.Error as exc:
        raise ValueError(f"{source} line 1: {exc}") from None
    names = [h.strip().lower() for h in header]
    missing = [c for c in COLUMNS if c not in names]
    if missing:
        raise ValueError(f"{source} line 1: the header needs the columns {','.join(COLUMNS)} (missing "
                         f"{', '.join(missing)})")
    it, im, iq = (names.index(c) for c in COLUMNS)
    width = max(it, im, iq) + 1
    times: dict[str, list[float]] = {}
    qps: dict[str, list[float]] = {}
    rows = 0
    try:
        for row in reader:
            line = reader.line_num
            if not row or all(not c.strip() for c in row):
                continue
            if len(row) < width:
                raise ValueError(f"{source} line {line}: expected {len(names)} columns, got {len(row)}")
            model = row[im].strip()
            if not model:
                raise ValueError(f"{source} line {line}: the model is empty")
            if known is not None and model not in known:
                raise ValueError(f"{source} line {line}: model {model!r} is not in the config (known: "
                                 f"{', '.join(sorted(known))})")
            t, q = _number(row[it], "timestamp", source, line), _number(row[iq], "qps", source, line)
            if q < 0:
                raise ValueError(f"{source} line {line}: qps {row[iq].strip()} is negative")
            at = t + negative_from if t < 0 else t
            if before is not None and at >= before[0]:
                raise ValueError(f"{source} line {line}: timestamp {row[it].strip()} is not before {before[1]}")
            times.setdefault(model, []).append(at)
            qps.setdefault(model, []).append(q)
            rows += 1
            if progress is not None and rows % PROGRESS_EVERY == 0:
                progress(rows)
    except csv.Error as exc:
        raise ValueError(f"{source} line {reader.line_num}: {exc}") from None
    minutes, rates = {}, {}
    for m in times:
        mins = np.floor(np.asarray(times[m]) / MINUTE_S).astype(np.int64)
        uniq, inv = np.unique(mins, return_inverse=True)
        sums = np.bincount(inv, weights=np.asarray(qps[m]), minlength=uniq.size)
        minutes[m], rates[m] = uniq, sums / np.bincount(inv, minlength=uniq.size)
    return ParsedHistory(minutes, rates, rows)


def _number(text: str, what: str, source: str, line: int) -> float:
    try:
        v = float(text)
    except ValueError:
        raise ValueError(f"{source} line {line}: {what} {text.strip()!r} is not a number") from None
    if not math.isfinite(v):
        raise ValueError(f"{source} line {line}: {what} {text.strip()!r} is not finite")
    return v


__all__ = ["COLUMNS", "PROGRESS_EVERY", "ParsedHistory", "parse_history_csv"]
