//! Answering with a failure: the library's refusals and upstream failures
//! as HTTP responses with an `application/problem+json` body (RFC 9457).

use std::fmt::Write as _;

use ::http::header::{CONTENT_TYPE, RETRY_AFTER};
use ::http::{HeaderValue, Response, StatusCode};

use super::Error;
use crate::{Classification, Classify, ErrorKind};

/// `application/problem+json`, the media type of RFC 9457 problem details.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// The extension marking an answer as a refusal by the library (the
/// handler's work did not run, or was cut).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RefusalAnswer;

/// The status a refusal is answered with:
///
/// | refusal | status | why |
/// |---|---|---|
/// | deadline exceeded, attempt timed out | 504 Gateway Timeout | we could not get an answer from our dependency in time (RFC 9110 §15.6.5) |
/// | breaker open, bulkhead full, load shed, shutting down | 503 Service Unavailable | a temporary overload or outage, with `Retry-After` when known (§15.6.4); a draining instance, whose peers can take the request |
/// | unknown name | 500 Internal Server Error | a configuration error of this server |
pub fn refusal_status(e: &crate::Error) -> StatusCode {
    match e.kind() {
        ErrorKind::DeadlineExceeded | ErrorKind::AttemptTimedOut => StatusCode::GATEWAY_TIMEOUT,
        ErrorKind::BreakerOpen
        | ErrorKind::BulkheadFull
        | ErrorKind::LoadShed
        | ErrorKind::ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
        ErrorKind::UnknownName => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

fn kind_name(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::DeadlineExceeded => "deadline_exceeded",
        ErrorKind::AttemptTimedOut => "attempt_timed_out",
        ErrorKind::BreakerOpen => "breaker_open",
        ErrorKind::BulkheadFull => "bulkhead_full",
        ErrorKind::LoadShed => "load_shed",
        ErrorKind::UnknownName => "unknown_name",
        ErrorKind::ShuttingDown => "shutting_down",
    }
}

/// The response a server gives for a refusal by `resilient`: the status of
/// [`refusal_status`], `Retry-After` (whole seconds, rounded up) when an
/// open breaker says when it admits a probe, `Do-Not-Retry: ?1` (the
/// refusal is this service's decision, and a client retrying it would
/// only add load: see the [module docs](crate::http); not for a draining
/// instance, whose peers can take the request, nor for a deadline or
/// timeout, which says only that the time the client gave is spent: the
/// client knows whether it has more, having sent one attempt's time, or
/// not, and then its own deadline ends its retries), and a problem+json
/// body:
///
/// ```json
/// {"type":"about:blank","title":"Service Unavailable","status":503,
///  "detail":"circuit breaker `payments` is open; …","kind":"breaker_open","name":"payments"}
/// ```
///
/// `kind` is the [`ErrorKind`] in snake case.
pub fn refusal_response(e: &crate::Error) -> Response<String> {
    let status = refusal_status(e);
    let mut extra = format!(",\"kind\":\"{}\"", kind_name(e.kind()));
    if let Some(name) = e.name() {
        extra.push_str(",\"name\":");
        json_string(&mut extra, name);
    }
    let mut response = problem(status, &e.to_string(), &extra);
    if let Some(wait) = e.retry_in() {
        set_retry_after(&mut response, wait);
    }
    // Marks the answer as the library's refusal before anything ran, which
    // an idempotency store must not keep (`tower::IdempotencyLayer`): not a
    // deadline or timeout that cut work while it ran, which may have taken
    // effect, so that a retry under the key must not run it again.
    if !e.may_have_taken_effect() {
        response.extensions_mut().insert(RefusalAnswer);
    }
    if !e.callers_may_retry() {
        super::set_do_not_retry(response.headers_mut());
    }
    response
}

impl Error {
    /// The response a service answers with when this call to its own
    /// dependency failed: a refusal as by [`refusal_response`]; a timeout
    /// as 504; a dependency that asked to wait (a 429 or 503 with
    /// `Retry-After`, also one that said not to retry) as 503 with the same
    /// `Retry-After`, so this service's callers wait too; the dependency's
    /// refusal of the request's content (a 400, 404, 409, 422 and the like,
    /// or a request that could not be built) as 424 Failed Dependency
    /// (RFC 4918 §11.4: "the requested action depended on another action
    /// and that action failed"), a 4xx, which no caller retries or counts
    /// against this service's health (the caller's own request may be what
    /// the dependency refused), whatever it makes of 5xx; any other failure of the dependency (also its
    /// refusal of this service itself: a 401 or 403) as 502 Bad Gateway
    /// (RFC 9110 §15.6.3: "an invalid response from an inbound server").
    ///
    /// The status comes from the last failure alone; the server layer
    /// (`resilient::tower`) adds `May-Have-Taken-Effect: ?1` when an
    /// annotated call in the handler acted before it.
    ///
    /// It carries `Do-Not-Retry: ?1` when the failure is not retryable
    /// (permanent: retrying this service would only repeat it; or the
    /// dependency itself said not to retry), which a caller then does not
    /// retry, though its breaker counts a marked 502 or 503 as this service
    /// failing; a transient failure leaves the caller free to retry, unless
    /// the server layer (`resilient::tower`) saw this service give up after
    /// its own retries.
    pub fn to_response(&self) -> Response<String> {
        if let Some(refusal) = self.refusal() {
            return refusal_response(refusal);
        }
        let class = self.classify();
        // A dependency that asked to wait: this service's callers wait as
        // long (a 502 carries no `Retry-After`, and would be retried at
        // once, into the same throttled dependency).
        let wait = match class {
            Classification::Throttled {
                retry_after: Some(wait),
            }
            | Classification::DoNotRetry {
                retry_after: Some(wait),
            } => Some(wait),
            _ => None,
        };
        // Only the last error is known here, not what the request did
        // before it (an earlier attempt, another call, the handler's own
        // writes): no status says "not processed" for a failure that was
        // not asked to wait.
        let status = if self.is_timeout() {
            StatusCode::GATEWAY_TIMEOUT
        } else if wait.is_some() {
            StatusCode::SERVICE_UNAVAILABLE
        } else if class == Classification::Permanent && self.refused_the_request() {
            // A 4xx, permanent for every caller whatever it makes of 5xx,
            // and never held against this service's health: the caller's
            // own request may be what the dependency refused. Not 502 or
            // 500, which a caller counts against this service when marked
            // "do not retry" (as the server layer marks a service's answer
            // after its calls gave up), or when it retries 500s.
            StatusCode::FAILED_DEPENDENCY
        } else {
            StatusCode::BAD_GATEWAY
        };
        let mut extra = String::new();
        if let Some(upstream) = self.status() {
            let _ = write!(extra, ",\"upstream_status\":{}", upstream.as_u16());
        }
        let mut response = problem(status, &self.to_string(), &extra);
        if let (Some(wait), false) = (wait, self.is_timeout()) {
            set_retry_after(&mut response, wait);
        }
        if !class.is_retryable() {
            super::set_do_not_retry(response.headers_mut());
        }
        response
    }

    /// The dependency refused this request's content, which may be the
    /// caller's (a 400, 404, 409, 410, 412, 413, 414, 415, 416 or 422), or
    /// a request that could not be built. Not its own failure (a 500, a
    /// malformed answer), which the calling function may even have
    /// retried, nor a refusal of this service itself (401, 403, 405, 407:
    /// revoked credentials, a wrong endpoint), which no request of any
    /// caller gets past.
    fn refused_the_request(&self) -> bool {
        match self.status() {
            Some(status) => matches!(status.as_u16(), 400 | 404 | 409..=410 | 412..=416 | 422),
            // Not sent because it could not be built: nothing reached the
            // dependency (a malformed answer may have done the work).
            None => !self.may_have_taken_effect(),
        }
    }
}

/// `Retry-After` in whole seconds, rounded up: a client that waits as long
/// never comes back early.
fn set_retry_after(response: &mut Response<String>, wait: std::time::Duration) {
    let secs = wait.as_nanos().div_ceil(1_000_000_000);
    let secs = u64::try_from(secs).unwrap_or(u64::MAX);
    response
        .headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from(secs));
}

