#!/usr/bin/env python3
"""The run store on real hardware (issue 29 section 3): `batchcast run`'s GPU
listener against `nvidia-smi` on the same GPU, step by step (each with a time
limit within --budget; the JSON, --out, rewritten after each):
  env         the GPU (name, compute capability, MIG/compute mode), MPS tools;
  mig         a MIG-profile row runs on a free MIG instance, or (MIG off) is
              refused naming the fix; MIG itself is never changed;
  collocated  two torch training jobs on GPU 0, listeners gpu/process/system at
              1 Hz, beside `nvidia-smi --query-gpu -lms 1000`: power, util, memory,
              SM clock means over the common training window within 10%; the GPM
              (DCGM_FI_PROF_*) keys recorded and their means;
  overhead    beside it, its own runner with one sleeping job and the gpu listener
              alone: CPU of the runner's listener thread, % of one core (< 1%);
  mps         two jobs with Collocation MPS on a user-level daemon (pipe and log
              dirs in a temp dir) that the runner starts and stops.
--cpu-rehearsal: the same flow on CPU jobs of a few seconds; GPU rows are {"status":
"no GPU", "reason": ...}. Exit 0 whatever the verdicts, non-zero for bad inputs.
"""
import argparse, csv, json, os, shutil, signal, sqlite3, statistics, subprocess, sys, tempfile, threading, time
from pathlib import Path

ROOT, T0 = Path(__file__).resolve().parent.parent, time.monotonic()
SMI_FIELDS = ["timestamp", "power.draw", "utilization.gpu", "memory.used", "clocks.sm"]
# name: (store key under gpu/0/, scale to nvidia-smi's unit, nvidia-smi field, absolute slack near zero)
COMPARE = {"power_w": ("power_w", 1.0, "power.draw", 1.0),
           "util_gpu_percent": ("util_gpu_percent", 1.0, "utilization.gpu", 1.0),
           "mem_used_mib": ("mem_used_bytes", 1 / 2**20, "memory.used", 16.0),
           "clock_sm_mhz": ("clock_sm_mhz", 1.0, "clocks.sm", 15.0)}

# The job: trains for --seconds (busy Python on a CPU without torch, or with CHECK_NO_TORCH set); prints JSON lines.
TRAIN_PY = r'''
import argparse, importlib.util, json, os, sys, time
p = argparse.ArgumentParser(); p.add_argument("--seconds", type=float); p.add_argument("--device"); a = p.parse_args()
def say(**kw): print(json.dumps(kw), flush=True)
say(event="start", pid=os.getpid(), cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"))
if a.device == "cpu" and (os.environ.get("CHECK_NO_TORCH") or not importlib.util.find_spec("torch")):
    say(event="train_start", t=time.time(), model="pure python"); n, end = 0, time.time() + a.seconds
    while time.time() < end: sum(i * i for i in range(20000)); n += 1
    say(event="train_end", t=time.time(), steps=n); sys.exit(0)
import torch; c = torch.nn; dev = torch.device(a.device); cuda = dev.type == "cuda"
if cuda and importlib.util.find_spec("timm"):
    import timm; model, name, bs, px = timm.create_model("resnet18"), "timm resnet18", 128, 224
else:
    name, bs, px = "small convnet", (128 if cuda else 8), (224 if cuda else 32)
    model = c.Sequential(c.Conv2d(3, 64, 3, 2, 1), c.BatchNorm2d(64), c.ReLU(), c.Conv2d(64, 256, 3, 2, 1),
                         c.ReLU(), c.AdaptiveAvgPool2d(1), c.Flatten(), c.Linear(256, 1000))
model = model.to(dev, memory_format=torch.channels_last); opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.empty(bs, 3, px, px, device=dev, memory_format=torch.channels_last).normal_()
y = torch.randint(0, 1000, (bs,), device=dev)
def step():
    with torch.autocast(dev.type, dtype=torch.bfloat16):
        loss = c.functional.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True); loss.backward(); opt.step()
for _ in range(3): step()
sync = torch.cuda.synchronize if cuda else (lambda: None)
sync(); t0 = time.time(); n = 0
say(event="train_start", t=t0, model=name, batch=bs, px=px,
    device=torch.cuda.get_device_name(dev) if cuda else "cpu", torch=torch.__version__)
while time.time() < t0 + a.seconds:
    step(); n += 1
    if n % 10 == 0: sync()
sync(); t1 = time.time()
say(event="train_end", t=t1, steps=n, images_per_s=n * bs / (t1 - t0),
    max_mem_bytes=torch.cuda.max_memory_allocated() if cuda else None)
'''

