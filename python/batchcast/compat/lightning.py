"""A :class:`batchcast.Consumer` that PyTorch Lightning resumes mid-epoch.

Lightning 2.x saves a train dataloader's ``state_dict()`` in the
checkpoint's loop state (``loops.fit_loop.state_dict.combined_loader``)
and, at ``trainer.fit(..., ckpt_path=...)``, gives it back to the new
loader's ``load_state_dict()`` before the first batch: a
:class:`batchcast.Consumer` takes both as it is. What differs is
``len()``: Lightning restores its own count of the epoch's batches (its
``batch_idx`` goes on from the checkpoint) and reads ``len()`` as the
whole epoch's, whereas a restored Consumer's ``len()`` is the rest of its
epoch, so Lightning would end the resumed epoch early. This Consumer's
``len()`` is the whole epoch's until the resumed epoch begins; the loop
still gets exactly the rest, and ends it when the rest is done::

    from batchcast.compat.lightning import Consumer
    trainer.fit(model, train_dataloaders=Consumer("cifar"), ckpt_path="last")
"""

from __future__ import annotations

from .. import _consumer

__all__ = ["Consumer"]


class Consumer(_consumer.Consumer):
    """:class:`batchcast.Consumer` whose ``len()`` is a whole epoch's
    before a resumed epoch begins, as Lightning counts (see the module)."""

    def __len__(self) -> int:
        if self._restored is not None:
            return self.batches_per_epoch
        return super().__len__()
