"""The dollars the live pool has cost: :class:`SpendMeter` integrates the pool's $/hr over time (each
second's sample holds until the next). "Today" is since 00:00 UTC (as AWS bills) and is kept across
restarts in ``<state_path>.spend.json`` (0600), where the pool's last $/hr also goes: the time the
daemon was down is counted at that price (a stopped daemon keeps its instances unless
``on_shutdown: terminate``, after which the last price is 0).

The time between two samples is measured on the monotonic clock when the caller gives it (the
status feed does): a step of the wall clock (NTP, a resumed VM) neither adds the step's length at
the pool's price (stepped forward) nor drops the interval (stepped back). The wall clock says only
which UTC day a dollar falls on and what the spend file records."""
from __future__ import annotations

import json
import logging
from datetime import datetime, timezone
from pathlib import Path

from config.files import write_atomic

log = logging.getLogger("costscale")

#: how often the spend file is rewritten (s); also at stop
SAVE_S = 60.0


def utc_day(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d")


def day_start(t: float) -> float:
    d = datetime.fromtimestamp(t, timezone.utc)
    return d.replace(hour=0, minute=0, second=0, microsecond=0).timestamp()


class SpendMeter:
    """Dollars spent today (UTC) and since the start (see the module docstring)."""

    def __init__(self, path: Path | None, now: float) -> None:
        self.path = path
        self.day = utc_day(now)
        self.today = 0.0
        self.total = 0.0
        self._last: tuple[float, float] | None = None   # (time, $/hr then)
        self._last_mono: float | None = None             # the monotonic time of that sample
        self._saved_at = now
        self._load(now)

    def _load(self, now: float) -> None:
        if self.path is None or not self.path.is_file():
            return
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            last_t, last_cost = float(data["last_at"]), float(data["last_cost_per_hour"])
            day, today = str(data["day"]), float(data["today_usd"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("spend: ignoring %s (%s); today's spend counts from now", self.path, exc)
            return
        if day == self.day:
            self.today = today
        # the time the daemon was down, at the pool's last price (today's part only)
        gap_from = max(last_t, day_start(now))
        if last_cost > 0 and now > gap_from:
            self.today += last_cost * (now - gap_from) / 3600.0

    def sample(self, now: float, cost_per_hour: float, monotonic: float | None = None) -> None:
        """The pool costs ``cost_per_hour`` from ``now`` on; what it cost since the last sample is added
        (``monotonic``: the monotonic clock now, which times the interval; module docstring)."""
        if self._last is not None:
            t0, c0 = self._last
            m0 = self._last_mono
            elapsed = max((monotonic - m0) if monotonic is not None and m0 is not None else now - t0, 0.0)
            spent = c0 * elapsed / 3600.0
            self.total += spent
            day = utc_day(now)
            if day != self.day:    # a new UTC day: only the part since midnight counts for it
                self.day = day
                self.today = c0 * max(now - max(day_start(now), now - elapsed), 0.0) / 3600.0
            else:
                self.today += spent
        self._last, self._last_mono = (now, cost_per_hour), monotonic
        if now - self._saved_at >= SAVE_S:
            self.save(now)

    def save(self, now: float) -> None:
        if self.path is None or self._last is None:
            return
        self._saved_at = now
        data = {"day": self.day, "today_usd": self.today, "last_at": self._last[0],
                "last_cost_per_hour": self._last[1]}
        try:
            write_atomic(self.path, json.dumps(data).encode())
        except OSError as exc:
            log.warning("spend: cannot write %s: %s", self.path, exc.strerror or exc)


__all__ = ["SAVE_S", "SpendMeter", "day_start", "utc_day"]
