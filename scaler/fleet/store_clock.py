"""The clock of the state store's timestamps (the actuator's): the wall clock, never going back.

The intents are ordered by their times (``StateStore.intents``: ``created_at``), and the status
feed reads what changed since the newest change it reported (``StateStore.intents_since``,
:class:`daemon.observe.status_watchers.IntentWatch`). A wall clock stepped back 10 minutes (NTP, a
resumed VM, ``date -s``) would file the next 10 minutes of launches and terminations before the
ones already reported, and the audit log would never tell them. :class:`NeverBack` holds at the
latest time it gave until the wall clock passes it again; a forward step moves it forward. The
times stay the wall clock's otherwise (they are shown, kept across restarts, compared with EC2's
launch times and the retention's days), so a forward step still shortens what they time: a
capacity cooldown ends early by the step (a launch refused once more), never a budget check.
"""
from __future__ import annotations

from typing import Callable


class NeverBack:
    """``wall()``, or the latest value returned when ``wall()`` went back."""

    def __init__(self, wall: Callable[[], float]) -> None:
        self.wall = wall
        self.last = float("-inf")

    def __call__(self) -> float:
        self.last = max(self.last, self.wall())
        return self.last


__all__ = ["NeverBack"]
