"""The examples run: each sweep briefly (a producer and two trainers), and
timm's wrapper with a stand-in for train.py (which the timm wheel does not
ship) that calls timm.data.create_loader as train.py does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"

pytest.importorskip("torch")


def _run(args, bc_dir, timeout=300, **kw):
    env = dict(os.environ, BATCHCAST_DIR=str(bc_dir), PYTHONUNBUFFERED="1")
    return subprocess.run([sys.executable, *map(str, args)], env=env, capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT, **kw)


@pytest.mark.parametrize("example,library", [("lightning.py", "lightning"),
                                             ("accelerate.py", "accelerate")])
def test_a_sweep_example_runs(bc_dir, example, library):
    pytest.importorskip(library)
    r = _run([EXAMPLES / example, "--epochs", "2", "--samples", "128", "--workers", "0"], bc_dir)
    assert r.returncode == 0, r.stderr[-3000:]
    for lr in ("0.1", "0.01"):
        assert f"lr={lr}:" in r.stdout
    assert "producer: served" in r.stdout


TRAIN_STANDIN = """
import sys
from timm.data import create_dataset, create_loader  # as train.py imports them
size = int(sys.argv[2])
dataset = create_dataset("", root=sys.argv[1], split="train", is_training=True)
loader = create_loader(dataset, input_size=(3, size, size), batch_size=16, is_training=True,
                       use_prefetcher=False, device="cpu",
                       interpolation="random")  # train.py's default --train-interpolation
for epoch in range(2):
    for name in ("dataset", "batch_sampler", "sampler"):  # train.py's _set_loader_epoch
        if hasattr(getattr(loader, name), "set_epoch"):
            getattr(loader, name).set_epoch(epoch)
    n = 0
    for input, target in loader:
        n += 1
    print("epoch", epoch, n, len(loader), tuple(input.shape[1:]), flush=True)
"""


def test_timm_wrapper_feeds_train_py_from_the_producer(bc_dir, tmp_path):
    pytest.importorskip("timm")
    pytest.importorskip("PIL")
    data, train_py = tmp_path / "data", tmp_path / "train.py"
    train_py.write_text(TRAIN_STANDIN)
    env = dict(os.environ, BATCHCAST_DIR=str(bc_dir))
    producer = subprocess.Popen(
        [sys.executable, EXAMPLES / "timm" / "producer.py", data, "--generate", "--img-size",
         "32", "-b", "32", "--workers", "0", "--idle-timeout", "3"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wrapper = EXAMPLES / "timm" / "shared_loader.py"
        while not (data / "validation").exists() and producer.poll() is None:
            pass  # (the producer writes the generated dataset first)
        # Two trainers at once: one right, one started with another image size.
        trainers = [subprocess.Popen([sys.executable, wrapper, train_py, data, size], env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                    for size in ("32", "96")]
        (out, err), (_, wrong) = (t.communicate(timeout=300) for t in trainers)
        assert trainers[0].returncode == 0, err[-3000:]
        # 128 generated training images in batches of 16, both epochs whole.
        assert out.splitlines() == ["epoch 0 8 8 (3, 32, 32)", "epoch 1 8 8 (3, 32, 32)"]
        assert trainers[1].returncode != 0
        assert "StreamMismatch" in wrong and "(3, 96, 96)" in wrong
        assert "float32[3, 32, 32]" in wrong
        out, err = producer.communicate(timeout=120)
        assert producer.returncode == 0, err[-3000:]
    finally:
        if producer.poll() is None:
            producer.kill()
            producer.communicate()


SLURM_TRIAL = """
import sys
import batchcast
loader = batchcast.Consumer(connect_timeout=60)  # the name comes from BATCHCAST_NAME
ids = sorted(int(i) for payload, batch_ids in loader for i in batch_ids.tolist())
print(sys.argv[1], len(ids), ids == list(range(len(ids))))
"""


def test_the_slurm_node_script_runs_its_share_of_the_sweep_on_one_producer(bc_dir, tmp_path, batchcast_bin):
    (tmp_path / "trial.py").write_text(SLURM_TRIAL)
    env = dict(
        os.environ,
        BATCHCAST_DIR=str(bc_dir),
        SLURM_JOB_ID="7",
        SLURM_NODEID="1",
        SLURM_NNODES="2",
        BATCHCAST_BIN=batchcast_bin,
        SERVE_ARGS="--synthetic --samples 200 --batch-size 20 --no-shuffle",
    )
    out = subprocess.run(
        ["bash", str(ROOT / "examples" / "slurm" / "node.sh"), sys.executable, "trial.py", "{}", ":::", "a", "b", "c", "d"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "node 1: 2 trials, 0 failed" in out.stdout
    # Values 1 and 3 (b, d) fall to node 1 of 2; each read the whole epoch.
    assert (tmp_path / "trial-1-0.log").read_text().split() == ["b", "200", "True"]
    assert (tmp_path / "trial-1-1.log").read_text().split() == ["d", "200", "True"]
