//! One retrying layer across services, over real sockets: a client calls
//! service A, A calls service B, B calls a database stub; every hop is an
//! annotated function with `retries = 3`. When the stub is down or hangs,
//! it sees at most 4 attempts per user request, because B, having retried,
//! answers `Do-Not-Retry: ?1` and A passes it on; without that header the
//! same chain makes 4 × 4 × 4 = 64. B also runs under the client's
//! deadline (carried by A), not a fresh one.
//!
//! Real sockets, so real time: timeouts are tens of milliseconds and the
//! assertions are counts, which do not depend on the machine's speed.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use resilient::http::Error;
use resilient::reqwest::RequestBuilderExt;
use resilient::tower::ResilienceLayer;
use resilient::{Classify, resilient};
use tokio::net::TcpListener;

async fn serve(router: Router) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    addr
}

#[derive(Clone, Copy)]
enum Outage {
    /// Refuses every query at once (503, no `Retry-After`).
    Down,
    /// Accepts every query and never answers.
    Hanging,
}

#[derive(Default)]
struct Stub {
    queries: AtomicU32,
}

async fn database(State((stub, outage)): State<(Arc<Stub>, Outage)>) -> Response {
    stub.queries.fetch_add(1, Ordering::SeqCst);
    match outage {
        Outage::Down => StatusCode::SERVICE_UNAVAILABLE.into_response(),
        Outage::Hanging => std::future::pending().await,
    }
}

/// What B saw of its deadline per request: `remaining()` on entry, and the
/// `Request-Budget-Ms` header.
type Deadlines = Arc<Mutex<Vec<(Option<Duration>, Option<u64>)>>>;

#[derive(Clone)]
struct Hop {
    client: reqwest::Client,
    next: SocketAddr,
    /// What B saw of its deadline: `remaining()` on entry, and the
    /// `Request-Budget-Ms` header.
    deadlines: Deadlines,
    short_attempts: bool,
}

#[resilient(retries = 3, base_ms = 1, cap_ms = 5, timeout_ms = 40, idempotent)]
async fn query_database(client: &reqwest::Client, db: SocketAddr) -> Result<String, Error> {
    let response = client
        .get(format!("http://{db}/query"))
        .send_checked()
        .await?;
    Ok(response.text().await?)
}

async fn service_b(State(hop): State<Hop>, headers: HeaderMap) -> Result<String, Error> {
    let header = headers
        .get("request-budget-ms")
        .and_then(|v| v.to_str().ok()?.parse().ok());
    hop.deadlines
        .lock()
        .unwrap()
        .push((resilient::remaining(), header));
    query_database(&hop.client, hop.next).await
}

// A's own deadline is generous: what B sees must be the client's, which
// is shorter.
#[resilient(retries = 3, base_ms = 1, cap_ms = 5, deadline_ms = 10000, idempotent)]
async fn call_b(client: &reqwest::Client, b: SocketAddr) -> Result<String, Error> {
    let response = client.get(format!("http://{b}/b")).send_checked().await?;
    Ok(response.text().await?)
}

async fn service_a(State(hop): State<Hop>) -> Result<String, Error> {
    if hop.short_attempts {
        call_b_with_attempt_timeout(&hop.client, hop.next).await
    } else {
        call_b(&hop.client, hop.next).await
    }
}

// The same call with an attempt timeout shorter than B needs to retry the
// database 4 times (4 × 40 ms plus backoff): B's deadline is then this
// attempt's, and B must answer before A's timer fires. `ResilienceLayer`
// keeps a tenth of the budget (15 ms here) for that; without the reserve
// the database saw 12 attempts per user request (A's timer fired first,
// and A retried B three times).
#[resilient(
    retries = 3,
    base_ms = 1,
    cap_ms = 5,
    deadline_ms = 10000,
    timeout_ms = 150,
    idempotent
)]
async fn call_b_with_attempt_timeout(
    client: &reqwest::Client,
    b: SocketAddr,
) -> Result<String, Error> {
    let response = client.get(format!("http://{b}/b")).send_checked().await?;
    Ok(response.text().await?)
}

#[resilient(retries = 3, base_ms = 1, cap_ms = 5, deadline_ms = 5000, idempotent)]
async fn call_a(client: &reqwest::Client, a: SocketAddr) -> Result<String, Error> {
    let response = client.get(format!("http://{a}/a")).send_checked().await?;
    Ok(response.text().await?)
}

struct Chain {
    a: SocketAddr,
    stub: Arc<Stub>,
    b_deadlines: Deadlines,
}

/// Starts the stub, B and A. With `signal = false`, A and B strip the
/// `Do-Not-Retry` header from their answers, as servers without this
/// library's layer would never send it.
async fn start_chain(outage: Outage, signal: bool) -> Chain {
    start_chain_with(outage, signal, false).await
}

async fn start_chain_with(outage: Outage, signal: bool, short_attempts: bool) -> Chain {
    let client = reqwest::Client::new();
    let stub = Arc::new(Stub::default());
    let db = serve(
        Router::new()
            .route("/query", get(database))
            .with_state((stub.clone(), outage)),
    )
    .await;
    let b_deadlines = Arc::new(Mutex::new(Vec::new()));
    let strip = tower::util::MapResponseLayer::new(move |mut response: Response| {
        if !signal {
            response.headers_mut().remove("do-not-retry");
        }
        response
    });
    let b = serve(
        Router::new()
            .route("/b", get(service_b))
            .with_state(Hop {
                client: client.clone(),
                next: db,
                deadlines: b_deadlines.clone(),
                short_attempts,
            })
            .layer(ResilienceLayer::new())
            .layer(strip.clone()),
    )
    .await;
    let a = serve(
        Router::new()
            .route("/a", get(service_a))
            .with_state(Hop {
                client,
                next: b,
                deadlines: Arc::default(),
                short_attempts,
            })
            .layer(ResilienceLayer::new())
            .layer(strip),
    )
    .await;
    Chain {
        a,
        stub,
        b_deadlines,
    }
}

async fn user_requests(chain: &Chain, n: u32) -> Vec<(u32, Error)> {
    let client = reqwest::Client::new();
    let mut out = Vec::new();
    for _ in 0..n {
        let before = chain.stub.queries.load(Ordering::SeqCst);
        let err = call_a(&client, chain.a).await.unwrap_err();
        out.push((chain.stub.queries.load(Ordering::SeqCst) - before, err));
    }
    out
}

#[tokio::test]
async fn a_database_that_is_down_sees_4_attempts_per_request_not_64() {
    let chain = start_chain(Outage::Down, true).await;
    for (attempts, err) in user_requests(&chain, 3).await {
        assert_eq!(attempts, 4, "only B retries the database");
        assert!(err.is_do_not_retry(), "{err:?}");
        assert!(!err.classify().is_retryable());
    }

    let without = start_chain(Outage::Down, false).await;
    for (attempts, err) in user_requests(&without, 2).await {
        assert_eq!(
            attempts, 64,
            "without the header every hop retries: 4 × 4 × 4"
        );
        assert!(!err.is_do_not_retry());
    }
}

