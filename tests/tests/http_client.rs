//! The reqwest client side against real servers on 127.0.0.1: statuses,
//! transport failures before and after sending, the headers sent, and an
//! annotated function returning `resilient::http::Error` with no glue.

#[path = "support/http_date.rs"]
mod http_date;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use resilient::http::Error;
use resilient::reqwest::RequestBuilderExt;
use resilient::{Classification, Classify, IdempotencyKey, resilient};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A registry whose breaker `name` judges its last `calls` calls, once it
/// has that many.
fn breaker_judging(name: &str, calls: u32) -> resilient::Registry {
    resilient::Registry::builder()
        .breaker(
            name,
            resilient::BreakerConfig::default()
                .sliding_window(resilient::SlidingWindow::CountBased { size: calls })
                .minimum_number_of_calls(calls),
        )
        .build()
        .unwrap()
}

async fn serve(router: Router) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    addr
}

/// Reads a request's head from `socket`: `false` if it closed first.
async fn read_head(socket: &mut tokio::net::TcpStream) -> bool {
    let mut buf = vec![0u8; 4096];
    let mut seen = Vec::new();
    while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = socket.read(&mut buf).await.unwrap_or(0);
        if n == 0 {
            return false;
        }
        seen.extend_from_slice(&buf[..n]);
    }
    true
}

/// A raw TCP server that reads one request head, then does `then`.
async fn raw_server(hang: bool) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut socket, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                if !read_head(&mut socket).await {
                    return;
                }
                if hang {
                    tokio::time::sleep(Duration::from_secs(30)).await;
                } else {
                    // Half an answer, then the connection goes away: the
                    // request arrived, the response is lost.
                    let _ = socket
                        .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\npartial")
                        .await;
                    drop(socket);
                }
            });
        }
    });
    addr
}

fn status_router() -> Router {
    async fn status(Path(code): Path<u16>, headers: HeaderMap) -> impl IntoResponse {
        let mut out = HeaderMap::new();
        if let Some(v) = headers.get("x-send-retry-after") {
            out.insert(axum::http::header::RETRY_AFTER, v.clone());
        }
        (
            StatusCode::from_u16(code).unwrap(),
            out,
            format!("body of {code}"),
        )
    }
    Router::new().route("/status/{code}", get(status))
}

#[tokio::test]
async fn responses_classify_by_status_and_read_the_body_only_when_permanent() {
    let addr = serve(status_router()).await;
    let client = reqwest::Client::new();
    let get = |code: u16, retry_after: Option<&'static str>| {
        let mut req = client.get(format!("http://{addr}/status/{code}"));
        if let Some(v) = retry_after {
            req = req.header("x-send-retry-after", v);
        }
        req.send_checked()
    };

    assert!(get(200, None).await.is_ok());

    let e = get(404, None).await.unwrap_err();
    assert_eq!(e.status(), Some(StatusCode::NOT_FOUND));
    assert_eq!(e.classify(), Classification::Permanent);
    assert_eq!(
        e.body(),
        Some("body of 404"),
        "a permanent failure's body says why"
    );
    assert!(!e.may_have_taken_effect());
    assert!(e.to_string().contains("404") && e.to_string().contains("body of 404"));

    let e = get(503, None).await.unwrap_err();
    assert_eq!(e.classify(), Classification::Transient);
    assert_eq!(e.body(), None, "a retryable failure's body is not read");

    let e = get(429, Some("2")).await.unwrap_err();
    assert_eq!(
        e.classify(),
        Classification::Throttled {
            retry_after: Some(Duration::from_secs(2))
        }
    );

    // An HTTP-date ten seconds ahead, in IMF-fixdate.
    let when = httpdate_in(Duration::from_secs(10));
    let e = get(503, Some(Box::leak(when.into_boxed_str())))
        .await
        .unwrap_err();
    match e.classify() {
        Classification::Throttled {
            retry_after: Some(d),
        } => assert!(
            d > Duration::from_secs(7) && d <= Duration::from_secs(10),
            "{d:?}"
        ),
        other => panic!("{other:?}"),
    }

    let e = get(500, None).await.unwrap_err();
    assert_eq!(
        e.classify(),
        Classification::DoNotRetry { retry_after: None }
    );
    assert_eq!(
        resilient::http::classify_retrying_500(&e),
        Classification::Transient
    );
    assert!(e.may_have_taken_effect(), "a 500 failed while processing");
}

