//! A point-in-time view of one breaker, for dashboards and health endpoints.

use super::State;

/// What a breaker looks like at one moment.
///
/// In closed, metrics-only, open and forced-open states the counts are those
/// of the sliding window, which records nothing while the breaker is open:
/// an open breaker shows the closed window that last opened it (a
/// time-based one only as far as its span still reaches), also after the
/// probes of a half-open state reopened it (their rates are in that
/// transition's [`BreakerEvent`](super::BreakerEvent)s); in half-open the
/// counts are the probes' outcomes so far. Rates are `None` until
/// `minimum_number_of_calls` outcomes have been recorded since the window
/// was last emptied, as the breaker itself judges (a count window shared by
/// threads can hold a few fewer: see the sliding window in
/// [`Breaker`](super::Breaker)'s docs; in half-open, until every probe has
/// reported).
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct BreakerSnapshot {
    /// The breaker's name.
    pub name: String,
    /// Its state.
    pub state: State,
    /// Failed calls, in percent of the calls counted.
    pub failure_rate: Option<f32>,
    /// Slow calls, in percent of the calls counted.
    pub slow_call_rate: Option<f32>,
    /// Outcomes counted (successes and failures; ignored outcomes are not).
    pub buffered_calls: u32,
    /// Of those, failures.
    pub failed_calls: u32,
    /// Of those, slow calls (successful or not).
    pub slow_calls: u32,
    /// Calls rejected since the breaker was created or last reset.
    pub not_permitted_calls: u64,
}
