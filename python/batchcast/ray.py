"""Sweeps on a Ray cluster: every trial on a node reads one shared producer
on that node.

The trainable changes in two lines::

    import batchcast.ray

    def trainable(config):
        loader = batchcast.ray.consumer(make_loader, batch_size=config["bs"])  # instead of make_loader()
        for epoch in range(config["epochs"]):
            for images, labels in loader:
                ...
            tune.report(batchcast.ray.data_metrics(loader) | {"loss": loss})

``make_loader`` is any function (picklable by Ray, taking no arguments)
that returns the re-iterable loader a :class:`batchcast.Producer` serves,
usually a ``torch.utils.data.DataLoader``; or pass ``serve=[...]``, the
arguments of a ``batchcast serve`` command (its native image pipeline),
which the producer's actor runs in process (``batchcast.serve``): no
``batchcast`` binary is needed.

How it works, with Ray doing placement and lifecycle:

- The first trial on a node creates the node's producer: a detached Ray
  actor named after the sweep and the node, pinned to that node
  (``NodeAffinitySchedulingStrategy(soft=False)``), holding ``num_cpus``
  CPUs in Ray's accounting so Tune does not give them to trials. Later
  trials on the node find it by name (``get_if_exists``): one producer per
  node, whoever comes first. Two Ray nodes on one host (Ray's test
  clusters) get one producer each, with different names.
- A trial's consumer reads whole epochs (``join="catch-up"``); a trial that
  fails, is stopped by a scheduler (ASHA, PBT) or is killed only detaches
  its consumer; the others go on.
- The producer ends by the core's idle rule: when no trial has read for
  ``idle_timeout`` seconds it finishes and its actor exits. A node that dies
  takes its producer with it; a trial restarted elsewhere gets the producer
  of the node it lands on.
- Different pipelines under one sweep name are refused: the producer
  records what made it (the factory's qualified name, or the serve
  arguments, and the producer options) and a trial asking for something
  else gets :class:`batchcast.UsageError`.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
import warnings
import weakref
from collections.abc import Sequence
from typing import Any, Callable

from . import _native
from ._consumer import Consumer
from ._producer import Producer
from .serve import serve as serve_command

__all__ = ["consumer", "data_metrics", "producer_name", "RunStoreCallback"]

#: The Ray namespace of the producers' actors.
NAMESPACE = "batchcast"
_ACTOR_PREFIX = "batchcast-producer:"
_NAME_OK = re.compile(r"[^A-Za-z0-9._-]")


def _ray():
    try:
        import ray
    except ImportError:
        raise _native.UsageError("batchcast.ray needs Ray: pip install 'ray[tune]'") from None
    if not ray.is_initialized():
        raise _native.UsageError(
            "batchcast.ray.consumer() runs inside a Ray task, actor or Tune trial "
            "(ray.init() has not been called in this process)"
        )
    return ray


def producer_name(sweep: str, node_id: str) -> str:
    """The producer name of ``sweep`` on the Ray node ``node_id`` (at most
    64 characters of ``A-Z a-z 0-9 . _ -``)."""
    clean = _NAME_OK.sub("_", sweep).strip("._-") or "sweep"
    return f"{clean[:40]}.{node_id[:16]}"


def _default_sweep() -> str:
    try:
        from ray import tune

        name = tune.get_context().get_experiment_name()
        if name:
            return name
    except Exception:  # not in a Tune trial, or an older Tune
        pass
    return "batchcast"


def _identity(factory: Callable[[], Any] | None, serve: Sequence[str] | None, options: dict) -> str:
    if factory is not None:
        what = f"{getattr(factory, '__module__', '?')}.{getattr(factory, '__qualname__', repr(factory))}"
    else:
        what = "batchcast serve " + " ".join(serve or ())
    return json.dumps({"source": what, "options": options}, sort_keys=True, default=repr)


class _ProducerHost:
    """The body of a node's producer actor (made a Ray actor class lazily,
    so that importing batchcast never needs Ray)."""

    def __init__(
        self, name: str, identity: str, factory, serve, idle_timeout: float, options: dict
    ):
        self._name = name
        self._identity = identity
        self._ready = threading.Event()
        self._socket: str | None = None
        self._error: str | None = None
        target = self._serve_command if serve is not None else self._serve_loader
        args = (serve,) if serve is not None else (factory,)
        self._thread = threading.Thread(
            target=self._run, args=(target, args, idle_timeout, options), daemon=True
        )
        self._thread.start()

    def _run(self, target, args, idle_timeout, options) -> None:
        try:
            target(*args, idle_timeout, options)
        except _native.NoConsumers:
            pass  # no trial came: end, and let the next one make a fresh producer
        except BaseException as e:  # reported to every trial that asks
            self._error = f"{type(e).__name__}: {e}"
            self._ready.set()
            # Stay a while, so that the node's trials get the reason rather
            # than a dead actor, then make way for a fresh attempt.
            time.sleep(idle_timeout)
        self._exit()

    def _serve_loader(self, factory, idle_timeout, options) -> None:
        loader = factory()
        producer = Producer(loader, name=self._name, idle_timeout=idle_timeout, **options)
        self._socket = producer.socket_path
        self._ready.set()
        with producer:
            producer.run()

    def _serve_command(self, serve, idle_timeout, options) -> None:
        # `batchcast serve` in this actor, through the binding: no binary needed.
        if os.environ.get("BATCHCAST_BIN"):
            warnings.warn(
                "batchcast.ray: BATCHCAST_BIN is ignored: serve=[...] runs the serve loop "
                "of the Python package in the producer's actor; unset it",
                DeprecationWarning,
                stacklevel=2,
            )
        args = ["--name", self._name, "--json", "--idle-timeout", str(idle_timeout), *serve]

        def on_event(line: str) -> None:
            event = json.loads(line)
            if event.get("event") == "listening":
                self._socket = event.get("socket")
                self._ready.set()

        try:
            serve_command(args, events=on_event)
        except _native.InvalidArgument as e:
            raise _native.UsageError(
                f"`batchcast serve {' '.join(args)}` did not start: {e}"
            ) from None

    def _exit(self) -> None:
        # The producer has finished (idle) or failed: end this actor, so the
        # next trial on the node makes a fresh one.
        try:
            import ray

            ray.kill(ray.get_runtime_context().current_actor, no_restart=True)
        except Exception:
            os._exit(0)

    def ready(self, identity: str, timeout: float) -> str:
        """The producer's socket directory, once it listens."""
        if not self._ready.wait(timeout):
            raise _native.UsageError(
                f"the producer {self._name} did not start within {timeout:.0f} s (is its loader slow to build?)"
            )
        if self._error is not None:
            raise _native.UsageError(f"the producer {self._name} failed: {self._error}")
        if identity != self._identity:
            raise _native.UsageError(
                f"sweep name clash: the producer {self._name} on this node serves {self._identity}, "
                f"but this trial asks for {identity}; give each sweep its own sweep= name"
            )
        return os.path.dirname(self._socket or "")