def log(msg):
    print(f"[gpu_listener_check +{time.monotonic() - T0:5.1f}s] {msg}", file=sys.stderr, flush=True)

def sh(argv, timeout=10):
    """stdout of a command, or None when it fails."""
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        return r.stdout.strip() if r.returncode == 0 else None
    except (OSError, subprocess.SubprocessError) as e:
        return log(f"{argv[0]}: {e}")
mean = lambda xs: statistics.fmean(xs) if xs else None
no_gpu = lambda reason: {"status": "no GPU", "reason": reason}

class Report:
    """The JSON file, rewritten whole (through a temp file) after each step."""
    def __init__(self, path):
        self.path, self.data = Path(path), {"checks": "gpu listener (issue 29 section 3)", "steps": {}}
    def put(self, step, value):
        self.data["steps"][step], tmp = value, self.path.with_suffix(".tmp")
        tmp.parent.mkdir(parents=True, exist_ok=True), tmp.write_text(json.dumps(self.data, indent=1, default=str))
        tmp.replace(self.path)

def write_plan(path, rows):
    """A CSV plan of rows (workload, name, devices, collocation, listeners, file, params), train.py beside it."""
    path.parent.mkdir(exist_ok=True)
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows([("Experiment", "Workload", "Name", "Devices", "Collocation", "Listeners", "File",
                                  "Params")] + [("gpu-listener",) + tuple(r) for r in rows])
    (path.parent / "train.py").write_text(TRAIN_PY)

class CpuWatch(threading.Thread):
    """CPU seconds of a process and of its threads (tid, name) every 0.25 s: the first and last seen."""
    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.halt, self.first, self.last = pid, threading.Event(), {}, {}
        self.start()
    def run(self):
        base = f"/proc/{self.pid}"
        while True:
            try:
                now = time.monotonic()
                for tid in os.listdir(f"{base}/task"):  # schedstat: ns on a CPU
                    key = (tid, open(f"{base}/task/{tid}/comm").read().strip())
                    self.last[key] = (now, int(open(f"{base}/task/{tid}/schedstat").read().split()[0]) / 1e9)
                    self.first.setdefault(key, self.last[key])
            except OSError:  # a thread or the process ended: the next round sees what is left
                pass
            if self.halt.wait(0.25):
                return
    def summary(self, comm, interval):
        """% of one core of the threads named comm* (and of all), each from first to last sight."""
        def use(keys):
            cpu = sum(self.last[k][1] - self.first[k][1] for k in keys)
            return cpu, max((self.last[k][0] - self.first[k][0] for k in keys), default=0.0)
        (cpu, wall), (all_cpu, all_wall) = use([k for k in self.last if k[1].startswith(comm)]), use(list(self.last))
        if wall < 1.0:
            return {"status": "not measured", "reason": f"no thread {comm}* seen for 1 s"}
        return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 5), "percent_of_one_core": round(100 * cpu / wall, 4),
                "ms_per_round": round(1000 * cpu / max(1.0, wall / interval), 3),
                "whole_runner_percent_of_one_core": round(100 * all_cpu / all_wall, 3)}

