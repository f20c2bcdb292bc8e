//! What the engine tells operators: the `tracing` span and events of each
//! annotated call (feature `tracing`) and its metrics (feature `metrics`).
//! Without a feature its hooks compile to nothing.
//!
//! # Levels
//!
//! | what | level |
//! |---|---|
//! | span `resilient` per call (`function`, `breaker`, `budget`, `bulkhead`, `deadline_ms` left at entry) | INFO |
//! | an attempt failed, a retry follows (`attempt`, `error`, `class`, `delay_ms`, `delay_from`, `deadline_left_ms`) | DEBUG |
//! | the call gives up on a retryable failure (`attempt`, `error`, `class`, `why`) | WARN |
//! | the call's fallback answers (`function`, `breaker`, `budget`, `bulkhead`: the call's span has closed) | WARN |
//! | a failure this layer does not retry (not retryable, left to an enclosing layer, or refused by a breaker, bulkhead, throttle, deadline or shutdown; `why`) | DEBUG |
//!
//! A successful call logs nothing at any level: its span is only a context
//! for what the body logs. The span is INFO, like `#[instrument]`'s, so that
//! a subscriber at INFO shows the body's own events inside it. Refusals are
//! DEBUG because during an outage there is one per call: the breaker's
//! transition (logged once, by the breaker) and the metrics tell the story.
//!
//! # The error
//!
//! The engine is generic over the function's error type, with no `Display`
//! bound (adding one would break every user whose error is not `Display`).
//! Events show the error's `Display` when the call site knows it to be
//! `Display` (`describe`, found where the type is concrete); otherwise its
//! type name (`std::any::type_name`) and its classification. The library's
//! own refusals (timeouts, deadlines, open breakers) are always shown in
//! words.
//!
//! # Cost
//!
//! With no subscriber, or one whose filter turns the span off, creating the
//! span is one check of a cached interest and allocates nothing
//! (`tests/tests/no_alloc.rs` checks both); events sit on failure paths
//! only.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::engine::Policy;
use crate::{Classification, Error, ErrorKind};

/// How the function's error is shown: `Some` when its type is `Display`.
pub type Describe<E> = Option<fn(&E) -> &dyn fmt::Display>;

/// Why an attempt failed, as telemetry shows it.
#[derive(Debug, Clone)]
#[cfg_attr(not(feature = "tracing"), allow(dead_code))]
pub(crate) enum Cause {
    /// The function's own error, so classified.
    Error(Classification),
    /// Its attempt timeout passed.
    TimedOut(Duration),
    /// The call's deadline passed while it ran.
    Deadline,
    /// A breaker, throttle or bulkhead refused it.
    Refused(Error),
}

/// How a call ended, as metrics count it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
pub(crate) enum CallOutcome {
    Success,
    Failure,
    Timeout,
    Fallback,
    Refused(ErrorKind),
}

impl Cause {
    /// How the call ends when this failure is its last.
    pub(crate) fn outcome(&self) -> CallOutcome {
        match self {
            Cause::Error(_) => CallOutcome::Failure,
            Cause::TimedOut(_) | Cause::Deadline => CallOutcome::Timeout,
            Cause::Refused(e) => CallOutcome::Refused(e.kind()),
        }
    }

    #[cfg(feature = "tracing")]
    fn class(&self) -> &'static str {
        match self {
            Cause::Error(Classification::Transient) | Cause::TimedOut(_) => "transient",
            Cause::Error(Classification::Throttled { .. }) => "throttled",
            Cause::Error(Classification::Permanent) => "permanent",
            Cause::Error(Classification::DoNotRetry { .. }) => "do_not_retry",
            Cause::Deadline => "deadline",
            Cause::Refused(_) => "refused",
        }
    }
}

/// How an attempt ended, as metrics count it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
pub(crate) enum AttemptEnd {
    Success = 0,
    Failure = 1,
    Timeout = 2,
}

/// Where a retry's delay came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(feature = "tracing"), allow(dead_code))]
pub(crate) enum DelaySource {
    /// The backoff's draw.
    Backoff,
    /// The server's `Retry-After`, longer than the backoff's draw.
    RetryAfter,
}

/// The error of a failed attempt, shown lazily (only if an event is
/// recorded).
#[cfg(feature = "tracing")]
struct Shown<'a, E> {
    cause: &'a Cause,
    error: &'a E,
    describe: Describe<E>,
}

#[cfg(feature = "tracing")]
impl<E> fmt::Display for Shown<'_, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.cause {
            Cause::Error(_) => match self.describe {
                Some(describe) => describe(self.error).fmt(f),
                None => write!(f, "an error of type `{}`", std::any::type_name::<E>()),
            },
            Cause::TimedOut(after) => write!(f, "attempt timed out after {after:?}"),
            Cause::Deadline => f.write_str("deadline exceeded"),
            Cause::Refused(refusal) => refusal.fmt(f),
        }
    }
}

