"""Processes the tests run: producers and consumers, one role per call.

Run as ``python helpers.py ROLE JSON_OPTIONS``. Every role reports on stdout,
one line per event (flushed), so that a test can wait for a line instead of
sleeping: ``ready``, ``batch ...``, ``epoch {json}``, ``gone <monotonic time>``,
``finished <reason>``...
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Any, Dict, Iterator, List

import numpy as np


def say(*parts: Any) -> None:
    print(*parts, flush=True)


# -- data ----------------------------------------------------------------


def run_to_the_end(p: Any, epochs: int) -> None:
    """Runs producer `p` for `epochs`; says ``done``, or ``interrupted`` on
    SIGINT."""
    try:
        p.run(epochs=epochs)
    except KeyboardInterrupt:
        say("interrupted")
        return
    say("done")


class IdDataset:
    """Sample i is i (and a name "s{i}")."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n


class IdLoader:
    """A DataLoader-like loader of sample ids: batches of `batch_size` rows
    (the last one smaller), each {"id": int64 array, "name": [str], "x":
    float32 array (rows, width)}."""

    def __init__(self, n: int, batch_size: int, width: int = 4, names: bool = True) -> None:
        self.dataset = IdDataset(n)
        self.batch_size = batch_size
        self.drop_last = False
        self.width = width
        self.names = names

    def __len__(self) -> int:
        return -(-self.dataset.n // self.batch_size)

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        n, bs = self.dataset.n, self.batch_size
        for start in range(0, n, bs):
            ids = np.arange(start, min(start + bs, n), dtype=np.int64)
            batch: Dict[str, Any] = {
                "id": ids,
                "x": np.repeat(ids.astype(np.float32)[:, None], self.width, axis=1),
            }
            if self.names:
                batch["name"] = [f"s{i}" for i in ids]
            yield batch


def roundtrip_batches(with_torch: bool) -> List[Any]:
    """Batches of 4 rows covering every structure and dtype."""
    rows = 4
    out: List[Any] = []
    for dt in (np.bool_, np.uint8, np.int8, np.uint16, np.int16, np.uint32, np.int32,
               np.uint64, np.int64, np.float16, np.float32, np.float64):
        a = np.arange(rows * 6).reshape(rows, 2, 3)
        a = (a % 2 == 1) if dt is np.bool_ else (a * 3 - 7).astype(dt)
        out.append(a)
    base = np.arange(rows * 5, dtype=np.float32).reshape(rows, 5)
    out.append((np.arange(rows), base))
    out.append([np.arange(rows), base * 2])
    out.append({"image": base, "label": np.arange(rows) % 3, "path": [f"img_{i}.png" for i in range(rows)]})
    out.append(
        (
            {"a": [np.arange(rows), (np.zeros((rows, 1, 1)),)], "b": {"c": base[:, :2]}},
            [1, 2, 3, 2**40],
            [0.5, 1, 2.5, -3.75],
            ["x", "é∂", "", "long" * 50],
            [True, False, True, True],
        )
    )
    out.append(base[:, ::2])  # not contiguous
    out.append(base.astype(">f4"))  # big-endian
    out.append({"ints": [np.int64(3), 4, 5, 6], "floats": [np.float32(0.5), 1, 2, 3]})
    if with_torch:
        import torch

        t = torch.arange(rows * 6).reshape(rows, 2, 3)
        for dt in (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
                   torch.uint16, torch.uint32, torch.uint64, torch.float16, torch.bfloat16,
                   torch.float32, torch.float64):
            out.append((t % 2 == 1) if dt is torch.bool else (t * 3 - 7).to(dt))
        out.append((torch.randn(rows, 3, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16),
                    {"grad": torch.ones(rows, 2, requires_grad=True) * 2}))
        out.append(torch.arange(rows * 6, dtype=torch.float32).reshape(6, rows).t())  # transposed
        out.append({"mixed": (torch.ones(rows, dtype=torch.int16), np.full((rows,), 7, np.uint8))})
    return out


# -- training -------------------------------------------------------------


def make_loader(num_workers: int = 2, n: int = 256, batch_size: int = 32) -> Any:
    """A real DataLoader over synthetic images, shuffled with a fixed seed,
    with a random augmentation drawn in the worker processes."""
    import torch
    from torch.utils.data import DataLoader, Dataset

    class Images(Dataset):
        def __len__(self) -> int:
            return n

        def __getitem__(self, i: int):
            g = torch.Generator().manual_seed(i)
            image = torch.randn(3, 8, 8, generator=g)
            if torch.rand(1).item() < 0.5:  # worker RNG: seeded by the loader
                image = image.flip(-1)
            return image, i % 4

    return DataLoader(Images(), batch_size=batch_size, shuffle=True, num_workers=num_workers,
                      generator=torch.Generator().manual_seed(0))


def make_model() -> Any:
    import torch
    from torch import nn

    torch.manual_seed(1)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(8, 4),
    )


