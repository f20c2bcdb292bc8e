//! Server-side idempotency keys: the first request with a key runs, every
//! later one with the same key gets its stored answer.

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, Hasher, RandomState};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use ::http::header::CONTENT_TYPE;
use ::http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use bytes::Bytes;
use http_body::Body;
use http_body_util::{BodyExt, Either, Full, Limited};
use tokio::sync::watch;
use tokio::time::Instant;
use tower_layer::Layer;
use tower_service::Service;

use super::{Arrived, ResponseBody, ResponseFuture, WorkBody};
use crate::http::{IDEMPOTENCY_KEY, PROBLEM_JSON};

/// `Idempotent-Replayed: true` marks an answer served from the store (the
/// name Stripe uses), so a client can tell a replay from a first run.
pub const IDEMPOTENT_REPLAYED: ::http::HeaderName =
    ::http::HeaderName::from_static("idempotent-replayed");

/// Keys kept by default: enough for a busy service's day at modest rates;
/// raise it with [`IdempotencyLayer::capacity`].
const DEFAULT_CAPACITY: usize = 10_000;
/// How long a key is remembered by default: 24 hours, as Stripe documents
/// for its API ("keys are eligible to be removed after 24 hours").
const DEFAULT_TTL: Duration = Duration::from_secs(24 * 60 * 60);
/// The largest request or response body buffered by default (1 MiB).
const DEFAULT_MAX_BODY: usize = 1 << 20;
/// How long a handler goes on after its request went away, by default: 60
/// s, the default idle timeout of AWS's Application Load Balancer, past
/// which no client behind one is still waiting either.
const DEFAULT_MAX_RUN_WITHOUT_CLIENT: Duration = Duration::from_secs(60);

/// Runs a request carrying an `Idempotency-Key` once, and answers every
/// repeat of it with the first answer.
///
/// * The first request with a key runs; its answer is stored (status,
///   headers, body) and replayed to every repeat, failures included: once
///   the handler has run, running it again could do the work twice. Only
///   the answers that say the request was *not* processed are forgotten,
///   so the client's retry runs it: 408, 429 and 503 (RFC 9110 §15.5.9,
///   §15.6.4; RFC 6585 §4), the library's refusals before anything ran
///   (not a deadline or timeout that cut work while it ran: see
///   [`Error::may_have_taken_effect`](crate::Error::may_have_taken_effect)),
///   and an answer whose
///   body failed mid-way (make such handlers safe to re-run, or answer 503
///   before doing anything). Such an answer is kept all the same when an
///   annotated call inside the handler succeeded or may have taken effect
///   (as [`observe`](crate::observe) reports it): part of the work is done;
///   and when the handler ran on after its request went away (below): what
///   it did before the refusal may be done. It then says so
///   (`May-Have-Taken-Effect: ?1`).
/// * Every failure answer kept (4xx, 5xx) is marked `Do-Not-Retry: ?1` and
///   loses its `Retry-After`, on the first answer and on replays: a retry
///   under the key would get the same answer until the key expires.
/// * A request with the same key that arrives while the first runs waits
///   for it and gets its answer (whatever it is); one that arrives later
///   gets the stored answer at once. Both carry `Idempotent-Replayed: true`.
/// * Once the handler has started, it runs to its end on a task of its own
///   (with the request's deadline and registry, as
///   [`propagate`](crate::propagate) gives them), even when the first
///   request goes away: its client disconnects or times out, or an outer
///   layer cuts it ([`ResilienceLayer`](super::ResilienceLayer)'s deadline).
///   Its answer is then kept for the repeats all the same: forgetting the
///   key there would let a retry run the work a second time. A graceful
///   shutdown's drain waits for it ([`GracefulShutdown`](crate::GracefulShutdown)).
///   A new request (its key not yet running) that arrives while the
///   process drains is refused before its handler starts, with the same
///   503 as [`ResilienceLayer`](super::ResilienceLayer)'s (another instance
///   may take it), and its key is not kept; whichever of the two layers is
///   outside, and without `ResilienceLayer`.
///   A handler still running [`max_run_without_client`](Self::max_run_without_client)
///   after its request went away is cut. (Outside a tokio runtime there is
///   no task to run it on: it runs in the request.)
/// * A handler that panics, fails without an answer (a service error), is
///   cut as above, or is dropped with a request outside a tokio runtime, is
///   answered `500`, and that answer is kept: it may have done part of the
///   work. It says so (`May-Have-Taken-Effect: ?1`), and `Do-Not-Retry: ?1`,
///   since a retry under the key gets it again. For the same reason, a `ResilienceLayer` inside this one that
///   cuts a running handler at its deadline answers a `504` that is kept;
///   only its refusals before the handler ran are forgotten.
/// * The same key with a different method, path or body is refused with
///   `422 Unprocessable Content` (the key was reused for another
///   operation: IETF draft `draft-ietf-httpapi-idempotency-key-header`).
/// * The key is read bare (`Idempotency-Key: order-8812`, as Stripe and most
///   payment APIs send it) or as a structured-field string
///   (`Idempotency-Key: "order-8812"`, as the IETF draft defines the field):
///   the same key either way ([`IdempotencyKey::from_header_value`](crate::IdempotencyKey::from_header_value)).
///   An invalid key is refused with 400, a body over the limit with 413.
/// * Requests without the header pass through untouched.
///
/// The store is in memory, per process, bounded ([`capacity`](Self::capacity)
/// keys, oldest forgotten first) and expiring ([`ttl`](Self::ttl)); for
/// several replicas, keep keys in a shared database instead.
///
/// Keys are shared by every caller of the service unless scoped with
/// [`scope_by_header`](Self::scope_by_header): a service with more than one
/// client should scope them by the caller's identity, or one client that
/// reuses another's key (by accident, or by guessing it) gets the other's
/// stored answer. Stripe scopes its keys per account for that reason.
///
/// ```text
/// Router::new().route("/charges", post(charge)).layer(IdempotencyLayer::new())
/// ```
#[derive(Debug, Clone)]
pub struct IdempotencyLayer {
    store: Arc<Store>,
}

