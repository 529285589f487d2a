"""Consumer.state_dict() / load_state_dict(), with real processes: a
trainer SIGKILLed after saving its state and restarted from it receives
each sample of the interrupted epoch exactly once over both runs; a state
whose position the producer no longer holds is said so in a warning, and
the consumer starts at the next epoch; a state that is not one, or is
another producer's, is refused with a message naming what is wrong."""

from __future__ import annotations

import json
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import pytest

import batchcast
from conftest import kill_all

HERE = Path(__file__).resolve().parent
SAMPLES = 400
BATCH = 10


def serve(batchcast_bin: str, bc_dir: Path, name: str, *extra: str) -> subprocess.Popen:
    args = [batchcast_bin, "serve", "--name", name, "--synthetic", "--samples", str(SAMPLES),
            "--sample-bytes", "16", "--batch-size", str(BATCH), "--json", *extra]
    env = dict(os.environ, BATCHCAST_DIR=str(bc_dir))
    return subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True)


def role(bc_dir: Path, which: str, **options: Any) -> subprocess.Popen:
    env = dict(os.environ, BATCHCAST_DIR=str(bc_dir), PYTHONUNBUFFERED="1")
    return subprocess.Popen([sys.executable, str(HERE / "stateful_roles.py"), which,
                             json.dumps(options)], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


#: What expect_line read past a line, by process id.
_read_ahead: Dict[int, bytes] = {}


def expect_line(p: subprocess.Popen, word: str, producer: Any = None, timeout: float = 60) -> None:
    """Waits for `p` to print the line `word`. Reads the pipe's descriptor
    itself and keeps what comes after the line: two lines that arrive in
    one read ("started", then "saved" at once on a loaded machine) are
    both seen, where a select() on the pipe would wait for the second one
    already sitting in a file object's buffer."""
    assert p.stdout is not None
    fd = p.stdout.fileno()
    got = _read_ahead.pop(p.pid, b"")
    deadline = time.monotonic() + timeout
    while b"\n" not in got:
        ready, _, _ = select.select([fd], [], [], max(deadline - time.monotonic(), 0))
        assert ready, f"no {word!r} from the process within {timeout} s"
        chunk = os.read(fd, 4096)
        if not chunk:
            break  # it exited: the assertion below shows its stderr
        got += chunk
    raw, _, _read_ahead[p.pid] = got.partition(b"\n")
    line = raw.decode(errors="replace")
    if line.strip() != word and producer is not None:
        producer.kill()
        print(producer.communicate())
    assert line.strip() == word, (line, p.stderr.read() if p.poll() is not None else "")


def test_expect_line_sees_two_lines_that_arrive_at_once() -> None:
    """The lines are written in one write, so they arrive in one read."""
    p = subprocess.Popen([sys.executable, "-c",
                          "import sys; sys.stdout.write('started\\nsaved\\n'); sys.stdout.flush();"
                          " sys.stdin.read()"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        expect_line(p, "started", timeout=30)
        expect_line(p, "saved", timeout=5)
    finally:
        p.kill()
        p.communicate()


def saving_trainer(bc_dir: Path, name: str, state_file: str, tmp_path: Path,
                   procs: list[subprocess.Popen]) -> subprocess.Popen:
    """A trainer (added to `procs`) that has read 6 batches and saved its
    state to `state_file`, waiting to be killed."""
    first = role(bc_dir, "trainer", name=name, stop_after=6, state_out=state_file,
                 ids_out=str(tmp_path / "unused.json"))
    procs.append(first)
    expect_line(first, "started")
    expect_line(first, "saved")
    return first


def assert_covered_once(state_file: str, ids_file: str) -> None:
    """The ids the first trainer saved with its state, then the restarted
    one's, are epoch 0 once, in order, and epoch 1 whole."""
    saved = json.loads(Path(state_file).read_text())
    after: dict[str, list[int]] = json.loads(Path(ids_file).read_text())
    # The synthetic source's order is the ids' order: the reference run.
    assert saved["ids"]["0"] + after["0"] == list(range(SAMPLES))
    assert after["1"] == list(range(SAMPLES))


def test_a_trainer_killed_and_restarted_from_its_state_sees_the_epoch_once(
        batchcast_bin, bc_dir, tmp_path):
    """The anchor consumer stops itself after 2 batches, so the producer
    (window 8, lag 10 batches) stays in epoch 0 and still holds the batch at
    the saved position when the second trainer loads the state; the anchor
    is let go once that trainer has begun."""
    procs: List[subprocess.Popen] = [serve(batchcast_bin, bc_dir, "st", "--epochs", "2",
                                           "--window", "8", "--max-lag", "10batches",
                                           "--consumers", "2")]
    state_file, ids_file = str(tmp_path / "state.json"), str(tmp_path / "ids.json")
    try:
        anchor = role(bc_dir, "anchor", name="st", stop_after=2)
        first = role(bc_dir, "trainer", name="st", stop_after=6, state_out=state_file,
                     ids_out=str(tmp_path / "unused.json"))
        procs += [anchor, first]
        _, status = os.waitpid(anchor.pid, os.WUNTRACED)
        assert os.WIFSTOPPED(status), status
        expect_line(first, "started")
        expect_line(first, "saved")
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=30)
        second = role(bc_dir, "trainer", name="st", state_in=state_file, ids_out=ids_file)
        procs.append(second)
        expect_line(second, "started", procs[0])
        os.kill(anchor.pid, signal.SIGCONT)
        _, err = second.communicate(timeout=60)
        assert second.returncode == 0, err
        _, err = anchor.communicate(timeout=60)
        assert anchor.returncode == 0, err
        _, err = procs[0].communicate(timeout=60)
        assert procs[0].returncode == 0, err
    finally:
        for p in procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGCONT)
                p.kill()
                p.communicate()
    saved = json.loads(Path(state_file).read_text())
    assert saved["state"]["version"] == 2 and "seed=" in saved["state"]["stream"]
    assert (saved["state"]["name"], saved["state"]["epoch"], saved["state"]["row"]) == (
        "st", 0, 6 * BATCH)
    after: Dict[str, List[int]] = json.loads(Path(ids_file).read_text())
    # The synthetic source's order is the ids' order: the reference run.
    assert saved["ids"]["0"] + after["0"] == list(range(SAMPLES))
    assert after["1"] == list(range(SAMPLES))


def test_a_trainer_and_its_producer_both_restarted_see_the_epoch_once(
        batchcast_bin, bc_dir, tmp_path):
    """The producer is SIGKILLed with the trainer; the restarted producer
    resumes at the trainer's position or before it (its state file), and
    the restarted trainer, given its saved state, skips what it had."""
    args = ("--epochs", "2", "--window", "8", "--consumers", "1", "--rejoin-timeout", "2")
    procs: list[subprocess.Popen] = [serve(batchcast_bin, bc_dir, "both", *args)]
    state_file, ids_file = str(tmp_path / "state.json"), str(tmp_path / "ids.json")
    try:
        first = saving_trainer(bc_dir, "both", state_file, tmp_path, procs)
        for p in (procs[0], first):
            p.send_signal(signal.SIGKILL)
            p.communicate(timeout=30)
        procs.append(serve(batchcast_bin, bc_dir, "both", *args))
        second = role(bc_dir, "trainer", name="both", state_in=state_file, ids_out=ids_file)
        procs.append(second)
        _, err = second.communicate(timeout=60)
        assert second.returncode == 0, err
        out, err = procs[2].communicate(timeout=60)
        assert procs[2].returncode == 0, err
        assert '"resumed"' in out.splitlines()[0], out.splitlines()[:1]
    finally:
        kill_all(procs)
    assert_covered_once(state_file, ids_file)


def test_a_trainer_that_loads_its_state_after_connecting_resumes_exactly(
        batchcast_bin, bc_dir, tmp_path):
    """The trainer is the producer's only consumer: once it is SIGKILLed,
    the restarted one connects, and the producer (window 8 of 40 batches)
    must not run through the epoch for it while it reads its checkpoint
    (here: until it is told to go on, after a `batchcast status` round
    trip), or the saved position would leave the window."""
    procs: List[subprocess.Popen] = [serve(batchcast_bin, bc_dir, "held", "--epochs", "2",
                                           "--window", "8", "--max-lag", "10batches",
                                           "--consumers", "1")]
    state_file, ids_file = str(tmp_path / "state.json"), str(tmp_path / "ids.json")
    try:
        first = saving_trainer(bc_dir, "held", state_file, tmp_path, procs)
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=30)
        second = role(bc_dir, "trainer", name="held", state_in=state_file, ids_out=ids_file,
                      hold=True)
        procs.append(second)
        expect_line(second, "connected", procs[0])
        env = dict(os.environ, BATCHCAST_DIR=str(bc_dir))
        status = subprocess.run([batchcast_bin, "status", "held", "--json"], env=env,
                                capture_output=True, text=True, timeout=30)
        assert status.returncode == 0, status.stderr
        assert second.stdin is not None
        second.stdin.write("go\n")
        second.stdin.flush()
        _, err = second.communicate(timeout=60)
        assert second.returncode == 0, err
        assert "cannot be replayed" not in err and "WARNING" not in err, err
        _, err = procs[0].communicate(timeout=60)
        assert procs[0].returncode == 0, err
    finally:
        kill_all(procs)
    assert_covered_once(state_file, ids_file)