def train(batches_per_epoch: Any, epochs: int) -> Any:
    """Trains make_model() on `batches_per_epoch()` (an iterable per epoch)."""
    import torch

    torch.set_num_threads(1)
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for _ in range(epochs):
        for images, labels in batches_per_epoch():
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(images), labels)
            loss.backward()
            opt.step()
    return model


# -- roles ---------------------------------------------------------------


def produce_ids(o: Dict[str, Any]) -> None:
    import batchcast

    loader = IdLoader(o.get("n", 1000), o.get("batch_size", 64), width=o.get("width", 4),
                      names=o.get("names", True))
    p = batchcast.Producer(
        loader,
        o["name"],
        window=o.get("window", 8),
        wait_for_consumers=o.get("wait_for_consumers", True),
        **{k: o[k] for k in ("max_lag", "lag_policy", "stall_timeout") if k in o},
    )
    say("ready", p.socket_path)
    if o.get("fork_holder"):
        # A child that keeps copies of the producer's sockets (as forked
        # DataLoader workers do) and outlives it.
        p._native.wait_for_consumers(1)
        if os.fork() == 0:
            signal.pause()
            os._exit(0)
    run_to_the_end(p, o.get("epochs", 1))


class ShapeChangeLoader(IdLoader):
    """An IdLoader whose "x" is 2 wide instead of 4 in producer batches
    `narrow[0]` to `narrow[1]` (excluded), in its first epoch only (a
    loader whose transform changed mid-epoch, twice)."""

    def __init__(self, n: int, batch_size: int, narrow: List[int]) -> None:
        super().__init__(n, batch_size, names=False)
        self.narrow = range(*narrow)
        self.epochs = 0

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        first = self.epochs == 0
        self.epochs += 1
        for i, batch in enumerate(super().__iter__()):
            if first and i in self.narrow:
                batch["x"] = batch["x"][:, :2].copy()
            yield batch


def produce_shape_change(o: Dict[str, Any]) -> None:
    import batchcast

    loader = ShapeChangeLoader(o["n"], o["batch_size"], o["narrow"])
    p = batchcast.Producer(loader, o["name"], window=o.get("window", 8))
    say("ready")
    p.run(epochs=o["epochs"])
    say("done")


def produce_small(o: Dict[str, Any]) -> None:
    """Many epochs of a tiny loader: 4 batches of 16 rows."""
    import batchcast

    batches = [
        {"id": np.arange(16 * i, 16 * i + 16), "x": np.full((16, 256), i, np.float32),
         "name": [f"n{16 * i + j}" for j in range(16)]}
        for i in range(4)
    ]
    p = batchcast.Producer(batches, o["name"], window=o.get("window", 4), batch_size=16)
    say("ready")
    p.run(epochs=o["epochs"])
    say("done")


def produce_roundtrip(o: Dict[str, Any]) -> None:
    import batchcast

    batches = roundtrip_batches(o["torch"])
    p = batchcast.Producer(batches, o["name"], window=64, batch_size=4, slot_size=1 << 16,
                           wait_for_consumers=o.get("consumers", 1))
    say("ready")
    p.run(epochs=1)
    say("done")


