"""The child processes, each the entry script re-run with --role and a JSON
spec: a trainer (fed by its own DataLoader, a batchcast.Consumer, a
TensorConsumer, or in `ceiling` a batch already on its device; what it
trains is training.py's), the Python producer (batchcast.Producer over the
DataLoader) and the TensorSocket producer. Each sets up, says READY, waits
for GO, does its part and reports its figures in a RESULT line.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Callable, Dict

from .measure import self_cpu_seconds, self_peak_rss_mb
from .options import SHARED_MODES, TENSORSOCKET_MODES
from .preflight import preflight_main
from .protocol import PROGRESS, READY, RESULT, emit, wait_go
from .training import MEAN, STD, ResidentBatches, Trainer


def _make_loader(spec: Dict[str, Any], seed: int):
    """The torchvision pipeline every torch-side mode uses."""
    import torch
    from torch.utils.data import DataLoader
    from torchvision import datasets, transforms

    torch.manual_seed(seed)
    transform = transforms.Compose([
        transforms.RandomResizedCrop(spec["image_size"]),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize(MEAN, STD),
    ])
    dataset = datasets.ImageFolder(spec["data"], transform=transform)
    return DataLoader(dataset, batch_size=spec["batch_size"], shuffle=True,
                      num_workers=spec["workers"], drop_last=False,
                      pin_memory=spec["cuda"] and spec["role"] == "trainer")


def _open_feed(spec: Dict[str, Any], resident):
    """The trainer's source of batches, opened after GO (a shared feed
    connects to its producer then)."""
    mode = spec["mode"]
    if mode in SHARED_MODES:
        import batchcast

        return batchcast.Consumer(spec["name"], batch_size=spec["batch_size"], connect_timeout=60.0,
                                  device=spec["device"], label=f"trainer{spec['rank']}")
    if mode in TENSORSOCKET_MODES:
        from tensorsocket import TensorConsumer

        ports = spec["ts_ports"]
        return TensorConsumer(port=ports[0], ack_port=ports[1], heart_ports=(ports[2], ports[3]),
                              batch_size=spec["batch_size"])
    if mode == "ceiling":
        return ResidentBatches(resident, spec["images"], spec["batch_size"])
    return _make_loader(spec, spec["seed"] + spec["rank"])


def trainer_main(spec: Dict[str, Any]) -> None:
    import torch

    torch.set_num_threads(spec["threads"])
    torch.manual_seed(spec["seed"] + spec["rank"])
    mode = spec["mode"]
    if spec["cuda"] and not torch.cuda.is_available():
        sys.exit(f"--device {spec['device']}: torch.cuda.is_available() is False in the trainer")
    step_s = None if spec["step_ms"] is None else spec["step_ms"] / 1000.0
    trainer = None
    if step_s is None:
        trainer = Trainer(torch, spec)
        resident = trainer.synthetic_batch(spec["batch_size"], spec["image_size"], spec["classes"])
        trainer.warm_up(spec["warmup"], resident)
    else:  # the emulated accelerator's ceiling: its sleeps alone
        resident = (torch.zeros(spec["batch_size"], 3, spec["image_size"], spec["image_size"]),
                    torch.zeros(spec["batch_size"], dtype=torch.long))
    loader = _open_feed(spec, resident) if mode in ("independent", "ceiling") else None
    if mode in SHARED_MODES:
        import batchcast  # noqa: F401 - imported before GO, not in the measured part
    elif mode in TENSORSOCKET_MODES:
        import tensorsocket  # noqa: F401
    emit(READY)
    wait_go()

    # Everything from here on is measured.
    go = time.monotonic()
    if loader is None:
        loader = _open_feed(spec, resident)
    stats_fn = getattr(loader, "stats", None)

    samples = batches = 0
    wait = 0.0
    last_report = 0.0
    shapes = set()
    for _epoch in range(spec["epochs"]):
        t = time.perf_counter()
        it = iter(loader)
        while True:
            try:
                batch = next(it)
            except StopIteration:
                wait += time.perf_counter() - t
                break
            wait += time.perf_counter() - t
            images, labels = batch[0], batch[1]
            n = int(labels.shape[0])
            shapes.add((str(images.dtype), tuple(images.shape[1:])))
            if step_s is not None:
                time.sleep(step_s)
            else:
                trainer.step(images, labels)
            del images, labels, batch
            samples += n
            batches += 1
            now = time.perf_counter()
            if now - last_report >= 0.5:
                last_report = now
                emit(PROGRESS, samples)
            t = time.perf_counter()
        del it
    if spec["cuda"]:
        torch.cuda.synchronize()
    end = time.monotonic()
    result = {
        "rank": spec["rank"], "samples": samples, "batches": batches,
        "wall_s": end - go, "wait_s": wait, "end": end,
        "shapes": sorted(f"{d}{list(s)}" for d, s in shapes),
        "torch": torch.__version__,
    }
    if stats_fn is not None:
        try:
            result["loader_stats"] = stats_fn()
        except Exception as e:  # noqa: BLE001 - informative only
            result["loader_stats"] = f"{type(e).__name__}: {e}"
    if mode in SHARED_MODES:
        loader.close()
    del loader  # a DataLoader's workers are joined (reaped) by now
    if spec["cuda"]:
        result["cuda_max_allocated_mb"] = torch.cuda.max_memory_allocated() / 2**20
    result["cpu"] = self_cpu_seconds()
    result["peak_rss_mb"] = self_peak_rss_mb()
    emit(RESULT, result)
    sys.stdout.flush()
    os._exit(0)  # no interpreter teardown: TensorSocket's threads can hang it


def py_producer_main(spec: Dict[str, Any]) -> None:
    import batchcast
    import torch

    torch.set_num_threads(1)
    loader = _make_loader(spec, spec["seed"])
    producer = batchcast.Producer(loader, name=spec["name"], window=spec["window"],
                                  wait_for_consumers=spec["n"], idle_timeout=spec["idle_timeout"])
    emit(READY)
    wait_go()
    producer.run(epochs=spec["epochs"])
    del loader
    emit(RESULT, {"cpu": self_cpu_seconds(), "peak_rss_mb": self_peak_rss_mb()})
    os._exit(0)  # as the trainers: no interpreter teardown in the figures


def ts_producer_main(spec: Dict[str, Any]) -> None:
    import torch

    torch.set_num_threads(1)
    loader = _make_loader(spec, spec["seed"])
    from tensorsocket import TensorProducer

    if torch.cuda.is_available():  # tensorsocket-gpu: its CUDA context before GO, as the trainers'
        torch.zeros(1, device="cuda")
    emit(READY)
    wait_go()

    ports = spec["ts_ports"]
    # TensorSocket's defaults otherwise (producer_batch_size=8: it collates 8
    # loader batches per message; producer_batch_size=1 fails in 0.0.5 with an
    # IndexError in collate(): rb_buffer[-1:0] is empty).
    producer = TensorProducer(loader, port=ports[0], ack_port=ports[1], heart_ports=(ports[2], ports[3]))
    # Start only when every trainer has attached (its heartbeat was seen), so
    # that none of them joins late and misses batches.
    deadline = time.monotonic() + spec["idle_timeout"]
    while len(producer.hb.consumers) < spec["n"]:
        if time.monotonic() > deadline:
            sys.exit(f"only {len(producer.hb.consumers)} of {spec['n']} TensorSocket consumers attached")
        time.sleep(0.05)
    for _epoch in range(spec["epochs"]):
        for _ in producer:
            pass
    emit(RESULT, {"cpu": self_cpu_seconds(), "peak_rss_mb": self_peak_rss_mb()})
    sys.stdout.flush()
    os._exit(0)  # TensorProducer.join() can hang; the runner needs only the exit


ROLES: Dict[str, Callable[[Dict[str, Any]], None]] = {
    "trainer": trainer_main, "py-producer": py_producer_main, "ts-producer": ts_producer_main,
    "preflight": preflight_main,
}
