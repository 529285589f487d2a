"""`batchcast stalls`: the stall arithmetic (unit) and the analysis of real
training processes (examples/stalls/train.py) in each regime.

The process tests carry the `stalls` marker (about three minutes on two
cores); deselect them with -m 'not stalls'.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from batchcast import stalls
from batchcast.stalls import _analysis, _cache, _runner

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "examples" / "stalls" / "train.py"


@pytest.fixture(autouse=True, scope="module")
def _own_run_store(tmp_path_factory):
    """The runs of --validate go to a store of the tests', not the user's."""
    mp = pytest.MonkeyPatch()
    mp.setenv("BATCHCAST_STORE", str(tmp_path_factory.mktemp("store") / "runs.sqlite"))
    yield
    mp.undo()


def _result(mode, steps, seconds, waits, cpu, samples=None, len_=10, workers=0):
    return {"mode": mode, "steps": steps, "samples": samples if samples is not None else steps * 10,
            "seconds": seconds, "waits": waits, "cpu_seconds": cpu, "len": len_, "num_workers": workers}


# ---- the arithmetic -------------------------------------------------------


def test_percentile_interpolates():
    assert _analysis.percentile([], 50) == 0.0
    assert _analysis.percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert _analysis.percentile([0.0, 10.0], 95) == pytest.approx(9.5)


def test_figures_of_one_mode():
    f = _analysis.figures(_result("warm", 10, 2.0, [0.1] * 5 + [0.3] * 5, cpu=1.0))
    assert f.steps_per_s == 5.0 and f.samples_per_s == 50.0 and f.step_s == 0.2
    assert f.wait_mean == pytest.approx(0.2) and f.wait_p50 == pytest.approx(0.2)
    assert f.cpu_per_1000 == pytest.approx(10.0)  # 1 CPU-s for 100 samples


def _modes(syn_s, warm_s, cold_s):
    return {m: _analysis.figures(_result(m, 10, 10 * s, [0.0], cpu=1.0))
            for m, s in (("synthetic", syn_s), ("warm", warm_s), ("cold", cold_s))}


def test_fetch_and_prep_stalls_are_differences_of_step_times():
    st = {s.name: s for s in _analysis.stalls(_modes(0.1, 0.3, 0.5))}
    assert st["fetch"].per_step_s == pytest.approx(0.2) and st["fetch"].share == pytest.approx(0.4)
    assert st["prep"].per_step_s == pytest.approx(0.2) and st["prep"].per_epoch_s == pytest.approx(2.0)
    # A mode measured faster than the one below it is noise, not a negative stall.
    assert {s.name: s.per_step_s for s in _analysis.stalls(_modes(0.1, 0.3, 0.29))}["fetch"] == 0.0


def test_communication_stall_against_the_single_process_step():
    st = {s.name: s for s in _analysis.stalls(_modes(0.1, 0.1, 0.1), comm_step_s=0.25)}
    assert st["communication"].per_step_s == pytest.approx(0.15)
    assert st["communication"].share == pytest.approx(0.6)


@pytest.mark.parametrize("times,kind", [((0.1, 0.11, 0.12), "compute-bound"),
                                        ((0.1, 0.5, 0.55), "prep-bound"),
                                        ((0.1, 0.12, 0.5), "fetch-bound")])
def test_classify(times, kind):
    assert _analysis.classify(_analysis.stalls(_modes(*times))) == kind


def test_prediction_of_a_prep_bound_job():
    # Alone: 100 samples/s using 1 CPU-s per 100 samples, 0.2 of it the model.
    syn = _analysis.figures(_result("synthetic", 100, 2.0, [0.0], cpu=2.0, samples=1000))
    warm = _analysis.figures(_result("warm", 100, 10.0, [0.0], cpu=10.0, samples=1000))
    p2 = _analysis.predict(syn, warm, cores=2, jobs=2)
    assert p2.independent == pytest.approx(200.0)  # two cores, one each
    # Shared: the one-worker producer needs 0.008 CPU-s a sample. The two
    # copies wake together for each batch: one finds the idle core, the
    # other's step (0.002 CPU-s a sample) lands on either core, a quarter of
    # the copies' step CPU on the producer's: 1 / (0.008 + 2 x 0.25 x 0.002)
    # = 111.1 samples/s each.
    assert p2.shared == pytest.approx(2 / 0.009)
    p4 = _analysis.predict(syn, warm, cores=2, jobs=4)
    assert p4.independent == pytest.approx(200.0)  # still two cores
    # Three of four copies beyond the idle core: 3/8 of their step CPU lands on the producer's.
    assert p4.shared == pytest.approx(4 / (0.008 + 4 * 0.375 * 0.002))
    # With cores to spare (8), every copy finds an idle core.
    p4_wide = _analysis.predict(syn, warm, cores=8, jobs=4)
    assert p4_wide.independent == pytest.approx(400.0)  # 4 copies at their own rate
    assert p4_wide.shared == pytest.approx(4 * 125.0)


def test_the_producer_is_predicted_from_the_loader_alone_where_it_was_measured():
    syn = _analysis.figures(_result("synthetic", 100, 2.0, [0.0], cpu=2.0, samples=1000))
    warm = _analysis.figures(_result("warm", 100, 10.0, [0.0], cpu=10.0, samples=1000))
    # The loader alone: 0.006 CPU-s a sample (not warm - synthetic = 0.008),
    # at 160 samples/s.
    loader = _analysis.figures(_result("loader", 100, 6.25, [0.0], cpu=6.0, samples=1000))
    assert loader.cpu_per_1000 == pytest.approx(6.0) and loader.samples_per_s == pytest.approx(160.0)
    # As in the test above, a quarter of the copies' step CPU lands on the producer's core.
    p2 = _analysis.predict(syn, warm, cores=2, jobs=2, loader=loader)
    assert p2.shared == pytest.approx(2 / (0.006 + 2 * 0.25 * 0.002))
    assert p2.independent == _analysis.predict(syn, warm, cores=2, jobs=2).independent
    # The producer is no faster than the loader alone was (here it waited on
    # something other than its CPU: 0.006 CPU-s a sample, at 100 samples/s).
    slow = _analysis.figures(_result("loader", 100, 10.0, [0.0], cpu=6.0, samples=1000))
    assert _analysis.predict(syn, warm, cores=8, jobs=4, loader=slow).shared == pytest.approx(4 * 100.0)


def test_more_copies_than_cores_pay_the_measured_cost_of_time_sharing():
    syn = _analysis.figures(_result("synthetic", 100, 2.0, [0.0], cpu=2.0, samples=1000))
    warm = _analysis.figures(_result("warm", 100, 10.0, [0.0], cpu=10.0, samples=1000))  # 0.01 CPU-s a sample
    # Two copies on one core used 0.0125 CPU-s a sample: a quarter more.
    ts = _analysis.figures(_result("warm", 100, 10.0, [0.0], cpu=12.5, samples=1000))
    # Up to a copy per core nothing changes.
    assert _analysis.predict(syn, warm, 2, 2, ts).independent == pytest.approx(200.0)
    # Three copies on two cores: one core of two time-shared.
    assert _analysis.timeshared_cpu(0.01, 0.0125, 2, 3) == pytest.approx(0.01125)
    assert _analysis.predict(syn, warm, 2, 3, ts).independent == pytest.approx(2 / 0.01125)
    # Two copies a core or more: every core time-shared.
    assert _analysis.predict(syn, warm, 2, 4, ts).independent == pytest.approx(2 / 0.0125)
    assert _analysis.predict(syn, warm, 2, 9, ts).independent == pytest.approx(2 / 0.0125)
    # Not measured (no way to pin here): the cost alone.
    assert _analysis.predict(syn, warm, 2, 4).independent == pytest.approx(200.0)
    # The shared side is the model of one producer, whatever the cost of time-sharing.
    assert _analysis.predict(syn, warm, 2, 4, ts).shared == _analysis.predict(syn, warm, 2, 4).shared


@pytest.mark.skipif(not _runner.can_pin(), reason="no sched_setaffinity on this platform")
def test_a_pinned_job_and_its_children_run_on_their_cpus_only(tmp_path):
    core = max(os.sched_getaffinity(0))
    script = ("import os, subprocess, sys; print(sorted(os.sched_getaffinity(0))); sys.stdout.flush(); "
              "subprocess.run([sys.executable, '-c', 'import os; print(sorted(os.sched_getaffinity(0)))'])")
    job = _runner.make_job("pinned", [sys.executable, "-c", script], "warm", str(tmp_path), {},
                           cpus=frozenset({core}))
    _runner.start(job)
    assert job.proc is not None and job.proc.wait(60) == 0
    assert Path(job.log).read_text().split("\n")[:2] == [f"[{core}]", f"[{core}]"]


def test_rounds_are_reduced_to_their_medians():
    runs = [_result("warm", 10, s, [0.0], cpu=1.0) for s in (1.0, 4.0, 2.0)]  # 100, 25, 50 samples/s
    assert _analysis.median_run(runs)["seconds"] == 2.0
    assert _analysis.median_run(runs[:2])["seconds"] == 4.0  # the lower median of two
    rounds = [{"independent": i, "shared": s, "background_cores": b, "copies": {"i": i}}
              for i, s, b in ((900.0, 2000.0, 0.0), (1100.0, 1500.0, 0.5), (1000.0, 2500.0, 0.1))]
    m = _analysis.median_measured(rounds)
    assert (m["independent"], m["shared"], m["background_cores"]) == (1000.0, 2000.0, 0.1)
    assert m["copies"] == {"i": 1000.0} and len(m["rounds"]) == 3
    with pytest.raises(ValueError):
        _analysis.median_run([])


def test_free_cores_leave_out_what_other_processes_use():
    busy = dict(_result("warm", 10, 2.0, [0.0], cpu=1.0), others_cpu_seconds=1.0)  # half a core
    quiet = dict(_result("synthetic", 10, 2.0, [0.0], cpu=1.0), others_cpu_seconds=0.4)
    assert _analysis.free_cores(2, [_analysis.figures(busy), _analysis.figures(quiet)]) == pytest.approx(1.8)
    assert _analysis.free_cores(1, [_analysis.figures(busy)]) == 1.0


def test_background_cores_of_copies_measured_together():
    # Two copies, each 0.8 core, while the machine was busy 2.0 cores: 0.4 core is someone else's.
    copies = [dict(_result("warm", 10, 1.0, [0.0], cpu=0.8), others_cpu_seconds=1.2)] * 2
    assert _analysis.background_cores(copies) == pytest.approx(0.4)
    # Readers of a shared producer: the producer's 0.3 core is known, not someone else's.
    assert _analysis.background_cores(copies, known=0.3) == pytest.approx(0.1)
    assert _analysis.background_cores(copies, known=1.0) == 0.0


def test_verdicts_in_plain_words():
    prep = _analysis.stalls(_modes(0.1, 0.4, 0.4))
    pred = [_analysis.Prediction(4, 100.0, 310.0)]
    text = _analysis.verdict("prep-bound", prep, pred, {4: 2.9}, 0.7)
    assert text == "prep-bound: 75% of each step waits for data; one shared pipeline for 4 jobs: 3.1x predicted, 2.9x measured"
    comp = _analysis.stalls(_modes(0.1, 0.1, 0.1))
    text = _analysis.verdict("compute-bound", comp, [_analysis.Prediction(2, 100.0, 102.0)], {}, 0.1)
    assert text.startswith("compute-bound") and "sharing saves CPU (10% per sample per extra job) but not time" in text


# ---- the analysis's layout, shared with the run store's reader -------------

FIXTURE = ROOT / "tests" / "data" / "stalls-report-v1.json"


def _made_up_analysis():
    """An analysis of every part (modes, ddp, time-sharing, the loader alone,
    a --validate prediction), from made-up raw results."""
    from batchcast.stalls import _session

    def result(mode, seconds, wait, cpu, **extra):
        return dict(_result(mode, 10, seconds, [wait] * 10, cpu=cpu), **extra)

    rnd = {
        "synthetic": result("synthetic", 0.5, 0.0, 0.4, cpus=4),
        "cold": result("cold", 3.0, 0.25, 4.0),
        "warm": result("warm", 2.0, 0.15, 3.6),
        "loader": result("loader", 1.0, 0.0, 3.0),
        "timeshare": result("timeshare", 4.5, 0.1, 8.0, core=1),
        "validate": {2: {"independent": 95.0, "shared": 180.0, "background_cores": 0.1,
                         "copies": {"independent": [{"samples_per_s": 47.5}], "shared": []}}},
    }
    opts = _session.Options(command=["python", "train.py"], jobs=[2], nproc=2, validate=True, log=False)
    ddp = result("ddp", 2.5, 0.15, 3.6)
    return _session._report(opts, [rnd], ddp, ["a note"], {"evicted": 3})


def _layout(value):
    """The JSON layout of ``value``: its keys and the kinds of its values."""
    if isinstance(value, dict):
        return {str(k): _layout(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_layout(value[0])] if value else []
    if isinstance(value, bool) or value is None:
        return repr(value)
    return "number" if isinstance(value, (int, float)) else type(value).__name__


def test_the_analysis_has_the_layout_the_run_store_reads():
    # The run store's reader (crates/batchcast-store/src/stalls.rs) is tested
    # on the fixture: an analysis of another layout fails here first.
    from batchcast.stalls._report import SCHEMA_VERSION, table

    report = json.loads(json.dumps(_made_up_analysis()))
    fixture = json.loads(FIXTURE.read_text())
    assert report["schema_version"] == SCHEMA_VERSION == fixture["schema_version"]
    assert _layout(report) == _layout(fixture), (
        f"the analysis's layout differs from {FIXTURE.name}: a field that changes meaning or goes away "
        "needs a new SCHEMA_VERSION and the Rust reader's support; then rewrite the fixture with "
        "`python tests/python/test_stalls.py --write-fixture`"
    )
    assert table(report).endswith(f"verdict: {report['verdict']}")


@pytest.mark.parametrize("args,says", [(["--repeats", "0"], "--repeats must be 1..9"),
                                       (["--validate"], "--validate checks the prediction for --jobs N"),
                                       (["--jobs", "2,x"], "--jobs takes numbers separated by commas")])
def test_bad_options_are_named_before_anything_runs(args, says):
    proc = subprocess.run([sys.executable, "-m", "batchcast.stalls", *args, "--", "python", "train.py"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and says in proc.stderr, proc.stderr


def test_mark_is_a_pass_through_outside_batchcast_stalls(monkeypatch):
    monkeypatch.delenv("BATCHCAST_STALLS_MODE", raising=False)
    loader = [1, 2, 3]
    assert stalls.mark(loader) is loader


def _recorder(tmp_path, monkeypatch, backlog=None, warmup=2, steps=3):
    from batchcast.stalls import _protocol, _recorder

    monkeypatch.setenv(_protocol.MODE, "consumer")
    monkeypatch.setenv(_protocol.OUT, str(tmp_path))
    monkeypatch.setenv(_protocol.WARMUP, str(warmup))
    monkeypatch.setenv(_protocol.STEPS, str(steps))
    return _recorder.Recorder(_protocol.Config.from_env(), {}, backlog=backlog)


def _feed(rec, gaps):
    """Steps of the given lengths (seconds, on a made-up clock); the result."""
    t = 0.0
    with pytest.raises(SystemExit):
        for g in gaps:
            rec.step(t, t + g, [0] * 4)
            t += g
    return json.loads((Path(rec._c.out) / "result-0.json").read_text())


def test_a_shared_reader_is_measured_once_it_has_caught_up(tmp_path, monkeypatch):
    # The producer ran ahead while the copy waited: 4 batches come at once
    # (backlog 4, 3, 2, 1), then one every 0.5 s. Only the latter count.
    backlog = iter([4, 3, 2, 1, 1, 1, 1, 1])
    rec = _recorder(tmp_path, monkeypatch, backlog=lambda: next(backlog))
    r = _feed(rec, [0.1, 0.1, 0.01, 0.01, 0.01, 0.5, 0.5, 0.5, 0.5])
    assert r["caught_up_after"] == 4 and r["steps"] == 3
    assert r["step_times"] == pytest.approx([0.5, 0.5, 0.5])


def test_a_reader_that_never_catches_up_is_measured_after_the_drain_limit(tmp_path, monkeypatch):
    from batchcast.stalls import _recorder as mod

    rec = _recorder(tmp_path, monkeypatch, backlog=lambda: 8, warmup=1, steps=2)
    r = _feed(rec, [0.1] * (1 + mod.DRAIN_MAX_STEPS + 2))
    assert r["caught_up_after"] == mod.DRAIN_MAX_STEPS and r["steps"] == 2


def test_an_own_loader_is_measured_right_after_the_warm_up(tmp_path, monkeypatch):
    r = _feed(_recorder(tmp_path, monkeypatch), [0.1, 0.1, 0.2, 0.3, 0.4])
    assert r["caught_up_after"] == 0 and r["step_times"] == pytest.approx([0.2, 0.3, 0.4])


def test_a_copy_whose_peer_ended_before_the_barrier_is_measured_without_it(tmp_path, monkeypatch, capfd):
    # The barrier of --validate: a copy killed while the others warm up holds
    # them no longer than it takes to see it end (not the 120 s time limit);
    # they are measured alone, and say so.
    import time

    from batchcast._barrier import make_barrier
    from batchcast.stalls import _protocol

    spec = make_barrier(str(tmp_path / "barrier"), 2)
    peer = subprocess.Popen(
        [sys.executable, "-c", "import sys; from batchcast._barrier import join; join(sys.argv[1]);"
         " print('joined', flush=True); sys.stdin.read()", spec],
        env=dict(os.environ, PYTHONPATH=str(ROOT / "python")), stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, text=True)
    try:
        assert peer.stdout.readline().strip() == "joined"
        monkeypatch.setenv(_protocol.BARRIER, spec)
        rec = _recorder(tmp_path, monkeypatch)
    finally:
        peer.kill()
        peer.communicate()
    start = time.monotonic()
    r = _feed(rec, [0.1] * 5)
    assert time.monotonic() - start < 20
    assert r["steps"] == 3
    assert f"a job (pid {peer.pid}) ended before the start barrier" in capfd.readouterr().err


def test_eviction_drops_files_from_the_page_cache(tmp_path):
    files = []
    for i in range(8):
        p = tmp_path / f"f{i}"
        p.write_bytes(os.urandom(64 << 10))
        files.append(str(p))
    _cache.warm(files)
    assert _cache.cached_share(files) == 1.0
    evicted, failed = _cache.evict(files)
    assert evicted == 8 and failed is None
    assert _cache.cached_share(files) == 0.0
    assert _cache.dataset_roots(files) == [str(tmp_path)]


# ---- real training processes ---------------------------------------------


def _analyse(tmp_path, *script_args, extra=(), timeout=300):
    out = tmp_path / "a.json"
    cmd = [sys.executable, "-m", "batchcast.stalls", "--steps", "20", "--warmup", "3", "--json-out", str(out),
           *extra, "--", sys.executable, str(TRAIN), "--data", str(tmp_path / "data"), *script_args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    return proc, (json.loads(out.read_text()) if out.exists() else None)


@pytest.mark.stalls
def test_prep_bound_and_synthetic_len_is_exact(tmp_path):
    # 64 images in batches of 16: 4 steps an epoch, 23 steps run, so 5 whole epochs.
    proc, r = _analyse(tmp_path, "--images", "64", "--prep", "6", "--compute", "1")
    assert proc.returncode == 0, proc.stderr
    assert r["regime"] == "prep-bound", proc.stdout
    assert r["verdict"].startswith("prep-bound")
    assert r["modes"]["synthetic"]["epoch_steps"] == 4
    assert r["epochs"]["synthetic"] == [4] * 5
    assert r["epochs"]["warm"] == [4] * 5
    assert r["modes"]["warm"]["wait_p50"] > 5 * r["modes"]["synthetic"]["wait_p50"]
    assert "prep" in proc.stdout and "verdict: prep-bound" in proc.stdout


@pytest.mark.stalls
def test_compute_bound(tmp_path):
    # A step well above the data noise: a cold read of a batch once took 51 ms
    # on this shared VM's disk (fetch-bound at a 60 ms step); 300 ms keeps
    # such a read under the 20% threshold.
    proc, r = _analyse(tmp_path, "--images", "64", "--prep", "1", "--size", "32", "--compute", "300")
    assert proc.returncode == 0, proc.stderr
    assert r["regime"] == "compute-bound", proc.stdout


@pytest.mark.stalls
def test_fetch_bound_with_slow_storage_for_evicted_files(tmp_path):
    # This VM's disk answers in microseconds: the script sleeps 15 ms for a
    # file that the kernel says is not cached, which only cold reads see.
    proc, r = _analyse(tmp_path, "--images", "400", "--prep", "1", "--size", "32", "--compute", "1",
                       "--slow-storage-ms", "15")
    assert proc.returncode == 0, proc.stderr
    # Eviction is best effort (a page under writeback stays): nearly all must go.
    assert r["cache"]["files"] >= 400 and r["cache"]["cached_after_evict"] < 0.1
    assert r["regime"] == "fetch-bound", proc.stdout


@pytest.mark.stalls
def test_ddp_with_two_gloo_processes_has_a_communication_share(tmp_path):
    proc, r = _analyse(tmp_path, "--images", "64", "--prep", "1", "--size", "32", "--compute", "1",
                       extra=["--nproc", "2"])
    assert proc.returncode == 0, proc.stderr
    comm = {s["name"]: s for s in r["stalls"]}["communication"]
    assert r["ddp"]["processes"] == 2
    assert comm["share"] > 0.0 and comm["per_step_s"] > 0.0
    assert "ddp x2" in proc.stdout


@pytest.mark.stalls
@pytest.mark.parametrize("flag,says", [("--crash", "exited with status 1"),
                                       ("--no-mark", "never created its marked loader"),
                                       ("--hang", "no result after 15 s")])
def test_a_broken_script_gets_a_clear_error(tmp_path, flag, says):
    proc, r = _analyse(tmp_path, "--images", "16", flag, extra=["--timeout", "15"], timeout=120)
    assert proc.returncode == 1 and r is None
    assert "mode synthetic" in proc.stderr and says in proc.stderr, proc.stderr
    assert "last output of the script" in proc.stderr
    # An unmarked script trains on until the timeout: its tail is its epochs.
    assert ("epoch" if flag == "--no-mark" else "training on 16 images") in proc.stderr
    if flag == "--crash":
        assert "crashes on purpose" in proc.stderr


@pytest.mark.stalls
def test_prediction_against_validate(tmp_path):
    # 60 measured steps a mode: the prediction's inputs (rates, CPU per
    # sample) from windows of a few seconds, not a noisy half second; five
    # rounds, medians: this VM's speed drifts by tens of percent over
    # seconds (docs/stalls.md), and single validation rounds
    # of one run differed by up to 25%.
    proc, r = _analyse(tmp_path, "--images", "256", "--prep", "4", "--compute", "1",
                       extra=["--steps", "60", "--repeats", "5", "--jobs", "2,4", "--validate"], timeout=1500)
    assert proc.returncode == 0, proc.stderr
    print(proc.stdout)  # the figures, in the log of a passing run too (pytest -s)
    for p in r["predictions"]:
        m = p["measured"]
        # Sharing is predicted to beat own loaders, and measured to where it
        # is predicted to win clearly (two copies on two cores gain ~1.2x,
        # within this machine's noise of a tie).
        assert p["shared"] > p["independent"], proc.stdout
        if p["speedup"] >= 1.5:
            assert m["shared"] > m["independent"], proc.stdout
        if m.get("background_cores", 0.0) > 0.25:
            # Other jobs took cores while the copies ran (either side; the
            # shared producer's own CPU is not counted): the figure the
            # prediction is for (this machine's free cores) did not hold, so
            # the 25 % bound is not a fair test here; the ordering above is.
            continue
        for side in ("independent", "shared"):
            assert abs(p[side] - m[side]) <= 0.25 * m[side], (
                f"{p['jobs']} jobs, {side}: predicted {p[side]:.0f}, measured {m[side]:.0f} samples/s\n{proc.stdout}")
    assert "one shared pipeline for 4 jobs" in r["verdict"] and "measured" in r["verdict"]
    # The producer's cost was measured: the loader alone, with no training step.
    assert r["loader"]["samples_per_s"] > r["modes"]["warm"]["samples_per_s"], proc.stdout
    assert "loader alone" in proc.stdout
    # More copies than cores: the cost of time-sharing was measured, on one core.
    if 4 > r["free_cores"]:
        assert r["timeshare"]["samples"] > 0 and r["timeshare"]["core"] in os.sched_getaffinity(0)
        assert "timeshared" in proc.stdout


def _batchcast_bin():
    for cand in (os.environ.get("BATCHCAST_BIN"), ROOT / "target" / "release" / "batchcast",
                 ROOT / "target" / "debug" / "batchcast"):
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return str(cand)
    pytest.skip("no batchcast binary: cargo build -p batchcast-cli (scripts/test.sh builds it first)")


@pytest.mark.stalls
def test_the_cli_face_prints_json_and_records_into_the_run_store(tmp_path):
    import sqlite3

    store = tmp_path / "runs.db"
    cmd = [_batchcast_bin(), "stalls", "--steps", "10", "--warmup", "2", "--json", "--store", str(store), "--",
           sys.executable, str(TRAIN), "--data", str(tmp_path / "data"), "--images", "32", "--size", "32"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert set(report["modes"]) == {"synthetic", "cold", "warm"}
    assert "recorded as run" in proc.stderr
    with sqlite3.connect(store) as db:
        (status,) = db.execute("SELECT status FROM runs").fetchone()
        keys = {k for (k,) in db.execute("SELECT DISTINCT key FROM metrics")}
    assert status == "FINISHED"
    assert {"stalls/warm/samples_per_s", "stalls/prep/share"} <= keys


@pytest.mark.stalls
def test_validate_runs_its_copies_with_batchcast_run_into_the_store(tmp_path, batchcast_bin):
    import sqlite3

    store = tmp_path / "runs.db"
    cmd = [batchcast_bin, "stalls", "--steps", "10", "--warmup", "2", "--jobs", "2", "--validate", "--json",
           "--store", str(store), "--", sys.executable, str(TRAIN), "--data", str(tmp_path / "data"),
           "--images", "32", "--size", "32"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)  # stdout is the JSON alone
    assert f"batchcast ui --store {store}" in proc.stderr
    with sqlite3.connect(store) as db:
        runs = db.execute(
            "SELECT w.name, r.name, r.status, r.id FROM runs r JOIN workloads w ON r.workload_id = w.id"
            " JOIN experiments e ON w.experiment_id = e.id WHERE e.name LIKE 'stalls-%' ORDER BY r.id").fetchall()
        figures = {rid: dict(db.execute("SELECT key, value FROM metrics WHERE run_id = ? AND key LIKE 'figure/%'",
                                        (rid,)).fetchall()) for (*_, rid) in runs}
    assert [(w, n, s) for w, n, s, _ in runs] == [
        ("own-2-r1", "own0", "FINISHED"), ("own-2-r1", "own1", "FINISHED"),
        ("shared-2-r1", "shared0", "FINISHED"), ("shared-2-r1", "shared1", "FINISHED"),
        ("shared-2-r1", "data", "FINISHED")]
    # What the report measured is what the store holds.
    measured = report["predictions"][0]["measured"]
    for side, names in (("independent", ("own0", "own1")), ("shared", ("shared0", "shared1"))):
        rates = sorted(f["figure/samples"] / f["figure/seconds"]
                       for (_, n, _, rid) in runs for f in [figures[rid]] if n in names)
        assert rates == pytest.approx(sorted(c["samples_per_s"] for c in measured["copies"][side]))
        assert measured[side] == pytest.approx(sum(rates))


# A marked script of arrays in memory (no dataset, no torch), that crashes
# in the mode named by CRASH_IN: for the copies of --validate under `batchcast run`.
TINY_SCRIPT = """
import os, sys
import numpy as np
import batchcast.stalls
mode = os.environ.get("BATCHCAST_STALLS_MODE")
print("tiny script in mode", mode, flush=True)
if mode == os.environ.get("CRASH_IN"):
    sys.exit("crashing on purpose in " + mode)