def consume_ids(o: Dict[str, Any]) -> None:
    import batchcast

    c = batchcast.Consumer(
        o["name"],
        batch_size=o.get("batch_size"),
        drop_last=o.get("drop_last", False),
        join=o.get("join", "catch-up"),
        connect_timeout=o.get("connect_timeout", 30),
        format="numpy",
    )
    say("connected")
    hold = o.get("hold_after")  # stop after this many batches and wait (to be killed)
    count = 0
    try:
        for _ in range(o.get("epochs", 1000000)):
            len_before = _len(c)
            ids: List[int] = []
            names_ok = True
            batches = 0
            sizes = []
            len_during = None
            for b in c:
                if batches == 0:
                    len_during = _len(c)
                batches += 1
                count += 1
                sizes.append(int(b["id"].shape[0]))
                ids.extend(int(i) for i in b["id"])
                if "name" in b:
                    names_ok = names_ok and b["name"] == [f"s{int(i)}" for i in b["id"]]
                names_ok = names_ok and bool((b["x"][:, 0] == b["id"]).all())
                if o.get("say_batches"):
                    say("batch", count)
                if hold is not None and count == hold:
                    if o.get("fork_holder") and os.fork() == 0:
                        # A child with copies of this consumer's sockets (a
                        # forked DataLoader worker) that outlives it.
                        signal.pause()
                        os._exit(0)
                    say("holding")
                    sys.stdin.read()  # until killed
            info = c.epoch_info
            say("epoch", json.dumps({
                "epoch": c.epoch, "partial": bool(info.partial) if info else None,
                "len_before": len_before, "len": len_during, "len_after": _len(c),
                "batches": batches, "sizes": sizes,
                "ids": ids, "names_ok": names_ok,
            }))
        say("done")
    except batchcast.ProducerFinished as e:
        say("finished", e.reason)
        say("why", str(e))
    except batchcast.ProducerGone as e:
        say("gone", repr(time.monotonic()), e.name)


def consume_inplace(o: Dict[str, Any]) -> None:
    """Reads batches of produce_ids as torch tensors and, by `mode`, writes
    to each in place before checking every value of it: "torch" does
    x.sub_(1) with torch.set_num_threads(`threads`), "python" has `threads`
    Python threads each do x[rows].sub_(1) on disjoint rows at once, "none"
    writes nothing. Every value must then be id - 1 (writers) or id (none).
    Reports one "epoch {json}" line per epoch with its bad batches."""
    import threading

    import torch

    import batchcast

    mode, threads = o["mode"], o.get("threads", 4)
    torch.set_num_threads(threads if mode == "torch" else 1)
    c = batchcast.Consumer(o["name"], connect_timeout=30, format="torch")
    say("connected")
    for _ in range(o.get("epochs", 1)):
        batches, bad = 0, []
        for b in c:
            x, ids = b["x"], b["id"]
            if mode == "torch":
                x.sub_(1)
            elif mode == "python":
                chunks = torch.arange(x.shape[0]).chunk(threads)
                start = threading.Barrier(len(chunks))

                def write(rows: Any) -> None:
                    start.wait()
                    x[int(rows[0]):int(rows[-1]) + 1].sub_(1)

                workers = [threading.Thread(target=write, args=(r,)) for r in chunks]
                for w in workers:
                    w.start()
                for w in workers:
                    w.join()
            expected = (ids - (0 if mode == "none" else 1)).to(torch.float32)[:, None]
            wrong = int((x != expected).sum())
            if wrong:
                bad.append({"batch": batches, "wrong_values": wrong})
            batches += 1
        say("epoch", json.dumps({"batches": batches, "bad": bad}))
    say("done")


def consume_inplace_after_faulthandler(o: Dict[str, Any]) -> None:
    """faulthandler enabled after the Consumer, as training scripts and test
    runners do; then in-place writes to every batch."""
    import faulthandler

    import batchcast

    c = batchcast.Consumer(o["name"], connect_timeout=30, format="torch",
                           copy_on_write=o.get("copy_on_write", True))
    faulthandler.enable()
    say("enabled")
    wrong = 0
    for b in c:
        b["x"].sub_(1)
        wrong += int((b["x"] != b["id"][:, None].float() - 1).sum())
    say("checked", wrong)


