"""Whether a process runs on this host: the cluster lease's check for a crashed holder on this
host (``scaler.replicas.lease_holder``) and the local runner's check for its worker processes
(``daemon.local.runner``)."""
from __future__ import annotations

import os


def pid_alive(pid: int, *, zombie_alive: bool = True) -> bool:
    """Whether a process with this pid exists on this host (another user's counts). With
    ``zombie_alive`` False an exited child not yet reaped (state Z in ``/proc/PID/stat``) counts as
    gone, and so does a pid whose stat cannot be read."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if zombie_alive:
        return True
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except OSError:
        return False


def pid_running(pid: int) -> bool:
    """A process with this pid still runs here: exists and has not exited (an exited child its parent has
    not reaped yet, a zombie, acts no more: it holds no socket, no lease, serves no query)."""
    return pid_alive(pid, zombie_alive=False)

