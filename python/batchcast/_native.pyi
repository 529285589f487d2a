"""Type stubs of the batchcast._native extension module (private API: use
batchcast.Producer and batchcast.Consumer)."""

import os
from typing import Any, Dict, List, Optional, Tuple, Union

__version__: str
PROTOCOL_VERSION: int
LEAF_ARRAY: int
LEAF_INTS: int
LEAF_FLOATS: int
LEAF_STRS: int

class BatchcastError(Exception):
    """Base class of every batchcast error."""

class ProducerGone(BatchcastError):
    """The producer was killed or crashed (its connection closed without a
    shutdown message)."""

    name: str

class ProducerNotFound(BatchcastError):
    """No producer of that name is running."""

    name: str
    socket: str

class NameInUse(BatchcastError):
    """A live producer already holds the name."""

    name: str
    pid: Optional[int]

class JoinRefused(BatchcastError):
    """The producer refused this consumer."""

    name: str
    reason: str

class BatchTooLarge(BatchcastError):
    """A batch does not fit in a slot."""

    needed: int
    slot_size: int

class OutOfSharedMemory(BatchcastError):
    """Not enough memory for the arena."""

    needed: int

class NoConsumers(BatchcastError, TimeoutError):
    """No consumer attached within idle_timeout."""

class ProtocolError(BatchcastError):
    """The peer broke the protocol or speaks another version."""

class ProducerFinished(BatchcastError):
    """The producer has stopped (all epochs served, interrupted, or its
    loader failed)."""

    name: str
    reason: str

class FellBehind(BatchcastError):
    """The producer evicted this consumer for falling behind (lag_policy="evict")."""

    name: str
    epoch: int
    behind: int
    budget: int

class InvalidArgument(BatchcastError, ValueError):
    """An argument out of range or malformed."""

class InvalidBatch(BatchcastError, ValueError):
    """A batch that breaks the rules (ragged rows, no rows, too deep)."""

class PermissionDenied(BatchcastError, PermissionError):
    """The socket directory or the peer belongs to another user (the
    producer runs as another user)."""

    path: Optional[str]

class UsageError(BatchcastError, RuntimeError):
    """A call out of order, or on a closed object."""

class IoError(BatchcastError, OSError):
    """An operating-system call failed."""

class ArrayView:
    """An array of a received batch; crosses into torch or NumPy through
    DLPack (``torch.from_dlpack(view)``, ``numpy.from_dlpack(view)``)."""

    @property
    def shape(self) -> Tuple[int, ...]: ...
    @property
    def dtype(self) -> str: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def zero_copy(self) -> bool: ...
    def __dlpack__(
        self,
        *,
        stream: Any = None,
        max_version: Optional[Tuple[int, int]] = None,
        dl_device: Optional[Tuple[int, int]] = None,
        copy: Optional[bool] = None,
    ) -> Any: ...
    def __dlpack_device__(self) -> Tuple[int, int]: ...

Spec = Any
Leaf = Tuple[int, Any]