def consume_stall(o: Dict[str, Any]) -> None:
    """Takes one batch and keeps it, stalls (a stuck trainer) until SIGUSR1,
    then reads on; reports whether the kept batch changed meanwhile, how
    the reading ended and what the `batchcast` logger got."""
    import logging

    import batchcast

    logged: List[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            logged.append(f"{record.levelname}: {record.getMessage()}")

    logging.getLogger("batchcast").addHandler(Keep())
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])
    c = batchcast.Consumer(o["name"], connect_timeout=30, format="numpy",
                           on_evict=o.get("on_evict", "error"))
    it = iter(c)
    held = next(it)
    ids, x = held["id"].copy(), held["x"].copy()
    say("stalled")
    signal.sigwait([signal.SIGUSR1])
    unchanged = bool((held["id"] == ids).all() and (held["x"] == x).all())
    try:
        short = 1 + sum(1 for _ in it)
        epochs = []
        try:
            while True:
                epochs.append([int(i) for b in c for i in b["id"]])
        except batchcast.ProducerFinished:
            pass
        say("read on", json.dumps({"unchanged": unchanged, "short": short,
                                   "epochs": epochs, "logged": logged}))
    except batchcast.FellBehind as e:
        say("fell behind", json.dumps({"unchanged": unchanged, "behind": e.behind,
                                       "budget": e.budget, "message": str(e)}))


def consume_any(o: Dict[str, Any]) -> None:
    """Reads whatever comes, forever; reports when the producer is gone."""
    import batchcast

    c = batchcast.Consumer(o["name"], connect_timeout=60)
    count = 0
    try:
        while True:
            for _ in c:
                count += 1
                say("batch", count)
    except batchcast.ProducerGone:
        say("gone", repr(time.monotonic()))
    except batchcast.ProducerFinished as e:
        say("finished", e.reason)


def wait_then_report_interrupt(o: Dict[str, Any]) -> None:
    """Waits for a welcome that never comes; reports how fast Ctrl-C ends it."""
    import batchcast

    t0 = None

    def on_sigint(signum: int, frame: Any) -> None:
        nonlocal t0
        t0 = time.monotonic()
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_sigint)
    try:
        # Inside the try: the test's SIGINT may land while this line is
        # still being written.
        say("waiting")
        batchcast.Consumer(o["name"], connect_timeout=60)
    except KeyboardInterrupt:
        assert t0 is not None
        say("interrupted after", repr(time.monotonic() - t0))


def _len(c: Any) -> Any:
    try:
        return len(c)
    except TypeError:
        return None


def produce_training(o: Dict[str, Any]) -> None:
    import torch

    import batchcast

    torch.set_num_threads(1)
    loader = make_loader(num_workers=o.get("num_workers", 2))
    p = batchcast.Producer(loader, o["name"], window=o.get("window", 4),
                           wait_for_consumers=o.get("consumers", 1))
    say("ready", p.samples_per_epoch, p.batch_size)
    run_to_the_end(p, o.get("epochs", 2))


def consume_training(o: Dict[str, Any]) -> None:
    import torch

    import batchcast

    loader = batchcast.Consumer(o["name"], connect_timeout=60)
    say("connected", len(loader))
    model = train(lambda: loader, o["epochs"])
    torch.save(model.state_dict(), o["out"])
    say("saved")


# -- decoded streams (decode once, augment per trainer) -------------------


def produce_decoded(o: Dict[str, Any]) -> None:
    """A decoded stream as `batchcast serve --decode-only` sends it: batches
    of (uint8 (n, side, side, 3) images, int64 labels), `batches` per epoch,
    made once (so that the producer is never what a consumer waits for)."""
    import batchcast

    rng = np.random.default_rng(0)
    n, side, count = o.get("batch_size", 32), o.get("side", 256), o.get("batches", 12)
    batches = [
        (rng.integers(0, 256, (n, side, side, 3), dtype=np.uint8), np.arange(k * n, (k + 1) * n, dtype=np.int64))
        for k in range(count)
    ]
    p = batchcast.Producer(batches, o["name"], batch_size=n, samples_per_epoch=n * count,
                           wait_for_consumers=o.get("consumers", 1))
    say("ready")
    p.run(epochs=o.get("epochs", 1))
    say("done")


