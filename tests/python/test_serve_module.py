"""`python -m batchcast.serve` and `batchcast.serve.serve()`: `batchcast
serve` without the binary, through the binding's serve loop (the library
the binary uses): the same flags, event lines and summary; SIGTERM and
Ctrl-C stop it cleanly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading

import pytest

import batchcast
from batchcast import _native
from batchcast.serve import serve

SYNTH = ["--synthetic", "--samples", "96", "--batch-size", "16", "--sample-bytes", "8"]


def start(args, bc_dir):
    env = dict(os.environ, BATCHCAST_DIR=str(bc_dir), PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        [sys.executable, "-m", "batchcast.serve", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def ids_of(consumer, epochs=1):
    seen = []
    for _ in range(epochs):
        for payload, ids in consumer:
            seen.extend(int(i) for i in ids)
    return seen


def test_the_module_serves_like_the_binary_and_prints_its_events(bc_dir):
    proc = start(["--name", "mod", "--json", "--epochs", "2", *SYNTH], bc_dir)
    try:
        listening = json.loads(proc.stdout.readline())
        assert listening["event"] == "listening" and listening["samples_per_epoch"] == 96
        assert listening["pid"] == proc.pid and listening["socket"].startswith(str(bc_dir))
        with batchcast.Consumer("mod", connect_timeout=30) as c:
            assert len(c) == 6
            assert ids_of(c, 2) == list(range(96)) * 2
        finished = json.loads(proc.stdout.readline())
        assert proc.wait(60) == 0
    finally:
        proc.kill()
        proc.communicate()
    assert finished["event"] == "finished"
    s = finished["summary"]
    assert (s["epochs"], s["batches"], s["samples"], s["interrupted"], s["idle"]) == (2, 12, 192, False, False)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "sigint"])
def test_a_signal_stops_the_module_cleanly_and_tells_the_consumers(bc_dir, sig):
    proc = start(["--name", "term", "--epochs", "0", *SYNTH], bc_dir)
    try:
        with batchcast.Consumer("term", connect_timeout=30) as c:
            next(iter(c))
            proc.send_signal(sig)
            with pytest.raises(batchcast.ProducerFinished) as e:
                while True:
                    for _ in c:
                        pass
        assert e.value.reason == "interrupted"
        assert proc.wait(60) == 0
    finally:
        proc.kill()
        _, err = proc.communicate()
    assert 'serving "term"' in err and "epochs until stopped" in err
    assert "; interrupted" in err


def test_the_module_takes_the_binarys_flags_and_refuses_others(bc_dir):
    out = subprocess.run([sys.executable, "-m", "batchcast.serve", "--help"], check=False, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    for flag in ("--name", "--data", "--synthetic", "--idle-timeout", "--max-lag", "--decode-only", "--json"):
        assert flag in out.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "batchcast.serve", "--name", "x", "--no-such-flag"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "--no-such-flag" in bad.stderr
    nothing = subprocess.run(
        [sys.executable, "-m", "batchcast.serve", "--name", "x"], check=False, capture_output=True, text=True, timeout=60
    )
    assert nothing.returncode == 1
    assert "error: say what to serve: --data PATH (an image dataset), --replay FILE.csv (a timestamped one) or --synthetic" in nothing.stderr


def test_serve_in_process_hands_events_to_a_callback_and_returns_the_summary(bc_dir):
    events = []
    ready = threading.Event()

    def on_event(line):
        events.append(json.loads(line))
        ready.set()

    result = {}
    t = threading.Thread(
        target=lambda: result.update(serve(["--name", "inproc", "--json", *SYNTH], events=on_event))
    )
    t.start()
    assert ready.wait(60)
    with batchcast.Consumer("inproc", connect_timeout=30) as c:
        assert ids_of(c) == list(range(96))
    t.join(60)
    assert not t.is_alive(), "serve() did not return within 60 s"
    assert [e["event"] for e in events] == ["listening", "finished"]
    assert result["epochs"] == 1 and result["samples"] == 96 and not result["interrupted"]


def test_serve_in_process_until_idle_ends_once_the_last_consumer_has_gone(bc_dir):
    result = {}
    t = threading.Thread(
        target=lambda: result.update(
            serve(["--name", "idle", "--epochs", "0", "--idle-timeout", "0.5", "--json", *SYNTH], events=lambda _: None)
        )
    )
    t.start()
    with batchcast.Consumer("idle", connect_timeout=30) as c:
        assert ids_of(c) == list(range(96))
    t.join(60)
    assert not t.is_alive(), "serve() did not return within 60 s"
    assert result["idle"] and result["epochs"] >= 1


def test_serve_in_process_raises_typed_errors(bc_dir):
    with pytest.raises(batchcast.InvalidArgument, match="--workers must be at least 1"):
        serve(["--name", "bad", *SYNTH, "--workers", "0"])
    with pytest.raises(batchcast.InvalidArgument, match="--idle-timeout must be a non-negative number"):
        serve(["--name", "bad", *SYNTH, "--idle-timeout=-1"])
    with pytest.raises(batchcast.InvalidArgument, match="no class folders in"):
        serve(["--name", "bad", "--data", str(bc_dir)])
    with pytest.raises(batchcast.InvalidArgument) as e:
        serve(["--name", "bad", "--epochs", "many"])
    assert e.value.exit_code == 2
    with pytest.raises(batchcast.NoConsumers):
        serve(["--name", "lonely", "--consumers", "1", "--idle-timeout", "0.2", *SYNTH])
    assert isinstance(_native.ServeRule(None), _native.ServeRule)