#[tokio::test]
async fn a_hanging_database_sees_4_attempts_per_request() {
    let chain = start_chain(Outage::Hanging, true).await;
    for (attempts, err) in user_requests(&chain, 3).await {
        assert_eq!(attempts, 4, "only B retries the database");
        assert_eq!(err.status(), Some(StatusCode::GATEWAY_TIMEOUT), "{err:?}");
        assert!(err.is_do_not_retry(), "{err:?}");
    }
}

#[tokio::test]
async fn a_hanging_database_behind_a_shorter_attempt_timeout_sees_at_most_4() {
    let chain = start_chain_with(Outage::Hanging, true, true).await;
    for (attempts, err) in user_requests(&chain, 5).await {
        assert!(attempts <= 4, "{attempts} attempts; {err:?}");
        assert!(err.is_do_not_retry(), "{err:?}");
    }
}

#[tokio::test]
async fn b_runs_under_the_clients_deadline_carried_by_a() {
    let chain = start_chain(Outage::Down, true).await;
    user_requests(&chain, 1).await;
    let seen = chain.b_deadlines.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "A did not retry B");
    let (remaining, header) = seen[0];
    // The client allowed 5,000 ms; A's own `deadline_ms = 10000` must not
    // have replaced it with a fresh one. (The lower bounds only say the
    // deadline is a real one; they leave room for a loaded machine.)
    let remaining = remaining.expect("B's handler runs under a deadline");
    assert!(remaining <= Duration::from_millis(5000), "{remaining:?}");
    assert!(remaining > Duration::from_millis(2500), "{remaining:?}");
    let header = header.expect("A sent Request-Budget-Ms");
    assert!((2501..=5000).contains(&header), "{header}");
}

// The user's client with a breaker on A: A answers every request with 502
// `Do-Not-Retry` while the database behind B is down. That answer is not
// retried, but it is A failing, and the breaker must open on it: before,
// it was classified permanent, which a breaker ignores, so a client kept
// sending every request into a chain that could serve none.
#[resilient(
    retries = 3,
    base_ms = 1,
    cap_ms = 5,
    breaker = "service-a",
    idempotent
)]
async fn call_a_through_breaker(client: &reqwest::Client, a: SocketAddr) -> Result<String, Error> {
    let response = client.get(format!("http://{a}/a")).send_checked().await?;
    Ok(response.text().await?)
}

#[tokio::test]
async fn a_breaker_opens_on_a_service_whose_own_dependency_is_down() {
    use resilient::{BreakerConfig, Classification, ErrorKind, Registry, SlidingWindow, State};

    let chain = start_chain(Outage::Down, true).await;
    let registry = Registry::builder()
        .breaker(
            "service-a",
            BreakerConfig::default()
                .sliding_window(SlidingWindow::CountBased { size: 4 })
                .minimum_number_of_calls(4)
                .wait_duration_in_open_state(Duration::from_secs(60)),
        )
        .build()
        .unwrap();
    let client = reqwest::Client::new();
    let mut outcomes = Vec::new();
    registry
        .scope(async {
            for _ in 0..6 {
                let before = chain.stub.queries.load(Ordering::SeqCst);
                let err = call_a_through_breaker(&client, chain.a).await.unwrap_err();
                let queries = chain.stub.queries.load(Ordering::SeqCst) - before;
                outcomes.push((queries, err));
            }
        })
        .await;
    let breaker = registry.breaker("service-a").unwrap();
    assert_eq!(breaker.state(), State::Open, "{outcomes:?}");
    for (i, (queries, err)) in outcomes.iter().enumerate() {
        if i < 4 {
            // Not retried: one request through A, B's four queries.
            assert_eq!(*queries, 4, "request {i}: {err:?}");
            assert_eq!(err.status(), Some(StatusCode::BAD_GATEWAY), "{err:?}");
            assert_eq!(
                err.classify(),
                Classification::DoNotRetry { retry_after: None }
            );
        } else {
            // Refused by the open breaker: nothing sent.
            assert_eq!(*queries, 0, "request {i}: {err:?}");
            assert_eq!(
                err.refusal().map(resilient::Error::kind),
                Some(ErrorKind::BreakerOpen),
                "{err:?}"
            );
        }
    }
    assert_eq!(breaker.snapshot().failed_calls, 4);
}

/// `Do-Not-Retry` across real services on loopback (review 7): C is a stub
/// dependency; B calls it through an annotated function and answers with
/// `resilient::http::Error` as it is (or maps it to its own status), behind
/// `IdempotencyLayer` and `ResilienceLayer`; A calls B.
mod do_not_retry {
    use super::*;
    use axum::http::HeaderValue;
    use axum::routing::post;
    use resilient::tower::IdempotencyLayer;
    use resilient::{BreakerConfig, Classification, Registry, SlidingWindow};

    #[derive(Clone, Copy, PartialEq)]
    enum C {
        /// Every query is the caller's mistake: 404.
        NotFound,
        /// C's own breaker is open (as `refusal_response` answers it): 503,
        /// `Retry-After: 30`, `Do-Not-Retry: ?1`.
        OpenFor30s,
        /// The same 503 + `Retry-After: 30`, without `Do-Not-Retry`.
        ThrottledFor30s,
        Ok,
        /// C already retried its own dependency and gave up: 502 + `Do-Not-Retry`.
        GaveUp,
    }

    #[derive(Default)]
    struct Stub {
        mode: std::sync::Mutex<Option<C>>,
        queries: AtomicU32,
    }

    async fn c_handler(State(stub): State<Arc<Stub>>) -> Response {
        stub.queries.fetch_add(1, Ordering::SeqCst);
        let mode = stub.mode.lock().unwrap().unwrap();
        match mode {
            C::NotFound => StatusCode::NOT_FOUND.into_response(),
            C::OpenFor30s | C::ThrottledFor30s => {
                let mut h = HeaderMap::new();
                h.insert("retry-after", HeaderValue::from_static("30"));
                if mode == C::OpenFor30s {
                    h.insert("do-not-retry", HeaderValue::from_static("?1"));
                }
                (StatusCode::SERVICE_UNAVAILABLE, h).into_response()
            }
            C::Ok => "charged".into_response(),
            C::GaveUp => (StatusCode::BAD_GATEWAY, [("do-not-retry", "?1")]).into_response(),
        }
    }

    #[resilient(deadline_ms = 5000)]
    async fn call_c(client: &reqwest::Client, c: SocketAddr) -> Result<String, Error> {
        let r = client.post(format!("http://{c}/c")).send_checked().await?;
        Ok(r.text().await?)
    }

    #[derive(Clone)]
    struct Hop {
        client: reqwest::Client,
        c: SocketAddr,
        b_runs: Arc<AtomicU32>,
    }

    async fn b_handler(State(hop): State<Hop>) -> Result<String, Error> {
        hop.b_runs.fetch_add(1, Ordering::SeqCst);
        call_c(&hop.client, hop.c).await
    }

    /// The same handler, answering the dependency's failure with its own
    /// status (a common handler shape: `map_err(|_| StatusCode::BAD_GATEWAY)`).
    async fn b_handler_mapping(State(hop): State<Hop>) -> Result<String, StatusCode> {
        hop.b_runs.fetch_add(1, Ordering::SeqCst);
        call_c(&hop.client, hop.c)
            .await
            .map_err(|_| StatusCode::BAD_GATEWAY)
    }

