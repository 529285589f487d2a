"""`batchcast ui` in a real browser: headless Chromium (Debian's package,
driven through chromedriver by selenium) on a store that a real
`batchcast run` writes while the test watches.

A screenshot of every page goes to target/test-output/ui/ (or
$BATCHCAST_UI_SHOTS); with BATCHCAST_UI_DOCS=1 the collocation view also
goes to docs/img/ui-collocation.png, the picture in docs/dashboard.md. Deselect with
-m "not browser". scripts/test-python.sh installs chromium, chromium-driver
and selenium.
"""

from __future__ import annotations

import csv
import io
import os
import shutil
import sqlite3
import subprocess
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

import pytest

from conftest import Proc

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parent.parent.parent
CHROMIUM = os.environ.get("BATCHCAST_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("BATCHCAST_CHROMEDRIVER", "/usr/bin/chromedriver")
SHOTS = Path(os.environ.get("BATCHCAST_UI_SHOTS", ROOT / "target" / "test-output" / "ui"))
SAMPLES = int(os.environ.get("BATCHCAST_UI_SAMPLES", "30000"))  # per trainer
# The shared producer serves the same samples in two epochs, with a
# trigger between them (an event the charts mark).
SERVE = (f"batchcast serve --synthetic --samples {SAMPLES // 2} --epochs 2 --trigger every-epoch "
         "--work-us 300 --workers 2 --consumers 2")
PLAN = f"""Experiment,Workload,Name,Devices,Collocation,Listeners,Data,File,Params
sharing,independent,trainer-1,,-,,,job.sh,--lr 0.1
sharing,independent,trainer-2,,-,,,job.sh,--lr 0.2
sharing,shared,trainer-1,,-,,{SERVE},job.sh,--lr 0.1
sharing,shared,trainer-2,,-,,{SERVE},job.sh,--lr 0.2
"""
# The example plan's stand-in trainer (examples/run/job.sh), smaller.
JOB = textwrap.dedent(f"""\
    #!/bin/sh
    BC="${{BATCHCAST_BIN:-batchcast}}"
    if [ -z "${{BATCHCAST_NAME:-}}" ]; then
      own="own-$$"
      "$BC" serve --name "$own" --synthetic --samples {SAMPLES} --work-us 300 --workers 2 --consumers 1 >/dev/null &
      exec "$BC" consume "$own" --connect-timeout 30 --delay-ms 2
    fi
    exec "$BC" consume "$BATCHCAST_NAME" --connect-timeout 30 --delay-ms 2
    """)


def chrome(downloads: Path):
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.fail("selenium is not installed: run scripts/test-python.sh (it installs it)")
    for exe in (CHROMIUM, CHROMEDRIVER):
        if not os.access(exe, os.X_OK):
            pytest.fail(f"{exe} not found: `apt-get install chromium chromium-driver` "
                        "(scripts/test-python.sh does), or deselect with -m 'not browser'")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    profile = tempfile.mkdtemp(prefix="bc-chromium-")
    # The flags this machine needs (no sandbox as root, no network beyond localhost).
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
              "--disable-background-networking", "--disable-component-update", "--disable-sync",
              "--disable-dev-shm-usage", "--window-size=1400,1000", f"--user-data-dir={profile}"):
        opts.add_argument(a)
    opts.add_experimental_option("prefs", {
        "download.default_directory": str(downloads),
        "download.prompt_for_download": False,
    })
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    driver.profile_dir = profile
    return driver


