//! gRPC over [tonic]: `tonic::Status` as the error type of an
//! annotated call, with no glue, and deadlines sent in `grpc-timeout`.
//!
//! ```
//! use resilient::resilient;
//! use resilient::tonic::RequestExt;
//!
//! #[resilient(retries = 3, deadline_ms = 2000, timeout_ms = 500, idempotent)]
//! async fn check(name: &str) -> Result<u32, tonic::Status> {
//!     let mut request = tonic::Request::new(name.to_owned());
//!     request.propagate_deadline(); // grpc-timeout = the time this attempt has left
//!     // client.check(request).await …
//!     # Ok(1)
//! }
//! ```
//!
//! * [`Classify`] for [`tonic::Status`], by
//!   [`crate::grpc::classify_code`] (after A6: `UNAVAILABLE` and
//!   `DEADLINE_EXCEEDED` transient, `RESOURCE_EXHAUSTED` throttled;
//!   `INTERNAL`, `UNKNOWN` and `DATA_LOSS` not retried but counted by a
//!   breaker, as HTTP's 500; the rest permanent), honouring the server's
//!   `grpc-retry-pushback-ms`. Two statuses tonic's client makes itself are
//!   read for what they report: a failed connection (`CANCELLED` or
//!   `UNKNOWN` carrying the transport's error: closed, a broken pipe) as
//!   `UNAVAILABLE`, and its own timeout (`CANCELLED` "Timeout expired",
//!   also when a service passes it on to its caller) as
//!   `DEADLINE_EXCEEDED`. A stream reset on a live connection is no failed
//!   connection: reset by the server, it is a failure of the server's (not
//!   retried, counted; retried if `REFUSED_STREAM`, which says it was not
//!   processed), and reset by this client (a limit of its own) permanent.
//! * `From<resilient::Error> for tonic::Status`: a refusal becomes
//!   `DEADLINE_EXCEEDED` (deadline, attempt timeout) or `UNAVAILABLE`
//!   (breaker open, bulkhead full, shed), with pushback `-1` ("do not
//!   retry", A6), or `INTERNAL` (an unconfigured name). A draining
//!   instance's `UNAVAILABLE` has no pushback: the caller retries it on
//!   another instance (as over HTTP, where it has no `Do-Not-Retry`).
//! * On the server, `resilient::tower::ResilienceLayer`
//!   (feature `tower`) works in `Server::builder().layer(…)`: it reads
//!   `grpc-timeout` into the handler's deadline and answers
//!   `DEADLINE_EXCEEDED` once it has passed.

use ::tonic::metadata::MetadataValue;
use ::tonic::{Code, Status};

use crate::grpc::{MAY_HAVE_TAKEN_EFFECT, RETRY_PUSHBACK_MS, classify_code, parse_pushback};
use crate::{Classification, Classify, ErrorKind};

