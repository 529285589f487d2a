"""Selection each trainer applies to its own model: batch-then-sample
downsampling on the trainer's device.

A producer serves every sample once for all its trainers; what depends on a
trainer's own model (which samples are worth a step) is chosen here, in the
trainer, after a forward pass over the batch the consumer gave::

    from batchcast.select import Downsampler

    select = Downsampler("loss", ratio=0.25, batch_size=64)
    for images, labels in consumer:                   # 64 samples
        with torch.no_grad():
            logits = model(images)
        for (x, y), w in select((images, labels), logits, labels):
            loss = (F.cross_entropy(model(x), y, reduction="none") * w).mean()
            ...                                       # one step per 64 chosen
    rest = select.flush()                             # the epoch's last few

Methods (higher score, more likely kept):

- ``"loss"``: the per-sample loss (cross-entropy, or ``loss_fn`` with
  ``reduction="none"``);
- ``"gradnorm"``: the norm of the loss's gradient with respect to the last
  layer, in the closed form for softmax cross-entropy:
  ``||softmax(z) - onehot(y)||``, times ``||h||`` when the penultimate
  activations ``h`` are given (then it is the norm of the last linear layer's
  weight gradient);
- ``"least_confidence"`` (``1 - max p``), ``"entropy"`` (``-sum p log p``) and
  ``"margin"`` (``1 - (p1 - p2)``, the two largest probabilities): uncertainty
  of the softmax ``p``.

The definitions follow Modyn's remote downsamplers (eth-easl/modyn,
modyn/trainer_server/internal/trainer/remote_downsamplers/:
remote_loss_downsampling.py, remote_gradnorm_downsampling.py and the
last-layer gradient in abstract_remote_downsampling_strategy.py,
remote_uncertainty_downsampling_strategy.py), after Katharopoulos and Fleuret
(2018) and Coleman et al. (2020). Uncertainty here is the softmax's for every
metric (Modyn scores least confidence on raw outputs).

By default the ``keep`` highest scores are chosen, with weights of one. With
``importance=True`` (loss and gradnorm only) ``keep`` samples are drawn
without replacement with probability proportional to their score and weighted
``1 / (n p_i)``, as Modyn does: the less likely a sample was to be drawn, the
more its loss counts.

The selection never copies the shared batch: every array leaf is cut with
``index_select`` on the device it is on (the consumer's ``device=``, or the
CPU view of shared memory), which writes only the chosen rows into fresh
memory of this process and leaves the batch untouched. :class:`Accumulator`
assembles the chosen rows back into batches of the trainer's size, carrying
every leaf of the batch tree (tuples, lists and dicts of tensors, and
per-sample lists). A ratio that does not keep a whole number of samples of a
batch is refused with a ValueError naming both sizes.

:class:`Downsampler` puts the pieces together; each is usable alone:
:func:`scores` (per-sample scores), :func:`choose` (indices and weights),
:func:`take` (the chosen rows of a batch tree), :class:`Accumulator` and
:func:`keep_count` (the ratio check).

Model-dependent triggers live here too, since only the trainer has its
model: :class:`DriftTrigger` (its embeddings' distribution moved) and
:class:`PerformanceTrigger` (its accuracy on incoming data fell).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

from ._tree import Spec, _list_kind, unflatten
from ._triggers import DriftTrigger, PerformanceTrigger

if TYPE_CHECKING:
    import torch

__all__ = [
    "METHODS",
    "Accumulator",
    "Downsampler",
    "DriftTrigger",
    "PerformanceTrigger",
    "Selection",
    "choose",
    "keep_count",
    "scores",
    "take",
]

#: The scoring methods :func:`scores` knows.
METHODS = ("loss", "gradnorm", "least_confidence", "entropy", "margin")
_IMPORTANCE = ("loss", "gradnorm")


class Selection(NamedTuple):
    """The rows chosen from one batch, in ascending order, and their
    per-sample weights (float32), both on the scores' device."""

    indices: torch.Tensor
    weights: torch.Tensor