def produce_gated(o: Dict[str, Any]) -> None:
    """A decoded stream of `batches` small batches (uint8 (8, 48, 48, 3))
    that publishes its first batch at once and each later one only after a
    line on stdin: a producer a test can hold between two batches."""
    import batchcast

    rng = np.random.default_rng(0)

    class Gated:
        def __iter__(self):
            for k in range(o.get("batches", 3)):
                if k and not sys.stdin.readline():
                    return
                yield rng.integers(0, 256, (8, 48, 48, 3), dtype=np.uint8), np.arange(8 * k, 8 * k + 8, dtype=np.int64)

    p = batchcast.Producer(Gated(), o["name"], batch_size=8, samples_per_epoch=8 * o.get("batches", 3))
    say("ready")
    p.run(epochs=1)
    say("done")


def consume_one_and_leave(o: Dict[str, Any]) -> None:
    """Takes one augmented batch (its next is not there yet, so a prefetch
    thread waits for it), says `took`, and ends the script without close()."""
    import batchcast
    from batchcast import transforms as T

    c = batchcast.Consumer(o["name"], connect_timeout=30, transform=T.RandomResizedCrop(24), seed=1)
    next(iter(c))
    say("took", str(c._pending is not None and c._pending.waiting))


def consume_timed(o: Dict[str, Any]) -> None:
    """A slow training loop: per step, `work_ms` of CPU work (matrix
    products, one thread) on the augmented batch. Reports the time each
    next() took (the first of each epoch left out: nothing can be ready
    before it) as `timed {json}`."""
    import torch

    import batchcast
    from batchcast import transforms as T

    torch.set_num_threads(1)
    c = batchcast.Consumer(
        o["name"], connect_timeout=30, seed=1, transform_threads=1,
        transform_prefetch=o["prefetch"],
        transform=T.Compose([T.RandomResizedCrop(o.get("size", 224)), T.RandomHorizontalFlip(),
                             T.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))]),
    )
    a = torch.randn(128, 128)
    waits: List[float] = []
    samples = 0
    for _ in range(o.get("epochs", 1)):
        it = iter(c)
        first = True
        while True:
            t0 = time.perf_counter()
            try:
                images, labels = next(it)
            except StopIteration:
                break
            if not first:
                waits.append(time.perf_counter() - t0)
            first = False
            samples += len(labels)
            w0 = time.thread_time()
            x = images.mean()  # the work reads the batch
            while time.thread_time() - w0 < o.get("work_ms", 25) / 1000:
                x = x + (a @ a).sum() * 0
    say("timed", json.dumps({"waits": waits, "samples": samples, "stats": c.stats()}))
    c.close()


def consume_augmented(o: Dict[str, Any]) -> None:
    """A trainer of a decoded stream with its own transform and seed. Says
    `epoch {json}` per epoch: labels, and a digest of each augmented batch.
    With `fail_at=k`, its step k fails: `fail="raise"` applies a torchvision
    crop larger than its images (progressive resizing gone wrong), which
    raises out of the loop; `fail="hold"` says `holding` and waits, keeping
    its batch, to be killed."""
    import hashlib

    import torch

    import batchcast
    from batchcast import transforms as T

    c = batchcast.Consumer(
        o["name"], connect_timeout=30, seed=o["seed"], batch_size=o.get("batch_size"),
        transform=T.Compose([T.RandomResizedCrop(o.get("size", 24), scale=(0.3, 1.0)),
                             T.RandomHorizontalFlip()]),
    )
    say("connected")
    step = 0
    try:
        for _ in range(o.get("epochs", 1)):
            labels: List[int] = []
            digests: List[str] = []
            for images, y in c:
                if step == o.get("fail_at"):
                    if o["fail"] == "raise":
                        import torchvision.transforms.v2 as tv

                        tv.RandomCrop(2 * images.shape[-1])(images)  # raises ValueError
                    say("holding")
                    sys.stdin.read()  # until killed
                step += 1
                labels.extend(int(v) for v in y)
                digests.append(hashlib.sha256(images.contiguous().numpy().tobytes()).hexdigest())
                assert images.dtype == torch.uint8
            say("epoch", json.dumps({"epoch": c.epoch, "labels": labels, "digests": digests}))
        say("done")
    except batchcast.ProducerFinished as e:
        say("finished", e.reason)


