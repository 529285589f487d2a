#!/usr/bin/env python3
"""Per-job completion times of `batchcast sim` against the published Java
simulator (github aakash-sharma/cluster-sim) on its own small traces.

    python3 bench/sim_fidelity.py --cluster-sim PATH [--batchcast BIN] [--out DIR]

PATH is a checkout of cluster-sim at commit 2953d56 (the last one whose
slowdowns come from the trace rather than from an external ASTRA-sim run);
$CLUSTER_SIM works too. Its sources are compiled with plain `javac` into a
temporary directory (json-simple and commons-collections4 on the class path:
Debian's libjson-simple-java and libcommons-collections4-java; Themis, the
one scheduler that needs Gurobi, is left out). Traces that 2953d56 does not
have (the sense_* ones) are read with `git show REV:path` from the same
checkout (`--traces-rev`, default its newest commit 4cd660e), or from
`--traces-dir`.

For every case (trace x cluster file) and policy both simulators run; the
per-job JCT (finish - arrival) is compared, for batchcast's two models:
`--model bidding` (the published one) and `--model gang` (its own). Written
to DIR: summary.csv and summary.md, one row per case x policy x model:
median and max relative JCT error over the jobs, both makespans; with
--per-job FILE also one row per job. Standard library only.
"""

import argparse
import csv
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PUBLISHED = "2953d56"
JARS = ["/usr/share/java/json-simple.jar", "/usr/share/java/commons-collections4.jar"]

# Java policy name -> batchcast policy name (the published "SRSF" ranks by
# service received so far, which batchcast calls las).
# Its "Tiresias" is also least attained service (GPU time received, no
# queue levels), so it is compared with both tiresias and las.
POLICIES = [("SJF", "sjf"), ("SRSF", "las"), ("Tiresias", "tiresias"), ("Tiresias", "las"),
            ("Gandiva", "gandiva")]
# batchcast's models: bidding is the published one, gang its own.
MODELS = ["bidding", "gang"]
# batchcast policies with no counterpart in the Java code at 2953d56.
UNMATCHED = ["fifo", "dally"]

# (trace, cluster file, iteration_granularity when the cluster file has none,
# should_use_config as published: False sets it to "true" so that both
# models run the shape the file writes)
CASES = [
    ("small_debug.json", "debug.json", "1", False),
    ("small_debug.json", "test.json", "1", False),
    ("online_workload_comparison.json", "synthetic_tiresias.json", "100", False),
    ("sense_50jobs_0start-max8.json", "synthetic_tiresias.json", "1000000", False),
    ("sense_100jobs_0start-max8.json", "synthetic_tiresias.json", "1000000", False),
    ("sense_500jobs_0start-max8.json", "synthetic_tiresias.json", "1000000", False),
    ("small_debug.json", "test.json", "1", True),
    ("online_workload_comparison.json", "synthetic_tiresias.json", "100", True),
]


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, text=True, capture_output=True, **kw)


def build_java(src, work):
    """Compile the checkout's sources (less Themis) into work/classes."""
    tree = work / "src"
    shutil.copytree(src / "src" / "main" / "java", tree)
    for f in tree.rglob("ThemisInterJobScheduler.java"):
        f.unlink()
    fac = next(tree.rglob("InterJobSchedulerFactory.java"))
    text = fac.read_text()
    text = re.sub(r'\s*case "Themis":\s*return new ThemisInterJobScheduler\(\);', "", text)
    fac.write_text(text)
    classes = work / "classes"
    classes.mkdir()
    sources = [str(p) for p in tree.rglob("*.java")]
    cp = ":".join(JARS)
    sh(["javac", "-nowarn", "-encoding", "UTF-8", "-cp", cp, "-d", str(classes)] + sources)
    return classes


def trace_file(checkout, traces_dir, rev, name, work):
    for d in (checkout / "configuration" / "jobs", traces_dir):
        if d is not None and (d / name).exists():
            return d / name
    out = work / name
    body = sh(["git", "-C", str(checkout), "show", f"{rev}:configuration/jobs/{name}"]).stdout
    out.write_text(body)
    return out