impl Default for IdempotencyLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl IdempotencyLayer {
    /// 10,000 keys, kept 24 hours, bodies up to 1 MiB, handlers cut 60 s
    /// after their request went away.
    pub fn new() -> Self {
        IdempotencyLayer {
            store: Arc::new(Store::new(DEFAULT_CAPACITY, DEFAULT_TTL, DEFAULT_MAX_BODY)),
        }
    }

    fn rebuild(&self, f: impl FnOnce(&mut Settings)) -> Self {
        let mut settings = self.store.settings.clone();
        f(&mut settings);
        IdempotencyLayer {
            store: Arc::new(Store::with(settings)),
        }
    }

    /// Scopes keys by the value of the request header `name`: the caller's
    /// credentials (`authorization`) or tenant (`x-tenant-id`). The same key
    /// from two callers then names two operations, and no caller is ever
    /// answered with another's stored response. Requests without the
    /// header share one scope. The header's value is kept only as a hash.
    pub fn scope_by_header(self, name: ::http::HeaderName) -> Self {
        self.rebuild(|s| s.scope = Some(name))
    }

    /// At most `keys` keys are remembered; past that, the oldest finished
    /// ones are forgotten first. A key whose request still runs is never
    /// forgotten (a repeat would run it twice): when every slot holds one,
    /// a new key is answered 503 with `Retry-After: 1`. At least 1.
    pub fn capacity(self, keys: usize) -> Self {
        self.rebuild(|s| s.capacity = keys.max(1))
    }

    /// How long a key is remembered after its first answer.
    pub fn ttl(self, ttl: Duration) -> Self {
        self.rebuild(|s| s.ttl = ttl)
    }

    /// The largest request (and stored response) body, in bytes. A larger
    /// request is refused (413); a handler's larger answer is not kept, but
    /// that the request ran is: the caller and every repeat get a 500 saying
    /// so, and the handler never runs twice for the key.
    pub fn max_body_bytes(self, bytes: usize) -> Self {
        self.rebuild(|s| s.max_body = bytes)
    }

