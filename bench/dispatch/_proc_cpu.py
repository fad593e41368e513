"""A process's CPU time (user + system, seconds), for the benchmarks that say where the cores went:
psutil's ``cpu_times`` where psutil is installed, else ``/proc/PID/stat`` (``utime`` and ``stime``,
fields 14 and 15, in clock ticks; proc(5))."""
from __future__ import annotations

import os
from pathlib import Path

try:
    import psutil
except ImportError:   # not a dependency of costscale: /proc is enough on Linux
    psutil = None

#: clock ticks per second, the unit of /proc/PID/stat's times
_TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) that process ``pid`` has used so far."""
    if psutil is not None:
        t = psutil.Process(pid).cpu_times()
        return float(t.user + t.system)
    return cpu_s_from_stat(Path(f"/proc/{pid}/stat").read_text())


def cpu_s_from_stat(stat: str, ticks: int = _TICKS) -> float:
    """``utime + stime`` of a ``/proc/PID/stat`` line, in seconds. The command name (field 2, in
    parentheses) may hold spaces and parentheses itself: the fields are counted from its last ")"."""
    fields = stat[stat.rindex(")") + 2:].split()   # fields[0] is field 3 (state)
    return (int(fields[11]) + int(fields[12])) / ticks


def machine_cpu_s() -> tuple[float, float]:
    """CPU seconds the whole machine has spent busy (user, nice, system, irq, softirq; every
    process, ours and others) and stolen by the hypervisor (steal), summed over its cores, from
    the first line of ``/proc/stat`` (proc(5))."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq) / _TICKS, steal / _TICKS
