//! `resilient::http::Error`: every way an HTTP call can fail, classified.

use std::fmt;
use std::time::Duration;

use ::http::{HeaderMap, StatusCode};

use super::status::{StatusPolicy, may_have_taken_effect};
use crate::{Classification, Classify};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A failed HTTP call: an unsuccessful response, a transport failure, or a
/// refusal by `resilient` itself. Ready to be the error type of an
/// annotated function, with no glue:
///
/// ```
/// # #[cfg(feature = "reqwest")] mod m {
/// use resilient::{IdempotencyKey, resilient};
/// use resilient::reqwest::RequestBuilderExt;
///
/// #[resilient(retries = 3, deadline_ms = 15000, timeout_ms = 2000)]
/// async fn charge(client: &reqwest::Client, key: &IdempotencyKey, cents: u64)
///     -> Result<String, resilient::http::Error>
/// {
///     let response = client
///         .post("http://127.0.0.1:1/charges")
///         .idempotency_key(key)
///         .body(cents.to_string())
///         .send_checked()   // sends the deadline; a non-success status is an `Err`
///         .await?;
///     Ok(response.text().await?)
/// }
/// # }
/// ```
///
/// It implements [`Classify`] (by [`classify_status`](super::classify_status)
/// for a response; transport failures are transient; refusals permanent)
/// and `From<resilient::Error>`, and, with the `reqwest` feature,
/// `From<reqwest::Error>`. Other clients build it with
/// [`Error::from_status`], [`Error::not_sent`], [`Error::after_send`] and
/// [`Error::invalid_response`].
///
/// To retry `500 Internal Server Error` too, annotate with
/// `#[resilient(classify = resilient::http::classify_retrying_500, …)]`.
pub struct Error {
    repr: Box<Repr>,
}

enum Repr {
    Status {
        status: StatusCode,
        headers: HeaderMap,
        body: Option<String>,
    },
    Transport {
        source: BoxError,
        stage: Stage,
        timeout: bool,
    },
    Refused(crate::Error),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    /// Failed before the request left: it cannot have taken effect.
    NotSent,
    /// Failed after the request (or part of it) was written: the answer was
    /// lost, the operation may have happened.
    AfterSend,
    /// A successful response that could not be used (undecodable body): the
    /// operation happened; trying again cannot fix the response.
    InvalidResponse,
    /// The request could not be built: nothing sent, and nothing to retry.
    InvalidRequest,
    /// The caller's own request body failed while it was sent: the
    /// caller's fault, not retried, but what went out of it may have been
    /// acted on (review 33). Made by the `reqwest` integration only.
    #[cfg_attr(not(feature = "reqwest"), allow(dead_code))]
    BodyFailed,
}

impl Error {
    fn new(repr: Repr) -> Self {
        Error {
            repr: Box::new(repr),
        }
    }

    /// A response whose status is a failure, with its headers (which carry
    /// `Retry-After` and `Do-Not-Retry`).
    pub fn from_status(status: StatusCode, headers: HeaderMap) -> Self {
        Self::new(Repr::Status {
            status,
            headers,
            body: None,
        })
    }

    /// Attaches the response body (or its start), shown by `Display`.
    /// No effect on other kinds of error.
    pub fn with_body(mut self, text: impl Into<String>) -> Self {
        if let Repr::Status { body, .. } = &mut *self.repr {
            *body = Some(text.into());
        }
        self
    }

    /// A transport failure before anything was sent (connection refused,
    /// name resolution, TLS handshake): transient, and certainly not done.
    pub fn not_sent(source: impl Into<BoxError>) -> Self {
        Self::transport(source.into(), Stage::NotSent)
    }

    /// A transport failure after the request went out (a timeout or a reset
    /// connection while waiting for or reading the answer): transient, and
    /// the operation [may have taken effect](Error::may_have_taken_effect).
    pub fn after_send(source: impl Into<BoxError>) -> Self {
        Self::transport(source.into(), Stage::AfterSend)
    }

    /// A successful response that could not be used (its body did not
    /// decode): permanent (the same request gets the same answer), and the
    /// operation took effect.
    pub fn invalid_response(source: impl Into<BoxError>) -> Self {
        Self::transport(source.into(), Stage::InvalidResponse)
    }

    /// A request that could not be built (a bad URL or header): permanent,
    /// nothing was sent.
    pub fn invalid_request(source: impl Into<BoxError>) -> Self {
        Self::transport(source.into(), Stage::InvalidRequest)
    }

