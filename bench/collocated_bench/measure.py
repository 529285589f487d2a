"""CPU and memory accounting.

CPU: the runner's getrusage(RUSAGE_CHILDREN) before a cell and after every
process of it has been reaped, less what the processes alive at GO had
already used (their start-up, from /proc). Memory: a sampler thread that
sums every descendant's memory, counting every page once. A child reports
its own CPU and peak RSS too (self_cpu_seconds, self_peak_rss_mb).
"""

from __future__ import annotations

import os
import resource
import threading
import time
from typing import Dict, Optional

from batchcast._native import clock_ticks, descendants, proc_table

CLK_TCK = clock_ticks()
SHM_PREFIXES = ("/memfd:", "/dev/shm/", "/SYSV")

_STATUS_KEYS = ("RssAnon", "RssFile", "RssShmem", "VmHWM")
_ROLLUP_KEYS = ("Pss_Anon", "Pss_File")


def cpu_children() -> float:
    """CPU seconds (user + system) of this process's reaped children."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def descendants_cpu_s() -> float:
    """CPU seconds already used by the live descendants of this process."""
    table = proc_table()
    # Each one's own time and that of the children it has waited for.
    return sum(sum(table[p][1:]) for p in descendants(os.getpid()) if p in table) / CLK_TCK


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


def self_cpu_seconds() -> Dict[str, float]:
    """This process's CPU seconds, and its reaped children's (a child's report)."""
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"self": s.ru_utime + s.ru_stime, "children": c.ru_utime + c.ru_stime}


def self_peak_rss_mb() -> Optional[float]:
    """This process's VmHWM (peak RSS), in MB."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


class MemorySampler(threading.Thread):
    """Samples the memory of every descendant of this process (every
    `interval` s) and keeps the peak of the total, counting every page once:

    - each process's own memory, anonymous + file-backed, as its
      proportional set size (PSS: a page shared by k processes, such as
      libtorch's code or the copy-on-write pages a DataLoader worker shares
      with the process it forked from, counts 1/k in each);
    - shared memory (batchcast's arena, the /dev/shm segments of DataLoader
      workers and TensorSocket) once per object, whoever maps it, at its
      mapped size.

    PSS (smaps_rollup) costs ~10 ms per torch process to read, so it is read
    for a process when first seen, when its RSS has changed by more than a
    fifth, and at least every `pss_every` s; in between, the cheap RSS
    figures of /proc/PID/status are scaled by the last PSS/RSS ratios. The
    total is split into the trainer processes' own memory and the rest
    (loading: producers, DataLoader workers, `batchcast serve`, and all shared
    memory). Also kept: each process's VmHWM (peak RSS), whose plain sum
    counts shared pages once per process that maps them. Processes of the
    measurement itself (`ignored_pids_fn`: the GPU sampler's nvidia-smi) are
    not counted.
    """

    def __init__(self, trainer_pids_fn, interval: float = 0.25, pss_every: float = 2.0,
                 ignored_pids_fn=lambda: ()):
        super().__init__(daemon=True)
        self.trainer_pids_fn = trainer_pids_fn
        self.ignored_pids_fn = ignored_pids_fn
        self.interval, self.pss_every = interval, pss_every
        self.stop_event = threading.Event()
        self.ratios: Dict[int, tuple] = {}
        self.rollup: Dict[int, tuple] = {}  # pid -> (when, rss then)
        self.hwm: Dict[int, int] = {}
        self.peak_total = self.peak_trainers = self.peak_loading = self.peak_shm = 0.0
        self.samples = 0

    def run(self) -> None:
        me = os.getpid()
        while not self.stop_event.is_set():
            try:
                self.sample(me)
            except Exception:  # noqa: BLE001 - a vanished process mid-read
                pass
            self.stop_event.wait(self.interval)
        try:
            self.sample(me)
        except Exception:  # noqa: BLE001
            pass

    def sample(self, me: int) -> None:
        trainers = set(self.trainer_pids_fn())
        ignored = set(self.ignored_pids_fn())
        now = time.monotonic()
        tr = ld = 0.0
        shm: Dict[tuple, int] = {}
        for pid in descendants(me):
            if pid in ignored:
                continue
            st = read_kb(f"/proc/{pid}/status", _STATUS_KEYS)
            if "RssAnon" not in st:
                continue  # a zombie, or gone
            self.hwm[pid] = max(self.hwm.get(pid, 0), st.get("VmHWM", 0))
            rss = st["RssAnon"] + st["RssFile"]
            when, rss_then = self.rollup.get(pid, (-1e9, 0))
            if now - when >= self.pss_every or abs(rss - rss_then) > 0.2 * rss_then:
                ro = read_kb(f"/proc/{pid}/smaps_rollup", _ROLLUP_KEYS)
                if len(ro) == 2:
                    self.ratios[pid] = tuple(min(1.0, ro[p] / st[r]) if st.get(r) else 1.0
                                             for p, r in zip(_ROLLUP_KEYS, ("RssAnon", "RssFile")))
                self.rollup[pid] = (now, rss)
            ra, rf = self.ratios.get(pid, (1.0, 1.0))
            own = st["RssAnon"] * ra + st["RssFile"] * rf
            if pid in trainers:
                tr += own
            else:
                ld += own
            if st.get("RssShmem", 0) > 0:
                shm_objects(pid, shm)
        shm_kb = sum(shm.values()) / 1024
        self.samples += 1
        self.peak_trainers = max(self.peak_trainers, tr)
        self.peak_loading = max(self.peak_loading, ld + shm_kb)
        self.peak_shm = max(self.peak_shm, shm_kb)
        self.peak_total = max(self.peak_total, tr + ld + shm_kb)

    def finish(self) -> Dict[str, float]:
        self.stop_event.set()
        self.join()
        mb = 1 / 1024
        return {"peak_mem_mb": self.peak_total * mb, "mem_trainers_mb": self.peak_trainers * mb,
                "mem_loading_mb": self.peak_loading * mb, "shm_mb": self.peak_shm * mb,
                "sum_peak_rss_mb": sum(self.hwm.values()) * mb, "processes_seen": len(self.hwm),
                "memory_samples": self.samples}