class Dash:
    """The browser, the dashboard process and the store it shows."""

    def __init__(self, driver, printed: str, store: Path, runner: subprocess.Popen, downloads: Path):
        self.driver, self.printed, self.store, self.runner, self.downloads = driver, printed, store, runner, downloads
        # http://127.0.0.1:PORT: pages are opened by path once the printed
        # address (with its ?token=) has set the dashboard's cookie.
        self.base = printed.split("/?", 1)[0].rstrip("/")
        driver.get(printed)

    def open(self, path: str) -> None:
        self.driver.get(self.base + path)

    def shot(self, name: str) -> Path:
        SHOTS.mkdir(parents=True, exist_ok=True)
        out = SHOTS / f"{name}.png"
        self.driver.save_screenshot(str(out))
        return out

    def wait(self, what, timeout: float = 30):
        from selenium.webdriver.support.ui import WebDriverWait
        return WebDriverWait(self.driver, timeout, poll_frequency=0.1).until(what)

    def charts_loaded(self, at_least: int = 1) -> None:
        self.wait(lambda d: int(d.execute_script(
            "const s = document.querySelector('section.charts'); return s ? (s.dataset.loaded || 0) : 0")) >= at_least)

    def finished(self) -> None:
        """Waits for `batchcast run` to end (every run recorded)."""
        assert self.runner.wait(timeout=300) == 0, self.runner.stdout.read() if self.runner.stdout else ""

    def db(self) -> sqlite3.Connection:
        return sqlite3.connect(f"file:{self.store}?mode=ro", uri=True)

    def points(self, run: int, key: str) -> List[Tuple[float, float]]:
        """(elapsed s, value) of a metric of a run, from the store itself."""
        with self.db() as db:
            (start,) = db.execute("SELECT start_ms FROM runs WHERE id = ?", (run,)).fetchone()
            return [((ts - start) / 1000.0, v) for ts, v in db.execute(
                "SELECT ts_ms, value FROM metrics WHERE run_id = ? AND key = ? ORDER BY ts_ms, rowid", (run, key))]