class Smi(threading.Thread):
    """`nvidia-smi --query-gpu ... -lms 1000` of GPU 0, each row with its time."""
    def __init__(self):
        super().__init__(daemon=True)
        argv = ["nvidia-smi", "-i", "0", "--query-gpu=" + ",".join(SMI_FIELDS), "--format=csv,noheader,nounits", "-lms",
                "1000"]  # line-buffered where stdbuf is there: rows arrive as they are made
        self.p, self.rows = subprocess.Popen((["stdbuf", "-oL"] if shutil.which("stdbuf") else []) + argv,
                                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True), []
    def run(self):
        for line in self.p.stdout:
            got, parts = time.time(), [s.strip() for s in line.split(",")]
            if len(parts) != len(SMI_FIELDS):
                continue
            try:  # "2025/01/14 10:11:12.345", local time
                t = time.mktime(time.strptime(parts[0][:19], "%Y/%m/%d %H:%M:%S")) + float("0" + parts[0][19:])
            except ValueError:
                t = got
            row = {"t": t if abs(t - got) < 5 else got}  # a clock that disagrees: the arrival time
            row |= {k: float(v) if v.replace(".", "", 1).isdigit() else None for k, v in zip(SMI_FIELDS[1:], parts[1:])}
            self.rows.append(row)
    def stop(self):  # the reader thread ends with nvidia-smi's output
        return self.p.terminate(), self.p.wait(5), self.join(5)

CHILDREN = []  # every runner started, stopped at exit if still there
def run_batchcast(a, plan, limit, env=None):
    """Starts `batchcast run PLAN` (store: runs.sqlite beside it); returns (Popen,
    wait). wait() stops it (SIGTERM, then SIGKILL) once `limit` s have passed."""
    logf, end = open(plan.with_suffix(".log"), "w"), time.monotonic() + limit
    p = subprocess.Popen([a.batchcast_bin, "run", str(plan), "--store", str(plan.parent / "runs.sqlite"),
                          "--interval", str(a.interval), "--grace", "2"], stdout=logf, stderr=subprocess.STDOUT,
                         env=dict(os.environ, BATCHCAST_PYTHON=a.python, **(env or {})))
    CHILDREN.append(p)
    def wait():
        for sig, grace in ((None, max(0.1, end - time.monotonic())), (signal.SIGTERM, 6), (signal.SIGKILL, 5)):
            if sig:
                log(f"{plan.parent.name}: over its {limit:.0f} s, sending signal {sig}")
                p.send_signal(sig)
            try:
                p.wait(grace)
                break
            except subprocess.TimeoutExpired:
                pass
        logf.close()
        return {"exit_code": p.returncode, "timed_out": time.monotonic() > end,
                "runner_output_tail": plan.with_suffix(".log").read_text(errors="replace")[-1500:]}
    return p, wait

def read_store(store):
    """Each run by name: status, message, events, stdout JSON lines, metrics."""
    db = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    q = lambda sql, *args: db.execute(sql, args).fetchall()
    runs = {}
    for rid, name, status, msg in q("SELECT id, name, status, message FROM runs ORDER BY id"):
        out, err = (b"".join(r[0] for r in q("SELECT data FROM logs WHERE run_id=? AND stream=? ORDER BY seq",
                                             rid, s)).decode(errors="replace") for s in ("stdout", "stderr"))
        metrics = {}
        for key, ts, v in q("SELECT key, ts_ms, value FROM metrics WHERE run_id=? ORDER BY ts_ms", rid):
            metrics.setdefault(key, []).append((ts / 1000, v))
        runs[name] = {"status": status, "message": msg, "metrics": metrics,
                      "lines": [json.loads(l) for l in out.splitlines() if l.startswith('{"event": ')],  # train.py's
                      "stderr_tail": err[-800:] if status != "FINISHED" else "",
                      "events": [f"{s}: {m}" for s, m in q("SELECT source, message FROM events WHERE run_id=?", rid)]}
    db.close()
    return runs
brief = lambda run: {k: run[k] for k in ("status", "message", "events", "stderr_tail")} | {"tail": run["lines"][-2:]}

