"""A consumer's state, the ``torch.utils.data`` Stateful way: what
``Consumer.state_dict()`` returns and ``Consumer.load_state_dict()`` takes.

The state is a small plain dict (JSON-, torch.save- and Lightning-friendly)::

    {"version": 1, "name": "cifar", "epoch": 3, "row": 1280}

``row`` counts the rows of ``epoch`` the loop has been handed (not those
taken ahead by a prefetch): a consumer loaded with it receives the epoch's
rows from ``row`` on, then the next epochs. ``epoch`` is None before the
consumer's first epoch (loading that changes nothing)."""

from __future__ import annotations

from typing import Any

from . import _native

#: The state format this module writes and reads.
VERSION = 1

_KEYS = {"version", "name", "epoch", "row"}


def state(name: str, epoch: int | None, row: int) -> dict[str, Any]:
    """The state dict of a consumer of ``name`` at ``(epoch, row)``."""
    return {"version": VERSION, "name": name, "epoch": epoch, "row": row}


def _count(d: dict, key: str, *, optional: bool = False) -> int | None:
    value = d[key]
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _native.InvalidArgument(
            f"state_dict[{key!r}] must be a non-negative int, not {value!r}: pass a dict that "
            "Consumer.state_dict() returned"
        )
    return value


def parse(d: Any, name: str) -> tuple[int, int] | None:
    """The position ``(epoch, row)`` a state dict saved for a consumer of
    ``name``, None when it saved none; raises InvalidArgument naming what
    is wrong with it."""
    if not isinstance(d, dict):
        raise _native.InvalidArgument(
            f"a consumer's state must be a dict from Consumer.state_dict(), not {type(d).__name__}"
        )
    missing = sorted(_KEYS - d.keys())
    unknown = sorted(str(k) for k in d.keys() - _KEYS)
    if missing or unknown:
        raise _native.InvalidArgument(
            f"not a batchcast.Consumer state: missing keys {missing}, unknown keys {unknown}; "
            f"it has {sorted(_KEYS)}"
        )
    if d["version"] != VERSION:
        raise _native.InvalidArgument(
            f"the consumer state has version {d['version']!r}; this batchcast reads version "
            f"{VERSION}: save it again with this version's Consumer.state_dict()"
        )
    if d["name"] != name:
        raise _native.InvalidArgument(
            f"the consumer state was saved by a consumer of producer {d['name']!r}, not "
            f"{name!r}: load it into a Consumer({d['name']!r}), or start this one afresh"
        )
    epoch = _count(d, "epoch", optional=True)
    row = _count(d, "row")
    assert row is not None
    if epoch is None:
        if row:
            raise _native.InvalidArgument(
                f"the consumer state has no epoch but row {row}: pass a dict that "
                "Consumer.state_dict() returned"
            )
        return None
    return epoch, row
