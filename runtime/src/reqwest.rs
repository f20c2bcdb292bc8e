//! The client side over [reqwest]: its errors classified, and
//! requests that carry the idempotency key and the remaining deadline.
//!
//! ```
//! use resilient::{IdempotencyKey, resilient};
//! use resilient::reqwest::RequestBuilderExt;
//!
//! #[resilient(retries = 3, breaker = "payments", deadline_ms = 15000, timeout_ms = 2000)]
//! async fn charge(client: &reqwest::Client, key: &IdempotencyKey, cents: u64)
//!     -> Result<String, resilient::http::Error>
//! {
//!     let response = client
//!         .post("http://127.0.0.1:1/charges")
//!         .idempotency_key(key)
//!         .body(cents.to_string())
//!         .send_checked() // deadline headers, send, non-success status → Err
//!         .await?;
//!     Ok(response.text().await?)
//! }
//! ```
//!
//! What the error says about retrying, by reqwest's own error kinds:
//!
//! | reqwest error | classification | may have taken effect |
//! |---|---|---|
//! | connecting (`is_connect`, including a connect timeout) | transient | no: nothing was sent |
//! | over HTTP/2, the server's reset of the request's stream with `REFUSED_STREAM`, before any answer (RFC 9113 §8.7: no processing was done), or a graceful `GOAWAY` (`NO_ERROR`) whose last stream is before the request's (§6.8: not processed; a server shutting down). reqwest's default retry policy has already sent either again twice, see `ClientBuilder::retry` | transient | no |
//! | timeout, reset (any other) or other failure after connecting (`is_timeout`, also while reading the body; `is_request`, `is_body`) | transient | yes: the request may have arrived |
//! | a success body that arrived whole but does not decode (`is_decode`), a redirect loop | permanent | yes |
//! | a body cut short while reading it (`is_decode` or `is_body` with an I/O cause) | transient | yes |
//! | an unbuildable request (`is_builder`), or an `https` URL on a client built without TLS (a connect error with no I/O cause) | permanent | no |
//! | a request body of the caller's own that failed while sent (hyper's body error; over HTTP/2, the stream this client reset) | permanent | yes: part of it went out |
//! | `error_for_status` (`is_status`) | by its status (its headers are lost: prefer [`ResponseExt::check_status`]) | by its status |
//!
//! A redirect is followed by reqwest inside the one request, and a
//! failure to connect to its target (refused, or an `https` target on a
//! client without TLS), or a refused stream there, is reported with the
//! original URL, as "not sent", and retried, although the original request
//! was sent and answered. For calls that change state, build the client
//! with `reqwest::redirect::Policy::none()`: the redirect then comes back
//! as a response, and nothing is taken for unsent that was sent.

use std::future::Future;

use ::http::HeaderMap;
use ::reqwest::{RequestBuilder, Response};

use crate::http::{Error, IDEMPOTENCY_KEY, Stage};
use crate::{Classification, Classify, IdempotencyKey};

/// How much of a permanent failure's body is kept for its message.
const MAX_ERROR_BODY: usize = 4096;
/// The longest a permanent failure's body is read: a second, and at most
/// half the time left before the task's deadline (the attempt's own, with
/// `timeout_ms`). The body explains a failure already known; a server that
/// sends it slowly must not turn that failure into a timeout.
const MAX_ERROR_BODY_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

fn stage(e: &::reqwest::Error) -> Stage {
    if e.is_builder() || unsupported_scheme(e) {
        Stage::InvalidRequest
    } else if callers_body_failed(e) {
        Stage::BodyFailed
    } else if e.is_connect() || refused_unprocessed(e) {
        Stage::NotSent
    } else if e.is_timeout() {
        // This client's own timeout (`ClientBuilder::timeout`,
        // `read_timeout`), also while reading the body, which reqwest
        // reports as a decode error (review 31: permanent, so never
        // retried nor counted by a breaker).
        Stage::AfterSend
    } else if (e.is_decode() && !broke_in_transit(e)) || e.is_redirect() {
        Stage::InvalidResponse
    } else {
        // Timeouts, resets and body errors after connecting: whether the
        // server received the request cannot be known, so assume it may
        // have (the safe side for a charge).
        Stage::AfterSend
    }
}

/// An `https` URL on a client built without TLS: reqwest reports it as a
/// connect error, but no connection was tried, and none will succeed, so it
/// is the request's fault (permanent), not the network's. Told apart from
/// a real connection failure by the I/O error every one of those carries
/// (refused, unreachable, reset, DNS), and from a connect timeout.
fn unsupported_scheme(e: &::reqwest::Error) -> bool {
    e.is_connect()
        && !e.is_timeout()
        && e.url().is_some_and(|url| url.scheme() == "https")
        && !has_io_error(e)
}

