"""Prefetch of augmented batches (`Consumer(transform=..., transform_prefetch=True)`):
while the loop works on batch k, batch k+1 is augmented on a background
thread; the stream reads exactly as without it. Real producers (`batchcast
serve --decode-only`, as test_augment.py starts them)."""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import threading
import time
from collections import Counter

import pytest

import batchcast
from batchcast import transforms as T
from test_augment import BATCH, CLASSES, PER_CLASS, connect, dataset, serve  # noqa: F401 (fixtures)

torch = pytest.importorskip("torch")

SAMPLES = CLASSES * PER_CLASS


def crop():
    return T.Compose([T.RandomResizedCrop(24, scale=(0.3, 1.0)), T.RandomHorizontalFlip()])


def wait_published(batchcast_bin, producer, name, n, timeout=60):
    """Polls `batchcast status` until the producer `name` has published `n`
    batches, or exited having published all (so that a consumer's first
    batch finds the next one there, and prefetches it)."""
    deadline = time.monotonic() + timeout
    while producer.poll() is None:
        out = subprocess.run([batchcast_bin, "status", name, "--json"], capture_output=True, text=True)
        reports = json.loads(out.stdout) if out.returncode == 0 else []
        if reports and reports[0]["published"] >= n:
            return
        assert time.monotonic() < deadline, f"{name}: not {n} batches published in {timeout} s: {out}"
        time.sleep(0.05)


def read_epochs(c, epochs):
    """[(images, labels, epoch)] for `epochs` loops."""
    out = []
    for _ in range(epochs):
        images, labels = [], []
        for x, y in c:
            images.append(x.clone())
            labels.extend(int(v) for v in y)
        out.append((images, labels, c.epoch))
    return out