def step_env(a, rep, work, limit):
    q = "name,compute_cap,driver_version,mig.mode.current,compute_mode,power.limit,clocks.max.sm"
    smi = None if a.cpu_rehearsal else sh(["nvidia-smi", "-i", "0", f"--query-gpu={q}", "--format=csv,noheader"])
    a.env = {"mode": "cpu-rehearsal" if a.cpu_rehearsal else "gpu", "batchcast_bin": a.batchcast_bin,
             "batchcast_version": sh([a.batchcast_bin, "--version"]), "python": a.python,
             "host": os.uname().nodename, "cores": os.cpu_count(),
             "mps_control": shutil.which("nvidia-cuda-mps-control"),
             "gpu": dict(zip(q.split(","), [s.strip() for s in smi.split(",")])) if smi else no_gpu(
                 "--cpu-rehearsal" if a.cpu_rehearsal else "nvidia-smi --query-gpu failed")}
    rep.put("env", a.env)

def step_mig(a, rep, work, limit):
    gpu, listing = a.env["gpu"], "" if a.cpu_rehearsal else sh(["nvidia-smi", "-L"]) or ""
    inst = [l.split("MIG ", 1)[1].split()[0] for l in listing.splitlines() if l.strip().startswith("MIG ")]
    profile, plan = (inst[0] if inst else "1g.10gb"), work / "mig" / "plan.csv"
    write_plan(plan, [("mig", "on-instance", "0", profile, "gpu", "train.py", f"--seconds 3 --device {a.device}")])
    res = {"profile": profile, "nvidia_smi_L": listing, **run_batchcast(a, plan, limit)[1]()}
    run = read_store(plan.parent / "runs.sqlite").get("on-instance")
    res["run"], msg = run and brief(run), (run or {}).get("message") or ""
    if a.cpu_rehearsal or "status" in gpu:
        out = no_gpu(f"{'--cpu-rehearsal' if a.cpu_rehearsal else 'no GPU'}; the runner said: {msg}")
    elif gpu.get("mig.mode.current") != "Enabled" or not inst:
        refused = bool(run and run["status"] == "FAILED" and ("MIG is off" in msg or "nvidia-smi mig" in msg))
        out = {"status": "untested", "reason": f"MIG mode is {gpu.get('mig.mode.current')} on GPU 0, no MIG "
               "instance; making one changes the GPU's settings, which this check never does",
               "refusal_names_the_fix": refused, "pass": refused}
    else:  # MIG on, an instance there: the job must run on it
        cvd = next((l["cuda_visible_devices"] for l in (run or {}).get("lines", []) if l["event"] == "start"), 0) or ""
        out = {"status": "tested", "pass": bool(run and run["status"] == "FINISHED" and cvd.startswith("MIG-")),
               "cuda_visible_devices": cvd}
    rep.put("mig", out | {"detail": res})

def compare_gpu(runs, smi_rows):
    """NVML listener vs nvidia-smi means over the jobs' common training window."""
    trainers = [r for n, r in runs.items() if n.startswith("trainer")]
    starts = [l["t"] for r in trainers for l in r["lines"] if l.get("event") == "train_start"]
    ends = [l["t"] for r in trainers for l in r["lines"] if l.get("event") == "train_end"]
    g = trainers[0]["metrics"] if trainers else {}
    series = lambda k: g.get(f"gpu/0/{k}", [])
    lo, hi, window = (max(starts) + 1, min(ends) - 1, "common training window, 1 s in from each end") \
        if len(starts) == len(ends) == 2 else (0, 0, "")
    if hi - lo < 5:  # too short, or a job failed: whatever both sampled
        ts, st = [t for t, _ in series("power_w")], [r["t"] for r in smi_rows]
        lo, hi = max(min(ts, default=0), min(st, default=0)), min(max(ts, default=0), max(st, default=0))
        window = "overlap of both samplers (no usable training window)"
    res = {"window": window, "window_s": round(max(0, hi - lo), 1), "metrics": {}}
    for name, (key, scale, field, slack) in COMPARE.items():
        ours = [v * scale for t, v in series(key) if lo <= t <= hi]
        theirs = [r[field] for r in smi_rows if lo <= r["t"] <= hi and r[field] is not None]
        m1, m2 = mean(ours), mean(theirs)
        row = res["metrics"][name] = {"nvml_listener_mean": m1, "nvidia_smi_mean": m2, "n": [len(ours), len(theirs)]}
        rel = None if None in (m1, m2) else abs(m1 - m2) / max(abs(m1), abs(m2), 1e-12)  # None: no samples
        row |= {"rel_diff": rel and round(rel, 4), "pass": rel is not None and (rel <= 0.1 or abs(m1 - m2) <= slack)}
    res |= {"pass": all(r["pass"] for r in res["metrics"].values()),
            "tolerance": "means within 10% (or 1 W, 1 %, 16 MiB, 15 MHz apart)",
            "other_gpu_keys": sorted(k for k in g if k.startswith("gpu/") and "DCGM" not in k)}
    gpm = {n: {k.split("/")[-1]: [v for t, v in pts if lo <= t <= hi] for k, pts in r["metrics"].items()
               if "DCGM_FI_PROF" in k} for n, r in runs.items() if n.startswith("trainer")}  # per run: both see GPU 0
    res["gpm"] = {n: {k: {"mean": mean(v), "min": min(v, default=None), "max": max(v, default=None), "n": len(v)}
                      for k, v in d.items()} for n, d in gpm.items()}
    sm = [d.get("DCGM_FI_PROF_SM_ACTIVE", {}).get("mean") for d in res["gpm"].values()]
    res["gpm_plausible"] = bool(sm and all(m and 0.05 < m <= 1.0 and abs(m - sm[0]) <= 0.05 * sm[0] for m in sm)
                                and all(0 <= x <= 1.0001 for d in gpm.values() for v in d.values() for x in v))
    return res

