"""What a producer says about its stream, and a consumer's check of it.

A producer announces, in the welcome every consumer gets: the structure,
dtypes and per-sample shapes of its first batch, its nominal batch size,
its samples per epoch, and free-form metadata given as
``Producer(..., metadata={...})`` (JSON, at most 64 KiB). A consumer reads it
as ``consumer.spec`` (a :class:`StreamSpec`) and can state what it expects
with ``Consumer(..., expect={...})``: a mismatch raises
:class:`StreamMismatch` at connection, naming both sides.

Keys of ``expect``:

- ``"batch_size"``, ``"samples_per_epoch"``: the producer's figures;
- an array's path as errors name it (``"batch"`` for a bare array,
  ``"batch[0]"``, ``"batch['image']"``): a text such as
  ``"uint8[3, 64, 64]"`` (dtype and per-sample shape), or a dict with
  ``"dtype"`` and/or ``"shape"``;
- anything else: a key of the producer's metadata, compared with ``==``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from . import _native

__all__ = [
    "StreamSpec",
    "ArraySpec",
    "StreamMismatch",
    "check_expect",
    "check_arrays",
    "arrays_of_batch",
    "encode_metadata",
]


class StreamMismatch(_native.BatchcastError, ValueError):
    """The producer's stream is not what ``Consumer(expect=...)`` asked for."""


class ArraySpec(tuple[str, tuple[int, ...]]):
    """``(dtype, per-sample shape)`` of one array of a batch."""

    def __new__(cls, dtype: str, shape: tuple[int, ...]) -> ArraySpec:
        return super().__new__(cls, (dtype, tuple(shape)))

    @property
    def dtype(self) -> str:
        return self[0]

    @property
    def shape(self) -> tuple[int, ...]:
        return self[1]

    def __str__(self) -> str:
        return f"{self.dtype}[{', '.join(str(d) for d in self.shape)}]"


class StreamSpec:
    """A producer's description of its stream (``consumer.spec``).

    Attributes:
        batch_size: the producer's nominal batch size (None: unknown).
        samples_per_epoch: samples per epoch (None: unknown).
        structure: the first batch as text, e.g.
            ``"(uint8[3, 64, 64], int64[])"`` (None: not described yet).
        arrays: ``{path: ArraySpec}`` of the first batch's arrays, and
            ``{path: "ints" | "floats" | "strs"}`` of its per-sample lists.
        metadata: the producer's metadata (a dict; empty when none).
    """

    def __init__(self, welcome: Mapping[str, Any]) -> None:
        stream = welcome.get("stream") or {}
        self.batch_size: int | None = welcome.get("batch_size")
        self.samples_per_epoch: int | None = welcome.get("samples_per_epoch")
        self.structure: str | None = stream.get("structure")
        self.arrays: dict[str, Any] = {}
        tree = stream.get("tree")
        if tree is not None:
            _paths(tree, "batch", list(stream.get("leaves", [])), self.arrays)
        text = stream.get("metadata") or ""
        try:
            metadata = json.loads(text) if text else {}
        except ValueError:
            metadata = None
        if not isinstance(metadata, dict):
            # Not from batchcast.Producer, which sends a JSON object.
            raise _native.ProtocolError(
                f"the producer's metadata is not a JSON object: {text[:200]!r}"
            )
        self.metadata: dict[str, Any] = metadata

    def __repr__(self) -> str:
        return (
            f"StreamSpec(structure={self.structure!r}, batch_size={self.batch_size}, "
            f"samples_per_epoch={self.samples_per_epoch}, metadata={self.metadata!r})"
        )


def _paths(spec: Any, path: str, leaves: list, out: dict[str, Any]) -> None:
    if isinstance(spec, int):
        leaf = leaves[spec] if 0 <= spec < len(leaves) else None
        if leaf is None:
            return
        if leaf["kind"] == "array":
            out[path] = ArraySpec(leaf["dtype"], leaf["shape"])
        else:
            out[path] = leaf["kind"]
        return
    tag, items = spec
    if tag == "d":
        for key, child in items:
            _paths(child, f"{path}[{key!r}]", leaves, out)
    else:
        for i, child in enumerate(items):
            _paths(child, f"{path}[{i}]", leaves, out)


