//! Which HTTP responses are failures, and which failures are worth another
//! attempt.

use ::http::{HeaderMap, StatusCode};

use crate::Classification;

/// Choices in classifying status codes that depend on the server; the
/// default follows RFC 9110 and is right for most APIs.
///
/// ```
/// use http::{HeaderMap, StatusCode};
/// use resilient::Classification;
/// use resilient::http::StatusPolicy;
///
/// let none = HeaderMap::new();
/// let ise = StatusCode::INTERNAL_SERVER_ERROR;
/// assert_eq!(
///     StatusPolicy::DEFAULT.classify(ise, &none),
///     Some(Classification::DoNotRetry { retry_after: None }),
/// );
/// assert_eq!(
///     StatusPolicy::DEFAULT.retry_500(true).classify(ise, &none),
///     Some(Classification::Transient),
/// );
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StatusPolicy {
    retry_500: bool,
}

impl StatusPolicy {
    /// RFC 9110 semantics, 500 not retried but counted as the
    /// dependency's failure (see [`classify_status`]).
    pub const DEFAULT: StatusPolicy = StatusPolicy { retry_500: false };

    /// Whether `500 Internal Server Error` is transient. Off by default:
    /// RFC 9110 §15.6.1 says only that the server "encountered an unexpected
    /// condition", which is as often a bug that fails every time (and, for
    /// a non-idempotent request, may have half-done the work) as a passing
    /// fault, so it is not retried; but it is the server failing, not the
    /// request, so a breaker counts it ([`Classification::DoNotRetry`]).
    /// Turn it on for a dependency known to fail that way briefly.
    pub const fn retry_500(self, yes: bool) -> Self {
        StatusPolicy { retry_500: yes }
    }

    /// Classifies a response; see [`classify_status`].
    pub fn classify(self, status: StatusCode, headers: &HeaderMap) -> Option<Classification> {
        if status.is_informational() || status.is_success() || status.is_redirection() {
            return None;
        }
        let class = self.classify_status(status, headers);
        // The server said not to retry (it already retried, or cannot
        // serve anyone now): a failure of the dependency is still one, for
        // its breaker, but is not retried; the request's own fault stays
        // permanent.
        Some(if super::is_do_not_retry(headers) {
            class.not_to_retry()
        } else {
            class
        })
    }

    fn classify_status(self, status: StatusCode, headers: &HeaderMap) -> Classification {
        let throttled_or_transient = || match super::retry_after(headers) {
            Some(d) => Classification::Throttled {
                retry_after: Some(d),
            },
            None => Classification::Transient,
        };
        match status {
            // §15.5.9: the server timed out waiting for the request; "the
            // client MAY repeat that request".
            StatusCode::REQUEST_TIMEOUT => Classification::Transient,
            // RFC 6585 §4 (429) and RFC 9110 §15.6.4 (503): the server is
            // shedding load and may say when to come back (§10.2.3).
            StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE => {
                throttled_or_transient()
            }
            // §15.6.3, §15.6.5: a gateway could not reach, or did not hear
            // back from, the server behind it in time.
            StatusCode::BAD_GATEWAY | StatusCode::GATEWAY_TIMEOUT => Classification::Transient,
            StatusCode::INTERNAL_SERVER_ERROR if self.retry_500 => Classification::Transient,
            // §15.6.1: the server failed while processing. Not retried (see
            // `retry_500`), but the dependency's failure, not the
            // request's: a service that fails every request is cut off by
            // its callers' breakers, as Resilience4j counts every
            // exception by default.
            StatusCode::INTERNAL_SERVER_ERROR => Classification::DoNotRetry { retry_after: None },
            // Every other 4xx is the request's fault and will fail again;
            // other 5xx (501 Not Implemented, 505, 507, 511) do not pass
            // either.
            _ => Classification::Permanent,
        }
    }
}

/// How a response's status classifies as a failure, by RFC 9110 with
/// [`StatusPolicy::DEFAULT`]; `None` for 1xx, 2xx and 3xx (not failures).
///
/// | status | classification | source |
/// |---|---|---|
/// | 408 | transient | RFC 9110 §15.5.9: "the client MAY repeat that request" |
/// | 429, 503 with a valid `Retry-After` | throttled, for that long | RFC 6585 §4, RFC 9110 §15.6.4, §10.2.3 |
/// | 429, 503 without | transient | the server is overloaded for now |
/// | 502, 504 | transient | §15.6.3, §15.6.5: a gateway's upstream failed or was slow |
/// | 500 | do-not-retry: a failure for a breaker, not retried ([`StatusPolicy::retry_500`] makes it transient) | §15.6.1: the server met "an unexpected condition", often a bug that fails again, which may have half-done the request; the server's failure, not the request's |
/// | other 4xx and 5xx | permanent | the request, not the moment, is at fault |
/// | any of the retryable above, with `Do-Not-Retry: ?1` | do-not-retry (a failure for a breaker, not retried) | the server already retried, or cannot serve now (see the [module docs](crate::http)) |
/// | a permanent one, with `Do-Not-Retry: ?1` | permanent | the request is at fault either way |
///
/// ```
/// use http::{HeaderMap, StatusCode, header::RETRY_AFTER};
/// use std::time::Duration;
/// use resilient::Classification;
/// use resilient::http::classify_status;
///
/// let mut headers = HeaderMap::new();
/// assert_eq!(classify_status(StatusCode::OK, &headers), None);
/// assert_eq!(classify_status(StatusCode::NOT_FOUND, &headers), Some(Classification::Permanent));
/// assert_eq!(classify_status(StatusCode::SERVICE_UNAVAILABLE, &headers), Some(Classification::Transient));
/// headers.insert(RETRY_AFTER, "2".parse().unwrap());
/// assert_eq!(
///     classify_status(StatusCode::TOO_MANY_REQUESTS, &headers),
///     Some(Classification::Throttled { retry_after: Some(Duration::from_secs(2)) }),
/// );
/// // A service that gave up on its own dependency: down for its callers too.
/// resilient::http::set_do_not_retry(&mut headers);
/// assert_eq!(
///     classify_status(StatusCode::SERVICE_UNAVAILABLE, &headers),
///     Some(Classification::DoNotRetry { retry_after: Some(Duration::from_secs(2)) }),
/// );
/// assert_eq!(classify_status(StatusCode::NOT_FOUND, &headers), Some(Classification::Permanent));
/// ```
pub fn classify_status(status: StatusCode, headers: &HeaderMap) -> Option<Classification> {
    StatusPolicy::DEFAULT.classify(status, headers)
}

/// `true` for a failure status after which the server may nevertheless
/// have carried out the request: a 500 (it failed while processing), and a
/// 502/504 or other 5xx from a gateway (its upstream may have done it).
/// 503 and 429 are refusals before processing (RFC 9110 §15.6.4, RFC 6585
/// §4), 408 a request the server never finished receiving (§15.5.9), and
/// other 4xx requests it rejected.
pub(crate) fn may_have_taken_effect(status: StatusCode) -> bool {
    status.is_server_error() && status != StatusCode::SERVICE_UNAVAILABLE
}