    /// How long a started handler goes on running once its request is gone
    /// (the client disconnected or timed out, or an outer layer cut it)
    /// before it is cut too. Its key then keeps a `500` saying the work may
    /// be partly done, and is never run again: a handler that hangs holds
    /// its key's slot and its task for this long, not for ever. Default 60
    /// s (the default idle timeout of AWS's Application Load Balancer).
    pub fn max_run_without_client(self, limit: Duration) -> Self {
        self.rebuild(|s| s.max_run_without_client = limit)
    }
}

impl<S> Layer<S> for IdempotencyLayer {
    type Service = Idempotency<S>;

    fn layer(&self, inner: S) -> Idempotency<S> {
        Idempotency {
            inner,
            store: self.store.clone(),
        }
    }
}

/// The service [`IdempotencyLayer`] makes.
#[derive(Debug, Clone)]
pub struct Idempotency<S> {
    inner: S,
    store: Arc<Store>,
}

#[derive(Debug, Clone)]
struct Settings {
    capacity: usize,
    ttl: Duration,
    max_body: usize,
    /// Keys are per value of this header.
    scope: Option<::http::HeaderName>,
    /// How long a handler runs on once its request is gone.
    max_run_without_client: Duration,
}

#[derive(Debug)]
struct Store {
    settings: Settings,
    hasher: RandomState,
    entries: Mutex<Entries>,
}

#[derive(Debug, Default)]
struct Entries {
    by_key: HashMap<String, Entry>,
    /// Keys in insertion order, with the generation of their entry: the
    /// eviction order (an old generation is a key since replaced).
    order: VecDeque<(String, u64)>,
    generation: u64,
}

#[derive(Debug)]
struct Entry {
    fingerprint: u64,
    generation: u64,
    state: EntryState,
}

#[derive(Debug)]
enum EntryState {
    Running(watch::Receiver<Option<Arc<Stored>>>),
    Done { answer: Arc<Stored>, until: Instant },
}

#[derive(Debug)]
struct Stored {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

/// What a request with a key must do.
enum Claim {
    /// Run the handler, then [`Store::finish`] or drop the sender.
    Run(watch::Sender<Option<Arc<Stored>>>, u64),
    Replay(Arc<Stored>),
    Wait(watch::Receiver<Option<Arc<Stored>>>),
    Mismatch,
    /// Every slot holds a request still running: nothing may be forgotten.
    Busy,
}

impl Store {
    fn new(capacity: usize, ttl: Duration, max_body: usize) -> Self {
        Store::with(Settings {
            capacity,
            ttl,
            max_body,
            scope: None,
            max_run_without_client: DEFAULT_MAX_RUN_WITHOUT_CLIENT,
        })
    }

    fn with(settings: Settings) -> Self {
        Store {
            settings,
            hasher: RandomState::new(),
            entries: Mutex::default(),
        }
    }

