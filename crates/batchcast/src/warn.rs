//! Where the core's warnings go: what goes on but is no error (a consumer
//! evicted and rejoining, lag memory the kernel refused). Standard error by
//! default, as the CLI wants; a binding routes them to its own channel (the
//! Python bindings: the `batchcast` logger, which users filter and capture
//! like any other).

use std::fmt;
use std::sync::Arc;

/// A warning sink, called on the thread that met the condition.
#[derive(Clone)]
pub struct Warn(Arc<dyn Fn(&str) + Send + Sync>);

impl Warn {
    /// Warnings go to `sink`.
    pub fn to(sink: impl Fn(&str) + Send + Sync + 'static) -> Self {
        Warn(Arc::new(sink))
    }

    /// Emits `message` (a sentence; the sink adds any prefix).
    pub fn emit(&self, message: &str) {
        (self.0)(message)
    }
}

impl Default for Warn {
    /// `batchcast: warning: ...` on standard error.
    fn default() -> Self {
        Warn::to(|m| eprintln!("batchcast: warning: {m}"))
    }
}

impl fmt::Debug for Warn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Warn")
    }
}

#[cfg(test)]
impl Warn {
    /// A sink that keeps the messages, and the list they go to.
    pub(crate) fn kept() -> (Warn, Arc<std::sync::Mutex<Vec<String>>>) {
        let got = Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = Arc::clone(&got);
        (
            Warn::to(move |m| sink.lock().unwrap().push(m.to_owned())),
            got,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sink_gets_each_message_on_the_calling_thread() {
        let (warn, got) = Warn::kept();
        let clone = warn.clone();
        std::thread::spawn(move || clone.emit("from a thread"))
            .join()
            .unwrap();
        warn.emit("here");
        assert_eq!(*got.lock().unwrap(), ["from a thread", "here"]);
    }
}
