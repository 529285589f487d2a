"""``batchcast.serve.serve_folder``: the native pipeline over a folder from
Python, with ``watch=``, ``trigger=`` and ``select=`` in the CLI's grammar
(parsed by ``batchcast serve``'s own definitions). A real producer process
serves the folder; the test is its consumer. Images added while epoch 1 is
served join at epoch 2 only, and ``len()`` says so before epoch 2 begins."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections import Counter

import pytest
from test_serve_grow import _write_images, epochs_growing

import batchcast
from batchcast.serve import serve_folder

pytest.importorskip("PIL.Image")

BATCH = 4
PRODUCER = (
    "import json, sys\n"
    "from batchcast.serve import serve_folder\n"
    "serve_folder(sys.argv[1], 'folder', **json.loads(sys.argv[2]))\n"
)


def _producer(root, bc_dir, **options):
    env = dict(os.environ, BATCHCAST_DIR=str(bc_dir), PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        [sys.executable, "-c", PRODUCER, str(root), json.dumps(options)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


@pytest.mark.parametrize(
    "select, grown",
    [(None, {0: 7, 1: 9, 2: 7, 3: 4}), ("new-data", {1: 2, 3: 4})],
)
def test_a_watched_folder_grows_at_the_next_epoch_only(tmp_path, bc_dir, select, grown):
    root = tmp_path / "data"
    for c in range(3):
        _write_images(root / f"class_{c}", 7, c)
    proc = _producer(
        root, bc_dir, watch=True, trigger="amount=5", select=select, epochs=4,
        batch_size=BATCH, decode_only=True, store_size=8, window=2, json=True,
    )  # fmt: skip
    fired = []
    try:
        listening = json.loads(proc.stdout.readline())
        assert listening["samples_per_epoch"] == 21 and listening["watch"], listening
        with batchcast.Consumer("folder", connect_timeout=30, on_trigger=fired.append) as c:
            read = list(epochs_growing(c, root, 4))
        lens = [n for _, n, _ in read]
        labels = [Counter(seen) for _, _, seen in read]
        out = [json.loads(line) for line in proc.stdout.read().splitlines()]
        assert proc.wait(60) == 0, proc.stderr.read()
    finally:
        proc.kill()
        proc.communicate()
    old = {0: 7, 1: 7, 2: 7}
    assert labels == [old, old, grown, grown]
    n = sum(grown.values())
    assert lens == [math.ceil(21 / BATCH)] * 2 + [math.ceil(n / BATCH)] * 2
    [t] = fired
    assert (t.id, t.seq, t.epoch, t.samples) == ("amount=5", 1, 2, 6)
    [grew] = [e for e in out if e["event"] == "grew"]
    assert (grew["epoch"], grew["added"], grew["samples_per_epoch"]) == (2, 6, n)


def test_what_serve_refuses_is_raised_with_its_message(tmp_path, bc_dir):
    root = tmp_path / "data"
    _write_images(root / "class_0", 2, 0)
    with pytest.raises(batchcast.InvalidArgument, match="every-epoch"):
        serve_folder(root, "bad", watch=True, trigger="sometimes")
    with pytest.raises(batchcast.InvalidArgument, match="random:R"):
        serve_folder(root, "bad", select="most")
    with pytest.raises(batchcast.InvalidArgument, match="--no-such-flag") as e:
        serve_folder(root, "bad", no_such_flag=1)
    assert e.value.exit_code == 2
    with pytest.raises(TypeError, match="write each shard into one folder"):
        serve_folder([root / "a.tar"], "bad", watch=True)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="seed= takes"):
        serve_folder(root, "bad", seed=[1])
