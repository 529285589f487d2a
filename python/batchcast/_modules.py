"""Types of optional libraries (torch, numpy, PIL), looked up without
importing them: a value can only be a ``torch.Tensor`` if torch was
imported already.

A module that another thread is still importing is in ``sys.modules``
before its names are: ``sys.modules["torch"].Tensor`` then raises
AttributeError (a producer thread flattening batches while the main thread
runs ``import torch`` died of it). No value can be of a type that does not
exist yet, so such a type is simply left out."""

import sys
from typing import Any


def types_of(module: str, *names: str) -> tuple[Any, ...]:
    """The types ``names`` of ``module`` that exist now, for isinstance():
    ``()`` (which nothing is an instance of) when the module is not
    imported, or not far enough yet. Typed ``Any`` because the type checker
    cannot know them: a value that passes isinstance() keeps its type."""
    found = sys.modules.get(module)
    if found is None:
        return ()
    return tuple(t for t in (getattr(found, n, None) for n in names) if isinstance(t, type))
