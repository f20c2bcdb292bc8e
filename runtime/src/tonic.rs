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
//!   `DEADLINE_EXCEEDED`. (With `propagate_deadline`, tonic's timer and the
//!   attempt's fire at the same instant, so the caller of an attempt that
//!   ran out of time may get either that `CANCELLED` status or the
//!   library's `DEADLINE_EXCEEDED`: both are classified alike, but code
//!   that matches on the code should accept both.) A stream reset on a live connection is no failed
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
        let code = self.code();
        match made_from(self) {
            Made::Refusal(_) => return Classification::Permanent,
            // A server shutting down gracefully (`GOAWAY` with `NO_ERROR`)
            // fails only the streams it did not take (RFC 9113 §6.8): not
            // processed, so retried (review 33: `INTERNAL`, not retried,
            // and counted against a server in a rolling restart).
            Made::Unprocessed => return Classification::Transient,
            // Reset by this client's code (a limit of its own, such as
            // `max_encoding_message_size`): the caller's fault, permanent,
            // and no failure of the server's (review 30: a healthy
            // server's breaker opened on it).
            Made::Reset(reset) if !reset.is_remote() && !reset.is_library() => {
                return Classification::Permanent;
            }
            // h2's own reset of a peer that broke the protocol: the
            // server's failure, read by its code (review 32).
            Made::Reset(reset) if !reset.is_remote() => {
                return classify_code(code as i32, None).unwrap_or(Classification::Permanent);
            }
            // The server reset the stream on a live connection: it refused
            // it unprocessed (`REFUSED_STREAM`, RFC 9113 §8.7: safe to
            // retry), or it failed while handling it (a handler that
            // panics resets with `CANCEL`): as HTTP's 500, not retried,
            // but counted (review 30).
            Made::Reset(reset) if matches!(code, Code::Cancelled | Code::Unknown) => {
                return if reset.reason() == Some(h2::Reason::REFUSED_STREAM) {
                    Classification::Transient
                } else {
                    Classification::DoNotRetry { retry_after: None }
                };
            }
            Made::Reset(_) | Made::Transport | Made::Other => {}
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
        if code == Code::Cancelled && self.message() == ::tonic::TimeoutExpired(()).to_string() {
            return classify_code(Code::DeadlineExceeded as i32, pushback)
                .unwrap_or(Classification::Transient);
        }
        // tonic's client reports a failed connection (closed before or
        // after the request went out, a broken pipe) as `CANCELLED` or
        // `UNKNOWN`, a status made in this process from the transport's
        // error, which it keeps as its source. gRPC's own clients report
        // these as `UNAVAILABLE`: a connection failure, retried and
        // counted. A status a user made from an error of their own
        // (`Status::from_error`) carries no transport error (review 29).
        if matches!(made_from(self), Made::Transport)
            && matches!(code, Code::Cancelled | Code::Unknown)
        {
            return classify_code(Code::Unavailable as i32, pushback)
                .unwrap_or(Classification::Transient);
        }
        classify_code(code as i32, pushback).unwrap_or(Classification::Permanent)
    }

    /// A refusal made in this process: when it cut a running attempt (a
    /// timeout, a deadline). A stream a graceful `GOAWAY` left unprocessed:
    /// no. Off the wire: by the code, or by `may-have-taken-effect: ?1` in
    /// the metadata: `ResilienceLayer` marks so a failure whose handler had
    /// an annotated call act first, which an `UNAVAILABLE` alone would
    /// deny.
    fn may_have_taken_effect(&self) -> bool {
        match made_from(self) {
            Made::Refusal(refusal) => return refusal.may_have_taken_effect(),
            Made::Unprocessed => return false,
            Made::Reset(_) | Made::Transport | Made::Other => {}
        }
        status_may_have_taken_effect(self)
            || self
                .metadata()
                .get_all(MAY_HAVE_TAKEN_EFFECT)
                .iter()
                .any(|v| says_true(v.as_bytes()))
    }

    fn is_refusal(&self) -> Option<bool> {
        Some(matches!(made_from(self), Made::Refusal(_)))
    }
}

/// `true` when a metadata value says `?1` (a structured-field boolean,
/// RFC 8941 §3.3.6, that is true).
fn says_true(value: &[u8]) -> bool {
    value.trim_ascii() == b"?1"
}

/// What made a status in this process, read from its chain of sources
/// (off the wire a status has none), in this order: one of the library's
/// refusals (`From<resilient::Error>`, also when the user's own error type
/// carried it into `Status::from_error`), a stream a graceful `GOAWAY` left
/// unprocessed, an HTTP/2 stream reset, another failure of the transport
/// (hyper's or h2's error).
enum Made<'a> {
    Refusal(&'a crate::Error),
    /// h2 fails with the server's `GOAWAY` (`NO_ERROR`) only the streams
    /// after its last stream id: those it did not take.
    Unprocessed,
    /// `RST_STREAM`: the stream ended, not the connection (a server whose
    /// handler panicked, a limit of this client's).
    Reset(&'a h2::Error),
    Transport,
    Other,
}

fn made_from(status: &Status) -> Made<'_> {
    let mut refusal = None;
    let (mut unprocessed, mut reset, mut transport) = (false, None, false);
    let mut source = std::error::Error::source(status);
    while let Some(e) = source {
        if let Some(r) = e.downcast_ref::<crate::Error>() {
            refusal = refusal.or(Some(r));
        } else if let Some(h2) = e.downcast_ref::<h2::Error>() {
            transport = true;
            unprocessed |=
                h2.is_go_away() && h2.is_remote() && h2.reason() == Some(h2::Reason::NO_ERROR);
            if h2.is_reset() {
                reset = reset.or(Some(h2));
            }
        } else if e.is::<hyper::Error>() {
            transport = true;
        }
        source = e.source();
    }
    match (refusal, reset) {
        (Some(r), _) => Made::Refusal(r),
        _ if unprocessed => Made::Unprocessed,
        (None, Some(reset)) => Made::Reset(reset),
        _ if transport => Made::Transport,
        _ => Made::Other,
    }
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
