"""`python -m batchcast.serve --select`: the binding's serve loop takes the
same selection flags as the binary; consumers' len() is the selection's,
and `--select-weights` adds a float32 weights leaf to each batch."""

from __future__ import annotations

import json
from collections import Counter

import batchcast
import numpy as np
import pytest
from test_serve_module import start

Image = pytest.importorskip("PIL.Image")

SIZES = (12, 6, 3)  # images per class


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("jpegs")
    rng = np.random.default_rng(0)
    for c, n in enumerate(SIZES):
        (root / f"class_{c}").mkdir()
        for i in range(n):
            img = rng.integers(0, 256, (20, 24, 3), dtype=np.uint8)
            Image.fromarray(img).save(root / f"class_{c}" / f"{i}.jpg", quality=90)
    return root


def test_label_balanced_selection_with_weights_through_the_module(dataset, bc_dir):
    # 9 of 21: three of each class.
    args = ["--name", "sel", "--json", "--data", str(dataset), "--decode-only", "--store-size", "8",
            "--batch-size", "4", "--select", "label-balanced:0.4286", "--select-weights"]
    proc = start(args, bc_dir)
    try:
        listening = json.loads(proc.stdout.readline())
        assert listening["samples_per_epoch"] == 9, listening
        assert listening["select"].startswith("label-balanced:")
        labels, weights = [], []
        with batchcast.Consumer("sel", connect_timeout=30) as c:
            assert len(c) == 3
            for images, lab, w in c:
                w = np.asarray(w)
                assert w.dtype == np.float32 and len(w) == len(lab) == len(images)
                labels.extend(int(x) for x in np.asarray(lab))
                weights.extend(float(x) for x in w)
        finished = json.loads(proc.stdout.readline())
        assert proc.wait(60) == 0
    finally:
        proc.kill()
        proc.communicate()
    assert Counter(labels) == {0: 3, 1: 3, 2: 3}
    for label, w in zip(labels, weights):
        # The class's share of the dataset over its share of the selection.
        assert w == pytest.approx((SIZES[label] / 21) / (3 / 9), rel=1e-5)
    assert finished["summary"]["decoded_per_epoch"] == [9]


def test_a_bad_select_names_the_accepted_forms(dataset, bc_dir):
    proc = start(["--name", "bad", "--data", str(dataset), "--select", "half"], bc_dir)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert "random:R" in err and "scores=FILE,keep=P" in err
