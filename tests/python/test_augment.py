"""Decode once, augment per trainer: a `batchcast serve --decode-only`
stream, and consumers that each augment their own copy on native threads
(`Consumer(transform=...)`), checked against torchvision."""

from __future__ import annotations

import subprocess
from collections import Counter

import numpy as np
import pytest

import batchcast
from batchcast import transforms as T

torch = pytest.importorskip("torch")
tvf = pytest.importorskip("torchvision.transforms.functional")
Image = pytest.importorskip("PIL.Image")

S = 48  # stored side
CLASSES, PER_CLASS, BATCH = 3, 8, 8


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """An ImageFolder of 24 JPEGs of assorted sizes (smooth gradients with a
    little texture), labels 0..2."""
    root = tmp_path_factory.mktemp("jpegs")
    rng = np.random.default_rng(0)
    for c in range(CLASSES):
        (root / f"class_{c}").mkdir()
        for i in range(PER_CLASS):
            w, h = int(rng.integers(60, 120)), int(rng.integers(60, 120))
            y, x = np.mgrid[0:h, 0:w]
            img = np.stack([x * 255 // w, y * 255 // h, (x + y + 40 * c + 9 * i) % 256], -1).astype(np.uint8)
            Image.fromarray(img).save(root / f"class_{c}" / f"{i}.jpg", quality=95)
    return root


@pytest.fixture
def serve(dataset, bc_dir, batchcast_bin):
    procs = []

    def start(name: str, consumers: int, epochs: int = 1, extra=()):
        p = subprocess.Popen(
            [batchcast_bin, "serve", "--name", name, "--data", str(dataset), "--decode-only",
             "--store-size", str(S), "--batch-size", str(BATCH), "--epochs", str(epochs),
             "--consumers", str(consumers), "--no-shuffle", "--idle-timeout", "60", *extra],
            stderr=subprocess.PIPE,
            text=True,
        )
        procs.append(p)
        return p

    yield start
    for p in procs:
        p.kill()
        p.wait()
        p.stderr.close()


def connect(*kwargs_list):
    """Consumers made at once, as separate trainers would: a producer
    waiting for N consumers publishes (and so welcomes anyone) only when
    all N are there."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(kwargs_list)) as pool:
        return list(pool.map(lambda kw: batchcast.Consumer(connect_timeout=30, **kw), kwargs_list))


def read_epoch(consumer):
    images, labels = [], []
    for x, y in consumer:
        images.append(x.clone() if hasattr(x, "clone") else x.copy())
        labels.extend(int(v) for v in y)
    return images, labels


def test_the_decoded_stream_holds_each_image_once_as_a_stored_square(serve):
    serve("dec", consumers=1)
    with batchcast.Consumer("dec", connect_timeout=30) as c:
        images, labels = read_epoch(c)
    assert all(tuple(x.shape[1:]) == (S, S, 3) and x.dtype == torch.uint8 for x in images)
    assert Counter(labels) == Counter({k: PER_CLASS for k in range(CLASSES)})


def test_dct_scaling_stores_large_images_within_a_few_levels_and_refuses_crops(serve, dataset, batchcast_bin):
    serve("exact", consumers=1)
    serve("scaled", consumers=1, extra=["--dct-scale"])
    with batchcast.Consumer("exact", connect_timeout=30) as c:
        exact, labels = read_epoch(c)
    with batchcast.Consumer("scaled", connect_timeout=30) as c:
        scaled, scaled_labels = read_epoch(c)
    assert scaled_labels == labels
    # Images whose shorter side is at least 2 * S are decoded at half size
    # (the others exactly as before).
    sides = []
    for f in sorted(dataset.glob("*/*.jpg")):
        with Image.open(f) as im:
            sides.append(min(im.size))
    a, b = torch.cat(exact).int(), torch.cat(scaled).int()
    diff = (a - b).abs()
    changed = [bool(d.any()) for d in diff]
    assert changed == [s >= 2 * S for s in sides], (sides, changed)
    # Smooth parts agree within a level or two; a hard edge (the blue
    # channel's wrap from 255 to 0) is filtered differently.
    d = diff.flatten().float()
    assert d.mean() < 1.0 and d.quantile(0.99) <= 6, (d.mean(), d.quantile(0.99), d.max())
    out = subprocess.run(
        [batchcast_bin, "serve", "--name", "crops", "--data", str(dataset), "--transform", "train", "--dct-scale"],
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode != 0 and "--dct-scale applies to a resize" in out.stderr, out.stderr


def test_each_consumer_augments_its_own_copy_and_a_seed_reproduces_it(serve):
    serve("aug", consumers=4)
    crop = lambda: T.Compose([T.RandomResizedCrop(24), T.RandomHorizontalFlip()])  # noqa: E731
    consumers = connect(
        dict(name="aug", transform=crop(), seed=1),
        dict(name="aug", transform=crop(), seed=2),
        dict(name="aug", transform=crop(), seed=1, transform_threads=3),
        dict(name="aug", batch_size=5, transform=crop(), seed=9),
    )
    epochs = [read_epoch(c) for c in consumers]
    for c in consumers:
        c.close()
    (a, la), (b, lb), (a3, la3), (odd, lodd) = epochs
    assert all(tuple(x.shape[1:]) == (3, 24, 24) for x in a)
    assert la == lb == la3, "every consumer reads the same samples in order"
    assert Counter(lodd) == Counter(la), "every sample once, whatever the batch size"
    assert all(torch.equal(x, y) for x, y in zip(a, a3)), "a seed reproduces, whatever the threads"
    differing = sum(not torch.equal(x[i], y[i]) for x, y in zip(a, b) for i in range(len(x)))
    assert differing >= 20, f"another seed crops otherwise: {differing} of 24 images differ"


def test_a_whole_image_crop_flip_and_normalize_match_torchvision(serve):
    serve("tv", consumers=2)
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    plain, mine = connect(
        dict(name="tv"),
        dict(
            name="tv",
            transform=T.Compose([
                T.RandomResizedCrop(32, scale=(1.0, 1.0), ratio=(1.0, 1.0)),  # the whole stored square
                T.RandomHorizontalFlip(p=1.0),
                T.Normalize(mean, std),
            ]),
        ),
    )
    decoded, _ = read_epoch(plain)
    augmented, _ = read_epoch(mine)
    plain.close()
    mine.close()
    for src, got in zip(decoded, augmented):
        assert got.dtype == torch.float32 and tuple(got.shape[1:]) == (3, 32, 32)
        chw = src.permute(0, 3, 1, 2)
        want = tvf.resize(chw, [32, 32], interpolation=tvf.InterpolationMode.BILINEAR, antialias=True)
        want = tvf.normalize(tvf.hflip(want).float() / 255, mean, std)
        one_level = 1 / 255 / min(std)
        assert (got - want).abs().max().item() <= one_level + 1e-6


def test_transforms_that_cannot_run_natively_are_refused_with_the_way_out():
    with pytest.raises(batchcast.InvalidArgument, match="starts with batchcast.transforms.RandomResizedCrop"):
        T.Compose([T.RandomHorizontalFlip()])
    with pytest.raises(batchcast.InvalidArgument, match="not supported here"):
        T.Compose([T.RandomResizedCrop(8), T.Normalize((0, 0, 0), (1, 1, 1)), T.RandomHorizontalFlip()])
    with pytest.raises(batchcast.InvalidArgument, match="size"):
        T.RandomResizedCrop(0)
    with pytest.raises(batchcast.InvalidArgument, match="std"):
        T.Normalize((0, 0, 0), (1, 0, 1))


def test_a_transform_on_a_stream_that_is_not_decoded_says_what_to_serve(bc_dir, batchcast_bin):
    p = subprocess.Popen(
        [batchcast_bin, "serve", "--name", "syn", "--synthetic", "--samples", "16", "--batch-size", "8"],
        stderr=subprocess.PIPE,
    )
    try:
        with batchcast.Consumer("syn", connect_timeout=30, transform=T.RandomResizedCrop(8)) as c:
            with pytest.raises(batchcast.InvalidArgument, match="--decode-only"):
                next(iter(c))
    finally:
        p.kill()
        p.wait()
        p.stderr.close()


def test_pooled_output_is_reused_only_once_nothing_views_it():
    # A consumer augments into the augmenter's own reused memory (fresh
    # float32 batches cost their page faults); a buffer is reused only when
    # every array made from it is gone.
    torch = pytest.importorskip("torch")
    from batchcast import transforms as T

    images = torch.from_numpy(np.random.default_rng(1).integers(0, 256, (4, S, S, 3), dtype=np.uint8))
    tf = T.Compose([T.RandomResizedCrop(16), T.Normalize((0.5, 0.5, 0.5), (0.25, 0.25, 0.25))])
    aug = tf.native(1, 5)

    def pooled(epoch):
        return torch.from_dlpack(aug.augment_pooled(images, epoch, 0))

    a = pooled(0)
    expect = torch.empty((4, 3, 16, 16), dtype=torch.float32)
    aug.augment(images, 0, 0, expect)
    assert torch.equal(a, expect), "the same pixels as into a fresh array"
    a_ptr = a.data_ptr()
    row = a[1]  # a view keeps the buffer in use after `a` is gone
    del a
    b = pooled(1)
    assert b.data_ptr() != a_ptr, "a buffer still viewed is not reused"
    assert torch.equal(row, expect[1]), "and what the view shows is unchanged"
    del row
    c = pooled(0)
    assert c.data_ptr() == a_ptr, "a buffer nothing views is reused"
    assert torch.equal(c, expect)
    c[0] = 0  # the caller's own memory: writable
    import numpy

    n = numpy.from_dlpack(aug.augment_pooled(images, 0, 0))
    assert n.dtype == numpy.float32 and n.shape == (4, 3, 16, 16) and n.flags.writeable
    numpy.testing.assert_array_equal(n, expect.numpy())


def test_a_decoded_batch_takes_the_memory_computed_for_it(serve):
    # n stored squares of S x S x 3 bytes and n int64 labels; the producer's
    # slots (its shared memory: window x slot size) hold that and a little
    # more for the batch's layout, nothing like a float32 batch's 4x.
    serve("mem", consumers=1)
    with batchcast.Consumer("mem", connect_timeout=30) as c:
        slot = c.welcome()["slot_size"]
        x, y = next(iter(c))
        images, labels = x.numel() * x.element_size(), y.numel() * y.element_size()
        assert (images, labels) == (BATCH * S * S * 3, BATCH * 8)
        assert images + labels <= slot <= images + labels + 64 * 1024, (slot, images, labels)
        del x, y


def test_resize_and_center_crop_match_torchvision_and_bad_uses_are_refused():
    # An evaluation loader's geometry: Resize(r) (shorter side, antialiased
    # bilinear) then CenterCrop(c), natively, as torchvision computes it.
    rng = np.random.default_rng(2)
    images = torch.from_numpy(rng.integers(0, 256, (3, S, S, 3), dtype=np.uint8))
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    tf = T.Compose([T.Resize(40), T.CenterCrop(32), T.Normalize(mean, std)])
    aug = tf.native(2, 0)
    got = torch.from_dlpack(aug.augment_pooled(images, 0, 0))
    chw = images.permute(0, 3, 1, 2)
    want = tvf.center_crop(tvf.resize(chw, 40, interpolation=tvf.InterpolationMode.BILINEAR, antialias=True), 32)
    want = tvf.normalize(want.float() / 255, mean, std)
    assert tuple(got.shape) == (3, 3, 32, 32)
    assert (got - want).abs().max().item() <= 1 / 255 / min(std) + 1e-6
    # the same for every seed: nothing random in it
    assert torch.equal(got, torch.from_dlpack(tf.native(1, 99).augment_pooled(images, 3, 7)))
    for bad, says in [
        (lambda: T.Compose([T.Resize(40), T.CenterCrop(32), T.RandomHorizontalFlip()]), "no RandomHorizontalFlip"),
        (lambda: T.Compose([T.Resize(40)]), "Resize then CenterCrop"),
        (lambda: T.Compose([T.CenterCrop(32)]), "Resize then CenterCrop"),
        (lambda: T.Resize((40, 50)), "only an int"),
        (lambda: T.CenterCrop((32, 30)), "square"),
        (lambda: T.Compose([T.Resize(30), T.CenterCrop(32)]).native(1, 0), "crop <= resize"),
    ]:
        with pytest.raises(batchcast.InvalidArgument, match=says):
            bad()
