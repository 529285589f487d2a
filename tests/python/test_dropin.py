"""Drop-in use with real training libraries: PyTorch Lightning, Accelerate,
timm's loader code and a plain loop, each against a real producer process.

The producer serves a shuffled, seeded DataLoader; every trainer must see
exactly the epochs that DataLoader gives, in order, none skipped (Lightning
calls iter() once to check that a loader is iterable and drops the
iterator, which once cost a producer epoch).
"""

from __future__ import annotations

import pytest

from trainers import dataloader_epochs

pytest.importorskip("torch")


def _epochs(proc, count, timeout=120):
    return [e for e in proc.epochs(count, timeout)]


def _whole_epochs_then_done(trainer, producer, count, batches):
    """The trainer saw the DataLoader's first `count` epochs whole, each of
    `batches` batches, and fitted; then the producer finished."""
    got = _epochs(trainer, count)
    assert [e["ids"] for e in got] == dataloader_epochs(count)
    assert [e["len"] for e in got] == [batches] * count
    trainer.expect("fitted")
    producer.expect("done")


@pytest.mark.parametrize("producer_epochs", [3, None])
def test_two_lightning_trainers_get_three_full_epochs_each(spawn, producer_epochs):
    pytest.importorskip("lightning")
    opts = {"epochs": producer_epochs} if producer_epochs else {"idle_timeout": 5}
    # The trainers start first and wait for the producer (connect_timeout).
    trainers = [spawn("train_lightning", name="pl", epochs=3) for _ in range(2)]
    prod = spawn("produce_id_loader", name="pl", consumers=2, **opts)
    expected = dataloader_epochs(3)
    for t in trainers:
        got = _epochs(t, 3)
        assert [e["ids"] for e in got] == expected
        assert [e["len"] for e in got] == [5, 5, 5]
        # Lightning sets the sampler's epoch before each epoch.
        assert t.expect("fitted") == "2"
        assert t.wait(60) == 0
    prod.expect("done")


def test_one_process_fitting_twice_reads_consecutive_epochs(spawn):
    pytest.importorskip("lightning")
    prod = spawn("produce_id_loader", name="pl2", epochs=4)
    prod.expect("ready")
    t = spawn("train_lightning", name="pl2", epochs=2, fits=2)
    got = _epochs(t, 4)
    assert [e["ids"] for e in got] == dataloader_epochs(4)
    t.expect("fitted")
    prod.expect("done")


def test_accelerate_prepare_passes_the_consumer_through(spawn):
    pytest.importorskip("accelerate")
    prod = spawn("produce_id_loader", name="acc", epochs=3)
    prod.expect("ready")
    t = spawn("train_accelerate", name="acc", epochs=3)
    assert t.expect("prepared") == "Consumer True"
    _whole_epochs_then_done(t, prod, 3, 5)


def test_skip_first_batches_resumes_an_epoch_and_accelerates_is_refused_by_name(spawn):
    pytest.importorskip("accelerate")
    prod = spawn("produce_id_loader", name="skip", epochs=2)
    prod.expect("ready")
    t = spawn("train_accelerate_skip", name="skip")
    refused = t.expect("refused")
    assert "cannot be rebuilt as a torch DataLoader" in refused
    assert "consumer.skip_first_batches(n)" in refused
    got = _epochs(t, 2)
    expected = dataloader_epochs(2)
    # 5 batches of 8 an epoch: the first 3 skipped, the next epoch whole.
    assert [e["ids"] for e in got] == [expected[0][24:], expected[1]]
    assert [e["len"] for e in got] == [2, 5]
    t.expect("fitted")
    prod.expect("done")


def test_a_plain_loop_that_drops_an_iterator_skips_nothing(spawn):
    prod = spawn("produce_id_loader", name="plain", epochs=3)
    prod.expect("ready")
    t = spawn("train_plain", name="plain", epochs=3, batch_size=6)
    _whole_epochs_then_done(t, prod, 3, 7)


def test_timm_train_loop_drives_the_consumer_through_its_prefetch_loader(spawn):
    """timm's train.py reads loader.dataset (unguarded), sets the epoch on
    loader.batch_sampler or loader.sampler, and counts updates from
    len(loader), through timm's PrefetchLoader."""
    pytest.importorskip("timm")
    prod = spawn("produce_id_loader", name="timm", epochs=2, images=True)
    prod.expect("ready")
    t = spawn("train_timm", name="timm", epochs=2)
    got = _epochs(t, 2, timeout=240)
    assert [e["ids"] for e in got] == dataloader_epochs(2)
    assert [e["len"] for e in got] == [5, 5]
    # The last epoch set, the dataset's length, no workers in the trainer.
    assert t.expect("fitted", 60).split() == ["1", "40", "0"]
    prod.expect("done")