/// IMF-fixdate for now + `ahead`.
fn httpdate_in(ahead: Duration) -> String {
    http_date::format(std::time::SystemTime::now() + ahead)
}

#[tokio::test]
async fn connection_refused_is_transient_and_certainly_not_done() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let err: Error = reqwest::Client::new()
        .get(format!("http://{addr}/"))
        .send()
        .await
        .unwrap_err()
        .into();
    assert_eq!(err.classify(), Classification::Transient);
    assert!(!err.may_have_taken_effect(), "{err:?}");
}

#[tokio::test]
async fn connection_lost_mid_response_is_transient_and_may_have_taken_effect() {
    let addr = raw_server(false).await;
    let result = async {
        let response = reqwest::Client::new()
            .post(format!("http://{addr}/charges"))
            .send_checked()
            .await?;
        Ok::<_, Error>(response.text().await?)
    }
    .await;
    let err = result.unwrap_err();
    assert_eq!(err.classify(), Classification::Transient, "{err:?}");
    assert!(err.may_have_taken_effect(), "{err:?}");
}

#[tokio::test]
async fn client_timeout_after_sending_may_have_taken_effect() {
    let addr = raw_server(true).await;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_millis(50))
        .build()
        .unwrap();
    let err: Error = client
        .post(format!("http://{addr}/charges"))
        .send()
        .await
        .unwrap_err()
        .into();
    assert!(err.is_timeout(), "{err:?}");
    assert_eq!(err.classify(), Classification::Transient);
    assert!(err.may_have_taken_effect());
}

/// A POST to `path` on `addr`, its body as text.
async fn post_text(
    client: &reqwest::Client,
    addr: SocketAddr,
    path: &str,
) -> Result<String, Error> {
    Ok(client
        .post(format!("http://{addr}{path}"))
        .send_checked()
        .await?
        .text()
        .await?)
}

#[resilient(timeout_ms = 100)]
async fn post_within_100ms(client: &reqwest::Client, addr: SocketAddr) -> Result<String, Error> {
    post_text(client, addr, "/charges").await
}

#[resilient(deadline_ms = 100)]
async fn post_by_deadline(client: &reqwest::Client, addr: SocketAddr) -> Result<String, Error> {
    post_text(client, addr, "/charges").await
}

/// The library's own timer cuts a request already sent (its attempt
/// timeout, its deadline): the error says it may have taken effect, as the
/// report does. Before, every refusal said "certainly not done", also a
/// cut of a running attempt (review 13). A deadline already passed when
/// the call begins still says nothing ran.
#[tokio::test]
async fn a_library_timeout_after_sending_may_have_taken_effect() {
    let addr = raw_server(true).await;
    let client = reqwest::Client::new();
    let (result, report) = resilient::observe(post_within_100ms(&client, addr)).await;
    let err = result.unwrap_err();
    assert!(err.is_timeout(), "{err:?}");
    assert!(err.may_have_taken_effect(), "{err:?}");
    assert!(report.may_have_taken_effect(), "{report:?}");
    let err = post_by_deadline(&client, addr).await.unwrap_err();
    assert!(err.is_timeout(), "{err:?}");
    assert!(err.may_have_taken_effect(), "{err:?}");

    let refused = resilient::with_deadline(Duration::from_millis(20), async {
        tokio::time::sleep(Duration::from_millis(50)).await;
    })
    .await
    .unwrap_err();
    assert!(refused.may_have_taken_effect(), "the sleep was cut");
    let refused = resilient::with_deadline(Duration::from_millis(20), async {
        std::thread::sleep(Duration::from_millis(30));
        post_within_100ms(&client, addr).await
    })
    .await
    .unwrap()
    .unwrap_err();
    // The deadline had passed when the call began: refused, nothing sent.
    assert!(refused.refusal().is_some(), "{refused:?}");
    assert!(!refused.may_have_taken_effect(), "{refused:?}");
}

/// A service that answers every POST to `/x` with 500, and how many it got.
async fn serve_crashing() -> (SocketAddr, Arc<AtomicU32>) {
    let hits = Arc::new(AtomicU32::new(0));
    let router = Router::new()
        .route(
            "/x",
            post(|State(hits): State<Arc<AtomicU32>>| async move {
                hits.fetch_add(1, Ordering::SeqCst);
                StatusCode::INTERNAL_SERVER_ERROR
            }),
        )
        .with_state(hits.clone());
    (serve(router).await, hits)
}

