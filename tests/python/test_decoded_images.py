"""A decoded stream from Python (`batchcast.DecodedImages`): each image
stored as `batchcast serve --decode-only --store-size S` stores it, byte for
byte, so that consumers with `transform=` read it as they read the CLI's."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

import batchcast
from test_augment import BATCH, CLASSES, PER_CLASS, S, connect, dataset, read_epoch, serve  # noqa: F401

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")
Image = pytest.importorskip("PIL.Image")

SAMPLES = CLASSES * PER_CLASS


def test_each_stored_image_is_byte_for_byte_the_one_serve_decode_only_publishes(dataset, serve):
    """PIL decodes these baseline JPEGs exactly as the native decoder does
    (batchcast-pipeline's decode.rs: identical to libjpeg-turbo on baseline
    files), so the stored images must be identical, not just close."""
    serve("cli", consumers=1)
    with batchcast.Consumer("cli", connect_timeout=30) as c:
        published, labels = read_epoch(c)
    published = torch.cat(published).numpy()
    folder = torchvision.datasets.ImageFolder(str(dataset))
    ds = batchcast.DecodedImages(folder, size=S)
    assert len(ds) == SAMPLES == len(published)
    for i in range(SAMPLES):
        image, label = ds[i]
        assert image.dtype == np.uint8 and image.shape == (S, S, 3)
        assert label == labels[i]
        assert np.array_equal(image, published[i]), f"sample {i} ({folder.samples[i][0]}) differs"


def test_pil_numpy_and_torch_images_store_alike():
    rng = np.random.default_rng(1)
    for h, w in [(70, 90), (90, 70), (48, 48), (30, 200), (5, 3)]:
        hwc = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        want = batchcast.store_image(hwc, 48)
        assert want.shape == (48, 48, 3)
        assert np.array_equal(batchcast.store_image(Image.fromarray(hwc), 48), want)
        assert np.array_equal(batchcast.store_image(torch.from_numpy(hwc).permute(2, 0, 1), 48), want)
        # Strided views are made contiguous first.
        wide = np.concatenate([hwc, hwc], axis=1)[:, ::2]
        assert np.array_equal(batchcast.store_image(wide, 48), batchcast.store_image(wide.copy(), 48))
    gray = rng.integers(0, 256, (60, 80), dtype=np.uint8)
    rgb = np.repeat(gray[:, :, None], 3, axis=2)
    assert np.array_equal(batchcast.store_image(Image.fromarray(gray), 32), batchcast.store_image(rgb, 32)), \
        "a grayscale PIL image is replicated to RGB, as convert('RGB') does"


def test_a_side_already_at_the_stored_size_is_only_centre_cropped():
    hwc = np.random.default_rng(2).integers(0, 256, (48, 80, 3), dtype=np.uint8)
    assert np.array_equal(batchcast.store_image(hwc, 48), hwc[:, 16:64])


def test_bad_images_and_sizes_are_refused_with_what_to_do():
    ok = np.zeros((10, 12, 3), np.uint8)
    with pytest.raises(batchcast.InvalidArgument, match="must be uint8"):
        batchcast.store_image(ok.astype(np.float32), 8)
    with pytest.raises(batchcast.InvalidArgument, match="has 4 channels.*RGB"):
        batchcast.store_image(np.zeros((10, 12, 4), np.uint8), 8)
    with pytest.raises(batchcast.InvalidArgument, match=r"\(height, width, 3\)"):
        batchcast.store_image(np.zeros((10, 12), np.uint8), 8)
    with pytest.raises(batchcast.InvalidArgument, match="empty"):
        batchcast.store_image(np.zeros((0, 12, 3), np.uint8), 8)
    with pytest.raises(batchcast.InvalidArgument, match="channels, height, width"):
        batchcast.store_image(torch.zeros(10, 12, dtype=torch.uint8), 8)
    with pytest.raises(batchcast.InvalidArgument, match="size must be"):
        batchcast.store_image(ok, 0)
    with pytest.raises(batchcast.InvalidArgument, match="size must be"):
        batchcast.DecodedImages([], size=100000)
    with pytest.raises(TypeError, match="PIL image"):
        batchcast.store_image([[1, 2, 3]], 8)
    with pytest.raises(TypeError, match=r"\(image, label\)"):
        batchcast.DecodedImages([ok], size=8)[0]
    # The native function checks its own arguments too.
    with pytest.raises(batchcast.InvalidArgument, match="out must be uint8"):
        batchcast._native.store_image(ok, 8, np.zeros((8, 8, 3), np.float32))
    with pytest.raises(batchcast.InvalidArgument, match="empty"):
        batchcast._native.store_image(np.zeros((0, 3), np.uint8).reshape(0, 1, 3), 8, np.zeros((8, 8, 3), np.uint8))
    with pytest.raises(batchcast.InvalidArgument, match="overlaps"):
        big = np.zeros((8, 8, 3), np.uint8)
        batchcast._native.store_image(big, 8, big)


def test_dataloader_workers_forked_after_the_parent_stored_an_image_work(dataset):
    """The native resizer is cached per thread; a forked worker inherits
    the parent's without its thread, and must make its own."""
    ds = batchcast.DecodedImages(torchvision.datasets.ImageFolder(str(dataset)), size=S)
    first = ds[0][0]
    loader = torch.utils.data.DataLoader(ds, batch_size=BATCH, num_workers=2, timeout=60)
    images = torch.cat([x for x, _ in loader])
    assert images.shape == (SAMPLES, S, S, 3)
    assert np.array_equal(images[0].numpy(), first)


def test_a_python_decoded_stream_feeds_consumers_with_transforms_as_the_cli_does(dataset, serve, spawn):
    """Producer(DataLoader(DecodedImages(ImageFolder))) with two trainers
    (own transforms, own seeds) gives each trainer the very batches it
    gets from `batchcast serve --decode-only`."""

    def trainers(name):
        a = spawn("consume_augmented", name=name, seed=3, epochs=2, size=24)
        b = spawn("consume_augmented", name=name, seed=4, epochs=2, size=32, batch_size=5)
        got = [t.epochs(2, timeout=120) for t in (a, b)]
        for t in (a, b):
            t.expect("done", timeout=60)
            assert t.wait() == 0
        return got

    serve("cli2", consumers=2, epochs=2)
    from_cli = trainers("cli2")
    producer = spawn("produce_decoded_images", name="py", root=str(dataset), size=S, batch_size=BATCH,
                     workers=2, consumers=2, epochs=2)
    from_python = trainers("py")
    producer.expect("done", timeout=60)
    assert producer.wait() == 0
    want = Counter({k: PER_CLASS for k in range(CLASSES)})
    for cli, py in zip(from_cli, from_python):
        for e_cli, e_py in zip(cli, py):
            assert e_py["epoch"] == e_cli["epoch"]
            assert Counter(e_py["labels"]) == want
            assert e_py["labels"] == e_cli["labels"]
            assert e_py["digests"] == e_cli["digests"], "the same augmented pixels as from the CLI"
    assert from_python[0][0]["digests"] != from_python[1][0]["digests"]
