//! gRPC semantics: which status codes are worth another attempt, and the
//! server's retry pushback.
//!
//! Client-agnostic (codes as the numbers the protocol sends); the `tonic`
//! feature applies it to `tonic::Status` (module `resilient::tonic`). Deadlines cross
//! gRPC hops in `grpc-timeout` ([`GrpcTimeout`](crate::GrpcTimeout)).
//!
//! Source: the gRPC retry design, proposal A6 ("gRPC Retry Design",
//! grpc/proposal `A6-client-retries.md`), and the status code guide
//! (`doc/statuscodes.md`) of the gRPC repository.

use std::time::Duration;

use crate::Classification;

/// The `grpc-retry-pushback-ms` metadata key.
pub const RETRY_PUSHBACK_MS: &str = "grpc-retry-pushback-ms";

/// The `may-have-taken-effect` metadata key: `?1` on a failed call whose
/// server acted on it in part (an annotated call in the handler succeeded
/// or may have taken effect), which a code such as `UNAVAILABLE` alone
/// would deny. `resilient::tower::ResilienceLayer` sets it on a failure
/// sent in the response headers (trailers-only), as it sets
/// `May-Have-Taken-Effect` over HTTP.
pub const MAY_HAVE_TAKEN_EFFECT: &str = "may-have-taken-effect";

/// The gRPC status codes this module names (the values of the wire
/// protocol; `OK` is 0).
pub mod code {
    /// `OK`: not an error.
    pub const OK: i32 = 0;
    /// `UNKNOWN`: an error the server did not map to a code (in most
    /// servers, an uncaught exception or a panic).
    pub const UNKNOWN: i32 = 2;
    /// `DEADLINE_EXCEEDED`.
    pub const DEADLINE_EXCEEDED: i32 = 4;
    /// `RESOURCE_EXHAUSTED`: a quota or the server's capacity ran out.
    pub const RESOURCE_EXHAUSTED: i32 = 8;
    /// `INTERNAL`: an invariant of the server broke.
    pub const INTERNAL: i32 = 13;
    /// `UNAVAILABLE`: the service is unavailable for now.
    pub const UNAVAILABLE: i32 = 14;
    /// `DATA_LOSS`: unrecoverable data loss or corruption.
    pub const DATA_LOSS: i32 = 15;
}

/// What a server's `grpc-retry-pushback-ms` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushback {
    /// Retry no sooner than this.
    RetryAfter(Duration),
    /// Do not retry this call at all.
    DoNotRetry,
}

/// Parses a `grpc-retry-pushback-ms` value, per gRPC proposal A6: a
/// non-negative decimal integer of milliseconds means "retry after that
/// long"; "if the value for pushback is negative or unparseable, then it
/// will be seen as the server asking the client not to retry at all".
/// So this never fails: everything that is not digits is
/// [`Pushback::DoNotRetry`], as is a number too large for a `u64`.
///
/// ```
/// use std::time::Duration;
/// use resilient::grpc::{parse_pushback, Pushback};
///
/// assert_eq!(parse_pushback("250"), Pushback::RetryAfter(Duration::from_millis(250)));
/// assert_eq!(parse_pushback("-1"), Pushback::DoNotRetry);
/// assert_eq!(parse_pushback("soon"), Pushback::DoNotRetry);
/// ```
pub fn parse_pushback(value: &str) -> Pushback {
    let v = value.trim_ascii();
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return Pushback::DoNotRetry;
    }
    match v.parse::<u64>() {
        Ok(ms) => Pushback::RetryAfter(Duration::from_millis(ms)),
        Err(_) => Pushback::DoNotRetry,
    }
}

