//! The one error type of serving: the core's and the pipeline's errors,
//! options that do not make sense, and what the command could not do.

use std::io;

use batchcast_pipeline::PipelineError;

use crate::start::{ConsumersEnvError, TooFewConsumers};

/// Why serving failed (or could not start).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The producer failed (its name, the arena, a consumer, no consumer).
    #[error(transparent)]
    Core(#[from] batchcast::Error),
    /// The image pipeline failed (the dataset, a file, the transform).
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
    /// An option out of range or an unknown value; the message names the
    /// flag and the values it takes.
    #[error("{0}")]
    InvalidArgument(String),
    /// Filling one batch failed (the error is its source: print the
    /// chain, as [`ServeError::chain`] does).
    #[error("epoch {epoch}, batch {batch}")]
    Batch {
        /// The epoch.
        epoch: u64,
        /// The batch's index in the epoch (from 0).
        batch: u64,
        /// What failed.
        #[source]
        error: Box<ServeError>,
    },
    /// Fewer consumers than waited for attached before the first epoch.
    #[error(transparent)]
    TooFewConsumers(#[from] TooFewConsumers),
    /// The runner's count of trainers ([`crate::CONSUMERS_ENV`]) is not a
    /// number.
    #[error(transparent)]
    ConsumersEnv(#[from] ConsumersEnvError),
    /// An event line could not be written (stdout closed, say).
    #[error("cannot write an event: {0}")]
    Output(#[source] io::Error),
}

impl ServeError {
    /// An [`ServeError::InvalidArgument`] with this message.
    pub fn invalid(msg: impl Into<String>) -> Self {
        ServeError::InvalidArgument(msg.into())
    }

    /// The message with every cause, joined by ": " (as `anyhow` prints
    /// `{:#}`).
    pub fn chain(&self) -> String {
        let mut s = self.to_string();
        let mut next = std::error::Error::source(self);
        while let Some(cause) = next {
            s.push_str(": ");
            s.push_str(&cause.to_string());
            next = cause.source();
        }
        s
    }

    /// The core error at the root of this one, if any.
    pub fn core(&self) -> Option<&batchcast::Error> {
        match self {
            ServeError::Core(e) => Some(e),
            ServeError::Batch { error, .. } => error.core(),
            _ => None,
        }
    }
}

/// The result of serving.
pub type Result<T, E = ServeError> = std::result::Result<T, E>;
