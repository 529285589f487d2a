//! How long a producer serves, and what ends it: the one rule that
//! `batchcast serve` (through `batchcast-serve`) and Python's
//! `Producer.run` follow.
//!
//! A producer under [`IdlePolicy::Wait`](crate::IdlePolicy) fails a loan
//! with [`Error::NoConsumers`] once no consumer has been attached for its
//! idle timeout. Whether that ends the run cleanly, is an error, or is
//! waited out depends on what the run was asked to do: [`ServeUntil`]
//! decides, in [`ServeUntil::after_loan_error`].

use crate::error::Error;

/// How long a run serves epochs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServeUntil {
    /// Exactly this many epochs; every consumer gone for the idle timeout
    /// before then is an error.
    Epochs(u64),
    /// For as long as any consumer reads: the run ends when none has been
    /// attached for the idle timeout, once at least one batch was served
    /// (before that, the timeout is an error: no consumer ever came).
    Idle,
    /// Until interrupted, however long no consumer is attached.
    Interrupted,
}

/// What a failed loan means for the run ([`ServeUntil::after_loan_error`]).
#[derive(Debug)]
pub enum AfterLoanError {
    /// Wait on: loan again.
    Retry,
    /// The run is over: no consumer is left ([`ServeUntil::Idle`]).
    EndIdle,
    /// The run was interrupted (Ctrl-C, SIGTERM, a closing producer).
    EndInterrupted,
    /// The run failed with this error.
    Fail(Error),
}

impl ServeUntil {
    /// The rule of `batchcast serve --epochs N`: 0 serves until idle.
    pub fn from_epochs(epochs: u64) -> Self {
        if epochs == 0 {
            ServeUntil::Idle
        } else {
            ServeUntil::Epochs(epochs)
        }
    }

    /// True while another epoch is due, after `done` epochs.
    pub fn wants_epoch(self, done: u64) -> bool {
        match self {
            ServeUntil::Epochs(n) => done < n,
            ServeUntil::Idle | ServeUntil::Interrupted => true,
        }
    }

    /// What a loan that failed with `err` means, after `served` batches of
    /// the run were published.
    pub fn after_loan_error(self, err: Error, served: u64) -> AfterLoanError {
        match (err, self) {
            (Error::Interrupted, _) => AfterLoanError::EndInterrupted,
            (Error::NoConsumers { .. }, ServeUntil::Interrupted) => AfterLoanError::Retry,
            (Error::NoConsumers { .. }, ServeUntil::Idle) if served > 0 => AfterLoanError::EndIdle,
            (err, _) => AfterLoanError::Fail(err),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idle() -> Error {
        Error::NoConsumers { secs: 1.0 }
    }

    #[test]
    fn a_count_of_epochs_ends_after_that_many() {
        let until = ServeUntil::from_epochs(2);
        assert!(until.wants_epoch(1));
        assert!(!until.wants_epoch(2));
        assert!(ServeUntil::from_epochs(0).wants_epoch(1_000));
        assert!(ServeUntil::Interrupted.wants_epoch(u64::MAX));
    }

    #[test]
    fn no_consumer_ends_a_run_until_idle_only_after_a_batch_was_served() {
        let until = ServeUntil::Idle;
        assert!(matches!(
            until.after_loan_error(idle(), 1),
            AfterLoanError::EndIdle
        ));
        assert!(matches!(
            until.after_loan_error(idle(), 0),
            AfterLoanError::Fail(Error::NoConsumers { .. })
        ));
    }

    #[test]
    fn no_consumer_fails_a_counted_run_and_is_waited_out_by_a_run_forever() {
        assert!(matches!(
            ServeUntil::Epochs(3).after_loan_error(idle(), 10),
            AfterLoanError::Fail(Error::NoConsumers { .. })
        ));
        assert!(matches!(
            ServeUntil::Interrupted.after_loan_error(idle(), 0),
            AfterLoanError::Retry
        ));
    }

    #[test]
    fn an_interrupt_ends_every_run_and_other_errors_fail_it() {
        for until in [
            ServeUntil::Epochs(1),
            ServeUntil::Idle,
            ServeUntil::Interrupted,
        ] {
            assert!(matches!(
                until.after_loan_error(Error::Interrupted, 0),
                AfterLoanError::EndInterrupted
            ));
            assert!(matches!(
                until.after_loan_error(Error::Usage("x".into()), 5),
                AfterLoanError::Fail(Error::Usage(_))
            ));
        }
    }
}
