"""The arguments of :class:`batchcast.Consumer` that are checked or
resolved before it connects: the producer's name, the batch size, the
format of its batches (and the function that makes them from DLPack
views), and its label."""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any, Callable

from . import _native

__all__ = ["checked_batch_size", "converter", "label_or_script", "producer_name", "resolve_format"]


def producer_name(name: str | None) -> str:
    """``name``, else the one `batchcast run` gives every job of a workload
    with a shared pipeline (``$BATCHCAST_NAME``)."""
    if name is None:
        name = os.environ.get("BATCHCAST_NAME") or None
        if name is None:
            raise _native.InvalidArgument(
                "no producer name: pass Consumer(name=...), or run the script under "
                "`batchcast run` with a Data pipeline (it sets BATCHCAST_NAME)"
            )
    return name


def checked_batch_size(batch_size: Any) -> int | None:
    """``batch_size`` as an int of at least 1, or None (the producer's)."""
    if batch_size is None:
        return None
    if isinstance(batch_size, bool) or not hasattr(batch_size, "__index__"):
        raise TypeError(f"batch_size must be an int or None, not {type(batch_size).__name__}")
    batch_size = batch_size.__index__()
    if batch_size < 1:
        raise _native.InvalidArgument(
            f"batch_size must be at least 1 (or None for the producer's), not {batch_size}"
        )
    return batch_size


def label_or_script(label: str | None) -> str:
    """``label``, else the script's name (cut to the 128 bytes a label may
    have), else ``"python"``."""
    if label is None:
        label = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"
        label = label.encode()[:128].decode(errors="ignore")
    return label


def resolve_format(fmt: str | None, device: str) -> str:
    """The format of the batches: ``fmt``, or torch when it is installed
    (else numpy); refuses one that cannot hold a batch on ``device``."""
    if fmt is None:
        fmt = "torch" if importlib.util.find_spec("torch") is not None else "numpy"
    if fmt not in ("torch", "numpy"):
        raise _native.InvalidArgument(f'format must be "torch", "numpy" or None, not {fmt!r}')
    if fmt == "torch" and importlib.util.find_spec("torch") is None:
        raise _native.InvalidArgument('format="torch" needs PyTorch, which is not installed')
    if fmt == "numpy" and device != "cpu":
        raise _native.InvalidArgument(
            f'format="numpy" gives CPU arrays only; device={device!r} needs format="torch"'
        )
    return fmt


def converter(fmt: str, name: str) -> Callable[[Any], Any]:
    """The function that makes a batch's arrays from its DLPack views: CPU
    torch tensors or read-only NumPy arrays (moves to a device go through
    :class:`batchcast._device.Transfers`). A plain function, not a method: a
    prefetch thread holds it without holding the Consumer."""
    if fmt == "torch":
        import torch

        return torch.from_dlpack
    import numpy

    def to_numpy(view: Any) -> Any:
        if view.dtype == "bf16":
            raise TypeError(
                f'the producer {name!r} sends a bfloat16 array, which NumPy cannot hold; use format="torch"'
            )
        a = numpy.from_dlpack(view)
        a.flags.writeable = False
        return a

    return to_numpy
