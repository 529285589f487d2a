"""``python -m batchcast.serve ARGS``: ``batchcast serve ARGS`` without the
binary: the same flags, lines and behaviour, run by the serve loop of the
Python binding (``batchcast._native.serve``). SIGINT and SIGTERM stop it
cleanly (consumers are told; exit status 0, as the binary's).

From Python, :func:`serve` runs it in the calling process and returns its
summary; ``batchcast.ray`` serves ``serve=[...]`` this way.
"""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Sequence
from typing import Any, Callable

from . import _native

__all__ = ["main", "serve"]


def serve(args: Sequence[str], events: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Runs ``batchcast serve *args`` in this process, the GIL released, and
    returns its summary (``epochs``, ``batches``, ``samples``, ``seconds``,
    ``interrupted``, ``idle``). With ``--json``, each event line goes to
    ``events(line)`` (default: stdout). Ctrl-C stops it cleanly, then
    re-raises :class:`KeyboardInterrupt`; errors raise the
    :class:`batchcast.BatchcastError` subclass that names them."""
    return json.loads(_native.serve([str(a) for a in args], events))


def _stop(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """The command: returns its exit status."""
    args = sys.argv[1:] if argv is None else argv
    signal.signal(signal.SIGTERM, _stop)
    try:
        serve(args)
    except KeyboardInterrupt:
        return 0  # stopped cleanly, and said so, as `batchcast serve` does
    except _native.InvalidArgument as e:
        code = getattr(e, "exit_code", None)
        if code is not None:  # the flags: usage, or --help
            print(e, file=sys.stdout if code == 0 else sys.stderr)
            return int(code)
        print(f"error: {e}", file=sys.stderr)
        return 1
    except _native.BatchcastError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
