"""Run timm's own train.py with its training loader replaced by a shared
batchcast producer. Nothing in train.py changes: this wrapper replaces
timm.data.create_loader for the training split only (validation keeps its
own loader), then runs train.py as its __main__.

    # one producer (see producer.py), any number of trainers:
    python examples/timm/shared_loader.py PATH/TO/pytorch-image-models/train.py DATA \\
        --model resnet10t --img-size 32 -b 64 --epochs 3 --lr 0.1 --no-prefetcher --device cpu

BATCHCAST_NAME picks the producer (default "timm-train"). The trainer states
what it expects (its input size, and uint8 images with the prefetcher,
float32 without), so a trainer started with --img-size 96 against a 32-px
producer, or with the prefetcher against a producer without --prefetcher,
stops at connection with both sides named instead of training on the wrong
images. With the prefetcher on (train.py's default, on a GPU), timm's
PrefetchLoader wraps the Consumer and normalises on the GPU: run the
producer with --prefetcher then, so that it sends uint8. Under torchrun each
rank reads its own rows of every batch (start the producer with
--trainers N for N ranks).
"""

from __future__ import annotations

import inspect
import os
import runpy
import sys
from typing import Any

NAME = os.environ.get("BATCHCAST_NAME", "timm-train")


def check_augmentation(consumer: Any, options: dict, prefetcher: bool) -> None:
    """Refuses train.py options that the producer would not honour: its
    augmentation flags where they differ from the producer's (see
    augmentation.py), and the modes a shared stream cannot give."""
    import batchcast
    from augmentation import FLAGS, announced

    unsupported = {"num_aug_splits": "--aug-splits", "num_aug_repeats": "--aug-repeats",
                   "input_size_choices": "scheduled input sizes"}
    for key, flag in unsupported.items():
        if options.get(key):
            sys.exit(f"shared_loader.py: train.py's {flag} ({key}={options[key]!r}) is not "
                     "supported with a shared producer; drop it, or train without "
                     "examples/timm/shared_loader.py")
    theirs = consumer.spec.metadata.get("augmentation")
    if theirs is None:
        raise batchcast.StreamMismatch(
            f"producer {consumer.name!r} does not announce its augmentation (metadata "
            "'augmentation'); start it with examples/timm/producer.py")
    mine = announced(options, prefetcher)
    differ = [k for k in sorted(set(mine) | set(theirs)) if mine.get(k) != theirs.get(k)]
    if differ:
        each = "; ".join(f"{k}={mine.get(k)!r} (train.py {FLAGS[k]}) against the producer's "
                         f"{theirs.get(k)!r}" for k in differ)
        raise batchcast.StreamMismatch(
            f"train.py's augmentation differs from producer {consumer.name!r}'s: {each}. The "
            "producer augments once for all its trainers: start examples/timm/producer.py with "
            "the same flags, one producer per augmentation setting, each under its own "
            "BATCHCAST_NAME")


class TrainLoader:
    """The Consumer as train.py's training loader. Under torchrun (world > 1)
    the consumer reads batches of batch_size * world rows and each rank
    takes its own rows [rank * batch_size, (rank + 1) * batch_size): the
    ranks share one stream and each sample goes to one rank; the ranks check
    at each epoch's first batch that they read the same epoch. train.py's
    collate_fn (timm's FastCollateMixup with --mixup/--cutmix and the
    prefetcher) then mixes this rank's rows, in this trainer, with its own
    draws. Everything else is the Consumer's."""

    def __init__(self, consumer: Any, batch_size: int, collate_fn: Any, rank: int,
                 world: int) -> None:
        self.consumer = consumer
        self.batch_size = batch_size
        self.collate_fn = collate_fn  # PrefetchLoader.mixup_enabled reads it
        self.rank, self.world = rank, world

    def __iter__(self) -> Any:
        first = True
        for images, targets in self.consumer:
            if self.world > 1:
                if first:
                    self._check_same_epoch()
                rows = slice(self.rank * self.batch_size, (self.rank + 1) * self.batch_size)
                images, targets = images[rows], targets[rows]
            first = False
            if self.collate_fn is not None:
                yield self.collate_fn(list(zip(images, targets)))
            else:
                yield images, targets

    def _check_same_epoch(self) -> None:
        import torch.distributed as dist

        epochs: list = [None] * self.world
        dist.all_gather_object(epochs, self.consumer.epoch)
        if len(set(epochs)) > 1:
            raise RuntimeError(
                f"shared_loader.py: the ranks read different epochs of producer "
                f"{self.consumer.name!r} (rank by rank: {epochs}): they joined it at different "
                f"times; start the producer with --trainers {self.world} (one per rank) so that "
                "it waits for all of them")

    def __len__(self) -> int:
        return len(self.consumer)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.consumer, name)


