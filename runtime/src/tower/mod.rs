//! The server side as a [tower](::tower_layer) layer, for axum, tonic and
//! any tower-based HTTP server: the caller's deadline becomes this
//! request's deadline, and this service's "do not retry" reaches the
//! caller.
//!
//! ```text
//! axum:  Router::new().route("/charges", post(charge)).layer(ResilienceLayer::new())
//! tonic: Server::builder().layer(ResilienceLayer::new()).add_service(service)
//! ```
//!
//! For each request, [`Resilience`]:
//!
//! 1. reads the caller's remaining deadline from `grpc-timeout` and
//!    `Request-Budget-Ms` (the sooner wins; see [`crate::http`]) and runs the
//!    handler under it with [`with_deadline`](crate::with_deadline), so every
//!    annotated call the handler makes inherits it and sends on what is left
//!    to the next hop: one deadline for the whole call chain. A tenth of it,
//!    at most 100 ms, is kept back for the answer's trip back
//!    ([`ResilienceLayer::max_reply_reserve`]), so that "do not retry"
//!    reaches the caller before the caller's own timer fires;
//! 2. answers at once, without running the handler, when that deadline has
//!    already passed (`Request-Budget-Ms: 0`), and cuts the handler when it
//!    passes while it runs: the caller has stopped waiting, so the work is
//!    wasted, exactly as when the caller disconnects. The answer is 504 with
//!    a problem+json body for HTTP, and `DEADLINE_EXCEEDED` for gRPC, which
//!    a caller with time left may retry: the deadline it sent may have been
//!    one attempt's (`timeout_ms` under a longer `deadline_ms`, to get past
//!    a hung instance), and one whose whole deadline is spent stops by its
//!    own. Unless this service already retried (below);
//! 3. when an annotated call inside the handler gave up (its retries, retry
//!    budget or deadline spent, refused by an open breaker, a full
//!    bulkhead, load shedding, or told by its dependency not to retry; see
//!    [`Report::gave_up`](crate::Report::gave_up))
//!    or made a retry, marks a failure response `Do-Not-Retry: ?1` (HTTP)
//!    or `grpc-retry-pushback-ms: -1` (gRPC, proposal A6), also when the
//!    deadline cut the handler, so the caller's client does not retry what
//!    this service already retried: one retrying layer across services,
//!    not one per hop;
//! 4. when an annotated call inside the handler succeeded or may have taken
//!    effect, marks a failure response `May-Have-Taken-Effect: ?1` (HTTP)
//!    or `may-have-taken-effect: ?1` (gRPC, on a failure sent in the
//!    headers, which is how tonic answers a handler's error): its status
//!    (a 503, a 4xx, `UNAVAILABLE`) would tell the caller "not done".
//!
//! The library's refusals returned by a handler become responses by
//! [`refusal_response`](crate::http::refusal_response) (axum: `IntoResponse`,
//! see `resilient::axum`).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use ::http::{HeaderValue, Request, Response, StatusCode, header::CONTENT_TYPE};
use bytes::Bytes;
use http_body_util::{Either, Full};
use tower_layer::Layer;
use tower_service::Service;

use crate::http::{GRPC_RETRY_PUSHBACK_MS, deadline_budget};

mod idempotency;
pub use idempotency::{IDEMPOTENT_REPLAYED, Idempotency, IdempotencyLayer};

/// The response body of [`Resilience`]: the handler's own ([`WorkBody`]),
/// or the layer's answer (problem+json, or empty for gRPC).
pub type ResponseBody<B> = Either<WorkBody<B>, Full<Bytes>>;

pin_project_lite::pin_project! {
    /// A handler's response body, streamed as part of its request's work.
    ///
    /// A handler may answer before its work is done: a body streamed from
    /// a `Stream` whose items await annotated calls (a listing proxied
    /// page by page, a gRPC server stream). [`Resilience`] polls such a body
    /// as it ran the handler: inside the request's unit of work, so a
    /// graceful shutdown's drain waits for the body to end (or be dropped)
    /// and admits its calls, and under the request's deadline, which those
    /// calls inherit (review 39: the drain reported every call finished
    /// while a body streamed, then refused each of its calls, and they saw
    /// no deadline). The deadline does not cut the body itself: calls made
    /// after it passed are refused, and the body ends as the handler's
    /// stream decides.
    pub struct WorkBody<B> {
        #[pin]
        body: B,
        // The request's frame (its deadline, admitted work), entered for
        // each poll; `None` for a body passed on as it is.
        frame: Option<crate::frame::Frame>,
        // The request's place in a graceful shutdown's count, until the
        // body ends or is dropped.
        held: Option<crate::shutdown::InFlight>,
    }
}

