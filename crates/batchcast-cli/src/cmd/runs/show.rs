//! `batchcast runs show RUN`: one run: its fields, parameters, events,
//! metrics and the tail of its output.

use anyhow::Result;
use batchcast_runs::LogStream;

use super::StoreArg;
use crate::out::{out, outln};

/// Arguments of `batchcast runs show`.
#[derive(Debug, clap::Args)]
pub struct ShowArgs {
    /// The run's id (from `batchcast runs list`).
    pub run: i64,
    /// Bytes of each output stream to show (from the end).
    #[arg(long, default_value_t = 2000)]
    pub tail: usize,
    #[command(flatten)]
    pub store: StoreArg,
}

pub fn run(args: ShowArgs) -> Result<()> {
    let store = args.store.open_read_only()?;
    let row = store.run(args.run)?;
    let r = &row.run;
    outln!(
        "run {}: {}/{}/{}",
        r.id,
        row.experiment,
        row.workload,
        r.name
    )?;
    outln!(
        "  status      {}{}",
        r.status,
        r.message
            .as_ref()
            .map(|m| format!(" ({m})"))
            .unwrap_or_default()
    )?;
    outln!(
        "  exit code   {}",
        r.exit_code
            .map(|c| c.to_string())
            .unwrap_or_else(|| "-".into())
    )?;
    outln!("  command     {}", r.command.join(" "))?;
    outln!(
        "  devices     {}",
        if r.devices.is_empty() {
            "cpu".to_string()
        } else {
            r.devices.join(",")
        }
    )?;
    outln!("  collocation {}", r.collocation)?;
    outln!("  host        {}", r.host)?;
    if let Some(ms) = r.duration_ms(batchcast_runs::now_ms()) {
        outln!("  duration    {:.1} s", ms as f64 / 1000.0)?;
    }
    outln!("  environment {}", r.env)?;
    let params = store.params(r.id)?;
    if !params.is_empty() {
        outln!("parameters:")?;
        for p in params {
            outln!("  {} = {} ({:?})", p.key, p.value, p.source)?;
        }
    }
    for e in store.events(r.id)? {
        outln!("event [{}]: {}", e.source, e.message)?;
    }
    let keys = store.metric_keys(r.id)?;
    if !keys.is_empty() {
        outln!("metrics: {}", keys.join(", "))?;
    }
    for stream in [LogStream::Stdout, LogStream::Stderr] {
        let (tail, cut) = store.log(r.id, stream, Some(args.tail))?;
        if !tail.is_empty() {
            outln!(
                "--- {}{} ---",
                stream.as_str(),
                if cut { " (tail)" } else { "" }
            )?;
            out!("{}", String::from_utf8_lossy(&tail))?;
            if !tail.ends_with(b"\n") {
                outln!()?;
            }
        }
    }
    Ok(())
}
