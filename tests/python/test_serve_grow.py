"""`python -m batchcast.serve --watch --trigger`: images added to the
dataset's folder while epoch 1 is served join at epoch 2; the consumer's
``len()`` says so before epoch 2 begins, and the trigger is in
``consumer.triggers`` (and given to ``on_trigger``) once epoch 1's loop
has ended, before epoch 2's first batch."""

from __future__ import annotations

import json
import math
from collections import Counter

import batchcast
import numpy as np
import pytest
from test_serve_module import start

Image = pytest.importorskip("PIL.Image")

BATCH = 4


def _write_images(folder, n, seed):
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for i in range(n):
        img = rng.integers(0, 256, (20, 24, 3), dtype=np.uint8)
        Image.fromarray(img).save(folder / f"{seed}_{i}.jpg", quality=90)


def epochs_growing(consumer, root, epochs):
    """Reads ``epochs`` epochs of ``consumer``, yielding each epoch's number,
    ``len()`` before it and labels; once epoch 1's first batch is in, adds
    2 images to ``root``'s class_1 and a class ``a_new`` of 4."""
    for epoch in range(epochs):
        n = len(consumer)
        seen = []
        for _, lab in consumer:
            if epoch == 1 and not seen:
                # The producer is at most a window ahead: mid-epoch.
                _write_images(root / "class_1", 2, 10)
                _write_images(root / "a_new", 4, 11)
            seen.extend(int(x) for x in np.asarray(lab))
        yield epoch, n, seen


def test_new_images_join_at_the_next_epoch_with_one_trigger(tmp_path, bc_dir):
    root = tmp_path / "data"
    for c in range(3):
        _write_images(root / f"class_{c}", 7, c)
    args = ["--name", "grow", "--json", "--data", str(root), "--decode-only", "--store-size",
            "8", "--batch-size", str(BATCH), "--window", "2", "--epochs", "3", "--watch",
            "--trigger", "amount=5"]
    proc = start(args, bc_dir)
    fired = []
    try:
        listening = json.loads(proc.stdout.readline())
        assert listening["samples_per_epoch"] == 21, listening
        labels = []
        lens = []
        with batchcast.Consumer("grow", connect_timeout=30, on_trigger=fired.append) as c:
            for epoch, n, seen in epochs_growing(c, root, 3):
                lens.append(n)
                labels.append(seen)
                if epoch == 1:
                    # The trigger came with epoch 1's end.
                    assert [t.epoch for t in c.triggers] == [2]
                    assert fired == c.triggers
        out = [json.loads(line) for line in proc.stdout.read().splitlines()]
        assert proc.wait(60) == 0
    finally:
        proc.kill()
        proc.communicate()
    assert lens == [math.ceil(21 / BATCH)] * 2 + [math.ceil(27 / BATCH)]
    assert Counter(labels[0]) == Counter(labels[1]) == {0: 7, 1: 7, 2: 7}
    # The new class takes the next label, 3; the others keep theirs.
    assert Counter(labels[2]) == {0: 7, 1: 9, 2: 7, 3: 4}
    [t] = fired
    assert isinstance(t, batchcast.Trigger)
    assert (t.id, t.seq, t.epoch, t.samples) == ("amount=5", 1, 2, 6)
    assert t.first_arrival is not None and t.first_arrival <= t.last_arrival
    events = [e["event"] for e in out]
    assert events.count("trigger") == 1 and events.count("grew") == 1, out