class Producer:
    def __init__(
        self,
        name: str,
        *,
        window: int = 8,
        slot_size: Optional[int] = None,
        samples_per_epoch: Optional[int] = None,
        batch_size: Optional[int] = None,
        wait_for_consumers: bool = True,
        idle_timeout: Optional[float] = None,
        dir: Union[str, os.PathLike, None] = None,
        max_lag: Union[int, str, None] = None,
        lag_policy: str = "wait",
        stall_timeout: float = 10.0,
    ) -> None: ...
    @property
    def name(self) -> str: ...
    @property
    def socket_path(self) -> "os.PathLike[str]": ...
    @property
    def slot_size(self) -> Optional[int]: ...
    @property
    def consumers(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    def set_samples_per_epoch(self, samples: Optional[int]) -> None: ...
    def set_metadata(self, json: str) -> None: ...
    def wait_for_consumers(self, n: int, timeout: Optional[float] = None) -> bool: ...
    def begin_epoch(self) -> int: ...
    def publish(self, tree: Spec, leaves: List[Leaf]) -> int: ...
    def end_epoch(self) -> Tuple[int, int, int]: ...
    def finish(self, reason: str = "finished", message: Optional[str] = None) -> None: ...
    def close(self) -> None: ...
    def status(self) -> Dict[str, Any]: ...

class Consumer:
    def __init__(
        self,
        name: str,
        *,
        batch_size: Optional[int] = None,
        drop_last: bool = False,
        join: str = "catch-up",
        connect_timeout: Optional[float] = None,
        label: str = "",
        dir: Union[str, os.PathLike, None] = None,
        copy_on_write: bool = True,
        on_evict: str = "error",
    ) -> None: ...
    @property
    def name(self) -> str: ...
    @property
    def closed(self) -> bool: ...
    def welcome(self) -> Dict[str, Any]: ...
    def batches_per_epoch(self) -> Optional[int]: ...
    def next_event(self) -> Tuple[Any, ...]: ...
    def poll_event(self) -> Optional[Tuple[Any, ...]]: ...
    def wait_event(self) -> Tuple[Any, ...]: ...
    def stats(self) -> Dict[str, Any]: ...
    def close(self) -> None: ...

class Augmenter:
    """A consumer's own augmentation of a decoded stream, on native threads
    (see batchcast.transforms)."""

    def __init__(
        self,
        size: int,
        *,
        scale: tuple[float, float] = ...,
        ratio: tuple[float, float] = ...,
        hflip_p: float = ...,
        layout: str = ...,
        mean: Optional[tuple[float, float, float]] = ...,
        std: Optional[tuple[float, float, float]] = ...,
        threads: int = ...,
        seed: int = ...,
        jitter: Optional[tuple[Optional[tuple[float, float]], ...]] = ...,
        auto: Optional[str] = ...,
        num_ops: int = ...,
        magnitude: int = ...,
        num_magnitude_bins: int = ...,
        resize: Optional[int] = ...,
    ) -> None: ...
    def image_shape(self) -> tuple[int, int, int]: ...
    def augment(self, images: Any, epoch: int, first_key: int, out: Any) -> None: ...
    def augment_pooled(self, images: Any, epoch: int, first_key: int) -> ArrayView: ...
    def draws(self, epoch: int, key: int) -> list[tuple[str, float]]: ...
    @staticmethod
    def apply_op(name: str, image: Any, magnitude: float = ...) -> None: ...

def store_image(image: Any, size: int, out: Any) -> None: ...

class Process:
    """A command in its own process group: watched, stopped as a group
    (SIGTERM, then SIGKILL after a grace), its output captured with a
    bounded tail. Streams: "null", "inherit", "pipe" (take its fd),
    "capture" (kept for tail()) or "log" (the file at `log`)."""

    def __init__(
        self,
        argv: List[str],
        env: Optional[Dict[str, str]] = ...,
        *,
        stdin_pipe: bool = ...,
        stdout: str = ...,
        stderr: str = ...,
        log: Optional[Union[str, os.PathLike[str]]] = ...,
        cpus: Optional[List[int]] = ...,
        watcher: bool = ...,
        kill_group_on_exit: bool = ...,
        tail_bytes: int = ...,
    ) -> None: ...
    @property
    def pid(self) -> int: ...
    @property
    def returncode(self) -> Optional[int]: ...
    def poll(self) -> Optional[int]: ...
    def wait(self, timeout: Optional[float] = ...) -> Optional[int]: ...
    def stop(self, grace: float) -> bool: ...
    def kill(self) -> None: ...
    def signal(self, signum: int) -> None: ...
    def take_stdin(self) -> Optional[int]: ...
    def take_stdout(self) -> Optional[int]: ...
    def take_stderr(self) -> Optional[int]: ...
    def tail(self, lines: int = ...) -> str: ...
    def usage(self) -> Optional[Tuple[float, int]]: ...

def tree_cpu_seconds() -> float: ...
def machine_busy_seconds() -> float: ...
def proc_table() -> Dict[int, Tuple[int, int, int]]: ...
def descendants(root: int) -> List[int]: ...
def clock_ticks() -> float: ...
