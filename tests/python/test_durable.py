"""Durable epochs from Python: a Consumer whose `batchcast serve` producer is
SIGKILLed and restarted under the same name waits for it (saying so through
the `batchcast` logger), reattaches, and receives every sample of each
epoch exactly once, in order, as if nothing had happened; a batch it held
from the dead producer's arena stays valid."""

from __future__ import annotations

import logging
import os
import signal
import subprocess

import numpy as np

import batchcast
from conftest import kill_all

SAMPLES = 2000
BATCH = 10


def serve(batchcast_bin: str, bc_dir) -> subprocess.Popen:
    args = [batchcast_bin, "serve", "--name", "dur", "--synthetic", "--samples", str(SAMPLES),
            "--sample-bytes", "16", "--batch-size", str(BATCH), "--epochs", "2", "--window", "4",
            "--consumers", "1", "--json"]
    env = dict(os.environ, BATCHCAST_DIR=str(bc_dir))
    return subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True)


def test_a_python_consumer_waits_for_a_restarted_producer_and_misses_nothing(
        batchcast_bin, bc_dir, caplog):
    procs = [serve(batchcast_bin, bc_dir)]
    try:
        ids: dict[int, list[int]] = {0: [], 1: []}
        caplog.set_level(logging.WARNING, logger="batchcast")
        with batchcast.Consumer("dur", connect_timeout=30, format="numpy",
                                reconnect_timeout=60) as c:
            for epoch in (0, 1):
                for step, (_payload, batch_ids) in enumerate(c):
                    ids[epoch].extend(int(i) for i in np.asarray(batch_ids))
                    if epoch == 0 and step == 70:
                        # Mid-epoch: kill the producer, start another one;
                        # this batch's view of the dead one's arena is kept.
                        held = batch_ids
                        procs[-1].send_signal(signal.SIGKILL)
                        procs[-1].communicate(timeout=30)
                        assert procs[-1].returncode == -signal.SIGKILL
                        procs.append(serve(batchcast_bin, bc_dir))
        out, err = procs[-1].communicate(timeout=60)
        assert procs[-1].returncode == 0, err
    finally:
        kill_all(procs)
    for epoch in (0, 1):
        assert ids[epoch] == list(range(SAMPLES)), f"epoch {epoch}: {len(ids[epoch])} ids"
    assert np.asarray(held).tolist() == list(range(700, 710)), "the held batch stayed valid"
    waiting = [r.getMessage() for r in caplog.records if "waiting up to 60 s" in r.getMessage()]
    assert len(waiting) == 1, [r.getMessage() for r in caplog.records]
    assert '"resumed"' in out.splitlines()[0], out.splitlines()[:1]


def test_a_prefetch_threads_wait_sees_the_restart_too(batchcast_bin, bc_dir):
    """`wait_event` (what a prefetch thread waits with: the consumer is held
    only while looking) reattaches as `next_event` does: each epoch's
    batches come once each, in order, and each epoch ends with all its
    samples."""
    procs = [serve(batchcast_bin, bc_dir)]
    try:
        c = batchcast._native.Consumer("dur", connect_timeout=30, reconnect_timeout=60)
        indices: dict[int, list[int]] = {0: [], 1: []}
        ends = []
        while True:
            event = c.wait_event()
            if event[0] == "batch":
                indices[event[1]].append(event[2])
                if event[1] == 0 and event[2] == 120:
                    procs[-1].send_signal(signal.SIGKILL)
                    procs[-1].communicate(timeout=30)
                    procs.append(serve(batchcast_bin, bc_dir))
            elif event[0] == "end":
                ends.append((event[1], event[2]))
            elif event[0] == "finished":
                break
        c.close()
        procs[-1].communicate(timeout=60)
        assert procs[-1].returncode == 0
    finally:
        kill_all(procs)
    for epoch in (0, 1):
        assert indices[epoch] == list(range(SAMPLES // BATCH)), f"epoch {epoch}"
    assert ends == [(0, SAMPLES), (1, SAMPLES)]