def drain_after(c: batchcast.Consumer, pause: threading.Event, go: threading.Event) -> None:
    """Reads `c` to the stream's end; sets `pause` 10 batches into epoch 1
    and waits for `go` there."""
    try:
        while True:
            for step, _ in enumerate(c):
                if c.epoch == 1 and step == 10:
                    pause.set()
                    go.wait(60)
    except batchcast.ProducerFinished:
        pass


def test_a_state_whose_position_is_gone_warns_and_starts_at_the_next_epoch(
        batchcast_bin, bc_dir, caplog):
    # A lag of 4 batches: the late consumer, waiting for the next epoch,
    # lets the producer run only that far past the paused front one.
    producer = serve(batchcast_bin, bc_dir, "gone", "--epochs", "3", "--window", "4",
                     "--max-lag", "4batches", "--consumers", "1")
    pause, go = threading.Event(), threading.Event()
    try:
        front = batchcast.Consumer("gone", connect_timeout=30, format="numpy")
        reader = threading.Thread(target=drain_after, args=(front, pause, go))
        reader.start()
        assert pause.wait(60)
        caplog.set_level(logging.WARNING, logger="batchcast")
        late = batchcast.Consumer("gone", format="numpy")
        late.load_state_dict({"version": 1, "name": "gone", "epoch": 0, "row": 50})
        assert late.state_dict()["epoch"] == 0 and late.state_dict()["row"] == 50
        go.set()
        ids = [int(i) for _, batch_ids in late for i in np.asarray(batch_ids)]
        assert late.epoch == 2
        assert ids == list(range(SAMPLES))
        reader.join(60)
        late.close()
        front.close()
        producer.communicate(timeout=60)
    finally:
        go.set()
        if producer.poll() is None:
            producer.kill()
            producer.communicate()
    said = [r.getMessage() for r in caplog.records if "cannot be replayed" in r.getMessage()]
    assert len(said) == 1, [r.getMessage() for r in caplog.records]
    assert f"{SAMPLES - 50} rows of epoch 0 (from its row 50)" in said[0], said[0]
    assert f"the {SAMPLES} rows of the 1 epochs after it" in said[0], said[0]
    assert "starts at epoch 2" in said[0], said[0]


