"""Triggers: :class:`Trigger`, one that the producer fired for every
consumer (``batchcast serve --trigger``, received as
``Consumer.triggers``); and those that depend on the trainer's own model,
so that they run in the trainer rather than the producer: drift of its
embeddings, and a drop of its accuracy, each judged window by window
(exported from :mod:`batchcast.select`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    import torch

_METRICS = ("mmd", "mean")


class Trigger(NamedTuple):
    """A trigger the producer fired at an epoch boundary, once for every
    consumer (``batchcast serve --trigger``): the data that arrived since
    its last firing is served from epoch :attr:`epoch` on."""

    #: The trigger as the producer was given it, e.g. ``"amount=400"``.
    id: str
    #: Its firings so far, this one included (1 for the first).
    seq: int
    #: The first epoch that holds the new data.
    epoch: int
    #: Samples that arrived since its last firing.
    samples: int
    #: Earliest arrival time among them (seconds since the Unix epoch: a
    #: file's mtime, its row in the folder's ``batchcast-arrivals.csv``, or
    #: a replayed trace's timestamp), None when none arrived.
    first_arrival: float | None
    #: Latest arrival time among them, None when none arrived.
    last_arrival: float | None

    @classmethod
    def from_event(cls, event: tuple) -> Trigger:
        """From the native consumer's ``("trigger", ...)`` event."""
        return cls(*event[1:7])


class DriftTrigger:
    """Fires when the distribution of a model's embeddings drifts.

    The first ``window`` samples given to :meth:`update` are the reference.
    Each later window of ``window`` samples is compared with it: the distance
    (``metric="mmd"``: the maximum mean discrepancy with a Gaussian kernel,
    its bandwidth the median pairwise distance unless ``bandwidth`` is given;
    ``"mean"``: the Euclidean distance of the two means) is kept in
    :attr:`distance`, and when it exceeds ``threshold`` the trigger fires:
    :meth:`update` returns True, :attr:`fired` counts it, and that window
    becomes the new reference (the model retrained on the new data).

    Embeddings (``(n, ...)`` tensors, e.g. a model's penultimate
    activations) are detached and stay on their device.
    """

    def __init__(
        self,
        window: int,
        threshold: float,
        *,
        metric: str = "mmd",
        bandwidth: float | None = None,
    ) -> None:
        if isinstance(window, bool) or not isinstance(window, int) or window < 2:
            raise ValueError(f"window must be an int of at least 2 samples, not {window!r}")
        if metric not in _METRICS:
            raise ValueError(
                f"unknown drift metric {metric!r}; choose one of {', '.join(_METRICS)}"
            )
        if not threshold > 0:
            raise ValueError(f"threshold must be positive, not {threshold!r}")
        if bandwidth is not None and not bandwidth > 0:
            raise ValueError(f"bandwidth must be positive, not {bandwidth!r}")
        self.window = window
        self.threshold = float(threshold)
        self.metric = metric
        self.bandwidth = bandwidth
        #: The distance of the last full window to the reference (None before one).
        self.distance: float | None = None
        #: How many times the trigger has fired.
        self.fired = 0
        self._reference: torch.Tensor | None = None
        self._current: list[torch.Tensor] = []
        self._rows = 0

    def update(self, embeddings: torch.Tensor) -> bool:
        """Adds a batch's embeddings; True when a window completed by them
        drifted past the threshold."""
        x = embeddings.detach().float().reshape(len(embeddings), -1)
        fired = False
        while len(x):
            room = self.window - self._rows
            self._current.append(x[:room])
            self._rows += len(x[:room])
            x = x[room:]
            if self._rows == self.window:
                fired = self._close_window() or fired
        return fired

    def _close_window(self) -> bool:
        import torch

        current = torch.cat(self._current)
        self._current, self._rows = [], 0
        if self._reference is None:
            self._reference = current
            return False
        self.distance = distance(self._reference, current, self.metric, self.bandwidth)
        if self.distance <= self.threshold:
            return False
        self._reference = current
        self.fired += 1
        return True


class PerformanceTrigger:
    """Fires when the model's accuracy on the data it is about to train on
    falls below ``threshold``.

    :meth:`update` takes each batch's per-sample correctness (a bool tensor,
    e.g. ``logits.argmax(1) == labels`` before the step) and judges every
    ``window`` samples: :attr:`accuracy` holds the last window's accuracy,
    and where it is below ``threshold`` the trigger fires (:meth:`update`
    returns True, :attr:`fired` counts it).
    """

    def __init__(self, window: int, threshold: float) -> None:
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ValueError(f"window must be a positive int of samples, not {window!r}")
        if not 0 < threshold <= 1:
            raise ValueError(f"threshold must be an accuracy in (0, 1], not {threshold!r}")
        self.window = window
        self.threshold = float(threshold)
        #: The accuracy of the last full window (None before one).
        self.accuracy: float | None = None
        #: How many times the trigger has fired.
        self.fired = 0
        self._right = 0
        self._rows = 0

    def update(self, correct: torch.Tensor) -> bool:
        """Adds a batch's per-sample correctness; True when a window
        completed by it fell below the threshold."""
        flags = correct.detach().reshape(-1).bool()
        fired = False
        while len(flags):
            room = self.window - self._rows
            part, flags = flags[:room], flags[room:]
            self._right += int(part.sum())
            self._rows += len(part)
            if self._rows == self.window:
                self.accuracy = self._right / self.window
                self._right = self._rows = 0
                if self.accuracy < self.threshold:
                    self.fired += 1
                    fired = True
        return fired


def distance(
    a: torch.Tensor, b: torch.Tensor, metric: str = "mmd", bandwidth: float | None = None
) -> float:
    """The distance between two samples ``(n, d)`` and ``(m, d)``: ``"mmd"``
    (the square root of the biased squared MMD, Gaussian kernel) or
    ``"mean"`` (of the means)."""
    import torch

    if metric == "mean":
        return float(torch.linalg.vector_norm(a.mean(0) - b.mean(0)))
    both = torch.cat([a, b])
    d2 = torch.cdist(both, both).square()
    if bandwidth is None:
        off = d2[~torch.eye(len(both), dtype=torch.bool, device=both.device)]
        sigma2 = float(off.median()) or 1.0
    else:
        sigma2 = bandwidth * bandwidth
    k = torch.exp(-d2 / (2 * sigma2))
    n = len(a)
    mmd2 = k[:n, :n].mean() + k[n:, n:].mean() - 2 * k[:n, n:].mean()
    return float(mmd2.clamp_min(0).sqrt())
