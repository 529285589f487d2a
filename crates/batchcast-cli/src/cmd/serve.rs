//! `batchcast serve`: the binary's face over [`batchcast_serve::run`]:
//! SIGINT and SIGTERM stop it, `--json` event lines go to stdout, and a
//! progress bar shows on a terminal.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::Result;
pub use batchcast_serve::ServeArgs;
use batchcast_serve::{Face, ServeError};

use crate::progress::Progress;

/// The binary's [`Face`].
struct Cli {
    stop: Arc<AtomicBool>,
    progress: Option<Progress>,
    batch_size: u64,
    bar: bool,
}

impl Face for Cli {
    fn interrupted(&mut self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    fn event(&mut self, line: &str) -> std::io::Result<()> {
        writeln!(std::io::stdout().lock(), "{line}")
    }

    fn batch(&mut self, epoch: u64, i: u64, n: u64) {
        let bar = self.bar;
        self.progress
            .get_or_insert_with(|| Progress::new(bar))
            .batch(epoch, i, n, self.batch_size);
    }

    fn served(&mut self) {
        if let Some(p) = self.progress.take() {
            p.finish();
        }
    }
}

/// Runs `batchcast serve`.
pub fn run(args: ServeArgs) -> Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    crate::signals::install(&stop)?;
    let mut face = Cli {
        stop,
        progress: None,
        batch_size: args.source.batch_size,
        bar: !args.json && std::io::stderr().is_terminal(),
    };
    match batchcast_serve::run(&args, &mut face) {
        Ok(_) => Ok(()),
        // The core's errors stay themselves, for `main`'s exit codes.
        Err(ServeError::Core(e)) => Err(e.into()),
        Err(ServeError::Output(e)) => Err(crate::out::error(e)),
        Err(e) => Err(e.into()),
    }
}