def keep_count(ratio: float, batch_size: int) -> int:
    """How many samples ``ratio`` keeps of a ``batch_size``-sample batch.

    Raises ValueError when that is not a whole number, naming both sizes.
    """
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 < ratio <= 1:
        raise ValueError(f"ratio must be a fraction in (0, 1], e.g. 0.25, not {ratio!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, not {batch_size!r}")
    exact = ratio * batch_size
    keep = round(exact)
    if keep < 1 or abs(exact - keep) > 1e-6:
        near = [k for k in (math.floor(exact), math.floor(exact) + 1) if 1 <= k <= batch_size]
        options = " or ".join(f"{k / batch_size:g} ({k})" for k in near)
        raise ValueError(
            f"a ratio of {ratio:g} keeps {exact:g} of a {batch_size}-sample batch, not a whole "
            f"number of samples; choose a ratio that keeps whole samples of {batch_size}, "
            f"e.g. {options}, or another batch size"
        )
    return int(keep)


def scores(
    method: str,
    logits: torch.Tensor,
    targets: torch.Tensor | None = None,
    *,
    embeddings: torch.Tensor | None = None,
    loss_fn: Callable[[Any, Any], Any] | None = None,
) -> torch.Tensor:
    """Per-sample scores (shape ``(n,)``, float32, on the logits' device) by
    ``method`` (one of :data:`METHODS`); the higher, the more a sample is
    worth a step. ``logits`` are a classifier's outputs ``(n, classes)``;
    ``targets`` their class indices (for loss and gradnorm)."""
    import torch

    if method not in METHODS:
        raise ValueError(f"unknown selection method {method!r}; choose one of {', '.join(METHODS)}")
    if logits.dim() != 2:
        raise ValueError(f"logits must be (samples, classes), not of shape {tuple(logits.shape)}")
    with torch.no_grad():
        z = logits.detach().float()
        if method in _IMPORTANCE:
            if targets is None:
                raise ValueError(f'method "{method}" needs the targets')
            if method == "loss":
                if loss_fn is None:
                    return torch.nn.functional.cross_entropy(z, targets, reduction="none")
                return loss_fn(logits.detach(), targets).detach().float().reshape(-1)
            onehot = torch.nn.functional.one_hot(targets.long(), z.shape[1]).to(z.dtype)
            norm = torch.linalg.vector_norm(z.softmax(1) - onehot, dim=1)
            if embeddings is not None:
                h = embeddings.detach().float().reshape(len(z), -1)
                norm = norm * torch.linalg.vector_norm(h, dim=1)
            return norm
        p = z.softmax(1)
        if method == "least_confidence":
            return 1 - p.max(1).values
        if method == "entropy":
            return -torch.special.xlogy(p, p).sum(1)
        if p.shape[1] < 2:
            raise ValueError('method "margin" needs at least two classes')
        top = p.topk(2, dim=1).values
        return 1 - (top[:, 0] - top[:, 1])


def choose(
    score: torch.Tensor,
    keep: int,
    *,
    importance: bool = False,
    generator: torch.Generator | None = None,
) -> Selection:
    """Chooses ``keep`` rows by ``score``: the highest (weights of one), or
    with ``importance`` drawn in proportion to the scores without
    replacement and weighted ``1 / (n p_i)`` (uniformly, weights of one,
    where every score is zero). Where fewer than ``keep`` scores are above
    zero (a confident model's loss is often exactly 0.0), the draw mixes in
    a uniform share of ``1e-3``, so that it can fill ``keep`` and the
    weights stay those of the distribution drawn from."""
    import torch

    n = int(score.shape[0])
    if not 1 <= keep <= n:
        raise ValueError(f"cannot keep {keep} of a {n}-sample batch")
    ones = torch.ones(keep, dtype=torch.float32, device=score.device)
    if not importance:
        indices = score.topk(keep, sorted=False).indices
        return Selection(indices.sort().values, ones)
    score = score.float()
    if bool((score < 0).any()):
        raise ValueError("importance sampling needs non-negative scores")
    total = score.sum()
    if float(total) <= 0:
        gen_device = score.device if generator is None else generator.device
        indices = torch.randperm(n, generator=generator, device=gen_device)[:keep].to(score.device)
        return Selection(indices.sort().values, ones)
    p = score / total
    if int((p > 0).sum()) < keep:
        p = (1.0 - _UNIFORM_SHARE) * p + _UNIFORM_SHARE / n
    drawn = torch.multinomial(p, keep, replacement=False, generator=generator)
    indices, order = drawn.sort()
    weights = (1.0 / (n * p[drawn]))[order]
    return Selection(indices, weights.float())


