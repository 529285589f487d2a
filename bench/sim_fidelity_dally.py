#!/usr/bin/env python3
"""Per-job completion times of `batchcast sim --model bidding --policy dally`
against the published Java simulator's Dally (github aakash-sharma/cluster-sim
at 4cd660e, its newest commit) on its own small traces.

    python3 bench/sim_fidelity_dally.py --cluster-sim PATH [--batchcast BIN] [--out DIR]

PATH is any clone of cluster-sim (bare or not): the sources at --rev
(default 4cd660e) are read from it with `git archive` into a temporary
directory and compiled with plain `javac`, as bench/sim_fidelity.py does,
after three changes made there and nowhere else:

- the seam: from 412cc49 on, `IntraJobScheduler.getPlacementSlowdown`
  prices a multi-GPU placement by running the external ASTRA-sim binary
  (`astra_sim(dimVec, dimType)`, six call sites). Each call is replaced by a
  generated class, `BatchcastStandIn`, that returns the trace's own
  throughput fraction for the widest level the placement spans
  (`cross_rack_slowdown`, `cross_machine_slowdown`, `cross_slot_slowdown`,
  1 inside a slot): what the code at 2953d56 did, and what batchcast's
  bidding model does;
- Apache POI, which `JobStatistics` uses to write its per-job sheet, is not
  installed: four generated stand-in classes keep the cells and write the
  first sheet ("job-stats") as CSV where the .xlsx would go; the per-job
  end and arrival times are read from it;
- Themis (Gurobi) is left out.

The traces get an `arrival_time` equal to their `start_time` (at 4cd660e
the Java code reads `arrival_time` only). The Dally rows of DIR/summary.csv
(bench/sim_fidelity.py writes the others) are replaced, and summary.md
rewritten from it: median and max relative JCT error over the jobs, both
makespans; --per-job FILE writes one row per job. Standard library only.
"""

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sim_fidelity import (
    JARS,
    add_run_args,
    prepare,
    rel,
    run_batchcast,
    sh,
    write_summary,
)

REV = "4cd660e"

# (trace, racks, machines, slots, GPUs a slot, iteration_granularity,
# consolidate, delay timers: rack wait, network wait, history (in leases) or
# None for the published defaults). The shapes: the Dally configuration's
# (synthetic_dally_small_consolidate.json: 2 x 2 x 2 x 2) and, for the sense
# traces (jobs of up to 56 GPUs), synthetic_tiresias.json's (2 x 4 x 4 x 4).
# The granularity: 1000 as in the Dally configuration; 10^6 for the sense
# traces (jobs of up to 2.2e9 iterations), as bench/sim_fidelity.py uses.
# consolidate "true" as in the Dally configuration, and "false" (GPUs
# auctioned one at a time); the timers as published (1, 2) and tuned over a
# history of 100 leases.
TUNED = (-1, -1, 100)
CASES = [
    ("small_debug.json", 2, 2, 2, 2, 1000, True, None),
    ("small_debug.json", 2, 2, 2, 2, 1000, True, TUNED),
    ("small_debug.json", 2, 2, 2, 2, 1000, False, None),
] + [
    (f"sense_{n}jobs_0start-max8.json", 2, 4, 4, 4, 1000000, consolidate, timers)
    for n in (50, 100, 500)
    for consolidate, timers in ((True, None), (True, TUNED), (False, None))
]
# The Dally configuration the cluster values come from.
DALLY_CLUSTER = "configuration/cluster/synthetic_dally_small_consolidate.json"
# The ASTRA-sim inputs the Java code parses before the seam (the network
# file's intra-machine dimensions give slots and GPUs a slot).
NETWORK = "configuration/network/3d_sweep/Ring_FullyConnected_Ring_{g}g_{s}s.json"
SYSTEM = "configuration/system/3dim_sys.txt"
OVERHEAD = "astra-sim/workload/nw_overhead.csv"

STANDIN = """package com.wisr.mlsched.localsched;

import java.util.Set;
import com.wisr.mlsched.resources.GPU;
import com.wisr.mlsched.resources.GPULocation;

/** batchcast's stand-in for ASTRA-sim: the trace's throughput fraction of
 * the widest level a placement spans. */
final class BatchcastStandIn {
    static double fraction(Set<GPU> gpus, double slot, double machine, double rack) {
        GPULocation first = null;
        boolean racks = false, machines = false, slots = false;
        for (GPU g : gpus) {
            GPULocation l = g.getLocation();
            if (first == null) { first = l; continue; }
            racks |= l.getRackId() != first.getRackId();
            machines |= l.getMachineId() != first.getMachineId();
            slots |= l.getSlotId() != first.getSlotId();
        }
        return racks ? rack : machines ? machine : slots ? slot : 1.0;
    }
}
"""