/// The caller's own request body failed while it was sent (a stream of
/// theirs returned an error): hyper reports a user error. The caller's
/// fault, not the server's: permanent, and no breaker counts it (review 31:
/// retried, and a healthy server's breaker opened on it).
fn callers_body_failed(e: &::reqwest::Error) -> bool {
    causes(e).any(|err| {
        // Of hyper's user errors, only the body's: others, such as a
        // connection task gone with its runtime, may come after the
        // request went out (review 32). Told by hyper's message, as no
        // method names it; a message that changes falls back to "may have
        // been sent", the safe side.
        err.downcast_ref::<hyper::Error>().is_some_and(|hyper| {
            hyper.is_body_write_aborted()
                || (hyper.is_user() && hyper.to_string().starts_with("error from user's Body"))
        })
        // Over HTTP/2, the client resets the stream when the body fails: a
        // reset by this client's code, not h2's own (review 33).
        || err
            .downcast_ref::<h2::Error>()
            .is_some_and(|h2| h2.is_reset() && !h2.is_remote() && !h2.is_library())
    })
}

/// The errors `e` wraps, nearest first (its sources, not `e` itself).
fn causes(e: &::reqwest::Error) -> impl Iterator<Item = &(dyn std::error::Error + 'static)> {
    std::iter::successors(std::error::Error::source(e), |err| err.source())
}

/// Over HTTP/2, the server said it did no processing of the request
/// (safe to retry, whatever the method), so the request is as good as not
/// sent:
///
/// * it reset the request's stream with `REFUSED_STREAM` before any answer
///   (RFC 9113, section 8.7);
/// * it is shutting down gracefully, and its `GOAWAY` (`NO_ERROR`) named a
///   last stream before the request's (section 6.8). h2 fails with the
///   server's `GOAWAY` only those streams, and requests not yet opened on
///   the connection; a request the server took, left unanswered when the
///   connection then closes, fails as a broken pipe (may have taken
///   effect).
///
/// Any other reset from the server may come after the request was handled,
/// and so may one while the response's body is read (`is_body`,
/// `is_decode`): a status came first.
fn refused_unprocessed(e: &::reqwest::Error) -> bool {
    if e.is_body() || e.is_decode() {
        return false;
    }
    causes(e).any(|err| {
        err.downcast_ref::<h2::Error>().is_some_and(|h2| {
            h2.is_remote()
                && ((h2.is_reset() && h2.reason() == Some(h2::Reason::REFUSED_STREAM))
                    || (h2.is_go_away() && h2.reason() == Some(h2::Reason::NO_ERROR)))
        })
    })
}

/// Whether an I/O error is in `e`'s chain of sources.
fn has_io_error(e: &::reqwest::Error) -> bool {
    causes(e).any(|err| err.is::<std::io::Error>())
}

/// reqwest reports a body cut short while `text()` or `json()` read it as
/// a decode error; the I/O error in its chain tells it from a body that
/// arrived whole and did not parse.
fn broke_in_transit(e: &::reqwest::Error) -> bool {
    has_io_error(e)
}

/// Converts by [reqwest's error kinds](self): whether it was sent, whether
/// it timed out; an `error_for_status` error keeps its status.
impl From<::reqwest::Error> for Error {
    fn from(e: ::reqwest::Error) -> Self {
        if let Some(status) = e.status().filter(|_| e.is_status()) {
            return Error::from_status(status, HeaderMap::new());
        }
        let (stage, timeout) = (stage(&e), e.is_timeout());
        Error::transport_with(Box::new(e), stage, timeout)
    }
}

/// For error types of your own that wrap a `reqwest::Error`: the same
/// classification as [`resilient::http::Error`](Error) gives it.
impl Classify for ::reqwest::Error {
    /// A reqwest error is never one of the library's refusals.
    fn is_refusal(&self) -> Option<bool> {
        Some(false)
    }

    fn classify(&self) -> Classification {
        if let Some(status) = self.status().filter(|_| self.is_status()) {
            return crate::http::classify_status(status, &HeaderMap::new())
                .unwrap_or(Classification::Permanent);
        }
        match stage(self) {
            Stage::NotSent | Stage::AfterSend => Classification::Transient,
            Stage::InvalidRequest | Stage::InvalidResponse | Stage::BodyFailed => {
                Classification::Permanent
            }
        }
    }

