"""PyTorch DataLoader workers fork: batchcast objects inherited by a forked
child refuse to work there and never disturb the parent."""

from __future__ import annotations

import multiprocessing

import numpy as np
import torch

import batchcast


def _use_inherited(producer: batchcast.Producer, consumer: batchcast.Consumer, kept, q) -> None:
    report = {}
    try:
        producer._native.begin_epoch()
    except RuntimeError as e:
        report["producer"] = str(e)
    try:
        next(iter(consumer))  # the first next() claims an epoch: refused here
    except RuntimeError as e:
        report["consumer"] = str(e)
    report["kept"] = kept.tolist()  # reading inherited memory is fine
    del kept  # dropping it must not release the parent's lease
    producer.close()  # no-op in a child
    consumer.close()
    q.put(report)


def test_objects_inherited_by_a_forked_child_refuse_and_leave_the_parent_alone(bc_dir):
    data = [np.arange(4) + 4 * i for i in range(3)]
    p = batchcast.Producer(data, "fork", slot_size=4096, window=4)
    c = batchcast.Consumer("fork")
    it = iter(p)
    next(it)  # publish batch 0
    epoch = iter(c)
    kept = next(epoch)
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    child = ctx.Process(target=_use_inherited, args=(p, c, kept, q))
    child.start()
    report = q.get(timeout=30)
    child.join(30)
    assert child.exitcode == 0
    assert "forked child" in report["producer"] and "forked child" in report["consumer"]
    assert report["kept"] == [0, 1, 2, 3]
    # The parent goes on as if nothing happened.
    for _ in it:
        pass
    p.close()
    rest = [b.tolist() for b in epoch]
    assert rest == [[4, 5, 6, 7], [8, 9, 10, 11]]
    assert torch.equal(kept, torch.arange(4))
    c.close()


def test_a_dataloader_with_forked_workers_feeds_a_producer(spawn):
    producer = spawn("produce_training", name="dl", epochs=1, num_workers=2)
    with batchcast.Consumer("dl", connect_timeout=60) as c:
        shapes = [tuple(images.shape) for images, labels in c]
    assert shapes == [(32, 3, 8, 8)] * 8
    producer.expect("done")
    assert producer.wait() == 0