#[resilient(breaker = "crashing", retries = 3, idempotent, base_ms = 1)]
async fn call_crashing(client: &reqwest::Client, addr: SocketAddr) -> Result<String, Error> {
    post_text(client, addr, "/x").await
}

/// A dependency that answers 500 to every request is failing: each 500 is
/// not retried (it may be a bug that fails again, after half-done work),
/// but the caller's breaker counts it and opens. Before, a 500 was
/// permanent, which a breaker ignores: every call kept reaching the
/// crashing service (review 13).
#[tokio::test]
async fn a_breaker_opens_on_a_dependency_that_answers_500_to_everything() {
    let (addr, hits) = serve_crashing().await;
    let registry = breaker_judging("crashing", 4);
    let client = reqwest::Client::new();
    let mut errors = Vec::new();
    registry
        .scope(async {
            for _ in 0..10 {
                errors.push(call_crashing(&client, addr).await.unwrap_err());
            }
        })
        .await;
    assert_eq!(
        registry.breaker("crashing").unwrap().state(),
        resilient::State::Open
    );
    // Four calls of one attempt each, then refused without a request.
    assert_eq!(hits.load(Ordering::SeqCst), 4);
    for e in &errors[..4] {
        assert_eq!(e.status(), Some(StatusCode::INTERNAL_SERVER_ERROR));
        assert_eq!(
            e.classify(),
            Classification::DoNotRetry { retry_after: None }
        );
    }
    for e in &errors[4..] {
        assert!(e.refusal().is_some(), "{e:?}");
    }
}

#[resilient(
    retries = 2,
    idempotent,
    base_ms = 1,
    classify = resilient::http::classify_retrying_500
)]
async fn call_retrying_500(client: &reqwest::Client, addr: SocketAddr) -> Result<String, Error> {
    post_text(client, addr, "/x").await
}

/// A `classify = path` function decides retrying and counting only: what
/// the error's own `Classify` says besides (a 500 may have taken effect)
/// still reaches the report. Before, a named classifier made every attempt
/// "certainly not done" (review 15), and a server layer above forgot a
/// keyed request that had charged.
#[tokio::test]
async fn a_classify_function_keeps_what_the_error_says_of_its_effect() {
    let (addr, hits) = serve_crashing().await;
    let (result, report) =
        resilient::observe(call_retrying_500(&reqwest::Client::new(), addr)).await;
    let e = result.unwrap_err();
    assert_eq!(hits.load(Ordering::SeqCst), 3, "retried, as classified");
    assert!(e.may_have_taken_effect(), "{e:?}");
    assert_eq!(report.attempts().len(), 3, "{report:?}");
    assert!(
        report.attempts().iter().all(|a| a.may_have_taken_effect),
        "{report:?}"
    );
}

#[tokio::test]
async fn an_undecodable_success_is_permanent_and_took_effect() {
    let router = Router::new().route("/n", get(|| async { "not a number" }));
    let addr = serve(router).await;
    let err: Error = reqwest::Client::new()
        .get(format!("http://{addr}/n"))
        .send()
        .await
        .unwrap()
        .json::<u32>()
        .await
        .unwrap_err()
        .into();
    assert_eq!(err.classify(), Classification::Permanent);
    assert!(err.may_have_taken_effect());
}

#[tokio::test]
async fn a_refusal_converts_and_is_never_retried() {
    let refusal = resilient::with_deadline(Duration::ZERO, async {})
        .await
        .unwrap_err();
    let err = Error::from(refusal);
    assert_eq!(err.classify(), Classification::Permanent);
    assert!(err.is_timeout());
    assert!(err.refusal().is_some());
    let response = err.to_response();
    assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT);
    // Answered to this service's caller without "do not retry": the
    // caller knows whether it has time for another attempt.
    assert!(!resilient::http::is_do_not_retry(response.headers()));

    // Any other refusal is this service's decision: its caller must not
    // retry it.
    let breaker = resilient::Breaker::new(
        "payments",
        resilient::BreakerConfig::default().initial_state(resilient::State::ForcedOpen),
    )
    .unwrap();
    let open = Error::from(breaker.try_acquire().unwrap_err());
    assert_eq!(open.classify(), Classification::Permanent);
    let response = open.to_response();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(resilient::http::is_do_not_retry(response.headers()));
}

#[derive(Default)]
struct Seen {
    calls: AtomicU32,
    keys: Mutex<Vec<String>>,
    budgets: Mutex<Vec<(Option<String>, Option<String>)>>,
}

