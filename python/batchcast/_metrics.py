"""Metrics and parameters of a training script, recorded in its run.

For scripts that log with nothing else (no MLflow)::

    import batchcast
    batchcast.log_metrics({"loss": loss, "samples": seen}, step=step)

Under ``batchcast run`` the values land in the job's run in the run store
(``batchcast runs show``, ``runs compare``, the dashboard), through the
MLflow-compatible endpoint that the runner serves on 127.0.0.1 for the
job's lifetime (``MLFLOW_TRACKING_URI``, ``MLFLOW_RUN_ID`` and the job's
secret ``MLFLOW_TRACKING_TOKEN`` in the job's environment). Outside
``batchcast run`` the calls record nothing and warn once, so the same
script runs anywhere. Safe to call from several threads.

The calls never wait for the network and never raise into the training
loop for it: values are buffered and sent from a background thread every
half second (or every 1000 values), and what is still buffered is sent when
the script exits (for at most 10 s). Values that could not be recorded (the
runner gone or stalled, more than 100,000 waiting) are counted, and
reported once, on stderr, at exit. Only a value that is not a number or a
name that is not a name raises, at the call, before anything is buffered.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

__all__ = ["log_metric", "log_metrics", "log_param", "log_params"]

# MLflow's limits for one log-batch request, which the endpoint enforces.
_MAX_METRICS = 1000
_MAX_PARAMS = 100
_MAX_KEY = 250
_MAX_PARAM_VALUE = 6000
_TIMEOUT_S = 10.0  # one request
_FLUSH_EVERY_S = 0.5
_MAX_BUFFERED = 100_000  # values waiting while the runner is slow; more are dropped
_EXIT_WAIT_S = 10.0  # at exit, for what is still buffered

_warned = threading.Event()


def log_metric(key: str, value: Any, step: int | None = None) -> None:
    """Records one value of metric ``key`` (at ``step``, else step 0)."""
    log_metrics({key: value}, step=step)


def log_metrics(metrics: Mapping[str, Any], step: int | None = None) -> None:
    """Records one value of each metric in ``metrics`` at ``step``.

    Values are anything ``float()`` takes: Python numbers, NumPy scalars,
    one-element tensors. A value that is not a number raises ``TypeError``
    before anything is buffered. Returns at once: the values are sent from
    a background thread (see the module's notes).
    """
    if step is not None and (isinstance(step, bool) or not isinstance(step, int)):
        raise TypeError(f"step must be an int, not {type(step).__name__}")
    now = int(time.time() * 1000)
    rows = []
    for key, value in _items(metrics, "metrics"):
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise TypeError(
                f"metric {key!r}: {value!r} is not a number; pass a float, an int or a one-element tensor"
            ) from None
        rows.append(
            {"key": key, "value": _json_double(number), "timestamp": now, "step": step or 0}
        )
    _send({"metrics": rows})


def log_param(key: str, value: Any) -> None:
    """Records parameter ``key`` of the run (its value as text)."""
    log_params({key: value})


def log_params(params: Mapping[str, Any]) -> None:
    """Records each parameter in ``params`` (values as text)."""
    rows = []
    for key, value in _items(params, "params"):
        text = str(value)
        if len(text) > _MAX_PARAM_VALUE:
            raise ValueError(
                f"param {key!r}: its value is {len(text)} characters; the limit is {_MAX_PARAM_VALUE}"
            )
        rows.append({"key": key, "value": text})
    _send({"params": rows})


def _items(mapping: Mapping[str, Any], what: str) -> Iterator[tuple[str, Any]]:
    if not isinstance(mapping, Mapping):
        raise TypeError(f"{what} must be a dict of name to value, not {type(mapping).__name__}")
    for key, value in mapping.items():
        if not isinstance(key, str) or not key or len(key) > _MAX_KEY:
            raise ValueError(
                f"{what}: {key!r} is not a name; use a non-empty str of at most {_MAX_KEY} characters"
            )
        yield key, value


def _json_double(x: float) -> Any:
    # JSON has no NaN or infinity; MLflow's protocol spells them as strings.
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return x


def _endpoint() -> tuple[str, str, str] | None:
    uri = os.environ.get("MLFLOW_TRACKING_URI", "")
    run_id = os.environ.get("MLFLOW_RUN_ID", "")
    if not os.environ.get("BATCHCAST_RUN_ID") or not uri or not run_id:
        return None
    host = urllib.parse.urlsplit(uri).hostname
    if host not in ("127.0.0.1", "localhost"):
        return None
    return uri.rstrip("/"), run_id, os.environ.get("MLFLOW_TRACKING_TOKEN", "")


_sender: _Sender | None = None
_sender_lock = threading.Lock()


def _send(body: dict) -> None:
    global _sender
    sender = _sender
    if sender is None:
        with _sender_lock:
            if _sender is None:
                target = _endpoint()
                if target is None:
                    if not _warned.is_set():
                        _warned.set()
                        warnings.warn(
                            "batchcast.log_*: not running under `batchcast run`, so nothing is recorded; "
                            "run the script with `batchcast run -- python SCRIPT` to keep its metrics",
                            stacklevel=3,
                        )
                    return
                _sender = _Sender(*target)
            sender = _sender
    sender.add(body.get("metrics", ()), body.get("params", ()))


def _forget_in_child() -> None:
    # A forked child (a DataLoader worker) has no copy of the thread: it
    # starts its own sender if it logs.
    global _sender, _sender_lock
    _sender = None
    _sender_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_in_child)


class _Sender:
    """The buffer and the background thread that empties it into the
    runner's endpoint."""

    def __init__(self, uri: str, run_id: str, token: str) -> None:
        self._uri, self._run_id, self._token = uri, run_id, token
        self._cond = threading.Condition()
        self._metrics: list = []
        self._params: list = []
        self._in_flight = 0
        self._closing = False
        self._dropped = 0
        self._why = ""
        self._thread = threading.Thread(target=self._loop, name="batchcast-metrics", daemon=True)
        self._thread.start()
        atexit.register(self.close)

    def add(self, metrics: Sequence[dict[str, Any]], params: Sequence[dict[str, Any]]) -> None:
        with self._cond:
            room = _MAX_BUFFERED - len(self._metrics) - len(self._params) - self._in_flight
            wanted = len(metrics) + len(params)
            if wanted > room:
                self._drop(
                    wanted - max(room, 0),
                    f"more than {_MAX_BUFFERED} values were waiting for the runner's endpoint at "
                    f"{self._uri}, which did not keep up",
                )
                params = list(params)[: max(room, 0)]
                metrics = list(metrics)[: max(room - len(params), 0)]
            self._metrics.extend(metrics)
            self._params.extend(params)
            if len(self._metrics) >= _MAX_METRICS or len(self._params) >= _MAX_PARAMS:
                self._cond.notify_all()

    def _drop(self, n: int, why: str) -> None:
        self._dropped += n
        if not self._why:
            self._why = why

    def _loop(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(
                    lambda: (
                        self._closing
                        or len(self._metrics) >= _MAX_METRICS
                        or len(self._params) >= _MAX_PARAMS
                    ),
                    timeout=_FLUSH_EVERY_S,
                )
                metrics, self._metrics = self._metrics[:_MAX_METRICS], self._metrics[_MAX_METRICS:]
                params, self._params = self._params[:_MAX_PARAMS], self._params[_MAX_PARAMS:]
                self._in_flight = len(metrics) + len(params)
                if not self._in_flight and self._closing:
                    return
            if self._in_flight:
                why = self._post({"metrics": metrics, "params": params})
                with self._cond:
                    if why:
                        self._drop(self._in_flight, why)
                    self._in_flight = 0

    def _post(self, body: dict) -> str:
        """Sends one log-batch; "" when recorded, else why not."""
        data = json.dumps(dict(body, run_id=self._run_id), allow_nan=False).encode()
        request = urllib.request.Request(
            self._uri + "/api/2.0/mlflow/runs/log-batch",
            data=data,
            method="POST",
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {self._token}"},
        )
        try:
            with urllib.request.urlopen(request, timeout=_TIMEOUT_S) as answer:
                answer.read()
            return ""
        except urllib.error.HTTPError as e:
            try:
                message = json.loads(e.read()).get("message", "")
            except ValueError:
                message = ""
            return f"the run store refused them ({e.code}: {message})"
        except (urllib.error.URLError, OSError) as e:
            return (
                f"cannot reach the batchcast runner's endpoint at {self._uri} ({e}); did the runner "
                "stop or stall? Metrics are recorded only while `batchcast run` runs the job"
            )

    def close(self) -> None:
        """At exit: sends what is buffered (for at most ``_EXIT_WAIT_S``),
        then reports, once, what could not be recorded."""
        with self._cond:
            if self._closing:
                return
            self._closing = True
            self._cond.notify_all()
        self._thread.join(_EXIT_WAIT_S)
        with self._cond:
            left = len(self._metrics) + len(self._params) + self._in_flight
            if left:
                self._drop(
                    left,
                    f"the runner's endpoint at {self._uri} did not take them within {_EXIT_WAIT_S:g} s of the end",
                )
            self._metrics, self._params = [], []
            dropped, why = self._dropped, self._why
        if dropped:
            try:
                sys.stderr.write(
                    f"batchcast.log_metrics: {dropped} value(s) were not recorded in the run: {why}\n"
                )
                sys.stderr.flush()
            except (OSError, ValueError):
                pass