    async fn start_b(mode: C) -> (SocketAddr, Arc<Stub>, Arc<AtomicU32>) {
        let stub = Arc::new(Stub::default());
        *stub.mode.lock().unwrap() = Some(mode);
        let c = serve(
            Router::new()
                .route("/c", post(c_handler))
                .with_state(stub.clone()),
        )
        .await;
        let b_runs = Arc::new(AtomicU32::new(0));
        let hop = Hop {
            client: reqwest::Client::new(),
            c,
            b_runs: b_runs.clone(),
        };
        let b = serve(
            Router::new()
                .route("/b", post(b_handler))
                .route("/b2", post(b_handler_mapping))
                .route("/health", get(|| async { "ok" }))
                .with_state(hop)
                .layer(IdempotencyLayer::new())
                .layer(ResilienceLayer::new()),
        )
        .await;
        (b, stub, b_runs)
    }

    /// A's registry: its breaker on B opens on four failures in four calls.
    fn breaker_on_b() -> Registry {
        Registry::builder()
            .breaker(
                "service-b",
                BreakerConfig::default()
                    .sliding_window(SlidingWindow::CountBased { size: 4 })
                    .minimum_number_of_calls(4)
                    .wait_duration_in_open_state(Duration::from_secs(60)),
            )
            .build()
            .unwrap()
    }

    #[resilient(breaker = "service-b", deadline_ms = 5000)]
    async fn call_b_breaker(client: &reqwest::Client, b: SocketAddr) -> Result<String, Error> {
        let r = client.post(format!("http://{b}/b")).send_checked().await?;
        Ok(r.text().await?)
    }

    /// C answers 404 to every request: the callers' own mistake, which a
    /// breaker counts as neither success nor failure. B passes its permanent
    /// failure on with `to_response`: 424 + `Do-Not-Retry` (it was 502, which
    /// A then classified `DoNotRetry`, a failure: A's breaker on B opened on
    /// its own bad requests, and refused the good ones after it).
    #[tokio::test]
    async fn a_forwarded_client_error_leaves_the_callers_breaker_closed() {
        let (b, _stub, _) = start_b(C::NotFound).await;
        let registry = breaker_on_b();
        let client = reqwest::Client::new();
        let mut seen = Vec::new();
        registry
            .scope(async {
                for _ in 0..6 {
                    let e = call_b_breaker(&client, b).await.unwrap_err();
                    seen.push((e.status(), e.classify(), e.refusal().map(|r| r.kind())));
                }
            })
            .await;
        let breaker = registry.breaker("service-b").unwrap();
        assert_eq!(
            breaker.state(),
            resilient::State::Closed,
            "A's breaker on B opened on 404s of A's own requests: {seen:?}"
        );
        for seen in &seen {
            assert_eq!(
                seen,
                &(
                    Some(StatusCode::FAILED_DEPENDENCY),
                    Classification::Permanent,
                    None
                )
            );
        }
    }

    /// C's breaker is open and says so: 503, `Retry-After: 30`, `Do-Not-Retry`.
    /// B's call classifies it `DoNotRetry { retry_after: 30 s }`, and B passes
    /// on both the wait and the mark (it answered 502 without `Retry-After`, so
    /// A's breaker could not honour C's wait).
    #[tokio::test]
    async fn a_do_not_retry_wait_is_passed_on_to_the_callers() {
        let (b, _stub, _) = start_b(C::OpenFor30s).await;
        let client = reqwest::Client::new();
        let e = call_b_breaker(&client, b).await.unwrap_err();
        assert_eq!(
            e.classify(),
            Classification::DoNotRetry {
                retry_after: Some(Duration::from_secs(30))
            },
            "status {:?}, headers {:?}",
            e.status(),
            e.headers()
        );
    }

    /// C's 503 + `Retry-After: 30` is passed on as 503 + `Retry-After`, which
    /// `IdempotencyLayer` does not keep ("not processed"): the client's retry
    /// with the same key runs once C has recovered, also when C's answer said
    /// not to retry (B answered that one 502, which the key kept for 24 h: the
    /// charge could never be made with that key).
    #[tokio::test]
    async fn a_not_processed_answer_marked_do_not_retry_is_not_kept_for_the_key() {
        for mode in [C::ThrottledFor30s, C::OpenFor30s] {
            let (b, stub, b_runs) = start_b(mode).await;
            let client = reqwest::Client::new();
            let key = "order-42";
            let first = client
                .post(format!("http://{b}/b"))
                .header("idempotency-key", key)
                .send()
                .await
                .unwrap();
            let first_status = first.status();
            // C recovers; the client retries with the same key.
            *stub.mode.lock().unwrap() = Some(C::Ok);
            let second = client
                .post(format!("http://{b}/b"))
                .header("idempotency-key", key)
                .send()
                .await
                .unwrap();
            let second_status = second.status();
            let replayed = second.headers().get("idempotent-replayed").cloned();
            let body = second.text().await.unwrap();
            assert_eq!(
                (second_status, b_runs.load(Ordering::SeqCst)),
                (StatusCode::OK, 2),
                "C's first answer was {}: B's first answer {first_status}, then the retry got {second_status} (replayed {replayed:?}) {body}",
                if mode == C::OpenFor30s {
                    "503 + Retry-After + Do-Not-Retry"
                } else {
                    "503 + Retry-After"
                },
            );
        }
    }

    #[resilient(retries = 3, idempotent, base_ms = 1, cap_ms = 5, deadline_ms = 5000)]
    async fn call_b2(client: &reqwest::Client, b: SocketAddr) -> Result<String, Error> {
        let r = client.post(format!("http://{b}/b2")).send_checked().await?;
        Ok(r.text().await?)
    }

    /// C already retried and says so (502 + `Do-Not-Retry`). B's call returns
    /// it at once and B's handler answers with its own 502: the call gave up
    /// on C's word, so `ResilienceLayer` marks B's answer, and A does not retry
    /// it (before, A retried B 3 times, and C, which said not to retry, was
    /// called 4 times per user request).
    #[tokio::test]
    async fn a_do_not_retry_seen_inside_a_handler_reaches_its_caller() {
        let (b, stub, _) = start_b(C::GaveUp).await;
        let client = reqwest::Client::new();
        let e = call_b2(&client, b).await.unwrap_err();
        assert_eq!(
            stub.queries.load(Ordering::SeqCst),
            1,
            "C said 'do not retry'; A retried B's answer {:?} {:?}",
            e.status(),
            e.headers()
        );
    }

