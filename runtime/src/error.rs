//! The library's own refusals: every reason `resilient` may end a call
//! without the function's own result.
//!
//! Users cannot construct an [`Error`]; they receive one through their own
//! error type (`E: From<resilient::Error>`), inspect it with [`Error::kind`],
//! and never retry it: a refusal is a decision already taken by the layer
//! that made it (see [`Classify`](crate::Classify)).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// What kind of refusal an [`Error`] is.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The call's overall deadline (its own `deadline_ms`, or one inherited
    /// from a caller) passed before it could succeed, or had already passed
    /// when it started.
    DeadlineExceeded,
    /// One attempt ran longer than `timeout_ms` and was cancelled. Returned
    /// when no retry was left to try again.
    AttemptTimedOut,
    /// The circuit breaker named by [`Error::name`] is open (or forced open):
    /// the call was not run.
    BreakerOpen,
    /// The bulkhead named by [`Error::name`] had no free slot within its
    /// `max_wait`: the call was not run.
    BulkheadFull,
    /// Client-side adaptive throttling for the dependency named by
    /// [`Error::name`] rejected the call locally, because the dependency has
    /// been rejecting most recent calls: the call was not run.
    LoadShed,
    /// The registry is strict and the name used by the function was not
    /// configured at start-up.
    UnknownName,
    /// The process is shutting down gracefully (see
    /// [`GracefulShutdown::drain`](crate::GracefulShutdown::drain)): new
    /// calls are not admitted, so the calls already in flight can finish.
    /// The call was not run; retrying it here would be refused again, so it
    /// is final, like every refusal.
    ShuttingDown,
}

impl ErrorKind {
    /// The kind in snake case, as metrics label it (`reason="breaker_open"`)
    /// and logs name it.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::DeadlineExceeded => "deadline_exceeded",
            ErrorKind::AttemptTimedOut => "attempt_timed_out",
            ErrorKind::BreakerOpen => "breaker_open",
            ErrorKind::BulkheadFull => "bulkhead_full",
            ErrorKind::LoadShed => "load_shed",
            ErrorKind::UnknownName => "unknown_name",
            ErrorKind::ShuttingDown => "shutting_down",
        }
    }
}

/// A refusal by `resilient`: a deadline passed, an attempt timed out, a
/// breaker was open, a bulkhead full, or a call shed locally.
///
/// It reaches callers through the annotated function's own error type, which
/// must implement `From<resilient::Error>`.
#[derive(Clone)]
pub struct Error {
    kind: ErrorKind,
    name: Option<Arc<str>>,
    duration: Option<Duration>,
    /// The time ran out while an attempt (or the work `with_deadline`
    /// bounds) was running, not before it began.
    cut: bool,
}

impl Error {
    fn new(kind: ErrorKind, name: Option<Arc<str>>, duration: Option<Duration>) -> Self {
        Self {
            kind,
            name,
            duration,
            cut: false,
        }
    }

    /// A deadline that had passed before the work began: nothing ran.
    pub(crate) fn deadline_exceeded() -> Self {
        Self::new(ErrorKind::DeadlineExceeded, None, None)
    }

    /// A deadline that passed while the work ran, which was cut.
    pub(crate) fn deadline_cut() -> Self {
        Self {
            cut: true,
            ..Self::deadline_exceeded()
        }
    }

    /// An attempt cut by its own timeout, while it ran.
    pub(crate) fn attempt_timed_out(after: Duration) -> Self {
        Self {
            cut: true,
            ..Self::new(ErrorKind::AttemptTimedOut, None, Some(after))
        }
    }

    pub(crate) fn breaker_open(name: Arc<str>, retry_in: Option<Duration>) -> Self {
        Self::new(ErrorKind::BreakerOpen, Some(name), retry_in)
    }

    pub(crate) fn bulkhead_full(name: Arc<str>) -> Self {
        Self::new(ErrorKind::BulkheadFull, Some(name), None)
    }

    pub(crate) fn load_shed(name: Arc<str>) -> Self {
        Self::new(ErrorKind::LoadShed, Some(name), None)
    }

    pub(crate) fn unknown_name(name: Arc<str>) -> Self {
        Self::new(ErrorKind::UnknownName, Some(name), None)
    }

    pub(crate) fn shutting_down() -> Self {
        Self::new(ErrorKind::ShuttingDown, None, None)
    }

    /// What kind of refusal this is.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The breaker, bulkhead or dependency that refused, if one did.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// For [`ErrorKind::BreakerOpen`]: how long until the breaker lets a
    /// probe through, when that is known (not for a forced-open breaker).
    pub fn retry_in(&self) -> Option<Duration> {
        match self.kind {
            ErrorKind::BreakerOpen => self.duration,
            _ => None,
        }
    }

    /// For [`ErrorKind::AttemptTimedOut`]: the per-attempt timeout that passed.
    pub fn timeout(&self) -> Option<Duration> {
        match self.kind {
            ErrorKind::AttemptTimedOut => self.duration,
            _ => None,
        }
    }