if mode == os.environ.get("LINGER_IN"):  # a thread that keeps the process alive after its result
    import threading, time
    threading.Thread(target=time.sleep, args=(600,)).start()
loader = batchcast.stalls.mark([{"x": np.full((4, 16), i, dtype=np.float32)} for i in range(8)], batch_size=4)
for epoch in range(1000):
    for batch in loader:
        pass
"""


def _tiny_copies(tmp_path, batchcast_bin, monkeypatch, crash_in=None, timeout=120.0, linger=20.0):
    from batchcast.stalls import _protocol

    script = tmp_path / "tiny.py"
    script.write_text(TINY_SCRIPT)
    if crash_in:
        monkeypatch.setenv("CRASH_IN", crash_in)
    store = _runner.Store(str(tmp_path / "runs.sqlite"), "stalls-test", batchcast_bin)
    settings = {_protocol.WARMUP: "2", _protocol.STEPS: "5"}
    command = [sys.executable, str(script)]
    producer = _runner.make_job("producer", command, "producer", str(tmp_path), settings)
    readers = [_runner.make_job(f"shared{i}", command, "consumer", str(tmp_path), settings) for i in range(2)]
    return _runner.run_planned(readers, "shared-2-r1", store, str(tmp_path), timeout, producer, linger)


def test_validate_without_a_batchcast_binary_fails_before_anything_runs(monkeypatch):
    from batchcast import _experiment
    from batchcast.stalls import _session

    monkeypatch.setattr(_experiment, "find_binary", lambda: None)
    opts = _session.Options(command=["python", "no-such-script.py"], jobs=[2], validate=True, log=False)
    with pytest.raises(_runner.StallsError, match="no batchcast binary was found: put batchcast on PATH"):
        _session.analyse(opts)


def test_validate_copies_come_back_from_the_run_store(tmp_path, batchcast_bin, monkeypatch):
    got = _tiny_copies(tmp_path, batchcast_bin, monkeypatch)
    assert sorted(got) == ["shared0", "shared1"]
    for (r,) in got.values():
        assert r["mode"] == "consumer" and r["steps"] == 5 and r["samples"] == 20
        assert _analysis.figures(r).samples_per_s > 0


def test_validate_copies_that_linger_after_their_result_are_stopped(tmp_path, batchcast_bin, monkeypatch):
    import sqlite3
    import time

    monkeypatch.setenv("LINGER_IN", "consumer")
    started = time.monotonic()
    got = _tiny_copies(tmp_path, batchcast_bin, monkeypatch, linger=1.0)
    assert time.monotonic() - started < 60
    assert sorted(got) == ["shared0", "shared1"] and all(r["steps"] == 5 for (r,) in got.values())
    with sqlite3.connect(tmp_path / "runs.sqlite") as db:
        status = dict(db.execute("SELECT name, status FROM runs").fetchall())
    assert status["shared0"] == status["shared1"] == "KILLED"


@pytest.mark.parametrize("crash_in,says", [
    ("consumer", "mode consumer (shared0): the script exited with status 1"),
    ("producer", "mode producer (producer): producer"),
])
def test_a_validate_copy_that_fails_is_named_with_its_output(tmp_path, batchcast_bin, monkeypatch, crash_in, says):
    with pytest.raises(_runner.StallsError) as e:
        _tiny_copies(tmp_path, batchcast_bin, monkeypatch, crash_in=crash_in)
    assert says in str(e.value)
    assert "last output of the script" in str(e.value) and f"crashing on purpose in {crash_in}" in str(e.value)


CONSUMER_SCRIPT = """
import sys, numpy as np, batchcast, batchcast.stalls
loader = batchcast.stalls.mark(batchcast.Consumer(sys.argv[1], batch_size=8, connect_timeout=30))
for epoch in range(1000):
    for batch in loader:
        np.linalg.norm(np.asarray(batch['x'], dtype=np.float64))
