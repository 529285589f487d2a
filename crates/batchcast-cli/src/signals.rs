//! SIGINT and SIGTERM set a flag; long loops check it and stop cleanly.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::{Context, Result};

/// Makes SIGINT and SIGTERM set `flag` instead of killing the process.
pub fn install(flag: &Arc<AtomicBool>) -> Result<()> {
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(flag))
            .context("cannot install a signal handler")?;
    }
    Ok(())
}