    /// `true` for [`ErrorKind::DeadlineExceeded`].
    pub fn is_deadline_exceeded(&self) -> bool {
        self.kind == ErrorKind::DeadlineExceeded
    }

    /// Whether the work may have taken effect although it failed: `true`
    /// when a deadline or an attempt's timeout cut an attempt that was
    /// running (the request may have reached the dependency, which may
    /// have acted on it and lost only its answer); `false` for every
    /// refusal before an attempt began (an open breaker, a full bulkhead,
    /// a deadline already passed). Reconcile such failures by looking the
    /// operation up by its [`IdempotencyKey`](crate::IdempotencyKey).
    pub fn may_have_taken_effect(&self) -> bool {
        self.cut
    }

    /// Whether this service's caller may retry this refusal when it is
    /// answered over the wire (HTTP: no `Do-Not-Retry`; gRPC: no pushback
    /// -1). Every refusal is this service's decision, which a retry would
    /// only add load to, except two: a draining instance's (the caller
    /// retries on another instance, which its load balancer picks), and a
    /// deadline's or timeout's, which say only that the time the caller
    /// gave is spent (it knows whether it has more: it may have sent one
    /// attempt's time; if not, its own deadline ends its retries).
    #[cfg(any(feature = "http", feature = "tonic"))]
    pub(crate) fn callers_may_retry(&self) -> bool {
        matches!(
            self.kind,
            ErrorKind::ShuttingDown | ErrorKind::DeadlineExceeded | ErrorKind::AttemptTimedOut
        )
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Error");
        d.field("kind", &self.kind);
        if let Some(name) = &self.name {
            d.field("name", name);
        }
        if let Some(duration) = &self.duration {
            d.field("duration", duration);
        }
        if self.cut {
            d.field("may_have_taken_effect", &true);
        }
        d.finish()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = self.name.as_deref().unwrap_or("?");
        match self.kind {
            ErrorKind::DeadlineExceeded => f.write_str("deadline exceeded"),
            ErrorKind::AttemptTimedOut => match self.duration {
                Some(d) => write!(f, "attempt timed out after {d:?}"),
                None => f.write_str("attempt timed out"),
            },
            ErrorKind::BreakerOpen => match self.duration {
                Some(d) => write!(
                    f,
                    "circuit breaker `{name}` is open; it admits a probe in {:?}",
                    whole_millis(d)
                ),
                None => write!(f, "circuit breaker `{name}` is open"),
            },
            ErrorKind::BulkheadFull => write!(f, "bulkhead `{name}` is full"),
            ErrorKind::LoadShed => write!(
                f,
                "call to `{name}` shed locally: the dependency is rejecting most calls"
            ),
            ErrorKind::UnknownName => write!(
                f,
                "`{name}` is not configured in the registry, which refuses unknown names"
            ),
            ErrorKind::ShuttingDown => f.write_str("not admitted: the service is shutting down"),
        }
    }
}

impl std::error::Error for Error {}

/// `d` rounded up to a whole millisecond, for messages: "in 29.956s", not
/// "in 29.955981319s" (and never "in 0ns" for a wait under a millisecond).
fn whole_millis(d: Duration) -> Duration {
    let ms = d.as_nanos().div_ceil(1_000_000);
    Duration::from_millis(u64::try_from(ms).unwrap_or(u64::MAX))
}

/// Lets functions returning `io::Result` be annotated as they are. Timeouts
/// and passed deadlines become [`std::io::ErrorKind::TimedOut`], other refusals
/// [`std::io::ErrorKind::Other`]; the original is kept as the inner error, and
/// [`Classify`](crate::Classify) for `io::Error` recognises it as a refusal
/// (never retried).
impl From<Error> for std::io::Error {
    fn from(e: Error) -> Self {
        let kind = match e.kind {
            ErrorKind::DeadlineExceeded | ErrorKind::AttemptTimedOut => {
                std::io::ErrorKind::TimedOut
            }
            _ => std::io::ErrorKind::Other,
        };
        std::io::Error::new(kind, e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_open_breakers_wait_is_shown_in_whole_milliseconds_rounded_up() {
        let shown = |d| Error::breaker_open(Arc::from("payments"), Some(d)).to_string();
        assert_eq!(
            shown(Duration::from_nanos(29_955_981_319)),
            "circuit breaker `payments` is open; it admits a probe in 29.956s"
        );
        assert_eq!(
            shown(Duration::from_nanos(198_416_330)),
            "circuit breaker `payments` is open; it admits a probe in 199ms"
        );
        // Under a millisecond is still a wait, not "0ns".
        assert!(shown(Duration::from_nanos(300)).ends_with("in 1ms"));
        assert!(shown(Duration::MAX).contains("is open; it admits a probe in"));
    }
}
