"""``config.pids.pid_alive``: the cluster lease's dead-holder check counts an unreaped child as
alive (as before), the local runner's (``zombie_alive=False``) as gone; a reaped pid is gone."""
from __future__ import annotations

import os
import subprocess
import sys

from config.pids import pid_alive


def test_a_zombie_is_alive_for_the_lease_and_gone_for_the_local_runner() -> None:
    assert pid_alive(os.getpid()) and pid_alive(os.getpid(), zombie_alive=False)
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)    # exited, not reaped: a zombie
    assert pid_alive(child.pid) and not pid_alive(child.pid, zombie_alive=False)
    child.wait()
    assert not pid_alive(child.pid) and not pid_alive(child.pid, zombie_alive=False)