def step_collocated(a, rep, work, limit):
    dev, gpu = ("" if a.cpu_rehearsal else "0"), "status" not in a.env["gpu"]
    plan, idle = work / "collocated" / "plan.csv", work / "overhead" / "plan.csv"
    params = f"--seconds {a.train_seconds} --device {a.device}"
    write_plan(plan, [("train", f"trainer-{i}", dev, "-", "gpu process system", "train.py", params) for i in (1, 2)])
    write_plan(idle, [("idle", "sleeper", dev, "-", "gpu", "sleep", str(a.overhead_seconds))])
    (smi := Smi() if gpu else None) and smi.start()
    p1, wait1 = run_batchcast(a, plan, limit)
    p2, wait2 = run_batchcast(a, idle, min(limit, a.overhead_seconds + 20))
    w1, w2 = CpuWatch(p1.pid), CpuWatch(p2.pid)
    r1, r2 = wait1(), wait2()
    smi and smi.stop()
    w1.halt.set(), w2.halt.set(), w1.join(), w2.join()
    runs, sleeper = read_store(plan.parent / "runs.sqlite"), read_store(idle.parent / "runs.sqlite").get("sleeper")
    res = {"runner": r1, "runs": {n: brief(r) for n, r in runs.items()},
           "key_groups": {n: sorted({k.split("/")[0] for k in r["metrics"]}) for n, r in runs.items()}}
    if gpu:
        res["nvml_vs_nvidia_smi"] = compare_gpu(runs, smi.rows)
        res["gpm"], cc = res["nvml_vs_nvidia_smi"].pop("gpm"), a.env["gpu"].get("compute_cap", "0")
        res["gpm_expected (Hopper+)"] = float(cc) >= 9.0 if cc.replace(".", "", 1).isdigit() else cc
    else:
        why = next((e for r in runs.values() for e in r["events"] if e.startswith("gpu:")), "no gpu event")
        res["nvml_vs_nvidia_smi"] = res["gpm"] = no_gpu(f"{'--cpu-rehearsal' if a.cpu_rehearsal else 'no GPU'}; {why}")
    res["runs_compare"] = sh([a.batchcast_bin, "runs", "compare", "--store", str(plan.parent / "runs.sqlite")], 20)
    rep.put("collocated", res)
    over = {"how": "CPU time of the runner's batchcast-listeners thread (schedstat), first to last sight; "
                   "job: sleep, listener: gpu alone, 1 Hz; its own runner, beside the collocated step",
            "gpu_listener_idle_job": w2.summary("batchcast-liste", a.interval),
            "collocated_listeners_2_training_jobs": w1.summary("batchcast-liste", a.interval),
            "sleeper": sleeper and brief(sleeper), "runner": r2}
    if gpu:
        over["pass"] = over["gpu_listener_idle_job"].get("percent_of_one_core", 100) < 1.0
    else:
        over["gpu_listener_idle_job"] = no_gpu("no NVML here, so the gpu listener records nothing; measured anyway "
                                               "(the mechanism only): " + json.dumps(over["gpu_listener_idle_job"]))
    rep.put("overhead", over)