@pytest.fixture(scope="module")
def dash(batchcast_bin: str) -> Iterator[Dash]:
    work = Path(tempfile.mkdtemp(prefix="bc-ui-"))
    (work / "plan.csv").write_text(PLAN)
    (work / "job.sh").write_text(JOB)
    (work / "job.sh").chmod(0o755)
    store = work / "runs.sqlite"
    bindir = str(Path(batchcast_bin).parent)
    env = dict(os.environ, BATCHCAST_BIN=batchcast_bin, BATCHCAST_DIR=str(work),
               PATH=bindir + os.pathsep + os.environ.get("PATH", ""))
    downloads = work / "downloads"
    downloads.mkdir()
    driver = chrome(downloads)
    runner = subprocess.Popen([batchcast_bin, "run", "plan.csv", "--store", str(store), "--interval", "0.25"],
                              cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    ui = Proc([batchcast_bin, "ui", "--store", str(store), "--port", "0"], env)
    try:
        printed = ui.expect("batchcast ui: ", timeout=30)
        yield Dash(driver, printed, store, runner, downloads)
    finally:
        driver.quit()
        shutil.rmtree(driver.profile_dir, ignore_errors=True)
        if runner.poll() is None:
            runner.kill()
        runner.wait(30)
        if runner.stdout:
            runner.stdout.close()
        ui.reap()
        shutil.rmtree(work, ignore_errors=True)


def drawn(d: Dash, key: str) -> Dict[int, List[Tuple[float, float]]]:
    return {run: pts for run, pts, _ in drawn_all(d, key)}


def drawn_all(d: Dash, key: str) -> List[Tuple[int, List[Tuple[float, float]], Tuple[float, float]]]:
    """The points of each run's line of `key`, read back from the SVG
    through the scale the chart drew it with."""
    lines = d.driver.execute_script("""
        return [...document.querySelectorAll('section.charts polyline')].filter(l => l.dataset.key === arguments[0]).map(l => {
            const s = l.ownerSVGElement.dataset;
            return {run: +l.dataset.run, d: Object.assign({}, l.dataset), s: Object.assign({}, s), points: l.getAttribute('points')};
        });""", key)
    out = []
    for line in lines:
        s, dd = line["s"], line["d"]
        x0, x1, left, right = float(s["x0"]), float(s["x1"]), float(s["left"]), float(s["right"])
        y0, y1, top, bottom = float(dd["y0"]), float(dd["y1"]), float(dd["top"]), float(dd["bottom"])
        pts = []
        for pair in (line["points"] or "").split():
            px, py = map(float, pair.split(","))
            pts.append((x0 + (px - left) / (right - left) * (x1 - x0), y0 + (bottom - py) / (bottom - top) * (y1 - y0)))
        out.append((line["run"], pts, (y0, y1)))
    return out


def run_ids(d: Dash, workload: str) -> List[int]:
    with d.db() as db:
        return [r for (r,) in db.execute(
            "SELECT r.id FROM runs r JOIN workloads w ON r.workload_id = w.id WHERE w.name = ? ORDER BY r.id",
            (workload,))]


def assert_same_points(got: List[Tuple[float, float]], want: List[Tuple[float, float]], xr: float, yr: float):
    assert len(got) == len(want) > 0, (len(got), len(want))
    for (gx, gy), (wx, wy) in zip(got, want):
        assert abs(gx - wx) <= 1e-3 * xr and abs(gy - wy) <= 1e-3 * yr, ((gx, gy), (wx, wy))


def test_new_points_appear_while_a_run_is_in_progress_without_reloading(dash: Dash):
    from selenium.webdriver.common.by import By
    key = "proc/cpu_percent"
    deadline = time.monotonic() + 120
    running = None
    while running is None:
        assert time.monotonic() < deadline, "no run started recording"
        try:
            with dash.db() as db:
                running = db.execute(
                    "SELECT r.id, r.workload_id FROM runs r WHERE r.status = 'RUNNING' AND "
                    "(SELECT count(*) FROM metrics m WHERE m.run_id = r.id AND m.key = ?) >= 2 LIMIT 1",
                    (key,)).fetchone()
        except sqlite3.Error:
            pass  # not created yet
        if running is None:
            time.sleep(0.1)
    run, workload = running
    dash.open(f"/workloads/{workload}?c={key}")
    dash.charts_loaded()
    assert dash.driver.find_element(By.CSS_SELECTOR, f'[data-status="{run}"]').text == "RUNNING"
    first = len(drawn(dash, key).get(run, []))
    dash.driver.execute_script("window.__samePage = 1")
    dash.wait(lambda _: len(drawn(dash, key).get(run, [])) > first, timeout=20)
    assert dash.driver.execute_script("return window.__samePage") == 1, "the page was reloaded"
    dash.shot("00-live-workload")


def test_from_the_experiment_list_to_a_workload_whose_charts_are_the_stores_values(dash: Dash):
    from selenium.webdriver.common.by import By
    dash.finished()
    dash.open("/")
    dash.shot("01-experiments")
    dash.driver.find_element(By.LINK_TEXT, "sharing").click()
    dash.wait(lambda d: d.title.startswith("Experiment sharing"))
    assert len(dash.driver.find_elements(By.CSS_SELECTOR, ".status.finished")) == 5  # 4 trainers + data
    dash.shot("02-experiment")
    dash.driver.find_element(By.LINK_TEXT, "independent").click()
    dash.wait(lambda d: d.title.startswith("Workload independent"))
    dash.charts_loaded()
    dash.shot("03-workload")
    titles = [e.text for e in dash.driver.find_elements(By.CSS_SELECTOR, ".chart .title")]
    assert titles == ["batchcast/samples_per_s", "batchcast/data_wait_share"]
    ids = run_ids(dash, "independent")
    legend = [e.text for e in dash.driver.find_elements(By.CSS_SELECTOR, ".chart:first-child .legend span")]
    assert legend == [f"independent/trainer-{i + 1} (#{r})" for i, r in enumerate(ids)]
    key = "batchcast/samples_per_s"
    lines = drawn(dash, key)
    assert sorted(lines) == ids
    svg = dash.driver.find_element(By.CSS_SELECTOR, ".chart:first-child svg")
    xr = float(svg.get_attribute("data-x1")) - float(svg.get_attribute("data-x0"))
    line = dash.driver.find_element(By.CSS_SELECTOR, ".chart:first-child polyline")
    yr = float(line.get_attribute("data-y1")) - float(line.get_attribute("data-y0"))
    for r in ids:
        assert_same_points(lines[r], dash.points(r, key), xr, yr)
    # search by parameter
    dash.open("/")
    box = dash.driver.find_element(By.NAME, "q")
    box.send_keys("lr=0.2")
    box.submit()
    dash.wait(lambda d: "Matching runs" in d.page_source)
    assert "Matching runs (2)" in dash.driver.page_source
    dash.shot("01b-search")


def test_runs_ticked_in_different_workloads_share_a_chart(dash: Dash):
    from selenium.webdriver.common.by import By
    dash.finished()
    dash.open("/experiments/1")
    ind, sh = run_ids(dash, "independent")[0], run_ids(dash, "shared")[0]
    for r in (ind, sh):
        dash.driver.find_element(By.CSS_SELECTOR, f'input[name=run][value="{r}"]').click()
    dash.driver.find_element(By.CSS_SELECTOR, "form#pick button").click()
    dash.wait(lambda d: d.title.startswith("Runs "))
    dash.charts_loaded()
    legend = [e.text for e in dash.driver.find_elements(By.CSS_SELECTOR, ".chart:first-child .legend span")]
    assert legend == [f"independent/trainer-1 (#{ind})", f"shared/trainer-1 (#{sh})"]
    key = "batchcast/samples_per_s"
    lines = drawn(dash, key)
    assert sorted(lines) == [ind, sh] and all(len(lines[r]) == len(dash.points(r, key)) for r in (ind, sh))
    dash.shot("03b-chosen-runs")


def chart_ranges(d: Dash) -> List[Tuple[float, float]]:
    return d.driver.execute_script(
        "return [...document.querySelectorAll('.chart svg')].map(s => [+s.dataset.x0, +s.dataset.x1])")


def test_zoom_moves_every_chart_and_the_url_restores_it(dash: Dash):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    dash.finished()
    wid = dash.db().execute("SELECT id FROM workloads WHERE name = 'independent'").fetchone()[0]
    dash.open(f"/workloads/{wid}")
    dash.charts_loaded()
    before = chart_ranges(dash)
    assert len(before) == 2
    svg = dash.driver.find_element(By.CSS_SELECTOR, ".chart:first-child svg")
    w = svg.size["width"]
    (ActionChains(dash.driver).move_to_element_with_offset(svg, int(-0.2 * w), 0).click_and_hold()
        .move_by_offset(int(0.3 * w), 0).release().perform())
    dash.wait(lambda _: chart_ranges(dash) != before)
    after = chart_ranges(dash)
    assert after[0] == after[1], "every chart follows the zoom"
    (a, b), (a0, b0) = after[0], before[0]
    assert a0 < a < b < b0 and (b - a) < 0.5 * (b0 - a0)
    assert "z=" in dash.driver.current_url
    dash.shot("04-zoomed")
    dash.driver.refresh()
    dash.charts_loaded()
    restored = chart_ranges(dash)
    assert all(abs(x - y) <= 1e-4 * (b - a) for r in restored for x, y in zip(r, after[0]))
    ActionChains(dash.driver).double_click(dash.driver.find_element(By.CSS_SELECTOR, ".chart:first-child svg")).perform()
    dash.wait(lambda _: chart_ranges(dash) == before)
    assert "z=" not in dash.driver.current_url


def wait_file(d: Dash, name: str) -> Path:
    path = d.downloads / name
    d.wait(lambda _: path.exists() and not (d.downloads / (name + ".crdownload")).exists(), timeout=30)
    return path


def test_a_charts_csv_downloads_with_the_stores_rows(dash: Dash):
    from selenium.webdriver.common.by import By
    dash.finished()
    wid = dash.db().execute("SELECT id FROM workloads WHERE name = 'shared'").fetchone()[0]
    dash.open(f"/workloads/{wid}?c=batchcast%2Fsamples")
    dash.charts_loaded()
    dash.driver.find_element(By.CSS_SELECTOR, ".chart a.csv").click()
    rows = list(csv.DictReader(io.StringIO(wait_file(dash, "batchcast-chart.csv").read_text())))
    want = []
    for r in run_ids(dash, "shared"):
        want += [(r, x, v) for x, v in dash.points(r, "batchcast/samples")]
    assert len(rows) == len(want) > 0
    for row, (r, x, v) in zip(rows, want):
        assert int(row["run_id"]) == r and row["key"] == "batchcast/samples"
        assert abs(float(row["elapsed_s"]) - x) < 1e-6 and float(row["value"]) == v


def test_two_metrics_on_one_chart_and_the_mean_of_runs(dash: Dash):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select
    dash.finished()
    wid = dash.db().execute("SELECT id FROM workloads WHERE name = 'independent'").fetchone()[0]
    dash.open(f"/workloads/{wid}")
    dash.charts_loaded()
    Select(dash.driver.find_element(By.NAME, "key1")).select_by_value("proc/cpu_percent")
    Select(dash.driver.find_element(By.NAME, "key2")).select_by_value("proc/pss_bytes")
    dash.driver.find_element(By.ID, "add-chart").click()
    dash.wait(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".chart:nth-child(3) polyline[stroke-dasharray]")) == 2)
    labels = [e.text for e in dash.driver.find_elements(By.CSS_SELECTOR, ".chart:nth-child(3) .axis-label")]
    assert "proc/cpu_percent (%) — solid" in labels and "proc/pss_bytes (bytes) — dashed" in labels
    assert "c=proc%2Fcpu_percent%7Cproc%2Fpss_bytes" in dash.driver.current_url
    Select(dash.driver.find_element(By.NAME, "mode")).select_by_value("mean")
    legend = [e.text for e in dash.driver.find_elements(By.CSS_SELECTOR, ".chart:nth-child(3) .legend span")]
    assert legend == ["mean of 2 runs — proc/cpu_percent", "mean of 2 runs — proc/pss_bytes"]
    assert "m=mean" in dash.driver.current_url
    # the mean line is the mean of the runs' values (interpolated at its x)
    ids = run_ids(dash, "independent")
    series = [dash.points(r, "proc/cpu_percent") for r in ids]
    mean = [line for line in drawn_all(dash, "proc/cpu_percent") if line[0] == 0]
    assert len(mean) == 1 and len(mean[0][1]) > 100
    def interp(pts, x):
        for (ax, ay), (bx, by) in zip(pts, pts[1:]):
            if ax <= x <= bx:
                return ay + (x - ax) / (bx - ax) * (by - ay) if bx > ax else ay
        return None
    lo, hi = mean[0][2]
    checked = 0
    for x, y in mean[0][1][5:-5:10]:
        vals = [v for v in (interp(p, x) for p in series) if v is not None]
        assert abs(y - sum(vals) / len(vals)) <= 5e-3 * (hi - lo), (x, y, vals)
        checked += 1
    assert checked > 10
    dash.shot("05-two-metrics-mean")


