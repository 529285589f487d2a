"""Fixtures for the batchcast Python tests.

Every test gets its own socket directory (BATCHCAST_DIR), so tests never see
each other's producers. Processes are real: `spawn` starts a role of
helpers.py (or any script) and returns a `Proc` whose output lines the test
waits for; timeouts there only turn a hang into a failure.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

import pytest

HERE = Path(__file__).resolve().parent


class Proc:
    """A child process whose stdout is read line by line."""

    def __init__(self, args: List[str], env: Dict[str, str], stdin: bool = False) -> None:
        self.args = args
        self.popen = subprocess.Popen(
            args,
            cwd=HERE,
            env=env,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self.lines: "queue.Queue[Optional[str]]" = queue.Queue()
        self.seen: List[str] = []
        self.stderr: List[str] = []
        self._threads = [
            threading.Thread(target=self._pump, args=(self.popen.stdout, self.lines), daemon=True),
            threading.Thread(target=self._drain_err, daemon=True),
        ]
        for t in self._threads:
            t.start()

    @staticmethod
    def _pump(stream: Any, q: "queue.Queue[Optional[str]]") -> None:
        for line in stream:
            q.put(line.rstrip("\n"))
        q.put(None)

    def _drain_err(self) -> None:
        assert self.popen.stderr is not None
        for line in self.popen.stderr:
            self.stderr.append(line)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def expect(self, prefix: str, timeout: float = 60) -> str:
        """Waits for a line starting with `prefix`; returns the rest."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                line = self.lines.get(timeout=max(left, 0.01))
            except queue.Empty:
                raise AssertionError(f"{self.args[2:4]}: no {prefix!r} within {timeout} s; "
                                     f"saw {self.seen[-5:]}; stderr:\n{''.join(self.stderr[-30:])}")
            if line is None:
                self.popen.wait()
                raise AssertionError(
                    f"{self.args[2:4]} exited ({self.popen.returncode}) before {prefix!r}; saw "
                    f"{self.seen[-5:]}; stderr:\n{''.join(self.stderr[-30:])}"
                )
            self.seen.append(line)
            if line.startswith(prefix):
                return line[len(prefix):].strip()

    def epochs(self, count: int, timeout: float = 60) -> List[Dict[str, Any]]:
        return [json.loads(self.expect("epoch ", timeout)) for _ in range(count)]

    def wait(self, timeout: float = 60) -> int:
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.args[2:4]} did not exit within {timeout} s; stderr:\n"
                                 f"{''.join(self.stderr[-30:])}")

    def reap(self) -> None:
        """Kills the process if still running and closes its pipes."""
        self.kill()
        self.popen.wait(10)
        for t in self._threads:
            t.join(5)
        if self.popen.stdin is not None:
            self.popen.stdin.close()
        if not any(t.is_alive() for t in self._threads):
            # (A pipe still open in an orphaned grandchild keeps its reader
            # thread busy; closing under it would block.)
            for stream in (self.popen.stdout, self.popen.stderr):
                if stream is not None:
                    stream.close()

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.popen.poll() is None:
            os.kill(self.popen.pid, sig)

    def children(self) -> List[int]:
        """Pids of this process's children (e.g. DataLoader workers)."""
        kids: List[int] = []
        try:
            for task in os.listdir(f"/proc/{self.pid}/task"):
                with open(f"/proc/{self.pid}/task/{task}/children") as f:
                    kids.extend(int(p) for p in f.read().split())
        except OSError:
            pass
        return kids


@pytest.fixture
def bc_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private socket directory, short enough for a Unix socket path."""
    d = Path(tempfile.mkdtemp(prefix="bct-", dir="/tmp"))
    monkeypatch.setenv("BATCHCAST_DIR", str(d))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def spawn(bc_dir: Path) -> Iterator[Any]:
    """spawn(role, **options) runs `python helpers.py role json(options)`;
    spawn.adopt(pids) has the test's teardown kill those processes too (the
    children of a process the test killed)."""
    procs: List[Proc] = []
    adopted: List[int] = []
    env = dict(os.environ, BATCHCAST_DIR=str(bc_dir), PYTHONUNBUFFERED="1")

    def start(role: str, stdin: bool = False, **options: Any) -> Proc:
        p = Proc([sys.executable, str(HERE / "helpers.py"), role, json.dumps(options)], env, stdin)
        procs.append(p)
        return p

    start.adopt = adopted.extend  # type: ignore[attr-defined]
    yield start
    for pid in adopted:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    for p in procs:
        for kid in p.children():
            try:
                os.kill(kid, signal.SIGKILL)
            except OSError:
                pass
        p.reap()


@pytest.fixture
def plane(bc_dir: Path) -> Iterator[Any]:
    """plane(role, **options) runs ``plane_roles.py role json(options)``
    (the device plane's roles) in this process's environment as it is at
    the call (``BATCHCAST_DEVICE_STAND_IN`` included)."""
    procs: List[Proc] = []

    def start(role: str, stdin: bool = False, **options: Any) -> Proc:
        env = dict(os.environ, BATCHCAST_DIR=str(bc_dir), PYTHONUNBUFFERED="1")
        p = Proc([sys.executable, str(HERE / "plane_roles.py"), role, json.dumps(options)], env, stdin)
        procs.append(p)
        return p

    yield start
    for p in procs:
        p.reap()


def kill_all(procs: Iterable[subprocess.Popen]) -> None:
    """SIGKILLs each process still running and waits for it (its pipes
    drained and closed)."""
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.communicate()


def shm_entries() -> set:
    try:
        return set(os.listdir("/dev/shm"))
    except OSError:
        return set()


@pytest.fixture(scope="session")
def batchcast_bin() -> str:
    """The `batchcast` command: $BATCHCAST_BIN, else the workspace's debug
    build (which `cargo test` made before pytest runs), built when absent."""
    given = os.environ.get("BATCHCAST_BIN")
    if given:
        return given
    root = HERE.parent.parent
    exe = root / "target" / "debug" / "batchcast"
    subprocess.run(["cargo", "build", "--quiet", "-p", "batchcast-cli"], cwd=root, check=True)
    return str(exe)
