"""The producer's lifecycle in a sweep: by default it serves for as long as
any trainer reads, trainers come and go with their own epoch counts, and it
ends after an idle period once they are all gone (crashed or finished)."""

from __future__ import annotations

import json
import signal
import time

import pytest

pytest.importorskip("torch")


def test_a_trainer_that_starts_after_another_finished_gets_its_full_epochs(spawn):
    prod = spawn("produce_id_loader", name="sweep", idle_timeout=30)  # the late trainer must come within it, even on a loaded machine
    prod.expect("ready")
    late = spawn("train_plain", stdin=True, name="sweep", epochs=2, wait_stdin=True)
    late.expect("started")
    first = spawn("train_plain", name="sweep", epochs=2)
    for e in first.epochs(2, 120):
        assert sorted(e["ids"]) == list(range(40)) and e["len"] == 5
    first.expect("fitted")
    assert first.wait(60) == 0
    late.popen.stdin.write("go\n")
    late.popen.stdin.flush()
    for e in late.epochs(2, 60):
        assert sorted(e["ids"]) == list(range(40)) and e["len"] == 5
    late.expect("fitted")
    assert late.wait(60) == 0
    assert prod.expect("done", 60) != "0"


def test_a_producer_whose_trainers_all_crash_ends_after_its_idle_period(spawn):
    trainer = spawn("consume_any", name="crash")  # waits for the producer to appear
    prod = spawn("produce_id_loader", name="crash", idle_timeout=1)
    trainer.expect("batch 3")
    trainer.kill(signal.SIGKILL)
    t0 = time.monotonic()
    prod.expect("done", 30)
    assert prod.wait(30) == 0
    assert time.monotonic() - t0 >= 1
    log = "".join(prod.stderr)
    assert "no consumer has been attached for 1 s" in log and "idle_timeout=" in log
    assert "forever=True" in log


def test_a_producer_no_trainer_ever_joins_raises_no_consumers(spawn):
    prod = spawn("produce_id_loader", name="nobody", idle_timeout=0.5)
    prod.expect("ready")
    assert "no consumer attached within 0.5 s" in prod.expect("noconsumers", 30)


def test_serving_forever_outlasts_the_idle_period(spawn):
    prod = spawn("produce_id_loader", name="ever", idle_timeout=0.3, forever=True)
    prod.expect("ready")
    time.sleep(1)  # several idle periods pass with no consumer: it must still serve
    t = spawn("train_plain", name="ever", epochs=1)
    (e,) = t.epochs(1, 120)
    assert sorted(e["ids"]) == list(range(40))
    assert prod.popen.poll() is None


def test_a_trainer_that_waited_in_vain_says_how_long_and_for_what(bc_dir):
    """Regression: a late trainer that waited its whole connect_timeout for a
    producer that had ended was told to "pass a connect timeout"."""
    import batchcast

    with pytest.raises(batchcast.ProducerNotFound) as e:
        batchcast.Consumer("ended", connect_timeout=0.3)
    msg = str(e.value)
    assert "within the 0.3 s connect timeout" in msg and str(bc_dir / "ended.sock") in msg
    assert "idle_timeout" in msg and "pass a connect timeout" not in msg


def test_a_closed_consumer_whose_last_batch_lives_on_lets_the_producer_go_idle(bc_dir):
    """After `for x in loader` the loop variable keeps the last batch alive,
    and close() must keep its memory valid. The consumer tells the producer
    it left: the producer sends it nothing more and, with nobody else
    attached, finishes after idle_timeout instead of loading epochs for
    nobody."""
    import threading

    import batchcast

    torch = pytest.importorskip("torch")
    data = torch.utils.data.TensorDataset(torch.arange(64))
    p = batchcast.Producer(torch.utils.data.DataLoader(data, batch_size=16), "left", idle_timeout=1)
    t = threading.Thread(target=p.run)
    t.start()
    c = batchcast.Consumer("left", connect_timeout=30)
    for (x,) in c:
        pass
    kept = x.clone()
    c.close()
    t.join(30)
    assert not t.is_alive(), f"run() still serves a closed consumer ({p.epoch} epochs so far)"
    assert p.epoch < 5, f"the producer loaded {p.epoch} epochs for a closed consumer"
    assert torch.equal(x, kept), "the kept batch changed"
    del x  # its lease goes; nothing to wait for
