"""What a child process and the runner say to each other, one line at a time.

A child (roles.py) prints on its stdout READY once it is set up, PROGRESS
with its sample count while it trains, and RESULT with its report as JSON.
The runner (supervise.py) answers READY with GO on the child's stdin: the
measured part starts then. `batchcast serve --json` speaks its own JSON
events instead; supervise.py reads those too.
"""

from __future__ import annotations

import json
import sys
from typing import Any

READY, PROGRESS, RESULT = "BCB-READY", "BCB-PROGRESS", "BCB-RESULT"
GO = "GO"


def emit(kind: str, payload: Any = None) -> None:
    """A line for the runner: `kind`, then `payload` as JSON if any."""
    line = kind if payload is None else f"{kind} {json.dumps(payload)}"
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def wait_go() -> None:
    """Blocks until the runner says GO; exits if it says anything else."""
    line = sys.stdin.readline()
    if line.strip() != GO:
        sys.exit("no GO from the runner")


def payload(line: str, kind: str) -> Any:
    """The JSON payload of a `kind` line."""
    return json.loads(line[len(kind) + 1:])
