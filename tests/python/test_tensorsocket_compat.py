"""A TensorSocket script moves to batchcast by changing its import.

The producer and consumer below are written against TensorSocket 0.0.5's
README API (TensorProducer(data_loader), `for _ in producer`, join();
TensorConsumer(batch_size=...), `for batch_idx, (input, target) in
enumerate(data_loader)`); the test runs them with only the import line
replaced, as two real processes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import HERE, kill_all
from trainers import dataloader_epochs

pytest.importorskip("torch")

IMPORT = "from tensorsocket import TensorProducer, TensorConsumer"
COMPAT = "from batchcast.compat.tensorsocket import TensorProducer, TensorConsumer"

PRODUCER = f"""
{IMPORT}
from trainers import id_loader

epochs = 2
data_loader = id_loader()

producer = TensorProducer(data_loader, rubber_band_pct=0.02)

for _ in range(epochs):
    for _ in producer:
        pass
producer.join()
print("joined", flush=True)
"""

CONSUMER = f"""
import json
{IMPORT}

data_loader = TensorConsumer(batch_size=8)

for epoch in range(2):
    ids = []
    for batch_idx, (input, target) in enumerate(data_loader):
        assert input.shape == (len(target), 4)
        ids.extend(int(i) for i in target)
    print("epoch", json.dumps({{"ids": ids, "len": len(data_loader)}}), flush=True)
"""


def _run(script: str, env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", script.replace(IMPORT, COMPAT)], cwd=HERE,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_tensorsocket_readme_pair_runs_with_only_the_import_changed(bc_dir):
    import os

    env = dict(os.environ, BATCHCAST_DIR=str(bc_dir), PYTHONPATH=str(HERE))
    consumer = _run(CONSUMER, env)  # TensorSocket consumers wait for their producer
    producer = _run(PRODUCER, env)
    try:
        out, err = consumer.communicate(timeout=120)
        assert consumer.returncode == 0, err
        epochs = [json.loads(line.split(" ", 1)[1]) for line in out.splitlines()]
        assert [e["ids"] for e in epochs] == dataloader_epochs(2)  # every sample, every epoch
        assert [e["len"] for e in epochs] == [5, 5]
        pout, perr = producer.communicate(timeout=60)
        assert producer.returncode == 0, perr
        assert "joined" in pout
        # The argument with no meaning here was noted, once.
        assert perr.count("rubber_band_pct is accepted and ignored") == 1
    finally:
        kill_all((consumer, producer))


def test_a_port_names_the_stream():
    from batchcast.compat.tensorsocket import stream_name

    assert stream_name(5555) == "tensorsocket-5555"