fn problem(status: StatusCode, detail: &str, extra: &str) -> Response<String> {
    let mut body = String::with_capacity(128 + detail.len() + extra.len());
    body.push_str("{\"type\":\"about:blank\",\"title\":");
    json_string(&mut body, status.canonical_reason().unwrap_or(""));
    let _ = write!(body, ",\"status\":{},\"detail\":", status.as_u16());
    json_string(&mut body, detail);
    body.push_str(extra);
    body.push('}');
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
    response
}

/// Appends `s` as a JSON string literal (RFC 8259 §7).
fn json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_escapes_controls_and_quotes() {
        let mut s = String::new();
        json_string(&mut s, "a\"b\\c\nd\u{1}é");
        assert_eq!(s, "\"a\\\"b\\\\c\\nd\\u0001é\"");
    }

    /// Regression: a draining instance answered `Do-Not-Retry`, so clients
    /// did not retry on a healthy peer during a rolling deploy.
    #[test]
    fn a_draining_instance_lets_the_client_retry_elsewhere() {
        let draining = refusal_response(&crate::Error::shutting_down());
        assert_eq!(draining.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(!crate::http::is_do_not_retry(draining.headers()));
        let open = refusal_response(&crate::Error::breaker_open("p".into(), None));
        assert!(crate::http::is_do_not_retry(open.headers()));
    }
}