_actor_class = None
_actor_lock = threading.Lock()


def _host_class(ray):
    global _actor_class
    with _actor_lock:
        if _actor_class is None:
            _actor_class = ray.remote(max_concurrency=16, max_restarts=0)(_ProducerHost)
        return _actor_class


def consumer(
    loader_factory: Callable[[], Any] | None = None,
    *,
    serve: Sequence[str] | None = None,
    sweep: str | None = None,
    num_cpus: float = 1,
    idle_timeout: float = 30.0,
    producer_options: dict[str, Any] | None = None,
    start_timeout: float = 300.0,
    **consumer_options: Any,
) -> Consumer:
    """A :class:`batchcast.Consumer` of this node's producer for ``sweep``,
    starting the producer if this is the node's first trial.

    Args:
        loader_factory: makes the loader the producer serves (called once
            per node, in the producer's actor).
        serve: instead, the arguments of ``batchcast serve`` (without
            ``--name``), e.g. ``["--data", "/data/imagenet", "--epochs", "90"]``.
        sweep: names the sweep's producers (default: the Tune experiment's
            name); sweeps with different pipelines need different names.
        num_cpus: CPUs the producer holds in Ray's accounting (size trials
            so that a node keeps this many free for it).
        idle_timeout: seconds without any trial reading before the producer
            finishes and its actor exits.
        producer_options: more keyword arguments of :class:`batchcast.Producer`
            (window, max_lag, ...).
        start_timeout: seconds to wait for the producer to be placed and
            listen.
        consumer_options: keyword arguments of :class:`batchcast.Consumer`
            (batch_size, drop_last, ...).
    """
    if (loader_factory is None) == (serve is None):
        raise _native.UsageError(
            "give batchcast.ray.consumer() either a loader_factory or serve=[...]"
        )
    if loader_factory is not None and not callable(loader_factory):
        raise TypeError(f"loader_factory must be callable, not {type(loader_factory).__name__}")
    ray = _ray()
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    node = ray.get_runtime_context().get_node_id()
    name = producer_name(sweep or _default_sweep(), node)
    options = dict(producer_options or {})
    identity = _identity(loader_factory, serve, options)
    host = _host_class(ray)
    last_error: BaseException | None = None
    for _ in range(5):
        actor = host.options(
            name=_ACTOR_PREFIX + name,
            namespace=NAMESPACE,
            get_if_exists=True,
            lifetime="detached",
            num_cpus=num_cpus,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node, soft=False),
        ).remote(name, identity, loader_factory, serve, idle_timeout, options)
        try:
            directory = ray.get(
                actor.ready.remote(identity, start_timeout), timeout=start_timeout + 30
            )
        except ray.exceptions.GetTimeoutError:
            raise _native.UsageError(
                f"the producer {name} was not placed on node {node} within {start_timeout:.0f} s: "
                f"it needs {num_cpus} free CPU(s) there; give trials fewer CPUs, or pass num_cpus=0"
            ) from None
        except ray.exceptions.RayActorError as e:
            last_error = e  # a producer that just finished: make a fresh one
            continue
        except ray.exceptions.RayTaskError as e:
            cause = e.as_instanceof_cause()
            raise _native.UsageError(str(getattr(cause, "args", [cause])[0]).strip()) from None
        try:
            made = Consumer(
                name, dir=directory, **dict({"connect_timeout": 30.0}, **consumer_options)
            )
            _last[made] = (time.monotonic(), 0, 0.0)
            return made
        except (_native.ProducerFinished, _native.ProducerNotFound, _native.ProducerGone) as e:
            last_error = e  # it finished between ready() and connecting
            time.sleep(0.1)  # the finishing actor is being killed; let Ray see it
    raise _native.UsageError(f"cannot reach a producer for {name} on this node: {last_error}")