def cluster_file(checkout, name, policy, granularity, as_published, work):
    """The cluster file as published, with the policy set, an
    iteration_granularity where it has none (2953d56 cannot run without one)
    and, unless as_published, should_use_config "true" (without it the Java
    code ignores the shape and builds a fixed heterogeneous cluster, which
    only batchcast's bidding model builds too)."""
    c = json.loads((checkout / "configuration" / "cluster" / name).read_text())
    c["cluster_policy"] = policy
    c.setdefault("iteration_granularity", granularity)
    if not as_published:
        c["should_use_config"] = "true"
    shape = "published" if as_published else "shape"
    out = work / f"{Path(name).stem}-{policy}-g{c['iteration_granularity']}-{shape}.json"
    out.write_text(json.dumps(c, indent=1))
    return out


def run_java(classes, cluster, trace):
    cp = ":".join([str(classes)] + JARS)
    r = sh(["java", "-Xss16m", "-cp", cp, "com.wisr.mlsched.Simulation", str(cluster), str(trace)])
    jct = {m.group(1): float(m.group(2))
           for m in re.finditer(r"^Job (\S+) ran for time: (\S+)$", r.stdout, re.M)}
    span = re.search(r"^Makespan: (\S+)$", r.stdout, re.M)
    return jct, float(span.group(1)) if span else float("nan")


def run_batchcast(bin_, cluster, trace, policies, model, out, extra=()):
    sh([bin_, "sim", "--trace", str(trace), "--format", "dally", "--cluster", str(cluster),
        "--policy", ",".join(policies), "--model", model, "--out", str(out), *extra])
    res = {}
    for p in policies:
        with open(out / f"{p}.jobs.csv") as f:
            rows = list(csv.DictReader(f))
        jct = {r["job_id"]: float(r["jct"]) for r in rows}
        first = min(float(r["arrival"]) for r in rows)
        span = max(float(r["finish"]) for r in rows) - first
        res[p] = (jct, span)
    return res


def rel(a, b):
    return abs(a - b) / b if b > 0 else (0.0 if a == b else float("inf"))


def add_run_args(ap):
    """The options both comparisons take."""
    ap.add_argument("--batchcast", default=None,
                    help="batchcast binary (default the newer of target/release and target/debug)")
    ap.add_argument("--out", default=str(ROOT / "bench/results/sim-fidelity"))
    ap.add_argument("--cases", default="all", help="comma-separated case numbers (1-based)")
    ap.add_argument("--per-job", default=None, help="also write one row per job to this CSV")


def prepare(a, all_cases):
    """The batchcast binary, the cases chosen and the output folder (made);
    exits naming what is missing."""
    built = [p for p in (ROOT / "target" / b / "batchcast" for b in ("release", "debug"))
             if p.exists()]
    bin_ = a.batchcast or (str(max(built, key=lambda p: p.stat().st_mtime)) if built else None)
    if bin_ is None:
        sys.exit("no batchcast binary: run `cargo build --release -p batchcast-cli` or give --batchcast")
    for j in JARS:
        if not Path(j).exists():
            sys.exit(f"{j} is missing: apt-get install libjson-simple-java libcommons-collections4-java")
    if shutil.which("javac") is None:
        sys.exit("javac is missing: apt-get install openjdk-17-jdk-headless")
    cases = all_cases if a.cases == "all" else [all_cases[int(i) - 1] for i in a.cases.split(",")]
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    return bin_, cases, out


SUMMARY_HEAD = ["case", "java policy", "batchcast model", "batchcast policy", "java jobs",
                "batchcast jobs", "median JCT rel. error", "max JCT rel. error", "java makespan",
                "batchcast makespan", "makespan rel. error"]


