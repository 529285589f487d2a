"""Training-library roles for the drop-in tests (run through helpers.py:
``python helpers.py ROLE JSON``): a producer of a shuffled, seeded DataLoader
of sample ids, and trainers that read it through PyTorch Lightning,
Accelerate, timm's loader code or a plain loop, each printing one line per
epoch: ``epoch {"epoch": n, "ids": [...], "len": len(loader)}``.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List


def say(*parts: Any) -> None:
    print(*parts, flush=True)


def id_loader(n: int = 40, batch_size: int = 8, seed: int = 0, images: bool = False) -> Any:
    """A shuffled DataLoader over samples (x, id): x = [id] * 4, or with
    `images` a uint8 image (3, 32, 32) filled with id (as timm's loader
    gives them to its PrefetchLoader, which normalises)."""
    import torch
    from torch.utils.data import DataLoader, Dataset

    class Ids(Dataset):
        def __len__(self) -> int:
            return n

        def __getitem__(self, i: int):
            if images:
                return torch.full((3, 32, 32), i % 256, dtype=torch.uint8), i
            return torch.full((4,), float(i)), i

    return DataLoader(Ids(), batch_size=batch_size, shuffle=True,
                      generator=torch.Generator().manual_seed(seed))


def dataloader_epochs(epochs: int, **kw: Any) -> List[List[int]]:
    """The sample ids a DataLoader gives in its first `epochs` epochs."""
    loader = id_loader(**kw)
    return [[int(i) for _, ids in loader for i in ids] for _ in range(epochs)]


def produce_id_loader(o: Dict[str, Any]) -> None:
    import batchcast

    loader = id_loader(o.get("n", 40), o.get("batch_size", 8), images=o.get("images", False))
    kw = {k: o[k] for k in ("idle_timeout", "metadata") if k in o}
    p = batchcast.Producer(loader, o["name"], window=o.get("window", 4),
                           wait_for_consumers=o.get("consumers", 1), **kw)
    say("ready")
    run_kw = {k: o[k] for k in ("epochs", "forever") if k in o}
    try:
        served = p.run(**run_kw)
    except batchcast.NoConsumers as e:
        say("noconsumers", str(e))
        return
    say("done", served)


def _consumer(o: Dict[str, Any]) -> Any:
    import sys

    import batchcast

    if o.get("wait_stdin"):  # started early; connects when the test says so
        say("started")
        sys.stdin.readline()

    return batchcast.Consumer(o["name"], batch_size=o.get("batch_size"),
                              connect_timeout=o.get("connect_timeout", 30))


def _report(epoch: int, ids: List[int], length: Any) -> None:
    say("epoch", json.dumps({"epoch": epoch, "ids": ids, "len": length}))


def train_lightning(o: Dict[str, Any]) -> None:
    loader = _consumer(o)  # first: connects as soon as the producer is up
    import lightning as L
    import torch

    torch.set_num_threads(1)

    class Model(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)
            self.ids: List[int] = []

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            x, ids = batch
            self.ids.extend(int(i) for i in ids)
            return self.layer(x).pow(2).mean()

        def on_train_epoch_end(self) -> None:
            _report(self.current_epoch, self.ids, len(loader))
            self.ids = []

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    for _ in range(o.get("fits", 1)):
        trainer = L.Trainer(max_epochs=o.get("epochs", 3), accelerator="cpu", devices=1,
                            logger=False, enable_checkpointing=False,
                            enable_progress_bar=False, enable_model_summary=False)
        trainer.fit(Model(), train_dataloaders=loader)
    say("fitted", loader.sampler.epoch)


def train_accelerate(o: Dict[str, Any]) -> None:
    import torch
    from accelerate import Accelerator

    torch.set_num_threads(1)
    accelerator = Accelerator(cpu=True)
    loader = _consumer(o)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    model, opt, prepared = accelerator.prepare(model, opt, loader)
    say("prepared", type(prepared).__name__, prepared is loader)
    for epoch in range(o.get("epochs", 3)):
        length = len(prepared)
        ids: List[int] = []
        for x, y in prepared:
            ids.extend(int(i) for i in y)
            loss = model(x.to(accelerator.device)).pow(2).mean()
            accelerator.backward(loss)
            opt.step()
            opt.zero_grad()
        _report(epoch, ids, length)
    say("fitted")


def train_accelerate_skip(o: Dict[str, Any]) -> None:
    """accelerator.skip_first_batches on a Consumer (refused, naming the way
    that works), then consumer.skip_first_batches for one epoch."""
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    loader = _consumer(o)
    try:
        accelerator.skip_first_batches(loader, 3)
    except TypeError as e:
        say("refused", str(e))
    skipped = loader.skip_first_batches(3)
    length = len(skipped)
    _report(0, [int(i) for _, ids in skipped for i in ids], length)
    _report(1, [int(i) for _, ids in loader for i in ids], len(loader))
    say("fitted")


def train_plain(o: Dict[str, Any]) -> None:
    """A plain loop that first calls iter() and drops the iterator, as
    libraries do to check that a loader is iterable."""
    loader = _consumer(o)
    for epoch in range(o.get("epochs", 3)):
        iter(loader)  # dropped: claims nothing
        length = len(loader)
        _report(epoch, [int(i) for _, ids in loader for i in ids], length)
    say("fitted")


def _set_loader_epoch(loader: Any, epoch: int) -> None:
    """Verbatim from timm's train.py (huggingface/pytorch-image-models
    @aa4b585, Apache-2.0): it reads loader.dataset unguarded."""
    if hasattr(loader.dataset, 'set_epoch'):
        loader.dataset.set_epoch(epoch)
    if hasattr(loader.batch_sampler, 'set_epoch'):
        loader.batch_sampler.set_epoch(epoch)
    elif hasattr(loader.sampler, 'set_epoch'):
        loader.sampler.set_epoch(epoch)


def train_timm(o: Dict[str, Any]) -> None:
    """timm's training loop as its train.py drives a loader: timm's own
    PrefetchLoader (normalising uint8 images) over the Consumer, the epoch
    set through _set_loader_epoch, updates counted from len(loader)."""
    import timm
    import torch
    from timm.data.loader import PrefetchLoader

    torch.set_num_threads(1)
    consumer = _consumer(o)
    loader = PrefetchLoader(consumer, device=torch.device("cpu"))
    model = timm.create_model("resnet10t", num_classes=40)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    accum_steps = 2
    for epoch in range(o.get("epochs", 2)):
        _set_loader_epoch(loader, epoch)
        updates_per_epoch = (len(loader) + accum_steps - 1) // accum_steps  # as train.py
        last_batch_idx = len(loader) - 1
        ids: List[int] = []
        updates = 0
        for batch_idx, (input, target) in enumerate(loader):
            assert input.dtype == torch.float32  # normalised by timm
            ids.extend(int(i) for i in target)
            loss = torch.nn.functional.cross_entropy(model(input), target) / accum_steps
            loss.backward()
            if batch_idx == last_batch_idx or (batch_idx + 1) % accum_steps == 0:
                opt.step()
                opt.zero_grad()
                updates += 1
        assert updates == updates_per_epoch, (updates, updates_per_epoch)
        _report(epoch, ids, len(loader))
    say("fitted", consumer.batch_sampler.epoch, len(loader.dataset), consumer.num_workers)