fn flaky_router(seen: Arc<Seen>, failures: u32, status: StatusCode) -> Router {
    async fn charge(
        State((seen, failures, status)): State<(Arc<Seen>, u32, StatusCode)>,
        headers: HeaderMap,
    ) -> impl IntoResponse {
        let n = seen.calls.fetch_add(1, Ordering::SeqCst);
        let text = |name: &str| headers.get(name).map(|v| v.to_str().unwrap().to_owned());
        seen.keys
            .lock()
            .unwrap()
            .push(text("idempotency-key").unwrap_or_default());
        seen.budgets
            .lock()
            .unwrap()
            .push((text("grpc-timeout"), text("request-budget-ms")));
        if n < failures {
            (status, [("retry-after", "0")], "try later").into_response()
        } else {
            (StatusCode::OK, "receipt-1").into_response()
        }
    }
    Router::new()
        .route("/charges", post(charge))
        .with_state((seen, failures, status))
}

#[resilient(
    retries = 3,
    base_ms = 1,
    cap_ms = 5,
    deadline_ms = 2000,
    timeout_ms = 500
)]
async fn charge(
    client: &reqwest::Client,
    addr: SocketAddr,
    key: &IdempotencyKey,
) -> Result<String, resilient::http::Error> {
    let response = client
        .post(format!("http://{addr}/charges"))
        .idempotency_key(key)
        .send_checked()
        .await?;
    Ok(response.text().await?)
}

#[tokio::test]
async fn annotated_client_retries_throttled_answers_with_one_key_and_the_deadline() {
    let seen = Arc::new(Seen::default());
    let addr = serve(flaky_router(
        seen.clone(),
        2,
        StatusCode::SERVICE_UNAVAILABLE,
    ))
    .await;
    let client = reqwest::Client::new();
    let key = IdempotencyKey::random();

    assert_eq!(charge(&client, addr, &key).await.unwrap(), "receipt-1");
    assert_eq!(seen.calls.load(Ordering::SeqCst), 3);
    let keys = seen.keys.lock().unwrap();
    assert!(keys.iter().all(|k| k == key.as_str()), "{keys:?}");

    // Each attempt sent its own remaining time: at most the 500 ms attempt
    // timeout, in both headers.
    for (grpc, ms) in seen.budgets.lock().unwrap().iter() {
        let grpc: resilient::GrpcTimeout = grpc.as_deref().unwrap().parse().unwrap();
        let ms: u64 = ms.as_deref().unwrap().parse().unwrap();
        assert!(grpc.duration() <= Duration::from_millis(500), "{grpc}");
        assert!(grpc.duration() > Duration::from_millis(100), "{grpc}");
        assert!((101..=500).contains(&ms), "{ms}");
    }
}

#[tokio::test]
async fn annotated_client_does_not_retry_a_permanent_answer() {
    let seen = Arc::new(Seen::default());
    let addr = serve(flaky_router(
        seen.clone(),
        10,
        StatusCode::UNPROCESSABLE_ENTITY,
    ))
    .await;
    let err = charge(&reqwest::Client::new(), addr, &IdempotencyKey::random())
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(StatusCode::UNPROCESSABLE_ENTITY));
    assert_eq!(err.body(), Some("try later"));
    assert_eq!(seen.calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn annotated_client_stops_at_do_not_retry() {
    async fn overloaded() -> impl IntoResponse {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            [("do-not-retry", "?1"), ("retry-after", "0")],
            "",
        )
    }
    static CALLS: AtomicU32 = AtomicU32::new(0);
    let router = Router::new().route(
        "/charges",
        post(|| async {
            CALLS.fetch_add(1, Ordering::SeqCst);
            overloaded().await
        }),
    );
    let addr = serve(router).await;
    let err = charge(&reqwest::Client::new(), addr, &IdempotencyKey::random())
        .await
        .unwrap_err();
    assert!(err.is_do_not_retry());
    // Not retried, but a failure for a breaker, with the wait it asked for.
    assert_eq!(
        err.classify(),
        Classification::DoNotRetry {
            retry_after: Some(Duration::ZERO)
        }
    );
    assert_eq!(CALLS.load(Ordering::SeqCst), 1);
}

