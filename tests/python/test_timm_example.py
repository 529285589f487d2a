"""timm's training modes through examples/timm: a stand-in for train.py
(which the timm wheel does not ship) calls timm's own create_loader,
FastCollateMixup and PrefetchLoader as train.py does, run by the wrapper
shared_loader.py against examples/timm/producer.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import List

import pytest

from conftest import kill_all

ROOT = Path(__file__).resolve().parents[2]
TIMM = ROOT / "examples" / "timm"

pytest.importorskip("torch")
pytest.importorskip("timm")
pytest.importorskip("PIL")

# train.py's create_loader call for the training split (huggingface/
# pytorch-image-models, train.py), with train.py's defaults for its flags.
TRAIN_STANDIN = """
import argparse
import os
import torch
from timm.data import FastCollateMixup, create_dataset, create_loader
from timm.data.constants import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD

p = argparse.ArgumentParser()
p.add_argument("data")
p.add_argument("--img-size", type=int, default=32)
p.add_argument("-b", "--batch-size", type=int, default=16)
p.add_argument("--epochs", type=int, default=2)
p.add_argument("--no-prefetcher", action="store_true")
p.add_argument("--mixup", type=float, default=0.0)
p.add_argument("--aa", default=None)
p.add_argument("--reprob", type=float, default=0.0)
p.add_argument("--hflip", type=float, default=0.5)
args = p.parse_args()
args.distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1  # as train.py, under torchrun
if args.distributed:
    torch.distributed.init_process_group("gloo")
prefetcher = not args.no_prefetcher
collate_fn = None
if args.mixup > 0 and prefetcher:
    collate_fn = FastCollateMixup(mixup_alpha=args.mixup, num_classes=4, label_smoothing=0.1)
dataset = create_dataset("", root=args.data, split="train", is_training=True)
loader = create_loader(
    dataset, input_size=(3, args.img_size, args.img_size), batch_size=args.batch_size,
    is_training=True, no_aug=False, re_prob=args.reprob, re_mode="pixel", re_count=1,
    re_split=False, train_crop_mode=None, scale=[0.08, 1.0], ratio=[3 / 4, 4 / 3],
    hflip=args.hflip, vflip=0.0, color_jitter=0.4, color_jitter_prob=None, grayscale_prob=None,
    gaussian_blur_prob=None, auto_augment=args.aa, num_aug_repeats=0, num_aug_splits=0,
    interpolation="random", mean=IMAGENET_DEFAULT_MEAN, std=IMAGENET_DEFAULT_STD,
    num_workers=0, distributed=args.distributed, collate_fn=collate_fn, pin_memory=False,
    img_dtype=torch.float32, device=torch.device("cpu"), use_prefetcher=prefetcher,
    use_multi_epochs_loader=False, worker_seeding="all")
print("mixup", getattr(loader, "mixup_enabled", None),
      "erasing", getattr(loader, "random_erasing", None) is not None, flush=True)
for epoch in range(args.epochs):
    for name in ("dataset", "batch_sampler", "sampler"):  # train.py's _set_loader_epoch
        if hasattr(getattr(loader, name), "set_epoch"):
            getattr(loader, name).set_epoch(epoch)
    n, low, high = 0, 0.0, 0.0
    for input, target in loader:
        n += 1
        low, high = min(low, float(input.min())), max(high, float(input.max()))
    # Normalised once: ImageNet-normalised pixels lie within about [-2.2, 2.7].
    print("epoch", epoch, n, len(loader), str(input.dtype), tuple(input.shape),
          str(target.dtype), tuple(target.shape), -2.3 < low < 0 < high < 2.7, flush=True)
