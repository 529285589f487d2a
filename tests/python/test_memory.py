"""Batches kept alive stay valid; nothing grows over many epochs."""

from __future__ import annotations

import os
import warnings

import pytest
import torch

import batchcast
from conftest import shm_entries


def rss_kb(pid: int | str = "self") -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_batch_kept_after_the_iterator_moves_on_still_reads_right(spawn):
    # A window of 3 slots: the kept view holds one, the re-cut (48 of 64)
    # holds one partly read, which leaves one to cycle through.
    producer = spawn("produce_ids", name="keep", n=640, batch_size=64, window=3, epochs=3)
    kept = []
    with batchcast.Consumer("keep", batch_size=48, connect_timeout=30) as c:
        for epoch in range(3):
            for i, b in enumerate(c):
                if epoch == 0 and i in (0, 1):  # 0 is a view of slot memory, 1 a copy
                    kept.append(b)
        assert c.epoch == 2
    producer.expect("done")
    assert torch.equal(kept[0]["id"], torch.arange(0, 48))
    assert torch.equal(kept[1]["id"], torch.arange(48, 96))
    assert torch.equal(kept[0]["x"][:, 2], torch.arange(0, 48, dtype=torch.float32))
    assert kept[0]["name"] == [f"s{i}" for i in range(48)]


def test_keeping_more_batches_than_the_window_warns_instead_of_hanging_silently(spawn):
    producer = spawn("produce_ids", name="hoard", n=1000, batch_size=64, window=4, epochs=2)
    kept = []
    with batchcast.Consumer("hoard", connect_timeout=30) as c:
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            with pytest.raises(RuntimeWarning, match="hold all 4 slots of the producer's window"):
                for b in c:
                    kept.append(b)
        assert len(kept) == 4
        kept.clear()  # frees the window: the producer goes on
        del b
        # The loop left by the warning skips the rest of its epoch; the
        # next one is read whole.
        assert sorted(int(i) for b in c for i in b["id"]) == list(range(1000))
    producer.expect("done")


@pytest.mark.slow
def test_no_growth_of_memory_fds_or_dev_shm_over_200_epochs(spawn):
    shm_before = shm_entries()
    epochs = 200
    producer = spawn("produce_small", name="mem", epochs=epochs)
    c = batchcast.Consumer("mem", batch_size=24, connect_timeout=30)  # re-cut: views and copies
    marks = {}
    for epoch in range(epochs):
        n = 0
        for b in c:
            n += len(b["id"])
            assert b["name"][0] == f"n{int(b['id'][0])}"
        assert n == 64
        if epoch in (19, epochs - 1):
            marks[epoch] = (rss_kb(), open_fds(), rss_kb(producer.pid))
    producer.expect("done")
    assert producer.wait() == 0
    c.close()
    (rss0, fds0, prss0), (rss1, fds1, prss1) = marks[19], marks[epochs - 1]
    assert fds1 == fds0
    assert rss1 - rss0 < 4096, f"consumer RSS grew {rss1 - rss0} kB"
    assert prss1 - prss0 < 4096, f"producer RSS grew {prss1 - prss0} kB"
    assert shm_entries() <= shm_before