def mps_processes():
    """(pid, program) of every live nvidia-cuda-mps-* process."""
    def exe(pid):
        try:
            return open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")[0].decode(errors="replace")
        except OSError:
            return ""
    return {(p, os.path.basename(e)) for p in os.listdir("/proc") if p.isdigit() and "nvidia-cuda-mps" in (e := exe(p))}
def step_mps(a, rep, work, limit):
    plan, params = work / "mps" / "plan.csv", f"--seconds {a.mps_seconds} --device {a.device}"
    write_plan(plan, [("mps", f"mps-{i}", "0", "MPS", "gpu", "train.py", params) for i in (1, 2)])
    (pipe := plan.parent / "pipe").mkdir(), (logs := plan.parent / "log").mkdir()
    before, seen = mps_processes(), set()
    p, wait = run_batchcast(a, plan, limit, {"CUDA_MPS_PIPE_DIRECTORY": str(pipe), "CUDA_MPS_LOG_DIRECTORY": str(logs)})
    while p.poll() is None and time.monotonic() < T0 + a.budget:
        seen |= mps_processes() - before
        time.sleep(0.5)
    res, t = wait(), time.monotonic()
    while mps_processes() - before and time.monotonic() < t + 5:  # the daemon takes a moment to go after `quit`
        time.sleep(0.5)
    runs, left = read_store(plan.parent / "runs.sqlite"), sorted(n for _, n in mps_processes() - before)
    if left and a.env["mps_control"]:  # never leave a daemon behind
        sh(["sh", "-c", f"echo quit | CUDA_MPS_PIPE_DIRECTORY={pipe} nvidia-cuda-mps-control"])
    res |= {"runs": {n: brief(r) for n, r in runs.items()}, "mps_processes_seen": sorted(n for _, n in seen),
            "left_after_runner (stopped here)": left,
            "logs": {f.name: f.read_text(errors="replace")[-1000:] for f in logs.glob("*.log")}}
    said = "the runner said: " + "; ".join(sorted({r["message"] or "" for r in runs.values()}))
    if a.cpu_rehearsal or not a.env["mps_control"]:
        out = no_gpu(f"--cpu-rehearsal; {said}") if a.cpu_rehearsal else {
            "status": "untested", "reason": f"nvidia-cuda-mps-control is not on PATH; {said}"}
    else:
        ok = len(runs) == 2 and all(r["status"] == "FINISHED" for r in runs.values())
        server = any("server" in n for n in res["mps_processes_seen"])
        gone = not left
        out = {"status": "tested", "jobs_finished": ok, "mps_server_seen": server, "daemon_stopped_after": gone,
               "pass": ok and server and gone}
    rep.put("mps", out | {"detail": res})

