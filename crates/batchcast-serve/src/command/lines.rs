//! What `batchcast serve` prints: the `listening`, `grew`, `trigger` and
//! `finished` events as JSON lines through the [`Face`] with `--json`, else
//! text on stderr.

use batchcast::{Producer, ResumePoint, RunEvents};

use super::{Face, ServeArgs};
use crate::error::{Result, ServeError};
use crate::serve::{BoundaryReport, ServeSummary};
use crate::source::BatchSource;

/// Prints what is served: a `listening` event line with `--json`, else a
/// line on stderr (and one more when the stream resumes).
pub(super) fn announce(
    args: &ServeArgs,
    producer: &Producer,
    source: &dyn BatchSource,
    resumed: Option<ResumePoint>,
    face: &mut dyn Face,
) -> Result<()> {
    if args.json {
        let line = listening_line(args, producer, source, resumed);
        return face.event(&line.to_string()).map_err(ServeError::Output);
    }
    let epochs = match (args.epochs, args.idle_timeout) {
        (0, Some(t)) => format!("epochs until no consumer for {t} s"),
        (0, None) => "epochs until stopped".to_string(),
        (n, _) => format!("{n} epochs"),
    };
    let selected = match &args.source.images.select {
        Some(spec) => format!(" selected by {spec}"),
        None => String::new(),
    };
    eprintln!(
        "serving {:?} on {} ({} samples per epoch{selected}, batch {}, {epochs}); Ctrl-C stops",
        args.name,
        producer.socket_path().display(),
        source.samples_per_epoch(),
        args.source.batch_size,
    );
    if let Some(r) = resumed {
        eprintln!(
            "resuming the stream of the producer {:?} that stopped: epoch {}, from row {} \
             (--fresh starts afresh)",
            args.name, r.epoch, r.row
        );
    }
    Ok(())
}

/// The `listening` event: the name, socket, pid and epoch's size, and the
/// options that change what consumers receive.
fn listening_line(
    args: &ServeArgs,
    producer: &Producer,
    source: &dyn BatchSource,
    resumed: Option<ResumePoint>,
) -> serde_json::Value {
    let mut line = serde_json::json!({"event": "listening", "name": args.name,
        "socket": producer.socket_path(), "pid": std::process::id(),
        "samples_per_epoch": source.samples_per_epoch()});
    if let Some(spec) = &args.source.images.select {
        line["select"] = spec.to_string().into();
    }
    if let Some(r) = resumed {
        line["resumed"] = serde_json::json!({"epoch": r.epoch, "row": r.row,
            "consumers": r.consumers});
    }
    if args.source.images.watch {
        line["watch"] = true.into();
    }
    if let Some(csv) = &args.source.replay.replay {
        line["replay"] = csv.display().to_string().into();
    }
    if let Some(spec) = &args.trigger {
        line["trigger"] = spec.to_string().into();
    }
    line
}

/// Prints the summary: a `finished` event line with `--json`, else a line
/// on stderr.
pub(super) fn finished(json: bool, summary: &ServeSummary, face: &mut dyn Face) -> Result<()> {
    if json {
        let line = serde_json::json!({"event": "finished", "summary": summary});
        return face.event(&line.to_string()).map_err(ServeError::Output);
    }
    eprintln!(
        "served {} epochs, {} batches, {} samples in {:.1} s ({:.0} samples/s){}",
        summary.epochs,
        summary.batches,
        summary.samples,
        summary.seconds,
        summary.samples as f64 / summary.seconds.max(1e-9),
        if summary.interrupted {
            "; interrupted"
        } else if summary.idle {
            "; no consumer left"
        } else {
            ""
        }
    );
    Ok(())
}

/// The lines an epoch boundary prints: `grew` when the dataset took in
/// samples, `trigger` when the trigger fired (JSON events, or text on
/// stderr), each also handed to the runner through `events`.
pub(super) fn boundary_lines(
    report: &BoundaryReport,
    json: bool,
    face: &mut dyn Face,
    events: &mut RunEvents,
) -> std::io::Result<()> {
    let mut say = |line: serde_json::Value, text: String| {
        events.record(&line.to_string());
        if json {
            face.event(&line.to_string())
        } else {
            eprintln!("{text}");
            Ok(())
        }
    };
    if let Some(a) = report.arrived.as_ref().filter(|a| a.added > 0) {
        let line = serde_json::json!({"event": "grew", "epoch": report.epoch,
            "added": a.added, "samples_per_epoch": report.samples_per_epoch,
            "arrivals": a.arrivals, "rescan_seconds": a.seconds});
        let text = format!(
            "epoch {}: {} new samples, {} per epoch from now on",
            report.epoch, a.added, report.samples_per_epoch
        );
        say(line, text)?;
    }
    if let Some(t) = &report.trigger {
        let line = serde_json::json!({"event": "trigger", "id": t.id, "seq": t.seq,
            "epoch": t.epoch, "samples": t.samples, "arrivals": t.arrivals});
        let text = format!(
            "trigger {} fired (#{}) before epoch {}: {} samples arrived since the last",
            t.id, t.seq, t.epoch, t.samples
        );
        say(line, text)?;
    }
    Ok(())
}