def write_summary(out, rows):
    """DIR/summary.csv and summary.md, one row per case x policy x model."""
    with open(out / "summary.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(SUMMARY_HEAD)
        w.writerows(rows)
    with open(out / "summary.md", "w") as f:
        f.write("| " + " | ".join(SUMMARY_HEAD) + " |\n|" + "---|" * len(SUMMARY_HEAD) + "\n")
        for r in rows:
            f.write("| " + " | ".join(str(x) for x in r) + " |\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cluster-sim", default=os.environ.get("CLUSTER_SIM"),
                    help="checkout of aakash-sharma/cluster-sim at 2953d56 ($CLUSTER_SIM)")
    ap.add_argument("--traces-rev", default="4cd660e",
                    help="commit to read traces missing from the checkout from")
    ap.add_argument("--traces-dir", default=None,
                    help="folder to read traces missing from the checkout from (before --traces-rev)")
    add_run_args(ap)
    a = ap.parse_args()
    if not a.cluster_sim:
        sys.exit("give --cluster-sim PATH (or set CLUSTER_SIM) to a checkout of cluster-sim")
    checkout = Path(a.cluster_sim).resolve()
    if (checkout / ".git").exists():
        rev = sh(["git", "-C", str(checkout), "rev-parse", "HEAD"]).stdout.strip()
        if not rev.startswith(PUBLISHED):
            print(f"warning: {checkout} is at {rev[:7]}, not {PUBLISHED}: from 412cc49 on the "
                  "Java code runs ASTRA-sim for every multi-GPU placement", file=sys.stderr)
    bin_, cases, out = prepare(a, CASES)
    rows, summary = [], []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        classes = build_java(checkout, work)
        for n, (tname, cname, gran, as_published) in enumerate(cases, 1):
            trace = trace_file(checkout, a.traces_dir and Path(a.traces_dir), a.traces_rev, tname, work)
            bc_out = work / f"bc{n}"
            # One cluster file serves batchcast (its policy field is not used there).
            bc_cluster = cluster_file(checkout, cname, "Tiresias", gran, as_published, work)
            names = list(dict.fromkeys(b for _, b in POLICIES))
            ours = {"bidding": run_batchcast(bin_, bc_cluster, trace, names, "bidding", bc_out / "b"),
                    "gang": run_batchcast(bin_, bc_cluster, trace, names + UNMATCHED, "gang",
                                          bc_out / "g")}
            g = json.loads(bc_cluster.read_text())["iteration_granularity"]
            case = f"{tname} / {cname} (G={g}" + (", should_use_config as published)" if as_published else ")")
            java = {}
            for jp, bp in POLICIES:
                if jp not in java:
                    cj = cluster_file(checkout, cname, jp, gran, as_published, work)
                    java[jp] = run_java(classes, cj, trace)
                jjct, jspan = java[jp]
                for model in MODELS:
                    if model == "bidding" and (jp, bp) == ("Tiresias", "las"):
                        continue
                    bjct, bspan = ours[model][bp]
                    errs = []
                    for jid, jv in sorted(jjct.items(), key=lambda kv: int(kv[0])):
                        bv = bjct.get(jid, float("nan"))
                        e = rel(bv, jv)
                        errs.append(e)
                        rows.append([case, jp, model, bp, jid, f"{jv:.3f}", f"{bv:.3f}", f"{e:.6f}"])
                    summary.append([case, jp, model, bp, len(jjct), len(bjct),
                                    f"{statistics.median(errs):.6f}", f"{max(errs):.6f}",
                                    f"{jspan:.3f}", f"{bspan:.3f}", f"{rel(bspan, jspan):.6f}"])
                    print(" | ".join(str(x) for x in summary[-1]), flush=True)
            for bp in UNMATCHED:
                bjct, bspan = ours["gang"][bp]
                summary.append([case, "-", "gang", bp, 0, len(bjct), "-", "-", "-", f"{bspan:.3f}", "-"])
    if a.per_job:
        with open(a.per_job, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["case", "java_policy", "batchcast_model", "batchcast_policy", "job_id",
                        "java_jct", "batchcast_jct", "rel_err"])
            w.writerows(rows)
    write_summary(out, summary)
    print(f"wrote {out}/summary.csv and summary.md" + (f", {a.per_job}" if a.per_job else ""))


if __name__ == "__main__":
    main()
