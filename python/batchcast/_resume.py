"""How a durable :class:`batchcast.Producer` resumes its loader mid-epoch.

The core keeps the state file and its resume point: epoch E, row R, the
rows every consumer has received. A restarted producer publishes epoch E
from row R on, and its loader must give exactly those rows:

- ``stateful``: a loader with ``state_dict()`` / ``load_state_dict()``
  (torchdata's ``StatefulDataLoader``) is restored from the state it had
  at the resume point; its state after each batch and at each epoch's end
  is noted in the state file as JSON (tensors as tagged base64; anything
  else that JSON cannot hold is refused, never pickled).
- ``sampler``: a ``torch.utils.data.DataLoader`` over a map-style dataset
  whose sampler is sequential, or random with ``seed=`` given: the
  producer owns each epoch's order (the sampler's generator is seeded from
  (seed, epoch)) and resumes by dropping the order's first R indices,
  without loading their samples.
- ``epoch``: any other loader resumes at the next epoch's start, with a
  warning that says why.

With ``seed=``, a sampler that has a ``generator`` (``RandomSampler``,
torchdata's) draws each epoch's order from (seed, epoch), durable or not.
"""

from __future__ import annotations

import base64
import itertools
import json
import logging
import math
import warnings
from collections.abc import Iterator
from typing import Any

from . import _native
from ._modules import types_of

__all__ = ["Resume", "decode_state", "encode_state"]

_log = logging.getLogger("batchcast")

#: Kinds of resumption, by what the loader allows.
STATEFUL, SAMPLER, EPOCH = "stateful", "sampler", "epoch"


def _qualname(t: type) -> str:
    return f"{t.__module__}.{t.__qualname__}"


def _mix(seed: int, epoch: int) -> int:
    """A 63-bit generator seed from (seed, epoch) (SplitMix64's finaliser)."""
    z = (seed * 0x9E3779B97F4A7C15 + epoch + 1) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return (z ^ (z >> 31)) & 0x7FFFFFFFFFFFFFFF


class _Skip:
    """A sampler without the first ``rows`` indices of ``inner``'s order."""

    def __init__(self, inner: Any, rows: int) -> None:
        self.inner = inner
        self.rows = rows

    def __iter__(self) -> Iterator[Any]:
        return itertools.islice(iter(self.inner), self.rows, None)

    def __len__(self) -> int:
        return max(0, len(self.inner) - self.rows)


