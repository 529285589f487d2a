"""The dataset: deterministic synthetic ImageNet-like JPEGs (about 500x375,
~90 KiB) in ImageFolder layout, generated once per parameter set and reused
from the cache directory."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from typing import Any

DATASET_VERSION = 2


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


def ensure_dataset(cache_dir: str, images: int, classes: int, seed: int, log) -> dict[str, Any]:
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


def _ensure_dataset_locked(cache_dir, name, root, data, marker, params, log) -> dict[str, Any]:
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