# The uniform share of an importance draw whose positive scores are fewer
# than the samples it keeps.
_UNIFORM_SHARE = 1e-3


def take(batch: Any, indices: Any) -> Any:
    """The rows ``indices`` (a tensor or a sequence of ints) of every leaf of ``batch``: ``index_select`` on
    each tensor's own device (fresh memory; the batch is left as it was),
    and the same items of per-sample lists."""
    import torch

    if not isinstance(indices, torch.Tensor):
        indices = torch.as_tensor(indices, dtype=torch.int64)
    spec, leaves = _split(batch)
    picked: list[Any] = []
    rows: list[int] | None = None
    moved = {}
    for leaf in leaves:
        if isinstance(leaf, list):
            if rows is None:
                rows = [int(i) for i in indices.tolist()]
            picked.append([leaf[i] for i in rows])
            continue
        device = leaf.device
        if device not in moved:
            moved[device] = indices.to(device=device, dtype=torch.int64, non_blocking=True)
        picked.append(leaf.index_select(0, moved[device]))
    return unflatten(spec, picked, _same)


def _same(x: Any) -> Any:
    return x


def _split(batch: Any) -> tuple[Spec, list[Any]]:
    """A batch's structure (the spec batchcast's :func:`unflatten` reads)
    and its leaves: torch tensors and per-sample lists."""
    leaves: list[Any] = []
    return _visit(batch, "batch", leaves), leaves


def _visit(x: Any, path: str, leaves: list[Any]) -> Spec:
    if hasattr(x, "index_select") and hasattr(x, "device"):
        if x.dim() == 0:
            raise TypeError(f"{path}: a 0-d tensor has no rows to select")
        leaves.append(x)
        return len(leaves) - 1
    if isinstance(x, tuple):
        return ("t", [_visit(v, f"{path}[{i}]", leaves) for i, v in enumerate(x)])
    if isinstance(x, list):
        kind, _ = _list_kind(x)
        if kind >= 0:
            leaves.append(x)
            return len(leaves) - 1
        return ("l", [_visit(v, f"{path}[{i}]", leaves) for i, v in enumerate(x)])
    if isinstance(x, dict):
        return ("d", [(k, _visit(v, f"{path}[{k!r}]", leaves)) for k, v in x.items()])
    raise TypeError(
        f"{path}: cannot select rows of {type(x).__name__}; batchcast.select takes batches of "
        'torch tensors (a Consumer with format="torch") and per-sample lists'
    )