/// By the status code and the server's pushback; see [`crate::grpc::classify_code`].
/// tonic's client-made statuses for a failed connection and for its own
/// timeout are classified as `UNAVAILABLE` and `DEADLINE_EXCEEDED` (see the
/// module documentation).
/// A status made in this process from one of the library's refusals
/// (`From<resilient::Error>`) is that refusal: permanent, as
/// [`resilient::Error`](crate::Error) is, for enclosing layers here; its
/// code and pushback are what a remote caller classifies.
impl Classify for Status {
    fn classify(&self) -> Classification {
        if refusal(self).is_some() {
            return Classification::Permanent;
        }
        // This client reset its own stream (its request broke a limit of
        // its own, such as `max_encoding_message_size`): the caller's
        // fault, permanent, and no failure of the server's (review 30: a
        // healthy server's breaker opened on it).
        // A server shutting down gracefully (`GOAWAY` with `NO_ERROR`)
        // fails only the streams it did not take (RFC 9113 §6.8): not
        // processed, so retried (review 33: `INTERNAL`, not retried, and
        // counted against a server in a rolling restart).
        if went_away_unprocessed(self) {
            return Classification::Transient;
        }
        if let Some(reset) = stream_reset(self) {
            // Reset by this client's code (a limit of its own); h2's own
            // resets of a peer that broke the protocol are the server's
            // failure, read by the code below (review 32).
            if !reset.is_remote() && !reset.is_library() {
                return Classification::Permanent;
            }
            if !reset.is_remote() {
                return classify_code(self.code() as i32, None)
                    .unwrap_or(Classification::Permanent);
            }
            // The server reset the stream on a live connection: it refused
            // it unprocessed (`REFUSED_STREAM`, RFC 9113 §8.7: safe to
            // retry), or it failed while handling it (a handler that
            // panics resets with `CANCEL`): as HTTP's 500, not retried,
            // but counted (review 30).
            if matches!(self.code(), Code::Cancelled | Code::Unknown) {
                return if reset.reason() == Some(h2::Reason::REFUSED_STREAM) {
                    Classification::Transient
                } else {
                    Classification::DoNotRetry { retry_after: None }
                };
            }
        }
        let pushback = self.metadata().get(RETRY_PUSHBACK_MS).map(|v| {
            v.to_str()
                .map_or(crate::grpc::Pushback::DoNotRetry, parse_pushback)
        });
        // tonic's own client-side timeout (the `grpc-timeout` that
        // `propagate_deadline` sets) ends the request as `CANCELLED`
        // "Timeout expired", at the instant the attempt's own timer fires:
        // the attempt timed out, as its deadline says. A service that
        // answers its caller with such a status (its own call to a
        // dependency timed out) says the same of the chain: as
        // `DEADLINE_EXCEEDED`, with its pushback (a `-1` after it retried:
        // not retried, but counted, so a hung dependency opens its
        // callers' breakers).
        if self.code() == Code::Cancelled
            && self.message() == ::tonic::TimeoutExpired(()).to_string()
        {
            return classify_code(Code::DeadlineExceeded as i32, pushback)
                .unwrap_or(Classification::Transient);
        }
        // tonic's client reports a failed connection (closed before or
        // after the request went out, reset, a broken pipe, an HTTP/2
        // stream reset) as `CANCELLED` or `UNKNOWN`, a status made in this
        // process from the transport's error, which it keeps as its
        // source; off the wire a status has no source. gRPC's own clients
        // report these as `UNAVAILABLE`: a connection failure, retried and
        // counted.
        if connection_failed(self) {
            return classify_code(Code::Unavailable as i32, pushback)
                .unwrap_or(Classification::Transient);
        }
        classify_code(self.code() as i32, pushback).unwrap_or(Classification::Permanent)
    }

    /// A refusal made in this process: when it cut a running attempt (a
    /// timeout, a deadline). Off the wire: by the code, or by
    /// `may-have-taken-effect: ?1` in the metadata: `ResilienceLayer` marks
    /// so a failure whose handler had an annotated call act first, which
    /// an `UNAVAILABLE` alone would deny.
    fn may_have_taken_effect(&self) -> bool {
        if let Some(refusal) = refusal(self) {
            return refusal.may_have_taken_effect();
        }
        if went_away_unprocessed(self) {
            return false;
        }
        status_may_have_taken_effect(self)
            || self
                .metadata()
                .get_all(MAY_HAVE_TAKEN_EFFECT)
                .iter()
                .any(|v| says_true(v.as_bytes()))
    }

    fn is_refusal(&self) -> Option<bool> {
        Some(refusal(self).is_some())
    }
}

/// `true` when a metadata value says `?1` (a structured-field boolean,
/// RFC 8941 §3.3.6, that is true).
fn says_true(value: &[u8]) -> bool {
    value.trim_ascii() == b"?1"
}

/// A status tonic's client made from a failure of the connection: `CANCELLED`
/// or `UNKNOWN` whose source chain holds HTTP/2 transport's error (hyper's
/// or h2's), not one of the library's refusals. A status a user made from
/// an error of their own (`Status::from_error`) is not one (review 29), nor
/// is a stream the server reset on a live connection (`RST_STREAM`, as
/// its handler panicking does): gRPC reads that by its code (review 30: a
/// panicking handler ran once per attempt).
fn connection_failed(status: &Status) -> bool {
    matches!(status.code(), Code::Cancelled | Code::Unknown)
        && refusal(status).is_none()
        && stream_reset(status).is_none()
        && sources(status).any(|e| e.is::<hyper::Error>() || e.is::<h2::Error>())
}

