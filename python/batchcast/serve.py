"""``python -m batchcast.serve ARGS``: ``batchcast serve ARGS`` without the
binary: the same flags, lines and behaviour, run by the serve loop of the
Python binding (``batchcast._native.serve``). SIGINT and SIGTERM stop it
cleanly (consumers are told; exit status 0, as the binary's).

From Python, :func:`serve` runs it in the calling process and returns its
summary; ``batchcast.ray`` serves ``serve=[...]`` this way.
:func:`serve_folder` is the same with keyword arguments, for a dataset's
folder: ``watch=True`` takes in files added to it at each epoch boundary.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any, Callable

from . import _native

__all__ = ["main", "serve", "serve_folder"]


def serve(args: Sequence[str], events: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Runs ``batchcast serve *args`` in this process, the GIL released, and
    returns its summary (``epochs``, ``batches``, ``samples``, ``seconds``,
    ``interrupted``, ``idle``). With ``--json``, each event line goes to
    ``events(line)`` (default: stdout). Ctrl-C stops it cleanly, then
    re-raises :class:`KeyboardInterrupt`; errors raise the
    :class:`batchcast.BatchcastError` subclass that names them."""
    return json.loads(_native.serve([str(a) for a in args], events))


def _flag(key: str, value: Any) -> list[str]:
    """``key=value`` as ``batchcast serve`` flags: ``--key-name value``,
    ``--key-name`` alone for True, nothing for False or None."""
    flag = "--" + key.replace("_", "-")
    if value is None or value is False:
        return []
    if value is True:
        return [flag]
    if isinstance(value, (str, int, float, os.PathLike)):
        return [flag, os.fspath(value) if isinstance(value, os.PathLike) else str(value)]
    raise TypeError(f"{key}= takes a str, a number or a bool, not {type(value).__name__}")


def serve_folder(
    data: str | os.PathLike[str],
    name: str,
    *,
    watch: bool = False,
    trigger: str | None = None,
    select: str | None = None,
    epochs: int = 1,
    batch_size: int = 64,
    events: Callable[[str], None] | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Serves the image dataset in the folder ``data`` (an ImageFolder tree,
    or a folder of WebDataset ``.tar`` shards) under ``name`` through the
    native pipeline, in this process: :func:`serve` with ``--data data
    --name name`` and a flag per keyword argument. Returns its summary.

    Args:
        watch: take in the files added to the folder (new images in class
            folders, new class folders, new ``.tar`` shards) at each epoch
            boundary, never mid-epoch; consumers' ``len()`` is the grown
            epoch's before it begins (``--watch``). A list of shards that
            grows is a folder of shards: write (or rename) each new shard
            into it.
        trigger: tell every consumer when the new data calls for it
            (``--trigger``: ``"amount=500"``, ``"time=10m"``,
            ``"every-epoch"``, ``"any(...)"``, ``"all(...)"``); consumers
            get :class:`batchcast.Trigger` events.
        select: serve a selection computed once for every consumer
            (``--select``: ``"random:25"``, ``"label-balanced:20"``,
            ``"rs2:25"``, ``"new-data"``, ``"freshness:50"``, ...).
        epochs: epochs to serve; 0 for as long as any consumer reads (with
            ``idle_timeout=``).
        batch_size: rows per producer batch.
        events: with ``json=True``, called with each event line (default:
            stdout).
        options: any other flag of ``batchcast serve``, named with ``_``
            for ``-``: ``decode_only=True``, ``store_size=256``,
            ``consumers=2``, ``idle_timeout=30``, ``seed=3``, ``workers=4``,
            ``json=True``, ...

    The flags are parsed by ``batchcast serve``'s own definitions: a value
    it refuses raises :class:`batchcast.InvalidArgument` with its message
    (which names the flag, ``--trigger`` for ``trigger=``).
    """
    if not isinstance(data, (str, os.PathLike)):
        raise TypeError(
            f"serve_folder(data=) is a folder (an ImageFolder tree or a folder of .tar shards), "
            f"not a {type(data).__name__}; to serve a list of shards that grows, write each "
            f"shard into one folder and pass that folder with watch=True"
        )
    args = ["--data", os.fspath(data), "--name", str(name)]
    given = dict(
        options, watch=watch, trigger=trigger, select=select, epochs=epochs, batch_size=batch_size
    )
    for key, value in given.items():
        args.extend(_flag(key, value))
    return serve(args, events)


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
