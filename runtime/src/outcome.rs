//! What one finished attempt tells the parts that keep statistics
//! (breakers, budgets, adaptive throttles).

use std::time::Duration;

use crate::Classification;

/// The outcome of one attempt, as the statistics-keeping parts see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The attempt returned `Ok`.
    Success,
    /// A transient, throttled or do-not-retry failure, or the attempt's own
    /// timeout.
    /// `retry_after` is the server's `Retry-After`, when it sent one.
    Failure { retry_after: Option<Duration> },
    /// A permanent failure: the caller's own mistake, or a refusal. Counts as
    /// neither success nor failure.
    Ignored,
}

impl Outcome {
    /// The outcome of an attempt that failed with an error so classified.
    pub(crate) fn of_failure(classification: Classification) -> Self {
        match classification {
            Classification::Transient => Outcome::Failure { retry_after: None },
            Classification::Throttled { retry_after }
            | Classification::DoNotRetry { retry_after } => Outcome::Failure { retry_after },
            Classification::Permanent => Outcome::Ignored,
        }
    }
}
