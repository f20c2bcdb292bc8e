//! HTTP semantics in one place: which responses are worth retrying, what
//! `Retry-After` says, the headers that carry a deadline, an idempotency key
//! and "do not retry" from one service to the next, and the error type an
//! annotated HTTP call returns.
//!
//! Client-agnostic: this module names only the [`http`] crate's
//! types. The `reqwest` feature adds conversions from reqwest's errors and
//! a request-builder extension (module `resilient::reqwest`); the `tower` and `axum`
//! features add the server side (modules `resilient::tower`, `resilient::axum`).
//!
//! # Headers
//!
//! | header | direction | meaning |
//! |---|---|---|
//! | [`IDEMPOTENCY_KEY`] `Idempotency-Key` | request | the [`IdempotencyKey`](crate::IdempotencyKey) of the operation, the same on every attempt (IETF draft `draft-ietf-httpapi-idempotency-key-header`, as Stripe and others use it) |
//! | [`GRPC_TIMEOUT`] `grpc-timeout` | request | the caller's remaining deadline, in the gRPC format ([`GrpcTimeout`](crate::GrpcTimeout)); understood by every gRPC server |
//! | [`REQUEST_BUDGET_MS`] `Request-Budget-Ms` | request | the same remaining deadline as whole milliseconds, for plain HTTP servers and for people reading logs |
//! | [`MAY_HAVE_TAKEN_EFFECT`] `May-Have-Taken-Effect: ?1` | response | "this failed request was acted on in part" (an annotated call in the handler succeeded, or may have taken effect, before it failed), set by `resilient::tower::ResilienceLayer` and kept by `IdempotencyLayer`; [`Error::may_have_taken_effect`](crate::http::Error::may_have_taken_effect) reads it, whatever the status |
//! | [`DO_NOT_RETRY`] `Do-Not-Retry: ?1` | response | "this service already retried, or refused to protect itself: do not retry it" (not on a deadline's 504 by itself: the caller knows whether it has time for another attempt); classified [`DoNotRetry`](crate::Classification::DoNotRetry) on a 5xx, 429 or 408 (not retried, a failure for a breaker), [`Permanent`](crate::Classification::Permanent) on other 4xx |
//! | `Retry-After` | response | when a 429/503 may be retried ([`retry_after`]) |
//!
//! Why `Request-Budget-Ms`: HTTP has no standard deadline header. The value
//! is *relative* (time left, not a point in time) because the two hosts'
//! clocks need not agree; whole milliseconds because that is the unit of
//! `deadline_ms`/`timeout_ms` and it is readable in a log line; no `X-`
//! prefix, as RFC 6648 asks of new headers. Envoy's
//! `x-envoy-expected-rq-timeout-ms` is the same idea. When both deadline
//! headers arrive, the server takes the sooner.
//!
//! Why `Do-Not-Retry`: the SRE book ("Handling Overload") asks lower layers
//! to answer "overloaded; don't retry" so that only one layer of a call
//! chain retries; gRPC carries it as a negative `grpc-retry-pushback-ms`
//! (gRPC proposal A6), HTTP has no equivalent. The value `?1` is a
//! structured-field boolean (RFC 8941 §3.3.6); any other value is ignored.

mod error;
mod problem;
mod retry_after;
mod status;

use std::time::Duration;

use ::http::{HeaderMap, HeaderName, HeaderValue};

#[cfg(feature = "reqwest")]
pub(crate) use error::Stage;
pub use error::{Error, classify_retrying_500};
#[allow(unused_imports, reason = "used by the tower layers, when enabled")]
pub(crate) use problem::RefusalAnswer;
pub use problem::{PROBLEM_JSON, refusal_response, refusal_status};
pub use retry_after::{parse_retry_after, retry_after};
pub use status::{StatusPolicy, classify_status};

