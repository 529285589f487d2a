#!/usr/bin/env python3
"""Dally vs Tiresias vs Gandiva (and FIFO) with `batchcast sim` on the
published delay-scheduling simulator's own traces (github
aakash-sharma/cluster-sim), with the stand-in network model, under normal
and congested networks: the paper's comparison (makespan, mean JCT,
communication overhead).

    python3 bench/sim_paper.py --cluster-sim PATH [--batchcast BIN] [--out DIR]

PATH is a checkout or a bare mirror of cluster-sim ($CLUSTER_SIM works
too); traces and the cluster file are read from it with `git show REV:path`
(`--rev`, default its newest commit 4cd660e). The traces compared are those
whose every record names a model (the Helios/SenseTime-derived sense_* and
sensetime-* files, whose slowdowns are the placeholders 0.6/0.8/0.7); each
runs with `--network standin` and, to show what depends on it, with the
trace's own slowdowns (`--network trace`). Written to DIR: summary.csv (one
row per trace x network x congestion x policy) and summary.md (Dally's
change against Tiresias and Gandiva per trace, best and median over the
traces). Standard library only.
"""

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REV = "4cd660e"
CLUSTER = "configuration/cluster/synthetic_tiresias.json"
POLICIES = ["dally", "tiresias", "gandiva", "fifo"]
NETWORKS = ["standin", "trace"]
# name -> extra flags. The published cluster file sets no congestion; the
# congested setting is batchcast's linear congestion model at 0.1 per extra
# job sharing a rack's cross-machine links or the cross-rack links.
CONGESTION = {
    "normal": [],
    "congested": ["--rack-congestion", "0.1", "--core-congestion", "0.1"],
}
HOUR = 3600.0


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, text=True, capture_output=True, **kw)


def git_show(repo, rev, path):
    """The file's text at rev, or None where the repository lacks it (the
    mirror has no blob for a few traces)."""
    r = subprocess.run(["git", "-C", str(repo), "show", f"{rev}:{path}"],
                       text=True, capture_output=True)
    return r.stdout if r.returncode == 0 else None


def published_traces(repo, rev, work, keep):
    """(name, path) of the traces at rev for which keep(records) holds,
    written under work."""
    names = sh(["git", "-C", str(repo), "ls-tree", "--name-only", f"{rev}:configuration/jobs"]).stdout
    out = []
    for name in sorted(names.split()):
        if not name.endswith(".json"):
            continue
        body = git_show(repo, rev, f"configuration/jobs/{name}")
        if body is None:
            print(f"skipped {name}: not in {repo}", file=sys.stderr)
            continue
        try:
            records = json.loads(body)
        except json.JSONDecodeError:
            print(f"skipped {name}: not JSON", file=sys.stderr)
            continue
        if isinstance(records, list) and records and keep(records):
            p = work / name
            p.write_text(body)
            out.append((name, p))
    return out


def names_a_model(records):
    return all(isinstance(r, dict) and r.get("model") for r in records)


def find_batchcast(given):
    if given:
        return given
    built = [p for p in (ROOT / "target" / b / "batchcast" for b in ("release", "debug"))
             if p.exists()]
    if built:
        return str(max(built, key=lambda p: p.stat().st_mtime))
    sys.exit("no batchcast binary: run `cargo build -p batchcast-cli` or give --batchcast")


def run_sim(bin_, trace, cluster, policies, flags):
    """Summaries by policy (batchcast sim --json) and its stderr."""
    r = sh([bin_, "sim", "--trace", str(trace), "--format", "dally", "--cluster", str(cluster),
            "--policy", ",".join(policies), "--json"] + flags)
    return {s["policy"]: s for s in json.loads(r.stdout)}, r.stderr


def change(new, old):
    """Relative change of new against old, in percent."""
    return 100.0 * (new - old) / old if old > 0 else float("nan")


def pct(x):
    return "-" if x != x else f"{x:+.1f}%"


def repo_arg(a):
    if not a.cluster_sim:
        sys.exit("give --cluster-sim PATH (or set CLUSTER_SIM) to a checkout or mirror of cluster-sim")
    return Path(a.cluster_sim).resolve()


def common_args(description, out):
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--cluster-sim", default=os.environ.get("CLUSTER_SIM"),
                    help="checkout or bare mirror of aakash-sharma/cluster-sim ($CLUSTER_SIM)")
    ap.add_argument("--rev", default=REV, help="commit to read traces and the cluster file from")
    ap.add_argument("--batchcast", default=None,
                    help="batchcast binary (default the newer of target/release and target/debug)")
    ap.add_argument("--out", default=str(ROOT / out))
    ap.add_argument("--traces", default=None, help="comma-separated trace names (default: all)")
    return ap


def setup(description, out):
    """Parsed arguments, the batchcast binary and the output folder."""
    a = common_args(description, out).parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    return a, find_batchcast(a.batchcast), out