    fn may_have_taken_effect(&self) -> bool {
        if let Some(status) = self.status().filter(|_| self.is_status()) {
            return Error::from_status(status, HeaderMap::new()).may_have_taken_effect();
        }
        matches!(
            stage(self),
            Stage::AfterSend | Stage::InvalidResponse | Stage::BodyFailed
        )
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for ::reqwest::RequestBuilder {}
    impl Sealed for ::reqwest::Response {}
}

/// Sends what the next hop needs to know: the operation's idempotency key
/// and the time left.
///
/// Sealed: implemented for [`reqwest::RequestBuilder`] only.
pub trait RequestBuilderExt: sealed::Sealed + Sized {
    /// Sets `Idempotency-Key: {key}`, so the server can recognise a retry
    /// of an operation it already carried out. Send the same key on every
    /// attempt: create it before the annotated call, not inside it.
    fn idempotency_key(self, key: &IdempotencyKey) -> Self;

    /// Sets the current task's remaining deadline ([`crate::remaining`]) as
    /// `grpc-timeout` and `Request-Budget-Ms` (see [`crate::http`] for the
    /// headers); no change when no deadline is set. Inside an annotated
    /// function with `timeout_ms`, that is the attempt's own deadline: the
    /// next hop never works longer than this attempt waits for it.
    fn propagate_deadline(self) -> Self;

    /// [`propagate_deadline`](Self::propagate_deadline), sends, and turns a
    /// failure status into an `Err` ([`ResponseExt::check_status`]): one
    /// call from a request to a classified result.
    fn send_checked(self) -> impl Future<Output = Result<Response, Error>> + Send;
}

impl RequestBuilderExt for RequestBuilder {
    fn idempotency_key(self, key: &IdempotencyKey) -> Self {
        self.header(IDEMPOTENCY_KEY, key.as_str())
    }

    fn propagate_deadline(self) -> Self {
        match crate::remaining() {
            Some(budget) => {
                let mut headers = HeaderMap::new();
                crate::http::insert_deadline(&mut headers, budget);
                self.headers(headers)
            }
            None => self,
        }
    }

    fn send_checked(self) -> impl Future<Output = Result<Response, Error>> + Send {
        let request = self.propagate_deadline();
        async move { request.send().await?.check_status().await }
    }
}

/// Turns an unsuccessful response into a classified [`Error`].
///
/// Sealed: implemented for [`reqwest::Response`] only.
pub trait ResponseExt: sealed::Sealed + Sized {
    /// `Ok(self)` for 1xx/2xx/3xx; otherwise an [`Error`] holding the status
    /// and headers (so `Retry-After` and `Do-Not-Retry` count). The body is
    /// read (its first 4 KiB) only when the failure is not retried
    /// (permanent, or do-not-retry as a 500 is), where it usually says why
    /// and the caller will see it, and for at most a
    /// second and half the time left before the deadline (a slow body is
    /// cut, the failure kept); a retryable failure's body is not read, so a
    /// retry is not delayed by it. Retried or not here is the status's
    /// default classification ([`Error::from_status`]), not a
    /// `classify = path` of the annotated function.
    fn check_status(self) -> impl Future<Output = Result<Self, Error>> + Send;
}

impl ResponseExt for Response {
    async fn check_status(self) -> Result<Self, Error> {
        let status = self.status();
        if !(status.is_client_error() || status.is_server_error()) {
            return Ok(self);
        }
        let mut response = self;
        let headers = std::mem::take(response.headers_mut());
        let error = Error::from_status(status, headers);
        if error.classify().is_retryable() {
            return Err(error);
        }
        let mut body = Vec::new();
        // A body that fails mid-way still explains what it got to; one that
        // is slow, or never ends, is read for a bounded time: the failure
        // is known already, and the attempt's timer must not cut it into a
        // timeout (retried, its status lost, reported as possibly done).
        let wait = crate::remaining().map_or(MAX_ERROR_BODY_WAIT, |left| {
            (left / 2).min(MAX_ERROR_BODY_WAIT)
        });
        let read = async {
            while let Ok(Some(chunk)) = response.chunk().await {
                let room = MAX_ERROR_BODY - body.len();
                body.extend_from_slice(&chunk[..chunk.len().min(room)]);
                if body.len() >= MAX_ERROR_BODY {
                    break;
                }
            }
        };
        let _ = tokio::time::timeout(wait, read).await;
        Err(error.with_body(String::from_utf8_lossy(&body).into_owned()))
    }
}
