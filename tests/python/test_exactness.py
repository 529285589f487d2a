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


def test_fault3_batch_larger_than_the_window_is_exact(spawn):
    # 1000 rows need 16 producer batches of 64; the window holds 8. Each
    # piece is copied out as it arrives, so the batch never waits for slots
    # it holds itself (it used to: 0 epochs, every consumer stuck).
    n, epochs = 4500, 3
    producer = spawn("produce_ids", name="big", n=n, batch_size=64, window=8, epochs=epochs)
    consumer = spawn("consume_ids", name="big", batch_size=1000, epochs=epochs)
    for e, got in enumerate(consumer.epochs(epochs)):
        assert got["epoch"] == e
        assert got["ids"] == list(range(n))
        assert got["sizes"] == [1000] * 4 + [500]
        assert got["batches"] == got["len"] == got["len_before"] == 5
        assert got["names_ok"]  # strings are assembled too
    consumer.expect("done")
    assert consumer.wait() == 0
    producer.expect("done")
    assert producer.wait() == 0


def test_fault7_shape_change_keeps_order(spawn):
    import batchcast

    # Producer batches 10 and 11 (rows 640..768) have narrower samples: batch
    # 91 of size 7 (rows 637..644) straddles the change and cannot be built.
    # The 91 batches before it all come first, exactly (46 of them used to).
    n, bs = 1000, 7
    producer = spawn("produce_shape_change", name="shape", n=n, batch_size=64, narrow=[10, 12],
                     epochs=2)
    with batchcast.Consumer("shape", batch_size=bs, connect_timeout=30, format="numpy") as c:
        ids = []
        with pytest.raises(batchcast.InvalidBatch, match="per-sample shape"):
            for b in c:
                assert b["id"].shape[0] == bs
                ids.extend(int(i) for i in b["id"])
        valid = 640 // bs  # 91
        assert len(ids) == valid * bs, f"{len(ids) / bs} of {valid} valid batches"
        assert ids == list(range(valid * bs))
        # The next loop skips the rest of the epoch (batch 109, rows 763..770,
        # cannot be built either) and is the next epoch, whole and exact.
        seen = [int(i) for b in c for i in b["id"]]
        assert c.epoch == 1 and seen == list(range(n)) and len(c) == math.ceil(n / bs)
    producer.expect("done")