_last: weakref.WeakKeyDictionary[Consumer, tuple] = weakref.WeakKeyDictionary()


def data_metrics(loader: Consumer) -> dict[str, float]:
    """``{"batchcast/samples_per_s", "batchcast/data_wait_share"}`` of
    ``loader`` since the previous call (since it was made, the first
    time), for ``tune.report``."""
    now = time.monotonic()
    stats = loader.stats()
    batches, wait = stats["batches"], stats["wait_seconds"]
    then, b0, w0 = _last.get(loader, (now, batches, wait))
    _last[loader] = (now, batches, wait)
    span = max(now - then, 1e-9)
    rows = (batches - b0) * (loader.batch_size or 0)
    return {
        "batchcast/samples_per_s": rows / span,
        "batchcast/data_wait_share": min(1.0, max(0.0, (wait - w0) / span)),
    }


def _tune_callback_base():
    try:
        from ray.tune import Callback
    except ImportError:
        return object
    return Callback


class RunStoreCallback(_tune_callback_base()):  # type: ignore[misc]
    """A Tune callback that records every trial's numeric results in the
    run of ``batchcast run`` that runs the sweep's driver, as
    ``trial/<trial_id>/<key>`` at each ``training_iteration``::

        tune.Tuner(trainable, run_config=tune.RunConfig(callbacks=[batchcast.ray.RunStoreCallback()]))

    Outside ``batchcast run`` it records nothing (see :func:`batchcast.log_metrics`).
    """

    def __init__(self, keys: Sequence[str] | None = None) -> None:
        self._keys = None if keys is None else set(keys)

    def on_trial_result(self, iteration, trials, trial, result, **info) -> None:
        from ._metrics import log_metrics

        step = int(result.get("training_iteration", iteration) or 0)
        values = {
            f"trial/{trial.trial_id}/{k}": float(v)
            for k, v in result.items()
            if isinstance(v, (int, float))
            and not isinstance(v, bool)
            and (self._keys is None or k in self._keys)
        }
        if values:
            log_metrics(values, step=step)
