"""The consumer's device plane (batchcast._plane) on the CPU stand-in
(``BATCHCAST_DEVICE_STAND_IN``): the deferred release of freed device
tensors behind a fence, the stand-in device and its fences, and the choice
of path with its one warning when the producer's device slots cannot be
used."""

from __future__ import annotations

import json
import signal
import threading
import warnings
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import torch

import batchcast
from batchcast import _device, _plane
from conftest import Proc
from test_device_transfers import GatedLoader, finish, ids_of, serve

# -- the stand-in device and its fences --------------------------------------


def test_the_stand_in_is_chosen_only_by_its_environment_variable(monkeypatch):
    monkeypatch.setenv(_device.STAND_IN_ENV, "2")
    dev = _device.open_device("cuda:1")
    assert isinstance(dev, _device.StandInDevice)
    assert dev.gpu == "cuda:1" and dev.stand_in and dev.torch_device == torch.device("cpu")
    assert "stand-in" in repr(dev)
    assert _device.open_device("cpu") is None
    monkeypatch.delenv(_device.STAND_IN_ENV)
    if not torch.cuda.is_available():
        with pytest.raises(batchcast.InvalidArgument, match="needs a GPU"):
            _device.open_device("cuda:1")


def test_a_stand_in_fence_completes_at_once_or_when_the_hold_ends():
    dev = _device.StandInDevice("cuda:0")
    assert dev.fence().done()
    with _device.hold():
        held = dev.fence()
        with _device.hold():
            inner = dev.fence()
        assert inner.done() and not held.done()
    assert held.done()
    held.wait()  # returns at once now


class Token:
    """Stands for ``take_released()``'s object: ``gone`` is set when the
    last reference to it is dropped (the leases going back)."""

    def __init__(self) -> None:
        self.gone = threading.Event()
        weakref.finalize(self, self.gone.set)


@pytest.fixture
def transfers() -> _device.Transfers:
    return _device.Transfers(_device.StandInDevice("cuda:0"))


def deferred(transfers: _device.Transfers) -> threading.Event:
    """Defers a fresh token; the test keeps only its ``gone`` event, so the
    transfers hold the only reference."""
    token = Token()
    transfers.defer(token)
    return token.gone


def test_a_deferred_token_goes_back_only_after_its_fence(transfers):
    with _device.hold():
        t = deferred(transfers)
        assert transfers.collect() == 1
        assert not t.is_set()
    assert transfers.collect() == 0
    assert t.is_set()


def test_deferred_tokens_go_back_in_the_order_their_fences_complete(transfers):
    outer = _device.hold()
    outer.__enter__()
    first = deferred(transfers)
    inner = _device.hold()
    inner.__enter__()
    second = deferred(transfers)
    with _device.hold():
        third = deferred(transfers)
    after = deferred(transfers)  # recorded under `inner` again
    inner.__exit__(None, None, None)
    assert transfers.collect() == 1  # second, third, after: their fences are done
    assert [t.is_set() for t in (first, second, third, after)] == [False, True, True, True]
    outer.__exit__(None, None, None)
    assert transfers.wait_oldest() and first.is_set()
    assert not transfers.wait_oldest()


def test_wait_oldest_waits_for_the_fence_of_a_deferred_token(transfers):
    gate = _device.hold()
    gate.__enter__()
    t = deferred(transfers)
    waiting = threading.Event()
    released = threading.Event()

    def wait() -> None:
        waiting.set()
        transfers.wait_all()
        released.set()

    waiter = threading.Thread(target=wait)
    waiter.start()
    assert waiting.wait(30)
    assert not t.is_set() and not released.is_set()
    gate.__exit__(None, None, None)
    waiter.join(30)
    assert released.is_set() and t.is_set()