    #[resilient(
        breaker = "service-b",
        deadline_ms = 5000,
        classify = resilient::http::classify_retrying_500
    )]
    async fn call_b_retrying_500(client: &reqwest::Client, b: SocketAddr) -> Result<String, Error> {
        let r = client.post(format!("http://{b}/b")).send_checked().await?;
        Ok(r.text().await?)
    }

    /// `Error::to_response` answers a dependency's refusal of the request
    /// (C's 404: A's own mistake) with 424 + `Do-Not-Retry`: permanent also
    /// for a caller that retries 500s (`classify_retrying_500`), whose breaker
    /// on B opened on its own bad requests (it took the marked 500 this
    /// answer was for `DoNotRetry`, a failure).
    #[tokio::test]
    async fn a_forwarded_client_error_leaves_a_retrying_500_callers_breaker_closed() {
        let (b, _stub, _) = start_b(C::NotFound).await;
        let registry = breaker_on_b();
        let client = reqwest::Client::new();
        let mut seen = Vec::new();
        registry
            .scope(async {
                for _ in 0..6 {
                    let e = call_b_retrying_500(&client, b).await.unwrap_err();
                    seen.push((
                        e.status(),
                        resilient::http::classify_retrying_500(&e),
                        e.classify(),
                        e.refusal().map(|r| r.kind()),
                    ));
                }
            })
            .await;
        let breaker = registry.breaker("service-b").unwrap();
        assert_eq!(
            breaker.state(),
            resilient::State::Closed,
            "A's breaker on B opened on 404s of A's own requests: {seen:?}"
        );
    }
}

/// The chain with `IdempotencyLayer` on B, as the README's server sets it
/// up, and A sending an `Idempotency-Key` (review 8): B runs a keyed
/// request's handler on a task of its own, which must not hide from
/// `ResilienceLayer` that it retried.
mod keyed {
    use super::*;
    use axum::routing::post;
    use resilient::IdempotencyKey;
    use resilient::tower::IdempotencyLayer;

    #[derive(Clone, Copy)]
    enum Outage {
        Down,
        Hanging,
    }

    async fn database(State((queries, outage)): State<(Arc<AtomicU32>, Outage)>) -> Response {
        queries.fetch_add(1, Ordering::SeqCst);
        match outage {
            Outage::Down => StatusCode::SERVICE_UNAVAILABLE.into_response(),
            Outage::Hanging => std::future::pending().await,
        }
    }

    #[resilient(retries = 3, base_ms = 1, cap_ms = 5, timeout_ms = 40, idempotent)]
    async fn query_database_keyed(
        client: &reqwest::Client,
        db: SocketAddr,
    ) -> Result<String, Error> {
        let response = client
            .get(format!("http://{db}/query"))
            .send_checked()
            .await?;
        Ok(response.text().await?)
    }

    #[derive(Clone)]
    struct Hop {
        client: reqwest::Client,
        next: SocketAddr,
    }

    async fn service_b_keyed(State(hop): State<Hop>) -> Result<String, Error> {
        query_database_keyed(&hop.client, hop.next).await
    }

    #[resilient(
        retries = 3,
        base_ms = 1,
        cap_ms = 5,
        deadline_ms = 10000,
        timeout_ms = 150
    )]
    async fn call_b_keyed(
        client: &reqwest::Client,
        key: &IdempotencyKey,
        b: SocketAddr,
    ) -> Result<String, Error> {
        let response = client
            .post(format!("http://{b}/b"))
            .idempotency_key(key)
            .body("charge")
            .send_checked()
            .await?;
        Ok(response.text().await?)
    }

    #[resilient(retries = 3, base_ms = 1, cap_ms = 5, deadline_ms = 10000)]
    async fn call_b_plain(
        client: &reqwest::Client,
        key: &IdempotencyKey,
        b: SocketAddr,
    ) -> Result<String, Error> {
        let _ = key;
        let response = client
            .post(format!("http://{b}/b"))
            .body("charge")
            .send_checked()
            .await?;
        Ok(response.text().await?)
    }

    async fn start_keyed(outage: Outage) -> (SocketAddr, Arc<AtomicU32>) {
        let client = reqwest::Client::new();
        let queries = Arc::new(AtomicU32::new(0));
        let db = serve(
            Router::new()
                .route("/query", get(database))
                .with_state((queries.clone(), outage)),
        )
        .await;
        let b = serve(
            Router::new()
                .route("/b", post(service_b_keyed))
                .with_state(Hop { client, next: db })
                .layer(IdempotencyLayer::new())
                .layer(ResilienceLayer::new()),
        )
        .await;
        (b, queries)
    }

    async fn per_request(
        outage: Outage,
        keyed: bool,
        n: u32,
    ) -> Vec<(u32, Option<StatusCode>, bool)> {
        let (b, queries) = start_keyed(outage).await;
        let client = reqwest::Client::new();
        let mut out = Vec::new();
        for _ in 0..n {
            let before = queries.load(Ordering::SeqCst);
            let key = IdempotencyKey::random();
            let err = if keyed {
                call_b_keyed(&client, &key, b).await.unwrap_err()
            } else {
                call_b_plain(&client, &key, b).await.unwrap_err()
            };
            // let B's detached handlers finish
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            out.push((
                queries.load(Ordering::SeqCst) - before,
                err.status(),
                err.is_do_not_retry(),
            ));
        }
        out
    }

    #[tokio::test]
    async fn down_database_without_key() {
        for (attempts, status, dnr) in per_request(Outage::Down, false, 2).await {
            assert_eq!(attempts, 4, "{status:?} dnr={dnr}");
            assert!(dnr);
        }
    }

    #[tokio::test]
    async fn down_database_with_key() {
        for (attempts, status, dnr) in per_request(Outage::Down, true, 2).await {
            assert!(attempts <= 4, "{attempts} attempts; {status:?} dnr={dnr}");
            assert!(dnr, "{attempts} attempts; {status:?}");
        }
    }

    #[tokio::test]
    async fn hanging_database_without_key() {
        for (attempts, status, dnr) in per_request(Outage::Hanging, false, 2).await {
            assert!(attempts <= 4, "{attempts} attempts; {status:?} dnr={dnr}");
            assert!(
                dnr,
                "control: without a key B's 504 says Do-Not-Retry; {attempts} attempts; {status:?}"
            );
        }
    }

    #[tokio::test]
    async fn hanging_database_with_key() {
        for (attempts, status, dnr) in per_request(Outage::Hanging, true, 2).await {
            assert!(attempts <= 4, "{attempts} attempts; {status:?} dnr={dnr}");
            // Before, B's handler ran on the idempotency layer's own task, out
            // of `ResilienceLayer`'s sight: its 504 was unmarked, and A retried.
            assert!(
                dnr,
                "with an Idempotency-Key, B retried the database ({attempts} attempts) but its {status:?} carries no Do-Not-Retry"
            );
        }
    }

    #[resilient(retries = 2, idempotent, base_ms = 1, cap_ms = 1)]
    async fn flaky_dependency(calls: &AtomicU32) -> Result<(), std::io::Error> {
        if calls.fetch_add(1, Ordering::SeqCst) & 1 == 0 {
            return Err(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        }
        Ok(())
    }

    async fn pay_after_a_retry(State(calls): State<Arc<AtomicU32>>) -> (StatusCode, &'static str) {
        // One dependency retried once and succeeded; a later step failed.
        flaky_dependency(&calls).await.unwrap();
        (StatusCode::BAD_GATEWAY, "step two failed")
    }

    /// A handler whose annotated call retried, then failed in a later step:
    /// marked "do not retry" with an `Idempotency-Key` as without one (before,
    /// the idempotency layer's task hid the retry from `ResilienceLayer`, and
    /// the layer itself marked only give-ups).
    #[tokio::test]
    async fn a_failure_after_a_retry_says_do_not_retry_also_for_keyed_requests() {
        let calls = Arc::new(AtomicU32::new(0));
        let app = Router::new()
            .route("/pay", post(pay_after_a_retry))
            .with_state(calls.clone())
            .layer(IdempotencyLayer::new())
            .layer(ResilienceLayer::new());
        let addr = serve(app).await;
        let client = reqwest::Client::new();

        let plain = client
            .post(format!("http://{addr}/pay"))
            .body("x")
            .send()
            .await
            .unwrap();
        assert_eq!(plain.status(), 502);
        let plain_mark = plain.headers().get("do-not-retry").cloned();

        let keyed = client
            .post(format!("http://{addr}/pay"))
            .header("idempotency-key", "key-1")
            .body("x")
            .send()
            .await
            .unwrap();
        assert_eq!(keyed.status(), 502);
        let keyed_mark = keyed.headers().get("do-not-retry").cloned();
        assert_eq!(
            calls.load(Ordering::SeqCst),
            4,
            "each request: one failure, one retry"
        );
        assert_eq!(
            plain_mark.as_ref().map(|v| v.as_bytes()),
            Some(&b"?1"[..]),
            "without a key"
        );
        assert_eq!(
            keyed_mark.as_ref().map(|v| v.as_bytes()),
            Some(&b"?1"[..]),
            "with an Idempotency-Key the same handler, which retried, is not marked"
        );
    }
}