POI = {
    "org/apache/poi/ss/usermodel/Cell.java": """package org.apache.poi.ss.usermodel;
public class Cell {
    private final java.util.List<String> row; private final int col;
    public Cell(java.util.List<String> row, int col) { this.row = row; this.col = col; }
    public void setCellValue(double v) { set(Double.toString(v)); }
    public void setCellValue(String v) { set(v); }
    private void set(String v) { while (row.size() <= col) row.add(""); row.set(col, v); }
}
""",
    "org/apache/poi/xssf/usermodel/XSSFRow.java": """package org.apache.poi.xssf.usermodel;
import org.apache.poi.ss.usermodel.Cell;
public class XSSFRow {
    final java.util.List<String> cells = new java.util.ArrayList<>();
    public Cell createCell(int i) { return new Cell(cells, i); }
}
""",
    "org/apache/poi/xssf/usermodel/XSSFSheet.java": """package org.apache.poi.xssf.usermodel;
public class XSSFSheet {
    final java.util.List<XSSFRow> rows = new java.util.ArrayList<>();
    public XSSFRow createRow(int i) { XSSFRow r = new XSSFRow(); rows.add(r); return r; }
}
""",
    "org/apache/poi/xssf/usermodel/XSSFWorkbook.java": """package org.apache.poi.xssf.usermodel;
public class XSSFWorkbook {
    private final java.util.List<XSSFSheet> sheets = new java.util.ArrayList<>();
    public XSSFSheet createSheet(String name) { XSSFSheet s = new XSSFSheet(); sheets.add(s); return s; }
    public void write(java.io.OutputStream out) throws java.io.IOException {
        StringBuilder b = new StringBuilder();
        for (XSSFRow r : sheets.get(0).rows) b.append(String.join(",", r.cells)).append('\\n');
        out.write(b.toString().getBytes("UTF-8"));
    }
}
""",
}


def git_show(repo, rev, path):
    return subprocess.run(["git", "-C", str(repo), "show", f"{rev}:{path}"], check=True,
                          capture_output=True).stdout


def build_java(repo, rev, work):
    """The sources at rev, with the seam replaced, POI stood in for and
    Themis left out, compiled into work/classes."""
    tar = subprocess.run(["git", "-C", str(repo), "archive", rev, "src/main/java"], check=True,
                         capture_output=True).stdout
    with tarfile.open(fileobj=BytesIO(tar)) as t:
        t.extractall(work, filter="data")
    tree = work / "src" / "main" / "java"
    for f in tree.rglob("Themis*.java"):
        f.unlink()
    for fac in tree.rglob("*SchedulerFactory.java"):
        lines = fac.read_text().splitlines(keepends=True)
        out, skip = [], 0
        for line in lines:
            if 'case "Themis":' in line:
                skip = 2
            if skip:
                skip -= 1
                continue
            out.append(line)
        fac.write_text("".join(out))
    intra = next(tree.rglob("localsched/IntraJobScheduler.java"))
    text = intra.read_text()
    call = "astra_sim(dimVec, dimType)"
    if text.count(call) != 6:
        sys.exit(f"{intra}: expected 6 calls of {call} (the ASTRA-sim seam at {REV}), "
                 f"found {text.count(call)}: is --rev a Dally commit?")
    intra.write_text(text.replace(call, "BatchcastStandIn.fraction(gpus, mCrossSlotSlowdown, "
                                        "mCrossMachineSlowdown, mCrossRackSlowdown)"))
    (intra.parent / "BatchcastStandIn.java").write_text(STANDIN)
    for rel_path, body in POI.items():
        p = tree / rel_path
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(body)
    classes = work / "classes"
    classes.mkdir()
    sources = [str(p) for p in tree.rglob("*.java")]
    sh(["javac", "-nowarn", "-encoding", "UTF-8", "-cp", ":".join(JARS), "-d", str(classes)] + sources)
    return classes


def inputs(repo, rev, case, work):
    """The trace (with arrival_time), the Java cluster file and batchcast's
    (the same values, the shape written out)."""
    tname, racks, machines, slots, gpus, gran, consolidate, _ = case
    jobs = json.loads(git_show(repo, rev, f"configuration/jobs/{tname}"))
    for j in jobs:
        j.setdefault("arrival_time", j.get("start_time", "0"))
    trace = work / tname
    trace.write_text(json.dumps(jobs, indent=1))
    c = json.loads(git_show(repo, rev, DALLY_CLUSTER))
    c["iteration_granularity"] = str(gran)
    c["consolidate"] = "true" if consolidate else "false"
    java = work / f"java-g{gran}-{c['consolidate']}.json"
    java.write_text(json.dumps(c, indent=1))
    ours = dict(c, racks_in_cluster=str(racks), machines_per_rack=str(machines),
                slots_per_machine=str(slots), gpus_per_slot=str(gpus), should_use_config="true")
    for k in ("astra_sim_path", "astra_sim_bin_path"):
        ours.pop(k, None)
    bc = work / f"bc-{racks}r{machines}m{slots}s{gpus}g-g{gran}-{c['consolidate']}.json"
    bc.write_text(json.dumps(ours, indent=1))
    return trace, java, bc


