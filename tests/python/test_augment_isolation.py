"""Decode once, augment per trainer: one trainer's failure does not touch
the others. One `batchcast serve --decode-only` producer, two trainer
processes with their own transforms; one fails mid-epoch (raises out of
its loop, or is SIGKILLed holding a batch) and the other still reads every
sample of every epoch exactly once, with the very crops it gets alone."""

from __future__ import annotations

import signal
from collections import Counter

import pytest

from test_augment import BATCH, CLASSES, PER_CLASS, dataset, serve  # noqa: F401 (fixtures)

pytest.importorskip("torch")
pytest.importorskip("torchvision")

EPOCHS = 4  # 12 producer batches: more than the window of 8, so a stuck
# trainer would hold the other back until it is gone
FAIL_AT = 4  # the second batch of the second epoch


def solo_run(serve, spawn, name):
    """What the healthy trainer reads alone: [(labels, digests)] per epoch."""
    p = serve(name, consumers=1, epochs=EPOCHS)
    t = spawn("consume_augmented", name=name, seed=11, epochs=EPOCHS)
    epochs = t.epochs(EPOCHS, timeout=120)
    t.expect("done", timeout=60)
    assert t.wait() == 0
    p.wait(60)
    return epochs


@pytest.mark.parametrize("failure", ["raise", "sigkill"])
def test_a_trainer_that_fails_mid_epoch_does_not_touch_the_other(serve, spawn, failure):
    alone = solo_run(serve, spawn, f"solo-{failure}")
    want = Counter({k: PER_CLASS for k in range(CLASSES)})
    for e in alone:
        assert Counter(e["labels"]) == want
        assert len(e["digests"]) == CLASSES * PER_CLASS // BATCH

    name = f"pair-{failure}"
    p = serve(name, consumers=2, epochs=EPOCHS)
    failing = spawn(
        "consume_augmented", name=name, seed=5, epochs=EPOCHS, fail_at=FAIL_AT,
        fail="raise" if failure == "raise" else "hold", size=16,
    )
    healthy = spawn("consume_augmented", name=name, seed=11, epochs=EPOCHS)
    if failure == "sigkill":
        failing.expect("holding", timeout=120)
        failing.kill(signal.SIGKILL)
        assert failing.wait() == -signal.SIGKILL
    else:
        assert failing.wait(120) == 1
        err = "".join(failing.stderr)
        assert "ValueError" in err and "larger than input image size" in err, err[-2000:]
    got = healthy.epochs(EPOCHS, timeout=120)
    healthy.expect("done", timeout=60)
    assert healthy.wait() == 0
    assert [e["epoch"] for e in got] == list(range(EPOCHS))
    for g, a in zip(got, alone):
        assert Counter(g["labels"]) == want, "every sample once per epoch"
        assert g["labels"] == a["labels"]
        assert g["digests"] == a["digests"], "the same crops as alone with its seed"
    assert p.wait(60) == 0
    # The failing trainer read its first epoch whole, then failed in the second.
    lines = list(failing.seen)
    while (line := failing.lines.get(timeout=30)) is not None:
        lines.append(line)
    assert [line.split()[0] for line in lines] == ["connected", "epoch"] + (
        ["holding"] if failure == "sigkill" else []
    )
