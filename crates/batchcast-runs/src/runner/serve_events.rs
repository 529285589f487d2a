//! The events of a workload's shared producer and of its trainers: the
//! runner names a file in [`EVENTS_ENV`], beside the run's figures file
//! (in its private 0700 directory), where `batchcast serve` appends one
//! JSON line per event that matters to a sweep: `resumed` (the stream of a
//! restarted producer goes on), `grew` (the dataset took in samples),
//! `trigger` (a trigger fired), `dropped` (it wrote no more); and where a
//! trainer's consumer appends `reattached` (it waited for a restarted
//! producer and goes on; `batchcast::RunEvents` writes both). The runner
//! reads what was appended each time it polls, and once more when the job
//! has ended, and records each as an event of the job's run (source
//! `serve` or `consumer`). Reading is bounded: lines of at most [`MAX_LINE`] bytes, at
//! most [`MAX_RECORDED`] events, then one event saying the rest was not
//! recorded; a line that is not such an event is recorded as one event
//! naming the problem.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use super::figures::FiguresSlot;

/// The variable that names the file (`batchcast_serve::EVENTS_ENV` is
/// the producer's side).
pub const EVENTS_ENV: &str = "BATCHCAST_EVENTS";
/// Longest line read, in bytes.
const MAX_LINE: usize = 4096;
/// Most events recorded for one producer.
const MAX_RECORDED: usize = 500;
/// The file's name inside the run's directory.
const FILE_NAME: &str = "serve-events.jsonl";
/// The source of a producer's events in the store.
pub(crate) const SERVE: &str = "serve";
/// The source of a trainer's consumer's events in the store.
pub(crate) const CONSUMER: &str = "consumer";

/// Where a producer's events file is, and how far it was read.
#[derive(Debug)]
pub(crate) struct ServeEvents {
    path: PathBuf,
    offset: u64,
    recorded: usize,
    /// Within a line too long to read, skipped to its end.
    skipping: bool,
    /// [`SERVE`] or [`CONSUMER`].
    source: &'static str,
}

impl ServeEvents {
    /// The events file of the run whose figures go to `slot`, written by
    /// `source` ([`SERVE`] or [`CONSUMER`]).
    pub(crate) fn new(slot: &FiguresSlot, source: &'static str) -> ServeEvents {
        ServeEvents {
            path: slot.file().with_file_name(FILE_NAME),
            offset: 0,
            recorded: 0,
            skipping: false,
            source,
        }
    }

    /// Who writes the events: their source in the store.
    pub(crate) fn source(&self) -> &'static str {
        self.source
    }

    /// The path the producer is given in [`EVENTS_ENV`].
    pub(crate) fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// The messages of the whole lines appended since the last call (a
    /// line still being written is left for the next).
    pub(crate) fn read_new(&mut self) -> Vec<String> {
        if self.recorded > MAX_RECORDED {
            return vec![];
        }
        let Some(bytes) = self.read_from_offset() else {
            return vec![];
        };
        let mut messages = Vec::new();
        let mut used = 0;
        for line in bytes.split_inclusive(|b| *b == b'\n') {
            let whole = line.last() == Some(&b'\n');
            if self.skipping {
                used += line.len();
                self.skipping = !whole;
                continue;
            }
            if line.len() > MAX_LINE {
                messages.push(format!(
                    "an event line of the producer longer than {MAX_LINE} bytes was not read"
                ));
                used += line.len();
                self.recorded += 1;
                self.skipping = !whole;
                continue;
            }
            if !whole {
                break;
            }
            used += line.len();
            if self.recorded == MAX_RECORDED {
                messages.push(format!(
                    "more events of the producer were not recorded (at most {MAX_RECORDED})"
                ));
                self.recorded += 1;
                break;
            }
            self.recorded += 1;
            messages.push(message(&line[..line.len() - 1]));
        }
        self.offset += used as u64;
        messages
    }

    /// At most a few lines' worth of bytes from the offset; `None` when
    /// the file is not there (or not a regular file).
    fn read_from_offset(&self) -> Option<Vec<u8>> {
        let mut file = File::options()
            .read(true)
            .custom_flags(
                (rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK).bits() as i32,
            )
            .open(&self.path)
            .ok()?;
        let meta = file.metadata().ok()?;
        if !meta.is_file() || meta.len() <= self.offset {
            return None;
        }
        file.seek(SeekFrom::Start(self.offset)).ok()?;
        let mut bytes = Vec::new();
        file.take((16 * MAX_LINE) as u64)
            .read_to_end(&mut bytes)
            .ok()?;
        Some(bytes)
    }
}