def run_java(classes, repo, rev, case, trace, cluster, work, n):
    _, racks, machines, slots, gpus, _, _, delays = case
    run = work / f"run{n}"
    (run / "results").mkdir(parents=True)
    files = {}
    for key, path in (("net", NETWORK.format(g=gpus, s=slots)), ("sys", SYSTEM), ("ovh", OVERHEAD)):
        files[key] = run / Path(path).name
        files[key].write_bytes(git_show(repo, rev, path))
    args = [str(racks), str(machines), "Dally", str(cluster), str(trace), str(files["net"]),
            str(files["sys"]), str(files["ovh"]), "bc"]
    if delays is not None:
        args += [str(d) for d in delays]
    cp = ":".join([str(classes)] + JARS)
    subprocess.run(["java", "-Xss16m", "-cp", cp, "com.wisr.mlsched.Simulation"] + args, cwd=run,
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sheet = next((run / "results" / "bc").glob("*.xlsx"))
    rows = list(csv.DictReader(sheet.read_text().splitlines()))
    jct = {str(int(float(r["JobId"]))): float(r["End-time"]) - float(r["Arrival-time"]) for r in rows}
    first = min(float(r["Arrival-time"]) for r in rows)
    span = max(float(r["End-time"]) for r in rows) - first
    return jct, span


def delay_flag(delays):
    """batchcast's --dally-delays for a case's timers (None: the published
    defaults, which are batchcast's too)."""
    return [] if delays is None else ["--dally-delays=" + ",".join(str(d) for d in delays)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cluster-sim", default=os.environ.get("CLUSTER_SIM"),
                    help="a clone of aakash-sharma/cluster-sim, bare or not ($CLUSTER_SIM)")
    ap.add_argument("--rev", default=REV, help="the Dally commit to build")
    add_run_args(ap)
    a = ap.parse_args()
    if not a.cluster_sim:
        sys.exit("give --cluster-sim PATH (or set CLUSTER_SIM) to a clone of cluster-sim")
    repo = Path(a.cluster_sim).resolve()
    bin_, cases, out = prepare(a, CASES)
    rows, summary = [], []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        classes = build_java(repo, a.rev, work)
        for n, case in enumerate(cases, 1):
            tname, racks, machines, slots, gpus, gran, consolidate, delays = case
            trace, jcluster, bcluster = inputs(repo, a.rev, case, work)
            jjct, jspan = run_java(classes, repo, a.rev, case, trace, jcluster, work, n)
            ours = run_batchcast(bin_, bcluster, trace, ["dally"], "bidding", work / f"bc{n}",
                                 extra=["--restart-cost", "1"] + delay_flag(delays))
            bjct, bspan = ours["dally"]
            timers = "published defaults 1, 2" if delays is None else f"tuned, history {delays[2]}"
            how = f"consolidated, timers {timers}" if consolidate else "one GPU at a time"
            name = f"{tname} / {racks}x{machines}x{slots}x{gpus} GPUs (G={gran}, {how})"
            errs = []
            for jid, jv in sorted(jjct.items(), key=lambda kv: int(kv[0])):
                bv = bjct.get(jid, float("nan"))
                errs.append(rel(bv, jv))
                rows.append([name, jid, f"{jv:.3f}", f"{bv:.3f}", f"{errs[-1]:.6f}"])
            summary.append([name, "Dally", "bidding", "dally", len(jjct), len(bjct),
                            f"{statistics.median(errs):.6f}", f"{max(errs):.6f}",
                            f"{jspan:.3f}", f"{bspan:.3f}", f"{rel(bspan, jspan):.6f}"])
            print(" | ".join(str(x) for x in summary[-1]), flush=True)
    if a.per_job:
        with open(a.per_job, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["case", "job_id", "java_jct", "batchcast_jct", "rel_err"])
            w.writerows(rows)
    merge_summary(out, summary)
    print(f"wrote {out}/summary.csv and summary.md" + (f", {a.per_job}" if a.per_job else ""))


def merge_summary(out, dally_rows):
    """Replaces the Dally rows of DIR/summary.csv (bench/sim_fidelity.py
    writes the others) and rewrites summary.md from it."""
    rows = []
    if (out / "summary.csv").exists():
        with open(out / "summary.csv", newline="") as f:
            rows = [r for r in list(csv.reader(f))[1:] if r[1] != "Dally"]
    write_summary(out, rows + dally_rows)


if __name__ == "__main__":
    main()
