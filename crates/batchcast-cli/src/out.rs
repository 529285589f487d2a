//! Printing to stdout that returns errors instead of panicking, so that a
//! reader that goes away (`batchcast status | head -1`) ends the command
//! quietly: [`outln!`] and [`out!`] are `println!` and `print!` for `?`,
//! and a closed stdout comes back as [`StdoutClosed`], which `main` turns
//! into a quiet exit.
//!
//! SIGPIPE stays ignored (Rust's default): the producer's sockets must see
//! `EPIPE` as an error, not kill the process.

use std::fmt;
use std::io::{self, Write};

/// Stdout's reader closed it (`EPIPE`): nothing more can be printed, and
/// nothing is wrong either.
#[derive(Debug)]
pub struct StdoutClosed;

impl fmt::Display for StdoutClosed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("stdout was closed by its reader")
    }
}

impl std::error::Error for StdoutClosed {}

/// Writes `args` to stdout; what `print!` does, returning the error.
pub fn write(args: fmt::Arguments<'_>) -> anyhow::Result<()> {
    io::stdout().lock().write_fmt(args).map_err(error)
}

/// The error to return for a failed write to stdout.
pub fn error(e: io::Error) -> anyhow::Error {
    if e.kind() == io::ErrorKind::BrokenPipe {
        StdoutClosed.into()
    } else {
        anyhow::Error::new(e).context("cannot write to stdout")
    }
}

/// Stdout as a [`Write`] for code that reports write errors in its own
/// terms (a CSV writer): [`Stdout::closed`] says afterwards whether the
/// reader went away.
#[derive(Default)]
pub struct Stdout {
    closed: bool,
}

impl Stdout {
    /// True once a write failed because the reader closed stdout.
    pub fn closed(&self) -> bool {
        self.closed
    }
}

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let r = io::stdout().lock().write(buf);
        self.note(r)
    }

    fn flush(&mut self) -> io::Result<()> {
        let r = io::stdout().lock().flush();
        self.note(r)
    }
}

impl Stdout {
    fn note<T>(&mut self, r: io::Result<T>) -> io::Result<T> {
        if matches!(&r, Err(e) if e.kind() == io::ErrorKind::BrokenPipe) {
            self.closed = true;
        }
        r
    }
}

/// `print!` that returns `anyhow::Result<()>` (a closed stdout is
/// [`StdoutClosed`]).
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::out::write(format_args!($($arg)*))
    };
}

/// `println!` that returns `anyhow::Result<()>` (a closed stdout is
/// [`StdoutClosed`]).
macro_rules! outln {
    () => {
        $crate::out::write(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::out::write(format_args!("{}\n", format_args!($($arg)*)))
    };
}

pub(crate) use {out, outln};
