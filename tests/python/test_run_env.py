"""A Consumer with no name reads BATCHCAST_NAME, as `batchcast run` sets it."""

from __future__ import annotations

import pytest

import batchcast


def test_no_name_and_no_environment_says_what_to_do(monkeypatch):
    monkeypatch.delenv("BATCHCAST_NAME", raising=False)
    with pytest.raises(batchcast.InvalidArgument, match="BATCHCAST_NAME"):
        batchcast.Consumer()


def test_the_name_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("BATCHCAST_NAME", "from-the-runner")
    with pytest.raises(batchcast.ProducerNotFound, match="from-the-runner"):
        batchcast.Consumer(connect_timeout=0)