/// `Idempotency-Key`: the operation's [`IdempotencyKey`](crate::IdempotencyKey).
pub const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// `grpc-timeout`: the caller's remaining deadline, gRPC format.
pub const GRPC_TIMEOUT: HeaderName = HeaderName::from_static("grpc-timeout");

/// `Request-Budget-Ms`: the caller's remaining deadline in whole
/// milliseconds (see the module docs for why this name and unit).
pub const REQUEST_BUDGET_MS: HeaderName = HeaderName::from_static("request-budget-ms");

/// `Do-Not-Retry`: set to `?1` on a response its client must not retry.
pub const DO_NOT_RETRY: HeaderName = HeaderName::from_static("do-not-retry");

/// `grpc-retry-pushback-ms`: the gRPC server's retry pushback (see
/// `resilient::grpc`).
pub const GRPC_RETRY_PUSHBACK_MS: HeaderName = HeaderName::from_static("grpc-retry-pushback-ms");

/// `true` when `headers` carry `Do-Not-Retry: ?1`.
pub fn is_do_not_retry(headers: &HeaderMap) -> bool {
    says_true(headers, &DO_NOT_RETRY)
}

/// Marks a response's headers "do not retry".
pub fn set_do_not_retry(headers: &mut HeaderMap) {
    set_true(headers, DO_NOT_RETRY);
}

/// `true` when `headers` carry `name: ?1`, a structured-field boolean
/// (RFC 8941 §3.3.6) that is true.
fn says_true(headers: &HeaderMap, name: &HeaderName) -> bool {
    headers
        .get_all(name)
        .iter()
        .any(|v| v.as_bytes().trim_ascii() == b"?1")
}

/// Sets `name: ?1`.
fn set_true(headers: &mut HeaderMap, name: HeaderName) {
    headers.insert(name, HeaderValue::from_static("?1"));
}

/// `May-Have-Taken-Effect`: set to `?1` on a failure response whose
/// request may nevertheless have been acted on, in part: an annotated call
/// in the handler succeeded or may have taken effect before the failure.
/// A status alone cannot say so: a 503, a 429 or a 4xx reads as "nothing
/// was done", and it is chosen from the last failure only.
pub const MAY_HAVE_TAKEN_EFFECT: HeaderName = HeaderName::from_static("may-have-taken-effect");

/// `true` when `headers` carry `May-Have-Taken-Effect: ?1`.
pub fn says_may_have_taken_effect(headers: &HeaderMap) -> bool {
    says_true(headers, &MAY_HAVE_TAKEN_EFFECT)
}

/// Marks a failure response's headers "may have taken effect".
pub fn set_may_have_taken_effect(headers: &mut HeaderMap) {
    set_true(headers, MAY_HAVE_TAKEN_EFFECT);
}

