"""``python -m bench.soak.wallclock SPEED ARGS...``: ``costscale ARGS...`` (the real daemon, unchanged)
with its wall clock running SPEED times as fast as the real one, from the moment it starts.

Only ``time.time`` and ``time.time_ns`` are sped up: what the daemon keeps by the calendar (the state
store's timestamps and the ``state_retention`` cutoff, the demand history's minutes, spend since
00:00 UTC, the audit events' timestamps) lives SPEED times faster, while every interval and deadline
(``time.monotonic``, asyncio's loop clock, gRPC's own deadlines, APScheduler's ``datetime`` triggers)
stays real. With a fleet tick every 0.05 s and SPEED 1200, one fleet tick is one minute of the
calendar: a day of ticks and of history in 72 s. Nothing in the daemon knows."""
from __future__ import annotations

import runpy
import sys
import time


def speed_up(speed: float) -> None:
    """``time.time`` and ``time.time_ns`` run ``speed`` times as fast from now on."""
    real, start = time.time, time.time()

    def fast() -> float:
        return start + (real() - start) * speed

    def fast_ns() -> int:
        return int(fast() * 1e9)

    time.time = fast            # type: ignore[assignment]
    time.time_ns = fast_ns      # type: ignore[assignment]


def main() -> None:
    if len(sys.argv) < 3:
        print("usage: python -m bench.soak.wallclock SPEED COSTSCALE-ARGS...", file=sys.stderr)
        raise SystemExit(2)
    speed_up(float(sys.argv[1]))
    sys.argv = ["costscale", *sys.argv[2:]]
    runpy.run_module("daemon.cli", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