def produce_decoded_images(o: Dict[str, Any]) -> None:
    """A decoded stream from Python: an ImageFolder (PIL images) through
    batchcast.DecodedImages and a DataLoader with worker processes."""
    import torch
    import torchvision

    import batchcast

    ds = batchcast.DecodedImages(torchvision.datasets.ImageFolder(o["root"]), size=o["size"])
    loader = torch.utils.data.DataLoader(ds, batch_size=o["batch_size"], num_workers=o.get("workers", 2))
    p = batchcast.Producer(loader, o["name"], wait_for_consumers=o.get("consumers", 1))
    say("ready")
    p.run(epochs=o.get("epochs", 1))
    say("done")


def consume_gpu(o: Dict[str, Any]) -> None:
    """A trainer on a GPU (``device``, default cuda:0) that runs ahead of
    it: before each batch it queues `sleep_cycles` of GPU work
    (``torch.cuda._sleep``), so each batch's copy waits behind it, and it
    checks every batch on the GPU without synchronising: its ids are the
    next in order ("wrong" counts those that are not) and "x" agrees with
    "id" ("torn"). Reports ``gpu {json}``. With `hold`, it keeps its first `hold` batches, says
    ``holding`` and waits to be killed. With `release_at_to`, a slot goes
    back when its copy is queued, as before batchcast._device."""
    import torch

    import batchcast

    c = batchcast.Consumer(o["name"], batch_size=o.get("batch_size"), device=o.get("device", "cuda:0"),
                           connect_timeout=30)
    if o.get("release_at_to"):
        # The release before batchcast._device: the CPU tensor, and with it
        # the slot's lease, goes when .to() returns (for the test that the
        # check catches it).
        from contextlib import contextmanager

        copy = c._transfers.device.copy

        @contextmanager
        def batch() -> Iterator[Any]:
            yield copy

        c._transfers.batch = batch
    cycles = o.get("sleep_cycles", 0)
    torn = torch.zeros((), dtype=torch.int64, device=c._device)
    id_sum = torch.zeros((), dtype=torch.int64, device=c._device)
    samples = 0
    kept = []
    wrong = torch.zeros((), dtype=torch.int64, device=c._device)
    for _ in range(o.get("epochs", 1)):
        start = 0  # sample ids arrive in order: batch rows are start, start + 1, ...
        for b in c:
            if cycles:
                torch.cuda._sleep(cycles)
            n = len(b["id"])
            wrong += (b["id"] != torch.arange(start, start + n, device=c._device)).sum()
            torn += (b["x"][:, 0] != b["id"].float()).sum()
            id_sum += b["id"].sum()
            samples += n
            start += n
            if o.get("hold") and len(kept) < o["hold"]:
                kept.append(b)
                if len(kept) == o["hold"]:
                    torch.cuda.synchronize()
                    say("holding", json.dumps(c.stats()))
                    signal.pause()
    torch.cuda.synchronize()
    say("gpu", json.dumps({"samples": samples, "wrong": int(wrong), "torn": int(torn), "id_sum": int(id_sum),
                           "pinned": c.pin_memory, "stats": c.stats()}))
    c.close()


def main() -> None:
    # Behave like a process started from a terminal: a shell that runs us in
    # the background (as CI may) leaves SIGINT ignored, and Python keeps an
    # inherited SIG_IGN instead of raising KeyboardInterrupt on Ctrl-C.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    role, opts = sys.argv[1], json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
    if role not in globals():
        import trainers  # the training-library roles

        getattr(trainers, role)(opts)
        return
    globals()[role](opts)


if __name__ == "__main__":
    main()