/// The deadline budget a request carries: the sooner of `grpc-timeout` and
/// `Request-Budget-Ms`, or `None` when neither is present and well formed.
///
/// A malformed value is ignored rather than refused: a deadline is advice
/// from the caller, and a server that rejected requests over it would turn
/// a harmless client bug into an outage. A `Request-Budget-Ms` of `0` means
/// the caller's deadline has already passed.
///
/// ```
/// use std::time::Duration;
/// use http::HeaderMap;
/// use resilient::http::{deadline_budget, GRPC_TIMEOUT, REQUEST_BUDGET_MS};
///
/// let mut headers = HeaderMap::new();
/// headers.insert(GRPC_TIMEOUT, "900m".parse().unwrap());
/// headers.insert(REQUEST_BUDGET_MS, "750".parse().unwrap());
/// assert_eq!(deadline_budget(&headers), Some(Duration::from_millis(750)));
/// ```
pub fn deadline_budget(headers: &HeaderMap) -> Option<Duration> {
    let grpc = headers
        .get(&GRPC_TIMEOUT)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<crate::GrpcTimeout>().ok())
        .map(crate::GrpcTimeout::duration);
    let budget = headers
        .get(&REQUEST_BUDGET_MS)
        .and_then(|v| parse_budget_ms(v.as_bytes()));
    match (grpc, budget) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Parses a `Request-Budget-Ms` value: 1 to 19 ASCII digits (any `u64`
/// fits in 20; 19 always fits, and 10^18 ms is 31 million years).
fn parse_budget_ms(v: &[u8]) -> Option<Duration> {
    let v = v.trim_ascii();
    if v.is_empty() || v.len() > 19 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let ms = v.iter().fold(0u64, |n, &d| n * 10 + u64::from(d - b'0'));
    Some(Duration::from_millis(ms))
}

/// Writes `budget` into `headers` as `grpc-timeout` and `Request-Budget-Ms`
/// (rounded up to a whole millisecond, so the next hop is never told it has
/// less time than we know of; a budget of zero stays `0`, "already passed").
///
/// `grpc-timeout` cannot express zero: a passed deadline is sent as
/// `Request-Budget-Ms: 0` alone (and the caller should not be sending at
/// all).
pub fn insert_deadline(headers: &mut HeaderMap, budget: Duration) {
    let ms = budget.as_nanos().div_ceil(1_000_000);
    let ms = u64::try_from(ms).unwrap_or(u64::MAX);
    headers.insert(REQUEST_BUDGET_MS, HeaderValue::from(ms));
    if budget.is_zero() {
        headers.remove(&GRPC_TIMEOUT);
    } else {
        let grpc = crate::GrpcTimeout::from(budget).to_string();
        // Always ASCII digits and a unit letter.
        if let Ok(v) = HeaderValue::from_str(&grpc) {
            headers.insert(GRPC_TIMEOUT, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_header_round_trips_and_rejects_garbage() {
        let mut h = HeaderMap::new();
        insert_deadline(&mut h, Duration::from_micros(1500));
        assert_eq!(h[&REQUEST_BUDGET_MS], "2");
        assert_eq!(h[&GRPC_TIMEOUT], "1500000n"); // the finest unit that fits
        assert_eq!(deadline_budget(&h), Some(Duration::from_micros(1500)));
        for bad in ["", "-1", "1.5", "12a", "99999999999999999999", "+5"] {
            assert_eq!(parse_budget_ms(bad.as_bytes()), None, "{bad:?}");
        }
        assert_eq!(parse_budget_ms(b" 0 "), Some(Duration::ZERO));
    }

    #[test]
    fn zero_budget_sends_no_grpc_timeout() {
        let mut h = HeaderMap::new();
        h.insert(GRPC_TIMEOUT, HeaderValue::from_static("5S"));
        insert_deadline(&mut h, Duration::ZERO);
        assert!(h.get(&GRPC_TIMEOUT).is_none());
        assert_eq!(deadline_budget(&h), Some(Duration::ZERO));
    }

    #[test]
    fn may_have_taken_effect_needs_true() {
        let mut h = HeaderMap::new();
        assert!(!says_may_have_taken_effect(&h));
        h.insert(MAY_HAVE_TAKEN_EFFECT, HeaderValue::from_static("?0"));
        assert!(!says_may_have_taken_effect(&h));
        set_may_have_taken_effect(&mut h);
        assert!(says_may_have_taken_effect(&h));
        // Read off a failure response, whatever its status says.
        let e = Error::from_status(::http::StatusCode::SERVICE_UNAVAILABLE, h);
        assert!(e.may_have_taken_effect());
        let e = Error::from_status(::http::StatusCode::SERVICE_UNAVAILABLE, HeaderMap::new());
        assert!(!e.may_have_taken_effect());
    }

    #[test]
    fn do_not_retry_needs_true() {
        let mut h = HeaderMap::new();
        assert!(!is_do_not_retry(&h));
        h.insert(DO_NOT_RETRY, HeaderValue::from_static("?0"));
        assert!(!is_do_not_retry(&h));
        set_do_not_retry(&mut h);
        assert!(is_do_not_retry(&h));
    }
}
