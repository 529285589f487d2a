"""samples_per_epoch is derived exactly from a DataLoader (it gives the
consumers their exact len())."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import (BatchSampler, DataLoader, IterableDataset, RandomSampler,
                              SequentialSampler, SubsetRandomSampler, TensorDataset)

from batchcast._producer import _derive_samples, _loader_batch_size

DATA = TensorDataset(torch.arange(1000))


class Stream(IterableDataset):
    def __iter__(self):
        return iter(range(10))


def rows_of(loader) -> int:
    return sum(len(b[0]) for b in loader)


@pytest.mark.parametrize(
    "make",
    [
        lambda: DataLoader(DATA, batch_size=64),
        lambda: DataLoader(DATA, batch_size=64, drop_last=True),
        lambda: DataLoader(DATA, batch_size=64, shuffle=True),
        lambda: DataLoader(DATA, batch_size=48, sampler=SubsetRandomSampler(range(333))),
        lambda: DataLoader(DATA, batch_size=48, sampler=SubsetRandomSampler(range(333)), drop_last=True),
        lambda: DataLoader(DATA, batch_size=10, sampler=RandomSampler(DATA, num_samples=95, replacement=True)),
        lambda: DataLoader(DATA, batch_sampler=BatchSampler(SequentialSampler(DATA), 30, drop_last=False)),
        lambda: DataLoader(DATA, batch_sampler=BatchSampler(SequentialSampler(DATA), 30, drop_last=True)),
    ],
)
def test_derived_samples_match_what_the_loader_yields(make):
    loader = make()
    n, why = _derive_samples(loader, _loader_batch_size(loader))
    assert why == "" and n == rows_of(make())


def test_unknown_when_the_loader_cannot_tell():
    n, why = _derive_samples(DataLoader(Stream(), batch_size=4), 4)
    assert n is None and "IterableDataset" in why
    n, why = _derive_samples(DataLoader(DATA, batch_size=None), None)
    assert n is None and "batch_size=None" in why

    class Custom:
        def __iter__(self):
            return iter([])

    assert _derive_samples(Custom(), None) == (None, "the loader has no batch_size and no batch_size= was given")