class Resume:
    """How one loader is iterated per epoch, and resumed."""

    def __init__(self, loader: Any, seed: int | None, batch_size: int | None) -> None:
        self._loader = loader
        self._seed = seed
        self._batch_size = batch_size
        self.kind, self.why = self._choose()
        #: The epoch the sampler's generator was last seeded for.
        self._seeded: int | None = None

    def _choose(self) -> tuple[str, str]:
        loader = self._loader
        if callable(getattr(loader, "state_dict", None)) and callable(
            getattr(loader, "load_state_dict", None)
        ):
            return STATEFUL, ""
        if not isinstance(loader, types_of("torch.utils.data", "DataLoader")):
            return EPOCH, (
                f"the loader ({_qualname(type(loader))}) is not a torch DataLoader over a "
                "map-style dataset and has no state_dict()/load_state_dict()"
            )
        if isinstance(loader.dataset, types_of("torch.utils.data", "IterableDataset")):
            return EPOCH, "its DataLoader wraps an IterableDataset, whose rows cannot be skipped"
        bsampler = loader.batch_sampler
        if type(bsampler) not in types_of("torch.utils.data", "BatchSampler"):
            return EPOCH, (
                "its DataLoader has a batch_sampler of its own "
                f"({_qualname(type(bsampler))}), whose order batchcast cannot skip into"
            )
        sampler = bsampler.sampler
        if type(sampler) in types_of("torch.utils.data", "SequentialSampler"):
            return SAMPLER, ""
        if type(sampler) in types_of("torch.utils.data", "RandomSampler"):
            if self._seed is None:
                return EPOCH, (
                    "its DataLoader shuffles without seed=: pass seed= so that the producer "
                    "draws each epoch's order from (seed, epoch) and can replay it"
                )
            return SAMPLER, ""
        return EPOCH, (
            f"its sampler ({_qualname(type(sampler))}) has an order that batchcast cannot "
            "replay (a SequentialSampler, or a RandomSampler with seed=, can)"
        )

    def identity(self, user: str) -> str:
        """The stream's identity: what a restart must share to resume."""
        if "\n" in user or "\r" in user:
            raise _native.InvalidArgument("identity= must be one line of text")
        loader = self._loader
        dataset = getattr(loader, "dataset", None)
        try:
            length = str(len(dataset))  # type: ignore[arg-type]
        except TypeError:
            length = "unknown"
        sampler = getattr(loader, "sampler", None)
        lines = {
            "loader": _qualname(type(loader)),
            "dataset_length": length,
            "batch_size": str(self._batch_size),
            "sampler": "none" if sampler is None else _qualname(type(sampler)),
            "seed": str(self._seed),
            "identity": user,
        }
        return "\n".join(f"{k}={v}" for k, v in lines.items())

    def restore(self, native: Any, name: str) -> tuple[int, int, int] | None:
        """Where the stream resumes, ``(epoch, row, consumers)`` (None: it
        starts afresh); seeds the first epoch, restores a stateful loader
        and says how it resumes."""
        resumed = native.resumed
        self.seed_epoch(0 if resumed is None else resumed[0])
        if resumed is None:
            return None
        epoch, row, consumers, payload = resumed
        if self.kind == STATEFUL and payload is not None:
            try:
                state = decode_state(payload)
            except ValueError as e:
                raise _native.InvalidArgument(
                    f"cannot resume producer {name!r}: the loader state in its state file is "
                    f"not one batchcast writes ({e}); nothing was reset. To start the stream "
                    "afresh pass fresh=True, or remove the file"
                ) from e
            self._loader.load_state_dict(state)
        if self.kind == EPOCH:
            message = (
                f"producer {name!r} cannot resume epoch {epoch} where it stopped (at or after "
                f"row {row}): {self.why}. Epoch {epoch} ends at once, short of the rows its "
                f"consumers had not had, and the stream resumes at epoch {epoch + 1}'s start"
            )
            _log.warning("batchcast: %s", message)
            warnings.warn(message, RuntimeWarning, stacklevel=3)
        else:
            _log.warning(
                "batchcast: producer %r resumes its stream at epoch %d, row %d (%s); fresh=True "
                "starts afresh",
                name,
                epoch,
                row,
                self.kind,
            )
        return epoch, row, consumers

    def note(self, native: Any, name: str) -> None:
        """Notes a stateful loader's state at the producer's head."""
        if self.kind == STATEFUL:
            what = f"producer {name!r}: the loader's state_dict()"
            native.set_resume_payload(encode_state(self._loader.state_dict(), what))

    @staticmethod
    def wait_rejoin(native: Any, name: str, consumers: int, timeout: float) -> None:
        """Waits up to ``timeout`` s for the resumed stream's consumers."""
        _log.warning(
            "batchcast: producer %r waits up to %g s for the %d consumer(s) of the stream it "
            "resumes to reattach",
            name,
            timeout,
            consumers,
        )
        if not native.wait_for_consumers(consumers, timeout):
            _log.warning(
                "batchcast: producer %r goes on with %d of %d consumer(s) reattached",
                name,
                native.consumers,
                consumers,
            )

    def seed_epoch(self, epoch: int) -> None:
        """With ``seed``, gives the loader's sampler (if it has a
        ``generator``) a generator seeded from (seed, epoch): before the
        epoch's iterator is made, and before a stateful loader's state is
        taken for the epoch's start."""
        sampler: Any = getattr(self._loader, "sampler", None)
        generator = types_of("torch", "Generator")
        if self._seed is None or not hasattr(sampler, "generator") or not generator:
            return
        sampler.generator = generator[0]().manual_seed(_mix(self._seed, epoch))
        self._seeded = epoch

    def batches(self, epoch: int, skip: int) -> Iterator[Any]:
        """The batches of ``epoch``, from its row ``skip`` on (``skip`` is
        nonzero only for the ``sampler`` kind; a ``stateful`` loader was
        restored there)."""
        # A stateful loader may have drawn from the generator seeded for
        # this epoch already (its state taken at the epoch's start).
        if self.kind != STATEFUL or self._seeded != epoch:
            self.seed_epoch(epoch)
        sampler: Any = getattr(self._loader, "sampler", None)
        bsampler: Any = getattr(self._loader, "batch_sampler", None)
        if skip:
            bsampler.sampler = _Skip(sampler, skip)
        try:
            yield from self._loader
        finally:
            if skip:
                bsampler.sampler = sampler


