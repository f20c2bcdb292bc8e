//! Which failures are worth another attempt: decided in one place, by the
//! error type, so that the retry loop, the circuit breaker and the retry
//! budget all agree.

use std::io;
use std::time::Duration;

/// What a failure says about trying again.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Classification {
    /// The dependency failed for a reason that may pass: a reset connection,
    /// a timeout, a 502/503/504. Retried, and counted as a failure by a
    /// circuit breaker.
    Transient,
    /// The dependency is shedding load and asked us to slow down (HTTP 429,
    /// a 503 with `Retry-After`, gRPC `RESOURCE_EXHAUSTED`). Retried no
    /// sooner than `retry_after`, when given, and counted as a failure.
    Throttled {
        /// The earliest moment the server will accept a retry, as it said.
        retry_after: Option<Duration>,
    },
    /// Trying again cannot help: a malformed request, bad credentials, not
    /// found, a business rule, or a refusal by `resilient` itself. Returned
    /// at once; a circuit breaker counts it as neither failure nor success.
    Permanent,
    /// The dependency failed, and another attempt is not to be made: it
    /// said so (a 5xx or a 429 with `Do-Not-Retry: ?1`, a retryable gRPC
    /// code with `grpc-retry-pushback-ms: -1`: it has already retried on
    /// the caller's behalf, or cannot serve anyone now, its own dependency
    /// down or its breaker open), or it failed while processing (HTTP 500,
    /// gRPC `INTERNAL`, `UNKNOWN`, `DATA_LOSS`: often a bug that fails
    /// again, after work that may be half done). Returned at once, as a
    /// permanent failure is, but counted as a failure by a circuit breaker
    /// and an adaptive throttle, as a transient one is: a service that
    /// fails every request, or fronts a dead dependency, is down for its
    /// callers.
    /// `retry_after` is the server's `Retry-After`, which a breaker that
    /// opens on it honours as it does a throttled failure's.
    DoNotRetry {
        /// How long the server said it would not serve, if it said.
        retry_after: Option<Duration>,
    },
}

impl Classification {
    /// `true` when another attempt may succeed (transient or throttled).
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            Classification::Transient | Classification::Throttled { .. }
        )
    }

    /// `true` when the failure says the dependency is failing (transient,
    /// throttled, or do-not-retry), which a circuit breaker counts; `false`
    /// for a permanent failure, the caller's own mistake.
    pub fn is_dependency_failure(self) -> bool {
        !matches!(self, Classification::Permanent)
    }

    /// What the failure is when its answer also said not to retry
    /// (`Do-Not-Retry`, gRPC pushback -1): a failure that would have been
    /// retried becomes [`DoNotRetry`](Self::DoNotRetry), keeping the
    /// server's `Retry-After`; a permanent one stays permanent.
    ///
    /// ```
    /// use std::time::Duration;
    /// use resilient::Classification;
    ///
    /// let wait = Some(Duration::from_secs(30));
    /// assert_eq!(
    ///     Classification::Throttled { retry_after: wait }.not_to_retry(),
    ///     Classification::DoNotRetry { retry_after: wait },
    /// );
    /// assert_eq!(Classification::Permanent.not_to_retry(), Classification::Permanent);
    /// ```
    pub fn not_to_retry(self) -> Classification {
        match self {
            Classification::Transient => Classification::DoNotRetry { retry_after: None },
            Classification::Throttled { retry_after } => Classification::DoNotRetry { retry_after },
            other => other,
        }
    }
}

/// Says whether a failure is worth another attempt.
///
/// Implement it for the error type of every function annotated with
/// `retries`, `breaker` or `budget`. For a type you cannot implement it for,
/// name a function instead: `#[resilient(classify = my_classifier)]` with
/// `fn my_classifier(e: &TheError) -> resilient::Classification`.
///
/// ```
/// use resilient::{Classification, Classify};
///
/// enum PayError { Declined, Unavailable, RateLimited(u64), Resilience(resilient::Error) }
///
/// impl Classify for PayError {
///     fn classify(&self) -> Classification {
///         match self {
///             PayError::Declined => Classification::Permanent,
///             PayError::Unavailable => Classification::Transient,
///             PayError::RateLimited(secs) => Classification::Throttled {
///                 retry_after: Some(std::time::Duration::from_secs(*secs)),
///             },
///             // A refusal by the library is final (see `impl Classify for resilient::Error`).
///             PayError::Resilience(e) => e.classify(),
///         }
///     }
/// }
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` does not say which failures are worth retrying",
    label = "`{Self}` does not implement `resilient::Classify`",
    note = "if `{Self}` is defined in your crate, implement `resilient::Classify` for it; or name a function `fn(&E) -> resilient::Classification`, where `E` is the annotated function's error type, with `#[resilient(classify = path)]`",
    note = "if `{Self}` comes from another crate (`reqwest::Error`, `anyhow::Error`, `std::fmt::Error`, `String`, ...), the orphan rule forbids implementing `Classify` for it here: wrap it in an error type of your own, or, for an HTTP client, use `resilient::http::Error` (feature `reqwest`), which classifies responses and connection failures",
    note = "for a boxed error (`Box<dyn std::error::Error + Send + Sync>`), the function named with `classify = path` takes the box: `fn(&Box<dyn std::error::Error + Send + Sync>) -> resilient::Classification`"
)]
pub trait Classify {
    /// Classify this failure.
    fn classify(&self) -> Classification;

