"""CPU seconds of this process's whole tree (loader workers included).

The tree's CPU is this process's own time, plus the time of children it has
already reaped (``RUSAGE_CHILDREN``: finished DataLoader workers), plus the
time of descendants still alive, read from ``/proc``.
"""

import os
import resource
from typing import Dict, List

_TICK = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0


def _proc_table() -> Dict[int, List[int]]:
    """ppid -> [pid] for every process visible in /proc."""
    children: Dict[int, List[int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return children
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read(4096)
        except OSError:
            continue
        # The command name may hold spaces and parentheses: split after the last ')'.
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) < 2:
            continue
        children.setdefault(int(fields[1]), []).append(int(name))
    return children


def _proc_cpu(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read(4096)
    except OSError:
        return 0.0
    fields = stat[stat.rfind(b")") + 2 :].split()
    # utime and stime are fields 14 and 15 of stat(5); fields[0] is field 3.
    if len(fields) < 13:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK


def tree_cpu_seconds() -> float:
    """CPU seconds used so far by this process and all its descendants."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime
    table = _proc_table()
    stack = list(table.get(os.getpid(), []))
    while stack:
        pid = stack.pop()
        total += _proc_cpu(pid)
        stack.extend(table.get(pid, []))
    return total


def machine_busy_seconds() -> float:
    """CPU seconds all cores of the machine have been busy (``/proc/stat``):
    what other processes use is this minus the tree's own."""
    try:
        with open("/proc/stat", "rb") as f:
            fields = f.readline().split()[1:]
    except OSError:
        return 0.0
    ticks = [int(x) for x in fields[:8]]
    if len(ticks) < 8:
        return 0.0
    user, nice, system, _idle, _iowait, irq, softirq, steal = ticks
    return (user + nice + system + irq + softirq + steal) / _TICK
