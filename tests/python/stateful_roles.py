"""Processes for test_stateful.py (``python stateful_roles.py ROLE JSON``):
trainers that save and load a Consumer's state_dict, and an anchor consumer
that stops itself (SIGSTOP) so that the producer keeps its batches."""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any, Dict, List

import numpy as np

import batchcast


def anchor(o: Dict[str, Any]) -> None:
    """Reads `stop_after` batches, stops itself until SIGCONT, then reads
    the stream to its end."""
    c = batchcast.Consumer(o["name"], connect_timeout=30, format="numpy")
    seen = 0
    while True:
        try:
            for _ in c:
                seen += 1
                if seen == o["stop_after"]:
                    os.kill(os.getpid(), signal.SIGSTOP)
        except batchcast.ProducerFinished:
            break
    c.close()


def trainer(o: Dict[str, Any]) -> None:
    """Reads the stream to its end, recording each epoch's ids: from the
    state in `state_in` if given; with `stop_after`, writes its state and
    ids to `state_out` after that many batches, says "saved" and waits to
    be killed. With `hold`, says "connected" once its Consumer is built and
    waits for a line on stdin before it loads the state (a trainer that
    sets up its model and reads its checkpoint after building its loader)."""
    c = batchcast.Consumer(o["name"], connect_timeout=30, format="numpy")
    if o.get("hold"):
        print("connected", flush=True)
        sys.stdin.readline()
    if o.get("state_in"):
        with open(o["state_in"]) as f:
            c.load_state_dict(json.load(f)["state"])
    ids: Dict[int, List[int]] = {}
    taken = 0
    while True:
        try:
            for _payload, batch_ids in c:
                assert c.epoch is not None
                ids.setdefault(c.epoch, []).extend(int(i) for i in np.asarray(batch_ids))
                taken += 1
                if taken == 1:
                    print("started", flush=True)
                if taken == o.get("stop_after"):
                    tmp = o["state_out"] + ".tmp"
                    with open(tmp, "w") as f:
                        json.dump({"state": c.state_dict(), "ids": ids}, f)
                    os.replace(tmp, o["state_out"])
                    print("saved", flush=True)
                    sys.stdin.read()  # until killed
        except batchcast.ProducerFinished:
            break
    c.close()
    with open(o["ids_out"], "w") as f:
        json.dump(ids, f)


if __name__ == "__main__":
    {"anchor": anchor, "trainer": trainer}[sys.argv[1]](json.loads(sys.argv[2]))
