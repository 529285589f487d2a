"""len() before a loop equals the batches the loop delivers, for every join
policy, batch size and drop_last: a seeded property test over producers
with a consumer that joins at a chosen point of an epoch.

A consumer that joins with join="now" while an epoch is in progress reads
the rest of it first; the producer tells it at connection how many samples
are left, so its len() is exact before the first loop (it once reported a
full epoch: 8 where the partial epoch delivered 1 or 0).
"""

from __future__ import annotations

import random
import threading
import time

import numpy as np
import pytest

import batchcast
from test_errors import run_in_thread


def _batches(n, bs):
    return [np.arange(s, min(s + bs, n)) for s in range(0, n, bs)]


def _drain(c, loops, out):
    try:
        for _ in range(loops):
            for _ in c:
                pass
    except batchcast.ProducerFinished:
        pass
    except BaseException as e:  # reported by the test
        out.append(e)


def _case(rng, i):
    n = rng.randint(2, 60)
    pbs = rng.randint(1, 12)
    if n <= pbs:
        pbs = max(1, n // 2)
    batches = len(_batches(n, pbs))
    # Producer batches published before the join: the window stops the
    # producer there. Not 1: a window of 1 slot deadlocks a loop, whose
    # variable keeps the last batch (and its slot) while it waits for the next.
    joined_after = rng.choice([0] + list(range(2, batches + 1)))
    # A consumer batch holds its producer batches until it is whole, so it
    # must span fewer producer batches than the window has slots.
    window = max(joined_after, 2)
    return dict(
        n=n, pbs=pbs, cbs=rng.choice([None, rng.randint(1, (window - 1) * pbs)]),
        drop_last=rng.random() < 0.4, join=rng.choice(["now", "catch-up", "next-epoch"]),
        joined_after=joined_after, name=f"len{i}",
    )


CASES = [_case(random.Random(1234 + i), i) for i in range(36)]
# The cases of the report: a join="now" consumer whose partial epoch holds 1 batch, or 0.
CASES += [
    dict(n=64, pbs=8, cbs=None, drop_last=False, join="now", joined_after=7, name="now1"),
    dict(n=64, pbs=8, cbs=9, drop_last=True, join="now", joined_after=7, name="now0"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(f"{v}" for v in c.values()))
def test_len_before_the_loop_is_the_batches_it_delivers(bc_dir, case):
    n, pbs, k = case["n"], case["pbs"], case["joined_after"]
    p = batchcast.Producer(_batches(n, pbs), case["name"], window=max(k, 2), batch_size=pbs,
                           samples_per_epoch=n, slot_size=1 << 16)
    first = batchcast.Consumer(case["name"], format="numpy")  # holds the window: never reads yet
    t = run_in_thread(p, epochs=3)
    if k:
        deadline = time.monotonic() + 30
        while p.status()["published"] < k:  # a figure, not a timing: the window stops it at k
            assert time.monotonic() < deadline
            time.sleep(0.005)
    c = batchcast.Consumer(case["name"], batch_size=case["cbs"], drop_last=case["drop_last"],
                           join=case["join"], format="numpy")
    errors = []
    drain = threading.Thread(target=_drain, args=(first, 3, errors), daemon=True)
    drain.start()
    bs = case["cbs"] or pbs
    full = n // bs if case["drop_last"] else -(-n // bs)
    for loop in range(2):
        # A full epoch's length under its own name, whatever len() says of
        # a partial first one.
        assert c.batches_per_epoch == full
        before = len(c)
        try:
            got = sum(1 for _ in c)
        except batchcast.ProducerFinished:
            break  # a next-epoch joiner of the last epoch
        assert before == got, f"loop {loop}: len() said {before}, the loop gave {got}"
    c.close()
    drain.join(30)
    t.join(30)
    assert not errors and not t.errors
    first.close()