    fn transport(source: BoxError, stage: Stage) -> Self {
        let timeout = {
            let mut e: Option<&(dyn std::error::Error + 'static)> = Some(&*source);
            let mut found = false;
            while let Some(err) = e {
                if err
                    .downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
                {
                    found = true;
                    break;
                }
                e = err.source();
            }
            found
        };
        Self::transport_with(source, stage, timeout)
    }

    /// For client integrations that know better than the source chain
    /// whether the failure was a timeout.
    pub(crate) fn transport_with(source: BoxError, stage: Stage, timeout: bool) -> Self {
        Self::new(Repr::Transport {
            source,
            stage,
            timeout,
        })
    }

    /// The response's status, for an unsuccessful response.
    pub fn status(&self) -> Option<StatusCode> {
        match &*self.repr {
            Repr::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The response's headers, for an unsuccessful response.
    pub fn headers(&self) -> Option<&HeaderMap> {
        match &*self.repr {
            Repr::Status { headers, .. } => Some(headers),
            _ => None,
        }
    }

    /// The response body, when it was read (for permanent failures, whose
    /// body usually says why).
    pub fn body(&self) -> Option<&str> {
        match &*self.repr {
            Repr::Status { body, .. } => body.as_deref(),
            _ => None,
        }
    }

    /// The library's refusal (deadline passed, breaker open, …), if this is one.
    pub fn refusal(&self) -> Option<&crate::Error> {
        match &*self.repr {
            Repr::Refused(e) => Some(e),
            _ => None,
        }
    }

    /// The server's `Retry-After`, for an unsuccessful response carrying a
    /// well-formed one.
    pub fn retry_after(&self) -> Option<Duration> {
        self.headers().and_then(super::retry_after)
    }

    /// `true` when the response said `Do-Not-Retry: ?1`: the server already
    /// retried its own dependency, or refused to protect itself.
    pub fn is_do_not_retry(&self) -> bool {
        self.headers().is_some_and(super::is_do_not_retry)
    }

    /// `true` when the failure happened after the request was sent, so the
    /// operation may have happened at the server although the call failed:
    /// a timeout or a broken connection while waiting for the answer, an
    /// undecodable success, a 500/502/504 (see [`classify_status`]'s
    /// table), or any failure the server marked `May-Have-Taken-Effect: ?1`
    /// (it acted on the request in part before failing). Reconcile such
    /// failures by looking the operation up by its
    /// [`IdempotencyKey`](crate::IdempotencyKey).
    ///
    /// [`classify_status`]: super::classify_status
    pub fn may_have_taken_effect(&self) -> bool {
        match &*self.repr {
            Repr::Status {
                status, headers, ..
            } => may_have_taken_effect(*status) || super::says_may_have_taken_effect(headers),
            Repr::Transport { stage, .. } => {
                matches!(
                    stage,
                    Stage::AfterSend | Stage::InvalidResponse | Stage::BodyFailed
                )
            }
            Repr::Refused(e) => e.may_have_taken_effect(),
        }
    }

    /// `true` for a timeout: the transport's own, or the library's
    /// attempt timeout or deadline.
    pub fn is_timeout(&self) -> bool {
        match &*self.repr {
            Repr::Status { status, .. } => {
                *status == StatusCode::GATEWAY_TIMEOUT || *status == StatusCode::REQUEST_TIMEOUT
            }
            Repr::Refused(e) => matches!(
                e.kind(),
                crate::ErrorKind::DeadlineExceeded | crate::ErrorKind::AttemptTimedOut
            ),
            Repr::Transport { timeout, .. } => *timeout,
        }
    }

    fn classify_with(&self, policy: StatusPolicy) -> Classification {
        match &*self.repr {
            Repr::Status {
                status, headers, ..
            } => policy
                .classify(*status, headers)
                // A success status turned into an error by hand: not a
                // passing fault.
                .unwrap_or(Classification::Permanent),
            Repr::Transport { stage, .. } => match stage {
                Stage::NotSent | Stage::AfterSend => Classification::Transient,
                Stage::InvalidResponse | Stage::InvalidRequest | Stage::BodyFailed => {
                    Classification::Permanent
                }
            },
            Repr::Refused(e) => e.classify(),
        }
    }
}

/// Transient: connection failures, timeouts, 408/502/504, and 429/503
/// (throttled, with their `Retry-After`); do-not-retry (not retried, a
/// failure for a breaker): a 500, and a 5xx marked `Do-Not-Retry`;
/// permanent: other statuses, an undecodable response, the library's
/// refusals.
impl Classify for Error {
    fn classify(&self) -> Classification {
        self.classify_with(StatusPolicy::DEFAULT)
    }

    /// See [`Error::may_have_taken_effect`].
    fn may_have_taken_effect(&self) -> bool {
        Error::may_have_taken_effect(self)
    }

    fn is_refusal(&self) -> Option<bool> {
        Some(self.refusal().is_some())
    }
}

/// Like `Error`'s [`Classify`], but with `500 Internal Server Error`
/// transient ([`StatusPolicy::retry_500`]). For
/// `#[resilient(classify = resilient::http::classify_retrying_500)]`.
pub fn classify_retrying_500(e: &Error) -> Classification {
    e.classify_with(StatusPolicy::DEFAULT.retry_500(true))
}

impl From<crate::Error> for Error {
    fn from(e: crate::Error) -> Self {
        Self::new(Repr::Refused(e))
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &*self.repr {
            Repr::Status {
                status,
                headers,
                body,
            } => f
                .debug_struct("Error")
                .field("status", status)
                .field("headers", headers)
                .field("body", body)
                .finish(),
            Repr::Transport {
                source,
                stage,
                timeout,
            } => f
                .debug_struct("Error")
                .field("stage", stage)
                .field("timeout", timeout)
                .field("source", source)
                .finish(),
            Repr::Refused(e) => f.debug_tuple("Error").field(e).finish(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &*self.repr {
            Repr::Status { status, body, .. } => {
                write!(f, "HTTP {status}")?;
                if let Some(body) = body.as_deref().filter(|b| !b.is_empty()) {
                    write!(f, ": {body}")?;
                }
                Ok(())
            }
            Repr::Transport { source, stage, .. } => {
                let what = match stage {
                    Stage::NotSent => "request not sent",
                    Stage::AfterSend => "request sent, answer lost",
                    Stage::InvalidResponse => "response unusable",
                    Stage::InvalidRequest => "request invalid",
                    Stage::BodyFailed => "request body failed while sent",
                };
                write!(f, "{what}: {source}")
            }
            Repr::Refused(e) => fmt::Display::fmt(e, f),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &*self.repr {
            Repr::Status { .. } => None,
            Repr::Transport { source, .. } => Some(&**source),
            Repr::Refused(e) => Some(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ::http::HeaderValue;

    #[test]
    fn do_not_retry_overrides_a_retryable_status() {
        let mut h = HeaderMap::new();
        h.insert(::http::header::RETRY_AFTER, HeaderValue::from_static("1"));
        let e = Error::from_status(StatusCode::SERVICE_UNAVAILABLE, h.clone());
        assert!(e.classify().is_retryable());
        super::super::set_do_not_retry(&mut h);
        let e = Error::from_status(StatusCode::SERVICE_UNAVAILABLE, h.clone());
        assert_eq!(
            e.classify(),
            Classification::DoNotRetry {
                retry_after: Some(std::time::Duration::from_secs(1))
            }
        );
        assert!(!e.classify().is_retryable());
        assert!(e.is_do_not_retry());
        // The request's own fault stays permanent.
        let e = Error::from_status(StatusCode::BAD_REQUEST, h);
        assert_eq!(e.classify(), Classification::Permanent);
    }

    #[test]
    fn stages_say_whether_the_request_may_have_run() {
        let io = || std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert!(!Error::not_sent(io()).may_have_taken_effect());
        assert!(Error::after_send(io()).may_have_taken_effect());
        assert_eq!(Error::not_sent(io()).classify(), Classification::Transient);
        assert_eq!(
            Error::invalid_response(io()).classify(),
            Classification::Permanent
        );
        let timeout = Error::after_send(std::io::Error::from(std::io::ErrorKind::TimedOut));
        assert!(timeout.is_timeout());
    }

    #[test]
    fn opt_in_500() {
        let e = Error::from_status(StatusCode::INTERNAL_SERVER_ERROR, HeaderMap::new());
        assert_eq!(
            e.classify(),
            Classification::DoNotRetry { retry_after: None }
        );
        assert_eq!(classify_retrying_500(&e), Classification::Transient);
        assert!(e.may_have_taken_effect());
    }
}
