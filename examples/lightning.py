"""A learning-rate sweep of two PyTorch Lightning trainers that share one
data pipeline. The change to a Lightning script is two lines: the
DataLoader becomes a batchcast.Consumer.

    python examples/lightning.py                      # producer + 2 trainers, 3 epochs each
    python examples/lightning.py producer             # by hand, in separate terminals
    python examples/lightning.py trainer --lr 0.1
"""

from __future__ import annotations

import argparse

from sweep import CLASSES, IMG_SIZE, NAME, main


def train(args: argparse.Namespace) -> None:
    import batchcast

    # The two-line change: instead of DataLoader(dataset, batch_size=..., shuffle=True, ...)
    loader = batchcast.Consumer(NAME, batch_size=args.batch_size, connect_timeout=120,
                                expect={"img_size": IMG_SIZE})

    import lightning as L
    import torch
    from torch import nn

    class Classifier(L.LightningModule):
        def __init__(self, lr: float) -> None:
            super().__init__()
            self.lr = lr
            self.net = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(),
                                     nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, CLASSES))

        def training_step(self, batch, batch_idx):
            images, labels = batch
            loss = nn.functional.cross_entropy(self.net(images), labels)
            self.log("loss", loss, prog_bar=True)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)

    trainer = L.Trainer(max_epochs=args.epochs, accelerator="auto", devices=1, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False)
    trainer.fit(Classifier(args.lr), train_dataloaders=loader)
    print(f"lr={args.lr}: {trainer.current_epoch} epochs of {len(loader)} batches, "
          f"loss {float(trainer.callback_metrics['loss']):.3f}", flush=True)


if __name__ == "__main__":
    main(train, sweep=[["--lr=0.1"], ["--lr=0.01"]])
