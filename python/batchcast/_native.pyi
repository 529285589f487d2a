"""Type stubs of the batchcast._native extension module (private API: use
batchcast.Producer and batchcast.Consumer)."""

import os
from collections.abc import Callable, Sequence
from typing import Any, final

__all__ = [
    "__version__",
    "PROTOCOL_VERSION",
    "LEAF_ARRAY",
    "LEAF_INTS",
    "LEAF_FLOATS",
    "LEAF_STRS",
    "Producer",
    "Consumer",
    "ArrayView",
    "Released",
    "Augmenter",
    "Selection",
    "store_image",
    "serve",
    "trainers_from_env",
    "ServeRule",
    "Process",
    "tree_cpu_seconds",
    "machine_busy_seconds",
    "proc_table",
    "descendants",
    "clock_ticks",
    "BatchcastError",
    "ProducerGone",
    "ProducerNotFound",
    "NameInUse",
    "JoinRefused",
    "BatchTooLarge",
    "OutOfSharedMemory",
    "NoConsumers",
    "ProtocolError",
    "ProducerFinished",
    "InvalidArgument",
    "InvalidBatch",
    "PermissionDenied",
    "UsageError",
    "IoError",
    "FellBehind",
]

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
    pid: int | None

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

    exit_code: int  # only from serve(): 2 for flags it cannot parse, 0 for --help

class InvalidBatch(BatchcastError, ValueError):
    """A batch that breaks the rules (ragged rows, no rows, too deep)."""

class PermissionDenied(BatchcastError, PermissionError):
    """The socket directory or the peer belongs to another user (the
    producer runs as another user)."""

    path: str | None

class UsageError(BatchcastError, RuntimeError):
    """A call out of order, or on a closed object."""

class IoError(BatchcastError, OSError):
    """An operating-system call failed."""

