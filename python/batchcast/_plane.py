"""Which path a GPU consumer's batches take: the producer's device slots,
or the host arena with the consumer's own copy.

A producer started with ``device="cuda:N"`` mirrors its whole arena into
that GPU's memory (slot ``i`` at the same offset) and publishes a slot only
once its copy there has completed. A consumer on a served GPU maps that
mirror read-only once and reads each batch there (the *device plane*):

* ``copy_on_write=True`` (the default): each array that lies in one slot is
  cloned on the device (a device-to-device copy queued on the current
  stream), so in-place writes (``x.sub_(mean)``) never reach the other
  consumers; the slot stays leased until a fence after the clone has
  completed. ``stats()["device_path"]``: ``"device slots (private copy)"``.
* ``copy_on_write=False``: zero copy: the tensors are the mapped device
  memory (``data_ptr()`` inside the mapping), read-only where the driver
  enforces it (``stats()["device_slots"]["read_only_enforced"]``), where an
  in-place write faults: the opt-in for code that never writes its inputs
  in place. A freed tensor's slot goes back only once a fence recorded on
  the consumer's current stream at its next ``next()`` has completed, so
  work on a batch must be queued on the consumer's current stream (or the
  user synchronises) before the tensor is dropped. ``"device slots (zero
  copy)"``.

Batches assembled from several slots (a batch size that spans producer
batches) are host memory and go to the device through the consumer's own
copy on both planes. Anything else takes the host path of a CPU producer,
with one warning naming the reason (``stats()["device_path_reason"]``): the
producer serves no GPU or not this one, a backend or driver error, MIG,
``transform=`` (per-consumer augmentation runs on the CPU), or a format
other than ``"torch"``.
"""

from __future__ import annotations

import warnings
from typing import Any, NamedTuple

__all__ = ["HOST", "PRIVATE", "ZERO_COPY", "DevicePath", "choose"]

ZERO_COPY = "device slots (zero copy)"
PRIVATE = "device slots (private copy)"
HOST = "host copy"


class DevicePath(NamedTuple):
    """How a consumer's batches reach its device."""

    #: ZERO_COPY, PRIVATE or HOST; None for a consumer on the CPU.
    path: str | None
    #: Why HOST (None otherwise).
    reason: str | None
    #: The mapped mirror on the device plane (``uuid``, ``ordinal``,
    #: ``addr``, ``len``, ``read_only_enforced``, ``backend``).
    slots: dict | None
    #: True when the device is the stand-in (``BATCHCAST_DEVICE_STAND_IN``).
    stand_in: bool = False

    @property
    def on_device(self) -> bool:
        return self.path in (ZERO_COPY, PRIVATE)

    def stats(self) -> dict:
        """The keys ``Consumer.stats()`` shows."""
        return {
            "device_path": self.path,
            "device_path_reason": self.reason,
            "device_slots": self.slots,
        }


def _before_connect(fmt: str, transform: Any) -> str | None:
    """Why the device plane cannot apply whatever the producer serves."""
    if transform is not None:
        return "transform= is given: this consumer's own augmentation runs on the CPU"
    if fmt != "torch":
        return f'format={fmt!r}: only format="torch" receives device tensors'
    return None


def choose(
    native: Any, target: Any, fmt: str, transform: Any, copy_on_write: bool, name: str
) -> DevicePath:
    """Decides the path of a connected consumer moving batches to
    ``target`` (a :class:`batchcast._device.Device`, None on the CPU), and
    warns once when it falls back to the host copy."""
    if target is None:
        return DevicePath(None, None, None)
    gpu = getattr(target, "gpu", None)
    stand_in = bool(getattr(target, "stand_in", False))
    if gpu is None:  # a device of the caller's that no mirror can serve
        return DevicePath(HOST, "the device is not a GPU", None, stand_in)
    reason = _before_connect(fmt, transform)
    slots = None
    if reason is None:
        found = native.attach_device(gpu, "read-only")
        reason, slots = found["reason"], found["slots"]
    if reason is not None:
        warnings.warn(
            f"batchcast.Consumer({name!r}, device={gpu!r}) copies each batch to the GPU "
            f"itself (the host path), not from the producer's device slots: {reason}",
            RuntimeWarning,
            stacklevel=3,
        )
        return DevicePath(HOST, reason, None, stand_in)
    return DevicePath(ZERO_COPY if not copy_on_write else PRIVATE, None, slots, stand_in)
