"""systemd readiness/watchdog notifications (sd_notify(3) protocol), with no dependency.

``notify("READY=1")`` sends one datagram to ``$NOTIFY_SOCKET`` (a filesystem path, or an abstract
socket written with a leading '@'); it returns False, doing nothing, when the variable is unset
(not run by systemd with Type=notify) or the send fails. ``watchdog_interval()`` reads
``WATCHDOG_USEC`` (honouring ``WATCHDOG_PID``) and returns the seconds between required
``WATCHDOG=1`` pings — half the configured timeout, as sd_watchdog_enabled(3) recommends — or None.
"""
from __future__ import annotations

import os
import socket
from typing import Mapping


def _address(raw: str) -> str | bytes | None:
    if not raw:
        return None
    if raw.startswith("@"):
        return b"\0" + raw[1:].encode()
    if raw.startswith("/"):
        return raw
    return None


def notify(state: str, *, env: Mapping[str, str] | None = None) -> bool:
    """Send ``state`` (e.g. "READY=1", "STATUS=…", "WATCHDOG=1", "STOPPING=1") to systemd."""
    e = os.environ if env is None else env
    addr = _address(e.get("NOTIFY_SOCKET", ""))
    if addr is None:
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
            s.connect(addr)
            s.sendall(state.encode())
        return True
    except OSError:
        return False


def watchdog_interval(*, env: Mapping[str, str] | None = None, pid: int | None = None) -> float | None:
    """Seconds between watchdog pings (half of WATCHDOG_USEC), or None when no watchdog is set
    for this process."""
    e = os.environ if env is None else env
    usec = e.get("WATCHDOG_USEC", "")
    if not usec.isdigit() or int(usec) == 0:
        return None
    wpid = e.get("WATCHDOG_PID", "")
    if wpid:
        if not wpid.isdigit() or int(wpid) != (os.getpid() if pid is None else pid):
            return None
    return int(usec) / 2e6
