"""Errors: typed, under one base class, and saying what to do."""

from __future__ import annotations

import re
import threading
import time
from typing import Optional

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import batchcast
from batchcast._tree import flatten


def run_in_thread(producer: batchcast.Producer, epochs: Optional[int] = 1) -> threading.Thread:
    errors = []

    def run() -> None:
        try:
            producer.run(epochs=epochs)
        except BaseException as e:  # reported by the test
            errors.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.errors = errors  # type: ignore[attr-defined]
    t.start()
    return t


def test_every_exception_derives_from_batchcast_error():
    names = ["ProducerGone", "ProducerNotFound", "NameInUse", "JoinRefused", "BatchTooLarge",
             "OutOfSharedMemory", "NoConsumers", "ProtocolError", "ProducerFinished",
             "InvalidArgument", "InvalidBatch", "PermissionDenied", "UsageError", "IoError"]
    for name in names:
        cls = getattr(batchcast, name)
        assert issubclass(cls, batchcast.BatchcastError), name
        assert cls.__module__ == "batchcast" and cls.__doc__
    assert issubclass(batchcast.InvalidArgument, ValueError)
    assert issubclass(batchcast.NoConsumers, TimeoutError)
    assert issubclass(batchcast.IoError, OSError)


@pytest.mark.parametrize(
    "batch, message",
    [
        ((np.zeros((2, 3)), {"meta": {1, 2}}), r"batch\[1\]\['meta'\]: cannot send a set"),
        ({"a": [np.zeros(2), None]}, r"batch\['a'\]\[1\]: cannot send None"),
        ({1: np.zeros(2)}, r"batch: cannot send a dict with key 1"),
        ([np.zeros(2), 3], r"batch\[1\]: cannot send a single int"),
        ({"names": ["a", 1]}, r"batch\['names'\]\[1\]: cannot send an int in a per-sample list"),
        (np.array(["x", "y"]), r"batch: cannot send a NumPy array of dtype <U1"),
        (torch.zeros(2, dtype=torch.complex64), r"batch: cannot send a tensor of dtype torch.complex64"),
        (np.float32(1), r"batch: cannot send a single NumPy scalar"),
        (torch.tensor(3.0), r"batch: cannot send a 0-d tensor"),
        ("text", r"batch: cannot send a single str"),
    ],
)
def test_what_cannot_travel_is_a_type_error_naming_its_path(batch, message):
    with pytest.raises(TypeError, match=message):
        flatten(batch)


def test_ragged_rows_are_a_value_error_naming_both_paths():
    with pytest.raises(ValueError, match=r"batch\['y'\]: has 3 rows but batch\['x'\] has 4"):
        flatten({"x": np.zeros((4, 2)), "y": np.zeros(3)})
    with pytest.raises(ValueError, match="at least one row"):
        flatten(np.zeros((0, 2)))


def test_a_bad_batch_fails_the_producer_and_tells_the_consumers(bc_dir):
    good = {"x": np.zeros((4, 2)), "meta": [1, 2, 3, 4]}
    bad = {"x": np.zeros((4, 2)), "meta": {"a"}}
    p = batchcast.Producer([good, bad], "bad", slot_size=1 << 16)
    c = batchcast.Consumer("bad", format="numpy")
    t = run_in_thread(p)
    with pytest.raises(batchcast.ProducerFinished, match=r"loader failed: TypeError: batch\['meta'\]") as e:
        for _ in c:
            pass
    assert e.value.reason == "failed"
    t.join(10)
    assert isinstance(t.errors[0], TypeError)  # re-raised in the producer too


def test_producer_not_found_names_the_socket(bc_dir):
    with pytest.raises(batchcast.ProducerNotFound) as e:
        batchcast.Consumer("nobody")
    assert e.value.name == "nobody"
    assert e.value.socket == str(bc_dir / "nobody.sock")
    assert str(bc_dir / "nobody.sock") in str(e.value) and "connect timeout" in str(e.value)
    t0 = time.monotonic()
    with pytest.raises(batchcast.ProducerNotFound):
        batchcast.Consumer("nobody", connect_timeout=0.3)
    assert time.monotonic() - t0 >= 0.3


def test_a_consumer_waits_for_a_producer_that_starts_later(bc_dir):
    got = []
    t = threading.Thread(
        target=lambda: got.extend(batchcast.Consumer("later", connect_timeout=30, format="numpy")),
        daemon=True,
    )
    t.start()
    p = batchcast.Producer([np.arange(4)], "later")
    p.run(epochs=1)
    t.join(30)
    assert len(got) == 1 and list(got[0]) == [0, 1, 2, 3]