def test_tokens_deferred_from_several_threads_all_go_back_after_their_fences(transfers):
    tokens: list[threading.Event] = []
    lock = threading.Lock()
    start = threading.Barrier(8)

    def work() -> None:
        start.wait()
        for _ in range(200):
            t = deferred(transfers)
            with lock:
                tokens.append(t)
            transfers.collect()

    with _device.hold():
        threads = [threading.Thread(target=work) for _ in range(8)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(60)
        assert transfers.in_flight() == 1600
        assert not any(t.is_set() for t in tokens)
    assert transfers.collect() == 0
    assert all(t.is_set() for t in tokens)


# -- the choice of path -------------------------------------------------------


class FakeNative:
    """What ``_native.Consumer.attach_device`` answers."""

    def __init__(self, answer: dict) -> None:
        self.answer = answer
        self.asked: list[Any] = []

    def attach_device(self, device: str, access: str) -> dict:
        self.asked.append((device, access))
        return self.answer


SLOTS = {"uuid": "GPU-0", "ordinal": 0, "addr": 4096, "len": 8192, "read_only_enforced": None,
         "backend": "stand-in"}


@pytest.mark.parametrize("copy_on_write,path", [(True, _plane.PRIVATE), (False, _plane.ZERO_COPY)])
def test_a_served_gpu_takes_the_device_slots_without_a_warning(copy_on_write, path):
    native = FakeNative({"path": "device", "reason": None, "slots": SLOTS})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        chosen = _plane.choose(native, _device.StandInDevice("cuda:0"), "torch", None, copy_on_write, "p")
    assert chosen.on_device and chosen.stats() == {
        "device_path": path, "device_path_reason": None, "device_slots": SLOTS}
    assert native.asked == [("cuda:0", "read-only")]


@pytest.mark.parametrize(
    "fmt,transform,reason",
    [("torch", None, "serves no GPU"), ("numpy", None, "format='numpy'"),
     ("torch", object(), "transform= is given")],
    ids=["not-served", "numpy", "transform"],
)
def test_each_fallback_warns_once_with_its_reason(fmt, transform, reason):
    native = FakeNative({"path": "host", "reason": "the producer serves no GPU", "slots": None})
    with pytest.warns(RuntimeWarning, match=reason) as caught:
        chosen = _plane.choose(native, _device.StandInDevice("cuda:0"), fmt, transform, True, "p")
    assert len(caught) == 1
    assert chosen.path == _plane.HOST and reason in chosen.reason and chosen.slots is None
    assert native.asked == ([] if transform is not None or fmt != "torch" else [("cuda:0", "read-only")])


def test_a_cpu_consumer_has_no_device_path():
    assert _plane.choose(None, None, "torch", None, True, "p").stats() == {
        "device_path": None, "device_path_reason": None, "device_slots": None}


# -- a real producer that serves no GPU ---------------------------------------


def test_a_stand_in_gpu_consumer_of_a_cpu_producer_copies_and_says_why(bc_dir, monkeypatch):
    monkeypatch.setenv(_device.STAND_IN_ENV, "2")
    loader = GatedLoader(n=40, batch_size=8)
    producer, thread = serve(loader, "hostpath", window=2, idle_timeout=0.5)
    with pytest.warns(RuntimeWarning, match="serves no GPU") as caught:
        c = batchcast.Consumer("hostpath", device="cuda:0", connect_timeout=30)
    assert len(caught) == 1 and caught[0].filename == __file__  # where the consumer was made
    with c:
        stats = c.stats()
        assert stats["device_path"] == "host copy" and "serves no GPU" in stats["device_path_reason"]
        assert stats["device_slots"] is None and stats["device"] == "cuda:0 (stand-in)"
        assert "stand-in" in repr(c) and "host copy" in repr(c)
        with pytest.raises(batchcast.InvalidArgument, match="not a device name"):
            c._native.attach_device("the-first-gpu")
        with pytest.raises(batchcast.InvalidArgument, match="read-only"):
            c._native.attach_device("cuda:0", "read-write")
        got = []
        for b in c:
            got += ids_of(b)
        assert got == list(range(40))
    finish(thread, idle=True)


# -- real processes: a producer that mirrors its arena on stand-in GPUs -------

N = 1000


@pytest.fixture(autouse=True)
def two_stand_ins(monkeypatch):
    """Two stand-in GPUs, for this process and the ``plane`` fixture's."""
    monkeypatch.setenv(_device.STAND_IN_ENV, "2")


def mirrored(plane, name: str, **options: Any) -> Proc:
    p = plane("produce_mirrored", name=name, n=N, **options)
    p.expect("ready")
    return p


def report(p: Proc) -> dict:
    return json.loads(p.expect("plane ", timeout=120))


def test_two_consumers_read_the_same_device_slots_without_a_copy(plane):
    producer = mirrored(plane, "zero", wait_for_consumers=2, window=3)
    trainers = [plane("consume_on_device", name="zero", n=N, copy_on_write=False) for _ in range(2)]
    reports = [report(t) for t in trainers]
    addrs = set()
    for r in reports:
        assert (r["ids"], r["wrong"], r["warnings"]) == (list(range(N)), 0, []), r
        assert r["path"] == "device slots (zero copy)" and r["reason"] is None
        assert r["device"] == "cuda:0 (stand-in)"
        assert r["inside"] == r["arrays"] > 0, "a batch of one slot is not in the mapped device slots"
        addrs.add(r["slots"]["uuid"])
    assert len(addrs) == 1  # both on the one stand-in GPU the producer serves
    producer.expect("done")


def test_with_copy_on_write_an_in_place_write_reaches_no_other_consumer(plane):
    producer = mirrored(plane, "cow", wait_for_consumers=2, window=3)
    writer = plane("consume_on_device", name="cow", n=N, write=True)
    reader = plane("consume_on_device", name="cow", n=N)
    for r in (report(writer), report(reader)):
        assert (r["ids"], r["wrong"], r["warnings"]) == (list(range(N)), 0, []), r
        assert r["path"] == "device slots (private copy)"
        assert r["inside"] == 0, "a cloned batch still lies in the shared device slots"
    producer.expect("done")


def test_the_consumers_gpu_is_found_by_uuid_whatever_its_cuda_visible_devices(plane, monkeypatch):
    """The producer serves stand-in GPU 0 (as it sees them); consumers that
    see the GPUs the other way round (CUDA_VISIBLE_DEVICES=1,0) find it as
    their cuda:1, and their cuda:0 is not served."""
    producer = mirrored(plane, "cvd", wait_for_consumers=2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    on = plane("consume_on_device", name="cvd", n=N, device="cuda:1", copy_on_write=False)
    off = plane("consume_on_device", name="cvd", n=N, device="cuda:0")
    r_on, r_off = report(on), report(off)
    assert r_on["path"] == "device slots (zero copy)" and r_on["ids"] == list(range(N)), r_on
    assert (r_on["slots"]["uuid"], r_on["slots"]["ordinal"]) == (r_on["slots"]["uuid"][:-12] + "0" * 12, 1)
    assert r_off["path"] == "host copy" and r_off["ids"] == list(range(N)), r_off
    assert "does not serve cuda:0" in r_off["reason"] and r_on["slots"]["uuid"] in r_off["reason"]
    producer.expect("done")


def test_a_device_backend_that_cannot_start_leaves_the_host_path_and_says_why(plane, monkeypatch):
    producer = mirrored(plane, "nobackend")
    monkeypatch.setenv(_device.STAND_IN_ENV, "many")
    r = report(plane("consume_on_device", name="nobackend", n=N))
    assert (r["ids"], r["path"]) == (list(range(N)), "host copy"), r
    assert "no device backend here" in r["reason"] and len(r["warnings"]) == 1, r
    producer.expect("done")


def test_an_in_place_write_to_zero_copy_device_slots_faults_on_the_stand_in(plane):
    """The stand-in maps the slots read-only and enforces it
    (``read_only_enforced``): copy_on_write=False is for code that never
    writes its inputs in place."""
    producer = mirrored(plane, "ro")
    writer = plane("consume_on_device", name="ro", n=N, copy_on_write=False, write=True)
    assert writer.wait() == -signal.SIGSEGV
    producer.reap()


def test_a_consumer_on_a_gpu_the_producer_does_not_serve_copies_and_says_why(plane):
    producer = mirrored(plane, "other", device="cuda:0")
    r = report(plane("consume_on_device", name="other", n=N, device="cuda:1"))
    assert (r["ids"], r["wrong"], r["inside"]) == (list(range(N)), 0, 0), r
    assert r["path"] == "host copy" and r["slots"] is None
    assert len(r["warnings"]) == 1 and r["reason"] in r["warnings"][0]
    assert "does not serve" in r["reason"] or "serves" in r["reason"], r["reason"]
    producer.expect("done")


@pytest.mark.parametrize("batch_size", [50, 48, 150], ids=["divides", "divides-not", "spans-slots"])
def test_every_batch_size_delivers_every_sample_once_on_the_device_plane(plane, batch_size):
    producer = mirrored(plane, "sizes", batch_size=100, epochs=2)
    r = report(plane("consume_on_device", name="sizes", n=N, batch_size=batch_size, epochs=2,
                     copy_on_write=False))
    assert (r["ids"], r["wrong"]) == (list(range(N)) * 2, 0), r
    assert r["path"] == "device slots (zero copy)"
    # Batches within one producer batch are on the device; assembled ones
    # are host memory, copied by the consumer.
    if batch_size == 50:
        assert r["inside"] == r["arrays"]
    else:
        assert r["inside"] < r["arrays"]
    producer.expect("done")


def test_a_killed_consumer_leaves_the_other_going(plane):
    producer = mirrored(plane, "kill", wait_for_consumers=2, window=4, max_lag="8batches", epochs=2)
    holder = plane("consume_on_device", stdin=True, name="kill", n=N, copy_on_write=False, hold=2,
                   epochs=2)
    survivor = plane("consume_on_device", name="kill", n=N, copy_on_write=False, epochs=2)
    holder.expect("holding")
    holder.kill()
    r = report(survivor)
    assert (r["ids"], r["wrong"]) == (list(range(N)) * 2, 0), r
    producer.expect("done")


def test_a_killed_producer_leaves_the_batch_readable_and_the_next_read_raises(plane):
    producer = mirrored(plane, "dies", window=2)
    trainer = plane("consume_on_device", stdin=True, name="dies", n=N, copy_on_write=False, gone_after=3)
    trainer.expect("got")
    producer.kill()
    producer.wait()
    assert trainer.popen.stdin is not None
    trainer.popen.stdin.write("go\n")
    trainer.popen.stdin.flush()
    assert trainer.expect("gone").split() == ["ProducerGone", "True"]


def test_a_restarted_producers_new_device_slots_are_mapped_and_no_sample_is_lost(plane):
    """A durable producer killed mid-epoch and restarted hands new mirrors
    at the reattachment: the consumer maps them (a new mapping) and reads
    every sample once, each batch of one slot in device memory."""
    first = mirrored(plane, "again", durable=True, kill_after=6, window=3)
    trainer = plane("consume_on_device", name="again", n=N, copy_on_write=False)
    assert first.wait() == -signal.SIGKILL
    second = mirrored(plane, "again", durable=True, window=3)
    r = report(trainer)
    assert (r["ids"], r["wrong"], r["path"]) == (list(range(N)), 0, "device slots (zero copy)"), r
    assert r["inside"] == r["arrays"], r
    assert len(r["addrs"]) == 2, f"the restarted producer's slots were not mapped anew: {r['addrs']}"
    second.expect("done")


def test_a_consumer_on_the_host_path_stays_there_when_a_restarted_producer_serves_its_gpu(plane):
    """A consumer that took the host path (its producer served no GPU)
    keeps it after a restart that does serve its GPU: it moves host batches
    itself and never holds device slots it would not fence."""
    first = mirrored(plane, "host-then", durable=True, kill_after=6, window=3, device=None)
    trainer = plane("consume_on_device", name="host-then", n=N, copy_on_write=False)
    assert first.wait() == -signal.SIGKILL
    second = mirrored(plane, "host-then", durable=True, window=3)
    r = report(trainer)
    assert (r["ids"], r["wrong"], r["path"]) == (list(range(N)), 0, "host copy"), r
    assert r["inside"] == 0, r
    second.expect("done")


def test_a_freed_device_batch_goes_back_only_after_its_fence(bc_dir, monkeypatch):
    """In one process: the producer (a thread, mirroring on a stand-in GPU)
    cannot reuse a slot whose tensors were freed until the fence recorded
    when the consumer took them has completed."""
    monkeypatch.setenv(_device.STAND_IN_ENV, "1")
    loader = GatedLoader(n=64, batch_size=8)
    producer, thread = serve(loader, "fenced", window=2, max_lag=0, device="cuda:0")
    with batchcast.Consumer("fenced", device="cuda:0", copy_on_write=False, connect_timeout=30) as c:
        assert c.stats()["device_path"] == "device slots (zero copy)"
        it = iter(c)
        gate = _device.hold()
        gate.__enter__()
        b0, b1 = next(it), next(it)
        got = ids_of(b0) + ids_of(b1)  # (outside an assert, which may keep b0 alive)
        del b0, b1  # freed: their leases wait for a fence
        assert got == list(range(16))
        # The loop's next next() takes them behind a fence (held), then
        # waits for it: the producer, which needs one of their slots for
        # batch 2, is blocked, and never asks for batch 3.
        nxt = ThreadPoolExecutor(1).submit(next, it)
        assert not loader.asked[3].wait(0.5), "the producer reused a slot before its fence"
        assert not nxt.done()
        gate.__exit__(None, None, None)
        got = ids_of(nxt.result(30))
        del nxt  # (its result holds batch 2)
        assert got == list(range(16, 24))
        assert loader.asked[3].wait(30), "the slots of freed tensors did not go back after their fence"
        rest = [i for b in it for i in ids_of(b)]
        assert rest == list(range(24, 64))
    finish(thread)


def test_device_views_freed_from_several_threads_all_go_back(bc_dir, monkeypatch):
    """Tensors freed from 8 threads while the loop takes the freed ones: no
    lease is lost or released twice (every slot comes back, so the producer
    finishes its epochs)."""
    monkeypatch.setenv(_device.STAND_IN_ENV, "1")
    loader = GatedLoader(n=1600, batch_size=8)
    producer, thread = serve(loader, "threads", epochs=2, window=4, max_lag=0, device="cuda:0")
    got: list[int] = []
    with batchcast.Consumer("threads", device="cuda:0", copy_on_write=False, connect_timeout=30) as c:
        for _ in range(2):
            pool = ThreadPoolExecutor(8)
            for b in c:
                got += ids_of(b)
                pool.submit(lambda b=b: b.clear())  # the last reference, freed on a worker
                del b
            pool.shutdown(wait=True)
    assert got == list(range(1600)) * 2
    finish(thread)
