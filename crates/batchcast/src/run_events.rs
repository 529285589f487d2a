//! The events a producer or a consumer hands to the `batchcast run` that
//! started it: when [`EVENTS_ENV`] names a file (inside the run's private
//! 0700 directory), each event that matters to a sweep (`batchcast
//! serve`'s stream resumed after a restart, its dataset grew, a trigger
//! fired; a consumer reattached to a restarted producer) is appended to it
//! as one JSON line, the file 0600. At most [`MAX_EVENTS`] lines are
//! written by one writer, then one `dropped` line; the runner reads the
//! file bounded too. Failing to write is a warning, never the writer's end.
//! The other way, [`CONSUMERS_ENV`] is what the runner tells a workload's
//! Data command: how many trainers to wait for.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;

use crate::warn::Warn;

/// The variable that names the file (`batchcast_runs::EVENTS_ENV` is the
/// runner's side).
pub const EVENTS_ENV: &str = "BATCHCAST_EVENTS";
/// The variable in which `batchcast run` gives a workload's Data command
/// the number of the workload's trainers (consumers to wait for before the
/// first epoch); the runner sets it and `batchcast serve` reads it.
pub const CONSUMERS_ENV: &str = "BATCHCAST_CONSUMERS";
/// Most event lines one writer writes before its `dropped` line.
pub const MAX_EVENTS: usize = 200;

/// Where the events go: nowhere when the process was not started by a
/// runner.
#[derive(Default)]
pub struct RunEvents {
    file: Option<File>,
    written: usize,
    warn: Warn,
}

impl std::fmt::Debug for RunEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunEvents")
            .field("file", &self.file)
            .field("written", &self.written)
            .finish()
    }
}

impl RunEvents {
    /// Opens the file [`EVENTS_ENV`] names (see [`RunEvents::open`]);
    /// none when it is unset.
    pub fn from_env(warn: Warn) -> RunEvents {
        match std::env::var_os(EVENTS_ENV).filter(|p| !p.is_empty()) {
            Some(path) => RunEvents::open(std::path::Path::new(&path), warn),
            None => RunEvents {
                warn,
                ..RunEvents::default()
            },
        }
    }

    /// Opens `path` for appending (created 0600); `warn` says so when it
    /// cannot be opened, and the events then go nowhere.
    pub fn open(path: &std::path::Path, warn: Warn) -> RunEvents {
        let opened = File::options()
            .append(true)
            .create(true)
            .mode(0o600)
            .open(path);
        let file = match opened {
            Ok(file) => Some(file),
            Err(e) => {
                warn.emit(&format!(
                    "the run store will not hold this process's events: cannot open {} \
                     ({EVENTS_ENV}): {e}",
                    path.display()
                ));
                None
            }
        };
        RunEvents {
            file,
            written: 0,
            warn,
        }
    }

    /// Appends `event`, one JSON object on one line; past [`MAX_EVENTS`],
    /// one `dropped` line and nothing more. A write that fails stops the
    /// writing.
    pub fn record(&mut self, event: &str) {
        let Some(file) = self.file.as_mut() else {
            return;
        };
        let line = if self.written < MAX_EVENTS {
            event.replace('\n', " ")
        } else {
            format!("{{\"event\":\"dropped\",\"after\":{MAX_EVENTS}}}")
        };
        self.written += 1;
        let done = self.written > MAX_EVENTS;
        if let Err(e) = file.write_all(format!("{line}\n").as_bytes()) {
            self.warn.emit(&format!(
                "the run store will not hold this process's further events: {e}"
            ));
            self.file = None;
        }
        if done {
            self.file = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_appended_and_bounded() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let mut events = RunEvents::open(&path, Warn::default());
        for i in 0..MAX_EVENTS + 5 {
            events.record(&format!("{{\"event\":\"trigger\",\"seq\":{i}}}"));
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), MAX_EVENTS + 1);
        assert!(lines[0].contains("\"seq\":0"), "{}", lines[0]);
        assert!(
            lines[MAX_EVENTS].contains("dropped"),
            "{}",
            lines[MAX_EVENTS]
        );
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