def inputs(a, work, keep):
    """The cluster file and the traces for which keep(records) holds (those
    of --traces only, if given), written under work."""
    repo = repo_arg(a)
    cluster = work / "cluster.json"
    cluster.write_text(git_show(repo, a.rev, CLUSTER) or sys.exit(f"{CLUSTER} not at {a.rev}"))
    traces = published_traces(repo, a.rev, work, keep)
    if a.traces:
        want = set(a.traces.split(","))
        traces = [t for t in traces if t[0] in want]
    return cluster, traces


def sweep(doc, out_dir, keep, trace_rows, write_md):
    """The frame of a comparison: parses the arguments (the description is
    doc's first paragraph), gathers trace_rows(bin_, cluster, name, path)
    of each trace for which keep(records) holds, and writes the rows to
    summary.csv and, with write_md, summary.md under --out (default
    out_dir)."""
    a, bin_, out = setup(doc.split("\n\n")[0], out_dir)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        cluster, traces = inputs(a, Path(tmp), keep)
        for name, path in traces:
            rows += trace_rows(bin_, cluster, name, path)
    write_csv(out / "summary.csv", rows)
    write_md(out / "summary.md", rows)
    print(f"wrote {out}/summary.csv and summary.md")


def trace_rows(bin_, cluster, name, path):
    """One row per network x congestion x policy on the trace at path."""
    rows = []
    for net in NETWORKS:
        for cong, flags in CONGESTION.items():
            res, _ = run_sim(bin_, path, cluster, POLICIES, ["--network", net] + flags)
            for p in POLICIES:
                s = res[p]
                rows.append({"trace": name, "network": net, "congestion": cong,
                             "policy": p, "jobs": s["jobs"],
                             "makespan_h": s["makespan"] / HOUR,
                             "mean_jct_h": s["mean_jct"] / HOUR,
                             "p95_jct_h": s["p95_jct"] / HOUR,
                             "mean_queueing_h": s["mean_queueing"] / HOUR,
                             "comm_overhead_job_h": s["comm_overhead"] / HOUR,
                             "utilisation": s["utilisation"],
                             "preemptions": s["preemptions"]})
            d = res["dally"]
            print(f"{name} {net} {cong}: dally vs tiresias JCT "
                  f"{pct(change(d['mean_jct'], res['tiresias']['mean_jct']))}, "
                  f"vs gandiva {pct(change(d['mean_jct'], res['gandiva']['mean_jct']))}",
                  flush=True)
    return rows


def main():
    sweep(__doc__, "bench/results/sim-paper", names_a_model, trace_rows, write_md)


def write_csv(path, rows):
    if not rows:
        sys.exit(f"no rows to write to {path}: no simulation gave a result (see the errors above)")
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        for r in rows:
            w.writerow({k: f"{v:.4f}" if isinstance(v, float) else v for k, v in r.items()})


METRICS = [("makespan_h", "makespan"), ("mean_jct_h", "mean JCT"),
           ("comm_overhead_job_h", "comm. overhead")]


def write_md(path, rows):
    by = {(r["trace"], r["network"], r["congestion"], r["policy"]): r for r in rows}
    traces = list(dict.fromkeys(r["trace"] for r in rows))
    lines = []
    for net in NETWORKS:
        for cong in CONGESTION:
            lines.append(f"## network {net}, {cong}\n")
            lines.append("Dally's change against each baseline (negative: Dally better); "
                         "Dally's own figures in hours.\n")
            head = ["trace", "jobs", "Dally makespan", "Dally mean JCT", "Dally comm. (job-h)"]
            for base in ("tiresias", "gandiva", "fifo"):
                head += [f"vs {base}: {m}" for _, m in METRICS]
            lines.append("| " + " | ".join(head) + " |")
            lines.append("|---|" + "---:|" * (len(head) - 1))
            cols = {}
            for t in traces:
                d = by[(t, net, cong, "dally")]
                cells = [t, str(d["jobs"]), f"{d['makespan_h']:.1f}", f"{d['mean_jct_h']:.2f}",
                         f"{d['comm_overhead_job_h']:.1f}"]
                for base in ("tiresias", "gandiva", "fifo"):
                    b = by[(t, net, cong, base)]
                    for k, _ in METRICS:
                        c = change(d[k], b[k])
                        cols.setdefault((base, k), []).append(c)
                        cells.append(pct(c))
                lines.append("| " + " | ".join(cells) + " |")
            for label, agg in (("best (most negative)", min), ("median", statistics.median)):
                cells = [f"**{label}**", "", "", "", ""]
                for base in ("tiresias", "gandiva", "fifo"):
                    for k, _ in METRICS:
                        v = [x for x in cols[(base, k)] if x == x]
                        cells.append(pct(agg(v)) if v else "-")
                lines.append("| " + " | ".join(cells) + " |")
            lines.append("")
    Path(path).write_text("\n".join(lines))


if __name__ == "__main__":
    main()
