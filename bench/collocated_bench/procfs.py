"""Reading /proc (Linux): the process tree with each process's CPU ticks,
`Key: N kB` fields of status-like files, and the shared-memory objects a
process maps. A process that vanishes mid-read is skipped, never an error."""

from __future__ import annotations

import os
from typing import Dict, List

SHM_PREFIXES = ("/memfd:", "/dev/shm/", "/SYSV")


def proc_table() -> Dict[int, List[int]]:
    """pid -> [ppid, utime+stime+cutime+cstime in ticks]."""
    table = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                rest = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        table[int(d)] = [int(rest[1]), sum(int(x) for x in rest[11:15])]
    return table


def descendants(table: Dict[int, List[int]], root: int) -> List[int]:
    """Every process under `root` in `table` (children, grandchildren, ...)."""
    children: Dict[int, List[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = [], [root]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def read_kb(path: str, keys) -> Dict[str, int]:
    """The `keys` found in a `Key: N kB` file (/proc/PID/status, smaps_rollup,
    /proc/meminfo), in kB; none if it cannot be read."""
    out = {}
    try:
        with open(path) as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in keys:
                    out[k] = int(v.split()[0])
    except (OSError, ValueError, IndexError):
        pass
    return out


def shm_objects(pid: int, into: Dict[tuple, int]) -> None:
    """Adds the shared-memory objects `pid` maps (memfds, /dev/shm files,
    SysV segments) to `into`: (device, inode) -> bytes mapped (the largest
    extent seen), so that an object mapped by many processes counts once."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            for line in f:
                parts = line.split(None, 5)
                if len(parts) < 6 or parts[1][3] != "s" or not parts[5].startswith(SHM_PREFIXES):
                    continue
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                key = (parts[3], parts[4])
                into[key] = max(into.get(key, 0), int(parts[2], 16) + hi - lo)
    except (OSError, ValueError, IndexError):
        pass