def shared_create_loader(real: Any) -> Any:
    """timm.data.create_loader, with the training loader read from the
    producer NAME."""

    defaults = {k: p.default for k, p in inspect.signature(real).parameters.items()}

    def create_loader(dataset: Any, input_size: Any, batch_size: int, is_training: bool = False,
                      **kwargs: Any) -> Any:
        if not is_training:
            return real(dataset, input_size, batch_size, is_training=is_training, **kwargs)
        import batchcast

        shape = tuple(input_size) if isinstance(input_size, (tuple, list)) else (3, input_size,
                                                                                 input_size)
        prefetcher = kwargs.get("use_prefetcher", True)
        rank, world = 0, 1
        if kwargs.get("distributed"):  # train.py under torchrun: one shard of each batch a rank
            import torch.distributed as dist

            rank, world = dist.get_rank(), dist.get_world_size()
        # timm's prefetcher normalises uint8 images in the trainer; without
        # it the producer's transform sends them normalised, as float32.
        dtype = "uint8" if prefetcher else "float32"
        try:
            # drop_last as timm's own training loader: the same steps per
            # epoch, and no short last batch (FastCollateMixup needs even ones).
            consumer = batchcast.Consumer(NAME, batch_size=batch_size * world, drop_last=True,
                                          connect_timeout=120,
                                          expect={"batch[0]": {"shape": shape, "dtype": dtype}})
        except batchcast.StreamMismatch as e:
            raise batchcast.StreamMismatch(
                f"{e}. A train.py with timm's prefetcher (its default) reads uint8 images: start "
                "examples/timm/producer.py with --prefetcher; one run with --no-prefetcher reads "
                "float32 images: start the producer without --prefetcher"
            ) from None
        try:
            options = {**defaults, **kwargs}
            check_augmentation(consumer, options, prefetcher)
        except BaseException:
            consumer.close()
            raise
        loader: Any = consumer
        if world > 1 or kwargs.get("collate_fn") is not None:
            loader = TrainLoader(consumer, batch_size, kwargs.get("collate_fn"), rank, world)
        if prefetcher:
            import torch
            from timm.data.loader import PrefetchLoader

            # Normalisation and random erasing: this trainer's own options,
            # applied here as timm's create_loader would.
            re_split = options["re_split"]
            return PrefetchLoader(
                loader, mean=options["mean"], std=options["std"], channels=shape[0],
                device=options["device"], img_dtype=options["img_dtype"], fp16=options["fp16"],
                re_prob=0.0 if options["no_aug"] else options["re_prob"],
                re_mode=options["re_mode"], re_count=options["re_count"],
                re_num_splits=(options["num_aug_splits"] or 2) if re_split else 0)
        return loader

    return create_loader


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    import timm.data

    timm.data.create_loader = shared_create_loader(timm.data.create_loader)
    train_py = sys.argv[1]
    sys.argv = sys.argv[1:]
    runpy.run_path(train_py, run_name="__main__")


if __name__ == "__main__":
    main()