    /// The key as stored: within the caller's scope, when keys are scoped.
    fn scoped<'k>(&self, key: &'k str, headers: &::http::HeaderMap) -> Cow<'k, str> {
        match &self.settings.scope {
            None => Cow::Borrowed(key),
            Some(name) => {
                let mut h = self.hasher.build_hasher();
                h.write(headers.get(name).map_or(&[][..], |v| v.as_bytes()));
                Cow::Owned(format!("{:016x} {key}", h.finish()))
            }
        }
    }

    fn fingerprint(&self, method: &::http::Method, uri: &::http::Uri, body: &[u8]) -> u64 {
        let mut h = self.hasher.build_hasher();
        h.write(method.as_str().as_bytes());
        h.write_u8(0);
        h.write(uri.path_and_query().map_or("", |p| p.as_str()).as_bytes());
        h.write_u8(0);
        h.write(body);
        h.finish()
    }

    fn claim(&self, key: &str, fingerprint: u64) -> Claim {
        let now = Instant::now();
        let mut e = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(entry) = e.by_key.get(key) {
            let live = match &entry.state {
                EntryState::Running(rx) => Some(Claim::Wait(rx.clone())),
                EntryState::Done { answer, until } if *until > now => {
                    Some(Claim::Replay(answer.clone()))
                }
                EntryState::Done { .. } => None,
            };
            if let Some(claim) = live {
                return if entry.fingerprint == fingerprint {
                    claim
                } else {
                    Claim::Mismatch
                };
            }
        }
        // Expired answers at the front of the order go now, so that their
        // memory does not wait for the store to fill up (capacity times the
        // largest answer kept): amortized, each key is swept once.
        while let Some((old, generation)) = e.order.front() {
            let stale = match e.by_key.get(old) {
                Some(x) if x.generation == *generation => match x.state {
                    EntryState::Done { until, .. } => until <= now,
                    EntryState::Running(_) => false,
                },
                // Replaced or forgotten since: only its place in the order.
                _ => true,
            };
            if !stale {
                break;
            }
            let Some((old, generation)) = e.order.pop_front() else {
                break;
            };
            if e.by_key
                .get(&old)
                .is_some_and(|x| x.generation == generation)
            {
                e.by_key.remove(&old);
            }
        }
        // Absent or expired: this request runs. Make room first, oldest
        // first, but never by forgetting a key whose request still runs: a
        // repeat of it would run the handler a second time.
        let mut looked = e.order.len();
        while e.by_key.len() >= self.settings.capacity && looked > 0 {
            looked -= 1;
            let Some((old, generation)) = e.order.pop_front() else {
                break;
            };
            match e.by_key.get(&old) {
                Some(x) if x.generation == generation => {
                    if matches!(x.state, EntryState::Running(_)) {
                        e.order.push_back((old, generation));
                    } else {
                        e.by_key.remove(&old);
                    }
                }
                _ => {}
            }
        }
        if e.by_key.len() >= self.settings.capacity {
            return Claim::Busy;
        }
        e.generation += 1;
        let generation = e.generation;
        let (tx, rx) = watch::channel(None);
        e.by_key.insert(
            key.to_owned(),
            Entry {
                fingerprint,
                generation,
                state: EntryState::Running(rx),
            },
        );
        e.order.push_back((key.to_owned(), generation));
        // Keep the order queue from growing without bound when keys are
        // replaced often.
        if e.order.len() > self.settings.capacity.saturating_mul(2) {
            let Entries { by_key, order, .. } = &mut *e;
            order.retain(|(k, g)| by_key.get(k).is_some_and(|x| x.generation == *g));
        }
        Claim::Run(tx, generation)
    }

    /// Stores a final answer, or forgets the key so a retry runs again.
    fn finish(&self, key: &str, generation: u64, answer: Option<Arc<Stored>>) {
        let mut e = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(entry) = e.by_key.get_mut(key).filter(|x| x.generation == generation) else {
            return; // evicted meanwhile
        };
        match answer {
            Some(answer) => {
                entry.state = EntryState::Done {
                    answer,
                    until: expiry(Instant::now(), self.settings.ttl),
                };
            }
            None => {
                e.by_key.remove(key);
            }
        }
    }
}

/// When an answer stored at `now` expires: `ttl` later, or as far ahead as
/// an `Instant` goes (a `ttl` of `Duration::MAX` means "never", not a panic).
fn expiry(now: Instant, ttl: Duration) -> Instant {
    now.checked_add(ttl)
        .or_else(|| now.checked_add(Duration::from_secs(100 * 365 * 86_400)))
        .unwrap_or(now)
}

/// The claim of a running key, until its answer is given
/// ([`complete`](Self::complete)). Dropped without one: before the handler
/// started (waiting for the service to be ready), the key is forgotten, so
/// a retry runs it; after (the handler panicked or failed with a service
/// error, or its task was cancelled with the runtime), the work may be
/// partly done, so the key keeps an answer saying so ([`interrupted`]) and
/// is never run again.
struct RunGuard {
    store: Arc<Store>,
    key: String,
    generation: u64,
    tx: Option<watch::Sender<Option<Arc<Stored>>>>,
    started: bool,
}

