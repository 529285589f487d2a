//! What can go wrong: bad configuration or a malformed trace.

/// A simulator error; each names the problem and how to fix it.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The cluster, the options or the job list cannot be simulated.
    #[error("{0}")]
    Config(String),
    /// A trace record is malformed.
    #[error("{file}: record {record}: field `{field}`: {problem}")]
    Parse {
        /// The trace file.
        file: String,
        /// 1-based record number (CSV: data row; JSON: array element).
        record: usize,
        /// The offending field.
        field: String,
        /// What is wrong and what is expected.
        problem: String,
    },
    /// A trace file is too large or unreadable as a whole.
    #[error("{file}: {problem}")]
    File {
        /// The trace file.
        file: String,
        /// What is wrong.
        problem: String,
    },
}