/// A stream the server's graceful `GOAWAY` left unprocessed: h2 fails
/// only those (the ones after its last stream id) with the `GOAWAY`.
fn went_away_unprocessed(status: &Status) -> bool {
    refusal(status).is_none()
        && sources(status)
            .filter_map(|e| e.downcast_ref::<h2::Error>())
            .any(|e| e.is_go_away() && e.is_remote() && e.reason() == Some(h2::Reason::NO_ERROR))
}

/// The HTTP/2 stream reset (`RST_STREAM`) a status was made from, if any.
fn stream_reset(status: &Status) -> Option<&h2::Error> {
    sources(status)
        .filter_map(|e| e.downcast_ref::<h2::Error>())
        .find(|e| e.is_reset())
}

/// The errors a status was made from, nearest first.
fn sources(status: &Status) -> impl Iterator<Item = &(dyn std::error::Error + 'static)> {
    std::iter::successors(std::error::Error::source(status), |e| e.source())
}

/// The library's refusal a status was made from in this process, also when
/// the user's own error type carried it (`Status::from_error`).
fn refusal(status: &Status) -> Option<&crate::Error> {
    sources(status).find_map(|e| e.downcast_ref::<crate::Error>())
}

/// `true` for the codes after which the server may have done the work:
/// `DEADLINE_EXCEEDED` and `CANCELLED` (the answer did not come in time,
/// or the call was cut), `UNKNOWN`, `INTERNAL` and `DATA_LOSS` (the server
/// failed while processing). The other codes are refusals before
/// processing or results of it.
fn status_may_have_taken_effect(status: &Status) -> bool {
    matches!(
        status.code(),
        Code::DeadlineExceeded | Code::Cancelled | Code::Unknown | Code::Internal | Code::DataLoss
    )
}

impl From<crate::Error> for Status {
    fn from(e: crate::Error) -> Self {
        let code = match e.kind() {
            ErrorKind::DeadlineExceeded | ErrorKind::AttemptTimedOut => Code::DeadlineExceeded,
            ErrorKind::BreakerOpen
            | ErrorKind::BulkheadFull
            | ErrorKind::LoadShed
            | ErrorKind::ShuttingDown => Code::Unavailable,
            ErrorKind::UnknownName => Code::Internal,
        };
        let mut status = Status::new(code, e.to_string());
        // As over HTTP (`Error::callers_may_retry`).
        if !e.callers_may_retry() {
            status
                .metadata_mut()
                .insert(RETRY_PUSHBACK_MS, MetadataValue::from_static("-1"));
        }
        // Kept, so that this process's enclosing layers know the refusal
        // (`Classify for Status`); not sent.
        status.set_source(std::sync::Arc::new(e));
        status
    }
}

mod sealed {
    pub trait Sealed {}
    impl<T> Sealed for ::tonic::Request<T> {}
}

/// Sends the remaining deadline with a tonic request.
///
/// Sealed: implemented for [`tonic::Request`] only.
pub trait RequestExt: sealed::Sealed {
    /// Sets the current task's remaining deadline ([`crate::remaining`]) as
    /// the request's timeout, which tonic sends as `grpc-timeout` (rounded
    /// up, never shortened); no change without a deadline, or when the
    /// request already has a shorter timeout (`set_timeout`): the sooner
    /// of the two is kept.
    fn propagate_deadline(&mut self);
}

impl<T> RequestExt for ::tonic::Request<T> {
    fn propagate_deadline(&mut self) {
        if let Some(budget) = crate::remaining() {
            let set = self.metadata().get("grpc-timeout").and_then(|v| {
                let v = v.to_str().ok()?;
                // tonic writes a zero timeout as `0n`, which the header's
                // grammar (and `GrpcTimeout`) does not allow: it is the
                // soonest of all (review 33: replaced by the budget).
                if v.len() > 1 && v[..v.len() - 1].bytes().all(|b| b == b'0') {
                    return Some(std::time::Duration::ZERO);
                }
                v.parse::<crate::GrpcTimeout>()
                    .ok()
                    .map(crate::GrpcTimeout::duration)
            });
            if set.is_some_and(|set| set <= budget) {
                return;
            }
            // tonic's `set_timeout` writes its own encoding of grpc-timeout;
            // ours never rounds down, so write it ourselves.
            let value = crate::GrpcTimeout::from(budget.max(std::time::Duration::from_nanos(1)));
            if let Ok(v) = value.to_string().parse() {
                self.metadata_mut().insert("grpc-timeout", v);
            }
        }
    }
}