    /// `true` when the failed operation may nevertheless have taken effect
    /// at the dependency: the request went out and the answer was lost (a
    /// timeout while reading the response, a connection reset mid-response).
    /// [`observe`](crate::observe) reports it, so the caller can reconcile
    /// by the operation's [`IdempotencyKey`](crate::IdempotencyKey) instead
    /// of assuming nothing happened.
    ///
    /// The default, `false`, suits errors that prove the request was not
    /// acted on (refused connections, validation errors, a `503` the server
    /// sent before doing anything). Attempts cut by the library's own
    /// timeouts are reported as possibly applied whatever this says.
    fn may_have_taken_effect(&self) -> bool {
        false
    }

    /// Whether this value is one of the library's own refusals carried in
    /// your type (`Some(true)`: say a `Resilience(resilient::Error)`
    /// variant), or your function's own error (`Some(false)`); `None`, the
    /// default, when the type cannot tell.
    ///
    /// It matters in one case: a nested annotated call refused because this
    /// attempt's deadline, which it inherited, passed. That refusal is this
    /// layer's own timeout, and is retried as one; an error of your own,
    /// returned at that same instant (a card declined as the timer expires),
    /// keeps its own classification. Without this method the engine takes
    /// any error returned after such a nested refusal as the refusal.
    fn is_refusal(&self) -> Option<bool> {
        None
    }
}

/// A classification and whether the failure may have taken effect: what
/// the engine learns from an error. Not a public API.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    /// The classification.
    pub class: Classification,
    /// See [`Classify::may_have_taken_effect`].
    pub may_have_taken_effect: bool,
    /// See [`Classify::is_refusal`].
    pub is_refusal: Option<bool>,
}

impl From<Classification> for Verdict {
    fn from(class: Classification) -> Self {
        Verdict {
            class,
            may_have_taken_effect: false,
            is_refusal: None,
        }
    }
}

/// By [`io::ErrorKind`]: interrupted, timed-out, reset, aborted, refused,
/// would-block and broken-pipe errors are transient (the connection or the
/// peer may come back); everything else, such as not-found, permission
/// denied or invalid input, is permanent.
impl Classify for io::Error {
    fn classify(&self) -> Classification {
        use io::ErrorKind::*;
        // A refusal carried inside an `io::Error` (see `From<Error> for
        // io::Error`) stays a refusal.
        if self
            .get_ref()
            .is_some_and(|inner| inner.downcast_ref::<crate::Error>().is_some())
        {
            return Classification::Permanent;
        }
        match self.kind() {
            Interrupted | TimedOut | ConnectionReset | ConnectionAborted | ConnectionRefused
            | WouldBlock | BrokenPipe | UnexpectedEof | NotConnected | HostUnreachable
            | NetworkUnreachable | NetworkDown | ResourceBusy => Classification::Transient,
            _ => Classification::Permanent,
        }
    }

    /// A refusal carried inside an `io::Error` (see `From<Error> for
    /// io::Error`) says so.
    fn is_refusal(&self) -> Option<bool> {
        Some(
            self.get_ref()
                .is_some_and(|inner| inner.downcast_ref::<crate::Error>().is_some()),
        )
    }

    /// A timeout, reset, abort, broken pipe or early end of stream may have
    /// come after the request was written; a refused connection or an
    /// unreachable network cannot have.
    fn may_have_taken_effect(&self) -> bool {
        use io::ErrorKind::*;
        if let Some(refusal) = self
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<crate::Error>())
        {
            return refusal.may_have_taken_effect();
        }
        matches!(
            self.kind(),
            TimedOut | ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof
        )
    }
}

/// Always [`Classification::Permanent`]: a refusal by the library (a passed
/// deadline, an open breaker, a full bulkhead, a call shed locally, an
/// attempt that already used up its retries) is a decision already taken by
/// the layer that made it. An outer layer that retried it would defeat the
/// breaker, overrun the deadline, or multiply retries across layers.
impl Classify for crate::Error {
    fn classify(&self) -> Classification {
        Classification::Permanent
    }

    /// A deadline or timeout that cut a running attempt (see
    /// [`Error::may_have_taken_effect`](crate::Error::may_have_taken_effect)).
    fn may_have_taken_effect(&self) -> bool {
        crate::Error::may_have_taken_effect(self)
    }

    fn is_refusal(&self) -> Option<bool> {
        Some(true)
    }
}

impl<C: Classify + ?Sized> Classify for &C {
    fn classify(&self) -> Classification {
        (**self).classify()
    }
    fn may_have_taken_effect(&self) -> bool {
        (**self).may_have_taken_effect()
    }
    fn is_refusal(&self) -> Option<bool> {
        (**self).is_refusal()
    }
}

impl<C: Classify + ?Sized> Classify for Box<C> {
    fn classify(&self) -> Classification {
        (**self).classify()
    }
    fn may_have_taken_effect(&self) -> bool {
        (**self).may_have_taken_effect()
    }
    fn is_refusal(&self) -> Option<bool> {
        (**self).is_refusal()
    }
}
