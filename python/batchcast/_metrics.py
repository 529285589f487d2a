"""Metrics and parameters of a training script, recorded in its run.

For scripts that log with nothing else (no MLflow)::

    import batchcast
    batchcast.log_metrics({"loss": loss, "samples": seen}, step=step)

Under ``batchcast run`` the values land in the job's run in the run store
(``batchcast runs show``, ``runs compare``, the dashboard), through the
MLflow-compatible endpoint that the runner serves on 127.0.0.1 for the
job's lifetime (``MLFLOW_TRACKING_URI``, ``MLFLOW_RUN_ID`` and the job's
secret ``MLFLOW_TRACKING_TOKEN`` in the job's environment). Outside ``batchcast run`` the calls record nothing and warn
once, so the same script runs anywhere. Safe to call from several threads.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import warnings
from typing import Any, Mapping

from ._native import IoError

__all__ = ["log_metric", "log_metrics", "log_param", "log_params"]

# MLflow's limits for one log-batch request, which the endpoint enforces.
_MAX_METRICS = 1000
_MAX_PARAMS = 100
_MAX_KEY = 250
_MAX_PARAM_VALUE = 6000
_TIMEOUT_S = 30.0

_warned = threading.Event()


def log_metric(key: str, value: Any, step: int | None = None) -> None:
    """Records one value of metric ``key`` (at ``step``, else step 0)."""
    log_metrics({key: value}, step=step)


def log_metrics(metrics: Mapping[str, Any], step: int | None = None) -> None:
    """Records one value of each metric in ``metrics`` at ``step``.

    Values are anything ``float()`` takes: Python numbers, NumPy scalars,
    one-element tensors. A value that is not a number raises ``TypeError``
    before anything is sent.
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
        rows.append({"key": key, "value": _json_double(number), "timestamp": now, "step": step or 0})
    for i in range(0, len(rows), _MAX_METRICS):
        _send({"metrics": rows[i : i + _MAX_METRICS]})


def log_param(key: str, value: Any) -> None:
    """Records parameter ``key`` of the run (its value as text)."""
    log_params({key: value})


def log_params(params: Mapping[str, Any]) -> None:
    """Records each parameter in ``params`` (values as text)."""
    rows = []
    for key, value in _items(params, "params"):
        text = str(value)
        if len(text) > _MAX_PARAM_VALUE:
            raise ValueError(f"param {key!r}: its value is {len(text)} characters; the limit is {_MAX_PARAM_VALUE}")
        rows.append({"key": key, "value": text})
    for i in range(0, len(rows), _MAX_PARAMS):
        _send({"params": rows[i : i + _MAX_PARAMS]})


def _items(mapping: Mapping[str, Any], what: str):
    if not isinstance(mapping, Mapping):
        raise TypeError(f"{what} must be a dict of name to value, not {type(mapping).__name__}")
    for key, value in mapping.items():
        if not isinstance(key, str) or not key or len(key) > _MAX_KEY:
            raise ValueError(f"{what}: {key!r} is not a name; use a non-empty str of at most {_MAX_KEY} characters")
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


def _send(body: dict) -> None:
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
    uri, run_id, token = target
    data = json.dumps(dict(body, run_id=run_id), allow_nan=False).encode()
    request = urllib.request.Request(
        uri + "/api/2.0/mlflow/runs/log-batch",
        data=data,
        method="POST",
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=_TIMEOUT_S) as answer:
            answer.read()
    except urllib.error.HTTPError as e:
        try:
            message = json.loads(e.read()).get("message", "")
        except ValueError:
            message = ""
        raise IoError(f"the run store refused the values ({e.code}): {message}") from None
    except (urllib.error.URLError, OSError) as e:
        raise IoError(
            f"cannot reach the batchcast runner's endpoint at {uri} ({e}); "
            "did the runner stop? Metrics are recorded only while `batchcast run` runs the job"
        ) from None
