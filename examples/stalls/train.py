"""A small CPU training script for ``batchcast stalls``, with a tunable data
pipeline (JPEG files decoded by PIL) and a tunable training step.

    python examples/stalls/train.py --data /tmp/stalls-data            # a normal run
    batchcast stalls --jobs 2,4 -- python examples/stalls/train.py --data /tmp/stalls-data

The only batchcast line is ``loader = batchcast.stalls.mark(loader)``: a
pass-through in normal runs.

Knobs: ``--prep N`` decodes and resizes each image N times (prep cost),
``--compute N`` runs N extra 128x128 matmul rounds per step (step cost),
``--slow-storage-ms D`` makes a read of a file that is not in the page cache
take D ms more (a slow network disk: this VM's disk is too fast to show a
fetch stall; whether the file is cached is asked of the kernel with
``preadv(RWF_NOWAIT)``, so only cold reads pay). Under torchrun (WORLD_SIZE
> 1) it trains with DistributedDataParallel over gloo.
"""

import argparse
import io
import os
import time

import numpy as np
import torch
from PIL import Image

import batchcast.stalls


def make_data(root: str, n: int, size: int) -> None:
    stamp, made = os.path.join(root, ".made"), f"{n} {size}"
    if os.path.exists(stamp) and open(stamp).read() == made:
        return
    os.makedirs(root, exist_ok=True)
    rng = np.random.default_rng(0)
    for i in range(n):
        pixels = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(os.path.join(root, f"{i:06d}.jpg"), quality=90)
    with open(stamp, "w") as f:
        f.write(made)


def is_cached(fd: int) -> bool:
    try:
        os.preadv(fd, [bytearray(4096)], 0, os.RWF_NOWAIT)
        return True
    except BlockingIOError:
        return False


class JpegFiles(torch.utils.data.Dataset):
    def __init__(self, root: str, n: int, prep: int, slow_ms: float, out: int = 32) -> None:
        self.files = [os.path.join(root, f"{i:06d}.jpg") for i in range(n)]
        self.prep, self.slow, self.out = prep, slow_ms / 1000.0, out

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int):
        with open(self.files[i], "rb") as f:
            if self.slow and not is_cached(f.fileno()):
                time.sleep(self.slow)
            data = f.read()
        for _ in range(self.prep):
            img = Image.open(io.BytesIO(data)).convert("RGB").resize((self.out, self.out), Image.BILINEAR)
        x = torch.from_numpy(np.asarray(img, dtype=np.float32).reshape(-1) / 255.0)
        return x, i % 10


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--data", default="/tmp/batchcast-stalls-data")
    p.add_argument("--images", type=int, default=512)
    p.add_argument("--size", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--prep", type=int, default=1)
    p.add_argument("--compute", type=int, default=1)
    p.add_argument("--slow-storage-ms", type=float, default=0.0)
    p.add_argument("--epochs", type=int, default=1000)
    p.add_argument("--crash", action="store_true", help="fail before training (tests)")
    p.add_argument("--no-mark", action="store_true", help="never mark the loader (tests)")
    p.add_argument("--hang", action="store_true", help="hang before training (tests)")
    a = p.parse_args()
    torch.set_num_threads(1)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        torch.distributed.init_process_group("gloo")
    if int(os.environ.get("RANK", "0")) == 0:
        make_data(a.data, a.images, a.size)
    if world > 1:
        torch.distributed.barrier()
    print(f"training on {a.images} images, batch {a.batch_size}, prep x{a.prep}, compute x{a.compute}", flush=True)
    if a.crash:
        raise RuntimeError("this script crashes on purpose (--crash)")
    if a.hang:
        time.sleep(3600)
    dataset = JpegFiles(a.data, a.images, a.prep, a.slow_storage_ms)
    sampler = torch.utils.data.DistributedSampler(dataset) if world > 1 else None
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=a.batch_size, shuffle=sampler is None, sampler=sampler, num_workers=a.workers
    )
    if not a.no_mark:
        loader = batchcast.stalls.mark(loader)

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32 * 32 * 3, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    w = torch.randn(128, 128) / 12
    for epoch in range(a.epochs):
        if sampler is not None:
            sampler.set_epoch(epoch)
        for x, y in loader:
            h = torch.randn(128, 128)
            for _ in range(a.compute * 20):
                h = torch.tanh(h @ w)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        print(f"epoch {epoch}: loss {loss.item():.3f}", flush=True)


if __name__ == "__main__":
    main()