def summary(step):
    """A step's progress line: verdicts, its runs' statuses, its comparisons' relative differences."""
    out = {k: v for k, v in step.items() if k in ("status", "pass")}
    out |= {n: r["status"] for n, r in step.get("runs", {}).items()} | {k: step[k] for k in ("gpu",) if k in step}
    for k, v in step.items():
        if isinstance(v, dict) and {"pass", "status", "percent_of_one_core"} & set(v):
            out[k] = {x: v[x] for x in ("status", "pass", "percent_of_one_core", "gpm_plausible") if x in v} | {
                m: r.get("rel_diff") for m, r in v.get("metrics", {}).items()}
    return out

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batchcast-bin", default=os.environ.get("BATCHCAST_BIN"))
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "listener.json"))
    ap.add_argument("--budget", type=float, default=90.0, help="seconds for all steps together (default 90)")
    ap.add_argument("--cpu-rehearsal", action="store_true", help="no GPU: CPU jobs of a few seconds")
    ap.add_argument("--python", default=os.environ.get("BATCHCAST_PYTHON", sys.executable), help="runs the jobs")
    ap.add_argument("--interval", type=float, default=1.0, help="listener period, s")
    durations = (("train", 30, 3, "each collocated job"), ("overhead", 20, 4, "the sleeping job"),
                 ("mps", 8, 2, "each MPS job"))
    for k, gpu, cpu, what in durations:
        ap.add_argument(f"--{k}-seconds", type=float, help=f"{what} (default {gpu}; rehearsal {cpu})")
    a = ap.parse_args()
    r, a.device = a.cpu_rehearsal, ("cpu" if a.cpu_rehearsal else "cuda")
    for k, gpu, cpu, _ in durations:
        setattr(a, f"{k}_seconds", getattr(a, f"{k}_seconds") or float(cpu if r else gpu))
    a.python = os.path.abspath(a.python) if os.sep in a.python else a.python  # jobs start in the plan's dir
    local = ROOT / "target" / "release" / "batchcast"  # else: as given, this checkout's release build, on PATH
    a.batchcast_bin = a.batchcast_bin or (str(local) if local.exists() else shutil.which("batchcast"))
    torch = "import importlib.util as u, sys; sys.exit(u.find_spec('torch') is None)"
    for bad, why in ((not a.batchcast_bin or not os.access(a.batchcast_bin, os.X_OK),
                      f"no batchcast binary at {a.batchcast_bin or '(none given)'}: pass --batchcast-bin PATH or "
                      "set BATCHCAST_BIN; build it: cargo build --release -p batchcast-cli (target/release/batchcast)"),
                     (not r and not shutil.which("nvidia-smi"), "nvidia-smi is not on PATH: no GPU? (--cpu-rehearsal)"),
                     (not r and (not shutil.which(a.python) or subprocess.run([a.python, "-c", torch]).returncode),
                      f"{a.python} has no torch (pass --python or set BATCHCAST_PYTHON)")):
        if bad:
            sys.exit(f"gpu_listener_check: {why}")
    rep, left = Report(a.out), lambda: T0 + a.budget - time.monotonic()
    rep.data |= {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "budget_s": a.budget, "finished": False}
    steps = [("env", step_env, 15, 1), ("mig", step_mig, 25, 3),  # (name, function, its limit, the least it needs)
             ("collocated", step_collocated, a.train_seconds + 45, a.train_seconds + 5),
             ("mps", step_mps, a.mps_seconds + 35, a.mps_seconds + 5)]
    log(f"{'CPU rehearsal' if r else 'GPU'}, budget {a.budget:.0f} s; JSON -> {a.out}")
    try:
        with tempfile.TemporaryDirectory(prefix="gpu-listener-") as tmp:
            for name, fn, limit, need in steps:
                log(f"{name}: up to {min(limit, left()):.0f} s")
                try:
                    if left() < need:
                        raise TimeoutError(f"{left():.0f} s of --budget left, the step needs {need:.0f}")
                    fn(a, rep, Path(tmp), min(limit, left()))
                except Exception as e:  # evidence, not a crash: the other steps still run
                    bad = "skipped" if isinstance(e, TimeoutError) else "error"
                    rep.put(name, {"status": bad, "reason": f"{type(e).__name__}: {e}"})
                    if name == "env":
                        a.env = {"gpu": no_gpu(f"env failed: {e}"), "mps_control": None}
                log(f"{name}: {json.dumps(summary(rep.data['steps'][name]))}")
    finally:  # a step that failed half-way leaves no runner behind
        [p.send_signal(signal.SIGTERM) for p in CHILDREN if p.poll() is None]
    rep.data |= {"finished": True, "elapsed_s": round(time.monotonic() - T0, 1)}
    rep.put("env", rep.data["steps"]["env"])
    log(f"done in {time.monotonic() - T0:.0f} s: {a.out}")

if __name__ == "__main__":
    main()
