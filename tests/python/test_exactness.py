"""Every sample exactly once per epoch, in order, with an exact len(), for any
consumer batch size (TensorSocket skipped samples and lost epoch tails)."""

from __future__ import annotations

import math

import pytest


def test_three_batch_sizes_see_every_sample_once_per_epoch_in_order(spawn):
    n, epochs = 1000, 3
    consumers = {
        (32, False): None,
        (48, False): None,
        (100, False): None,
        (48, True): None,  # drop_last: only the last, smaller batch goes
    }
    producer = spawn("produce_ids", name="ids", n=n, batch_size=64, epochs=epochs,
                     wait_for_consumers=len(consumers))
    for bs, drop_last in consumers:
        consumers[(bs, drop_last)] = spawn(
            "consume_ids", name="ids", batch_size=bs, drop_last=drop_last, epochs=epochs
        )
    for (bs, drop_last), proc in consumers.items():
        kept = n // bs * bs if drop_last else n
        expected_batches = n // bs if drop_last else math.ceil(n / bs)
        seen = proc.epochs(epochs)
        for e, got in enumerate(seen):
            assert got["epoch"] == e
            assert got["ids"] == list(range(kept)), (bs, drop_last, e)
            assert got["batches"] == got["len"] == got["len_before"] == expected_batches
            assert all(s == bs for s in got["sizes"][:-1])
            assert got["sizes"][-1] == (bs if drop_last else n - (expected_batches - 1) * bs)
            assert got["names_ok"]
        proc.expect("done")
        assert proc.wait() == 0
    producer.expect("done")
    assert producer.wait() == 0


def test_breaking_out_of_an_epoch_skips_its_rest(spawn):
    import batchcast

    producer = spawn("produce_ids", name="brk", n=1000, batch_size=64, epochs=3)
    with batchcast.Consumer("brk", batch_size=100, connect_timeout=30, format="numpy") as c:
        for i, b in enumerate(c):
            if i == 2:
                break
        assert c.epoch == 0 and len(c) == 10
        seen = [int(i) for b in c for i in b["id"]]  # the next loop is epoch 1, whole
        assert c.epoch == 1 and seen == list(range(1000))
        it = iter(c)  # epoch 2 begins
        next(it)
        it2 = iter(c)  # claims nothing until its first batch is asked for
        with pytest.raises(RuntimeError, match="superseded"):
            next(it)
        with pytest.raises(batchcast.ProducerFinished):
            next(it2)  # skips the rest of epoch 2; the producer ran 3 epochs
    producer.expect("done")