/// What a service's answer tells its callers when the request did act
/// (review 10, against a commit of this stop that answered 503 "not
/// processed" from the last error alone, and kept a marked 500 permanent
/// for callers retrying 500s). Each test's comment says the failure it
/// guards against; all pass on the code as it stands.
mod answers {
    use super::*;
    use axum::routing::post;
    use resilient::tower::IdempotencyLayer;
    use resilient::{BreakerConfig, IdempotencyKey, Registry, SlidingWindow, State as BState};

    // ---------------------------------------------------------------------------
    // 1. A 503 "not processed" for a request whose charge may have been made.

    /// The payment provider: the first charge is made, and its answer comes
    /// late (after B's attempt timeout); every later request is refused with a
    /// plain 503 before anything is done.
    #[derive(Default)]
    pub(super) struct Provider {
        pub(super) requests: AtomicU32,
        pub(super) charges: AtomicU32,
    }

    async fn provider(State(p): State<Arc<Provider>>) -> Response {
        if p.requests.fetch_add(1, Ordering::SeqCst) == 0 {
            p.charges.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(1500)).await;
            return "charged".into_response();
        }
        StatusCode::SERVICE_UNAVAILABLE.into_response()
    }

    #[resilient(retries = 1, base_ms = 1, cap_ms = 5, timeout_ms = 200)]
    pub(super) async fn charge_provider(
        client: &reqwest::Client,
        p: SocketAddr,
        key: &IdempotencyKey,
    ) -> Result<String, Error> {
        let r = client
            .post(format!("http://{p}/charge"))
            .idempotency_key(key)
            .send_checked()
            .await?;
        Ok(r.text().await?)
    }

    #[derive(Clone)]
    pub(super) struct PayState {
        pub(super) client: reqwest::Client,
        pub(super) p: SocketAddr,
    }

    /// Service B: charges the provider with the request's key.
    pub(super) async fn pay(
        State(s): State<PayState>,
        headers: axum::http::HeaderMap,
    ) -> Result<String, Error> {
        let key = headers
            .get("idempotency-key")
            .and_then(|v| v.to_str().ok())
            .map(|k| IdempotencyKey::from_stable_id(k).unwrap())
            .unwrap_or_else(IdempotencyKey::random);
        charge_provider(&s.client, s.p, &key).await
    }

    /// The client of B, as the README's client: retries, then reconciles when
    /// the report says the charge may have been made.
    #[resilient(retries = 2, base_ms = 1, cap_ms = 5, deadline_ms = 10000)]
    pub(super) async fn client_pays(
        client: &reqwest::Client,
        b: SocketAddr,
        key: &IdempotencyKey,
    ) -> Result<String, Error> {
        let r = client
            .post(format!("http://{b}/pay"))
            .idempotency_key(key)
            .send_checked()
            .await?;
        Ok(r.text().await?)
    }

    /// Service B on `router`, set up as the README sets a server up.
    pub(super) async fn start_b(router: Router<PayState>, p: SocketAddr) -> SocketAddr {
        serve(
            router
                .with_state(PayState {
                    client: reqwest::Client::new(),
                    p,
                })
                .layer(IdempotencyLayer::new())
                .layer(ResilienceLayer::new()),
        )
        .await
    }

    /// The client pays through B once; the provider charged once, so the
    /// client's report must not say "certainly not charged".
    pub(super) async fn check_report(b: SocketAddr, p: &Provider) {
        let client = reqwest::Client::new();
        let key = IdempotencyKey::random();
        let (result, report) = resilient::observe(client_pays(&client, b, &key)).await;
        let charges = p.charges.load(Ordering::SeqCst);
        let status = result.as_ref().err().and_then(|e| e.status());
        assert_eq!(charges, 1, "the provider charged once");
        assert!(
            result.is_ok() || report.may_have_taken_effect(),
            "the provider charged, but the client was answered {status:?} and its report says \
             no attempt may have taken effect ('certainly not charged'): {report:?}"
        );
    }

    /// B's first attempt at the provider timed out after the request went out
    /// (the provider charged), its retry got a plain 503. B's answer is 503,
    /// "the request was not processed", so the client's `observe` says no
    /// attempt may have taken effect: the client reports "certainly not
    /// charged" for a charge that was made. (Before the last commits B answered
    /// 502, which says the work may have been done.)
    #[tokio::test]
    async fn a_charge_made_by_an_earlier_attempt_is_not_reported_as_not_done() {
        let provider_state = Arc::new(Provider::default());
        let p = serve(
            Router::new()
                .route("/charge", post(provider))
                .with_state(provider_state.clone()),
        )
        .await;
        let b = start_b(Router::new().route("/pay", post(pay)), p).await;
        check_report(b, &provider_state).await;
    }

    // ---------------------------------------------------------------------------
    // 2. A service that cannot serve answers 500 + Do-Not-Retry, which a caller
    //    retrying 500s now takes for its own mistake: its breaker never opens.

    /// B's database: down (connection refused), retried 3 times.
    #[resilient(retries = 3, base_ms = 1, cap_ms = 2, idempotent)]
    async fn query_db(calls: &AtomicU32) -> Result<u32, std::io::Error> {
        calls.fetch_add(1, Ordering::SeqCst);
        Err(std::io::ErrorKind::ConnectionRefused.into())
    }

    /// Service B, as most handlers are written: its database failing is its
    /// own 500.
    async fn b_with_db(State(calls): State<Arc<AtomicU32>>) -> Result<String, StatusCode> {
        query_db(&calls)
            .await
            .map(|n| n.to_string())
            .map_err(|_| StatusCode::INTERNAL_SERVER_ERROR)
    }

    #[resilient(
        breaker = "review10-b",
        deadline_ms = 5000,
        classify = resilient::http::classify_retrying_500
    )]
    async fn a_calls_b(client: &reqwest::Client, b: SocketAddr) -> Result<String, Error> {
        let r = client.post(format!("http://{b}/b")).send_checked().await?;
        Ok(r.text().await?)
    }

    fn registry_for_b() -> Registry {
        Registry::builder()
            .breaker(
                "review10-b",
                BreakerConfig::default()
                    .sliding_window(SlidingWindow::CountBased { size: 4 })
                    .minimum_number_of_calls(4)
                    .wait_duration_in_open_state(Duration::from_secs(60)),
            )
            .build()
            .unwrap()
    }

    async fn breaker_after_failures(b: SocketAddr) -> (BState, Vec<String>) {
        let registry = registry_for_b();
        let client = reqwest::Client::new();
        let mut seen = Vec::new();
        registry
            .scope(async {
                for _ in 0..8 {
                    let e = a_calls_b(&client, b).await.unwrap_err();
                    seen.push(format!(
                        "{:?} dnr={} class={:?} refusal={:?}",
                        e.status(),
                        e.is_do_not_retry(),
                        resilient::http::classify_retrying_500(&e),
                        e.refusal().map(|r| r.kind()),
                    ));
                }
            })
            .await;
        (registry.breaker("review10-b").unwrap().state(), seen)
    }

    /// B's database is down; B retries it 4 times and answers 500, which
    /// `ResilienceLayer` marks `Do-Not-Retry` (B gave up). A opted in to
    /// retrying B's 500s (`classify_retrying_500`: for A, B's 500 means "B
    /// failing"), and the README says "a 5xx so marked still counts as a
    /// failure for a breaker: the service behind it gave up on its own
    /// dependency". `StatusPolicy::classify` now turns every marked 500 into
    /// `Permanent`: A's breaker on B stays closed however long B cannot serve.
    #[tokio::test]
    async fn a_retry_500_callers_breaker_opens_on_a_service_that_gave_up() {
        let db_calls = Arc::new(AtomicU32::new(0));
        let b = serve(
            Router::new()
                .route("/b", post(b_with_db))
                .with_state(db_calls.clone())
                .layer(ResilienceLayer::new()),
        )
        .await;
        let (state, seen) = breaker_after_failures(b).await;
        assert_eq!(
            state,
            BState::Open,
            "B failed every request after {} database attempts, answered: {seen:?}",
            db_calls.load(Ordering::SeqCst)
        );
    }

    /// The same with B built only from the library's parts: B calls C, a
    /// service crash-looping with 500s, with `classify_retrying_500` (B knows
    /// C's 500s pass), retries, and returns the error; `to_response` answers
    /// 500 + Do-Not-Retry (by the default policy, not the function's), which
    /// A, also retrying 500s, takes for its own bad request.
    #[resilient(
        retries = 3,
        base_ms = 1,
        cap_ms = 2,
        idempotent,
        classify = resilient::http::classify_retrying_500
    )]
    async fn b_calls_c(client: &reqwest::Client, c: SocketAddr) -> Result<String, Error> {
        let r = client.post(format!("http://{c}/c")).send_checked().await?;
        Ok(r.text().await?)
    }

    #[derive(Clone)]
    struct BState2 {
        client: reqwest::Client,
        c: SocketAddr,
    }

    async fn b_via_c(State(s): State<BState2>) -> Result<String, Error> {
        b_calls_c(&s.client, s.c).await
    }

    async fn c_crashing(State(calls): State<Arc<AtomicU32>>) -> StatusCode {
        calls.fetch_add(1, Ordering::SeqCst);
        StatusCode::INTERNAL_SERVER_ERROR
    }

    #[tokio::test]
    async fn a_retry_500_callers_breaker_opens_when_bs_dependency_keeps_failing() {
        let c_calls = Arc::new(AtomicU32::new(0));
        let c = serve(
            Router::new()
                .route("/c", post(c_crashing))
                .with_state(c_calls.clone()),
        )
        .await;
        let b = serve(
            Router::new()
                .route("/b", post(b_via_c))
                .with_state(BState2 {
                    client: reqwest::Client::new(),
                    c,
                })
                .layer(ResilienceLayer::new()),
        )
        .await;
        let (state, seen) = breaker_after_failures(b).await;
        assert_eq!(
            state,
            BState::Open,
            "B failed every request after {} attempts at C, answered: {seen:?}",
            c_calls.load(Ordering::SeqCst)
        );
    }

    // ---------------------------------------------------------------------------
    // 1b. The same when another call in the handler did the work: B charges the
    //     provider (success), then its ledger refuses with a plain 503.

    #[resilient(deadline_ms = 5000)]
    pub(super) async fn charge_once(
        client: &reqwest::Client,
        p: SocketAddr,
    ) -> Result<String, Error> {
        let r = client.post(format!("http://{p}/ok")).send_checked().await?;
        Ok(r.text().await?)
    }

    #[resilient(deadline_ms = 5000)]
    async fn record_in_ledger(client: &reqwest::Client, p: SocketAddr) -> Result<String, Error> {
        let r = client
            .post(format!("http://{p}/ledger"))
            .send_checked()
            .await?;
        Ok(r.text().await?)
    }

    pub(super) async fn provider_ok(State(p): State<Arc<Provider>>) -> &'static str {
        p.charges.fetch_add(1, Ordering::SeqCst);
        "charged"
    }

    async fn ledger_down() -> StatusCode {
        StatusCode::SERVICE_UNAVAILABLE
    }

    async fn pay_then_record(State(s): State<PayState>) -> Result<String, Error> {
        let receipt = charge_once(&s.client, s.p).await?;
        record_in_ledger(&s.client, s.p).await?;
        Ok(receipt)
    }

    #[tokio::test]
    async fn a_charge_made_before_another_dependency_refused_is_not_reported_as_not_done() {
        let provider_state = Arc::new(Provider::default());
        let p = serve(
            Router::new()
                .route("/ok", post(provider_ok))
                .route("/ledger", post(ledger_down))
                .with_state(provider_state.clone()),
        )
        .await;
        let b = start_b(Router::new().route("/pay", post(pay_then_record)), p).await;
        check_report(b, &provider_state).await;
    }

    // ---------------------------------------------------------------------------
    // 1c. The store forgets a request that did act: B records the order in its
    //     own database (no annotated call), then its inventory service refuses
    //     with a plain 503; `?` answers 503 "not processed", which the
    //     IdempotencyLayer forgets, and the client's retry with the same key
    //     records the order a second time.

    #[derive(Clone)]
    struct OrderState {
        client: reqwest::Client,
        inventory: SocketAddr,
        orders: Arc<AtomicU32>,
    }

    #[resilient(deadline_ms = 5000)]
    async fn reserve_stock(client: &reqwest::Client, inv: SocketAddr) -> Result<String, Error> {
        let r = client
            .post(format!("http://{inv}/reserve"))
            .send_checked()
            .await?;
        Ok(r.text().await?)
    }

    async fn inventory(State(up): State<Arc<std::sync::atomic::AtomicBool>>) -> Response {
        if up.load(Ordering::SeqCst) {
            "reserved".into_response()
        } else {
            StatusCode::SERVICE_UNAVAILABLE.into_response()
        }
    }

    async fn place_order(State(s): State<OrderState>) -> Result<String, Error> {
        // The service's own write (its database, not a dependency call).
        let n = s.orders.fetch_add(1, Ordering::SeqCst) + 1;
        reserve_stock(&s.client, s.inventory).await?;
        Ok(format!("order {n}"))
    }

    #[tokio::test]
    async fn an_order_recorded_before_a_dependency_refused_is_recorded_once_under_one_key() {
        let up = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let inv = serve(
            Router::new()
                .route("/reserve", post(inventory))
                .with_state(up.clone()),
        )
        .await;
        let orders = Arc::new(AtomicU32::new(0));
        let b = serve(
            Router::new()
                .route("/orders", post(place_order))
                .with_state(OrderState {
                    client: reqwest::Client::new(),
                    inventory: inv,
                    orders: orders.clone(),
                })
                .layer(IdempotencyLayer::new())
                .layer(ResilienceLayer::new()),
        )
        .await;
        let client = reqwest::Client::new();
        let send = || {
            client
                .post(format!("http://{b}/orders"))
                .header("idempotency-key", "order-42")
                .send()
        };
        let first = send().await.unwrap().status();
        up.store(true, Ordering::SeqCst);
        let second = send().await.unwrap();
        let second_status = second.status();
        let body = second.text().await.unwrap();
        assert_eq!(
            orders.load(Ordering::SeqCst),
            1,
            "one key, one order: first answer {first}, the retry with the same key got \
             {second_status} {body}"
        );
    }
}