/// A raw server that answers 404 with a body it never finishes.
async fn stalling_not_found() -> (SocketAddr, Arc<AtomicU32>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let requests = Arc::new(AtomicU32::new(0));
    let counted = requests.clone();
    tokio::spawn(async move {
        loop {
            let (mut socket, _) = listener.accept().await.unwrap();
            let counted = counted.clone();
            tokio::spawn(async move {
                if !read_head(&mut socket).await {
                    return;
                }
                counted.fetch_add(1, Ordering::SeqCst);
                let _ = socket
                    .write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 100\r\n\r\nno such")
                    .await;
                tokio::time::sleep(Duration::from_secs(30)).await;
            });
        }
    });
    (addr, requests)
}

#[resilient(retries = 2, timeout_ms = 400, deadline_ms = 5000, idempotent)]
async fn look_up(client: &reqwest::Client, url: &str) -> Result<String, Error> {
    Ok(client.get(url).send_checked().await?.text().await?)
}

/// Regression (found from outside): a permanent failure whose body never
/// ended was read until the attempt's timer cut it, so a 404 became a
/// timeout: retried, its status lost, reported as possibly done.
#[tokio::test]
async fn a_permanent_failure_with_a_stalled_body_stays_that_failure() {
    let (addr, requests) = stalling_not_found().await;
    let client = reqwest::Client::new();
    let (result, report) =
        resilient::observe(look_up(&client, &format!("http://{addr}/missing"))).await;
    let error = result.unwrap_err();
    assert_eq!(error.status(), Some(StatusCode::NOT_FOUND), "{error}");
    assert_eq!(error.classify(), Classification::Permanent);
    assert_eq!(error.body(), Some("no such"));
    assert_eq!(requests.load(Ordering::SeqCst), 1, "not retried");
    assert!(!report.may_have_taken_effect());
}

static UPSTREAM: std::sync::OnceLock<SocketAddr> = std::sync::OnceLock::new();

#[resilient(timeout_ms = 800)]
async fn rate_limited_dependency(client: &reqwest::Client) -> Result<String, Error> {
    let url = format!("http://{}/quota", UPSTREAM.get().unwrap());
    Ok(client.get(url).send_checked().await?.text().await?)
}

async fn front(State(client): State<reqwest::Client>) -> Result<String, Error> {
    rate_limited_dependency(&client).await
}

/// Regression (found from outside): a service whose dependency answered
/// 429 with `Retry-After: 5` answered its own caller 502 without it, so the
/// caller retried at once, into the throttled dependency.
#[tokio::test]
async fn a_dependencys_retry_after_reaches_the_caller() {
    async fn quota() -> impl IntoResponse {
        (
            StatusCode::TOO_MANY_REQUESTS,
            [("retry-after", "5")],
            "slow down",
        )
    }
    let upstream = serve(Router::new().route("/quota", get(quota))).await;
    UPSTREAM.set(upstream).unwrap();
    let front = serve(
        Router::new()
            .route("/front", get(front))
            .with_state(reqwest::Client::new()),
    )
    .await;
    let response = reqwest::get(format!("http://{front}/front")).await.unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(response.headers()["retry-after"], "5");
    let error = Error::from_status(response.status(), response.headers().clone());
    assert_eq!(
        error.classify(),
        Classification::Throttled {
            retry_after: Some(Duration::from_secs(5))
        }
    );
}

#[resilient(retries = 2, idempotent, base_ms = 1)]
async fn fetch_secure(client: &reqwest::Client, url: &str) -> Result<String, Error> {
    Ok(client.get(url).send_checked().await?.text().await?)
}

/// Regression (found from outside): an `https` URL on a client built
/// without TLS (as this one is) was a transient connect failure, retried,
/// and counted against a breaker; no attempt can succeed. A real connection
/// failure stays transient (`connection_refused_is_transient_and_certainly_not_done`).
#[tokio::test]
async fn an_https_url_on_a_client_without_tls_is_permanent() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (result, report) = resilient::observe(fetch_secure(
        &reqwest::Client::new(),
        &format!("https://{addr}/"),
    ))
    .await;
    let error = result.unwrap_err();
    assert_eq!(error.classify(), Classification::Permanent, "{error:?}");
    assert!(!error.may_have_taken_effect());
    assert_eq!(report.attempts().len(), 1, "not retried");
}