def read_all(consumers, epochs):
    """Every consumer reads `epochs` epochs, concurrently (one thread each,
    as separate trainers would; a producer keeps only a window of batches)."""
    results = [None] * len(consumers)
    errors = []

    def run(i):
        try:
            results[i] = read_epochs(consumers[i], epochs)
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(consumers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "a consumer hung"
    if errors:
        raise errors[0]
    return results


def same_images(a, b):
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


def test_every_sample_once_and_the_same_pixels_with_prefetch_on_and_off(serve, batchcast_bin):
    p = serve("pf", consumers=4, epochs=2)
    on, off, on5, off5 = connect(
        dict(name="pf", transform=crop(), seed=7),
        dict(name="pf", transform=crop(), seed=7, transform_prefetch=False),
        dict(name="pf", batch_size=5, transform=crop(), seed=7),
        dict(name="pf", batch_size=5, transform=crop(), seed=7, transform_prefetch=False),
    )
    wait_published(batchcast_bin, p, "pf", 6)  # both epochs
    r_on, r_off, r_on5, r_off5 = read_all([on, off, on5, off5], epochs=2)
    assert on._executor is not None, "the prefetch path ran"
    assert off._executor is None and off5._executor is None, "no prefetch when it is off"
    want = Counter({k: PER_CLASS for k in range(CLASSES)})
    for run in (r_on, r_off, r_on5, r_off5):
        assert [e for _, _, e in run] == [0, 1]
        for images, labels, _ in run:
            assert Counter(labels) == want, "every sample once per epoch"
            assert sum(len(x) for x in images) == SAMPLES
    for (a, la, _), (b, lb, _) in zip(r_on + r_on5, r_off + r_off5):
        assert la == lb
        assert same_images(a, b), "prefetch changes no pixel"
    # Batch size 5 spans producer batches; the crops follow the samples.
    assert torch.equal(torch.cat(r_on[0][0]), torch.cat(r_on5[0][0]))
    stats = on.stats()
    assert stats["batches"] == 2 * (SAMPLES // BATCH)
    for c in (on, off, on5, off5):
        c.close()


def test_a_break_mid_epoch_drops_the_prefetched_batch_and_the_next_loop_reads_the_next_epoch(serve, batchcast_bin):
    p = serve("brk", consumers=2, epochs=3)
    on, off = connect(
        dict(name="brk", transform=crop(), seed=3),
        dict(name="brk", transform=crop(), seed=3, transform_prefetch=False),
    )
    wait_published(batchcast_bin, p, "brk", 2)
    for c in (on, off):
        for _ in c:
            break
    assert on._pending is not None and on._pending.future is not None, "the next batch was prefetched"
    assert on.stats()["batches"] == 1, "a prefetched batch is not counted as handed out"
    assert on.epoch == off.epoch == 0 and len(on) == len(off) == SAMPLES // BATCH
    r_on, r_off = read_all([on, off], epochs=2)
    assert on._pending is None
    for (a, la, ea), (b, lb, eb) in zip(r_on, r_off):
        assert ea == eb
        assert Counter(la) == Counter({k: PER_CLASS for k in range(CLASSES)})
        assert la == lb and same_images(a, b)
    assert [e for _, _, e in r_on] == [1, 2]
    for c in (on, off):
        with pytest.raises(batchcast.ProducerFinished):
            for _ in c:
                pass
        c.close()


class FailOn:
    """Wraps a consumer's augmentation: fails on its `n`-th call (from 0)."""

    def __init__(self, augment, n):
        self.augment, self.n, self.calls = augment, n, 0

    def __call__(self, *args):
        self.calls += 1
        if self.calls - 1 == self.n:
            raise batchcast.InvalidBatch("augmentation failed (test)")
        return self.augment(*args)


def test_an_augmentation_error_is_raised_in_order_and_the_next_loop_goes_on(serve, batchcast_bin):
    p = serve("err", consumers=1, epochs=2)
    (c,) = connect(dict(name="err", transform=crop(), seed=1))
    c._augment = FailOn(c._augment, 1)
    wait_published(batchcast_bin, p, "err", 2)
    got = []
    with pytest.raises(batchcast.InvalidBatch, match="augmentation failed"):
        for x, _ in c:
            got.append(x)
            # The failing batch is being augmented meanwhile; this one is
            # still handed out whole.
    assert len(got) == 1
    (images, labels, epoch), = read_epochs(c, 1)
    assert epoch == 1 and Counter(labels) == Counter({k: PER_CLASS for k in range(CLASSES)})
    c.close()


def prefetch_threads():
    return [t for t in threading.enumerate() if t.name.startswith("batchcast-prefetch")]


def test_close_and_garbage_collection_end_the_prefetch_thread_even_with_a_stopped_producer(serve, batchcast_bin):
    before = set(prefetch_threads())
    p = serve("gc", consumers=2, epochs=4)  # more than its window: it stays, blocked
    a, b = connect(dict(name="gc", transform=crop(), seed=1), dict(name="gc", transform=crop(), seed=2))
    wait_published(batchcast_bin, p, "gc", 2)
    for c in (a, b):
        for _ in c:
            break
        assert c._pending is not None and c._pending.future is not None
    threads = [t for t in prefetch_threads() if t not in before]
    assert len(threads) == 2
    assert p.poll() is None
    os.kill(p.pid, signal.SIGSTOP)  # a producer that answers nothing
    try:
        closer = threading.Thread(target=a.close)
        closer.start()
        closer.join(30)
        assert not closer.is_alive(), "close() hung"
        del b, c  # dropped without close(), as a script that ends may
        gc.collect()
        for t in threads:
            t.join(30)
            assert not t.is_alive(), "the prefetch thread outlived its consumer"
    finally:
        os.kill(p.pid, signal.SIGCONT)


def timed_run(spawn, name, prefetch):
    producer = spawn("produce_decoded", name=name, batches=12, epochs=2)
    trainer = spawn("consume_timed", name=name, prefetch=prefetch, epochs=2)
    result = json.loads(trainer.expect("timed ", timeout=120))
    producer.expect("done", timeout=60)
    assert result["samples"] == 2 * 12 * 32
    return sorted(result["waits"])


def test_a_slow_training_loop_waits_less_for_its_batches_with_prefetch(spawn):
    """Each step does 25 ms of CPU work; augmenting a batch (32 images,
    256 -> 224, normalised, one native thread) takes about as long. Without
    prefetch every next() augments; with it, the augmentation ran during
    the step. Medians, and a wide margin: a noisy 2-core machine may still
    slow the background thread."""
    off = timed_run(spawn, "slow-off", False)
    on = timed_run(spawn, "slow-on", True)
    med_off, med_on = off[len(off) // 2], on[len(on) // 2]
    print(f"median next(): {med_off * 1e3:.1f} ms without prefetch, {med_on * 1e3:.1f} ms with")
    assert med_off > 0.004, f"augmenting takes too little time to measure here ({med_off * 1e3:.2f} ms)"
    assert med_on < 0.5 * med_off, (
        f"median next() {med_on * 1e3:.1f} ms with prefetch, {med_off * 1e3:.1f} ms without"
    )


def test_stats_say_how_far_the_producer_is_ahead(serve, batchcast_bin):
    # `behind` (+ `lag`): batches of this epoch published and not yet read,
    # what `batchcast stalls --validate` waits out before measuring a reader.
    p = serve("ahead", consumers=1, epochs=1)
    (c,) = connect(dict(name="ahead"))
    wait_published(batchcast_bin, p, "ahead", SAMPLES // BATCH)  # the whole epoch
    it = iter(c)
    next(it)
    s = c.stats()
    assert s["behind"] + s["lag"] == SAMPLES // BATCH - 1, s
    assert len(list(it)) == SAMPLES // BATCH - 1
    s = c.stats()
    assert s["behind"] == 0 and s["lag"] == 0, s
    c.close()


def test_a_batch_that_arrives_during_the_step_is_augmented_ahead_and_nothing_waits_on_it(spawn):
    """The next batch is not there when the loop takes one: the prefetch
    thread waits for it, holding the native consumer only while it looks
    (stats() goes on meanwhile), and augments it as it arrives, before the
    loop asks for it."""
    producer = spawn("produce_gated", stdin=True, name="gated", batches=3)
    producer.expect("ready")
    c = batchcast.Consumer("gated", connect_timeout=30, transform=crop(), seed=1)
    where = []
    inner = c._augment

    def record(*args):
        where.append(threading.current_thread().name)
        return inner(*args)

    c._augment = record
    it = iter(c)
    _, labels = next(it)
    assert labels.tolist() == list(range(8))
    assert c._pending is not None and c._pending.waiting, "batch 1 is not published yet"
    assert not c._pending.future.done()
    done = threading.Event()
    stats = threading.Thread(target=lambda: (c.stats(), done.set()))
    stats.start()
    assert done.wait(10), "stats() waited for the prefetch thread's wait"
    producer.popen.stdin.write("go\n")
    producer.popen.stdin.flush()
    c._pending.future.result(timeout=30)  # augmented with no next() asked for
    assert where[-1].startswith("batchcast-prefetch"), where
    assert c.stats()["batches"] == 1, "a prefetched batch is not counted as handed out"
    _, labels = next(it)
    assert labels.tolist() == list(range(8, 16))
    producer.popen.stdin.write("go\n")
    producer.popen.stdin.flush()
    rest = [y.tolist() for _, y in it]
    assert rest == [list(range(16, 24))]
    assert len(where) == 3 and where[0] == threading.main_thread().name
    assert all(w.startswith("batchcast-prefetch") for w in where[1:]), where
    producer.expect("done")
    c.close()


def test_a_script_that_ends_while_the_prefetch_thread_waits_exits(spawn):
    """The producer holds its next batch forever (as a stopped one would):
    the prefetch thread's wait must not hold up the interpreter's exit."""
    producer = spawn("produce_gated", stdin=True, name="held", batches=3)
    producer.expect("ready")
    trainer = spawn("consume_one_and_leave", name="held")
    assert trainer.expect("took ") == "True", "the prefetch thread waits for batch 1"
    assert trainer.wait(30) == 0


def test_a_producer_killed_while_the_prefetch_thread_waits_is_reported_in_order(spawn):
    """SIGKILL: the producer says nothing more. The batch the loop holds
    stays valid, and the next() after it raises ProducerGone within the
    death watch's bound instead of waiting forever."""
    producer = spawn("produce_gated", stdin=True, name="killed", batches=3)
    producer.expect("ready")
    c = batchcast.Consumer("killed", connect_timeout=30, transform=crop(), seed=1)
    it = iter(c)
    images, labels = next(it)
    assert labels.tolist() == list(range(8))
    assert c._pending is not None and c._pending.waiting, "batch 1 is not published yet"
    producer.kill()
    assert producer.popen.wait(30) == -signal.SIGKILL
    got = threading.Event()
    errors = []

    def step():
        try:
            next(it)
        except BaseException as e:  # checked below
            errors.append(e)
        got.set()

    t = threading.Thread(target=step, daemon=True)
    t.start()
    assert got.wait(30), "next() waited on for a dead producer"
    assert len(errors) == 1 and isinstance(errors[0], batchcast.ProducerGone), errors
    assert "killed" in str(errors[0]), errors[0]
    assert images.shape[0] == 8 and torch.isfinite(images).all(), "the held batch was freed under the loop"
    c.close()