def test_smoothing_draws_the_moving_average_of_the_stores_values(dash: Dash):
    from selenium.webdriver.common.by import By
    dash.finished()
    run = run_ids(dash, "independent")[0]
    dash.open(f"/runs/{run}?c=proc%2Fcpu_percent")
    dash.charts_loaded()
    dash.driver.execute_script("""const s = document.querySelector('input[name=smooth]');
        s.value = '0.6'; s.dispatchEvent(new Event('input'));""")
    assert "s=0.6" in dash.driver.current_url
    got = drawn_all(dash, "proc/cpu_percent")[0]
    raw = dash.points(run, "proc/cpu_percent")
    acc = weight = 0.0
    (lo, hi) = got[2]
    for (gx, gy), (x, v) in zip(got[1], raw):
        acc, weight = 0.6 * acc + 0.4 * v, 0.6 * weight + 0.4
        assert abs(gy - acc / weight) <= 1e-3 * (hi - lo), (gx, gy, acc / weight)
    assert len(got[1]) == len(raw)
    assert dash.driver.find_element(By.CSS_SELECTOR, ".legend span").text.endswith(f"(#{run})")


def test_the_x_axis_switches_to_step_and_restores_from_the_url(dash: Dash):
    # (listener metrics carry step 0; real steps are checked over HTTP, tests/api.rs)
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select
    dash.finished()
    run = run_ids(dash, "shared")[0]
    dash.open(f"/runs/{run}?c=batchcast%2Fsamples")
    dash.charts_loaded()
    Select(dash.driver.find_element(By.NAME, "x")).select_by_value("step")
    dash.charts_loaded(2)
    assert "x=step" in dash.driver.current_url
    labels = [e.text for e in dash.driver.find_elements(By.CSS_SELECTOR, ".chart .axis-label")]
    assert "step" in labels
    with dash.db() as db:
        want = [(float(st), v) for st, v in db.execute(
            "SELECT step, value FROM metrics WHERE run_id = ? AND key = 'batchcast/samples' ORDER BY ts_ms, rowid", (run,))]
    (_, got, (lo, hi)), = drawn_all(dash, "batchcast/samples")
    svg = dash.driver.find_element(By.CSS_SELECTOR, ".chart svg")
    xr = float(svg.get_attribute("data-x1")) - float(svg.get_attribute("data-x0"))
    assert_same_points(got, want, xr or 1.0, hi - lo)
    dash.driver.refresh()
    dash.charts_loaded()
    assert dash.driver.find_element(By.NAME, "x").get_attribute("value") == "step"