"""


class Example:
    """A data directory, the stand-in train.py and the environment."""

    def __init__(self, bc_dir: Path, tmp_path: Path) -> None:
        self.data = tmp_path / "data"
        self.train_py = tmp_path / "train.py"
        self.train_py.write_text(TRAIN_STANDIN)
        self.env = dict(os.environ, BATCHCAST_DIR=str(bc_dir), PYTHONUNBUFFERED="1")
        self.producers: List[subprocess.Popen] = []

    def producer(self, *args: str) -> subprocess.Popen:
        generate = [] if self.data.exists() else ["--generate"]
        p = subprocess.Popen(
            [sys.executable, TIMM / "producer.py", self.data, *generate, "--img-size", "32",
             "--workers", "0", "--idle-timeout", "5", *args],
            env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.producers.append(p)
        while not (self.data / "validation").exists() and p.poll() is None:
            time.sleep(0.05)  # (the producer writes the generated dataset first)
        return p

    def trainers(self, *argvs: List[str]) -> List[subprocess.CompletedProcess]:
        procs = [subprocess.Popen([sys.executable, TIMM / "shared_loader.py", self.train_py,
                                   self.data, *argv], env=self.env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for argv in argvs]
        done = []
        for p in procs:
            out, err = p.communicate(timeout=300)
            done.append(subprocess.CompletedProcess(p.args, p.returncode, out, err))
        return done

    def finish(self) -> None:
        for p in self.producers:
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0, err[-3000:]
            assert "producer: served" in out

    def kill(self) -> None:
        kill_all(self.producers)


@pytest.fixture
def example(bc_dir, tmp_path):
    ex = Example(bc_dir, tmp_path)
    try:
        yield ex
    finally:
        ex.kill()


def _ok(r: subprocess.CompletedProcess) -> List[str]:
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.splitlines()


def test_prefetcher_mode_trains_on_uint8_batches_normalised_once_by_timm(example):
    example.producer("-b", "32", "--prefetcher")
    (r,) = example.trainers(["-b", "16"])
    # 128 generated images, batches of 16: timm's PrefetchLoader gives
    # float32 batches, normalised once.
    assert _ok(r)[1:] == [
        f"epoch {e} 8 8 torch.float32 (16, 3, 32, 32) torch.int64 (16,) True" for e in (0, 1)
    ]
    example.finish()


def test_a_trainer_whose_prefetcher_setting_differs_from_the_producers_is_refused(example):
    example.producer("-b", "32")  # float32, normalised by the producer
    prefetching, plain = example.trainers(["-b", "16"], ["-b", "16", "--no-prefetcher"])
    assert prefetching.returncode != 0
    assert "StreamMismatch" in prefetching.stderr
    assert "'dtype': 'uint8'" in prefetching.stderr and "float32[3, 32, 32]" in prefetching.stderr
    assert "--prefetcher" in prefetching.stderr
    assert _ok(plain)[1].startswith("epoch 0 8 8 torch.float32")
    example.finish()
    example.producers.clear()
    example.producer("-b", "32", "--prefetcher")  # uint8
    (r,) = example.trainers(["-b", "16", "--no-prefetcher"])
    assert r.returncode != 0
    assert "'dtype': 'float32'" in r.stderr and "uint8[3, 32, 32]" in r.stderr


@pytest.mark.parametrize("mixup", [False, True])
def test_train_py_collate_fn_and_drop_last_are_kept(example, mixup):
    """A batch size (24) that does not divide the producer's (32): timm's
    own loader drops the last, short batch (128 // 24 = 5 steps); with
    --mixup and the prefetcher, train.py's FastCollateMixup mixes each batch
    and its targets become soft (24, 4) float rows."""
    example.producer("-b", "32", "--prefetcher")
    (r,) = example.trainers(["-b", "24", "--epochs", "1"] + (["--mixup", "0.8"] if mixup else []))
    target = "torch.float32 (24, 4)" if mixup else "torch.int64 (24,)"
    assert _ok(r) == [f"mixup {mixup} erasing False",
                      f"epoch 0 5 5 torch.float32 (24, 3, 32, 32) {target} True"]
    example.finish()


def test_augmentation_flags_take_effect_in_the_trainer_or_are_refused_by_name(example):
    """The producer augments for all: a trainer asking for another
    auto-augment or flip is refused, naming the option and its flag; random
    erasing and normalisation, which timm's prefetcher applies in the
    trainer, take effect there."""
    example.producer("-b", "32", "--prefetcher", "--hflip", "0.0")
    aa, flip, erase = example.trainers(["--aa", "rand-m9-mstd0.5", "--hflip", "0.0"], [],
                                       ["--reprob", "0.5", "--hflip", "0.0", "--epochs", "1"])
    assert aa.returncode != 0
    assert "auto_augment='rand-m9-mstd0.5' (train.py --aa) against the producer's None" in aa.stderr
    assert "hflip" not in aa.stderr.splitlines()[-1].split("differs")[1]
    assert flip.returncode != 0
    assert "hflip=0.5 (train.py --hflip) against the producer's 0.0" in flip.stderr
    assert "BATCHCAST_NAME" in flip.stderr
    assert _ok(erase)[0] == "mixup False erasing True"
    assert _ok(erase)[1].startswith("epoch 0 8 8 torch.float32 (16, 3, 32, 32)")
    example.finish()


@pytest.mark.parametrize("mixup", [False, True])
def test_train_py_under_torchrun_reads_one_shard_of_each_batch_a_rank(example, mixup):
    """Two CPU ranks (gloo) on one producer: each rank reads its 16 rows of
    every batch of 32, so an epoch of 128 images is 4 steps a rank (8 for a
    single trainer at -b 16), in both epochs."""
    example.producer("-b", "32", "--prefetcher", "--trainers", "2")
    torchrun = subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--standalone",
         "--tee", "1", TIMM / "shared_loader.py", example.train_py, example.data, "-b", "16"]
        + (["--mixup", "0.8"] if mixup else []),
        env=example.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True)  # its ranks go with it on a timeout
    try:
        out, err = torchrun.communicate(timeout=120)
    finally:
        if torchrun.poll() is None:
            os.killpg(torchrun.pid, signal.SIGKILL)
            torchrun.communicate()
    r = subprocess.CompletedProcess(torchrun.args, torchrun.returncode, out, err)
    assert r.returncode == 0, r.stderr[-3000:]
    target = "torch.float32 (16, 4)" if mixup else "torch.int64 (16,)"
    for rank in (0, 1):
        lines = [line.split("]:", 1)[1] for line in r.stdout.splitlines()
                 if line.startswith(f"[default{rank}]:epoch")]
        assert lines == [f"epoch {e} 4 4 torch.float32 (16, 3, 32, 32) {target} True"
                         for e in (0, 1)], r.stdout
    example.finish()


def test_ranks_that_read_different_epochs_stop_with_the_flag_that_aligns_them(monkeypatch):
    import importlib.util

    import torch
    import torch.distributed as dist

    spec = importlib.util.spec_from_file_location("shared_loader", TIMM / "shared_loader.py")
    shared_loader = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(shared_loader)

    class Stream:  # a consumer in epoch 0, whose other rank is in epoch 1
        name, epoch = "timm-train", 0

        def __iter__(self):
            yield torch.zeros(4, 3, 2, 2), torch.arange(4)

    def all_gather_object(out, epoch):
        out[:] = [epoch, epoch + 1]

    monkeypatch.setattr(dist, "all_gather_object", all_gather_object)
    loader = shared_loader.TrainLoader(Stream(), 2, None, rank=0, world=2)
    with pytest.raises(RuntimeError, match=r"different epochs .* \[0, 1\].*--trainers 2"):
        next(iter(loader))
    monkeypatch.setattr(dist, "all_gather_object", lambda out, e: out.__setitem__(slice(None), [e, e]))
    images, targets = next(iter(shared_loader.TrainLoader(Stream(), 2, None, rank=1, world=2)))
    assert targets.tolist() == [2, 3]  # rank 1's rows