impl RunGuard {
    /// Hands `answer` to the requests waiting on this one, and keeps it
    /// for later ones if `keep`.
    fn complete(mut self, answer: Option<Arc<Stored>>, keep: bool) {
        self.settle(answer, keep);
    }

    fn settle(&mut self, answer: Option<Arc<Stored>>, keep: bool) {
        let kept = answer.clone().filter(|_| keep);
        self.store.finish(&self.key, self.generation, kept);
        if let Some(tx) = self.tx.take() {
            // `None` (no answer): the sender drops, and the waiters claim
            // the key again.
            let _ = tx.send(answer);
        }
    }
}

impl Drop for RunGuard {
    fn drop(&mut self) {
        if self.tx.is_some() {
            // Not started: nothing ran, the key is forgotten. Started: the
            // work may be partly done, and the key keeps an answer saying so.
            let answer = self.started.then(|| Arc::new(interrupted()));
            self.settle(answer, self.started);
        }
    }
}

/// The answer of a request whose handler started and did not answer: it
/// panicked, or its task was cancelled (the runtime shut down).
fn interrupted() -> Stored {
    acted_without_answer(
        "the handler stopped before answering; it may have carried out part of the request, so it is not run again for this Idempotency-Key",
    )
}

/// A 500 kept for a handler that acted (or may have) without an answer
/// the store can keep. Marked `May-Have-Taken-Effect`, since the handler
/// may have acted, and `Do-Not-Retry`, since a retry under the key gets
/// this answer again (and a caller's breaker counts it, as a failure of
/// this service).
fn acted_without_answer(detail: &str) -> Stored {
    let mut stored = problem_stored(StatusCode::INTERNAL_SERVER_ERROR, detail);
    crate::http::set_may_have_taken_effect(&mut stored.headers);
    crate::http::set_do_not_retry(&mut stored.headers);
    stored
}

/// A stored answer, as given to the request that made it.
fn answer<B>(stored: &Stored) -> Response<ResponseBody<B>> {
    let mut response = Response::new(Either::Right(Full::new(stored.body.clone())));
    *response.status_mut() = stored.status;
    *response.headers_mut() = stored.headers.clone();
    response
}

/// A stored answer, as given to a repeat: marked `Idempotent-Replayed`.
fn replay<B>(stored: &Stored) -> Response<ResponseBody<B>> {
    let mut response = answer(stored);
    response
        .headers_mut()
        .insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
    response
}

fn problem<B>(status: StatusCode, detail: &str) -> Response<ResponseBody<B>> {
    answer(&problem_stored(status, detail))
}

/// A problem+json answer (RFC 9457), as the store keeps answers.
fn problem_stored(status: StatusCode, detail: &str) -> Stored {
    let body = format!(
        "{{\"type\":\"about:blank\",\"title\":\"{}\",\"status\":{},\"detail\":\"{}\"}}",
        status.canonical_reason().unwrap_or(""),
        status.as_u16(),
        detail
    );
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
    Stored {
        status,
        headers,
        body: Bytes::from(body),
    }
}

