//! The MPS control daemon (`nvidia-cuda-mps-control`), for rows whose
//! Collocation is `MPS`.
//!
//! The daemon is found through its control pipe (in
//! `$CUDA_MPS_PIPE_DIRECTORY`, else `/tmp/nvidia-mps`) and a live process
//! of that name; it is started with `-d` and stopped by writing `quit` to
//! its control command, as NVIDIA's documentation says. No output of the
//! tool is parsed.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use super::GpuError;

const DAEMON: &str = "nvidia-cuda-mps-control";

fn pipe_dir() -> PathBuf {
    std::env::var_os("CUDA_MPS_PIPE_DIRECTORY")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp/nvidia-mps"))
}

/// Whether a control daemon runs: its pipe exists and a process of its
/// name is alive.
pub(super) fn running() -> Result<bool, GpuError> {
    if !pipe_dir().join("control").exists() {
        return Ok(false);
    }
    let procs = std::fs::read_dir("/proc")
        .map_err(|e| GpuError::Mps(format!("cannot read /proc to find the daemon: {e}")))?;
    Ok(procs.flatten().any(|p| {
        std::fs::read_to_string(p.path().join("comm"))
            // The kernel keeps the first 15 bytes of a process name.
            .map(|c| c.trim_end() == &DAEMON[..15])
            .unwrap_or(false)
    }))
}

fn missing(e: std::io::Error) -> GpuError {
    if e.kind() == std::io::ErrorKind::NotFound {
        GpuError::Mps(format!(
            "{DAEMON} is not installed or not on PATH; it comes with the NVIDIA driver \
             (package nvidia-cuda-mps or the CUDA toolkit): install it, or set the rows' \
             Collocation to '-'"
        ))
    } else {
        GpuError::Mps(format!("cannot run {DAEMON}: {e}"))
    }
}

/// Starts the daemon in the background (`nvidia-cuda-mps-control -d`).
pub(super) fn start() -> Result<(), GpuError> {
    let status = Command::new(DAEMON)
        .arg("-d")
        .stdin(Stdio::null())
        .status()
        .map_err(missing)?;
    if status.success() {
        Ok(())
    } else {
        Err(GpuError::Mps(format!(
            "`{DAEMON} -d` failed ({status}); is another user's daemon running, \
             or are the GPUs in a compute mode that forbids MPS?"
        )))
    }
}

/// Stops the daemon (`echo quit | nvidia-cuda-mps-control`).
pub(super) fn stop() -> Result<(), GpuError> {
    let mut child = Command::new(DAEMON)
        .stdin(Stdio::piped())
        .spawn()
        .map_err(missing)?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(b"quit\n")
            .map_err(|e| GpuError::Mps(format!("cannot tell the daemon to quit: {e}")))?;
    }
    let status = child
        .wait()
        .map_err(|e| GpuError::Mps(format!("waiting for {DAEMON}: {e}")))?;
    if status.success() {
        Ok(())
    } else {
        Err(GpuError::Mps(format!(
            "`echo quit | {DAEMON}` failed ({status})"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_daemon_says_where_it_comes_from_and_what_else_to_do() {
        let e = missing(std::io::ErrorKind::NotFound.into()).to_string();
        assert!(
            e.contains("nvidia-cuda-mps-control is not installed"),
            "{e}"
        );
        assert!(e.contains("Collocation to '-'"), "{e}");
    }

    #[test]
    fn starting_without_the_daemon_binary_fails_cleanly() {
        let on_path = std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).any(|d| d.join(DAEMON).exists()))
            .unwrap_or(false);
        if !on_path {
            let e = start().unwrap_err().to_string();
            assert!(e.contains("not installed"), "{e}");
        }
    }
}