/// How a gRPC status classifies as a failure; `None` for `OK`.
///
/// | code | classification | source |
/// |---|---|---|
/// | `UNAVAILABLE` (14) | transient | A6's example retry policy and `statuscodes.md`: "most likely a transient condition, which can be corrected by retrying with a backoff" |
/// | `RESOURCE_EXHAUSTED` (8) | throttled, after the pushback if given | the server or a quota ran out of capacity: retrying sooner adds load |
/// | `DEADLINE_EXCEEDED` (4) | transient | the `grpc-timeout` the request carried passed at the server; this library sends an attempt's time (`timeout_ms` under the call's deadline), so, as HTTP's 504, it is the attempt's timeout: the call's own deadline decides whether another attempt fits |
/// | `INTERNAL` (13), `UNKNOWN` (2), `DATA_LOSS` (15) | do-not-retry: a failure for a breaker, not retried | `statuscodes.md`: "some invariants expected by the underlying system have been broken", an error the server did not map (an uncaught exception), unrecoverable data loss: the server failing, as HTTP's 500; not in A6's example retry policy |
/// | every other code | permanent | A6 retries only the codes a service lists; `statuscodes.md` says `ABORTED` is retried "at a higher level" |
/// | a retryable code above, with a negative or malformed pushback | do-not-retry (a failure for a breaker, not retried) | A6: the server asks the client not to retry |
/// | any other, with such a pushback | permanent | the request is at fault either way |
///
/// A valid pushback on `UNAVAILABLE` or `DEADLINE_EXCEEDED` makes it
/// throttled for that long (A6: "the client will retry after the delay
/// specified by the server").
///
/// ```
/// use std::time::Duration;
/// use resilient::Classification;
/// use resilient::grpc::{classify_code, code, Pushback};
///
/// assert_eq!(classify_code(code::OK, None), None);
/// assert_eq!(classify_code(code::UNAVAILABLE, None), Some(Classification::Transient));
/// assert_eq!(
///     classify_code(code::RESOURCE_EXHAUSTED, Some(Pushback::RetryAfter(Duration::from_millis(40)))),
///     Some(Classification::Throttled { retry_after: Some(Duration::from_millis(40)) }),
/// );
/// assert_eq!(
///     classify_code(code::UNAVAILABLE, Some(Pushback::DoNotRetry)),
///     Some(Classification::DoNotRetry { retry_after: None }),
/// );
/// assert_eq!(
///     classify_code(code::DEADLINE_EXCEEDED, Some(Pushback::RetryAfter(Duration::from_millis(200)))),
///     Some(Classification::Throttled { retry_after: Some(Duration::from_millis(200)) }),
/// );
/// // The server failed while processing: not retried, but counted.
/// assert_eq!(
///     classify_code(code::INTERNAL, None),
///     Some(Classification::DoNotRetry { retry_after: None }),
/// );
/// // 3 is `INVALID_ARGUMENT`: the request is at fault either way.
/// assert_eq!(classify_code(3, Some(Pushback::DoNotRetry)), Some(Classification::Permanent));
/// ```
pub fn classify_code(code: i32, pushback: Option<Pushback>) -> Option<Classification> {
    if code == code::OK {
        return None;
    }
    // The server said not to retry (it already retried, or cannot serve
    // now): a failure of the dependency still counts as one for its
    // breaker, but is not retried; the request's own fault stays permanent.
    if pushback == Some(Pushback::DoNotRetry) {
        return classify_code(code, None).map(Classification::not_to_retry);
    }
    Some(match (code, pushback) {
        // The deadline the request carried (an attempt's, or the whole
        // call's) passed at the server: as HTTP's 504, an attempt that
        // timed out; the caller's own deadline decides whether another
        // one fits.
        (code::UNAVAILABLE | code::DEADLINE_EXCEEDED, None) => Classification::Transient,
        (
            code::UNAVAILABLE | code::RESOURCE_EXHAUSTED | code::DEADLINE_EXCEEDED,
            Some(Pushback::RetryAfter(d)),
        ) => Classification::Throttled {
            retry_after: Some(d),
        },
        (code::RESOURCE_EXHAUSTED, None) => Classification::Throttled { retry_after: None },
        // The server failed (as HTTP's 500): not retried, but counted.
        (code::INTERNAL | code::UNKNOWN | code::DATA_LOSS, _) => {
            Classification::DoNotRetry { retry_after: None }
        }
        _ => Classification::Permanent,
    })
}
