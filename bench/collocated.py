#!/usr/bin/env python3
"""Collocated training end to end: N trainer processes on one machine, each
with its own DataLoader, or all fed by one shared pipeline.

One run makes (or reuses) a synthetic ImageNet-like JPEG dataset in
ImageFolder layout, then, for every mode and every N, starts N trainer
processes that train a small real PyTorch CNN (or sleep a fixed emulated
accelerator step, --step-ms) on the same torchvision transform pipeline
(RandomResizedCrop + RandomHorizontalFlip + ToTensor + Normalize):

  independent    each trainer has its own torch DataLoader (--workers each)
  shared-python  one batchcast.Producer wrapping that DataLoader, N batchcast.Consumers
  shared-native  `batchcast serve` (the native Rust pipeline), N batchcast.Consumers
  tensorsocket   TensorSocket 0.0.5 (TensorProducer over the DataLoader, N TensorConsumers)

and prints, per mode and N: aggregate and per-trainer samples/s, the share of
the trainers' time spent waiting for data, total CPU seconds per 1,000 samples
(all processes of the mode), peak memory, and the speedup against
`independent` at the same N. A mode that fails or hangs is reported with its
error (a hang is cut short by --stall-timeout); the run never hangs.

    python bench/collocated.py                          # real CPU model, N = 1,2,4, all modes
    python bench/collocated.py --step-ms 40             # emulated accelerator (loading-bound)
    python bench/collocated.py --device cuda --model resnet50 --workers 8 --images 20000
    python bench/collocated.py --json results.json      # the figures as JSON too

Needs torch, torchvision, pillow and numpy; batchcast for the shared modes
(its `batchcast` binary for shared-native: --batchcast-bin, $BATCHCAST_BIN,
target/release/batchcast or PATH); tensorsocket==0.0.5 for its mode. See
bench/README.md for what each column means and how CPU and memory are counted.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Dict, List, Optional

MODES = ("independent", "shared-python", "shared-native", "tensorsocket")
SHARED_MODES = ("shared-python", "shared-native")
DATASET_VERSION = 2
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLK_TCK = os.sysconf("SC_CLK_TCK")

# Lines the child processes print on stdout for the parent.
READY, PROGRESS, RESULT = "BCB-READY", "BCB-PROGRESS", "BCB-RESULT"

# Keys every cell of the JSON output has (the test checks them).
CELL_FIELDS = (
    "mode", "trainers", "status", "error", "notes", "samples", "expected_samples",
    "wall_s", "agg_samples_per_s", "per_trainer_samples_per_s", "wait_share",
    "cpu_s", "cpu_s_per_1k_samples", "peak_mem_mb", "mem_trainers_mb",
    "mem_loading_mb", "sum_peak_rss_mb", "speedup", "trainer_results",
)


# ---------------------------------------------------------------------------
# Options


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n\n".join(__doc__.split("\n\n")[1:]),
    )
    p.add_argument("--modes", default=",".join(MODES),
                   help="comma-separated subset of: " + ", ".join(MODES) + " (default: all)")
    p.add_argument("--trainers", default="1,2,4", help="numbers of collocated trainers (default 1,2,4)")
    p.add_argument("--epochs", type=int, default=2, help="epochs each trainer trains (default 2)")
    p.add_argument("--images", type=int, default=1000, help="images in the dataset (default 1000)")
    p.add_argument("--classes", type=int, default=10, help="classes in the dataset (default 10)")
    p.add_argument("--image-size", type=int, default=None,
                   help="side of the crops fed to the model (default 112 on cpu, 224 on cuda)")
    p.add_argument("--workers", type=int, default=2,
                   help="DataLoader workers per pipeline (per trainer in independent), "
                        "native pipeline threads in shared-native (default 2)")
    p.add_argument("--batch-size", type=int, default=64, help="batch size (default 64)")
    p.add_argument("--step-ms", type=float, default=None,
                   help="emulated accelerator: each training step is a sleep of this many ms "
                        "instead of the model's forward/backward")
    p.add_argument("--model", default=None, choices=("small", "resnet18", "resnet50"),
                   help="the trained model (default small on cpu, resnet18 on cuda)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch intra-op threads per trainer process (default 1)")
    p.add_argument("--device", default="cpu", help="cpu (default), cuda or cuda:N: where the trainers train")
    p.add_argument("--window", type=int, default=8, help="batchcast window, in producer batches (default 8)")
    p.add_argument("--cache-dir", default=os.path.join(tempfile.gettempdir(), "batchcast-bench-cache"),
                   help="where the generated dataset is kept and reused (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="dataset and training seed (default 0)")
    p.add_argument("--json", metavar="PATH", help="also write every figure to this JSON file")
    p.add_argument("--timeout", type=float, default=600.0,
                   help="seconds one (mode, N) cell may take in all before it is stopped (default 600)")
    p.add_argument("--stall-timeout", type=float, default=30.0,
                   help="a cell in which no trainer makes progress for this many seconds is stopped "
                        "and reported as a hang (default 30)")
    p.add_argument("--batchcast-bin", default=None,
                   help="the batchcast binary for shared-native (default: $BATCHCAST_BIN, "
                        "target/release/batchcast, then PATH)")
    p.add_argument("--native-arg", action="append", default=[], metavar="ARG",
                   help="extra argument for `batchcast serve` (repeatable), e.g. --native-arg=--output=u8-nhwc")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    # Internal: the child processes.
    p.add_argument("--role", choices=("trainer", "py-producer", "ts-producer"), help=argparse.SUPPRESS)
    p.add_argument("--spec", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.role:
        return args
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        p.error(f"--modes: unknown {', '.join(bad) or '(none given)'}; choose from {', '.join(MODES)}")
    args.modes = modes
    try:
        args.trainers = [int(t) for t in args.trainers.split(",") if t.strip()]
    except ValueError:
        p.error("--trainers needs comma-separated positive integers, e.g. 1,2,4")
    if not args.trainers or min(args.trainers) < 1:
        p.error("--trainers needs comma-separated positive integers, e.g. 1,2,4")
    for name in ("epochs", "images", "classes", "batch_size", "threads", "window"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.workers < 0:
        p.error("--workers must be >= 0")
    if args.images < args.classes:
        p.error("--images must be at least --classes")
    args.cuda = args.device.startswith("cuda")
    if not args.cuda and args.device != "cpu":
        p.error("--device must be cpu, cuda or cuda:N")
    if args.image_size is None:
        args.image_size = 224 if args.cuda else 112
    if args.model is None:
        args.model = "resnet18" if args.cuda else "small"
    return args


# ---------------------------------------------------------------------------
# The dataset


def _hsv(h: float, s: float, v: float):
    import colorsys

    return tuple(int(255 * c) for c in colorsys.hsv_to_rgb(h % 1.0, s, v))


def _make_image(job):
    """One deterministic JPEG: a two-colour gradient in the class's hue, a
    low-frequency texture, random shapes, sensor-like noise."""
    import numpy as np
    from PIL import Image, ImageDraw

    path, index, cls, classes, seed = job
    rng = np.random.default_rng([seed, index])
    w, h = (500, 375) if rng.random() < 0.75 else (375, 500)
    w = int(w * rng.uniform(0.8, 1.2))
    h = int(h * rng.uniform(0.8, 1.2))
    hue = cls / classes + rng.normal(0, 0.04)
    c1 = np.array(_hsv(hue, rng.uniform(0.3, 0.9), rng.uniform(0.4, 1.0)), np.float32)
    c2 = np.array(_hsv(hue + rng.uniform(0.1, 0.4), rng.uniform(0.2, 0.9), rng.uniform(0.2, 0.9)), np.float32)
    angle = rng.uniform(0, 2 * np.pi)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    t = xx * np.cos(angle) + yy * np.sin(angle)
    t = (t - t.min()) / max(float(t.max() - t.min()), 1e-6)
    img = c1 * (1 - t[..., None]) + c2 * t[..., None]
    small = rng.normal(0, 1, (int(rng.integers(4, 12)), int(rng.integers(4, 12)), 3)).astype(np.float32)
    small = ((small - small.min()) / (np.ptp(small) + 1e-6) * 255).astype(np.uint8)
    texture = np.asarray(Image.fromarray(small).resize((w, h), Image.BICUBIC), np.float32) - 128
    img = img + texture * rng.uniform(0.1, 0.4)
    pil = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(pil)
    for _ in range(int(rng.integers(4, 14))):
        x0, y0 = int(rng.integers(0, w)), int(rng.integers(0, h))
        x1, y1 = x0 + int(rng.integers(10, w // 2)), y0 + int(rng.integers(10, h // 2))
        fill = _hsv(hue + rng.normal(0, 0.25), rng.uniform(0.2, 1), rng.uniform(0.1, 1))
        kind = rng.integers(0, 3)
        if kind == 0:
            draw.ellipse([x0, y0, x1, y1], fill=fill)
        elif kind == 1:
            draw.rectangle([x0, y0, x1, y1], fill=fill)
        else:
            pts = [(int(rng.integers(0, w)), int(rng.integers(0, h))) for _ in range(int(rng.integers(3, 7)))]
            draw.polygon(pts, fill=fill)
    # Fine detail (the entropy that makes photos ~100 KiB as JPEG): a
    # mid-frequency texture and per-pixel sensor noise.
    fine = rng.normal(0, 1, (h // 3 + 1, w // 3 + 1)).astype(np.float32)
    fine = np.asarray(Image.fromarray(fine, "F").resize((w, h), Image.BILINEAR))[..., None]
    arr = (np.asarray(pil, np.float32) + fine * rng.uniform(15, 35)
           + rng.normal(0, rng.uniform(10, 20), (h, w, 3)).astype(np.float32))
    Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8)).save(path, "JPEG", quality=int(rng.integers(85, 95)))
    return os.path.getsize(path)


def ensure_dataset(cache_dir: str, images: int, classes: int, seed: int, log) -> Dict[str, Any]:
    """Generates the dataset (or reuses it when its marker matches) and
    returns its description. Layout: CACHE/NAME/data/CLASS/NNNNNN.jpg, the
    parameters in CACHE/NAME/params.json, written last."""
    params = {"generator": "batchcast bench/collocated.py", "version": DATASET_VERSION,
              "images": images, "classes": classes, "seed": seed}
    name = f"imagefolder-{images}-c{classes}-s{seed}-v{DATASET_VERSION}"
    root = os.path.join(os.path.abspath(cache_dir), name)
    data, marker = os.path.join(root, "data"), os.path.join(root, "params.json")
    os.makedirs(cache_dir, exist_ok=True)
    import fcntl

    # Runs sharing a cache directory wait for each other's generation.
    with open(os.path.join(cache_dir, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        info = _ensure_dataset_locked(cache_dir, name, root, data, marker, params, log)
    # Warm the page cache so the first cell does not pay for the disk.
    for dirpath, _, files in os.walk(data):
        for fn in files:
            with open(os.path.join(dirpath, fn), "rb") as f:
                while f.read(1 << 20):
                    pass
    return {"path": data, **info}


def _ensure_dataset_locked(cache_dir, name, root, data, marker, params, log) -> Dict[str, Any]:
    images, classes, seed = params["images"], params["classes"], params["seed"]
    info = None
    try:
        with open(marker) as f:
            info = json.load(f)
    except (OSError, ValueError):
        pass
    if info is None or info.get("params") != params or not os.path.isdir(data):
        tmp = tempfile.mkdtemp(prefix=name + ".tmp-", dir=cache_dir)
        jobs = []
        for i in range(images):
            cls = i % classes
            d = os.path.join(tmp, "data", f"class{cls:03d}")
            os.makedirs(d, exist_ok=True)
            jobs.append((os.path.join(d, f"{i:06d}.jpg"), i, cls, classes, seed))
        log(f"generating {images} JPEGs in {root} ...")
        start = time.perf_counter()
        import multiprocessing as mp

        with mp.get_context("fork").Pool(os.cpu_count() or 1) as pool:
            sizes = pool.map(_make_image, jobs, chunksize=16)
        info = {"params": params, "files": images, "bytes": sum(sizes),
                "mean_file_kib": round(sum(sizes) / images / 1024, 1)}
        with open(os.path.join(tmp, "params.json"), "w") as f:
            json.dump(info, f, indent=1)
        if os.path.isdir(root):
            if not os.path.exists(marker) and os.listdir(root):
                raise SystemExit(f"{root} exists but is not a dataset this runner made; move it away")
            shutil.rmtree(root)
        os.rename(tmp, root)
        log(f"generated in {time.perf_counter() - start:.1f} s, mean {info['mean_file_kib']} KiB per file")
    return info


# ---------------------------------------------------------------------------
# Child processes


def _emit(kind: str, payload: Any = None) -> None:
    line = kind if payload is None else f"{kind} {json.dumps(payload)}"
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _wait_go() -> None:
    line = sys.stdin.readline()
    if line.strip() != "GO":
        sys.exit("no GO from the runner")


def _cpu_seconds() -> Dict[str, float]:
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"self": s.ru_utime + s.ru_stime, "children": c.ru_utime + c.ru_stime}


def _vm_hwm_mb() -> Optional[float]:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


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


def _build_model(torch, name: str, classes: int):
    nn = torch.nn
    if name == "small":
        def block(i, o):
            return [nn.Conv2d(i, o, 3, 2, 1, bias=False), nn.BatchNorm2d(o), nn.ReLU(inplace=True)]

        return nn.Sequential(*block(3, 16), *block(16, 32), *block(32, 64), *block(64, 128),
                             nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, classes))
    from torchvision import models

    return getattr(models, name)(num_classes=classes)


def trainer_main(spec: Dict[str, Any]) -> None:
    import torch

    torch.set_num_threads(spec["threads"])
    torch.manual_seed(spec["seed"] + spec["rank"])
    mode = spec["mode"]
    device = torch.device(spec["device"])
    if spec["cuda"] and not torch.cuda.is_available():
        sys.exit(f"--device {spec['device']}: torch.cuda.is_available() is False in the trainer")
    step_s = None if spec["step_ms"] is None else spec["step_ms"] / 1000.0
    model = opt = None
    if step_s is None:
        model = _build_model(torch, spec["model"], spec["classes"]).to(device)
        if spec["cuda"]:
            torch.backends.cudnn.benchmark = True
            model = model.to(memory_format=torch.channels_last)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1)
    std = torch.tensor(STD, device=device).view(1, 3, 1, 1)
    loader = _make_loader(spec, spec["seed"] + spec["rank"]) if mode == "independent" else None
    if mode in SHARED_MODES:
        import batchcast
    elif mode == "tensorsocket":
        from tensorsocket import TensorConsumer
    _emit(READY)
    _wait_go()

    # Everything from here on is measured.
    go = time.monotonic()
    stats_fn = None
    if mode in SHARED_MODES:
        loader = batchcast.Consumer(spec["name"], batch_size=spec["batch_size"], connect_timeout=60.0,
                                    device=spec["device"], label=f"trainer{spec['rank']}")
        stats_fn = loader.stats
    elif mode == "tensorsocket":
        ports = spec["ts_ports"]
        loader = TensorConsumer(port=ports[0], ack_port=ports[1], heart_ports=(ports[2], ports[3]),
                                batch_size=spec["batch_size"])

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
                images = images.to(device, non_blocking=True)
                labels = labels.to(device, non_blocking=True)
                if images.dtype == torch.uint8:  # a native pipeline's raw output
                    if images.shape[-1] == 3 and images.shape[1] != 3:
                        images = images.permute(0, 3, 1, 2)
                    images = (images.float() / 255 - mean) / std
                if spec["cuda"]:
                    images = images.contiguous(memory_format=torch.channels_last)
                    with torch.autocast("cuda", dtype=torch.bfloat16):
                        loss = torch.nn.functional.cross_entropy(model(images), labels)
                else:
                    loss = torch.nn.functional.cross_entropy(model(images), labels)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
            del images, labels, batch
            samples += n
            batches += 1
            now = time.perf_counter()
            if now - last_report >= 0.5:
                last_report = now
                _emit(PROGRESS, samples)
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
    result["cpu"] = _cpu_seconds()
    result["peak_rss_mb"] = _vm_hwm_mb()
    _emit(RESULT, result)
    sys.stdout.flush()
    os._exit(0)  # no interpreter teardown: TensorSocket's threads can hang it


def py_producer_main(spec: Dict[str, Any]) -> None:
    import batchcast
    import torch

    torch.set_num_threads(1)
    loader = _make_loader(spec, spec["seed"])
    producer = batchcast.Producer(loader, name=spec["name"], window=spec["window"],
                                  wait_for_consumers=spec["n"], idle_timeout=spec["idle_timeout"])
    _emit(READY)
    _wait_go()
    producer.run(epochs=spec["epochs"])
    del loader
    _emit(RESULT, {"cpu": _cpu_seconds(), "peak_rss_mb": _vm_hwm_mb()})
    os._exit(0)  # as the trainers: no interpreter teardown in the figures


def ts_producer_main(spec: Dict[str, Any]) -> None:
    import torch

    torch.set_num_threads(1)
    loader = _make_loader(spec, spec["seed"])
    from tensorsocket import TensorProducer

    _emit(READY)
    _wait_go()

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
    _emit(RESULT, {"cpu": _cpu_seconds(), "peak_rss_mb": _vm_hwm_mb()})
    sys.stdout.flush()
    os._exit(0)  # TensorProducer.join() can hang; the runner needs only the exit


# ---------------------------------------------------------------------------
# The parent: process bookkeeping


def _set_subreaper() -> None:
    """Orphaned grandchildren (a killed trainer's DataLoader workers) are
    reparented to this process, so they are reaped here and their CPU time is
    counted, and nothing is left running."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except Exception:  # noqa: BLE001 - best effort (non-Linux)
        pass


def _proc_table() -> Dict[int, List[int]]:
    """pid -> [ppid, utime+stime+cutime+cstime in ticks]."""
    table = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                rest = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        table[int(d)] = [int(rest[1]), sum(int(x) for x in rest[11:15])]
    return table


def _descendants(table: Dict[int, List[int]], root: int) -> List[int]:
    children: Dict[int, List[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = [], [root]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _read_kb(path: str, keys) -> Dict[str, int]:
    out = {}
    try:
        with open(path) as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in keys:
                    out[k] = int(v.split()[0])
    except (OSError, ValueError, IndexError):
        pass
    return out


_STATUS_KEYS = ("RssAnon", "RssFile", "RssShmem", "VmHWM")
_ROLLUP_KEYS = ("Pss_Anon", "Pss_File")
_SHM_PREFIXES = ("/memfd:", "/dev/shm/", "/SYSV")


def _shm_objects(pid: int, into: Dict[tuple, int]) -> None:
    """Adds the shared-memory objects `pid` maps (memfds, /dev/shm files,
    SysV segments) to `into`: (device, inode) -> bytes mapped (the largest
    extent seen), so that an object mapped by many processes counts once."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            for line in f:
                parts = line.split(None, 5)
                if len(parts) < 6 or parts[1][3] != "s" or not parts[5].startswith(_SHM_PREFIXES):
                    continue
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                key = (parts[3], parts[4])
                into[key] = max(into.get(key, 0), int(parts[2], 16) + hi - lo)
    except (OSError, ValueError, IndexError):
        pass


class MemorySampler(threading.Thread):
    """Samples the memory of every descendant of this process (every
    `interval` s) and keeps the peak of the total, counting every page once:

    - each process's own memory, anonymous + file-backed, as its
      proportional set size (PSS: a page shared by k processes, such as
      libtorch's code or the copy-on-write pages a DataLoader worker shares
      with the process it forked from, counts 1/k in each);
    - shared memory (batchcast's arena, the /dev/shm segments of DataLoader
      workers and TensorSocket) once per object, whoever maps it, at its
      mapped size.

    PSS (smaps_rollup) costs ~10 ms per torch process to read, so it is read
    for a process when first seen, when its RSS has changed by more than a
    fifth, and at least every `pss_every` s; in between, the cheap RSS
    figures of /proc/PID/status are scaled by the last PSS/RSS ratios. The
    total is split into the trainer processes' own memory and the rest
    (loading: producers, DataLoader workers, `batchcast serve`, and all shared
    memory). Also kept: each process's VmHWM (peak RSS), whose plain sum
    counts shared pages once per process that maps them.
    """

    def __init__(self, trainer_pids_fn, interval: float = 0.25, pss_every: float = 2.0):
        super().__init__(daemon=True)
        self.trainer_pids_fn = trainer_pids_fn
        self.interval, self.pss_every = interval, pss_every
        self.stop_event = threading.Event()
        self.ratios: Dict[int, tuple] = {}
        self.rollup: Dict[int, tuple] = {}  # pid -> (when, rss then)
        self.hwm: Dict[int, int] = {}
        self.peak_total = self.peak_trainers = self.peak_loading = self.peak_shm = 0.0
        self.samples = 0

    def run(self) -> None:
        me = os.getpid()
        while not self.stop_event.is_set():
            try:
                self.sample(me)
            except Exception:  # noqa: BLE001 - a vanished process mid-read
                pass
            self.stop_event.wait(self.interval)
        try:
            self.sample(me)
        except Exception:  # noqa: BLE001
            pass

    def sample(self, me: int) -> None:
        trainers = set(self.trainer_pids_fn())
        now = time.monotonic()
        tr = ld = 0.0
        shm: Dict[tuple, int] = {}
        for pid in _descendants(_proc_table(), me):
            st = _read_kb(f"/proc/{pid}/status", _STATUS_KEYS)
            if "RssAnon" not in st:
                continue  # a zombie, or gone
            self.hwm[pid] = max(self.hwm.get(pid, 0), st.get("VmHWM", 0))
            rss = st["RssAnon"] + st["RssFile"]
            when, rss_then = self.rollup.get(pid, (-1e9, 0))
            if now - when >= self.pss_every or abs(rss - rss_then) > 0.2 * rss_then:
                ro = _read_kb(f"/proc/{pid}/smaps_rollup", _ROLLUP_KEYS)
                if len(ro) == 2:
                    self.ratios[pid] = tuple(min(1.0, ro[p] / st[r]) if st.get(r) else 1.0
                                             for p, r in zip(_ROLLUP_KEYS, ("RssAnon", "RssFile")))
                self.rollup[pid] = (now, rss)
            ra, rf = self.ratios.get(pid, (1.0, 1.0))
            own = st["RssAnon"] * ra + st["RssFile"] * rf
            if pid in trainers:
                tr += own
            else:
                ld += own
            if st.get("RssShmem", 0) > 0:
                _shm_objects(pid, shm)
        shm_kb = sum(shm.values()) / 1024
        self.samples += 1
        self.peak_trainers = max(self.peak_trainers, tr)
        self.peak_loading = max(self.peak_loading, ld + shm_kb)
        self.peak_shm = max(self.peak_shm, shm_kb)
        self.peak_total = max(self.peak_total, tr + ld + shm_kb)

    def finish(self) -> Dict[str, float]:
        self.stop_event.set()
        self.join()
        mb = 1 / 1024
        return {"peak_mem_mb": self.peak_total * mb, "mem_trainers_mb": self.peak_trainers * mb,
                "mem_loading_mb": self.peak_loading * mb, "shm_mb": self.peak_shm * mb,
                "sum_peak_rss_mb": sum(self.hwm.values()) * mb, "processes_seen": len(self.hwm),
                "memory_samples": self.samples}


class Child:
    """A child process in its own process group; stdout lines go to a shared
    queue, stderr to a file (its tail goes into error reports)."""

    def __init__(self, label: str, argv: List[str], events: "queue.Queue", env=None):
        self.label = label
        self.stderr = tempfile.TemporaryFile(mode="w+b")
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.stderr, start_new_session=True, env=env)
        self.pid = self.proc.pid
        self.ready = False
        self.result: Optional[Dict[str, Any]] = None
        self.progress = 0
        self.events = events
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for raw in self.proc.stdout:
            self.events.put((self, raw.decode("utf-8", "replace").rstrip("\n")))
        self.events.put((self, None))

    def go(self) -> None:
        try:
            self.proc.stdin.write(b"GO\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def reap(self, timeout: Optional[float] = None) -> Optional[int]:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stderr_tail(self, lines: int = 12) -> str:
        try:
            self.stderr.seek(0)
            text = self.stderr.read().decode("utf-8", "replace")
        except OSError:
            return ""
        return "\n".join(text.rstrip().splitlines()[-lines:])


def _reap_orphans(wait_s: float = 3.0) -> None:
    """Reaps grandchildren reparented to this process (see _set_subreaper);
    called only after every Popen child has been waited for."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            if time.monotonic() > deadline:
                for p in _descendants(_proc_table(), os.getpid()):
                    try:
                        os.kill(p, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                deadline = time.monotonic() + wait_s
            time.sleep(0.05)


def _free_ports(n: int) -> List[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _cpu_children() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


# ---------------------------------------------------------------------------
# The native server


def find_batchcast_bin(explicit: Optional[str]) -> Optional[str]:
    """--batchcast-bin, $BATCHCAST_BIN, the workspace's release build, PATH,
    then the workspace's debug build (slow: for tests only)."""
    for cand in (explicit, os.environ.get("BATCHCAST_BIN"),
                 os.path.join(REPO, "target", "release", "batchcast"), shutil.which("batchcast"),
                 os.path.join(REPO, "target", "debug", "batchcast")):
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None


_SERVE_HELP: Dict[str, str] = {}


def native_serve_argv(args, dataset: str, name: str, n: int) -> List[str]:
    """`batchcast serve` over the dataset with the same transform as the
    torchvision pipeline (train: RandomResizedCrop + flip; float32 NCHW,
    ImageNet-normalised where the binary offers it). Options the binary does
    not have are left out: the trainers take uint8 NHWC or NCHW too."""
    binary = find_batchcast_bin(args.batchcast_bin)
    if binary is None:
        raise RuntimeError("no batchcast binary: build it with `cargo build --release -p batchcast-cli` "
                           "(target/release/batchcast), or pass --batchcast-bin / set $BATCHCAST_BIN")
    helptext = _SERVE_HELP.get(binary)
    if helptext is None:
        try:
            helptext = subprocess.run([binary, "serve", "--help"], capture_output=True, text=True,
                                      timeout=30).stdout
        except (OSError, subprocess.TimeoutExpired) as e:
            raise RuntimeError(f"{binary} serve --help failed: {e}") from e
        _SERVE_HELP[binary] = helptext
    argv = [binary, "serve", "--name", name, "--data", dataset, "--batch-size", str(args.batch_size),
            "--epochs", str(args.epochs), "--workers", str(max(1, args.workers)), "--window",
            str(args.window), "--consumers", str(n), "--idle-timeout", str(args.stall_timeout), "--json"]
    if "--transform" in helptext:
        argv += ["--transform", "train"]
    for flag in ("--image-size", "--size"):
        if flag in helptext:
            argv += [flag, str(args.image_size)]
            break
    if "--dtype" in helptext:  # f32: ToTensor + ImageNet Normalize, as the torchvision pipeline
        argv += ["--dtype", "f32"]
    if "--layout" in helptext:
        argv += ["--layout", "nchw"]
    if "--output" in helptext:
        for value in ("f32-nchw-imagenet", "f32-nchw-normalized", "f32-nchw-norm", "float32-normalized",
                      "f32-nchw"):
            if value in helptext:
                argv += ["--output", value]
                break
    if "--seed" in helptext:
        argv += ["--seed", str(args.seed)]
    return argv + list(args.native_arg)


# ---------------------------------------------------------------------------
# The parent: one (mode, N) cell


def _blank_cell(mode: str, n: int) -> Dict[str, Any]:
    cell = {k: None for k in CELL_FIELDS}
    cell.update(mode=mode, trainers=n, notes=[], trainer_results=[])
    return cell


def run_cell(args, dataset: Dict[str, Any], mode: str, n: int, log) -> Dict[str, Any]:
    cell = _blank_cell(mode, n)
    cell["expected_samples"] = n * dataset["files"] * args.epochs
    name = f"bcbench-{os.getpid()}-{mode}-{n}"
    events: "queue.Queue" = queue.Queue()
    base = {"data": dataset["path"], "image_size": args.image_size, "batch_size": args.batch_size,
            "workers": args.workers, "epochs": args.epochs, "seed": args.seed, "classes": args.classes,
            "cuda": args.cuda, "device": args.device, "name": name, "n": n, "window": args.window,
            "idle_timeout": args.stall_timeout, "mode": mode}
    if mode == "tensorsocket":
        base["ts_ports"] = _free_ports(4)
    me = [sys.executable, os.path.abspath(__file__)]
    children: List[Child] = []
    trainers: List[Child] = []
    producer: Optional[Child] = None
    sampler = MemorySampler(lambda: [t.pid for t in trainers])
    cpu0 = _cpu_children()
    started = time.monotonic()
    deadline = started + args.timeout
    startup_limit = max(120.0, 4 * args.stall_timeout)  # interpreters, imports, model building
    startup_deadline = started + startup_limit
    error: Optional[str] = None
    status = "ok"

    def fail(kind: str, message: str) -> None:
        nonlocal error, status
        if error is None:
            status, error = kind, message

    def pump(until) -> None:
        """Handles events until until() is true, a child fails, or time is up."""
        while error is None and not until():
            now = time.monotonic()
            if now > deadline:
                fail("timeout", f"the cell took longer than --timeout {args.timeout:g} s")
                return
            if go_at is None and now > startup_deadline:
                late = [c.label for c in children if not c.ready]
                fail("timeout", f"start-up took over {startup_limit:g} s; not ready: {', '.join(late)}")
                return
            try:
                child, line = events.get(timeout=0.2)
            except queue.Empty:
                child = line = None
            if child is not None:
                if line is None:
                    rc = child.reap(5)
                    if child.result is None and not (child is producer and rc == 0):
                        tail = child.stderr_tail()
                        fail("failed", f"{child.label} exited with status {rc}"
                                       + (f":\n{tail}" if tail else " (no output on stderr)"))
                        return
                    if child is producer and rc not in (0, None):
                        fail("failed", f"{child.label} exited with status {rc}:\n{child.stderr_tail()}")
                        return
                elif line == READY:
                    child.ready = True
                elif line.startswith(PROGRESS + " "):
                    child.progress = int(line.split()[1])
                    child.last_progress = time.monotonic()
                elif line.startswith(RESULT + " "):
                    child.result = json.loads(line[len(RESULT) + 1:])
                elif line.startswith("{"):  # batchcast serve --json events
                    try:
                        ev = json.loads(line)
                    except ValueError:
                        ev = {}
                    if ev.get("event") == "listening":
                        child.ready = True
                    elif ev.get("event") == "finished":
                        child.result = ev
            if go_at is not None:
                last = max([go_at] + [getattr(t, "last_progress", go_at) for t in trainers])
                if time.monotonic() - last > args.stall_timeout:
                    done = ", ".join(f"{t.label}: {t.progress} samples" for t in trainers)
                    fail("timeout", f"hang: no trainer made progress for {args.stall_timeout:g} s "
                                    f"(--stall-timeout); so far {done}")
                    return

    go_at: Optional[float] = None
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    try:
        sampler.start()
        # 1. The shared pipeline, if any.
        if mode == "shared-python":
            producer = Child("producer (batchcast.Producer)", me + ["--role", "py-producer", "--spec",
                             json.dumps(dict(base, role="py-producer", threads=1))], events, env)
        elif mode == "tensorsocket":
            producer = Child("producer (TensorProducer)", me + ["--role", "ts-producer", "--spec",
                             json.dumps(dict(base, role="ts-producer", threads=1))], events, env)
        elif mode == "shared-native":
            try:
                argv = native_serve_argv(args, dataset["path"], name, n)
            except RuntimeError as e:
                fail("failed", str(e))
                argv = None
            if argv is not None:
                cell["notes"].append("serve: " + " ".join(argv))
                if os.sep + "debug" + os.sep in argv[0]:
                    cell["notes"].append(f"{argv[0]} is a debug build: its figures are not representative")
                producer = Child("batchcast serve", argv, events, env)
        if producer is not None:
            children.append(producer)
            pump(lambda: producer.ready)
        # 2. The trainers: each imports torch, builds its model (and its
        #    DataLoader in independent), says READY and waits.
        if error is None:
            for rank in range(n):
                spec = dict(base, role="trainer", rank=rank, threads=args.threads,
                            model=args.model, step_ms=args.step_ms)
                t = Child(f"trainer {rank}", me + ["--role", "trainer", "--spec", json.dumps(spec)],
                          events, env)
                trainers.append(t)
                children.append(t)
            pump(lambda: all(t.ready for t in trainers))
        # 3. GO: the measured part starts. CPU already spent (interpreters,
        #    imports, model building) is subtracted.
        if error is None:
            table = _proc_table()
            pre_ticks = sum(table[p][1] for p in _descendants(table, os.getpid()) if p in table)
            go_at = time.monotonic()
            for c in children:
                if c is not producer or mode != "shared-native":
                    c.go()
            pump(lambda: all(t.result is not None for t in trainers))
        # 4. The trainers are done; the producer should finish by itself.
        if error is None and producer is not None:
            if producer.reap(20) is None:
                cell["notes"].append(f"{producer.label} had not exited 20 s after the last trainer "
                                     "finished; killed")
    except KeyboardInterrupt:
        fail("failed", "interrupted")
        raise
    finally:
        for c in children:
            if error is not None or c.proc.poll() is None:
                c.kill()
        for c in children:
            c.reap()
        _reap_orphans()
        for c in children:
            c.reader.join(5)
            try:
                c.proc.stdin.close()
            except OSError:
                pass
        # Late RESULT lines still queued.
        while True:
            try:
                child, line = events.get_nowait()
            except queue.Empty:
                break
            if line and line.startswith(RESULT + " ") and child.result is None:
                child.result = json.loads(line[len(RESULT) + 1:])
        mem = sampler.finish()
    cpu = _cpu_children() - cpu0
    cell["status"], cell["error"] = status, error
    cell["setup_s"] = None if go_at is None else go_at - started
    if status != "ok":
        return cell

    results = [t.result for t in trainers]
    cell["trainer_results"] = results
    samples = sum(r["samples"] for r in results)
    wall = max(r["end"] for r in results) - go_at
    cpu_measured = cpu - pre_ticks / CLK_TCK
    cell.update(mem)
    cell.update(
        samples=samples, wall_s=wall, cpu_s=cpu_measured,
        agg_samples_per_s=samples / wall if wall > 0 else None,
        per_trainer_samples_per_s=sum(r["samples"] / r["wall_s"] for r in results) / n,
        wait_share=sum(r["wait_s"] / r["wall_s"] for r in results) / n,
        cpu_s_per_1k_samples=1000 * cpu_measured / samples if samples else None,
        startup_cpu_s=pre_ticks / CLK_TCK,
    )
    if producer is not None and isinstance(producer.result, dict):
        cell["producer_result"] = producer.result
    short = [r for r in results if r["samples"] != dataset["files"] * args.epochs]
    if short:
        cell["notes"].append(
            "trainers got {} samples each, not the {} of {} epochs of {} images".format(
                "/".join(str(r["samples"]) for r in results), dataset["files"] * args.epochs,
                args.epochs, dataset["files"]))
    if samples == 0:
        cell["status"], cell["error"] = "failed", "the trainers received no samples"
    return cell


def add_speedups(cells: List[Dict[str, Any]]) -> None:
    """speedup = aggregate samples/s of the cell / that of `independent` at
    the same N (None where either is missing)."""
    base = {c["trainers"]: c["agg_samples_per_s"] for c in cells
            if c["mode"] == "independent" and c["status"] == "ok"}
    for c in cells:
        b = base.get(c["trainers"])
        c["speedup"] = (c["agg_samples_per_s"] / b) if (b and c["status"] == "ok"
                                                        and c["agg_samples_per_s"]) else None


def evaluate_targets(cells: List[Dict[str, Any]], args) -> List[str]:
    """The brief's targets, as lines (reported, not asserted)."""
    lines = []
    ns = sorted({c["trainers"] for c in cells})
    lo, hi = ns[0], ns[-1]
    ok = {(c["mode"], c["trainers"]): c for c in cells if c["status"] == "ok"}
    target_n = 4 if 4 in ns else hi
    for mode in SHARED_MODES:
        if mode not in args.modes:
            continue
        c = ok.get((mode, target_n))
        if c is None or c["speedup"] is None:
            lines.append(f"{mode}: throughput target not evaluated (no successful {mode} and independent "
                         f"cells at N={target_n})")
        else:
            lines.append(f"{mode} at N={target_n}: {c['speedup']:.2f}x the aggregate throughput of "
                         f"independent (target >= 3x: {'met' if c['speedup'] >= 3 else 'NOT met'})")
        if hi > lo and (mode, lo) in ok and (mode, hi) in ok:
            a, b = ok[(mode, lo)], ok[(mode, hi)]
            r = b["cpu_s_per_1k_samples"] / a["cpu_s_per_1k_samples"]
            lines.append(f"{mode}: CPU s per 1000 samples {a['cpu_s_per_1k_samples']:.2f} at N={lo}, "
                         f"{b['cpu_s_per_1k_samples']:.2f} at N={hi} ({r:.2f}x; target: does not grow: "
                         f"{'met' if r <= 1.10 else 'NOT met'})")
            per_trainer = b["mem_trainers_mb"] / hi
            growth = b["peak_mem_mb"] - a["peak_mem_mb"]
            own = b["mem_trainers_mb"] - a["mem_trainers_mb"]
            lines.append(f"{mode}: peak memory {a['peak_mem_mb']:.0f} MB at N={lo}, {b['peak_mem_mb']:.0f} MB "
                         f"at N={hi}: +{growth:.0f} MB, of which the trainers' own processes +{own:.0f} MB "
                         f"({per_trainer:.0f} MB each); the loading side {a['mem_loading_mb']:.0f} -> "
                         f"{b['mem_loading_mb']:.0f} MB (target: grows only by the trainers' own: "
                         f"{'met' if b['mem_loading_mb'] <= 1.10 * a['mem_loading_mb'] + 16 else 'NOT met'})")
    if args.step_ms is None and not args.cuda:
        lines.append(f"note: the model trains on the same {os.cpu_count()} CPU cores that load the data, so "
                     "this run is not loading-bound; the throughput target applies to a loading-bound setup "
                     "(--step-ms)")
    return lines


# ---------------------------------------------------------------------------
# Output


def _fmt(x, spec: str, suffix: str = "") -> str:
    return "-" if x is None else format(x, spec) + suffix


def format_table(cells: List[Dict[str, Any]]) -> str:
    head = ("mode", "N", "samples/s", "per trainer", "data wait", "CPU s/1k", "peak mem", "speedup")
    sub = ("", "", "aggregate", "samples/s", "share", "samples", "MB", "vs indep.")
    widths = (14, 3, 10, 12, 10, 9, 9, 10)
    out = ["  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(head, widths))),
           "  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(sub, widths)))]
    for c in cells:
        if c["status"] != "ok":
            first = (c["error"] or "").strip().splitlines()[0] if c["error"] else ""
            out.append(f"{c['mode']:<14}  {c['trainers']:>3}  {c['status'].upper()}: {first[:90]}")
            continue
        vals = (c["mode"], str(c["trainers"]), _fmt(c["agg_samples_per_s"], ".1f"),
                _fmt(c["per_trainer_samples_per_s"], ".1f"), _fmt(100 * c["wait_share"], ".1f", "%"),
                _fmt(c["cpu_s_per_1k_samples"], ".2f"), _fmt(c["peak_mem_mb"], ".0f"),
                _fmt(c["speedup"], ".2f", "x"))
        out.append("  ".join(v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in enumerate(zip(vals, widths))))
    return "\n".join(out)


def machine_info() -> Dict[str, Any]:
    info: Dict[str, Any] = {"cpus": os.cpu_count(), "python": sys.version.split()[0]}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
        info["mem_total_gib"] = round(_read_kb("/proc/meminfo", ("MemTotal",))["MemTotal"] / 2**20, 1)
    except (OSError, KeyError):
        pass
    return info


def check_cuda(device: str) -> Optional[str]:
    """None if `device` is usable, else why not."""
    code = ("import torch,sys; ok=torch.cuda.is_available(); "
            "print(torch.__version__, torch.version.cuda, torch.cuda.device_count() if ok else 0)")
    try:
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"could not start python to check CUDA: {e}"
    if r.returncode != 0:
        return f"importing torch failed:\n{r.stderr.strip()[-2000:]}"
    version, cuda, count = r.stdout.split()
    idx = int(device.split(":")[1]) if ":" in device else 0
    if int(count) == 0:
        return (f"--device {device} needs an NVIDIA GPU with CUDA, but torch.cuda.is_available() is False "
                f"(torch {version}, built for CUDA {cuda}); this is the GPU profile of the benchmark: run "
                f"it on a machine with a GPU, or use --device cpu")
    if idx >= int(count):
        return f"--device {device}: only {count} CUDA device(s) visible"
    return None


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.role:
        spec = json.loads(args.spec)
        {"trainer": trainer_main, "py-producer": py_producer_main, "ts-producer": ts_producer_main}[args.role](spec)
        return 0

    def log(msg: str) -> None:
        if not args.quiet:
            print(f"[collocated] {msg}", file=sys.stderr, flush=True)

    if args.cuda:
        why = check_cuda(args.device)
        if why:
            print(f"collocated.py: {why}", file=sys.stderr)
            return 2
    _set_subreaper()
    dataset = ensure_dataset(args.cache_dir, args.images, args.classes, args.seed, log)
    log(f"dataset {dataset['path']}: {dataset['files']} JPEGs, mean {dataset['mean_file_kib']} KiB")
    cells = []
    run_start = time.monotonic()
    for n in args.trainers:
        for mode in args.modes:
            log(f"{mode}, N={n} ...")
            cell = run_cell(args, dataset, mode, n, log)
            cells.append(cell)
            if cell["status"] == "ok":
                log(f"{mode}, N={n}: {cell['agg_samples_per_s']:.1f} samples/s aggregate, "
                    f"{cell['wall_s']:.1f} s")
            else:
                log(f"{mode}, N={n}: {cell['status']}: {cell['error']}")
    order = {m: i for i, m in enumerate(args.modes)}
    cells.sort(key=lambda c: (order[c["mode"]], c["trainers"]))
    add_speedups(cells)
    targets = evaluate_targets(cells, args)

    setup = (f"{args.model if args.step_ms is None else f'emulated accelerator, {args.step_ms:g} ms/step'} "
             f"on {args.device}; {dataset['files']} JPEGs ({dataset['mean_file_kib']} KiB mean), "
             f"{args.image_size}px crops, batch {args.batch_size}, {args.epochs} epochs, "
             f"{args.workers} workers per pipeline, {args.threads} torch thread(s) per trainer; "
             f"{machine_info().get('cpus')} CPUs")
    print(setup)
    print(format_table(cells))
    notes = [f"{c['mode']} N={c['trainers']}: {c['status']}: {c['error']}" for c in cells if c["status"] != "ok"]
    notes += [f"{c['mode']} N={c['trainers']}: {note}" for c in cells for note in c["notes"]
              if not note.startswith("serve: ")]
    if notes:
        print("\nnotes:")
        for note in notes:
            print("  " + note.replace("\n", "\n    "))
    print("\ntargets:")
    for line in targets:
        print("  " + line)
    print(f"\ntotal {time.monotonic() - run_start:.0f} s")
    if args.json:
        doc = {
            "config": {k: getattr(args, k) for k in (
                "modes", "trainers", "epochs", "images", "classes", "image_size", "workers", "batch_size",
                "step_ms", "model", "threads", "device", "window", "seed", "timeout", "stall_timeout")},
            "machine": machine_info(), "dataset": dataset, "setup": setup,
            "results": cells, "targets": targets,
        }
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1, default=str)
        log(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
