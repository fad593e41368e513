"""A one-line progress bar for long commands (``costscale profile``): drawn on stderr only when it
is a terminal, so piped or captured output has no progress noise."""
from __future__ import annotations

import shutil
import sys
from typing import TextIO

BAR_WIDTH = 24


class Progress:
    """``[#####.......] 3/12 label``, redrawn in place; nothing at all when ``stream`` is not a tty."""

    def __init__(self, total: int, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.on = bool(getattr(self.stream, "isatty", lambda: False)())
        self.total = max(1, int(total))
        self.done = 0

    def grow(self, more: int) -> None:
        """More steps than first counted (probes found work on the way)."""
        self.total += max(0, int(more))

    def step(self, label: str) -> None:
        self.done = min(self.done + 1, self.total)
        if not self.on:
            return
        k = BAR_WIDTH * self.done // self.total
        line = f"[{'#' * k}{'.' * (BAR_WIDTH - k)}] {self.done}/{self.total} {label}"
        cols = shutil.get_terminal_size((100, 20)).columns - 1
        self.stream.write("\r" + line[:cols].ljust(cols))
        self.stream.flush()

    def close(self) -> None:
        if self.on:
            cols = shutil.get_terminal_size((100, 20)).columns - 1
            self.stream.write("\r" + " " * cols + "\r")
            self.stream.flush()
