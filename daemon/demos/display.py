"""What the demo shows and what it keeps off the screen: the live status line
(:class:`LiveDisplay`: rewritten in place on a terminal, one line per load phase elsewhere), the
figures' formats (a figure without a sample is "-" on screen, null in JSON), the summary table, and
the library chatter that says nothing about costscale (:func:`quiet_library_logs`).
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import warnings
from typing import Iterator, TextIO

#: width of the live line on a terminal
LINE_WIDTH = 150


def fmt_ms(x: float) -> str:
    """A latency for the display: "-" when there is no sample."""
    return "-" if math.isnan(x) else f"{x:.1f} ms"


def fmt_pct(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.1f}%"


def json_num(x: float) -> float | None:
    """A figure for the JSON summary: null when there is no sample (JSON has no nan)."""
    return None if math.isnan(x) else round(x, 2)


class LiveDisplay:
    """The demo's live status line: rewritten in place on a terminal; when the output is not a
    terminal (a pipe, a file, CI), one line per load phase, printed when the phase ends."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        isatty = getattr(out, "isatty", None)
        self.tty = bool(isatty and isatty())
        self._rate: float | None = None
        self._last = ""
        self._phase = 0

    def show(self, rate: float, line: str) -> None:
        """The latest status ``line`` of the phase offering ``rate`` q/s."""
        if self.tty:
            print("\r" + line.ljust(LINE_WIDTH)[:LINE_WIDTH], end="", file=self.out, flush=True)
            return
        if self._rate is not None and rate != self._rate:
            self._emit()
        self._rate, self._last = rate, line

    def close(self) -> None:
        """End of the load: end the live line, or print the last phase's line."""
        if self.tty:
            print(file=self.out)
        elif self._last:
            self._emit()

    def _emit(self) -> None:
        self._phase += 1
        print(f"phase {self._phase}: {self._last}", file=self.out, flush=True)
        self._last = ""


def _apscheduler_noise(record: logging.LogRecord) -> bool:
    """False for APScheduler warnings (a tick skipped while the previous one runs, a run time
    missed) and for its report of a job cancelled at shutdown."""
    if record.levelno < logging.ERROR:
        return False
    exc = record.exc_info[0] if record.exc_info else None
    return not (exc is not None and issubclass(exc, asyncio.CancelledError))


_QUANTIZATION_DIR = f"{os.sep}onnxruntime{os.sep}quantization{os.sep}"


def _quantization_advice(record: logging.LogRecord) -> bool:
    """False for ONNX Runtime quantization's warnings (it logs them on the root logger, e.g. "Please
    consider to run pre-processing before quantization" for every int8 variant generated)."""
    return record.levelno >= logging.ERROR or _QUANTIZATION_DIR not in record.pathname


@contextlib.contextmanager
def quiet_library_logs() -> Iterator[None]:
    """Keep library chatter off the demo's display while it runs: APScheduler's warnings and
    shutdown cancellations, ONNX Runtime quantization's log warnings and the Python warnings of
    ``onnxruntime.quantization``. Errors pass, and costscale's own records are untouched."""
    sched = logging.getLogger("apscheduler.scheduler")
    execs = logging.getLogger("apscheduler.executors.default")
    root = logging.getLogger()
    sched.addFilter(_apscheduler_noise)
    execs.addFilter(_apscheduler_noise)
    root.addFilter(_quantization_advice)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", module=r"onnxruntime\.quantization(\.|$)")
            yield
    finally:
        sched.removeFilter(_apscheduler_noise)
        execs.removeFilter(_apscheduler_noise)
        root.removeFilter(_quantization_advice)


def summary_table(rows: list[tuple[str, str]]) -> str:
    w = max(len(k) for k, _ in rows)
    return "\n".join(f"  {k.ljust(w)}  {v}" for k, v in rows)



__all__ = ["LINE_WIDTH", "LiveDisplay", "fmt_ms", "fmt_pct", "json_num", "quiet_library_logs", "summary_table"]
