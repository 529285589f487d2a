"""The layout version and the human-readable table of a ``batchcast
stalls`` analysis (the dict that ``analyse`` returns, written as JSON by
``--json`` and ``--json-out``)."""

#: The version of the analysis's JSON layout, written as its
#: ``schema_version``. ``batchcast stalls --store`` reads the analysis back
#: into typed structs (crates/batchcast-store/src/stalls.rs, which lists the
#: versions it reads and documents the fields); an analysis without the field
#: is version 1. A new field needs no new version; a field that changes
#: meaning or goes away does, and the reader learns it in the same change.
#: tests/data/stalls-report-v1.json is an analysis of this layout, read by
#: the tests of both sides.
SCHEMA_VERSION = 1


def _ms(s: float) -> str:
    return f"{s * 1000:.1f} ms"


def table(report: dict) -> str:
    lines: list[str] = []
    lines.append(
        f"batchcast stalls: {' '.join(report['command'])}  ({report['cores']} cores, {report['free_cores']:.1f} free)"
    )
    lines.append("")
    head = f"{'mode':<11}{'steps/s':>9}{'samples/s':>11}{'wait mean':>11}{'wait p50':>10}{'wait p95':>10}{'CPU s/1000':>12}"
    lines.append(head)
    rows = dict(report["modes"])
    if report.get("ddp"):
        rows[f"ddp x{report['ddp']['processes']}"] = report["ddp"]
    if report.get("loader"):
        rows["loader"] = report["loader"]
    ts = report.get("timeshare")
    if ts:
        rows["timeshared"] = ts
    for name, m in rows.items():
        lines.append(
            f"{name:<11}{m['steps_per_s']:>9.1f}{m['samples_per_s']:>11.1f}{_ms(m['wait_mean']):>11}"
            f"{_ms(m['wait_p50']):>10}{_ms(m['wait_p95']):>10}{m['cpu_per_1000']:>12.2f}"
        )
    if ts:
        alone = (report["modes"].get("warm") or report["modes"]["cold"])["cpu_per_1000"]
        extra = ts["cpu_per_1000"] / alone - 1 if alone > 0 else 0.0
        lines.append(
            f"timeshared: 2 copies held to core {ts['core']}, together (a sample costs {extra:+.0%}"
            " CPU when cores switch between copies)"
        )
    if report.get("loader"):
        lines.append(
            "loader: the loader alone, with no training step (what one shared producer does)"
        )
    if report.get("repeats", 1) > 1:
        ranges = ", ".join(f"{m} {min(v):.0f}-{max(v):.0f}" for m, v in report["spread"].items())
        lines.append(
            f"each figure: the median of {report['repeats']} rounds (samples/s ranged {ranges})"
        )
    lines.append("")
    lines.append(f"{'stall':<15}{'per step':>10}{'per epoch':>11}{'share':>8}")
    for s in report["stalls"]:
        epoch = f"{s['per_epoch_s']:.2f} s" if s["per_epoch_s"] is not None else "-"
        lines.append(f"{s['name']:<15}{_ms(s['per_step_s']):>10}{epoch:>11}{s['share']:>8.0%}")
    if report["predictions"]:
        lines.append("")
        lines.append("aggregate samples/s of N copies: predicted [measured]")
        lines.append(
            f"{'jobs':<6}{'free cores':>11}{'own loaders':>16}{'one producer':>16}{'speedup':>18}"
        )
        for p in report["predictions"]:
            m = p.get("measured")
            own = f"{p['independent']:.0f}" + (f" [{m['independent']:.0f}]" if m else "")
            sh = f"{p['shared']:.0f}" + (f" [{m['shared']:.0f}]" if m else "")
            sp = f"{p['speedup']:.2f}x" + (
                f" [{m['shared'] / m['independent']:.2f}x]" if m and m["independent"] else ""
            )
            lines.append(f"{p['jobs']:<6}{p['cores']:>11.1f}{own:>16}{sh:>16}{sp:>18}")
    for n in report["notes"]:
        lines.append(f"note: {n}")
    lines.append("")
    lines.append(f"verdict: {report['verdict']}")
    return "\n".join(lines)
