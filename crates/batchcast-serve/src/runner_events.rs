//! The events `batchcast serve` hands to the `batchcast run` that started
//! it: when [`EVENTS_ENV`] names a file (inside the run's private 0700
//! directory), each event that matters to a sweep (the stream resumed
//! after a restart, the dataset grew, a trigger fired) is appended to it
//! as one JSON line, the file 0600. At most [`MAX_EVENTS`] lines are
//! written by one producer, then one `dropped` line; the runner reads the
//! file bounded too. Failing to write is a warning, never the serve's end.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;

/// The variable that names the file (`batchcast_runs::EVENTS_ENV` is the
/// runner's side).
pub const EVENTS_ENV: &str = "BATCHCAST_EVENTS";
/// Most event lines one producer writes before its `dropped` line.
pub const MAX_EVENTS: usize = 200;

/// Where the events go: nowhere when the producer was not started by a
/// runner.
#[derive(Debug, Default)]
pub(crate) struct RunnerEvents {
    file: Option<File>,
    written: usize,
}

impl RunnerEvents {
    /// Opens the file [`EVENTS_ENV`] names, for appending; none when it is
    /// unset, a warning when it cannot be opened.
    pub(crate) fn from_env() -> RunnerEvents {
        let Some(path) = std::env::var_os(EVENTS_ENV).filter(|p| !p.is_empty()) else {
            return RunnerEvents::default();
        };
        let opened = File::options()
            .append(true)
            .create(true)
            .mode(0o600)
            .open(&path);
        match opened {
            Ok(file) => RunnerEvents {
                file: Some(file),
                written: 0,
            },
            Err(e) => {
                eprintln!(
                    "warning: the run store will not hold this producer's events: cannot open \
                     {} ({EVENTS_ENV}): {e}",
                    std::path::Path::new(&path).display()
                );
                RunnerEvents::default()
            }
        }
    }

    /// Appends `event` as one line; past [`MAX_EVENTS`], one `dropped`
    /// line and nothing more. A write that fails stops the writing.
    pub(crate) fn record(&mut self, event: &serde_json::Value) {
        let Some(file) = self.file.as_mut() else {
            return;
        };
        let line = if self.written < MAX_EVENTS {
            event.to_string()
        } else {
            serde_json::json!({"event": "dropped", "after": MAX_EVENTS}).to_string()
        };
        self.written += 1;
        let done = self.written > MAX_EVENTS;
        if let Err(e) = file.write_all(format!("{line}\n").as_bytes()) {
            eprintln!("warning: the run store will not hold this producer's further events: {e}");
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
        let mut events = RunnerEvents {
            file: Some(
                File::options()
                    .append(true)
                    .create(true)
                    .mode(0o600)
                    .open(&path)
                    .unwrap(),
            ),
            written: 0,
        };
        for i in 0..MAX_EVENTS + 5 {
            events.record(&serde_json::json!({"event": "trigger", "seq": i}));
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