def test_a_trainers_chart_marks_its_producers_trigger(dash: Dash):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    dash.finished()
    run = run_ids(dash, "shared")[0]
    with dash.db() as db:
        (start,) = db.execute("SELECT start_ms FROM runs WHERE id = ?", (run,)).fetchone()
        (ts, message), = db.execute(
            "SELECT e.ts_ms, e.message FROM events e JOIN runs r ON e.run_id = r.id JOIN workloads w ON r.workload_id = w.id "
            "WHERE w.name = 'shared' AND r.name = 'data' AND e.source = 'serve' AND e.message LIKE 'trigger %'")
    assert message.startswith("trigger every-epoch fired (#1) before epoch 1"), message
    dash.open(f"/runs/{run}?c=batchcast%2Fsamples")
    dash.charts_loaded()
    marks = dash.driver.find_elements(By.CSS_SELECTOR, '.chart g.marker[data-source="serve"]')
    (mark,) = [m for m in marks if message in m.find_element(By.TAG_NAME, "title").get_attribute("textContent")]
    # at the trigger's time in the trainer's run, inside the drawn range
    x = float(mark.get_attribute("data-x"))
    assert abs(x - (ts - start) / 1000.0) < 1e-6
    svg = dash.driver.find_element(By.CSS_SELECTOR, ".chart svg")
    x0, x1 = float(svg.get_attribute("data-x0")), float(svg.get_attribute("data-x1"))
    left, right = float(svg.get_attribute("data-left")), float(svg.get_attribute("data-right"))
    assert x0 <= x <= x1
    line = mark.find_element(By.TAG_NAME, "line")
    assert abs(float(line.get_attribute("x1")) - (left + (x - x0) / (x1 - x0) * (right - left))) < 0.01
    assert mark.get_attribute("data-from") != str(run)  # the producer's run recorded it
    label = " ".join(t.get_attribute("textContent") for t in dash.driver.find_elements(By.CSS_SELECTOR, ".chart .marker-label"))
    assert "serve: trigger every-epoch fired (#1) before epoch 1" in label, label
    ActionChains(dash.driver).move_to_element(line).perform()
    dash.shot("06b-trigger-marker")
    # the experiment page: one line per workload, the trigger marked on the shared one
    dash.open("/experiments/1?c=batchcast%2Fsamples")
    dash.charts_loaded()
    legend = [e.text for e in dash.driver.find_elements(By.CSS_SELECTOR, ".chart .legend span")]
    assert legend == ["independent: mean of 2 runs", "shared: mean of 2 runs"], legend
    groups = {m.get_attribute("data-run") for m in dash.driver.find_elements(By.CSS_SELECTOR, '.chart g.marker[data-source="serve"]')}
    with dash.db() as db:
        (shared,) = db.execute("SELECT id FROM workloads WHERE name = 'shared'").fetchone()
    assert groups == {f"workload:{shared}"}, groups
    dash.shot("02b-workloads-compared")


