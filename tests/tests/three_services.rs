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