/// A 200 whose 100-byte body trickles in a byte every `every`, counting
/// the requests it got.
async fn trickling_body(every: Duration) -> (SocketAddr, Arc<AtomicU32>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let hits = Arc::new(AtomicU32::new(0));
    let counted = hits.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let hits = counted.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf).await {
                        Ok(n) if n > 0 => head.extend_from_slice(&buf[..n]),
                        _ => return,
                    }
                }
                hits.fetch_add(1, Ordering::SeqCst);
                let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n";
                if socket.write_all(answer).await.is_err() {
                    return;
                }
                for _ in 0..100 {
                    tokio::time::sleep(every).await;
                    if socket.write_all(b"x").await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, hits)
}

#[resilient(retries = 2, idempotent, base_ms = 1, cap_ms = 2)]
async fn fetch_text(client: &reqwest::Client, url: &str) -> Result<String, Error> {
    Ok(client.get(url).send_checked().await?.text().await?)
}

/// The client's own timeout while the body is read is a timeout: retried,
/// and may have taken effect (review 31: reqwest reports it as a decode
/// error, which was taken for a body that arrived whole: permanent, so
/// never retried nor counted).
#[tokio::test]
async fn the_clients_own_timeout_while_reading_the_body_is_retried() {
    let (addr, hits) = trickling_body(Duration::from_millis(50)).await;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let url = format!("http://{addr}/");
    let raw = client
        .get(&url)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap_err();
    assert!(raw.is_timeout() && raw.is_decode(), "{raw:?}");
    assert_eq!(raw.classify(), Classification::Transient);
    assert!(raw.may_have_taken_effect());
    let error = fetch_text(&client, &url).await.unwrap_err();
    assert_eq!(error.classify(), Classification::Transient, "{error}");
    assert_eq!(
        hits.load(Ordering::SeqCst),
        4,
        "one request, then three attempts"
    );
}

/// A request body of the caller's own that fails while it is sent.
struct FailingBody(bool);

impl http_body::Body for FailingBody {
    type Data = axum::body::Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let first = !std::mem::replace(&mut self.0, true);
        std::task::Poll::Ready(Some(if first {
            Ok(http_body::Frame::data(axum::body::Bytes::from_static(
                b"part",
            )))
        } else {
            Err(std::io::Error::other("the caller's own source failed"))
        }))
    }
}

#[resilient(breaker = "uploads", retries = 2, idempotent, base_ms = 1, cap_ms = 2)]
async fn upload(client: &reqwest::Client, addr: SocketAddr) -> Result<String, Error> {
    Ok(client
        .post(format!("http://{addr}/upload"))
        .body(reqwest::Body::wrap(FailingBody(false)))
        .send_checked()
        .await?
        .text()
        .await?)
}

/// The caller's own failing body is the caller's fault: permanent, not
/// retried, and no failure of the (healthy) server's (review 31: retried,
/// and the server's breaker opened on it).
#[tokio::test]
async fn a_request_body_of_the_callers_own_that_fails_is_not_the_servers_failure() {
    let router = Router::new().route(
        "/upload",
        post(|body: axum::body::Body| async move {
            let _ = axum::body::to_bytes(body, 1 << 20).await;
            "ok"
        }),
    );
    let addr = serve(router).await;
    let registry = breaker_judging("uploads", 2);
    let client = reqwest::Client::new();
    for _ in 0..4 {
        let (result, report) = registry
            .scope(resilient::observe(upload(&client, addr)))
            .await;
        let error = result.unwrap_err();
        assert_eq!(error.classify(), Classification::Permanent, "{error:?}");
        // Part of it went out (review 33: said not sent).
        assert!(error.may_have_taken_effect(), "{error:?}");
        assert_eq!(report.attempts().len(), 1, "{report:?}");
    }
    let breaker = registry.breaker("uploads").unwrap().snapshot();
    assert_eq!(breaker.state, resilient::State::Closed, "{breaker:?}");
    assert_eq!(breaker.failed_calls, 0, "{breaker:?}");
}

