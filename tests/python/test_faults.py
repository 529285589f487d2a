"""Faults from Python: killed consumers, killed producers, Ctrl-C, late
joiners. TensorSocket stalled everyone for 10 s on a dead consumer and hung
consumers forever when the producer exited."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import numpy as np
import pytest

import batchcast
from conftest import shm_entries


def test_a_consumer_killed_mid_epoch_holds_nobody_up_and_leaks_nothing(spawn, bc_dir):
    shm_before = shm_entries()
    producer = spawn("produce_ids", name="k", n=1000, batch_size=64, window=4, epochs=3,
                     wait_for_consumers=2)
    victim = spawn("consume_ids", stdin=True, name="k", hold_after=3)
    survivor = spawn("consume_ids", name="k", batch_size=48, epochs=3)
    victim.expect("holding")  # mid-epoch, holding its leases
    victim.kill()
    for e, got in enumerate(survivor.epochs(3)):
        assert got["epoch"] == e and got["ids"] == list(range(1000))
    survivor.expect("done")
    producer.expect("done")
    assert producer.wait() == 0 and survivor.wait() == 0
    assert os.listdir(bc_dir) == []  # socket and lock removed
    assert shm_entries() <= shm_before  # the arena is a memfd: nothing in /dev/shm


def test_a_paused_trainer_does_not_hold_up_one_that_joins_after_it_paused(spawn, batchcast_bin):
    """The victim stops reading (paused) with the producer blocked on its
    window; the epoch's first batches are gone from the slots, so a
    catch-up joiner waits for the next epoch. The producer must run ahead
    into lag slots for it, as it does for a trainer that was already
    following, instead of waiting for the paused one."""
    producer = spawn("produce_ids", name="pj", n=1000, batch_size=10, window=4, epochs=2)
    victim = spawn("consume_ids", stdin=True, name="pj", hold_after=3, epochs=2)
    victim.expect("holding")
    deadline = time.monotonic() + 30
    while True:  # until the producer reused the first slots and waits on the victim
        out = subprocess.run([batchcast_bin, "status", "pj", "--json"], capture_output=True, text=True)
        report = json.loads(out.stdout)[0] if out.returncode == 0 else {}
        if report.get("published", 0) > 4 and report.get("blocked_secs", 0) > 0:
            break
        assert time.monotonic() < deadline, f"the producer never blocked on the paused victim: {report}"
        time.sleep(0.05)
    late = spawn("consume_ids", name="pj", epochs=1)
    (got,) = late.epochs(1, timeout=60)
    assert got["epoch"] == 1 and got["ids"] == list(range(1000)), "the joiner read the next epoch whole"
    late.expect("done")
    victim.popen.stdin.close()  # resume: it still reads every sample of both epochs
    for e, v in enumerate(victim.epochs(2)):
        assert v["epoch"] == e and v["ids"] == list(range(1000))
    producer.expect("done")


def test_a_killed_consumer_with_a_forked_child_holds_nobody_up(spawn):
    """The child (a DataLoader worker, say) keeps copies of the consumer's
    sockets, so the producer never sees the connection close: it watches
    the consumer's process instead. With at most 2 batches of lag the
    survivor would otherwise wait for the victim forever."""
    producer = spawn("produce_ids", name="kf", n=1000, batch_size=64, window=4, epochs=3,
                     wait_for_consumers=2, max_lag="2batches")
    victim = spawn("consume_ids", stdin=True, name="kf", hold_after=3, fork_holder=True)
    survivor = spawn("consume_ids", name="kf", batch_size=48, epochs=3)
    victim.expect("holding")
    children = victim.children()
    assert len(children) == 1, children
    spawn.adopt(children)
    victim.kill()
    for e, got in enumerate(survivor.epochs(3, timeout=30)):
        assert got["epoch"] == e and got["ids"] == list(range(1000))
    survivor.expect("done")
    producer.expect("done")
    assert producer.wait() == 0 and survivor.wait() == 0
    os.kill(children[0], 0)  # the child, and its copy of the socket, lived on throughout


@pytest.mark.parametrize("case", ["plain", "forked-child", "dataloader-workers"])
def test_a_killed_producer_is_reported_at_once(spawn, case):
    # Children forked from the producer (DataLoader workers) hold copies of
    # its sockets and can outlive it: the consumer then learns of the death
    # from the producer process itself (a pidfd), not from its socket.
    if case == "dataloader-workers":
        producer = spawn("produce_training", name="pk", epochs=1000, num_workers=2)
    else:
        producer = spawn("produce_ids", name="pk", n=10**6, batch_size=64, epochs=1000,
                         fork_holder=case == "forked-child")
    consumer = spawn("consume_any", name="pk")
    consumer.expect("batch")
    spawn.adopt(producer.children())
    killed_at = time.monotonic()
    producer.kill(signal.SIGKILL)
    gone_at = float(consumer.expect("gone").split()[0])
    assert gone_at - killed_at < 1.0, f"ProducerGone {gone_at - killed_at:.2f} s after the kill"
    assert consumer.wait() == 0


def test_the_cli_consumer_sees_a_killed_producer_whose_forked_child_holds_its_socket(spawn, batchcast_bin):
    # The core consumer watches the producer's process itself, so
    # `batchcast consume` is told as the Python consumer is.
    producer = spawn("produce_ids", name="pkc", n=10**6, batch_size=64, epochs=1000, fork_holder=True)
    producer.expect("ready")
    with subprocess.Popen([batchcast_bin, "consume", "pkc"], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as cli:
        try:
            first = json.loads(cli.stdout.readline())
            assert first["event"] == "connected", first
            spawn.adopt(producer.children())
            killed_at = time.monotonic()
            producer.kill(signal.SIGKILL)
            code = cli.wait(30)
            took = time.monotonic() - killed_at
            rest = cli.stdout.read().splitlines()
            stderr = cli.stderr.read()
        finally:
            if cli.poll() is None:
                cli.kill()
    assert code == 3, (code, rest[-3:], stderr)
    error = json.loads(rest[-1])
    assert error["event"] == "error" and error["kind"] == "producer_gone", error
    assert took < 2.0, f"the CLI consumer saw the death {took:.2f} s after the kill"


def test_ctrl_c_in_the_producer_mid_epoch_raises_in_the_loop_in_progress(spawn):
    # 15625 batches an epoch: Ctrl-C comes in the middle of the first.
    producer = spawn("produce_ids", name="int", n=10**6, batch_size=64, epochs=1000)
    consumer = spawn("consume_ids", name="int", say_batches=True)
    consumer.expect("batch")
    producer.kill(signal.SIGINT)
    producer.expect("interrupted")
    assert producer.wait() == 0
    # Not a clean end of an epoch that is incomplete (a trainer would count
    # it done): the loop in progress raises.
    assert consumer.expect("finished") == "interrupted"
    why = consumer.expect("why")
    assert "interrupted (Ctrl-C)" in why and "in the middle of epoch 0" in why and "of 15625 batches" in why, why
    assert not any(line.startswith("epoch ") for line in consumer.seen), consumer.seen[-3:]
    assert consumer.wait() == 0



def test_ctrl_c_interrupts_a_consumer_waiting_for_data(spawn):
    # A producer that never publishes: the consumer waits for its welcome.
    producer = spawn("produce_ids", name="idle", n=64, batch_size=64, epochs=1,
                     wait_for_consumers=2)
    consumer = spawn("wait_then_report_interrupt", name="idle")
    consumer.expect("waiting")
    consumer.kill(signal.SIGINT)
    assert float(consumer.expect("interrupted after")) < 1.0
    assert consumer.wait() == 0


@pytest.mark.parametrize("join", ["catch-up", "next-epoch", "now"])
def test_a_late_joiner_under_each_join_policy(spawn, join):
    producer = spawn("produce_ids", name="late", n=1000, batch_size=64, window=8, epochs=3)
    first = batchcast.Consumer("late", connect_timeout=30, format="numpy")
    it = iter(first)
    held = next(it)  # epoch 0 begins; holding its first batch keeps it in the window
    assert held["id"][0] == 0
    late = spawn("consume_ids", name="late", join=join)
    late.expect("connected")
    del held
    for _ in it:
        pass
    for _ in range(2):
        for _ in first:
            pass
    first.close()
    seen = late.epochs(3 if join != "next-epoch" else 2)
    assert late.expect("finished") == "finished"
    if join == "catch-up":
        assert [e["epoch"] for e in seen] == [0, 1, 2]
        assert all(e["ids"] == list(range(1000)) and not e["partial"] for e in seen)
    elif join == "next-epoch":
        assert [e["epoch"] for e in seen] == [1, 2]
        assert all(e["ids"] == list(range(1000)) for e in seen)
    else:
        assert [e["epoch"] for e in seen] == [0, 1, 2]
        part = seen[0]
        assert part["partial"] and 0 < part["ids"][0] < 1000 and part["ids"][0] % 64 == 0
        assert part["ids"] == list(range(part["ids"][0], 1000))
        assert part["batches"] == part["len"] == len(range(part["ids"][0], 1000, 64))
        assert all(e["ids"] == list(range(1000)) and not e["partial"] for e in seen[1:])
        assert part["len_after"] == seen[1]["len"] == 16
    producer.expect("done")
    assert producer.wait() == 0


def test_a_consumer_closed_while_keeping_a_batch_holds_nobody_up(spawn):
    producer = spawn("produce_ids", name="leave", n=1000, batch_size=64, window=4, epochs=3,
                     wait_for_consumers=2)
    other = spawn("consume_ids", name="leave", epochs=3)
    c = batchcast.Consumer("leave", connect_timeout=30, format="numpy")
    for kept in c:
        break  # the loop variable outlives the loop, as it does in scripts
    c.close()
    for e, got in enumerate(other.epochs(3)):
        assert got["epoch"] == e and got["ids"] == list(range(1000))
    producer.expect("done")
    assert producer.wait() == 0
    assert list(kept["id"]) == list(range(64))  # still valid after close


def test_fault4_a_stuck_consumer_is_evicted_and_its_kept_batch_never_changes(spawn):
    # Issue 10, fault 4: one stuck trainer must not freeze the others. Past
    # the lag budget, lag_policy="evict" drops it after stall_timeout; the
    # batch it still holds stays out of rotation, and its next read raises
    # FellBehind with the budget and the ways out.
    producer = spawn("produce_ids", name="lag", n=64 * 50, batch_size=64, window=4, epochs=3,
                     wait_for_consumers=2, max_lag="4batches", lag_policy="evict",
                     stall_timeout=0.5)
    victim = spawn("consume_stall", name="lag")
    other = spawn("consume_ids", name="lag", epochs=3)
    victim.expect("stalled")
    for e, got in enumerate(other.epochs(3)):
        assert got["epoch"] == e and got["ids"] == list(range(64 * 50))
    other.expect("done")
    producer.expect("done")
    victim.kill(signal.SIGUSR1)
    result = json.loads(victim.expect("fell behind"))
    assert result["unchanged"], "the evicted consumer's kept batch was rewritten"
    assert result["budget"] == 4 and result["behind"] >= 4
    for needle in ("max_lag", "lag_policy", "rejoin"):
        assert needle in result["message"]
    assert victim.wait() == 0 and other.wait() == 0 and producer.wait() == 0


def test_fault4_an_evicted_consumer_that_asked_to_rejoin_gets_whole_epochs_after(spawn):
    producer = spawn("produce_ids", name="rj", n=64 * 50, batch_size=64, window=4, epochs=3,
                     wait_for_consumers=2, max_lag="4batches", lag_policy="evict",
                     stall_timeout=0.5)
    victim = spawn("consume_stall", name="rj", on_evict="rejoin")
    other = spawn("consume_ids", name="rj", epochs=3)
    victim.expect("stalled")
    for e, got in enumerate(other.epochs(1)):
        assert got["ids"] == list(range(64 * 50))
    victim.kill(signal.SIGUSR1)
    result = json.loads(victim.expect("read on"))
    assert result["unchanged"]
    assert result["short"] < 50  # epoch 0 ended short, with a warning
    # The warning is a record of the `batchcast` logger, not a raw line on stderr.
    [warning] = result["logged"]
    assert warning.startswith("WARNING: ") and "evicted from epoch 0" in warning, warning
    assert "the epoch ends short after" in warning, warning
    assert "rejoins at the next epoch" in warning, warning
    assert "batchcast: warning" not in "".join(victim.stderr)
    assert result["epochs"], "no whole epoch after the rejoin"
    assert all(ids == list(range(64 * 50)) for ids in result["epochs"])
    other.epochs(2)
    assert victim.wait() == 0 and other.wait() == 0 and producer.wait() == 0


def test_a_loader_that_fails_on_its_first_batch_is_reported_with_its_cause(bc_dir):
    """The consumer is attached before the producer has a first batch (so
    before it has an arena to welcome it with). The loader's error reaches
    it as ProducerFinished naming the cause, not as a crash."""
    import threading

    torch = pytest.importorskip("torch")

    class Corrupt(torch.utils.data.Dataset):
        def __len__(self):
            return 40

        def __getitem__(self, i):
            # Fails once the consumer is attached (the producer's own wait).
            assert p._native.wait_for_consumers(1, 30), "the consumer never attached"
            raise OSError(f"corrupt image file_{i}.jpg")

    p = batchcast.Producer(torch.utils.data.DataLoader(Corrupt(), batch_size=8), "first-fail")
    got = []

    def consume():
        try:
            batchcast.Consumer("first-fail", connect_timeout=30)
        except Exception as e:  # checked below
            got.append(e)

    t = threading.Thread(target=consume)
    t.start()
    with pytest.raises(OSError, match="corrupt image file_0.jpg"):
        p.run()
    t.join(30)
    assert not t.is_alive(), "the consumer hung"
    (e,) = got
    assert isinstance(e, batchcast.ProducerFinished), repr(e)
    assert e.reason == "failed" and e.name == "first-fail"
    assert "loader failed" in str(e) and "corrupt image file_0.jpg" in str(e), str(e)