"""

PRODUCER_SCRIPT = """
import sys, numpy as np, batchcast
batches = [{'x': np.full((8, 64), i, dtype=np.float32)} for i in range(4)]
batchcast.Producer(batches, name=sys.argv[1], samples_per_epoch=32).run(forever=True)
"""


@pytest.mark.stalls
def test_a_marked_consumer_is_analysed(tmp_path):
    name = f"stalls-test-{os.getpid()}"
    script = tmp_path / "consumer_train.py"
    script.write_text(CONSUMER_SCRIPT)
    producer = subprocess.Popen([sys.executable, "-c", PRODUCER_SCRIPT, name])
    try:
        out = tmp_path / "a.json"
        cmd = [sys.executable, "-m", "batchcast.stalls", "--steps", "20", "--warmup", "2", "--json-out", str(out),
               "--", sys.executable, str(script), name]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=200, cwd=ROOT)
        assert proc.returncode == 0, proc.stderr
        r = json.loads(out.read_text())
        assert r["modes"]["synthetic"]["epoch_steps"] == 4
        assert r["epochs"]["synthetic"] == [4] * 5 and r["epochs"]["warm"] == [4] * 5
        assert any("no dataset files" in n for n in r["notes"])
    finally:
        producer.terminate()
        producer.wait(30)


if __name__ == "__main__" and sys.argv[1:] == ["--write-fixture"]:
    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    FIXTURE.write_text(json.dumps(_made_up_analysis(), indent=1) + "\n")