/// A request in flight on a pooled connection whose task dies with the
/// runtime that opened it: hyper reports a user error ("dispatch task is
/// gone"), but the request reached the server (review 32: taken for the
/// caller's failing body: permanent, not sent).
#[test]
fn a_request_whose_connection_task_died_may_have_taken_effect() {
    let server = tokio::runtime::Runtime::new().unwrap();
    let (addr, got, connections) = server.block_on(async {
        let got = Arc::new(AtomicU32::new(0));
        let connections = Arc::new(AtomicU32::new(0));
        let seen = got.clone();
        let accepted = connections.clone();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                accepted.fetch_add(1, Ordering::SeqCst);
                let seen = seen.clone();
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    loop {
                        let mut head = Vec::new();
                        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                            match socket.read(&mut buf).await {
                                Ok(n) if n > 0 => head.extend_from_slice(&buf[..n]),
                                _ => return,
                            }
                        }
                        seen.fetch_add(1, Ordering::SeqCst);
                        if head.starts_with(b"POST") {
                            tokio::time::sleep(Duration::from_secs(5)).await;
                        }
                        let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
                        let _ = socket.write_all(ok).await;
                    }
                });
            }
        });
        (addr, got, connections)
    });
    let client = reqwest::Client::new();
    // Runtime `a` opens the pooled connection: its task lives there.
    let a = tokio::runtime::Runtime::new().unwrap();
    // Read to its end and given a moment, so that the connection is back
    // in the pool, idle, when the POST is sent.
    a.block_on(async {
        let answer = client.get(format!("http://{addr}/")).send().await.unwrap();
        answer.bytes().await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    });
    let b = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // Runtime `a` stops once the POST has reached the server (not after a
    // fixed time, which a loaded machine could outlast: the POST then went
    // out on a new connection, of runtime `b`, and succeeded).
    let arrived = got.clone();
    let stop = std::thread::spawn(move || {
        while arrived.load(Ordering::SeqCst) < 2 {
            std::thread::sleep(Duration::from_millis(5));
        }
        a.shutdown_background();
    });
    let error = b.block_on(async {
        client
            .post(format!("http://{addr}/charges"))
            .body("once")
            .send()
            .await
            .unwrap_err()
    });
    stop.join().unwrap();
    assert_eq!(got.load(Ordering::SeqCst), 2, "the POST reached the server");
    assert_eq!(
        connections.load(Ordering::SeqCst),
        1,
        "the POST went out on the pooled connection"
    );
    assert!(error.may_have_taken_effect(), "{error:?}");
    assert_eq!(error.classify(), Classification::Transient, "{error:?}");
}

/// A POST to `addr` that fails: checks that it classifies as transient, and
/// as having taken effect or not (`took_effect`), through `send_checked`
/// and as a bare `reqwest::Error` (an error type of one's own that wraps
/// it delegates to `Classify for reqwest::Error`); `what` names the case.
async fn transient_failure(
    client: &reqwest::Client,
    addr: SocketAddr,
    took_effect: bool,
    what: &str,
) {
    let url = format!("http://{addr}/charges");
    let err = client.post(&url).send_checked().await.unwrap_err();
    assert_eq!(err.may_have_taken_effect(), took_effect, "{what}: {err:?}");
    assert_eq!(err.classify(), Classification::Transient, "{what}: {err:?}");
    let raw = client.post(&url).send().await.unwrap_err();
    assert_eq!(raw.may_have_taken_effect(), took_effect, "{what}: {raw:?}");
}

/// An HTTP/2 server (the `h2` crate, prior knowledge, on 127.0.0.1) that
/// answers every request by resetting its stream with `reason`, counting
/// the requests it saw.
async fn h2_resetting(reason: h2::Reason) -> (SocketAddr, Arc<AtomicU32>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let counted = Arc::clone(&counted);
            tokio::spawn(async move {
                let Ok(mut connection) = h2::server::handshake(socket).await else {
                    return;
                };
                while let Some(Ok((_request, mut respond))) = connection.accept().await {
                    counted.fetch_add(1, Ordering::SeqCst);
                    respond.send_reset(reason);
                }
            });
        }
    });
    (addr, seen)
}

/// RFC 9113 §8.7: a stream reset with `REFUSED_STREAM` was not processed,
/// so the request is as good as not sent (transient, and certainly not
/// done); a stream reset with any other reason, such as `CANCEL` from a
/// handler that failed, may come after the request was handled.
#[tokio::test]
async fn an_http2_stream_refused_unprocessed_is_not_sent_and_other_resets_may_have_taken_effect() {
    let client = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    // reqwest's default retry policy sends a refused request again by
    // itself, twice (`ClientBuilder::retry`): the requests one send makes.
    let mut per_send = 0;
    for (reason, took_effect) in [
        (h2::Reason::REFUSED_STREAM, false),
        (h2::Reason::CANCEL, true),
        (h2::Reason::INTERNAL_ERROR, true),
    ] {
        let (addr, seen) = h2_resetting(reason).await;
        transient_failure(&client, addr, took_effect, &format!("{reason:?}")).await;
        // Two sends: `send_checked`, and `send`.
        let requests = seen.load(Ordering::SeqCst);
        if reason == h2::Reason::REFUSED_STREAM {
            assert!(requests >= 2 && requests % 2 == 0, "{requests}");
            per_send = requests / 2;
        } else {
            // Reset after it may have been handled: never sent again.
            assert_eq!(requests, 2, "{reason:?}");
        }
    }

    // A keyed call is retried on refused streams, every attempt with the
    // same key, and reports nothing done.
    let (addr, seen) = h2_resetting(h2::Reason::REFUSED_STREAM).await;
    let key = IdempotencyKey::random();
    // `charge` (above): `retries = 3`, so four attempts.
    let err = charge(&client, addr, &key).await.unwrap_err();
    assert_eq!(seen.load(Ordering::SeqCst), 4 * per_send, "{err:?}");
    assert!(!err.may_have_taken_effect(), "{err:?}");
}