/// Every answer is kept except those saying the request was not processed
/// (see the layer's docs): 408, 429, 503, and the library's own refusals
/// (a deadline passed before the handler ran, a breaker open…), whatever
/// their status and however the layers are stacked.
fn is_final(parts: &::http::response::Parts) -> bool {
    let not_processed = matches!(
        parts.status,
        StatusCode::REQUEST_TIMEOUT
            | StatusCode::TOO_MANY_REQUESTS
            | StatusCode::SERVICE_UNAVAILABLE
    );
    !not_processed
        && parts
            .extensions
            .get::<crate::http::RefusalAnswer>()
            .is_none()
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Runs `run` to its end, or, once `gone` says its request went away, for
/// at most `limit` more; cut then (its claim keeps the [`interrupted`]
/// answer) and answered so. `detached` is set when the request goes away
/// first.
async fn run_while_wanted<F, B, E>(
    run: F,
    mut gone: tokio::sync::oneshot::Receiver<()>,
    detached: &AtomicBool,
    limit: Duration,
) -> Result<Response<ResponseBody<B>>, E>
where
    F: std::future::Future<Output = Result<Response<ResponseBody<B>>, E>>,
{
    let mut run = std::pin::pin!(run);
    let ended = std::future::poll_fn(|cx| {
        if let Poll::Ready(answer) = run.as_mut().poll(cx) {
            return Poll::Ready(Some(answer));
        }
        match std::pin::Pin::new(&mut gone).poll(cx) {
            Poll::Ready(_) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    })
    .await;
    if let Some(answer) = ended {
        return answer;
    }
    detached.store(true, Ordering::Release);
    match tokio::time::timeout(limit, run.as_mut()).await {
        Ok(answer) => answer,
        Err(_) => Ok(answer(&interrupted())),
    }
}

/// Runs the handler for a claimed key, reads its answer, and completes the
/// claim with it. `detached`: its request went away while it ran.
async fn run_to_end<S, ReqB, ResB>(
    mut inner: S,
    request: Request<ReqB>,
    guard: RunGuard,
    max: usize,
    detached: Arc<AtomicBool>,
) -> Result<Response<ResponseBody<ResB>>, S::Error>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
    ResB: Body<Data = Bytes>,
    ResB::Error: Into<BoxError>,
{
    // What the handler's calls did is part of its answer: a replay must say
    // "do not retry" and "may have taken effect" as the first did.
    let (response, report) = crate::observe(inner.call(request)).await;
    let (mut parts, body) = response?.into_parts();
    super::mark_answer(&mut parts.headers, parts.status, &report);
    // An answer that says "not processed" is not kept, unless an annotated
    // call inside did something: then a retry could do it again. Nor when
    // the handler ran on after its request went away (an outer layer's
    // deadline cut it, its client left): what it did before an annotated
    // call refused it (its own writes, which no report shows) may be done,
    // and its client never saw an answer to trust; kept, it says so.
    let acted = super::acted(&report);
    let final_answer = is_final(&parts);
    let detached = !acted && !final_answer && detached.load(Ordering::Acquire);
    let keep = acted || final_answer || detached;
    if detached && super::is_failure(parts.status) {
        crate::http::set_may_have_taken_effect(&mut parts.headers);
    }
    // A failure kept no longer invites a retry: one under the key would get
    // it again, for as long as the key is kept, not a new run (a 504 of a
    // handler `ResilienceLayer` cut, a 503 after a call acted).
    if keep && super::is_failure(parts.status) {
        parts.headers.remove(::http::header::RETRY_AFTER);
        crate::http::set_do_not_retry(&mut parts.headers);
    }
    let collected = match Limited::new(body, max).collect().await {
        Ok(collected) => collected,
        // The handler ran, and its answer is more than the store keeps:
        // keep that it ran, so that a repeat does not run it a second time.
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            let ran = Arc::new(acted_without_answer(
                "the request was carried out, but its answer is larger than the idempotency layer keeps",
            ));
            guard.complete(Some(ran.clone()), true);
            return Ok(answer(&ran));
        }
        Err(_) if acted => {
            let cut = Arc::new(interrupted());
            guard.complete(Some(cut.clone()), true);
            return Ok(answer(&cut));
        }
        Err(_) => {
            guard.complete(None, false);
            return Ok(problem(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the handler's answer could not be read",
            ));
        }
    };
    let stored = Arc::new(Stored {
        status: parts.status,
        headers: parts.headers.clone(),
        body: collected.to_bytes(),
    });
    guard.complete(Some(stored.clone()), keep);
    let mut response = Response::from_parts(parts, Either::Right(Full::new(stored.body.clone())));
    response.headers_mut().remove(IDEMPOTENT_REPLAYED);
    Ok(response)
}

impl<S, ReqB, ResB> Service<Request<ReqB>> for Idempotency<S>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ReqB: Body + From<Bytes> + Send + 'static,
    ReqB::Data: Send,
    ReqB::Error: Into<BoxError>,
    ResB: Body<Data = Bytes> + Send + 'static,
    ResB::Error: Into<BoxError>,
{
    type Response = Response<ResponseBody<ResB>>;
    type Error = S::Error;
    type Future = ResponseFuture<ResB, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqB>) -> Self::Future {
        let Some(key) = request.headers().get(&IDEMPOTENCY_KEY) else {
            let fut = self.inner.call(request);
            return Box::pin(async move {
                Ok(fut.await?.map(|body| Either::Left(WorkBody::plain(body))))
            });
        };
        let key = key
            .to_str()
            .ok()
            .and_then(|k| crate::IdempotencyKey::from_header_value(k).ok());
        let Some(key) = key else {
            return Box::pin(std::future::ready(Ok(problem(
                StatusCode::BAD_REQUEST,
                "invalid Idempotency-Key: 1 to 255 visible ASCII characters other than quote and backslash, bare or as a quoted string",
            ))));
        };
        let grpc = super::is_grpc(&request);
        // The ready service runs this request; the clone takes its place
        // (tower's usual pattern for services called from a future).
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let store = self.store.clone();
        // A `ResilienceLayer` inside runs the caller's budget from here: the
        // body's upload, and any wait for the same key, are the caller's
        // time too.
        let arrived = Instant::now();
        Box::pin(async move {
            let max = store.settings.max_body;
            let (mut parts, body) = request.into_parts();
            if parts.extensions.get::<Arrived>().is_none() {
                parts.extensions.insert(Arrived(arrived));
            }
            let bytes = match Limited::new(body, max).collect().await {
                Ok(collected) => collected.to_bytes(),
                Err(e) if e.is::<http_body_util::LengthLimitError>() => {
                    return Ok(problem(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        "request body over the idempotency layer's limit",
                    ));
                }
                Err(_) => {
                    return Ok(problem(StatusCode::BAD_REQUEST, "request body unreadable"));
                }
            };
            let fingerprint = store.fingerprint(&parts.method, &parts.uri, &bytes);
            let key = store.scoped(key.as_str(), &parts.headers);
            let mut request = Some(Request::from_parts(parts, ReqB::from(bytes)));
            loop {
                match store.claim(&key, fingerprint) {
                    Claim::Replay(stored) => return Ok(replay(&stored)),
                    Claim::Mismatch => {
                        return Ok(problem(
                            StatusCode::UNPROCESSABLE_ENTITY,
                            "this Idempotency-Key was already used for a different request",
                        ));
                    }
                    Claim::Busy => {
                        let mut busy = problem(
                            StatusCode::SERVICE_UNAVAILABLE,
                            "every idempotency slot holds a request still running; retry later",
                        );
                        busy.headers_mut().insert(
                            ::http::header::RETRY_AFTER,
                            ::http::HeaderValue::from_static("1"),
                        );
                        return Ok(busy);
                    }
                    Claim::Wait(mut rx) => {
                        // Ends with the first request's answer, or with
                        // `None` when it was dropped or not final: then
                        // claim again (and maybe run it ourselves).
                        let answer = match rx.wait_for(Option::is_some).await {
                            Ok(answer) => answer.clone(),
                            Err(_) => None,
                        };
                        if let Some(stored) = answer {
                            return Ok(replay(&stored));
                        }
                    }
                    Claim::Run(tx, generation) => {
                        let mut guard = RunGuard {
                            store: store.clone(),
                            key: key.clone().into_owned(),
                            generation,
                            tx: Some(tx),
                            started: false,
                        };
                        let request = request.take().expect("runs once: the loop returns after");
                        // One unit of work for a graceful shutdown, until
                        // the handler ends: refused before it runs when
                        // draining, unless it runs inside work already in
                        // flight (a `ResilienceLayer` outside this one
                        // admitted the request), which it is then part of;
                        // counted now, while the request still holds its
                        // place, so a drain between the two never finds the
                        // work idle. Refused, the request has not run: the
                        // guard forgets the key (a repeat may run it).
                        let in_flight = match crate::shutdown::admit(crate::frame::in_call()) {
                            Ok(in_flight) => in_flight,
                            Err(refusal) => return Ok(super::shutting_down(grpc, &refusal)),
                        };
                        // Dropped while waiting here, the request has not
                        // run: the guard forgets the key.
                        std::future::poll_fn(|cx| inner.poll_ready(cx)).await?;
                        guard.started = true;
                        let detached = Arc::new(AtomicBool::new(false));
                        let run = run_to_end(inner, request, guard, max, detached.clone());
                        // On a task of its own, the handler runs to its end
                        // even if this request is dropped: its answer is
                        // kept for the repeats. Outside a tokio runtime
                        // (no task to spawn on), it runs here.
                        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                            let answer = run.await;
                            drop(in_flight);
                            return answer;
                        };
                        // Resolves (closed) when this request is dropped.
                        let (_attached, gone) = tokio::sync::oneshot::channel::<()>();
                        let limit = store.settings.max_run_without_client;
                        let run =
                            async move { run_while_wanted(run, gone, &detached, limit).await };
                        #[cfg(feature = "tracing")]
                        let run = tracing::Instrument::in_current_span(run);
                        // Part of this request for an `observe` around it
                        // (`ResilienceLayer`'s, which marks the answer "do
                        // not retry" when the handler retried, also when
                        // its deadline cuts the request while this runs).
                        let run = crate::report::linked(crate::report::link(), run);
                        // Counted by `in_flight` (taken above) alone, also
                        // when this request runs inside admitted work, where
                        // `propagate` would count it a second time.
                        let run = crate::context::propagate_holding(run, in_flight);
                        return match runtime.spawn(run).await {
                            Ok(answer) => answer,
                            // It panicked (or was cancelled): the guard kept
                            // the same answer for the repeats.
                            Err(_) => Ok(answer(&interrupted())),
                        };
                    }
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer() -> Option<Arc<Stored>> {
        Some(Arc::new(Stored {
            status: StatusCode::CREATED,
            headers: HeaderMap::new(),
            body: Bytes::from_static(b"done"),
        }))
    }

    /// Expired answers are let go as new keys arrive, not only once the
    /// store is full (review 25: a store that filled once kept its answers,
    /// up to capacity times the largest, for good).
    #[tokio::test(start_paused = true)]
    async fn expired_answers_are_let_go_before_the_store_is_full() {
        let store = Store::new(100, Duration::from_secs(60), 1 << 20);
        for key in ["a", "b", "c"] {
            let Claim::Run(_tx, generation) = store.claim(key, 1) else {
                panic!("a new key runs");
            };
            store.finish(key, generation, answer());
        }
        assert!(matches!(store.claim("a", 1), Claim::Replay(_)));
        tokio::time::advance(Duration::from_secs(61)).await;
        let Claim::Run(_tx, _) = store.claim("d", 1) else {
            panic!("a new key runs");
        };
        let e = store.entries.lock().unwrap();
        let mut kept: Vec<&str> = e.by_key.keys().map(String::as_str).collect();
        kept.sort_unstable();
        assert_eq!(kept, ["d"], "the expired answers are gone");
        assert_eq!(e.order.len(), 1);
    }

    /// A key whose request still runs stops the sweep: it is never
    /// forgotten, and what comes after it waits for the next sweep.
    #[tokio::test(start_paused = true)]
    async fn a_running_key_is_never_swept() {
        let store = Store::new(100, Duration::from_secs(60), 1 << 20);
        let Claim::Run(_running, _) = store.claim("slow", 1) else {
            panic!("a new key runs");
        };
        let Claim::Run(_tx, generation) = store.claim("fast", 1) else {
            panic!("a new key runs");
        };
        store.finish("fast", generation, answer());
        tokio::time::advance(Duration::from_secs(61)).await;
        let Claim::Run(_tx, _) = store.claim("next", 1) else {
            panic!("a new key runs");
        };
        assert!(matches!(store.claim("slow", 1), Claim::Wait(_)));
    }
}
