"""A Lightning trainer for test_lightning_resume.py (``python
lightning_roles.py JSON``): fits a LightningModule whose train dataloader
is batchcast.compat.lightning's Consumer, writing the sample ids each training_step was
handed to `ids_out` (one JSON list per line). With `fail_at`, the step of
that index raises after recording its ids, and OnExceptionCheckpoint saves
`ckpt_dir`/`ckpt_name`.ckpt; with `ckpt_path`, the fit resumes from it."""

from __future__ import annotations

import json
import sys
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import OnExceptionCheckpoint

from batchcast.compat.lightning import Consumer


class Interrupted(RuntimeError):
    """The failure the first run is cut short by."""


class Model(L.LightningModule):
    def __init__(self, ids_out: str, fail_at: int | None) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(16, 1)
        self.ids_out = ids_out
        self.fail_at = fail_at

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        payload, ids = batch
        with open(self.ids_out, "a") as f:
            f.write(json.dumps([self.current_epoch, batch_idx, [int(i) for i in ids]]) + "\n")
        if batch_idx == self.fail_at:
            raise Interrupted(f"interrupted at step {batch_idx}")
        return self.layer(payload.float()).pow(2).mean()

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.001)


def main(o: dict[str, Any]) -> None:
    torch.set_num_threads(1)
    loader = Consumer(o["name"], connect_timeout=30, format="torch")
    callbacks = []
    if o.get("fail_at") is not None:
        callbacks.append(OnExceptionCheckpoint(dirpath=o["ckpt_dir"], filename=o["ckpt_name"]))
    trainer = L.Trainer(max_epochs=o["epochs"], accelerator="cpu", devices=1, logger=False,
                        enable_checkpointing=bool(callbacks), enable_progress_bar=False,
                        enable_model_summary=False, callbacks=callbacks)
    model = Model(o["ids_out"], o.get("fail_at"))
    try:
        trainer.fit(model, train_dataloaders=loader, ckpt_path=o.get("ckpt_path"))
    except Interrupted:
        print("interrupted", flush=True)
        sys.exit(3)
    print("fitted", flush=True)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