@final
class ArrayView:
    """An array of a received batch; crosses into torch or NumPy through
    DLPack (``torch.from_dlpack(view)``, ``numpy.from_dlpack(view)``)."""

    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def dtype(self) -> str: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def zero_copy(self) -> bool: ...
    @property
    def on_device(self) -> bool: ...
    def __dlpack__(
        self,
        *,
        stream: Any = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any: ...
    def __dlpack_device__(self) -> tuple[int, int]: ...

@final
class Released:
    """The leases of device tensors freed since a ``take_released()``:
    dropping it (or ``release()``) gives them back."""

    def __len__(self) -> int: ...
    def release(self) -> None: ...

_Spec = Any
_Leaf = tuple[int, Any]

@final
class Producer:
    def __new__(
        cls,
        name: str,
        *,
        window: int = 8,
        slot_size: int | None = None,
        samples_per_epoch: int | None = None,
        batch_size: int | None = None,
        wait_for_consumers: bool = True,
        idle_timeout: float | None = None,
        dir: str | os.PathLike | None = None,
        max_lag: int | str | None = None,
        lag_policy: str = "wait",
        stall_timeout: float = 10.0,
        durable: str | None = None,
        fresh: bool = False,
        device: str | None = None,
    ) -> Producer: ...
    @property
    def devices(self) -> list[dict]: ...
    @property
    def resumed(self) -> tuple[int, int, int, str | None] | None:
        """`(epoch, row, consumers, payload)` of the stream resumed from the
        state file; None when it started afresh."""
        ...
    def set_resume_payload(self, payload: str) -> None: ...
    @property
    def name(self) -> str: ...
    @property
    def socket_path(self) -> os.PathLike[str]: ...
    @property
    def slot_size(self) -> int | None: ...
    @property
    def consumers(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    def set_samples_per_epoch(self, samples: int | None) -> None: ...
    def set_metadata(self, json: str) -> None: ...
    def wait_for_consumers(self, n: int, timeout: float | None = None) -> bool: ...
    def wait_for_start(self, asked: int, trainers: int, timeout: float | None = None) -> None:
        """Waits for the larger of `asked` consumers and the runner's
        `trainers` before the first epoch; NoConsumers if too few came
        within `timeout` seconds (None: until interrupted)."""
        ...
    def begin_epoch(self) -> int: ...
    def publish(self, tree: _Spec, leaves: list[_Leaf]) -> int: ...
    def end_epoch(self) -> tuple[int, int, int]: ...
    def finish(self, reason: str = "finished", message: str | None = None) -> None: ...
    def close(self) -> None: ...
    def status(self) -> dict[str, Any]: ...

@final
class Consumer:
    def __new__(
        cls,
        name: str,
        *,
        batch_size: int | None = None,
        drop_last: bool = False,
        join: str = "catch-up",
        connect_timeout: float | None = None,
        label: str = ...,  # "": no label (the runtime's signature shows no default)
        dir: str | os.PathLike | None = None,
        copy_on_write: bool = True,
        on_evict: str = "error",
        reconnect_timeout: float = 300.0,
        start: tuple[int, int] | None = None,
        deferred: bool = False,
    ) -> Consumer: ...
    def start_at(self, start: tuple[int, int] | None = None) -> None: ...
    def identity_differences(self, saved: str) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def closed(self) -> bool: ...
    def welcome(self) -> dict[str, Any]: ...
    def batches_per_epoch(self) -> int | None: ...
    def next_event(self) -> tuple[Any, ...]: ...
    def next_event_or_released(self) -> tuple[Any, ...] | None: ...
    def poll_event(self) -> tuple[Any, ...] | None: ...
    def wait_event(self) -> tuple[Any, ...]: ...
    def stats(self) -> dict[str, Any]: ...
    def attach_device(self, device: str, access: str = "read-only") -> dict[str, Any]: ...
    def take_released(self) -> Released | None: ...
    def close(self) -> None: ...

@final
class Augmenter:
    """A consumer's own augmentation of a decoded stream, on native threads
    (see batchcast.transforms)."""

    def __new__(
        cls,
        size: int,
        *,
        scale: tuple[float, float] = ...,  # (0.08, 1.0)
        ratio: tuple[float, float] = ...,  # (0.75, 4 / 3)
        hflip_p: float = 0.5,
        layout: str = "nchw",
        mean: tuple[float, float, float] | None = None,
        std: tuple[float, float, float] | None = None,
        threads: int = 2,
        seed: int = 0,
        jitter: tuple[tuple[float, float] | None, ...] | None = None,
        auto: str | None = None,
        num_ops: int = 2,
        magnitude: int = 9,
        num_magnitude_bins: int = 31,
        resize: int | None = None,
    ) -> Augmenter: ...
    def image_shape(self) -> tuple[int, int, int]: ...
    def augment(self, images: Any, epoch: int, first_key: int, out: Any) -> None: ...
    def augment_pooled(self, images: Any, epoch: int, first_key: int) -> ArrayView: ...
    def draws(self, epoch: int, key: int) -> list[tuple[str, float]]: ...
    @staticmethod
    def apply_op(name: str, image: Any, magnitude: float = ...) -> None: ...

@final
class Selection:
    """The selection of ``batchcast serve --select`` over a map-style
    dataset (see batchcast.SelectSampler)."""

    def __new__(
        cls,
        spec: str,
        *,
        labels: Sequence[int] | None = None,
        n: int | None = None,
        seed: int = 0,
        shuffle: bool = True,
        scores: Sequence[float] | None = None,
    ) -> Selection: ...
    @property
    def count(self) -> int: ...
    @property
    def len(self) -> int: ...
    @property
    def has_weights(self) -> bool: ...
    def weight(self, index: int) -> float: ...
    def weights(self) -> list[float]: ...
    def order(self, epoch: int) -> list[int]: ...

def store_image(image: Any, size: int, out: Any) -> None: ...
def serve(args: list[str], events: Callable[[str], None] | None = None) -> str:
    """`batchcast serve ARGS` in this process; returns the summary as JSON
    text (epochs, batches, samples, seconds, interrupted, idle). Bad flags
    and --help raise InvalidArgument with `.exit_code`."""
    ...

def trainers_from_env() -> int:
    """The trainers `batchcast run` announced in BATCHCAST_CONSUMERS (0:
    none); InvalidArgument when it is not a whole number."""
    ...

@final
class ServeRule:
    """When serving ends: the core's rule, which `batchcast serve` follows."""

    def __new__(cls, epochs: int | None = None, *, forever: bool = False) -> ServeRule: ...
    @property
    def forever(self) -> bool: ...
    def wants_epoch(self, done: int) -> bool: ...
    def after_no_consumers(self, served: int) -> str: ...

@final
class Process:
    """A command in its own process group: watched, stopped as a group
    (SIGTERM, then SIGKILL after a grace), its output captured with a
    bounded tail. Streams: "null", "inherit", "pipe" (take its fd),
    "capture" (kept for tail()) or "log" (the file at `log`)."""

    def __new__(
        cls,
        argv: list[str],
        env: dict[str, str] | None = None,
        *,
        stdin_pipe: bool = False,
        stdout: str = "null",
        stderr: str = "null",
        log: str | os.PathLike[str] | None = None,
        cpus: list[int] | None = None,
        watcher: bool = False,
        kill_group_on_exit: bool = False,
        tail_bytes: int = 16384,
    ) -> Process: ...
    @property
    def pid(self) -> int: ...
    @property
    def returncode(self) -> int | None: ...
    def poll(self) -> int | None: ...
    def wait(self, timeout: float | None = None) -> int | None: ...
    def stop(self, grace: float) -> bool: ...
    def kill(self) -> None: ...
    def signal(self, signum: int) -> None: ...
    def take_stdin(self) -> int | None: ...
    def take_stdout(self) -> int | None: ...
    def take_stderr(self) -> int | None: ...
    def tail(self, lines: int = 15) -> str: ...
    def usage(self) -> tuple[float, int] | None: ...

def tree_cpu_seconds() -> float: ...
def machine_busy_seconds() -> float: ...
def proc_table() -> dict[int, tuple[int, int, int]]: ...
def descendants(root: int) -> list[int]: ...
def clock_ticks() -> float: ...
