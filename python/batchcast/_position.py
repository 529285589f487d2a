"""Where a Consumer stands in its stream, as numbers: its batch size, the
exact ``len()`` of the epoch the next loop reads (for every join policy),
and the durable position, ``state_dict()`` and ``load_state_dict()``
(torch.utils.data's Stateful protocol)."""

from __future__ import annotations

from typing import Any

from . import _native, _state
from ._epochs import EpochLoop
from ._spec import StreamSpec

__all__ = ["Position"]


class Position(EpochLoop):
    """The arithmetic half of :class:`batchcast.Consumer`, above its
    epochs; the Consumer sets the attributes declared here."""

    #: The batch size asked for (None: the producer's).
    _requested_batch_size: int | None
    _drop_last: bool
    #: Whether the native consumer waits for its first read or
    #: load_state_dict before the producer sends it anything.
    _deferred: bool
    #: What the native consumer is connected with (see Consumer._connect).
    _connect_args: dict[str, Any]
    _spec: StreamSpec

    def _reattach_plane(self) -> None:
        """Maps the device slots again after a reconnection (the Consumer)."""

    @property
    def batch_size(self) -> int | None:
        """This consumer's batch size (None until known)."""
        if self._requested_batch_size is not None:
            return self._requested_batch_size
        if self._current is not None:
            return self._current.batch_size
        return self._native.welcome()["batch_size"]

    def _samples_per_epoch(self) -> int:
        # The native consumer keeps the size last announced: at join, at a
        # full epoch's start, or at an epoch boundary (a dataset that grew).
        last = self._last_full
        return self._known(
            self._native.welcome()["samples_per_epoch"], None if last is None else last.samples
        )

    def _full_batches(self) -> int:
        last = self._last_full
        return self._known(self._native.batches_per_epoch(), None if last is None else last.batches)

    def _known(self, n: int | None, last_full: int | None) -> int:
        """``n``, else the last full epoch's figure, else raises the
        TypeError of an unknown ``len()``."""
        if n is None:
            n = last_full
        if n is None:
            raise self._unknown_len()
        return n

    def _unknown_len(self) -> TypeError:
        return TypeError(
            f"len() of batchcast.Consumer({self.name!r}) is unknown: the producer did not "
            "announce its epoch size (its loader has no len(), or no batch size is known); "
            "pass samples_per_epoch= (and batch_size=) to batchcast.Producer"
        )

    def __len__(self) -> int:
        """Batches of the epoch the next (or current) loop reads; exact
        before the loop, for every join policy.

        Inside a loop: the batches of its epoch. Before a loop: the batches
        of the epoch it will read. That is the partial first epoch of a
        ``join="now"`` consumer that joined mid-epoch (the producer tells it
        at connection how many samples are left), and a full epoch
        otherwise. A loop left early (``break``) does not count: the next
        loop starts a new, full epoch.

        **The join="now" trap.** A schedule sized once from ``len()`` at
        connection (``OneCycleLR(steps_per_epoch=len(loader))``, timm's and
        Lightning's step counts) is sized from that partial first epoch
        when the consumer joined mid-epoch, and runs out (OneCycleLR
        raises) in the next, full epoch. Size such schedules from
        :attr:`batches_per_epoch`, the length of a full epoch.
        """
        if self._in_epoch and self._owner is not None and self._current is not None:
            if self._current.batches is not None:
                return self._current.batches
            raise self._unknown_len()
        if self._current is None:
            first = self._first_epoch_batches()
            if first is not None:
                return first
        return self._full_batches()

    @property
    def batches_per_epoch(self) -> int:
        """Batches of a full epoch at this consumer's batch size and
        ``drop_last``, whatever epoch the next loop reads (``len()`` of a
        ``join="now"`` consumer is first its partial first epoch; see
        :meth:`__len__`). Raises TypeError when the producer did not
        announce its epoch size."""
        return self._full_batches()

    def _first_epoch_batches(self) -> int | None:
        """Batches of the partial first epoch a ``join="now"`` consumer
        joined, from the welcome; None when its first epoch is a full one."""
        w = self._native.welcome()
        if self._restored is not None and w.get("samples_per_epoch") is not None:
            bs = self.batch_size
            if bs is not None:
                samples = max(0, w["samples_per_epoch"] - self._restored[1])
                return samples // bs if self._drop_last else -(-samples // bs)
        if not w.get("first_epoch_partial"):
            return None
        samples = w.get("first_epoch_samples")
        bs = self.batch_size
        if samples is None or bs is None:
            raise self._unknown_len()
        return samples // bs if self._drop_last else -(-samples // bs)

    # -- state (torch.utils.data's Stateful protocol) ---------------------

    def state_dict(self) -> dict[str, Any]:
        """Where this consumer stands: ``{"version": 2, "name": ...,
        "stream": S, "epoch": E, "row": R}``, S the stream identity the
        producer announced (None when it keeps none), R the rows of epoch E
        the loop has been handed (batches a prefetch took ahead do not
        count). After an epoch's
        end, or a loop left early (whose rest the next loop skips), it is
        the next epoch's start; None as the epoch before the first. Save it
        with a checkpoint and give it to :meth:`load_state_dict`."""
        if self._current is None:
            epoch, row = self._restored if self._restored is not None else (None, 0)
        elif self._in_epoch and self._owner is not None:
            epoch, row = self._current.epoch, self._row
        else:
            epoch, row = self._current.epoch + 1, 0
        return _state.state(self.name, self._native.welcome()["identity"], epoch, row)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Starts this consumer where a saved :meth:`state_dict` stood: the
        loop receives the rows of its epoch from its row on, then the next
        epochs. Call it before the first loop. Exact while the producer
        still holds the batch with that row (or has not begun its epoch:
        a restarted ``batchcast serve`` resumes there); else the first
        loop logs a warning through the ``batchcast`` logger naming the
        rows that cannot be replayed, and starts at the next epoch.

        Raises :class:`batchcast.InvalidArgument` for a state that is not
        one (naming what is wrong), or was saved for another producer or
        from another stream under its name (naming what differs)."""
        native = self._native
        position = _state.parse(
            state_dict, self.name, native.welcome()["identity"], native.identity_differences
        )
        if self._current is not None or self._in_epoch:
            raise _native.InvalidArgument(
                f"load_state_dict on batchcast.Consumer({self.name!r}) after it began reading "
                f"epoch {self._current.epoch if self._current else '?'}: load the state into a "
                "new Consumer, before its first loop"
            )
        if position is None:
            return
        if self._deferred:
            self._native.start_at(position)
            self._restored = position
            return
        native = _native.Consumer(self.name, **self._connect_args, start=position)
        self._drop_pending()
        old, self._native = self._native, native
        old.close()
        self._reattach_plane()
        self._spec = StreamSpec(native.welcome())
        self._restored = position
