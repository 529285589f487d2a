"""A consumer's state, the ``torch.utils.data`` Stateful way: what
``Consumer.state_dict()`` returns and ``Consumer.load_state_dict()`` takes.

The state is a small plain dict (JSON-, torch.save- and Lightning-friendly)::

    {"version": 2, "name": "cifar", "stream": "dataset=...\nseed=7\n...",
     "epoch": 3, "row": 1280}

``row`` counts the rows of ``epoch`` the loop has been handed (not those
taken ahead by a prefetch): a consumer loaded with it receives the epoch's
rows from ``row`` on, then the next epochs. ``epoch`` is None before the
consumer's first epoch (loading that changes nothing). ``stream`` is the
producer's stream identity (its dataset, seed and the options that change
the samples, as ``batchcast serve`` keeps it in its state file; None from a
producer that keeps none): a state is refused by a consumer of another
stream. Version 1 states (without ``stream``) are read too."""

from __future__ import annotations

from typing import Any, Callable

from . import _native

#: The state format this module writes (it reads version 1 too).
VERSION = 2

_KEYS = {1: {"version", "name", "epoch", "row"}, 2: {"version", "name", "stream", "epoch", "row"}}


def state(name: str, stream: str | None, epoch: int | None, row: int) -> dict[str, Any]:
    """The state dict of a consumer of ``name``'s ``stream`` at ``(epoch, row)``."""
    return {"version": VERSION, "name": name, "stream": stream, "epoch": epoch, "row": row}


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


def parse(
    d: Any, name: str, stream: str | None, differences: Callable[[str], str]
) -> tuple[int, int] | None:
    """The position ``(epoch, row)`` a state dict saved for a consumer of
    ``name``'s ``stream``, None when it saved none; raises InvalidArgument
    naming what is wrong with it (``differences(saved)``: how a saved
    stream identity differs from this one)."""
    if not isinstance(d, dict):
        raise _native.InvalidArgument(
            f"a consumer's state must be a dict from Consumer.state_dict(), not {type(d).__name__}"
        )
    version = d.get("version")
    if version not in _KEYS:
        raise _native.InvalidArgument(
            f"the consumer state has version {version!r}; this batchcast reads versions "
            f"{sorted(_KEYS)}: save it again with this version's Consumer.state_dict()"
        )
    keys = _KEYS[version]
    missing = sorted(keys - d.keys())
    unknown = sorted(str(k) for k in d.keys() - keys)
    if missing or unknown:
        raise _native.InvalidArgument(
            f"not a batchcast.Consumer state: missing keys {missing}, unknown keys {unknown}; "
            f"version {version} has {sorted(keys)}"
        )
    saved = d.get("stream")
    if saved is not None and not isinstance(saved, str):
        raise _native.InvalidArgument(
            f"state_dict['stream'] must be a str or None, not {type(saved).__name__}: pass a "
            "dict that Consumer.state_dict() returned"
        )
    if d["name"] != name:
        raise _native.InvalidArgument(
            f"the consumer state was saved by a consumer of producer {d['name']!r}, not "
            f"{name!r}: load it into a Consumer({d['name']!r}), or start this one afresh"
        )
    if saved is not None and stream is not None and saved != stream:
        raise _native.InvalidArgument(
            f"the consumer state was saved from another stream of producer {name!r} "
            f"({differences(saved)}): load it only into a consumer of the stream it was saved "
            "from, or start this one afresh"
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
