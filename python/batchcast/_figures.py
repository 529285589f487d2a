"""A job's own figures, handed to ``batchcast run`` when the job ends.

The runner gives each job it starts a path in ``BATCHCAST_FIGURES``; a job
that writes there one JSON object of name -> number gets each number
recorded as its run's metric ``figure/<name>``. :func:`write_figures` is
the job's side: it keeps the finite numbers of a result (bools, strings,
lists and NaN are left out) and replaces the file whole, so the runner
never reads half a file. Outside ``batchcast run`` it does nothing.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from typing import Any

from ._files import write_whole

FIGURES_ENV = "BATCHCAST_FIGURES"


def numbers_of(result: Mapping[str, Any]) -> dict[str, float]:
    """The finite numbers of ``result``, by name."""
    return {
        str(k): float(v)
        for k, v in result.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    }


def write_figures(result: Mapping[str, Any]) -> bool:
    """Writes the numbers of ``result`` to ``$BATCHCAST_FIGURES``; False
    (and nothing written) when the variable is not set."""
    path = os.environ.get(FIGURES_ENV)
    if not path:
        return False
    write_whole(path, json.dumps(numbers_of(result)))
    return True
