"""Two training processes fed by one producer end with exactly the weights
of training directly from the same DataLoader."""

from __future__ import annotations

import pytest
import torch

from helpers import make_loader, make_model, train


@pytest.mark.slow
def test_two_consumers_train_exactly_like_the_dataloader(spawn, tmp_path):
    epochs = 2
    producer = spawn("produce_training", name="train", epochs=epochs, consumers=2, num_workers=2)
    outs = [tmp_path / f"model{i}.pt" for i in range(2)]
    trainers = [spawn("consume_training", name="train", epochs=epochs, out=str(o)) for o in outs]
    for t in trainers:
        assert t.expect("connected") == "8"  # 256 samples / 32
    loader = make_loader(num_workers=2)
    reference = train(lambda: loader, epochs).state_dict()
    initial = make_model().state_dict()
    assert not all(torch.equal(initial[k], v) for k, v in reference.items())
    for t, out in zip(trainers, outs):
        t.expect("saved", timeout=120)
        assert t.wait() == 0
        got = torch.load(out)
        assert list(got) == list(reference)
        for name, value in reference.items():
            assert torch.equal(got[name], value), name
    producer.expect("done")
    assert producer.wait() == 0