def arrays_of_batch(
    batch: Any, path: str = "batch", out: dict[str, Any] | None = None
) -> dict[str, Any]:
    """``{path: ArraySpec}`` of a received batch's arrays (to check
    expectations the welcome could not: see :func:`check_expect`)."""
    out = {} if out is None else out
    if isinstance(batch, tuple) or (isinstance(batch, list) and batch and not _scalar(batch[0])):
        for i, child in enumerate(batch):
            arrays_of_batch(child, f"{path}[{i}]", out)
    elif isinstance(batch, Mapping):
        for key, child in batch.items():
            arrays_of_batch(child, f"{path}[{key!r}]", out)
    elif hasattr(batch, "shape") and hasattr(batch, "dtype"):
        out[path] = ArraySpec(str(batch.dtype).replace("torch.", ""), tuple(batch.shape[1:]))
    return out


def _scalar(x: Any) -> bool:
    return isinstance(x, (int, float, str))


def check_arrays(arrays: dict[str, Any], expect: Mapping[str, Any], name: str) -> None:
    """Checks the array expectations of ``expect`` against a first batch."""
    structure = ", ".join(f"{p}: {a}" for p, a in arrays.items())
    for key, want in expect.items():
        if key == "batch" or key.startswith("batch["):
            got = arrays.get(key)
            if got is None or not _same_array(want, got):
                raise StreamMismatch(
                    f"batchcast.Consumer({name!r}) expects {key}={want!r}, but producer {name!r} "
                    f"sends {key}={got} (its first batch: {structure}); start this trainer with "
                    "the producer's settings, or point it at a producer that matches"
                )


def encode_metadata(metadata: Any) -> str:
    """The JSON text of ``metadata`` (a dict with str keys)."""
    if not isinstance(metadata, Mapping) or not all(isinstance(k, str) for k in metadata):
        raise TypeError(f"metadata must be a dict with str keys, not {type(metadata).__name__}")
    try:
        return json.dumps(dict(metadata), sort_keys=True)
    except (TypeError, ValueError) as e:
        raise TypeError(
            f"metadata must be JSON-serialisable (str, numbers, lists, dicts): {e}"
        ) from None


def _same_array(want: Any, got: Any) -> bool:
    if isinstance(want, str):
        return "".join(want.split()) == "".join(str(got).split())
    if isinstance(want, Mapping) and isinstance(got, ArraySpec):
        if "dtype" in want and str(want["dtype"]).replace("torch.", "") != got.dtype:
            return False
        if "shape" in want and tuple(want["shape"]) != got.shape:
            return False
        return True
    return False


def check_expect(spec: StreamSpec, expect: Mapping[str, Any], name: str) -> bool:
    """Raises :class:`StreamMismatch` at the first expectation the stream
    does not meet; returns False when array expectations could not be
    checked yet (the producer has not described its first batch)."""
    if not isinstance(expect, Mapping):
        raise TypeError(f"expect must be a dict, not {type(expect).__name__}")
    checked_all = True
    for key, want in expect.items():
        if key in ("batch_size", "samples_per_epoch"):
            got = getattr(spec, key)
            where = f"its {key}"
            ok = got == want
        elif key == "batch" or key.startswith("batch["):
            if spec.structure is None:
                checked_all = False
                continue
            got = spec.arrays.get(key)
            where = f"the array {key} of its batches ({spec.structure})"
            ok = got is not None and _same_array(want, got)
        else:
            if key not in spec.metadata:
                have = ", ".join(sorted(spec.metadata)) or "none"
                raise StreamMismatch(
                    f"batchcast.Consumer({name!r}) expects {key}={want!r}, but producer "
                    f"{name!r} announces no {key!r} in its metadata (its keys: {have}); pass "
                    f"metadata={{{key!r}: ...}} to batchcast.Producer, or drop {key!r} from expect="
                )
            got = spec.metadata[key]
            where = "its metadata"
            ok = got == want
        if not ok:
            shown = str(got) if isinstance(got, ArraySpec) else repr(got)
            raise StreamMismatch(
                f"batchcast.Consumer({name!r}) expects {key}={want!r}, but producer {name!r} "
                f"announces {key}={shown} ({where}); start this "
                "trainer with the producer's settings, or point it at a producer that matches"
            )
    return checked_all
