"""Flattening a batch into arrays and lists, and rebuilding it.

A batch is a tree of tuples, lists and dicts (str keys) whose leaves are

- arrays sharing the leading (batch) dimension: PyTorch tensors, NumPy
  arrays, or anything else with ``__dlpack__`` on the CPU;
- per-sample lists of ``batch`` ints, floats or strs (e.g. file names).

:func:`flatten` turns a batch into a *spec* (the structure, as plain tuples
the native module reads) and a list of ``(kind, value)`` leaves, checking
every rule on the way and naming the offending element by its path
(``batch[1]['meta']``). :func:`unflatten` rebuilds the structure on the
consumer's side. Namedtuples travel as tuples and other mappings as dicts.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any, Callable

from . import _native
from ._modules import types_of

LEAF_ARRAY = _native.LEAF_ARRAY
LEAF_INTS = _native.LEAF_INTS
LEAF_FLOATS = _native.LEAF_FLOATS
LEAF_STRS = _native.LEAF_STRS

#: The structure of a batch: an int (leaf index), or ("t"|"l", [children]),
#: or ("d", [(key, child), ...]).
Spec = Any
Leaf = tuple[int, Any]

_MAX_DEPTH = 64

_TORCH_DTYPES = (
    "bool",
    "uint8",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
)


def _article(word: str) -> str:
    return "an" if word[:1].lower() in "aeiou" else "a"


def _describe(x: Any) -> str:
    if x is None:
        return "None"
    name = type(x).__name__
    return f"{_article(name)} {name}"


def _is_torch_tensor(x: Any) -> bool:
    return isinstance(x, types_of("torch", "Tensor"))


def _is_numpy(x: Any) -> bool:
    return isinstance(x, types_of("numpy", "ndarray", "generic"))


def _torch_leaf(x: Any, path: str) -> tuple[Any, int]:
    torch = sys.modules["torch"]
    if x.layout != torch.strided:
        raise TypeError(f"{path}: cannot send a {x.layout} tensor; use .to_dense() first")
    dtype = str(x.dtype).replace("torch.", "")
    if dtype not in _TORCH_DTYPES:
        raise TypeError(
            f"{path}: cannot send a tensor of dtype torch.{dtype}; batchcast sends bool, "
            "(u)int8-64, float16, bfloat16, float32 and float64"
        )
    if x.dim() == 0:
        raise TypeError(
            f"{path}: cannot send a 0-d tensor; every array in a batch needs a leading "
            "batch dimension"
        )
    x = x.detach()
    if x.device.type != "cpu":
        x = x.cpu()
    x = x.contiguous()
    if x.is_conj() or x.is_neg():
        x = x.resolve_conj().resolve_neg()
    return x, int(x.shape[0])


def _numpy_leaf(x: Any, path: str) -> tuple[Any, int]:
    np = sys.modules["numpy"]
    if isinstance(x, np.generic):
        raise TypeError(
            f"{path}: cannot send a single NumPy scalar ({type(x).__name__}); a batch holds "
            "arrays with a leading batch dimension"
        )
    if x.dtype.kind not in "biuf" or x.dtype.itemsize > 8:
        raise TypeError(
            f"{path}: cannot send a NumPy array of dtype {x.dtype}; batchcast sends bool, "
            "(u)int8-64, float16, float32 and float64"
        )
    if x.ndim == 0:
        raise TypeError(
            f"{path}: cannot send a 0-d array; every array in a batch needs a leading "
            "batch dimension"
        )
    if not x.dtype.isnative:
        x = x.astype(x.dtype.newbyteorder("="))
    x = np.ascontiguousarray(x)
    return x, int(x.shape[0])


def _is_integer(v: Any) -> bool:
    if isinstance(v, (bool, int)):
        return True
    return isinstance(v, types_of("numpy", "integer", "bool_"))


def _is_real(v: Any) -> bool:
    if isinstance(v, float):
        return True
    return isinstance(v, types_of("numpy", "floating"))


def _list_kind(items: list) -> tuple[int, int]:
    """``(kind, -1)`` for a per-sample list, ``(-1, -1)`` for a list that is
    part of the structure, ``(-2, i)`` when ``items[i]`` breaks a per-sample
    list."""
    if not items:
        return -1, -1
    first = items[0]
    if isinstance(first, str):
        for i, v in enumerate(items):
            if not isinstance(v, str):
                return -2, i
        return LEAF_STRS, -1
    if _is_integer(first) or _is_real(first):
        kind = LEAF_INTS
        for i, v in enumerate(items):
            if _is_integer(v):
                continue
            if _is_real(v):
                kind = LEAF_FLOATS
                continue
            return -2, i
        return kind, -1
    return -1, -1


def flatten(batch: Any) -> tuple[Spec, list[Leaf], int]:
    """Flattens ``batch``; returns ``(spec, leaves, rows)``.

    Raises TypeError for anything that cannot travel and ValueError for
    arrays whose leading dimensions differ, naming the element's path.
    """
    # Module-level helpers, not closures: a recursive closure is a reference
    # cycle, which would keep every array of the batch (and, on the consumer
    # side, the lease on its slot) alive until the garbage collector runs.
    leaves: list[Leaf] = []
    paths: list[str] = []
    spec = _visit(batch, "batch", 0, leaves, paths)
    if not leaves:
        raise ValueError("batch: a batch needs at least one array or per-sample list")
    rows = [_rows(v) for _, v in leaves]
    if rows[0] == 0:
        raise ValueError(f"{paths[0]}: a batch needs at least one row (its first dimension is 0)")
    for path, n in zip(paths, rows):
        if n != rows[0]:
            raise ValueError(
                f"{path}: has {n} rows but {paths[0]} has {rows[0]}; every array and list in a "
                "batch must share the first (batch) dimension"
            )
    return spec, leaves, rows[0]


def _visit(x: Any, path: str, depth: int, leaves: list[Leaf], paths: list[str]) -> Spec:
    if depth > _MAX_DEPTH:
        raise ValueError(f"{path}: the batch is nested deeper than {_MAX_DEPTH} levels")
    if _is_torch_tensor(x):
        value, _ = _torch_leaf(x, path)
        leaves.append((LEAF_ARRAY, value))
        paths.append(path)
        return len(leaves) - 1
    if _is_numpy(x):
        value, _ = _numpy_leaf(x, path)
        leaves.append((LEAF_ARRAY, value))
        paths.append(path)
        return len(leaves) - 1
    if isinstance(x, tuple):
        items = [_visit(v, f"{path}[{i}]", depth + 1, leaves, paths) for i, v in enumerate(x)]
        return ("t", items)
    if isinstance(x, list):
        kind, bad = _list_kind(x)
        if kind >= 0:
            leaves.append((kind, list(x)))
            paths.append(path)
            return len(leaves) - 1
        if kind == -2:
            what = "strs" if isinstance(x[0], str) else "numbers"
            raise TypeError(
                f"{path}[{bad}]: cannot send {_describe(x[bad])} in a per-sample list of "
                f"{what}; a per-sample list holds only ints and floats, or only strs"
            )
        items = [_visit(v, f"{path}[{i}]", depth + 1, leaves, paths) for i, v in enumerate(x)]
        return ("l", items)
    if isinstance(x, Mapping):
        entries = []
        for k, v in x.items():
            if not isinstance(k, str):
                raise TypeError(
                    f"{path}: cannot send a dict with key {k!r} ({_describe(k)}); dict keys "
                    "must be str"
                )
            entries.append((k, _visit(v, f"{path}[{k!r}]", depth + 1, leaves, paths)))
        return ("d", entries)
    if hasattr(x, "__dlpack__") and hasattr(x, "shape"):
        leaves.append((LEAF_ARRAY, x))
        paths.append(path)
        return len(leaves) - 1
    if isinstance(x, (bool, int, float, str)):
        raise TypeError(
            f"{path}: cannot send a single {type(x).__name__}; a batch holds arrays with a "
            "leading batch dimension, or per-sample lists of ints, floats or strs"
        )
    raise TypeError(
        f"{path}: cannot send {_describe(x)}; a batch is a tuple, list or dict (nested) of "
        "torch tensors, NumPy arrays, or per-sample lists of ints, floats or strs"
    )


def _rows(value: Any) -> int:
    if isinstance(value, list):
        return len(value)
    shape = value.shape
    if len(shape) == 0:
        return 0
    return int(shape[0])


def unflatten(spec: Spec, leaves: list[Any], convert: Callable[[Any], Any]) -> Any:
    """Rebuilds a batch from ``spec``; array leaves go through ``convert``."""
    if isinstance(spec, int):
        leaf = leaves[spec]
        return leaf if isinstance(leaf, list) else convert(leaf)
    tag, items = spec
    if tag == "t":
        return tuple([unflatten(c, leaves, convert) for c in items])
    if tag == "l":
        return [unflatten(c, leaves, convert) for c in items]
    return {k: unflatten(c, leaves, convert) for k, c in items}
