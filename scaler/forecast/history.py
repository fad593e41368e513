"""Each model's (and pipeline's) demand history: its arrival rate per minute, bounded (issue #39
deliverable 1; pure).

A :class:`DemandHistory` holds one series: minute ``k`` is the interval ``[60k, 60k + 60)`` seconds
on the caller's clock (the daemon: epoch seconds; the replay: seconds from the trace's start, so a
history before it has negative minutes). A minute never recorded is **unknown** (NaN), not zero: a
daemon that was down for an hour measured nothing, and a forecaster must not read that hour as an
hour without queries (it falls back, :mod:`scaler.forecast.seasonal`). A measured quiet minute is a
recorded 0.

It keeps at most ``retention_s`` of minutes (35 days by default: a week of weekly seasonality five
times over, as AWS EC2 predictive scaling keeps 14 days and forecasts from at least one): recording a
minute, or :meth:`DemandHistory.prune`, drops every minute older than the newest one (or ``now``)
less the retention. The rates live in one float64 numpy array with the first minute's index beside
it, so a forecaster reads a day or a week as a slice (:meth:`DemandHistory.rates`), never a loop.

Nothing here reads a clock or a file: the state store persists it (``scaler.fleet.state``), the
CSV parser fills it (:mod:`scaler.forecast.history_csv`).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Iterable, Mapping

import numpy as np

if TYPE_CHECKING:
    from config.schema import Config

#: seconds per minute of history
MINUTE_S = 60
#: minutes in a day and in a week (the two seasons the forecasters read)
DAY_MIN = 1440
WEEK_MIN = 7 * DAY_MIN
#: what a history keeps by default: 35 days (issue #39: "bounded, e.g. 35 days, pruned")
DEFAULT_RETENTION_S = 35 * 86400.0


def series_names(cfg: "Config") -> list[str]:
    """The series a history holds and a history row may name: each model's, then each pipeline's
    (its queries where they enter; its steps count in their models' series)."""
    return [m.name for m in cfg.models] + [p.name for p in cfg.pipelines]


def minute_of(t_s: float) -> int:
    """The minute holding the instant ``t_s`` (seconds on the history's clock)."""
    return int(math.floor(t_s / MINUTE_S))


class DemandHistory:
    """One series' arrival rate (q/s) per minute; unknown minutes are NaN (module docstring)."""

    __slots__ = ("retention_min", "_first", "_buf", "_len")

    def __init__(self, retention_s: float = DEFAULT_RETENTION_S) -> None:
        if not (math.isfinite(retention_s) and retention_s >= MINUTE_S):
            raise ValueError("retention must be at least one minute")
        self.retention_min = int(retention_s // MINUTE_S)
        self._first = 0                     # the minute of _buf[0]
        self._buf = np.empty(0)             # NaN: unknown; capacity may exceed _len
        self._len = 0                       # minutes held, from _first

    # -- building -------------------------------------------------------------------------
    @classmethod
    def from_minutes(cls, minutes: Iterable[int] | np.ndarray, rates: Iterable[float] | np.ndarray,
                     retention_s: float = DEFAULT_RETENTION_S) -> "DemandHistory":
        h = cls(retention_s)
        h.record_minutes(np.asarray(list(minutes) if not isinstance(minutes, np.ndarray) else minutes, dtype=np.int64),
                         np.asarray(list(rates) if not isinstance(rates, np.ndarray) else rates, dtype=float))
        return h

    def record(self, t_s: float, qps: float) -> None:
        """The rate measured over the minute holding ``t_s`` (a later record of the minute replaces it)."""
        self.record_minutes(np.array([minute_of(t_s)], dtype=np.int64), np.array([float(qps)]))

    def record_minutes(self, minutes: np.ndarray, rates: np.ndarray) -> None:
        """Many minutes at once (an import, a reload): ``rates[i]`` for ``minutes[i]``; a minute given
        twice keeps its last rate. Rates must be finite and >= 0 (ValueError otherwise)."""
        minutes = np.asarray(minutes, dtype=np.int64)
        rates = np.asarray(rates, dtype=float)
        if minutes.shape != rates.shape or minutes.ndim != 1:
            raise ValueError("minutes and rates must be 1-d and of one length")
        if not minutes.size:
            return
        if not (np.isfinite(rates).all() and (rates >= 0).all()):
            raise ValueError("a rate must be finite and >= 0")
        if np.unique(minutes).size != minutes.size:   # a minute given twice keeps its last rate (in
            minutes, first = np.unique(minutes[::-1], return_index=True)   # numpy's assignment, which
            rates = rates[::-1][first]                                     # wins is unspecified)
        newest = int(minutes.max())
        floor = max(newest, self.last_minute if self._len else newest) - self.retention_min + 1
        keep = minutes >= floor
        minutes, rates = minutes[keep], rates[keep]
        if not minutes.size:
            return
        lo, hi = int(minutes.min()), int(minutes.max()) + 1
        if not self._len:
            self._first, self._len = lo, 0
            self._buf = np.full(max(hi - lo, 16), np.nan)
        if lo < self._first:                 # older minutes than held: grow at the front
            grown = np.full(self._first - lo + self._len + 16, np.nan)
            grown[self._first - lo:self._first - lo + self._len] = self._buf[:self._len]
            self._buf, self._len, self._first = grown, self._first - lo + self._len, lo
        need = hi - self._first
        if need > self._buf.size:            # amortised doubling
            grown = np.full(max(need, 2 * self._buf.size), np.nan)
            grown[:self._len] = self._buf[:self._len]
            self._buf = grown
        self._len = max(self._len, need)
        self._buf[minutes - self._first] = rates
        self.prune_minute(self.last_minute - self.retention_min + 1)

    # -- bounding -------------------------------------------------------------------------
    def prune(self, now_s: float) -> int:
        """Drop the minutes older than ``now_s`` less the retention (the minute holding ``now_s``
        and the ``retention - 1`` before it stay); returns how many known minutes went."""
        return self.prune_minute(minute_of(now_s) - self.retention_min + 1)

    def prune_minute(self, first_kept: int) -> int:
        """Drop every minute before ``first_kept`` (and the unknown ones that then lead); returns how
        many known minutes went."""
        if not self._len or first_kept <= self._first:
            return 0
        cut = min(first_kept - self._first, self._len)
        gone = int(np.count_nonzero(~np.isnan(self._buf[:cut])))
        known = np.flatnonzero(~np.isnan(self._buf[cut:self._len]))
        cut = cut + int(known[0]) if known.size else self._len    # the first minute held is a measured one
        self._buf, self._len, self._first = self._buf[cut:], self._len - cut, self._first + cut
        if not self._len:
            self._buf, self._first = np.empty(0), 0
        return gone

    # -- reading --------------------------------------------------------------------------
    def __len__(self) -> int:
        """Minutes held, unknown ones between the first and the last included."""
        return self._len

    @property
    def first_minute(self) -> int | None:
        return self._first if self._len else None

    @property
    def last_minute(self) -> int | None:
        return self._first + self._len - 1 if self._len else None

    @property
    def known(self) -> int:
        """Minutes with a measured rate."""
        return int(np.count_nonzero(~np.isnan(self._buf[:self._len])))

    def at(self, minute: int) -> float:
        """The rate of ``minute`` (NaN: unknown)."""
        i = minute - self._first
        return float(self._buf[i]) if self._len and 0 <= i < self._len else math.nan

    def rates(self, first: int, stop: int) -> np.ndarray:
        """Minutes ``first`` .. ``stop - 1`` as a new array, NaN where unknown or not held."""
        n = max(stop - first, 0)
        out = np.full(n, np.nan)
        if not self._len or not n:
            return out
        lo, hi = max(first, self._first), min(stop, self._first + self._len)
        if lo < hi:
            out[lo - first:hi - first] = self._buf[lo - self._first:hi - self._first]
        return out

    def view(self) -> np.ndarray:
        """Every minute held, first to last (read-only view; NaN where unknown)."""
        v = self._buf[:self._len]
        v.flags.writeable = False
        return v

    def known_minutes(self) -> tuple[np.ndarray, np.ndarray]:
        """The measured minutes and their rates (what the state store persists)."""
        v = self._buf[:self._len]
        idx = np.flatnonzero(~np.isnan(v))
        return idx.astype(np.int64) + self._first, v[idx].copy()

    def gaps(self) -> list[tuple[int, int]]:
        """The runs of unknown minutes between the first and the last held, as (first, stop)."""
        if not self._len:
            return []
        unknown = np.isnan(self._buf[:self._len]).astype(np.int8)
        edges = np.diff(np.concatenate(([0], unknown, [0])))
        starts, stops = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
        return [(int(a) + self._first, int(b) + self._first) for a, b in zip(starts, stops)]


#: each series' history, keyed by model or pipeline name
Histories = Mapping[str, DemandHistory]


__all__ = ["DAY_MIN", "DEFAULT_RETENTION_S", "DemandHistory", "Histories", "MINUTE_S", "WEEK_MIN", "minute_of",
           "series_names"]
