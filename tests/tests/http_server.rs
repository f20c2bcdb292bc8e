//! The server side (tower layer in axum, `IntoResponse`) against real
//! clients on 127.0.0.1: the caller's deadline becomes the handler's, a
//! passed deadline is answered at once, refusals become 503/504 with
//! problem+json, and a handler that gave up says "do not retry".

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use resilient::tower::ResilienceLayer;
use resilient::{Breaker, BreakerConfig, Bulkhead, BulkheadConfig};
use tokio::net::TcpListener;

async fn serve(router: Router) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    addr
}

/// Answers the handler's remaining deadline, in whole milliseconds.
async fn remaining() -> String {
    match resilient::remaining() {
        Some(d) => d.as_millis().to_string(),
        None => "none".to_owned(),
    }
}

#[tokio::test]
async fn the_callers_deadline_becomes_the_handlers() {
    let addr = serve(
        Router::new()
            .route("/", get(remaining))
            .layer(ResilienceLayer::new()),
    )
    .await;
    let client = reqwest::Client::new();
    let ask = |headers: &[(&'static str, &'static str)]| {
        let mut req = client.get(format!("http://{addr}/"));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        async move { req.send().await.unwrap().text().await.unwrap() }
    };

    assert_eq!(ask(&[]).await, "none");
    let ms: u64 = ask(&[("request-budget-ms", "300")]).await.parse().unwrap();
    assert!((1..=300).contains(&ms), "{ms}");
    // Both headers: the sooner wins.
    let ms: u64 = ask(&[("request-budget-ms", "300"), ("grpc-timeout", "150m")])
        .await
        .parse()
        .unwrap();
    assert!((1..=150).contains(&ms), "{ms}");
    // A malformed deadline is ignored, not refused.
    assert_eq!(ask(&[("grpc-timeout", "soon")]).await, "none");
}

#[tokio::test]
async fn a_passed_deadline_is_answered_at_once_without_running_the_handler() {
    static RAN: AtomicU32 = AtomicU32::new(0);
    let addr = serve(
        Router::new()
            .route(
                "/",
                get(|| async {
                    RAN.fetch_add(1, Ordering::SeqCst);
                    "ran"
                }),
            )
            .layer(ResilienceLayer::new()),
    )
    .await;
    let response = reqwest::Client::new()
        .get(format!("http://{addr}/"))
        .header("request-budget-ms", "0")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json"
    );
    // Not "do not retry": the caller knows whether it has time for another
    // attempt (the budget it sent may have been one attempt's).
    assert!(response.headers().get("do-not-retry").is_none());
    let body = response.text().await.unwrap();
    assert!(body.contains("\"kind\":\"deadline_exceeded\""), "{body}");
    assert!(body.contains("\"status\":504"), "{body}");
    assert_eq!(RAN.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_handler_still_running_at_the_deadline_is_cut() {
    let addr = serve(
        Router::new()
            .route(
                "/",
                get(|| async {
                    tokio::time::sleep(Duration::from_secs(20)).await;
                    "late"
                }),
            )
            .layer(ResilienceLayer::new()),
    )
    .await;
    let start = Instant::now();
    let response = reqwest::Client::new()
        .get(format!("http://{addr}/"))
        .header("grpc-timeout", "50m")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT);
    assert!(start.elapsed() < Duration::from_secs(5));
}

static LEDGER: AtomicU32 = AtomicU32::new(0);

#[resilient::resilient(deadline_ms = 1000)]
async fn ledger_write() -> Result<(), resilient::Error> {
    LEDGER.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// The deadline cuts a handler after one of its calls acted: the 504 says
/// the request may have taken effect, as every failure answer after a call
/// acted does (review 17: the cut's 504 said nothing of it, which a client
/// that reads only the header took for "not done").
#[tokio::test]
async fn a_handler_cut_after_a_call_acted_says_it_may_have_taken_effect() {
    let addr = serve(
        Router::new()
            .route(
                "/",
                get(|| async {
                    ledger_write().await?;
                    tokio::time::sleep(Duration::from_secs(20)).await;
                    Ok::<_, resilient::Error>("late")
                }),
            )
            .layer(ResilienceLayer::new()),
    )
    .await;
    let response = reqwest::Client::new()
        .get(format!("http://{addr}/"))
        .header("request-budget-ms", "200")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(LEDGER.load(Ordering::SeqCst), 1);
    assert!(
        resilient::http::says_may_have_taken_effect(response.headers()),
        "{:?}",
        response.headers()
    );
}

static HUNG: AtomicU32 = AtomicU32::new(0);

/// Never answers: a hung instance.
async fn hangs() -> &'static str {
    HUNG.fetch_add(1, Ordering::SeqCst);
    std::future::pending::<()>().await;
    "never"
}