/// An HTTP/2 server written frame by frame (prior knowledge, on 127.0.0.1)
/// that answers each request's `HEADERS` with a graceful `GOAWAY`
/// (`NO_ERROR`) and no answer, counting the requests it saw. `taken`:
/// the `GOAWAY`'s last stream id is the request's own (the server took it,
/// and then closes the connection without answering), else 0 (it took
/// none: RFC 9113 §6.8, the request was not processed). Hand-written so
/// that the `GOAWAY` goes out only once the request has arrived, which
/// the `h2` crate's server cannot promise.
async fn h2_going_away(taken: bool) -> (SocketAddr, Arc<AtomicU32>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let counted = Arc::clone(&counted);
            tokio::spawn(async move {
                let mut preface = [0u8; 24];
                if socket.read_exact(&mut preface).await.is_err() {
                    return;
                }
                // SETTINGS, empty: the defaults.
                let _ = socket.write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0]).await;
                let mut head = [0u8; 9];
                while socket.read_exact(&mut head).await.is_ok() {
                    let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
                    let (kind, flags) = (head[3], head[4]);
                    let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]);
                    let mut payload = vec![0u8; len];
                    if socket.read_exact(&mut payload).await.is_err() {
                        return;
                    }
                    match kind {
                        // The client's SETTINGS: acknowledged.
                        4 if flags & 1 == 0 => {
                            let _ = socket.write_all(&[0, 0, 0, 4, 1, 0, 0, 0, 0]).await;
                        }
                        // A request's HEADERS.
                        1 => {
                            counted.fetch_add(1, Ordering::SeqCst);
                            let last = if taken { stream } else { 0 };
                            let mut goaway = vec![0, 0, 8, 7, 0, 0, 0, 0, 0];
                            goaway.extend_from_slice(&last.to_be_bytes());
                            goaway.extend_from_slice(&0u32.to_be_bytes()); // NO_ERROR
                            let _ = socket.write_all(&goaway).await;
                            if taken {
                                return; // closed, the taken request unanswered
                            }
                        }
                        _ => {}
                    }
                }
            });
        }
    });
    (addr, seen)
}

/// RFC 9113 §6.8: a request on a stream past a graceful `GOAWAY`'s last
/// stream id was not processed, so it is as good as not sent (transient,
/// certainly not done), and a keyed call retries it. A request the server
/// took (at or under the last stream id) and then left unanswered when it
/// closed the connection may have taken effect.
#[tokio::test]
async fn a_request_a_graceful_goaway_left_unprocessed_is_not_sent_and_one_it_took_may_have_taken_effect()
 {
    let client = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let mut per_send = 0;
    for taken in [false, true] {
        let (addr, seen) = h2_going_away(taken).await;
        transient_failure(&client, addr, taken, &format!("taken {taken}")).await;
        // Two sends: `send_checked`, and `send`.
        let requests = seen.load(Ordering::SeqCst);
        if taken {
            assert_eq!(requests, 2, "never sent again");
        } else {
            // reqwest's default retry policy sends an unprocessed request
            // again by itself (`ClientBuilder::retry`).
            assert!(requests >= 2 && requests % 2 == 0, "{requests}");
            per_send = requests / 2;
        }
    }

    let (addr, seen) = h2_going_away(false).await;
    let key = IdempotencyKey::random();
    // `charge` (above): `retries = 3`, so four attempts.
    let err = charge(&client, addr, &key).await.unwrap_err();
    assert_eq!(seen.load(Ordering::SeqCst), 4 * per_send, "{err:?}");
    assert!(!err.may_have_taken_effect(), "{err:?}");
}
