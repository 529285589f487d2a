"""The page cache of the dataset's files: find them, evict them, warm them.

Eviction is ``posix_fadvise(POSIX_FADV_DONTNEED)`` after an ``fsync`` (dirty
pages cannot be dropped); whether it worked is checked with a
``preadv(RWF_NOWAIT)``, which fails with EAGAIN when the data is not cached.
Files on tmpfs, or mapped by another process, stay cached: the report says so.
"""

import os
from collections.abc import Iterable
from typing import Optional

MAX_FILES = 2_000_000


def read_opened(path: str) -> list[str]:
    """The data files a marked script opened (see ``_mark._watch_opens``)."""
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            names = {line.rstrip("\n") for line in f if line.strip()}
    except OSError:
        return []
    return sorted(n for n in names if os.path.isfile(n))


def dataset_roots(opened: list[str]) -> list[str]:
    """The directories holding the dataset: the deepest directory common to
    every opened file when it is at least two levels deep, else each file's
    own directory."""
    if not opened:
        return []
    common = os.path.commonpath([os.path.dirname(p) for p in opened])
    if common.count(os.sep) >= 2:
        return [common]
    return sorted({os.path.dirname(p) for p in opened})


def files_under(paths: Iterable[str]) -> list[str]:
    """Every regular file under ``paths`` (files or directories), bounded."""
    out: list[str] = []
    for p in paths:
        if os.path.isfile(p):
            out.append(p)
            continue
        for root, _dirs, names in os.walk(p):
            for n in names:
                full = os.path.join(root, n)
                if os.path.isfile(full) and not os.path.islink(full):
                    out.append(full)
                if len(out) >= MAX_FILES:
                    return out
    return out


def total_bytes(files: list[str]) -> int:
    total = 0
    for f in files:
        try:
            total += os.stat(f).st_size
        except OSError:
            pass
    return total


def evict(files: list[str]) -> tuple[int, Optional[str]]:
    """Drops the files from the page cache; returns (files evicted, a note
    when some could not be)."""
    done = 0
    failed: Optional[str] = None
    for f in files:
        try:
            fd = os.open(f, os.O_RDONLY)
        except OSError as e:
            failed = failed or f"{f}: {e.strerror}"
            continue
        try:
            try:
                os.fsync(fd)
            except OSError:
                pass
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            done += 1
        except OSError as e:
            failed = failed or f"{f}: posix_fadvise: {e.strerror}"
        finally:
            os.close(fd)
    return done, failed


def cached_share(files: list[str], sample: int = 64) -> Optional[float]:
    """Share of (up to ``sample``) files whose first page is in the page
    cache; None when the kernel cannot tell (no RWF_NOWAIT)."""
    flag = getattr(os, "RWF_NOWAIT", None)
    if flag is None or not files:
        return None
    step = max(1, len(files) // sample)
    picked = files[::step][:sample]
    cached = 0
    checked = 0
    buf = bytearray(4096)
    for f in picked:
        try:
            fd = os.open(f, os.O_RDONLY)
        except OSError:
            continue
        try:
            if os.fstat(fd).st_size == 0:
                continue
            checked += 1
            os.preadv(fd, [buf], 0, flag)
            cached += 1
        except BlockingIOError:
            pass
        except OSError:
            return None
        finally:
            os.close(fd)
    return cached / checked if checked else None


def warm(files: list[str]) -> None:
    """Reads every file once so that it is in the page cache."""
    for f in files:
        try:
            with open(f, "rb") as fh:
                while fh.read(1 << 20):
                    pass
        except OSError:
            pass


def available_bytes() -> int:
    """MemAvailable from /proc/meminfo (0 when unknown)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0