impl<B> WorkBody<B> {
    /// A body passed on as it is: polled outside any unit of work.
    pub(crate) fn plain(body: B) -> Self {
        WorkBody {
            body,
            frame: None,
            held: None,
        }
    }

    /// The handler's body, the rest of its request's work.
    fn in_work(
        body: B,
        frame: crate::frame::Frame,
        held: Option<crate::shutdown::InFlight>,
    ) -> Self {
        WorkBody {
            body,
            frame: Some(frame),
            held,
        }
    }

    /// The handler's body.
    pub fn into_inner(self) -> B {
        self.body
    }
}

impl<B> std::fmt::Debug for WorkBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkBody")
            .field("in_work", &self.frame.is_some())
            .field("counted", &self.held.is_some())
            .finish_non_exhaustive()
    }
}

impl<B: http_body::Body> http_body::Body for WorkBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let mut body = this.body;
        let polled = match this.frame.as_mut() {
            Some(frame) => frame.enter(|| body.as_mut().poll_frame(cx)),
            None => body.poll_frame(cx),
        };
        // The body has ended (or failed): so has the request's work.
        if matches!(polled, Poll::Ready(None | Some(Err(_)))) {
            *this.held = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// The layer's future. Boxed: it runs the handler inside the task-local
/// deadline scope, whose future type cannot be named; one allocation per
/// request is small next to an HTTP exchange.
pub type ResponseFuture<B, E> =
    Pin<Box<dyn Future<Output = Result<Response<ResponseBody<B>>, E>> + Send + 'static>>;

/// The most of the caller's budget kept back, by default, for the answer's
/// trip back (see [`ResilienceLayer::max_reply_reserve`]).
const DEFAULT_MAX_REPLY_RESERVE: Duration = Duration::from_millis(100);

/// Applies [`Resilience`] to a service: deadlines in, "do not retry" out.
/// See the [module docs](self).
#[derive(Debug, Clone, Copy)]
pub struct ResilienceLayer {
    max_reply_reserve: Duration,
}

impl Default for ResilienceLayer {
    fn default() -> Self {
        ResilienceLayer {
            max_reply_reserve: DEFAULT_MAX_REPLY_RESERVE,
        }
    }
}

impl ResilienceLayer {
    /// The layer, keeping back a tenth of the caller's budget, at most
    /// 100 ms, for the answer's trip back.
    pub fn new() -> Self {
        Self::default()
    }

    /// The handler runs under the caller's budget minus a reserve for the
    /// answer to travel back: a tenth of the budget, at most `max`
    /// (default 100 ms; zero runs the handler to the caller's last
    /// instant).
    ///
    /// Why: without it, a handler still retrying its own dependency gives
    /// up at the very instant its caller stops waiting; the caller's own
    /// timer fires first, it never hears "do not retry", and it retries
    /// the whole call (measured in `tests/tests/three_services.rs`: 12
    /// attempts at a hanging database instead of at most 4). A tenth leaves
    /// time for a loaded network without cutting short budgets much; the
    /// cap keeps long budgets nearly whole.
    pub fn max_reply_reserve(mut self, max: Duration) -> Self {
        self.max_reply_reserve = max;
        self
    }
}

impl<S> Layer<S> for ResilienceLayer {
    type Service = Resilience<S>;

    fn layer(&self, inner: S) -> Resilience<S> {
        Resilience {
            inner,
            max_reply_reserve: self.max_reply_reserve,
        }
    }
}

/// The service [`ResilienceLayer`] makes. See the [module docs](self).
#[derive(Debug, Clone)]
pub struct Resilience<S> {
    inner: S,
    max_reply_reserve: Duration,
}

impl<S> Resilience<S> {
    /// Wraps `inner`, with [`ResilienceLayer::new`]'s settings.
    pub fn new(inner: S) -> Self {
        ResilienceLayer::new().layer(inner)
    }

    /// The wrapped service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, ReqB, ResB> Service<Request<ReqB>> for Resilience<S>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ResB: Send + 'static,
{
    type Response = Response<ResponseBody<ResB>>;
    type Error = S::Error;
    type Future = ResponseFuture<ResB, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqB>) -> Self::Future {
        let grpc = is_grpc(&request);
        let budget = deadline_budget(request.headers());
        if budget == Some(Duration::ZERO) {
            return Box::pin(std::future::ready(Ok(deadline_passed(grpc, false))));
        }
        let budget = budget.map(|b| b - (b / 10).min(self.max_reply_reserve));
        // The budget runs from when a layer outside this one took the
        // request (`IdempotencyLayer` reads the body first), else from now.
        let arrived = request.extensions().get::<Arrived>().map(|a| a.0);
        let handler = self.inner.call(request);
        Box::pin(async move {
            // Whether the handler ran at all: a budget already spent when it
            // gets here (a few nanoseconds of `grpc-timeout`) ends the
            // request before the handler is polled, as a zero budget does.
            let ran = AtomicBool::new(false);
            let ran_ref = &ran;
            // The request's deadline, from when it arrived.
            let deadline = budget.and_then(|b| match arrived {
                Some(at) => at.checked_add(b),
                None => tokio::time::Instant::now().checked_add(b),
            });
            // One unit of work for a graceful shutdown: refused before it
            // runs when draining, waited for (with every call inside it)
            // once it started, its response body included.
            let work = crate::shutdown::admitted_holding(async move {
                let mut handler = std::pin::pin!(handler);
                let handler = std::future::poll_fn(|cx| {
                    ran_ref.store(true, Ordering::Relaxed);
                    handler.as_mut().poll(cx)
                });
                // Observed around the deadline, so that what nested calls
                // did is known also when the deadline cuts the handler.
                crate::observe(async move {
                    match deadline {
                        Some(at) => crate::with_deadline_at(at, handler).await.ok(),
                        None => Some(handler.await),
                    }
                })
                .await
            });
            let (result, report, held) = match work.await {
                Ok(((Some(result), report), held)) => (result, report, held),
                Ok(((None, report), _)) => {
                    // Cut at the deadline: a caller with time left may try
                    // again, unless this service already retried.
                    let mut response = deadline_passed(grpc, ran.load(Ordering::Relaxed));
                    if already_retried(&report) {
                        mark_do_not_retry(&mut response, grpc);
                    }
                    // A call inside acted before the cut (HTTP, and gRPC's
                    // headers-only failure, carry the same mark).
                    if acted(&report) {
                        crate::http::set_may_have_taken_effect(response.headers_mut());
                    }
                    return Ok(response);
                }
                Err(refusal) => return Ok(shutting_down(grpc, &refusal)),
            };
            let mut response = result?;
            if !grpc {
                let status = response.status();
                mark_answer(response.headers_mut(), status, &report);
            } else {
                if already_retried(&report) {
                    mark_do_not_retry(&mut response, grpc);
                }
                if acted(&report) && is_grpc_failure(response.headers()) {
                    crate::http::set_may_have_taken_effect(response.headers_mut());
                }
            }
            // The body goes on in the request's frame: admitted work,
            // under the deadline the handler ran under.
            let frame = crate::frame::Frame::admitted(crate::context::earliest(
                crate::current_deadline(),
                deadline,
            ));
            Ok(response.map(|body| Either::Left(WorkBody::in_work(body, frame, held))))
        })
    }
}

/// When a layer of this module outside [`Resilience`] took the request: the
/// caller's budget runs from then, not from when the request, its body
/// read, reaches [`Resilience`]. Set by [`IdempotencyLayer`], unless a
/// layer further out set it first.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Arrived(pub(crate) tokio::time::Instant);

/// The answer of a draining instance to a new request: 503 (gRPC
/// `UNAVAILABLE`), which a client may retry on another instance.
fn shutting_down<B>(grpc: bool, refusal: &crate::Error) -> Response<ResponseBody<B>> {
    if grpc {
        let mut response = Response::new(Either::Right(Full::new(Bytes::new())));
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
        headers.insert("grpc-status", HeaderValue::from_static("14"));
        headers.insert("grpc-message", HeaderValue::from_static("shutting%20down"));
        response.extensions_mut().insert(crate::http::RefusalAnswer);
        return response;
    }
    crate::http::refusal_response(refusal).map(|body| Either::Right(Full::new(Bytes::from(body))))
}

/// `true` for a gRPC request (`application/grpc`, `application/grpc+proto`…).
fn is_grpc<B>(request: &Request<B>) -> bool {
    request
        .headers()
        .get(CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
}

/// This service already retried (or a call in it gave up): a caller
/// retrying its failure would multiply the attempts.
pub(crate) fn already_retried(report: &crate::Report) -> bool {
    report.gave_up() || report.retries() > 0
}

/// An annotated call in the handler succeeded, or may have taken effect:
/// the request was acted on, in part at least.
pub(crate) fn acted(report: &crate::Report) -> bool {
    report
        .attempts()
        .iter()
        .any(|a| a.may_have_taken_effect || matches!(a.outcome, crate::AttemptOutcome::Succeeded))
}

/// What the handler's calls did, on its HTTP answer when it is a failure:
/// "do not retry" when this service already retried; "may have taken
/// effect" when a call acted, which the status (a 503, a 4xx), chosen from
/// the last failure only, would not say. Also on the answer an
/// `IdempotencyLayer` keeps and replays.
pub(crate) fn mark_answer(
    headers: &mut ::http::HeaderMap,
    status: StatusCode,
    report: &crate::Report,
) {
    if !is_failure(status) {
        return;
    }
    if already_retried(report) {
        crate::http::set_do_not_retry(headers);
    }
    if acted(report) {
        crate::http::set_may_have_taken_effect(headers);
    }
}

/// A gRPC answer that is a failure in its headers: a trailers-only
/// response (what tonic sends for a handler's error before any message)
/// with a `grpc-status` other than `0`. A failure in the trailers, after
/// messages, is not seen here.
fn is_grpc_failure(headers: &::http::HeaderMap) -> bool {
    headers
        .get("grpc-status")
        .is_some_and(|code| code.as_bytes().trim_ascii() != b"0")
}

fn is_failure(status: StatusCode) -> bool {
    status.is_client_error() || status.is_server_error()
}

fn mark_do_not_retry<B>(response: &mut Response<B>, grpc: bool) {
    if grpc {
        // gRPC carries its status in trailers, which a layer cannot see
        // before the body is done; pushback in the headers is read with a
        // trailers-only error, and ignored on success (A6).
        response
            .headers_mut()
            .insert(GRPC_RETRY_PUSHBACK_MS, HeaderValue::from_static("-1"));
    } else if is_failure(response.status()) {
        crate::http::set_do_not_retry(response.headers_mut());
    }
}

/// The answer when the caller's deadline passed before or while the
/// handler ran. A handler cut while it `ran` may have done part of its
/// work: its answer is not marked as the library's refusal, so an
/// [`IdempotencyLayer`] around this layer keeps it rather than letting a
/// retry run the handler again.
///
/// Not marked "do not retry" by itself (see
/// [`Error::callers_may_retry`](crate::Error)): the deadline the caller
/// sent may be one attempt's (`timeout_ms` under a longer deadline), and a
/// caller with time left retries a hung instance; one whose whole deadline
/// is spent does not, by its own deadline.
fn deadline_passed<B>(grpc: bool, ran: bool) -> Response<ResponseBody<B>> {
    if grpc {
        // A trailers-only response: HTTP 200 with the status in headers
        // (gRPC over HTTP/2 specification). Code 4 is DEADLINE_EXCEEDED.
        let mut response = Response::new(Either::Right(Full::new(Bytes::new())));
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
        headers.insert("grpc-status", HeaderValue::from_static("4"));
        headers.insert(
            "grpc-message",
            HeaderValue::from_static("deadline%20exceeded"),
        );
        if !ran {
            response.extensions_mut().insert(crate::http::RefusalAnswer);
        }
        return response;
    }
    let mut refusal = crate::http::refusal_response(&crate::Error::deadline_exceeded());
    debug_assert_eq!(refusal.status(), StatusCode::GATEWAY_TIMEOUT);
    if ran {
        refusal
            .extensions_mut()
            .remove::<crate::http::RefusalAnswer>();
    }
    refusal.map(|body| Either::Right(Full::new(Bytes::from(body))))
}
