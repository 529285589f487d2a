"""In-place writes to batch tensors: private to the writer, complete under
any number of threads, and independent of other SIGSEGV handlers (the
consumer maps the arena copy-on-write; no signal handler is involved)."""

from __future__ import annotations

import signal

# 12 MiB of float32 per batch: 16 rows of 196,608 values (768 KiB, 192
# pages a row), big enough that torch splits a write across its threads.
BIG = dict(n=48 * 16, batch_size=16, width=196_608, names=False, window=8)


def test_fault1_threaded_inplace_writes_are_private_and_complete(spawn):
    # Fault 1: the old SIGSEGV handler remapped the whole slot on every
    # write fault, so a second thread faulting in the same slot threw away
    # the pages the first had already written (2-17 of 48 batches lost a
    # page with torch's default thread count).
    producer = spawn("produce_ids", name="ip", wait_for_consumers=3, **BIG)
    torch_writer = spawn("consume_inplace", name="ip", mode="torch", threads=4)
    thread_writer = spawn("consume_inplace", name="ip", mode="python", threads=4)
    reader = spawn("consume_inplace", name="ip", mode="none")
    for who in (torch_writer, thread_writer, reader):
        got = who.epochs(1, timeout=120)[0]
        assert got == {"batches": 48, "bad": []}, (who.args[2:], got)
        who.expect("done")
        assert who.wait() == 0
    producer.expect("done", timeout=120)


def test_fault2_faulthandler_after_consumer(spawn):
    # Fault 2: faulthandler.enable() after Consumer() replaced the
    # copy-on-write handler, and the first in-place write was a fatal
    # SIGSEGV.
    producer = spawn("produce_ids", name="fh", n=256, batch_size=64)
    consumer = spawn("consume_inplace_after_faulthandler", name="fh")
    consumer.expect("enabled")
    assert consumer.expect("checked") == "0"
    assert consumer.wait() == 0
    producer.expect("done")


def test_without_copy_on_write_an_inplace_write_is_sigsegv(spawn):
    # copy_on_write=False keeps the strict read-only mapping, as documented.
    producer = spawn("produce_ids", name="ro", n=256, batch_size=64)
    consumer = spawn("consume_inplace_after_faulthandler", name="ro", copy_on_write=False)
    consumer.expect("enabled")
    assert consumer.wait() == -signal.SIGSEGV
    assert any("Segmentation fault" in line for line in consumer.stderr)
    producer.kill()
