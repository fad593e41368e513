"""Virtual time for the simulator (DESIGN "One clock"): loops read ``now()`` from a clock object;
the daemon passes a real clock, the simulator this one, which only moves when the event loop
advances it."""
from __future__ import annotations


class VirtualClock:
    """A monotonic clock in seconds that advances only by :meth:`advance_to`."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)

    def now(self) -> float:
        return self._now

    def advance_to(self, t: float) -> None:
        """Move the clock to ``t``; moving backwards is a bug in the caller."""
        if t < self._now:
            raise ValueError(f"virtual clock cannot go back from {self._now} to {t}")
        self._now = float(t)
