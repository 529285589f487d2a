"""Sweeps on a real Ray cluster (Ray's own local multi-node test cluster):
one producer per node, exact epochs for every trial, trials that die or
are stopped early leave the others exact, producers end with their trials.

Marked `ray` (slow to start): `scripts/test-python.sh -m ray` runs these
alone, `-m "not ray"` everything else.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

ray = pytest.importorskip("ray")
tune = pytest.importorskip("ray.tune")

import batchcast
import batchcast.ray
from ray.cluster_utils import Cluster

pytestmark = pytest.mark.ray

SAMPLES = 240
KILLED = 3  # the trial that kills itself
BATCH = 12


def make_loader():
    """240 samples, each its own id, in batches of 12."""
    import numpy as np

    return [np.arange(i, i + BATCH, dtype=np.int64) for i in range(0, SAMPLES, BATCH)]


def other_loader():
    import numpy as np

    return [np.zeros(4, dtype=np.int64)]


def broken_loader():
    raise OSError("dataset directory /data/missing does not exist")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    socket_dir = tmp_path_factory.mktemp("sockets")
    os.environ["BATCHCAST_DIR"] = str(socket_dir)  # inherited by the cluster's workers
    c = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 3, "include_dashboard": False},
    )
    c.add_node(num_cpus=3)
    ray.init(address=c.address, log_to_driver=False)
    # The trainables and loaders of this file travel by value (the cluster's
    # workers cannot import the test module).
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    c.wait_for_nodes()
    yield c, socket_dir
    ray.shutdown()
    c.shutdown()


def producer_gone(name: str) -> bool:
    try:
        ray.get_actor("batchcast-producer:" + name, namespace=batchcast.ray.NAMESPACE)
    except ValueError:
        return True
    return False


def wait_until(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"not within {seconds} s: {what}"
        time.sleep(0.2)


def trainable(config):
    loader = batchcast.ray.consumer(make_loader, sweep=config["sweep"], idle_timeout=3, num_cpus=0)
    node = ray.get_runtime_context().get_node_id()
    for epoch in range(config["epochs"]):
        seen = []
        for step, batch in enumerate(loader):
            seen.extend(batch.tolist())
            if config["i"] == KILLED and epoch == 0 and step == 5:
                os._exit(1)  # a trial killed mid-epoch (before ASHA could stop it)
            time.sleep(0.002)
        tune.report(
            dict(
                batchcast.ray.data_metrics(loader),
                exact=sorted(seen) == list(range(SAMPLES)),
                node=node,
                producer_pid=loader.welcome()["producer_pid"],
                # Falling with i, the order trials start in: ASHA stops a
                # trial whose score is below those reported before it at a
                # rung, so later starters are the ones stopped early, however
                # slow the machine (rising scores reported in launch order
                # would each be the best so far, and none would stop).
                score=-config["i"],
                epoch=epoch,
            )
        )


def test_a_tune_sweep_shares_one_producer_per_node_and_every_epoch_is_exact(cluster, tmp_path):
    _, socket_dir = cluster
    from ray.tune.schedulers import ASHAScheduler

    tuner = tune.Tuner(
        tune.with_resources(trainable, {"cpu": 1}),
        param_space={"sweep": "exact", "epochs": 4, "i": tune.grid_search(list(range(6)))},
        tune_config=tune.TuneConfig(
            # ASHA stops the low scorers early, at a rung boundary.
            scheduler=ASHAScheduler(metric="score", mode="max", max_t=4, grace_period=1, reduction_factor=2),
        ),
        run_config=tune.RunConfig(storage_path=str(tmp_path / "tune"), verbose=0),
    )
    results = tuner.fit()

    frames = {r.config["i"]: r.metrics_dataframe for r in results}
    errors = {r.config["i"]: r.error for r in results}
    assert errors.pop(KILLED) is not None, "the trial killed itself"
    assert all(e is None for e in errors.values()), errors
    reported = [f for i, f in frames.items() if i != KILLED and f is not None]
    assert len(reported) == 5
    for f in reported:
        assert f["exact"].all(), "every epoch a trial read held every sample once"
    epochs = sorted(len(f) for f in reported)
    # Whether ASHA stops a trial early depends on the order in which the
    # concurrent trials reach a rung (a trial is stopped only below those
    # that reported there before it), which this machine's timing decides:
    # CI once saw all five run to the end. The trial killed mid-epoch is the
    # departure this test relies on; an early stop, when ASHA makes one,
    # must leave the others' epochs exact as well (checked above).
    assert epochs[-1] == 4 and all(1 <= n <= 4 for n in epochs), epochs

    # One producer per node that had trials, and trials on a node share it.
    pids_by_node = {}
    for f in reported:
        for node, pid in zip(f["node"], f["producer_pid"]):
            pids_by_node.setdefault(node, set()).add(pid)
    assert len(pids_by_node) == 2, "the sweep ran on both nodes"
    assert all(len(p) == 1 for p in pids_by_node.values()), pids_by_node

    # The producers end with their trials, and leave nothing behind.
    for node in pids_by_node:
        name = batchcast.ray.producer_name("exact", node)
        wait_until(lambda: producer_gone(name), 60, f"producer {name} ends after its trials")
    wait_until(lambda: not list(socket_dir.glob("exact.*")), 30, "the producers' sockets are removed")


@ray.remote(num_cpus=0)
def read_one_epoch(factory_name: str, sweep: str):
    factory = {"make": make_loader, "other": other_loader, "broken": broken_loader}[factory_name]
    try:
        loader = batchcast.ray.consumer(factory, sweep=sweep, idle_timeout=2, num_cpus=0)
    except batchcast.BatchcastError as e:
        return "error: " + str(e)
    return sorted(x for b in loader for x in b.tolist())


def test_a_sweep_name_used_by_another_pipeline_is_refused(cluster):
    head = ray.get_runtime_context().get_node_id()
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    on_head = NodeAffinitySchedulingStrategy(node_id=head, soft=False)
    first = read_one_epoch.options(scheduling_strategy=on_head).remote("make", "clash")
    time.sleep(0)  # both are submitted; whichever makes the producer, the other is refused or reads
    second = read_one_epoch.options(scheduling_strategy=on_head).remote("other", "clash")
    a, b = ray.get([first, second], timeout=120)
    outcomes = [a, b]
    assert list(range(SAMPLES)) in outcomes or [0, 0, 0, 0] in outcomes
    refused = [o for o in outcomes if isinstance(o, str)]
    assert len(refused) == 1, outcomes
    assert "sweep name clash" in refused[0] and "give each sweep its own sweep= name" in refused[0]


def test_a_loader_that_cannot_be_built_is_reported_to_the_trial(cluster):
    out = ray.get(read_one_epoch.remote("broken", "broken"), timeout=120)
    assert isinstance(out, str)
    assert "failed" in out and "/data/missing does not exist" in out


def test_outside_ray_the_error_says_what_is_needed():
    out = subprocess.run(
        [sys.executable, "-c", "import batchcast.ray; batchcast.ray.consumer(lambda: [])"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode != 0
    assert "inside a Ray task, actor or Tune trial" in out.stderr


@ray.remote(num_cpus=0)
def read_served(sweep: str):
    loader = batchcast.ray.consumer(
        serve=["--synthetic", "--samples", "96", "--batch-size", "16", "--epochs", "1"],
        sweep=sweep,
        idle_timeout=2,
        num_cpus=0,
    )
    return sum(len(b[0]) if isinstance(b, (list, tuple)) else len(b) for b in loader)


def test_a_batchcast_serve_command_can_be_the_nodes_producer_without_the_binary(cluster):
    """serve=[...] runs the serve loop of the Python package in the actor:
    it needs no `batchcast` binary (none is on PATH here) and no BATCHCAST_BIN."""
    env = {"BATCHCAST_BIN": ""}
    n = ray.get(read_served.options(runtime_env={"env_vars": env}).remote("served"), timeout=120)
    assert n == 96


SWEEP_UNDER_RUN = """
import sys
import ray
from ray import tune
import batchcast.ray

ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)

