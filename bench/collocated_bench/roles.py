"""The child processes, each the entry script re-run with --role and a JSON
spec: a trainer (fed by its own DataLoader, a batchcast.Consumer, a
TensorConsumer, or in `ceiling` a batch already on its device; what it
trains is training.py's), the Python producer (batchcast.Producer over the
DataLoader) and the TensorSocket producer, each a job of `batchcast run`.
A trainer sets up, waits at the cell's start barrier for the others, trains
(noting its progress in a file the runner's caller watches for a stall) and
reports its figures through $BATCHCAST_FIGURES (what the run store keeps)
and the rest of its report (batch shapes, the loader's stats) in a file.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from typing import Any, Callable

from batchcast._barrier import BarrierError, arrive, join
from batchcast._figures import write_figures
from batchcast._files import write_whole

from .options import SHARED_MODES, TENSORSOCKET_MODES
from .preflight import preflight_main
from .training import MEAN, STD, ResidentBatches, Trainer

# Files a trainer writes in the cell's directory: its sample count while it
# trains, its whole report at the end, and its error if it fails.
PROGRESS_FILE, RESULT_FILE, FAILED_FILE = "progress-{rank}", "result-{rank}.json", "failed-{rank}"


def producer_name(spec: dict[str, Any]) -> str:
    """The shared producer's name: the one the runner gives the workload
    ($BATCHCAST_NAME), else the spec's."""
    return os.environ.get("BATCHCAST_NAME") or spec["name"]


def self_cpu_seconds() -> dict[str, float]:
    """This process's CPU seconds, and its reaped children's."""
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"self": s.ru_utime + s.ru_stime, "children": c.ru_utime + c.ru_stime}


def self_peak_rss_mb() -> float | None:
    """This process's peak RSS (getrusage's ru_maxrss), in MB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _make_loader(spec: dict[str, Any], seed: int):
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


def _open_feed(spec: dict[str, Any], resident):
    """The trainer's source of batches, opened after the go (a shared feed
    connects to its producer then)."""
    mode = spec["mode"]
    if mode in SHARED_MODES:
        import batchcast

        return batchcast.Consumer(producer_name(spec), batch_size=spec["batch_size"], connect_timeout=60.0,
                                  device=spec["device"], label=f"trainer{spec['rank']}")
    if mode in TENSORSOCKET_MODES:
        from tensorsocket import TensorConsumer

        ports = spec["ts_ports"]
        return TensorConsumer(port=ports[0], ack_port=ports[1], heart_ports=(ports[2], ports[3]),
                              batch_size=spec["batch_size"])
    if mode == "ceiling":
        return ResidentBatches(resident, spec["images"], spec["batch_size"])
    return _make_loader(spec, spec["seed"] + spec["rank"])


def trainer_main(spec: dict[str, Any]) -> None:
    """A trainer; one that fails says so in its FAILED_FILE at once, so that
    the cell is stopped rather than waiting for a time limit."""
    try:
        _train(spec)
    except BaseException as e:
        write_whole(os.path.join(spec["out"], FAILED_FILE.format(rank=spec["rank"])), f"{type(e).__name__}: {e}")
        raise


def _train(spec: dict[str, Any]) -> None:
    # Joined before the set-up: the trainers waiting at the barrier see this
    # one if it ends (even by SIGKILL) before it arrives.
    join(spec["barrier"])
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
        import batchcast  # noqa: F401 - imported before the go, not in the measured part
    elif mode in TENSORSOCKET_MODES:
        import tensorsocket  # noqa: F401
    try:
        arrive(spec["barrier"], spec["startup_limit"])
    except BarrierError as e:
        sys.exit(f"trainer {spec['rank']}: {e}")

    # Everything from here on is measured.
    go, go_wall = time.monotonic(), time.time()
    cpu_at_go = sum(self_cpu_seconds().values())
    progress = os.path.join(spec["out"], PROGRESS_FILE.format(rank=spec["rank"]))
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
                write_whole(progress, str(samples))
            t = time.perf_counter()
        del it
    if spec["cuda"]:
        torch.cuda.synchronize()
    end, end_wall = time.monotonic(), time.time()
    result = {
        "rank": spec["rank"], "samples": samples, "batches": batches,
        "wall_s": end - go, "wait_s": wait, "go": go, "end": end, "go_wall": go_wall,
        "end_wall": end_wall, "cpu_at_go": cpu_at_go,
        "shapes": sorted(f"{d}{list(s)}" for d, s in shapes),
        "torch": torch.__version__,
    }
    if stats_fn is not None:
        try:
            result["loader_stats"] = stats_fn()
        except Exception as e:
            result["loader_stats"] = f"{type(e).__name__}: {e}"
    if mode in SHARED_MODES:
        loader.close()
    del loader  # a DataLoader's workers are joined (reaped) by now
    if spec["cuda"]:
        result["cuda_max_allocated_mb"] = torch.cuda.max_memory_allocated() / 2**20
    result["cpu"] = self_cpu_seconds()
    result["peak_rss_mb"] = self_peak_rss_mb()
    write_whole(progress, str(samples))
    write_figures(dict(result, cpu_self=result["cpu"]["self"], cpu_children=result["cpu"]["children"]))
    write_whole(os.path.join(spec["out"], RESULT_FILE.format(rank=spec["rank"])), json.dumps(result))
    sys.stdout.flush()
    os._exit(0)  # no interpreter teardown: TensorSocket's threads can hang it


def py_producer_main(spec: dict[str, Any]) -> None:
    import torch

    import batchcast

    torch.set_num_threads(1)
    loader = _make_loader(spec, spec["seed"])
    producer = batchcast.Producer(loader, name=producer_name(spec), window=spec["window"],
                                  wait_for_consumers=spec["n"], idle_timeout=spec["idle_timeout"])
    producer.run(epochs=spec["epochs"])
    del loader
    cpu = self_cpu_seconds()
    write_figures({"cpu_self": cpu["self"], "cpu_children": cpu["children"], "peak_rss_mb": self_peak_rss_mb()})
    os._exit(0)  # as the trainers: no interpreter teardown in the figures


def ts_producer_main(spec: dict[str, Any]) -> None:
    import torch

    torch.set_num_threads(1)
    loader = _make_loader(spec, spec["seed"])
    from tensorsocket import TensorProducer

    if torch.cuda.is_available():  # tensorsocket-gpu: its CUDA context before the go, as the trainers'
        torch.zeros(1, device="cuda")

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
    cpu = self_cpu_seconds()
    write_figures({"cpu_self": cpu["self"], "cpu_children": cpu["children"], "peak_rss_mb": self_peak_rss_mb()})
    sys.stdout.flush()
    os._exit(0)  # TensorProducer.join() can hang; the runner needs only the exit


ROLES: dict[str, Callable[[dict[str, Any]], None]] = {
    "trainer": trainer_main, "py-producer": py_producer_main, "ts-producer": ts_producer_main,
    "preflight": preflight_main,
}
