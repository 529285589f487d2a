"""Files that other processes read while they are written (a job's figures,
a barrier's count, a result), written whole: to a temporary file of this
process (mode 0600 unless the caller asks for another) beside them, then
renamed over them, so that a reader sees the old content or the new, never
half of it."""

from __future__ import annotations

import os

__all__ = ["write_whole"]


def write_whole(path: str, text: str, mode: int = 0o600) -> None:
    """Replaces ``path`` with ``text`` at once; the file has ``mode`` less
    the umask (0600 by default: only this user reads it)."""
    tmp = f"{path}.tmp{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