def trainable(config):
    for step in range(3):
        tune.report({"loss": config["lr"] * (3 - step), "note": "text is left out"})

tune.Tuner(
    trainable,
    param_space={"lr": tune.grid_search([0.1, 0.2])},
    run_config=tune.RunConfig(storage_path=sys.argv[1], verbose=0, callbacks=[batchcast.ray.RunStoreCallback(keys=["loss"])]),
).fit()
print("sweep done")
"""


def test_a_sweep_run_by_batchcast_run_records_every_trials_results(tmp_path, batchcast_bin):
    import sqlite3

    script = tmp_path / "sweep.py"
    script.write_text(SWEEP_UNDER_RUN)
    store = tmp_path / "runs.sqlite"
    out = subprocess.run(
        [batchcast_bin, "run", "--store", str(store), "--", sys.executable, str(script), str(tmp_path / "tune")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    db = sqlite3.connect(store)
    rows = db.execute("SELECT key, step, value FROM metrics WHERE key LIKE 'trial/%' ORDER BY key, step").fetchall()
    by_trial = {}
    for key, step, value in rows:
        assert key.endswith("/loss"), key
        by_trial.setdefault(key, []).append((step, value))
    assert len(by_trial) == 2, by_trial
    losses = sorted(tuple(v for _, v in points) for points in by_trial.values())
    assert losses == [pytest.approx((0.3, 0.2, 0.1)), pytest.approx((0.6, 0.4, 0.2))]
    assert all([s for s, _ in points] == [1, 2, 3] for points in by_trial.values())