def test_name_in_use_names_the_holder(bc_dir):
    with batchcast.Producer([np.zeros(1)], "taken"):
        with pytest.raises(batchcast.NameInUse) as e:
            batchcast.Producer([np.zeros(1)], "taken")
        assert e.value.name == "taken" and e.value.pid is not None
    batchcast.Producer([np.zeros(1)], "taken").close()  # free again once closed


def test_invalid_arguments_are_value_errors(bc_dir):
    with pytest.raises(batchcast.InvalidArgument, match="invalid producer name"):
        batchcast.Producer([np.zeros(1)], "no/slash")
    with pytest.raises(ValueError, match="window must be at least 1"):
        batchcast.Producer([np.zeros(1)], "w", window=0)
    with batchcast.Producer([np.zeros(1)], "args", slot_size=4096):
        with pytest.raises(ValueError, match="unknown join policy"):
            batchcast.Consumer("args", join="sometimes")
        with pytest.raises(batchcast.InvalidArgument, match="batch_size must be at least 1"):
            batchcast.Consumer("args", batch_size=0)
        with pytest.raises(batchcast.InvalidArgument, match="connect_timeout"):
            batchcast.Consumer("args", connect_timeout=-1)
        with pytest.raises(batchcast.InvalidArgument, match="format"):
            batchcast.Consumer("args", format="jax")
        with pytest.raises(batchcast.InvalidArgument, match="device"):
            batchcast.Consumer("args", format="numpy", device="cuda:0")
        if not torch.cuda.is_available():
            with pytest.raises(batchcast.InvalidArgument, match="torch.cuda.is_available"):
                batchcast.Consumer("args", device="cuda:0")
    with pytest.raises(TypeError, match="iterator"):
        batchcast.Producer(iter([np.zeros(1)]), "it")


def test_len_is_a_type_error_when_the_producer_does_not_know(bc_dir):
    class NoLen:
        def __iter__(self):
            yield np.arange(4)

    with batchcast.Producer(NoLen(), "nolen", slot_size=4096) as p:
        assert p.samples_per_epoch is None
        c = batchcast.Consumer("nolen")
        with pytest.raises(TypeError, match="samples_per_epoch="):
            len(c)
        c.close()


def test_a_new_epoch_after_the_producer_finished_raises_producer_finished(bc_dir):
    p = batchcast.Producer([np.arange(4), np.arange(4, 8)], "fin", samples_per_epoch=8,
                           slot_size=4096)
    c = batchcast.Consumer("fin", format="numpy")
    t = run_in_thread(p, epochs=1)
    assert [list(b) for b in c] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    t.join(10)
    it = iter(c)  # claims nothing yet: the epoch is claimed by the first next()
    with pytest.raises(batchcast.ProducerFinished, match="served all its epochs") as e:
        next(it)
    assert e.value.reason == "finished" and e.value.name == "fin"
    # Both ways to serve for as long as trainers read: the producer may be
    # Python's or `batchcast serve`, and the consumer cannot tell which.
    assert "run() (no epochs=)" in str(e.value) and "run(forever=True)" in str(e.value)
    assert "`batchcast serve` with --epochs 0" in str(e.value)
    with pytest.raises(batchcast.ProducerFinished):
        iter(c)  # now known: iter() itself raises


def test_no_consumers_within_idle_timeout(bc_dir):
    p = batchcast.Producer([np.arange(4)], "alone", idle_timeout=0.2)
    with pytest.raises(batchcast.NoConsumers, match="no consumer attached within 0.2 s"):
        p.run()
    assert p.closed


def test_a_batch_larger_than_the_slot(bc_dir):
    p = batchcast.Producer([np.zeros(1 << 20, np.uint8)], "big", slot_size=8192,
                           wait_for_consumers=False)
    with pytest.raises(batchcast.BatchTooLarge, match=r"slot_size=\d+") as e:
        p.run(epochs=1)
    assert e.value.needed > e.value.slot_size >= 8192


def test_a_wrong_samples_per_epoch_warns_after_the_epoch(bc_dir):
    p = batchcast.Producer([np.arange(4)] * 3, "warn", samples_per_epoch=10,
                           wait_for_consumers=False)
    with pytest.warns(RuntimeWarning, match="published 12 samples in epoch 0"):
        p.run(epochs=1)