#[resilient::resilient(
    retries = 3,
    idempotent,
    deadline_ms = 2000,
    timeout_ms = 100,
    base_ms = 1,
    cap_ms = 1
)]
async fn fetch_from_a_hung_instance(
    client: &reqwest::Client,
    url: &str,
) -> Result<String, resilient::http::Error> {
    use resilient::reqwest::RequestBuilderExt;
    Ok(client.get(url).send_checked().await?.text().await?)
}

/// `timeout_ms` under a longer deadline is there to get past a hung
/// instance: each attempt sends its own time, the layer cuts the handler
/// when it is spent, and its 504 was marked "do not retry", so the caller
/// never made its second attempt (found by the sixth outside-in review).
#[tokio::test]
async fn attempts_cut_by_the_layer_at_the_attempts_deadline_are_retried() {
    let addr = serve(
        Router::new()
            .route("/", get(hangs))
            .layer(ResilienceLayer::new()),
    )
    .await;
    let client = reqwest::Client::new();
    let start = Instant::now();
    let (result, report) = resilient::observe(fetch_from_a_hung_instance(
        &client,
        &format!("http://{addr}/"),
    ))
    .await;
    let error = result.unwrap_err();
    assert_eq!(HUNG.load(Ordering::SeqCst), 4, "{error}: {report:?}");
    assert_eq!(report.attempts().len(), 4, "{report:?}");
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "within the deadline"
    );
}

#[tokio::test]
async fn refusals_become_503_with_retry_after_and_problem_json() {
    let breaker = Arc::new(
        Breaker::new(
            "payments",
            BreakerConfig::default().wait_duration_in_open_state(Duration::from_millis(2500)),
        )
        .unwrap(),
    );
    breaker.transition_to(resilient::State::Open);
    let bulkhead = Arc::new(
        Bulkhead::new(
            "db",
            BulkheadConfig::default()
                .max_concurrent(1)
                .max_wait(Duration::ZERO),
        )
        .unwrap(),
    );
    async fn open(
        State((b, _)): State<(Arc<Breaker>, Arc<Bulkhead>)>,
    ) -> Result<String, resilient::Error> {
        let _permit = b.try_acquire()?;
        Ok("ran".into())
    }
    async fn full(
        State((_, h)): State<(Arc<Breaker>, Arc<Bulkhead>)>,
    ) -> Result<String, resilient::Error> {
        let _first = h.try_acquire()?;
        let _second = h.try_acquire()?;
        Ok("ran".into())
    }
    let addr = serve(
        Router::new()
            .route("/open", get(open))
            .route("/full", get(full))
            .with_state((breaker, bulkhead))
            .layer(ResilienceLayer::new()),
    )
    .await;
    let client = reqwest::Client::new();

    let response = client
        .get(format!("http://{addr}/open"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let retry_after: u64 = response.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=3).contains(&retry_after), "{retry_after}");
    assert_eq!(response.headers()["do-not-retry"], "?1");
    let body = response.text().await.unwrap();
    assert!(body.contains("\"kind\":\"breaker_open\""), "{body}");
    assert!(body.contains("\"name\":\"payments\""), "{body}");

    let response = client
        .get(format!("http://{addr}/full"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(response.headers().get("retry-after").is_none());
    let body = response.text().await.unwrap();
    assert!(body.contains("\"kind\":\"bulkhead_full\""), "{body}");
}

/// A body streamed as the handler's stream produces it, each piece noting
/// the deadline it sees, as an annotated call in it would inherit it.
async fn streamed(
    State(saw): State<Arc<std::sync::Mutex<Vec<Option<Duration>>>>>,
) -> axum::response::Response {
    saw.lock().unwrap().push(resilient::remaining());
    let stream = futures_util::stream::unfold((0u32, saw), |(i, saw)| async move {
        if i >= 2 {
            return None;
        }
        saw.lock().unwrap().push(resilient::remaining());
        Some((Ok::<_, std::io::Error>(format!("{i}\n")), (i + 1, saw)))
    });
    axum::response::Response::new(axum::body::Body::from_stream(stream))
}

/// The caller's deadline covers the body the handler streams after its
/// answer's head, not the handler alone (review 39: the body's work ran
/// with no deadline).
#[tokio::test]
async fn the_callers_deadline_covers_a_streamed_body() {
    let saw = Arc::new(std::sync::Mutex::new(Vec::new()));
    let addr = serve(
        Router::new()
            .route("/", get(streamed))
            .with_state(saw.clone())
            .layer(ResilienceLayer::new()),
    )
    .await;
    let body = reqwest::Client::new()
        .get(format!("http://{addr}/"))
        .header("request-budget-ms", "5000")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(body, "0\n1\n");
    let saw = saw.lock().unwrap().clone();
    assert_eq!(saw.len(), 3, "{saw:?}");
    for seen in &saw {
        let left = seen.unwrap_or_else(|| panic!("a part ran with no deadline: {saw:?}"));
        assert!(left <= Duration::from_millis(4_900), "{saw:?}");
        assert!(left > Duration::from_millis(4_000), "{saw:?}");
    }
}