class Accumulator:
    """Assembles selected rows back into batches of ``batch_size``.

    :meth:`add` takes one selected batch (any tree of tensors and per-sample
    lists, the same structure every time) and its weights, and returns the
    full batches that are now ready, each as ``(batch, weights)``; rows stay
    in the order they were added. :meth:`flush` returns what is left (fewer
    rows), e.g. at the end of an epoch.
    """

    def __init__(self, batch_size: int) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, not {batch_size!r}")
        self.batch_size = batch_size
        self._spec: Spec | None = None
        self._parts: list[tuple[list[Any], torch.Tensor]] = []
        self._rows = 0

    @property
    def pending(self) -> int:
        """Rows held until the next batch is full."""
        return self._rows

    def add(
        self, batch: Any, weights: torch.Tensor | None = None
    ) -> list[tuple[Any, torch.Tensor]]:
        """Adds one selected batch; returns the batches now full."""
        import torch

        spec, leaves = _split(batch)
        if self._spec is not None and spec != self._spec:
            raise ValueError(
                "every batch added to an Accumulator must have the same structure; this one "
                f"differs from the first ({spec!r} != {self._spec!r})"
            )
        self._spec = spec
        rows = len(leaves[0]) if leaves else 0
        if weights is None:
            device = next((v.device for v in leaves if not isinstance(v, list)), None)
            weights = torch.ones(rows, dtype=torch.float32, device=device)
        if len(weights) != rows:
            raise ValueError(f"{len(weights)} weights for a batch of {rows} rows")
        self._parts.append((leaves, weights))
        self._rows += rows
        ready = []
        while self._rows >= self.batch_size:
            ready.append(self._cut(self.batch_size))
        return ready

    def flush(self) -> tuple[Any, torch.Tensor] | None:
        """The rows left (fewer than ``batch_size``) as one batch, or None."""
        if self._rows == 0:
            return None
        return self._cut(self._rows)

    def _cut(self, rows: int) -> tuple[Any, torch.Tensor]:
        import torch

        parts, self._parts = self._parts, []
        leaves = [_join([p[0][i] for p in parts]) for i in range(len(parts[0][0]))]
        weights = torch.cat([p[1] for p in parts])
        head = [v[:rows] for v in leaves]
        if rows < self._rows:
            self._parts.append(([v[rows:] for v in leaves], weights[rows:]))
        self._rows -= rows
        return unflatten(self._spec, head, _same), weights[:rows]


def _join(pieces: list[Any]) -> Any:
    if isinstance(pieces[0], list):
        return [v for piece in pieces for v in piece]
    if len(pieces) == 1:
        return pieces[0]
    import torch

    return torch.cat(pieces)


class Downsampler:
    """Batch-then-sample selection by ``method`` (one of :data:`METHODS`):
    from each ``batch_size``-sample batch, keeps ``ratio`` of it, and
    returns full batches of ``batch_size`` chosen samples with their weights.

    ``ratio * batch_size`` must be whole (else ValueError). A batch of
    another size ``n`` (an epoch's tail) keeps ``floor(ratio * n)``, at
    least one. ``importance``
    draws in proportion to the scores (loss and gradnorm) and weights the
    samples ``1 / (n p_i)``; ``generator`` seeds the draw.
    """

    def __init__(
        self,
        method: str,
        ratio: float,
        batch_size: int,
        *,
        importance: bool = False,
        loss_fn: Callable[[Any, Any], Any] | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        if method not in METHODS:
            raise ValueError(
                f"unknown selection method {method!r}; choose one of {', '.join(METHODS)}"
            )
        if importance and method not in _IMPORTANCE:
            raise ValueError(
                f'importance sampling is defined for "loss" and "gradnorm", not "{method}"'
            )
        self.method = method
        self.ratio = ratio
        self.keep = keep_count(ratio, batch_size)
        self.importance = importance
        self._loss_fn = loss_fn
        self._generator = generator
        self._batches = Accumulator(batch_size)

    @property
    def batch_size(self) -> int:
        """The size of the batches it returns."""
        return self._batches.batch_size

    def select(
        self,
        logits: torch.Tensor,
        targets: torch.Tensor | None = None,
        embeddings: torch.Tensor | None = None,
    ) -> Selection:
        """The rows to keep of the batch whose outputs are ``logits``."""
        n = int(logits.shape[0])
        keep = self.keep if n == self.batch_size else max(1, math.floor(self.ratio * n))
        score = scores(self.method, logits, targets, embeddings=embeddings, loss_fn=self._loss_fn)
        return choose(score, keep, importance=self.importance, generator=self._generator)

    def __call__(
        self,
        batch: Any,
        logits: torch.Tensor,
        targets: torch.Tensor | None = None,
        embeddings: torch.Tensor | None = None,
    ) -> list[tuple[Any, torch.Tensor]]:
        """Selects from ``batch``; returns the batches now full, each
        ``(batch, weights)``."""
        chosen = self.select(logits, targets, embeddings)
        return self._batches.add(take(batch, chosen.indices), chosen.weights)

    def flush(self) -> tuple[Any, torch.Tensor] | None:
        """The chosen samples not yet returned, as one smaller batch, or None."""
        return self._batches.flush()
