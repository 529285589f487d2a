"""``mark(loader)``: a pass-through in normal runs, the probe under ``batchcast stalls``."""

import json
import os
import sys
import threading
from collections.abc import Iterator
from typing import Any, Optional

from . import _protocol
from ._recorder import Recorder, now


def mark(loader: Any, *, batch_size: Optional[int] = None) -> Any:
    """Marks the training loader for ``batchcast stalls``.

    In a normal run this returns ``loader`` itself. Under ``batchcast stalls``
    it returns a wrapper with the same ``len()`` that times each step's data
    wait, stops the script after the warm-up and the measured steps, and, in
    the synthetic mode, hands out the loader's first batch over and over.
    In the loader mode it never returns: it iterates the loader itself,
    with no training step, and ends the script.
    ``loader`` may be a DataLoader, a :class:`batchcast.Consumer` or any
    iterable; ``batch_size`` is needed only for the shared pipeline of
    ``--validate`` when the loader has no ``batch_size`` attribute.
    """
    config = _protocol.Config.from_env()
    if config is None:
        return loader
    info: dict[str, Any] = {
        "pid": os.getpid(),
        "num_workers": int(getattr(loader, "num_workers", 0) or 0),
        "batch_size": batch_size or getattr(loader, "batch_size", None),
        "loader": type(loader).__name__,
        "cpus": len(os.sched_getaffinity(0)),
    }
    try:
        info["len"] = len(loader)
    except TypeError:
        info["len"] = None
    marked = os.path.join(config.out, _protocol.MARKED_FILE.format(pid=os.getpid()))
    with open(marked, "w") as f:
        json.dump(info, f)
    if config.mode in ("synthetic", "cold", "warm"):
        _watch_opens(os.path.join(config.out, _protocol.OPENED_FILE), config.out)
    if config.mode == "producer":
        _serve(loader, config)
    if config.mode == "loader":
        _drain(loader, Recorder(config, info))
    if config.mode == "consumer":
        from .._consumer import Consumer

        size = info["batch_size"]
        inner = Consumer(config.shared, batch_size=size, connect_timeout=60)
        return Marked(
            inner, Recorder(config, info, backlog=lambda: _available(inner)), synthetic=False
        )
    return Marked(loader, Recorder(config, info), synthetic=config.mode == "synthetic")


def _available(consumer: Any) -> int:
    """Batches a shared reader can take without waiting: published and not
    read yet, plus the one it holds ready."""
    s = consumer.stats()
    return int(s["behind"]) + int(s["lag"])


def _drain(loader: Any, recorder: Recorder) -> None:
    """The ``loader`` mode: iterates the loader epoch after epoch with no
    training step, as a shared producer does, until the recorder has its
    steps and ends the script."""
    marked = Marked(loader, recorder, synthetic=False)
    while True:
        batches = 0
        for _ in marked:
            batches += 1
        if batches == 0:
            raise SystemExit(
                "batchcast stalls: the loader yielded no batch in an epoch (is it empty?)"
            )


def _serve(loader: Any, config: "_protocol.Config") -> None:
    """The shared producer of ``--validate``: serve, then end the script."""
    from .._consumer import Consumer
    from .._producer import Producer

    if isinstance(loader, Consumer):
        raise SystemExit(
            "batchcast stalls: this script already reads a shared producer (a Consumer)"
        )
    if config.shared is None:
        raise SystemExit(
            f"batchcast stalls: the producer mode needs {_protocol.SHARED} or BATCHCAST_NAME"
            " (the producer's name); "
            "run the script under `batchcast stalls --validate`, which sets it"
        )
    with Producer(loader, name=config.shared, window=_protocol.SHARED_WINDOW) as producer:
        producer.run()
    raise SystemExit(0)


class Marked:
    """The loader as the training loop sees it under ``batchcast stalls``."""

    def __init__(self, inner: Any, recorder: Recorder, synthetic: bool) -> None:
        self._inner = inner
        self._rec = recorder
        self._synthetic = synthetic
        self._batch: Any = None
        self._have_batch = False

    def __len__(self) -> int:
        return len(self._inner)

    def __getattr__(self, name: str) -> Any:
        # Everything else (dataset, batch_size, sampler...) is the loader's.
        return getattr(self._inner, name)

    def _repeat(self) -> Iterator[Any]:
        if not self._have_batch:
            it = iter(self._inner)
            self._batch = next(it)
            self._have_batch = True
            del it  # shuts the loader's workers down
        try:
            n: Optional[int] = len(self._inner)
        except TypeError:
            n = None
        i = 0
        while n is None or i < n:
            yield self._batch
            i += 1

    def __iter__(self) -> Iterator[Any]:
        it = self._repeat() if self._synthetic else iter(self._inner)
        count = 0
        while True:
            asked = now()
            try:
                batch = next(it)
            except StopIteration:
                self._rec.epochs.append(count)
                return
            count += 1
            self._rec.step(asked, now(), batch)
            yield batch


_SKIP_SUFFIXES = (".py", ".pyc", ".so", ".pyi", ".pth", ".json", ".txt", ".cfg", ".toml")


def _watch_opens(path: str, out: str) -> None:
    """Appends every data file this process (and its forked workers) opens
    for reading to ``path``: the runner evicts or warms them."""
    skip = tuple(
        os.path.realpath(p) + os.sep
        for p in {
            sys.prefix,
            sys.base_prefix,
            sys.exec_prefix,
            out,
            "/proc",
            "/sys",
            "/dev",
            "/usr",
            "/etc",
        }
    )
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    seen = set()
    busy = threading.local()
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND

    def hook(event: str, args: Any) -> None:
        if event != "open" or getattr(busy, "on", False):
            return
        name, mode, flags = (tuple(args) + (None, None, None))[:3]
        if not isinstance(name, str) or name in seen:
            return
        if isinstance(mode, str) and any(c in mode for c in "wax+"):
            return
        if mode is None and isinstance(flags, int) and flags & write_flags:
            return
        busy.on = True
        try:
            seen.add(name)
            full = os.path.realpath(name)
            if full.endswith(_SKIP_SUFFIXES) or full.startswith(skip):
                return
            os.write(fd, (full + "\n").encode("utf-8", "surrogateescape"))
        except OSError:
            pass
        finally:
            busy.on = False

    sys.addaudithook(hook)