@pytest.mark.parametrize(
    ("state", "says"),
    [
        ([1, 2], "must be a dict"),
        ({"version": 1, "name": "bad", "epoch": 0}, "missing keys ['row']"),
        ({"version": 1, "name": "bad", "epoch": 0, "row": 0, "x": 1}, "unknown keys ['x']"),
        ({"version": 3, "name": "bad", "epoch": 0, "row": 0}, "version 3"),
        ({"version": 2, "name": "bad", "epoch": 0, "row": 0}, "missing keys ['stream']"),
        ({"version": 2, "name": "bad", "stream": 7, "epoch": 0, "row": 0}, "must be a str"),
        ({"version": 1, "name": "other", "epoch": 0, "row": 0}, "producer 'other', not 'bad'"),
        ({"version": 1, "name": "bad", "epoch": -1, "row": 0}, "'epoch'] must be a non-negative"),
        ({"version": 1, "name": "bad", "epoch": 0, "row": "5"}, "'row'] must be a non-negative"),
        ({"version": 1, "name": "bad", "epoch": True, "row": 0}, "'epoch'] must be a non-negative"),
    ],
)
def test_bad_states_are_refused_with_what_is_wrong(batchcast_bin, bc_dir, state, says):
    producer = serve(batchcast_bin, bc_dir, "bad", "--epochs", "1", "--consumers", "1")
    try:
        with batchcast.Consumer("bad", connect_timeout=30, format="numpy") as c:
            with pytest.raises(batchcast.InvalidArgument, match=None) as info:
                c.load_state_dict(state)
            assert says in str(info.value), str(info.value)
            # Still usable, from the start.
            first = next(iter(c))
            assert np.asarray(first[1]).tolist() == list(range(BATCH))
            with pytest.raises(batchcast.InvalidArgument, match="before its first loop"):
                c.load_state_dict(c.state_dict())
    finally:
        producer.kill()
        producer.communicate()


