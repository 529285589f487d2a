"""Lightning resumes a fit interrupted mid-epoch from its checkpoint, with
real processes: a LightningModule trained on a `batchcast serve --seed 7`
stream raises at step 37, OnExceptionCheckpoint saves the .ckpt (the
Consumer's state_dict in its loop state), and a new process resumes with
`trainer.fit(..., ckpt_path=...)`: over both runs, each sample of the
interrupted epoch is seen exactly once, then the next epoch whole."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
SAMPLES = 640
BATCH = 8
FAIL_AT = 37


def trainer(bc_dir: Path, **options: Any) -> subprocess.CompletedProcess:
    env = dict(os.environ, BATCHCAST_DIR=str(bc_dir), PYTHONUNBUFFERED="1")
    return subprocess.run([sys.executable, str(HERE / "lightning_roles.py"), json.dumps(options)],
                          env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=300)


def seen(path: Path) -> dict[int, list[int]]:
    """The ids each epoch's training steps were handed, in order."""
    ids: dict[int, list[int]] = {}
    for line in path.read_text().splitlines():
        epoch, _step, batch = json.loads(line)
        ids.setdefault(epoch, []).extend(batch)
    return ids


def test_a_fit_interrupted_at_step_37_resumes_from_its_checkpoint_exactly(
        batchcast_bin, bc_dir, tmp_path):
    pytest.importorskip("lightning")
    serve = subprocess.Popen(
        [batchcast_bin, "serve", "--name", "pl", "--synthetic", "--seed", "7", "--samples",
         str(SAMPLES), "--sample-bytes", "16", "--batch-size", str(BATCH), "--epochs", "2"],
        env=dict(os.environ, BATCHCAST_DIR=str(bc_dir)), stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    first_ids, second_ids = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    try:
        first = trainer(bc_dir, name="pl", epochs=2, ids_out=str(first_ids), fail_at=FAIL_AT,
                        ckpt_dir=str(tmp_path), ckpt_name="interrupted")
        assert first.returncode == 3 and "interrupted" in first.stdout, first.stderr
        ckpt = tmp_path / "interrupted.ckpt"
        import torch

        saved = torch.load(ckpt, weights_only=False)["loops"]["fit_loop"]["state_dict"]
        [state] = saved["combined_loader"]
        assert (state["name"], state["epoch"], state["row"]) == ("pl", 0, (FAIL_AT + 1) * BATCH)
        assert "seed=7" in state["stream"], state
        second = trainer(bc_dir, name="pl", epochs=2, ids_out=str(second_ids),
                         ckpt_path=str(ckpt))
        assert second.returncode == 0 and "fitted" in second.stdout, second.stderr
        _, err = serve.communicate(timeout=60)
        assert serve.returncode == 0, err
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.communicate()
    before, after = seen(first_ids), seen(second_ids)
    assert list(before) == [0] and len(before[0]) == (FAIL_AT + 1) * BATCH
    # The synthetic source's order is the ids' order: the reference run.
    assert before[0] + after[0] == list(range(SAMPLES)), "the interrupted epoch, each sample once"
    assert after[1] == list(range(SAMPLES)) and list(after) == [0, 1]