def test_an_events_markup_is_drawn_as_text(dash: Dash):
    """An event's message comes from a job's or a producer's output: the
    chart's label and hover text show it as text, and it runs nothing."""
    from selenium.webdriver.common.by import By
    dash.finished()
    run = run_ids(dash, "shared")[0]
    markup = '<img src=x onerror="window.injected=1">'
    with dash.db() as db:
        (start,) = db.execute("SELECT start_ms FROM runs WHERE id = ?", (run,)).fetchone()
        (last,) = db.execute("SELECT max(ts_ms) FROM metrics WHERE run_id = ? AND key = 'batchcast/samples'",
                             (run,)).fetchone()
    with sqlite3.connect(dash.store) as db:
        db.execute("INSERT INTO events (run_id, ts_ms, source, message) VALUES (?, ?, 'test', ?)",
                   (run, (3 * start + last) // 4, markup + ": after"))
    dash.open(f"/runs/{run}?c=batchcast%2Fsamples")
    dash.charts_loaded()
    (mark,) = dash.driver.find_elements(By.CSS_SELECTOR, '.chart g.marker[data-source="test"]')
    assert mark.find_element(By.TAG_NAME, "title").get_attribute("textContent").endswith(markup + ": after")
    labels = [t.get_attribute("textContent") for t in dash.driver.find_elements(By.CSS_SELECTOR, ".chart .marker-label")]
    assert f"test: {markup}" in labels, labels
    assert not dash.driver.find_elements(By.CSS_SELECTOR, ".chart img, ul.events img")
    assert dash.driver.execute_script("return window.injected === undefined")


def test_a_run_page_shows_its_parameters_output_and_full_log(dash: Dash):
    from selenium.webdriver.common.by import By
    dash.finished()
    run = run_ids(dash, "shared")[1]
    dash.open(f"/runs/{run}")
    dash.charts_loaded()
    page = dash.driver.find_element(By.TAG_NAME, "main").text
    assert "trainer-2" in page and "FINISHED" in page and "lr 0.2" in page.replace("\t", " ")
    assert "exit code 0" in page
    stdout = dash.driver.find_element(By.ID, "stdout").text
    assert '"event":"finished"' in stdout
    dash.shot("06-run")
    dash.driver.find_element(By.LINK_TEXT, "download the full stdout").click()
    got = wait_file(dash, f"run-{run}-stdout.log").read_bytes()
    with dash.db() as db:
        want = b"".join(bytes(c) for (c,) in db.execute(
            "SELECT data FROM logs WHERE run_id = ? AND stream = 'stdout' ORDER BY seq", (run,)))
    assert got == want


def test_the_collocation_view_matches_runs_compare(dash: Dash, batchcast_bin: str):
    from selenium.webdriver.common.by import By
    dash.finished()
    dash.open("/experiments/1/collocation")
    rows = dash.driver.find_elements(By.CSS_SELECTOR, "table.collocation tbody tr")
    assert [r.find_element(By.TAG_NAME, "td").text for r in rows] == ["independent", "shared"]
    compare = subprocess.run([batchcast_bin, "runs", "compare", "--store", str(dash.store), "--experiment", "sharing"],
                             capture_output=True, text=True, check=True).stdout
    for r in rows:
        name, rate = r.find_elements(By.TAG_NAME, "td")[0].text, r.find_elements(By.TAG_NAME, "td")[4].text
        line = next(l for l in compare.splitlines() if l.startswith(f"sharing/{name} "))
        assert rate in line.split(), (rate, line)
    speedup = dash.driver.find_element(By.CSS_SELECTOR, ".speedup").text
    assert speedup.startswith("shared vs independent: ") and "aggregate samples/s" in speedup
    dash.driver.set_window_size(1240, 700)
    try:
        out = dash.shot("07-collocation")
    finally:
        dash.driver.set_window_size(1400, 1000)
    if os.environ.get("BATCHCAST_UI_DOCS") == "1":
        (ROOT / "docs" / "img").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(out, ROOT / "docs" / "img" / "ui-collocation.png")


def test_bad_addresses_and_bad_stores_give_clean_error_pages(dash: Dash, batchcast_bin: str, tmp_path: Path):
    from selenium.webdriver.common.by import By
    dash.open("/runs/abc")
    assert dash.driver.find_element(By.CSS_SELECTOR, ".error h2").text == "Bad request"
    dash.open("/runs/99999")
    assert "run 99999 not found" in dash.driver.find_element(By.CSS_SELECTOR, ".error").text
    dash.shot("08-not-found")
    foreign = tmp_path / "other.sqlite"
    sqlite3.connect(foreign).executescript("CREATE TABLE t (x); INSERT INTO t VALUES (1);")
    for store, title, name in [(tmp_path / "none.sqlite", "No run store", "09-missing-store"),
                               (foreign, "Not a batchcast run store", "10-foreign-store")]:
        ui = Proc([batchcast_bin, "ui", "--store", str(store), "--port", "0"], dict(os.environ))
        try:
            dash.driver.get(ui.expect("batchcast ui: ", timeout=30))
            assert dash.driver.find_element(By.CSS_SELECTOR, ".error h2").text == title
            assert "pass --store" in dash.driver.find_element(By.CSS_SELECTOR, ".error").text
            dash.shot(name)
        finally:
            ui.reap()


def test_the_printed_address_lets_the_browser_in_and_nothing_else_does(dash: Dash):
    """`batchcast ui` needs its token on loopback too: without it a page is
    refused; after following the printed address once, every page works
    (an HttpOnly SameSite cookie carries it), in a fresh browser profile."""
    from selenium.webdriver.common.by import By
    assert "?token=" in dash.printed
    dash.driver.delete_all_cookies()
    try:
        dash.open("/")
        assert dash.driver.find_element(By.CSS_SELECTOR, ".error h2").text == "Refused"
        assert "needs its token" in dash.driver.find_element(By.CSS_SELECTOR, ".error").text
        dash.shot("11-no-token")
        dash.open(f"/?token={'0' * 32}")
        assert dash.driver.find_element(By.CSS_SELECTOR, ".error h2").text == "Refused"
    finally:
        dash.driver.get(dash.printed)
    assert not dash.driver.find_elements(By.CSS_SELECTOR, ".error")
    cookies = dash.driver.get_cookies()
    assert [c["httpOnly"] for c in cookies] == [True] and cookies[0]["sameSite"] == "Strict"
    # No script of the page can read the token.
    assert dash.driver.execute_script("return document.cookie") == ""
    (run,) = run_ids(dash, "independent")[:1]
    dash.open(f"/runs/{run}")
    assert not dash.driver.find_elements(By.CSS_SELECTOR, ".error")
    assert "trainer-1" in dash.driver.find_element(By.TAG_NAME, "h1").text + dash.driver.page_source