/// The one-line message of one event line.
fn message(line: &[u8]) -> String {
    let Ok(serde_json::Value::Object(e)) = serde_json::from_slice::<serde_json::Value>(line) else {
        return format!(
            "an event line of the producer is not a JSON object: {:?}",
            String::from_utf8_lossy(line)
                .chars()
                .take(80)
                .collect::<String>()
        );
    };
    let n = |key: &str| match e.get(key) {
        Some(v) if v.is_number() => v.to_string(),
        _ => "?".into(),
    };
    let kind = e.get("event").and_then(|v| v.as_str()).unwrap_or("");
    match kind {
        "trigger" => {
            let id = e.get("id").and_then(|v| v.as_str()).unwrap_or("?");
            format!(
                "trigger {} fired (#{}) before epoch {}: {} samples arrived since the last",
                id.chars().take(80).collect::<String>(),
                n("seq"),
                n("epoch"),
                n("samples")
            )
        }
        "grew" => format!(
            "epoch {}: {} new samples, {} per epoch from now on",
            n("epoch"),
            n("added"),
            n("samples_per_epoch")
        ),
        "resumed" => format!(
            "resumed the stream after a restart: epoch {}, from row {}, {} consumers to reattach",
            n("epoch"),
            n("row"),
            n("consumers")
        ),
        "reattached" => format!(
            "reattached to the restarted producer after waiting {} s: epoch {}, from row {}",
            n("waited_secs"),
            n("epoch"),
            n("row")
        ),
        "dropped" => format!("no more events were written after {}", n("after")),
        other => format!(
            "an event of the producer of unknown kind {:?}",
            other.chars().take(40).collect::<String>()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn append(events: &ServeEvents, text: &str) {
        let mut f = File::options()
            .append(true)
            .create(true)
            .open(events.path())
            .unwrap();
        f.write_all(text.as_bytes()).unwrap();
    }

    #[test]
    fn whole_lines_are_read_once_as_they_come() {
        let slot = FiguresSlot::new().unwrap();
        let mut events = ServeEvents::new(&slot, SERVE);
        assert!(events.read_new().is_empty());
        append(
            &events,
            "{\"event\":\"trigger\",\"id\":\"every-epoch\",\"seq\":1,\"epoch\":2,\"samples\":0}\n{\"event\":\"grew\"",
        );
        let got = events.read_new();
        assert_eq!(
            got,
            vec!["trigger every-epoch fired (#1) before epoch 2: 0 samples arrived since the last"]
        );
        append(
            &events,
            ",\"epoch\":3,\"added\":5,\"samples_per_epoch\":45}\n",
        );
        assert_eq!(
            events.read_new(),
            vec!["epoch 3: 5 new samples, 45 per epoch from now on"]
        );
        assert!(events.read_new().is_empty());
    }

    #[test]
    fn a_consumers_reattachment_is_read_as_its_event() {
        let slot = FiguresSlot::new().unwrap();
        let mut events = ServeEvents::new(&slot, CONSUMER);
        assert_eq!(events.source(), "consumer");
        // As `batchcast::RunEvents` writes it for a consumer that reattached.
        let mut writer = batchcast::RunEvents::open(events.path(), batchcast::Warn::default());
        writer.record("{\"event\":\"reattached\",\"epoch\":1,\"row\":64,\"waited_secs\":0.250}");
        assert_eq!(
            events.read_new(),
            vec!["reattached to the restarted producer after waiting 0.25 s: epoch 1, from row 64"]
        );
    }

    #[test]
    fn bad_lines_are_named_and_reading_is_bounded() {
        let slot = FiguresSlot::new().unwrap();
        let mut events = ServeEvents::new(&slot, SERVE);
        append(
            &events,
            "not json\n{\"event\":\"resumed\",\"epoch\":1,\"row\":64,\"consumers\":2}\n",
        );
        let got = events.read_new();
        assert!(got[0].contains("not a JSON object"), "{got:?}");
        assert!(
            got[1].contains("epoch 1, from row 64, 2 consumers"),
            "{got:?}"
        );
        append(&events, &format!("{}\n", "x".repeat(MAX_LINE * 20)));
        let mut all = vec![];
        for _ in 0..30 {
            all.extend(events.read_new());
        }
        assert_eq!(all.len(), 1, "{all:?}");
        assert!(all[0].contains("longer than"), "{all:?}");
        let line = "{\"event\":\"dropped\",\"after\":200}\n".repeat(MAX_RECORDED + 10);
        append(&events, &line);
        let mut all = vec![];
        for _ in 0..100 {
            all.extend(events.read_new());
        }
        assert_eq!(all.len(), MAX_RECORDED - 3 + 1);
        assert!(all.last().unwrap().contains("not recorded"), "{all:?}");
    }
}