def test_state_dict_counts_what_the_loop_was_handed(batchcast_bin, bc_dir):
    """In one process: the state before any epoch, inside a loop (the
    rows handed), after a loop left early (the next epoch's start), and a
    second consumer loaded with it, whose len() and batches are the rest of
    the epoch."""
    producer = serve(batchcast_bin, bc_dir, "here", "--epochs", "2", "--window", "8",
                     "--consumers", "1")
    try:
        with batchcast.Consumer("here", connect_timeout=30, format="numpy") as first:
            stream = first.welcome()["identity"]
            assert "seed=" in stream, stream
            at = {"version": 2, "name": "here", "stream": stream}
            assert first.state_dict() == {**at, "epoch": None, "row": 0}
            loop = iter(first)
            for _ in range(6):
                next(loop)
            saved = first.state_dict()
            assert saved == {**at, "epoch": 0, "row": 6 * BATCH}
            with batchcast.Consumer("here", format="numpy") as second:
                second.load_state_dict(json.loads(json.dumps(saved)))
                assert second.state_dict() == saved
                rest = SAMPLES // BATCH - 6
                assert len(second) == rest
                ids = []
                for step, (_, batch_ids) in enumerate(second):
                    assert len(second) == rest
                    ids.extend(int(i) for i in np.asarray(batch_ids))
                    if step == 1:
                        assert second.state_dict()["row"] == 8 * BATCH
                assert ids == list(range(6 * BATCH, SAMPLES))
                assert second.state_dict() == {**at, "epoch": 1, "row": 0}
            loop.close()  # left early: the next loop starts at epoch 1
            assert first.state_dict() == {**at, "epoch": 1, "row": 0}
    finally:
        producer.kill()
        producer.communicate()


def test_a_state_from_another_stream_is_refused_naming_the_difference(batchcast_bin, bc_dir):
    """Saved from `serve --seed 7`, loaded into a consumer of a `--seed 8`
    producer under the same name: refused, naming the seed; a version 1
    state (no stream) is still read."""
    first = serve(batchcast_bin, bc_dir, "ident", "--epochs", "1", "--seed", "7")
    try:
        with batchcast.Consumer("ident", connect_timeout=30, format="numpy") as c:
            next(iter(c))
            saved = c.state_dict()
    finally:
        first.kill()
        first.communicate()
    second = serve(batchcast_bin, bc_dir, "ident", "--epochs", "1", "--seed", "8", "--fresh")
    try:
        with batchcast.Consumer("ident", connect_timeout=30, format="numpy") as c:
            with pytest.raises(batchcast.InvalidArgument) as info:
                c.load_state_dict(saved)
            assert "another stream" in str(info.value), str(info.value)
            assert "seed: then 7, now 8" in str(info.value), str(info.value)
            old = {k: v for k, v in saved.items() if k != "stream"}
            c.load_state_dict({**old, "version": 1})
    finally:
        second.kill()
        second.communicate()