/// When something began, for a duration metric; nothing without `metrics`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Began(#[cfg(feature = "metrics")] Instant);

/// The start of a call or attempt: `known` if the engine read the clock
/// anyway, else now (with `metrics`; nothing is read without it).
#[inline]
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn began(known: Option<Instant>) -> Began {
    Began(
        #[cfg(feature = "metrics")]
        known.unwrap_or_else(Instant::now),
    )
}

/// Records a call's end.
#[inline]
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn call_ended(policy: &'static Policy, began: &Began, outcome: CallOutcome) {
    #[cfg(feature = "metrics")]
    policy.metrics().call(outcome, began.0.elapsed());
}

/// Records a call its fallback answered, timed from the call's start to
/// the fallback's answer.
#[inline]
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn fallback_answered(policy: &'static Policy, began: &Began) {
    #[cfg(feature = "metrics")]
    policy
        .metrics()
        .call(CallOutcome::Fallback, began.0.elapsed());
}

/// Records a call its caller dropped before it ended (its own timeout, a
/// `select!` that chose another branch), or that a panic unwound: counted
/// as `cancelled`, not as an outcome of the dependency.
#[cold]
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn call_cancelled(policy: &'static Policy, began: &Began) {
    #[cfg(feature = "metrics")]
    policy.metrics().cancelled_call(began.0.elapsed());
}

/// Records an attempt dropped while it ran, with its call.
#[cold]
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn attempt_cancelled(policy: &'static Policy, began: &Began) {
    #[cfg(feature = "metrics")]
    policy.metrics().cancelled_attempt(began.0.elapsed());
}

/// Records an attempt's end; `end` if the engine read the clock anyway.
#[inline]
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn attempt_ended(
    policy: &'static Policy,
    began: &Began,
    end: Option<Instant>,
    how: AttemptEnd,
) {
    #[cfg(feature = "metrics")]
    {
        let end = end.unwrap_or_else(Instant::now);
        policy
            .metrics()
            .attempt(how, end.saturating_duration_since(began.0));
    }
}

/// Records an attempt refused before it ran.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn attempt_refused(policy: &'static Policy) {
    #[cfg(feature = "metrics")]
    policy.metrics().attempt_refused();
}

/// Records and traces a call refused before its first attempt.
#[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
pub(crate) fn refused_before_start(policy: &'static Policy, span: &CallSpan, error: &Error) {
    // A call with a fallback is counted once the fallback has answered
    // (`fallback_answered`).
    #[cfg(feature = "metrics")]
    if !policy_has_fallback(policy) {
        policy
            .metrics()
            .call(CallOutcome::Refused(error.kind()), Duration::ZERO);
    }
    #[cfg(feature = "tracing")]
    span.in_scope(|| {
        tracing::debug!(
            target: "resilient",
            function = policy.function(),
            error = %error,
            "call refused before its first attempt"
        );
    });
}

#[cfg(feature = "metrics")]
fn policy_has_fallback(policy: &Policy) -> bool {
    policy.has_fallback()
}

/// Records the deadline left at the call's entry on its span.
#[inline]
#[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
pub(crate) fn entered(span: &CallSpan, start: Option<Instant>, deadline: Option<Instant>) {
    #[cfg(feature = "tracing")]
    if let (Some(start), Some(deadline)) = (start, deadline) {
        if !span.is_disabled() {
            let left = deadline.saturating_duration_since(start);
            span.record("deadline_ms", millis(left));
        }
    }
}