def encode_state(state: Any, what: str) -> str:
    """``state`` as one line of JSON; torch tensors as tagged base64."""

    def enc(x: Any, path: str) -> Any:
        if x is None or isinstance(x, (bool, int, float, str)):
            return x
        if isinstance(x, dict):
            out = {}
            for k, v in x.items():
                if not isinstance(k, str):
                    raise TypeError(
                        f"{what}{path} has a key {k!r} of type {type(k).__name__}; a durable "
                        "producer keeps the loader's state as JSON, whose keys are strs"
                    )
                out[k] = enc(v, f"{path}[{k!r}]")
            return out
        if isinstance(x, (list, tuple)):
            return [enc(v, f"{path}[{i}]") for i, v in enumerate(x)]
        if isinstance(x, types_of("torch", "Tensor")):
            t = x.detach().cpu().contiguous()
            data = base64.b64encode(t.numpy().tobytes()).decode("ascii")
            dtype = str(t.dtype).removeprefix("torch.")
            return {"__tensor__": {"dtype": dtype, "shape": list(t.shape), "data": data}}
        raise TypeError(
            f"{what}{path} is a {type(x).__name__}, which a durable producer cannot keep: the "
            "loader's state is kept as JSON (dicts, lists, strs, numbers, None, torch tensors), "
            "never pickled; make the loader's state_dict() return those, or pass durable=False"
        )

    return json.dumps(enc(state, ""), separators=(",", ":"), allow_nan=False)


def decode_state(text: str) -> Any:
    """The state :func:`encode_state` wrote.

    Raises:
        ValueError: text that is not such a state (not JSON, a tensor whose
            dtype is not a torch dtype, whose shape does not fit its data).
    """

    def dec(x: Any) -> Any:
        if isinstance(x, list):
            return [dec(v) for v in x]
        if not isinstance(x, dict):
            return x
        t = x.get("__tensor__")
        if len(x) == 1 and isinstance(t, dict):
            return tensor(t)
        return {k: dec(v) for k, v in x.items()}

    def tensor(t: dict[str, Any]) -> Any:
        import torch

        dtype = getattr(torch, str(t.get("dtype")), None)
        shape, data = t.get("shape"), t.get("data")
        if not isinstance(dtype, torch.dtype) or not isinstance(data, str):
            raise ValueError(f"a tensor of dtype {t.get('dtype')!r} is not a torch tensor")
        if not isinstance(shape, list) or not all(
            isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape
        ):
            raise ValueError(f"a tensor's shape {shape!r} is not a list of sizes")
        raw = bytearray(base64.b64decode(data, validate=True))
        flat = torch.frombuffer(raw, dtype=dtype) if raw else torch.empty(0, dtype=dtype)
        if flat.numel() != math.prod(shape):
            raise ValueError(f"a tensor of {flat.numel()} values has the shape {shape}")
        return flat.reshape(shape).clone()

    return dec(json.loads(text))
