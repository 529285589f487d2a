"""Supervision of a cell's child processes: starting them in their own
process groups (batchcast's one supervisor, in Rust), reading their lines,
the time limits (the whole cell, start-up, and a stall: no trainer making
progress), and stopping and reaping every process, grandchildren included.
The runner never hangs on a child.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import threading
import time
from typing import Any, Callable, Dict, List, Optional

from batchcast import _native

from .protocol import GO, PROGRESS, READY, RESULT, payload


def set_subreaper() -> None:
    """Orphaned grandchildren (a killed trainer's DataLoader workers) are
    reparented to this process, so they are reaped here and their CPU time is
    counted, and nothing is left running."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except Exception:  # noqa: BLE001 - best effort (non-Linux)
        pass


class Child:
    """A child process in its own process group; stdout lines go to a shared
    queue, stderr is captured (its tail goes into error reports)."""

    def __init__(self, label: str, argv: List[str], events: "queue.Queue", env=None):
        self.label = label
        self.proc = _native.Process(argv, None if env is None else dict(env), stdin_pipe=True,
                                    stdout="pipe", stderr="capture")
        self.stdin = os.fdopen(self.proc.take_stdin(), "wb")
        self.stdout = os.fdopen(self.proc.take_stdout(), "rb")
        self.pid = self.proc.pid
        self.ready = False
        self.result: Optional[Dict[str, Any]] = None
        self.progress = 0  # samples trained, from PROGRESS lines
        self.last_progress: Optional[float] = None  # when the last one came
        self.events = events
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for raw in self.stdout:
            self.events.put((self, raw.decode("utf-8", "replace").rstrip("\n")))
        self.events.put((self, None))

    def go(self) -> None:
        try:
            self.stdin.write(GO.encode() + b"\n")
            self.stdin.flush()
        except (BrokenPipeError, OSError):
            pass

    def kill(self) -> None:
        """SIGKILL to its group (reaped by reap())."""
        if self.proc.poll() is None:
            self.proc.signal(signal.SIGKILL)

    def reap(self, timeout: Optional[float] = None) -> Optional[int]:
        return self.proc.wait(timeout)

    def stderr_tail(self, lines: int = 12) -> str:
        return self.proc.tail(lines)


def reap_orphans(wait_s: float = 3.0) -> None:
    """Reaps grandchildren reparented to this process (see set_subreaper);
    called only after every Popen child has been waited for."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            if time.monotonic() > deadline:
                for p in _native.descendants(os.getpid()):
                    try:
                        os.kill(p, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                deadline = time.monotonic() + wait_s
            time.sleep(0.05)


class Supervisor:
    """The child processes of one (mode, N) cell, and how the cell ends: "ok",
    or the first failure ("failed": a child died; "timeout": --timeout,
    start-up, or a stall of --stall-timeout after GO) with its message."""

    def __init__(self, timeout: float, stall_timeout: float):
        self.timeout, self.stall_timeout = timeout, stall_timeout
        self.events: "queue.Queue" = queue.Queue()
        self.children: List[Child] = []
        self.trainers: List[Child] = []
        self.producer: Optional[Child] = None
        self.started = time.monotonic()
        self.deadline = self.started + timeout
        self.startup_limit = max(120.0, 4 * stall_timeout)  # interpreters, imports, model building
        self.startup_deadline = self.started + self.startup_limit
        self.go_at: Optional[float] = None
        self.status = "ok"
        self.error: Optional[str] = None

    def fail(self, kind: str, message: str) -> None:
        """Records the cell's failure; the first one counts."""
        if self.error is None:
            self.status, self.error = kind, message

    def start_producer(self, label: str, argv: List[str], env) -> Child:
        self.producer = Child(label, argv, self.events, env)
        self.children.append(self.producer)
        return self.producer

    def start_trainer(self, label: str, argv: List[str], env) -> Child:
        child = Child(label, argv, self.events, env)
        self.trainers.append(child)
        self.children.append(child)
        return child

    def go(self, producer_too: bool = True) -> None:
        """GO to every child (but the producer if not `producer_too`): the
        measured part starts now."""
        self.go_at = time.monotonic()
        for c in self.children:
            if producer_too or c is not self.producer:
                c.go()

    def pump(self, until: Callable[[], bool]) -> None:
        """Handles the children's lines until until() is true, a child fails,
        or time is up."""
        while self.error is None and not until():
            now = time.monotonic()
            if now > self.deadline:
                self.fail("timeout", f"the cell took longer than --timeout {self.timeout:g} s")
                return
            if self.go_at is None and now > self.startup_deadline:
                late = [c.label for c in self.children if not c.ready]
                self.fail("timeout", f"start-up took over {self.startup_limit:g} s; "
                                     f"not ready: {', '.join(late)}")
                return
            try:
                child, line = self.events.get(timeout=0.2)
            except queue.Empty:
                child = line = None
            if child is not None:
                if line is None:
                    if not self._exited(child):
                        return
                else:
                    self._handle(child, line)
            if self.go_at is not None and self._stalled():
                return

    def _exited(self, child: Child) -> bool:
        """Whether `child`'s end (its stdout closed) is fine: a trainer must
        have reported, the producer must exit with status 0."""
        rc = child.reap(5)
        if child.result is None and not (child is self.producer and rc == 0):
            tail = child.stderr_tail()
            self.fail("failed", f"{child.label} exited with status {rc}"
                                + (f":\n{tail}" if tail else " (no output on stderr)"))
            return False
        if child is self.producer and rc not in (0, None):
            self.fail("failed", f"{child.label} exited with status {rc}:\n{child.stderr_tail()}")
            return False
        return True

    def _handle(self, child: Child, line: str) -> None:
        if line == READY:
            child.ready = True
        elif line.startswith(PROGRESS + " "):
            child.progress = int(line.split()[1])
            child.last_progress = time.monotonic()
        elif line.startswith(RESULT + " "):
            child.result = payload(line, RESULT)
        elif line.startswith("{"):  # batchcast serve --json events
            try:
                ev = json.loads(line)
            except ValueError:
                ev = {}
            if ev.get("event") == "listening":
                child.ready = True
            elif ev.get("event") == "finished":
                child.result = ev

    def _stalled(self) -> bool:
        """Fails the cell if no trainer has made progress for --stall-timeout s."""
        last = max([self.go_at] + [self.go_at if t.last_progress is None else t.last_progress
                                   for t in self.trainers])
        if time.monotonic() - last > self.stall_timeout:
            done = ", ".join(f"{t.label}: {t.progress} samples" for t in self.trainers)
            self.fail("timeout", f"hang: no trainer made progress for {self.stall_timeout:g} s "
                                 f"(--stall-timeout); so far {done}")
            return True
        return False

    def stop(self) -> None:
        """Kills what is still running (everything, if the cell failed),
        reaps every child and orphaned grandchild, and takes the RESULT lines
        still queued."""
        for c in self.children:
            if self.error is not None or c.proc.poll() is None:
                c.kill()
        for c in self.children:
            c.reap()
        reap_orphans()
        for c in self.children:
            c.reader.join(5)
            try:
                c.stdin.close()
            except OSError:
                pass
        while True:
            try:
                child, line = self.events.get_nowait()
            except queue.Empty:
                break
            if line and line.startswith(RESULT + " ") and child.result is None:
                child.result = payload(line, RESULT)