#[cfg(feature = "tracing")]
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The call's span: entered while its attempts' bodies run (see
/// `Bounded`), and the parent of the engine's events about the call. Kept
/// in the call's state rather than wrapping the call's future: a wrapper
/// would move the whole engine future into it (a measured memcpy of some
/// 300 instructions per call, even with no subscriber).
#[cfg(feature = "tracing")]
pub(crate) type CallSpan = tracing::Span;

/// No span without `tracing`.
#[cfg(not(feature = "tracing"))]
#[derive(Debug, Clone)]
pub(crate) struct CallSpan;

/// Opens the call's span (nothing without `tracing`; a disabled span, which
/// costs one check of a cached interest, with no subscriber or a filter
/// that turns it off).
#[inline]
#[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
pub(crate) fn span(policy: &'static Policy) -> CallSpan {
    #[cfg(feature = "tracing")]
    {
        let names = policy.names();
        tracing::info_span!(
            target: "resilient",
            "resilient",
            function = policy.function(),
            breaker = names.breaker,
            budget = names.budget,
            bulkhead = names.bulkhead,
            deadline_ms = tracing::field::Empty,
        )
    }
    #[cfg(not(feature = "tracing"))]
    CallSpan
}

/// Counts a retry once its attempt is admitted, or refused (by a breaker,
/// throttle or bulkhead), as the attempts are counted: a call dropped while
/// it waits, for its backoff or for a bulkhead slot, makes none.
#[inline]
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn retry_made(policy: &'static Policy) {
    #[cfg(feature = "metrics")]
    policy.metrics().retry();
}

/// Traces a failed attempt after which the call retries, before its
/// backoff (the retry is counted once made: [`retry_made`]).
#[allow(clippy::too_many_arguments)]
#[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
pub(crate) fn retrying<E>(
    policy: &'static Policy,
    span: &CallSpan,
    attempt: u32,
    cause: &Cause,
    error: &E,
    describe: Describe<E>,
    delay: Duration,
    source: DelaySource,
    deadline_left: Option<Duration>,
) {
    #[cfg(feature = "tracing")]
    span.in_scope(|| {
        tracing::debug!(
            target: "resilient",
            function = policy.function(),
            attempt,
            error = %Shown { cause, error, describe },
            class = cause.class(),
            delay_ms = millis(delay),
            delay_from = match source {
                DelaySource::Backoff => "backoff",
                DelaySource::RetryAfter => "retry-after",
            },
            deadline_left_ms = deadline_left.map(millis),
            "attempt failed; retrying"
        );
    });
}

/// Traces a call that gives up on a failure it would otherwise retry.
#[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn gave_up<E>(
    policy: &'static Policy,
    span: &CallSpan,
    attempt: u32,
    cause: &Cause,
    error: &E,
    describe: Describe<E>,
    why: &'static str,
) {
    #[cfg(feature = "tracing")]
    span.in_scope(|| {
        tracing::warn!(
            target: "resilient",
            function = policy.function(),
            attempt,
            error = %Shown { cause, error, describe },
            class = cause.class(),
            why,
            "call failed; giving up"
        );
    });
}

/// Traces a failure this layer does not retry and does not give up on.
#[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn failed<E>(
    policy: &'static Policy,
    span: &CallSpan,
    attempt: u32,
    cause: &Cause,
    error: &E,
    describe: Describe<E>,
    why: &'static str,
) {
    #[cfg(feature = "tracing")]
    span.in_scope(|| {
        tracing::debug!(
            target: "resilient",
            function = policy.function(),
            attempt,
            error = %Shown { cause, error, describe },
            class = cause.class(),
            why,
            "attempt failed; not retried here"
        );
    });
}

#[cfg(feature = "metrics")]
pin_project_lite::pin_project! {
    /// A bulkhead admission, counted in [`BULKHEAD_WAITING`](crate::metrics::BULKHEAD_WAITING)
    /// while it waits.
    pub(crate) struct Waiting<F> {
        #[pin]
        fut: F,
        bulkhead: Option<&'static str>,
        gauge: Option<::metrics::Gauge>,
    }

    impl<F> PinnedDrop for Waiting<F> {
        fn drop(this: Pin<&mut Self>) {
            if let Some(gauge) = this.project().gauge.take() {
                gauge.decrement(1.0);
            }
        }
    }
}

#[cfg(feature = "metrics")]
impl<F: Future> Future for Waiting<F> {
    type Output = F::Output;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        let this = self.project();
        let poll = this.fut.poll(cx);
        match (&poll, this.bulkhead) {
            (std::task::Poll::Pending, Some(name)) if this.gauge.is_none() => {
                let gauge =
                    ::metrics::gauge!(crate::metrics::BULKHEAD_WAITING, "bulkhead" => *name);
                gauge.increment(1.0);
                *this.gauge = Some(gauge);
            }
            (std::task::Poll::Ready(_), _) => {
                if let Some(gauge) = this.gauge.take() {
                    gauge.decrement(1.0);
                }
            }
            _ => {}
        }
        poll
    }
}

/// The admission of an attempt, counted while it waits for a bulkhead slot.
#[cfg(feature = "metrics")]
pub(crate) fn waiting<F: Future>(policy: &'static Policy, fut: F) -> Waiting<F> {
    Waiting {
        fut,
        bulkhead: policy.names().bulkhead,
        gauge: None,
    }
}

/// The admission of an attempt (not counted without `metrics`).
#[cfg(not(feature = "metrics"))]
#[inline]
pub(crate) fn waiting<F: Future>(_: &'static Policy, fut: F) -> F {
    fut
}