/// A failed request acted on in part, and a dependency that refuses this
/// service itself (review 11): the answer's status comes from the last
/// failure only, so `May-Have-Taken-Effect` says what the handler's calls
/// did, and a 401 or 403 is this service failing (502), not the caller's
/// request (424). Each test's comment says the failure it guards against.
mod effect {
    use super::*;
    use axum::routing::post;
    use resilient::{BreakerConfig, Classification, Registry, SlidingWindow};
    use std::sync::atomic::AtomicBool;

    // The provider stub, service B's state and handler, and the client, as
    // `answers` has them.
    use super::answers::{
        PayState as St, Provider, charge_once, check_report, pay, provider_ok, start_b,
    };

    // ---------------------------------------------------------------------------
    // 1. The 424 (new in c62fe4b) after B's call did act.

    /// First request: charges, then answers too late for B's timeout.
    /// Later ones (the same idempotency key, in flight or done): 409 Conflict,
    /// as Stripe answers a key whose first request is still being processed.
    async fn slow_then_conflict(State(p): State<Arc<Provider>>) -> Response {
        if p.requests.fetch_add(1, Ordering::SeqCst) == 0 {
            p.charges.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(1500)).await;
            return "charged".into_response();
        }
        StatusCode::CONFLICT.into_response()
    }

    /// B's first attempt timed out after the provider charged; B's retry got
    /// 409 (the provider's "this key is in progress"). B answers 424, a 4xx,
    /// and the client's report says no attempt may have taken effect.
    #[tokio::test]
    async fn a_424_after_a_timed_out_attempt_says_it_may_have_charged() {
        let provider = Arc::new(Provider::default());
        let p = serve(
            Router::new()
                .route("/charge", post(slow_then_conflict))
                .with_state(provider.clone()),
        )
        .await;
        let b = start_b(Router::new().route("/pay", post(pay)), p).await;
        check_report(b, &provider).await;
    }

    #[resilient(deadline_ms = 5000)]
    async fn send_receipt(client: &reqwest::Client, p: SocketAddr) -> Result<String, Error> {
        let r = client
            .post(format!("http://{p}/receipt"))
            .send_checked()
            .await?;
        Ok(r.text().await?)
    }

    async fn receipt_unprocessable() -> StatusCode {
        StatusCode::UNPROCESSABLE_ENTITY
    }

    async fn pay_then_receipt(State(s): State<St>) -> Result<String, Error> {
        let charged = charge_once(&s.client, s.p).await?;
        send_receipt(&s.client, s.p).await?;
        Ok(charged)
    }

    /// B charged (success), then its mailer refused the receipt (422). B answers
    /// 424, and the client's report says "certainly not charged".
    #[tokio::test]
    async fn a_424_after_another_call_charged_says_it_may_have_charged() {
        let provider = Arc::new(Provider::default());
        let p = serve(
            Router::new()
                .route("/ok", post(provider_ok))
                .route("/receipt", post(receipt_unprocessable))
                .with_state(provider.clone()),
        )
        .await;
        let b = start_b(Router::new().route("/pay", post(pay_then_receipt)), p).await;
        check_report(b, &provider).await;
    }

    // ---------------------------------------------------------------------------
    // 2. The 503 + Retry-After after B's call did act.

    /// First request: charges, answers too late. Then 503 + Retry-After: 1
    /// while `down`, "charged" after.
    #[derive(Default)]
    struct Throttling {
        p: Provider,
        recovered: AtomicBool,
    }

    async fn slow_then_throttled(State(t): State<Arc<Throttling>>) -> Response {
        if t.p.requests.fetch_add(1, Ordering::SeqCst) == 0 {
            t.p.charges.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(1500)).await;
            return "charged".into_response();
        }
        if t.recovered.load(Ordering::SeqCst) {
            return "charged".into_response();
        }
        (StatusCode::SERVICE_UNAVAILABLE, [("retry-after", "1")]).into_response()
    }

    #[tokio::test]
    async fn a_503_retry_after_after_a_timed_out_attempt_says_it_may_have_charged() {
        let t = Arc::new(Throttling::default());
        let p = serve(
            Router::new()
                .route("/charge", post(slow_then_throttled))
                .with_state(t.clone()),
        )
        .await;
        let b = start_b(Router::new().route("/pay", post(pay)), p).await;
        check_report(b, &t.p).await;
    }

    async fn receipt_throttled() -> Response {
        (StatusCode::SERVICE_UNAVAILABLE, [("retry-after", "1")]).into_response()
    }

    /// B charged (success), then its mailer answered 503 + Retry-After: 1.
    #[tokio::test]
    async fn a_503_retry_after_after_another_call_charged_says_it_may_have_charged() {
        let provider = Arc::new(Provider::default());
        let p = serve(
            Router::new()
                .route("/ok", post(provider_ok))
                .route("/receipt", post(receipt_throttled))
                .with_state(provider.clone()),
        )
        .await;
        let b = start_b(Router::new().route("/pay", post(pay_then_receipt)), p).await;
        check_report(b, &provider).await;
    }

    // ---------------------------------------------------------------------------
    // 3. B's own refusal (breaker open on a second dependency) after a charge.

    #[resilient(breaker = "review11-mailer", deadline_ms = 5000)]
    async fn send_receipt_guarded(
        client: &reqwest::Client,
        p: SocketAddr,
    ) -> Result<String, Error> {
        let r = client
            .post(format!("http://{p}/receipt"))
            .send_checked()
            .await?;
        Ok(r.text().await?)
    }

    #[tokio::test]
    async fn a_refusal_after_another_call_charged_says_it_may_have_charged() {
        let provider = Arc::new(Provider::default());
        let p = serve(
            Router::new()
                .route("/ok", post(provider_ok))
                .route("/receipt", post(|| async { "sent" }))
                .with_state(provider.clone()),
        )
        .await;
        let registry = Registry::builder()
            .breaker("review11-mailer", BreakerConfig::default())
            .build()
            .unwrap();
        registry
            .breaker("review11-mailer")
            .unwrap()
            .transition_to(resilient::State::Open);
        let registry = Arc::new(registry);
        let handler = move |State(s): State<St>| {
            let registry = registry.clone();
            async move {
                registry
                    .scope(async {
                        let charged = charge_once(&s.client, s.p).await?;
                        send_receipt_guarded(&s.client, s.p).await?;
                        Ok::<_, Error>(charged)
                    })
                    .await
            }
        };
        let b = start_b(Router::new().route("/pay", post(handler)), p).await;
        check_report(b, &provider).await;
    }

    // ---------------------------------------------------------------------------
    // 5. B cannot serve anyone, and answers 424: A's breaker never opens.

    async fn unauthorized(State(p): State<Arc<Provider>>) -> StatusCode {
        p.requests.fetch_add(1, Ordering::SeqCst);
        // B's credentials were revoked: every request B makes is refused.
        StatusCode::UNAUTHORIZED
    }

    #[resilient(deadline_ms = 5000)]
    async fn b_calls_c(client: &reqwest::Client, p: SocketAddr) -> Result<String, Error> {
        let r = client.post(format!("http://{p}/c")).send_checked().await?;
        Ok(r.text().await?)
    }

    async fn b_handler(State(s): State<St>) -> Result<String, Error> {
        b_calls_c(&s.client, s.p).await
    }

    #[resilient(breaker = "review11-b", deadline_ms = 5000)]
    async fn a_calls_b(client: &reqwest::Client, b: SocketAddr) -> Result<String, Error> {
        let r = client
            .post(format!("http://{b}/pay"))
            .send_checked()
            .await?;
        Ok(r.text().await?)
    }

    #[tokio::test]
    async fn a_service_whose_credentials_were_revoked_opens_its_callers_breaker() {
        let provider = Arc::new(Provider::default());
        let p = serve(
            Router::new()
                .route("/c", post(unauthorized))
                .with_state(provider.clone()),
        )
        .await;
        let b = start_b(Router::new().route("/pay", post(b_handler)), p).await;
        let registry = Registry::builder()
            .breaker(
                "review11-b",
                BreakerConfig::default()
                    .sliding_window(SlidingWindow::CountBased { size: 4 })
                    .minimum_number_of_calls(4)
                    .wait_duration_in_open_state(Duration::from_secs(60)),
            )
            .build()
            .unwrap();
        let client = reqwest::Client::new();
        let mut seen = Vec::new();
        registry
            .scope(async {
                for _ in 0..8 {
                    let e = a_calls_b(&client, b).await.unwrap_err();
                    seen.push((e.status(), e.classify()));
                }
            })
            .await;
        let state = registry.breaker("review11-b").unwrap().state();
        assert_eq!(
            state,
            resilient::State::Open,
            "B failed all 8 requests (every one refused 401 by C): {seen:?}"
        );
        let _ = Classification::Permanent;
    }

    // ---------------------------------------------------------------------------
    // 6. Point 2: client → A → B → DB, retries = 3 at every hop; DB attempts per
    //    user request, in outage shapes three_services.rs does not cover.

    mod chain {
        use super::*;
        use axum::routing::get;

        #[derive(Clone, Copy)]
        enum Db {
            /// 429 + Retry-After: 0.
            Throttled,
            /// 500 (B retries 500s).
            Crashing,
            /// 503 + Retry-After: 0 + Do-Not-Retry (its own breaker open).
            OwnBreakerOpen,
        }

        async fn db(State((n, mode)): State<(Arc<AtomicU32>, Db)>) -> Response {
            n.fetch_add(1, Ordering::SeqCst);
            match mode {
                Db::Throttled => {
                    (StatusCode::TOO_MANY_REQUESTS, [("retry-after", "0")]).into_response()
                }
                Db::Crashing => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
                Db::OwnBreakerOpen => (
                    StatusCode::SERVICE_UNAVAILABLE,
                    [("retry-after", "0"), ("do-not-retry", "?1")],
                )
                    .into_response(),
            }
        }

        #[resilient(
            retries = 3,
            base_ms = 1,
            cap_ms = 5,
            timeout_ms = 200,
            idempotent,
            classify = resilient::http::classify_retrying_500
        )]
        async fn b_queries(client: &reqwest::Client, db: SocketAddr) -> Result<String, Error> {
            let r = client.get(format!("http://{db}/q")).send_checked().await?;
            Ok(r.text().await?)
        }

        #[resilient(retries = 3, base_ms = 1, cap_ms = 5, deadline_ms = 8000, idempotent,
            classify = resilient::http::classify_retrying_500)]
        async fn a_calls(client: &reqwest::Client, b: SocketAddr) -> Result<String, Error> {
            let r = client.get(format!("http://{b}/b")).send_checked().await?;
            Ok(r.text().await?)
        }

        #[resilient(retries = 3, base_ms = 1, cap_ms = 5, deadline_ms = 9000, idempotent,
            classify = resilient::http::classify_retrying_500)]
        async fn user_calls(client: &reqwest::Client, a: SocketAddr) -> Result<String, Error> {
            let r = client.get(format!("http://{a}/a")).send_checked().await?;
            Ok(r.text().await?)
        }

        async fn run(mode: Db) -> Vec<(u32, Option<StatusCode>, Classification)> {
            let n = Arc::new(AtomicU32::new(0));
            let dbaddr = serve(
                Router::new()
                    .route("/q", get(db))
                    .with_state((n.clone(), mode)),
            )
            .await;
            let client = reqwest::Client::new();
            let c2 = client.clone();
            let b = serve(
                Router::new()
                    .route(
                        "/b",
                        get(move || {
                            let c = c2.clone();
                            async move { b_queries(&c, dbaddr).await }
                        }),
                    )
                    .layer(ResilienceLayer::new()),
            )
            .await;
            let c3 = client.clone();
            let a = serve(
                Router::new()
                    .route(
                        "/a",
                        get(move || {
                            let c = c3.clone();
                            async move { a_calls(&c, b).await }
                        }),
                    )
                    .layer(ResilienceLayer::new()),
            )
            .await;
            let mut out = Vec::new();
            for _ in 0..2 {
                let before = n.load(Ordering::SeqCst);
                let e = user_calls(&client, a).await.unwrap_err();
                out.push((n.load(Ordering::SeqCst) - before, e.status(), e.classify()));
            }
            out
        }

        #[tokio::test]
        async fn throttled_db() {
            let seen = run(Db::Throttled).await;
            eprintln!("{seen:?}");
            assert!(seen.iter().all(|s| s.0 <= 4 && s.0 > 0), "{seen:?}");
        }

        #[tokio::test]
        async fn crashing_db_with_500_retrying_classifiers() {
            let seen = run(Db::Crashing).await;
            eprintln!("{seen:?}");
            assert!(seen.iter().all(|s| s.0 <= 4 && s.0 > 0), "{seen:?}");
        }

        #[tokio::test]
        async fn db_with_own_breaker_open() {
            let seen = run(Db::OwnBreakerOpen).await;
            eprintln!("{seen:?}");
            assert!(seen.iter().all(|s| s.0 <= 4 && s.0 > 0), "{seen:?}");
        }
    }
}
