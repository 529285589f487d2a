"""Processes for test_device_plane.py (``python plane_roles.py ROLE JSON``),
run with ``BATCHCAST_DEVICE_STAND_IN`` set: a producer that mirrors its
arena on stand-in GPUs, and consumers on a stand-in GPU that check each
batch and where its memory lies."""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any, Dict, Iterator, List

from helpers import IdLoader, run_to_the_end, say


class ResumableIds(IdLoader):
    """An IdLoader with the Stateful protocol (a durable producer resumes
    it where it stood) that SIGKILLs its process when about to yield its
    ``kill_after``-th batch."""

    def __init__(self, n: int, batch_size: int, width: int, kill_after: int | None) -> None:
        super().__init__(n, batch_size, width=width, names=False)
        self.epoch = self.pos = self.yielded = 0
        self.kill_after = kill_after

    def state_dict(self) -> Dict[str, Any]:
        return {"epoch": self.epoch, "pos": self.pos}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.epoch, self.pos = state["epoch"], state["pos"]

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        for batch in list(super().__iter__())[self.pos:]:
            if self.yielded == self.kill_after:
                os.kill(os.getpid(), signal.SIGKILL)
            self.pos += 1
            self.yielded += 1
            yield batch
        self.epoch += 1
        self.pos = 0


def produce_mirrored(o: Dict[str, Any]) -> None:
    """Sample ids (produce_ids's loader, no names) mirrored on ``device``;
    with ``durable``, a durable producer of a resumable loader that dies
    (SIGKILL) before its ``kill_after``-th batch."""
    import batchcast

    loader: Any
    durable: Dict[str, Any] = {}
    if o.get("durable"):
        loader = ResumableIds(o["n"], o.get("batch_size", 64), o.get("width", 16), o.get("kill_after"))
        durable = {"durable": True, "seed": 7, "rejoin_timeout": 30}
    else:
        loader = IdLoader(o["n"], o.get("batch_size", 64), width=o.get("width", 16), names=False)
    p = batchcast.Producer(
        loader,
        o["name"],
        window=o.get("window", 4),
        wait_for_consumers=o.get("wait_for_consumers", True),
        device=o.get("device", "cuda:0"),
        **durable,
        **{k: o[k] for k in ("max_lag", "lag_policy", "stall_timeout") if k in o},
    )
    say("ready")
    run_to_the_end(p, o.get("epochs", 1))


def _inside(tensor: Any, slots: Dict[str, Any] | None) -> bool:
    if slots is None:
        return False
    lo = slots["addr"]
    return lo <= tensor.data_ptr() and tensor.data_ptr() + tensor.nbytes <= lo + slots["len"]


def consume_on_device(o: Dict[str, Any]) -> None:
    """A consumer on ``device``: checks that each batch's ids are the next
    ones and that ``x`` agrees with them (where the batch is, without
    synchronising; ``no_sync``: without listing the ids either; after
    ``sleep_cycles`` of GPU work queued before each batch), counts the
    arrays that lie in the mapped device slots, and reports ``plane
    {json}``. ``write``: adds 1000
    to each batch's ``x`` in place after checking it. ``hold``: after that
    many batches says ``holding`` (keeping them) and waits for a line on
    stdin. ``gone_after``: after that many batches says ``got``, waits for
    a line (the producer is killed meanwhile), checks the batch it holds,
    then asks for the next and says ``gone`` with its exception's name."""
    import warnings

    import batchcast

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        c = batchcast.Consumer(o["name"], batch_size=o.get("batch_size"), device=o.get("device", "cuda:0"),
                               copy_on_write=o.get("copy_on_write", True), connect_timeout=30,
                               reconnect_timeout=60)
    import torch

    stats = c.stats()
    slots = stats["device_slots"]
    ids: List[int] = []
    inside = arrays = 0
    addrs = set()
    kept = []
    count = 0
    # Checked where the batch is, without synchronising: on a GPU, the loop
    # runs ahead of the checks (and of `sleep_cycles` of work before each).
    cycles = o.get("sleep_cycles", 0)
    wrong = torch.zeros((), dtype=torch.int64, device=c._device)
    id_sum = torch.zeros((), dtype=torch.int64, device=c._device)
    samples = 0
    for _ in range(o.get("epochs", 1)):
        start = 0
        for b in c:
            count += 1
            n = len(b["id"])
            if cycles:
                torch.cuda._sleep(cycles)
            wrong += (b["id"] != torch.arange(start, start + n, device=c._device)).sum()
            wrong += (b["x"][:, 0] != b["id"].float()).sum()
            id_sum += b["id"].sum()
            if not o.get("no_sync"):
                ids += b["id"].tolist()
            start += n
            samples += n
            slots = c.stats()["device_slots"]  # the mapping now: a restarted producer's is new
            if slots is not None:
                addrs.add(slots["addr"])
            for t in (b["id"], b["x"]):
                arrays += 1
                inside += int(_inside(t, slots))
            if o.get("write"):
                b["x"].add_(1000)
            if count == o.get("hold"):
                kept.append(b)
                say("holding")
                sys.stdin.readline()
            if count == o.get("gone_after"):
                say("got")
                sys.stdin.readline()
                first = start - n
                ok = b["id"].tolist() == list(range(first, start)) and bool(
                    (b["x"][:, 0] == b["id"].float() + 1000 * bool(o.get("write"))).all())
                try:
                    next(iter(c))
                    say("gone", "none", ok)
                except Exception as e:  # what the next read raises
                    say("gone", type(e).__name__, ok)
                return
    if c._device is not None and c._device.type == "cuda":
        torch.cuda.synchronize()
    say("plane", json.dumps({
        "addrs": sorted(addrs), "ids": ids, "wrong": int(wrong), "id_sum": int(id_sum), "samples": samples, "inside": inside, "arrays": arrays, "slots": slots,
        "path": stats["device_path"], "reason": stats["device_path_reason"], "device": stats["device"],
        "warnings": [str(w.message) for w in caught],
    }))
    c.close()


def main() -> None:
    role, opts = sys.argv[1], json.loads(sys.argv[2])
    globals()[role](opts)


if __name__ == "__main__":
    main()