def test_close_from_another_thread_ends_a_blocked_publish(bc_dir):
    p = batchcast.Producer([np.arange(4)] * 100, "blocked", window=2, slot_size=4096)
    c = batchcast.Consumer("blocked", format="numpy")  # attached, never reads: the window fills
    t = run_in_thread(p)
    while p.status()["published"] < 2:
        time.sleep(0.01)  # polling a figure, not synchronising on time
    p.close()
    t.join(5)
    assert not t.is_alive()
    assert isinstance(t.errors[0], batchcast.UsageError)
    c.close()


def test_producer_gone_has_the_name(bc_dir):
    assert issubclass(batchcast.ProducerGone, batchcast.BatchcastError)
    e = batchcast.ProducerGone("x")
    e.name = "cifar"
    assert e.name == "cifar"


def consume_in_thread(name: str, loops: int) -> threading.Thread:
    """A consumer looping `loops` epochs; t.errors has what it raised, t.batches
    the batches of each loop."""
    errors: list = []
    batches: list = []

    def consume() -> None:
        try:
            c = batchcast.Consumer(name, connect_timeout=60, format="numpy")
            for _ in range(loops):
                batches.append(sum(1 for _ in c))
        except BaseException as e:  # reported by the test
            errors.append(e)

    t = threading.Thread(target=consume, daemon=True)
    t.errors = errors  # type: ignore[attr-defined]
    t.batches = batches  # type: ignore[attr-defined]
    t.start()
    return t


def empty_error(epoch: int) -> str:
    return (rf"the loader yielded no batches in epoch {epoch}: it is empty \(a dataset of length 0, "
            r"or drop_last=True with fewer samples than batch_size\); give the Producer a loader "
            r"with at least one batch")


@pytest.mark.parametrize(
    "make_loader",
    [
        lambda: [],
        lambda: DataLoader(TensorDataset(torch.zeros(0, 2)), batch_size=4),
        lambda: DataLoader(TensorDataset(torch.zeros(3, 2)), batch_size=4, drop_last=True),
    ],
    ids=["empty-list", "dataset-of-0", "drop-last"],
)
def test_an_empty_loader_raises_at_once_and_its_waiting_consumer_gets_the_error(bc_dir, make_loader):
    """Regression: an empty loader published empty epochs at 100% CPU forever,
    and a consumer waiting for the first batch (which sizes the arena) hung."""
    p = batchcast.Producer(make_loader(), "empty", idle_timeout=60)
    c = consume_in_thread("empty", loops=1)
    assert p._native.wait_for_consumers(1, 60)  # the consumer waits for a first batch
    t = run_in_thread(p, epochs=None)
    t.join(30)  # bounds a hang only
    assert not t.is_alive(), "run() spins on an empty loader"
    [err] = t.errors
    assert isinstance(err, batchcast.InvalidArgument)
    assert re.search(empty_error(0), str(err)), err
    assert p.closed
    c.join(30)
    assert not c.is_alive(), "the consumer of an empty loader hangs"
    [got] = c.errors
    # Still waiting for its welcome (the first batch sizes the arena), it is
    # told why the producer stopped.
    assert isinstance(got, batchcast.ProducerFinished), repr(got)
    assert got.reason == "failed" and re.search(empty_error(0), str(got)), repr(got)


class ShrinkingLoader:
    """Two batches in its first epoch, none after: a loader whose length
    dropped to 0."""

    def __init__(self) -> None:
        self.epochs = 0

    def __len__(self) -> int:
        return 2 if self.epochs == 0 else 0

    def __iter__(self):
        self.epochs += 1
        if self.epochs == 1:
            yield np.arange(4)
            yield np.arange(4, 8)


def test_a_loader_that_becomes_empty_raises_in_that_epoch(bc_dir):
    p = batchcast.Producer(ShrinkingLoader(), "shrinks", batch_size=4, slot_size=4096,
                           idle_timeout=60)
    c = consume_in_thread("shrinks", loops=3)
    assert p._native.wait_for_consumers(1, 60)
    t = run_in_thread(p, epochs=None)
    t.join(30)
    assert not t.is_alive(), "run() spins on an empty epoch"
    [err] = t.errors
    assert isinstance(err, batchcast.InvalidArgument)
    assert re.search(empty_error(1), str(err)), err
    c.join(30)
    assert not c.is_alive(), "the consumer hangs after an empty epoch"
    assert c.batches[0] == 2  # the first epoch whole
    [got] = c.errors
    assert isinstance(got, batchcast.ProducerFinished) and got.reason == "failed", repr(got)
    assert re.search(empty_error(1), str(got)), got
