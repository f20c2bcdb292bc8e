//! The server-side idempotency layer over real sockets: one run per key,
//! stored answers for repeats (concurrent or later), 422 for a reused key
//! with another body, and a store that is bounded and expires.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::post;
use resilient::tower::IdempotencyLayer;
use tokio::net::TcpListener;

#[derive(Default)]
struct Provider {
    runs: AtomicU32,
    /// Answer 503 to the first this many runs.
    fail_first: u32,
    /// Answer 500 (after doing the work) to every run.
    crash: bool,
    delay: Duration,
}

async fn charge(State(p): State<Arc<Provider>>, body: String) -> impl IntoResponse {
    let n = p.runs.fetch_add(1, Ordering::SeqCst) + 1;
    tokio::time::sleep(p.delay).await;
    if n <= p.fail_first {
        return (StatusCode::SERVICE_UNAVAILABLE, "busy".to_owned());
    }
    if p.crash {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("crashed in run {n}"),
        );
    }
    (StatusCode::CREATED, format!("charge {n} of {body}"))
}

async fn serve(provider: Arc<Provider>, layer: IdempotencyLayer) -> SocketAddr {
    let router = Router::new()
        .route("/charges", post(charge))
        .with_state(provider)
        .layer(layer);
    listen(router).await
}

/// Serves `router` on a port of 127.0.0.1.
async fn listen(router: Router) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    addr
}

/// `charge` with the idempotency layer outside `ResilienceLayer` (as
/// `ServiceBuilder` stacks its first layer outside).
async fn serve_outside_resilience(provider: Arc<Provider>) -> SocketAddr {
    use resilient::tower::ResilienceLayer;
    use tower::ServiceBuilder;
    let router = Router::new()
        .route("/charges", post(charge))
        .with_state(provider)
        .layer(
            ServiceBuilder::new()
                .layer(IdempotencyLayer::new())
                .layer(ResilienceLayer::new()),
        );
    listen(router).await
}

async fn post_charge(
    addr: SocketAddr,
    key: Option<&str>,
    body: &str,
) -> (StatusCode, bool, String) {
    let mut request = reqwest::Client::new()
        .post(format!("http://{addr}/charges"))
        .body(body.to_owned());
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    let response = request.send().await.unwrap();
    let replayed = response.headers().get("idempotent-replayed").is_some();
    (response.status(), replayed, response.text().await.unwrap())
}

#[tokio::test]
async fn a_repeat_gets_the_stored_answer_without_running_again() {
    let provider = Arc::new(Provider::default());
    let addr = serve(provider.clone(), IdempotencyLayer::new()).await;
    let first = post_charge(addr, Some("order-1"), "500").await;
    let again = post_charge(addr, Some("order-1"), "500").await;
    assert_eq!(
        first,
        (StatusCode::CREATED, false, "charge 1 of 500".into())
    );
    assert_eq!(again, (StatusCode::CREATED, true, "charge 1 of 500".into()));
    assert_eq!(provider.runs.load(Ordering::SeqCst), 1);

    // Another key is another operation; no key, no deduplication.
    post_charge(addr, Some("order-2"), "500").await;
    post_charge(addr, None, "500").await;
    post_charge(addr, None, "500").await;
    assert_eq!(provider.runs.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn concurrent_requests_with_one_key_run_once() {
    let provider = Arc::new(Provider {
        delay: Duration::from_millis(100),
        ..Provider::default()
    });
    let addr = serve(provider.clone(), IdempotencyLayer::new()).await;
    let answers = futures_join_all(
        (0..6)
            .map(|_| tokio::spawn(async move { post_charge(addr, Some("order-7"), "900").await }))
            .collect(),
    )
    .await;
    assert_eq!(provider.runs.load(Ordering::SeqCst), 1);
    assert!(
        answers.iter().all(|a| a.2 == "charge 1 of 900"),
        "{answers:?}"
    );
    assert_eq!(
        answers.iter().filter(|a| !a.1).count(),
        1,
        "one ran, the rest were replays"
    );
}

async fn futures_join_all<T: std::fmt::Debug>(handles: Vec<tokio::task::JoinHandle<T>>) -> Vec<T> {
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}

#[tokio::test]
async fn a_reused_key_with_another_body_is_refused_422() {
    let provider = Arc::new(Provider::default());
    let addr = serve(provider.clone(), IdempotencyLayer::new()).await;
    post_charge(addr, Some("order-3"), "500").await;
    let (status, _, body) = post_charge(addr, Some("order-3"), "5000").await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(body.contains("different request"), "{body}");
    assert_eq!(provider.runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_retryable_answer_is_not_stored_so_the_retry_runs() {
    let provider = Arc::new(Provider {
        fail_first: 1,
        ..Provider::default()
    });
    let addr = serve(provider.clone(), IdempotencyLayer::new()).await;
    assert_eq!(
        post_charge(addr, Some("order-4"), "1").await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );
    let retry = post_charge(addr, Some("order-4"), "1").await;
    assert_eq!(retry, (StatusCode::CREATED, false, "charge 2 of 1".into()));
    assert_eq!(
        post_charge(addr, Some("order-4"), "1").await,
        (StatusCode::CREATED, true, "charge 2 of 1".into())
    );
}

#[tokio::test]
async fn a_server_error_is_stored_since_the_work_may_be_done() {
    let provider = Arc::new(Provider {
        crash: true,
        ..Provider::default()
    });
    let addr = serve(provider.clone(), IdempotencyLayer::new()).await;
    let first = post_charge(addr, Some("order-8"), "1").await;
    let again = post_charge(addr, Some("order-8"), "1").await;
    assert_eq!(first.0, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        again,
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            true,
            "crashed in run 1".into()
        )
    );
    assert_eq!(provider.runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn the_store_is_bounded_oldest_key_first() {
    let provider = Arc::new(Provider::default());
    let addr = serve(provider.clone(), IdempotencyLayer::new().capacity(2)).await;
    for key in ["a", "b", "c"] {
        post_charge(addr, Some(key), "1").await;
    }
    assert_eq!(provider.runs.load(Ordering::SeqCst), 3);
    // "c" and "b" are remembered, "a" was forgotten to make room.
    assert!(post_charge(addr, Some("c"), "1").await.1);
    assert!(post_charge(addr, Some("b"), "1").await.1);
    assert!(!post_charge(addr, Some("a"), "1").await.1);
    assert_eq!(provider.runs.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn keys_expire() {
    let provider = Arc::new(Provider::default());
    let addr = serve(
        provider.clone(),
        IdempotencyLayer::new().ttl(Duration::from_millis(50)),
    )
    .await;
    post_charge(addr, Some("order-5"), "1").await;
    assert!(post_charge(addr, Some("order-5"), "1").await.1);
    tokio::time::sleep(Duration::from_millis(80)).await;
    let after = post_charge(addr, Some("order-5"), "1").await;
    assert_eq!(after, (StatusCode::CREATED, false, "charge 2 of 1".into()));
}

/// The IETF draft defines the field as a structured-field string
/// (`Idempotency-Key: "…"`); Stripe and most payment APIs send the key bare.
/// Both are read, as the same key (helper audit, 2026-11-27: the quoted form
/// was refused with 400).
#[tokio::test]
async fn a_key_sent_quoted_as_the_draft_writes_it_is_the_same_key_as_bare() {
    let provider = Arc::new(Provider::default());
    let addr = serve(provider.clone(), IdempotencyLayer::new()).await;
    let quoted = post_charge(addr, Some("\"order-q\""), "7").await;
    assert_eq!(quoted, (StatusCode::CREATED, false, "charge 1 of 7".into()));
    let bare = post_charge(addr, Some("order-q"), "7").await;
    assert_eq!(bare, (StatusCode::CREATED, true, "charge 1 of 7".into()));
    assert_eq!(provider.runs.load(Ordering::SeqCst), 1);
    assert_eq!(
        post_charge(addr, Some("\"with space\""), "7").await.0,
        StatusCode::BAD_REQUEST
    );
}

#[tokio::test]
async fn an_invalid_key_or_a_large_body_is_refused() {
    let provider = Arc::new(Provider::default());
    let addr = serve(provider.clone(), IdempotencyLayer::new().max_body_bytes(8)).await;
    assert_eq!(
        post_charge(addr, Some("has space"), "1").await.0,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        post_charge(addr, Some("order-6"), "123456789").await.0,
        StatusCode::PAYLOAD_TOO_LARGE
    );
    assert_eq!(provider.runs.load(Ordering::SeqCst), 0);
}

/// Regression: a full store forgot the oldest key even while its request
/// was still running, so a repeat of it ran the handler a second time.
#[tokio::test]
async fn a_key_whose_request_still_runs_is_never_forgotten() {
    let provider = Arc::new(Provider {
        delay: Duration::from_millis(300),
        ..Provider::default()
    });
    let addr = serve(provider.clone(), IdempotencyLayer::new().capacity(1)).await;
    let first = tokio::spawn(async move { post_charge(addr, Some("charge-1"), "500").await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    // The only slot holds a running request: a new key must wait its turn.
    let (status, _, _) = post_charge(addr, Some("charge-2"), "700").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    // A repeat of the running key waits for its answer instead of running.
    let repeat = post_charge(addr, Some("charge-1"), "500").await;
    assert_eq!(
        repeat,
        (StatusCode::CREATED, true, "charge 1 of 500".into())
    );
    assert_eq!(first.await.unwrap().0, StatusCode::CREATED);
    assert_eq!(provider.runs.load(Ordering::SeqCst), 1);
}

/// Regression: `ttl(Duration::MAX)` panicked when storing the answer.
#[tokio::test]
async fn a_ttl_of_duration_max_keeps_answers_without_a_panic() {
    let provider = Arc::new(Provider::default());
    let addr = serve(provider.clone(), IdempotencyLayer::new().ttl(Duration::MAX)).await;
    let first = post_charge(addr, Some("forever"), "1").await;
    let again = post_charge(addr, Some("forever"), "1").await;
    assert_eq!(first.0, StatusCode::CREATED);
    assert_eq!(again, (StatusCode::CREATED, true, "charge 1 of 1".into()));
    assert_eq!(provider.runs.load(Ordering::SeqCst), 1);
}

/// Regression: the library's own refusal (a deadline already passed, so
/// the handler never ran) was stored and replayed to every retry.
#[tokio::test]
async fn a_refusal_by_the_library_is_not_stored() {
    let provider = Arc::new(Provider::default());
    let addr = serve_outside_resilience(provider.clone()).await;
    let client = reqwest::Client::new();
    let send = |budget: &'static str| {
        client
            .post(format!("http://{addr}/charges"))
            .header("idempotency-key", "late")
            .header("request-budget-ms", budget)
            .body("9")
            .send()
    };
    let passed = send("0").await.unwrap();
    assert_eq!(passed.status(), StatusCode::GATEWAY_TIMEOUT);
    let retry = send("5000").await.unwrap();
    assert_eq!(retry.status(), StatusCode::CREATED);
    assert!(retry.headers().get("idempotent-replayed").is_none());
    assert_eq!(provider.runs.load(Ordering::SeqCst), 1);
}

static BIG_RUNS: AtomicU32 = AtomicU32::new(0);

async fn big_answer() -> String {
    BIG_RUNS.fetch_add(1, Ordering::SeqCst);
    "x".repeat(2 * 1024 * 1024)
}

/// Regression: an answer larger than the store keeps made the layer forget
/// the key, so every repeat ran the handler again.
#[tokio::test]
async fn an_answer_too_large_to_keep_still_runs_the_handler_once() {
    let router = Router::new()
        .route("/charges", post(big_answer))
        .layer(IdempotencyLayer::new());
    let addr = listen(router).await;
    let first = post_charge(addr, Some("big"), "1").await;
    let again = post_charge(addr, Some("big"), "1").await;
    assert_eq!(first.0, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(first.2.contains("carried out"), "{}", first.2);
    assert_eq!(
        (again.0, again.1),
        (StatusCode::INTERNAL_SERVER_ERROR, true)
    );
    assert_eq!(BIG_RUNS.load(Ordering::SeqCst), 1);
}

// The connection broke after the request went out: the dependency may
// have done the work, so the answer (502) is kept for the key.
#[resilient::resilient(retries = 1, idempotent, base_ms = 1, cap_ms = 1)]
async fn dependency_down() -> Result<String, resilient::http::Error> {
    Err(resilient::http::Error::after_send("connection reset"))
}

async fn gives_up() -> Result<String, resilient::http::Error> {
    dependency_down().await
}

/// Regression: with `ResilienceLayer` outside `IdempotencyLayer` (the
/// README's order), the first answer said `Do-Not-Retry` but its replay did
/// not, so a client retried the same stored failure.
#[tokio::test]
async fn a_replayed_give_up_still_says_do_not_retry() {
    use resilient::tower::ResilienceLayer;
    let router = Router::new()
        .route("/charges", post(gives_up))
        .layer(IdempotencyLayer::new())
        .layer(ResilienceLayer::new());
    let addr = listen(router).await;
    let client = reqwest::Client::new();
    let send = || {
        client
            .post(format!("http://{addr}/charges"))
            .header("idempotency-key", "gives-up")
            .body("1")
            .send()
    };
    let first = send().await.unwrap();
    let replay = send().await.unwrap();
    assert!(first.status().is_server_error());
    assert!(resilient::http::is_do_not_retry(first.headers()));
    assert!(replay.headers().get("idempotent-replayed").is_some());
    assert!(resilient::http::is_do_not_retry(replay.headers()));
}

async fn post_as(
    addr: SocketAddr,
    caller: &str,
    key: &str,
    body: &str,
) -> (StatusCode, bool, String) {
    let response = reqwest::Client::new()
        .post(format!("http://{addr}/charges"))
        .header("authorization", caller)
        .header("idempotency-key", key)
        .body(body.to_owned())
        .send()
        .await
        .unwrap();
    let replayed = response.headers().get("idempotent-replayed").is_some();
    (response.status(), replayed, response.text().await.unwrap())
}

#[tokio::test]
async fn scoped_keys_never_answer_one_caller_with_anothers_response() {
    let provider = Arc::new(Provider::default());
    let layer = IdempotencyLayer::new().scope_by_header(axum::http::header::AUTHORIZATION);
    let addr = serve(provider.clone(), layer).await;
    let alice = post_as(addr, "Bearer alice", "order-1", "500").await;
    let bob = post_as(addr, "Bearer bob", "order-1", "500").await;
    assert_eq!(
        alice,
        (StatusCode::CREATED, false, "charge 1 of 500".into())
    );
    assert_eq!(bob, (StatusCode::CREATED, false, "charge 2 of 500".into()));
    // Each caller's repeat is still deduplicated within its own scope.
    let alice_again = post_as(addr, "Bearer alice", "order-1", "500").await;
    assert_eq!(
        alice_again,
        (StatusCode::CREATED, true, "charge 1 of 500".into())
    );
    // Another body under Bob's key is a reuse within Bob's scope only.
    let bob_other = post_as(addr, "Bearer bob", "order-1", "700").await;
    assert_eq!(bob_other.0, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(provider.runs.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn unscoped_keys_are_shared_by_every_caller() {
    // The default, documented: behind authentication, scope the keys.
    let provider = Arc::new(Provider::default());
    let addr = serve(provider.clone(), IdempotencyLayer::new()).await;
    post_as(addr, "Bearer alice", "order-1", "500").await;
    let bob = post_as(addr, "Bearer bob", "order-1", "500").await;
    assert_eq!(bob, (StatusCode::CREATED, true, "charge 1 of 500".into()));
    assert_eq!(provider.runs.load(Ordering::SeqCst), 1);
}

/// Regression (found from outside): a request whose client gave up while
/// its handler ran made the layer forget the key, and a repeat with the
/// same key ran the handler (the charge) a second time. The handler now
/// runs to its end on its own task, and its answer is kept.
#[tokio::test]
async fn a_request_its_client_gave_up_on_still_runs_once_and_is_replayed() {
    let provider = Arc::new(Provider {
        delay: Duration::from_millis(300),
        ..Provider::default()
    });
    let addr = serve(provider.clone(), IdempotencyLayer::new()).await;
    let impatient = reqwest::Client::builder()
        .timeout(Duration::from_millis(50))
        .build()
        .unwrap();
    let cut = impatient
        .post(format!("http://{addr}/charges"))
        .header("idempotency-key", "cut-1")
        .body("500")
        .send()
        .await;
    assert!(
        cut.is_err(),
        "the client's own timeout cuts the first request"
    );
    // The handler is still running: a repeat waits for it, and gets its
    // answer instead of running it again.
    let repeat = post_charge(addr, Some("cut-1"), "500").await;
    assert_eq!(
        repeat,
        (StatusCode::CREATED, true, "charge 1 of 500".into())
    );
    let later = post_charge(addr, Some("cut-1"), "500").await;
    assert_eq!(later, (StatusCode::CREATED, true, "charge 1 of 500".into()));
    assert_eq!(provider.runs.load(Ordering::SeqCst), 1);
}

/// Serves `router` under `IdempotencyLayer` inside `ResilienceLayer`, sends
/// a request with `key` and a budget of 100 ms, which the layer cuts (a
/// 504), waits `wait_ms`, and sends it again with 5 s: the second answer.
async fn cut_then_retried(
    router: Router,
    path: &str,
    key: &str,
    body: &str,
    wait_ms: u64,
) -> reqwest::Response {
    use resilient::tower::ResilienceLayer;
    let router = router
        .layer(IdempotencyLayer::new())
        .layer(ResilienceLayer::new());
    let addr = listen(router).await;
    let client = reqwest::Client::new();
    let send = |budget: &'static str| {
        client
            .post(format!("http://{addr}{path}"))
            .header("idempotency-key", key)
            .header("request-budget-ms", budget)
            .body(body.to_owned())
            .send()
    };
    let cut = send("100").await.unwrap();
    assert_eq!(cut.status(), StatusCode::GATEWAY_TIMEOUT);
    tokio::time::sleep(Duration::from_millis(wait_ms)).await;
    send("5000").await.unwrap()
}

/// The same, cut by the README's `ResilienceLayer` at the caller's
/// deadline (`Request-Budget-Ms`): the caller gets its 504 at once, the
/// handler finishes on its task, and the next request with the key gets
/// the handler's own answer rather than a second run.
#[tokio::test]
async fn a_request_cut_at_its_deadline_still_runs_once_and_is_replayed() {
    let provider = Arc::new(Provider {
        delay: Duration::from_millis(300),
        ..Provider::default()
    });
    let router = Router::new()
        .route("/charges", post(charge))
        .with_state(provider.clone());
    let retry = cut_then_retried(router, "/charges", "deadline-1", "700", 400).await;
    assert_eq!(retry.status(), StatusCode::CREATED);
    assert!(retry.headers().get("idempotent-replayed").is_some());
    assert_eq!(retry.text().await.unwrap(), "charge 1 of 700");
    assert_eq!(provider.runs.load(Ordering::SeqCst), 1);
}

/// With the layers the other way round (`ResilienceLayer` inside), the
/// cut handler's 504 is kept: it may have done its work, so it is not
/// mistaken for a refusal before the handler ran. Kept, it says
/// `Do-Not-Retry` (a retry under the key only gets it again), which
/// `ResilienceLayer`'s own 504 leaves out so that a hung instance can be
/// retried.
#[tokio::test]
async fn a_handler_cut_inside_the_layer_is_not_run_again() {
    let provider = Arc::new(Provider {
        delay: Duration::from_millis(300),
        ..Provider::default()
    });
    let addr = serve_outside_resilience(provider.clone()).await;
    let client = reqwest::Client::new();
    let send = |budget: &'static str| {
        client
            .post(format!("http://{addr}/charges"))
            .header("idempotency-key", "inner-cut")
            .header("request-budget-ms", budget)
            .body("3")
            .send()
    };
    let cut = send("100").await.unwrap();
    assert_eq!(cut.status(), StatusCode::GATEWAY_TIMEOUT);
    assert!(resilient::http::is_do_not_retry(cut.headers()));
    tokio::time::sleep(Duration::from_millis(400)).await;
    let retry = send("5000").await.unwrap();
    assert_eq!(retry.status(), StatusCode::GATEWAY_TIMEOUT);
    assert!(retry.headers().get("idempotent-replayed").is_some());
    assert!(resilient::http::is_do_not_retry(retry.headers()));
    assert_eq!(provider.runs.load(Ordering::SeqCst), 1);

    // A keyed caller that retries timeouts asks once: every retry could
    // only get the stored 504 again (review 13 saw 4 attempts).
    let key = resilient::IdempotencyKey::random();
    let (result, report) = resilient::observe(pay(&client, addr, &key)).await;
    let error = result.unwrap_err();
    assert_eq!(
        error.status(),
        Some(StatusCode::GATEWAY_TIMEOUT),
        "{error:?}"
    );
    // One attempt, or two when the caller's own 200 ms timer beat the
    // server's 504 (sent 20 ms before it) and the retry got the replay.
    assert!(report.attempts().len() <= 2, "{report:?}");
    assert_eq!(provider.runs.load(Ordering::SeqCst), 2);
}

static CUT_RUNS: AtomicU32 = AtomicU32::new(0);

/// Charges under a deadline of its own, which cuts it while its answer is
/// slow: a `resilient::Error` that may have taken effect.
async fn charge_cut_by_own_deadline() -> Result<String, resilient::Error> {
    let n = resilient::with_deadline(Duration::from_millis(100), async {
        let n = CUT_RUNS.fetch_add(1, Ordering::SeqCst) + 1;
        tokio::time::sleep(Duration::from_millis(400)).await;
        n
    })
    .await?;
    Ok(format!("charge {n}"))
}

/// A handler answers with the library's error for work a deadline cut
/// while it ran: that 504 is kept under the key, as any answer of a
/// handler that acted, not forgotten as a refusal before anything ran,
/// which would let the retry charge again (review 15).
#[tokio::test]
async fn a_deadline_that_cut_the_handlers_work_is_kept() {
    let router = Router::new()
        .route("/charges", post(charge_cut_by_own_deadline))
        .layer(IdempotencyLayer::new());
    let addr = listen(router).await;
    let first = post_charge(addr, Some("cut-by-own-deadline"), "1").await;
    assert_eq!((first.0, first.1), (StatusCode::GATEWAY_TIMEOUT, false));
    let again = post_charge(addr, Some("cut-by-own-deadline"), "1").await;
    assert_eq!((again.0, again.1), (StatusCode::GATEWAY_TIMEOUT, true));
    assert_eq!(CUT_RUNS.load(Ordering::SeqCst), 1);
}

static ORDERS_WRITTEN: AtomicU32 = AtomicU32::new(0);

#[resilient::resilient(deadline_ms = 1_000)]
async fn next_step() -> Result<(), resilient::Error> {
    Ok(())
}

/// Writes the order in plain code (no report shows it), slowly, then makes
/// an annotated call.
async fn write_order_then_call() -> Result<String, resilient::Error> {
    tokio::time::sleep(Duration::from_millis(300)).await;
    let n = ORDERS_WRITTEN.fetch_add(1, Ordering::SeqCst) + 1;
    next_step().await?;
    Ok(format!("order {n}"))
}

/// `ResilienceLayer` cuts the request at its deadline and the handler runs
/// on, as promised; on its task the passed deadline refuses its annotated
/// call ("before it ran"), after its own write. That answer is kept: the
/// handler ran on after its request went away, and a retry under the key
/// would write the order a second time (review 20: it did).
#[tokio::test]
async fn a_handler_that_ran_on_after_its_request_went_away_is_not_run_again() {
    let router = Router::new().route("/orders", post(write_order_then_call));
    let retry = cut_then_retried(router, "/orders", "ran-on-1", "1", 500).await;
    assert_eq!(
        ORDERS_WRITTEN.load(Ordering::SeqCst),
        1,
        "the order was written twice"
    );
    assert!(retry.headers().get("idempotent-replayed").is_some());
    assert!(retry.status().is_server_error(), "{}", retry.status());
    // The kept failure says the work may be done, and that a retry under
    // the key only gets it again.
    assert!(resilient::http::says_may_have_taken_effect(retry.headers()));
    assert!(resilient::http::is_do_not_retry(retry.headers()));
}

static PANIC_RUNS: AtomicU32 = AtomicU32::new(0);

async fn charge_then_panic() -> String {
    PANIC_RUNS.fetch_add(1, Ordering::SeqCst);
    panic!("the handler panics after charging");
}

/// A handler that panics after doing its work is answered 500, and the
/// answer is kept: the repeat is not run.
#[tokio::test]
async fn a_handler_that_panics_is_answered_500_and_not_run_again() {
    let router = Router::new()
        .route("/charges", post(charge_then_panic))
        .layer(IdempotencyLayer::new());
    let addr = listen(router).await;
    let send = || {
        reqwest::Client::new()
            .post(format!("http://{addr}/charges"))
            .header("idempotency-key", "panics")
            .body("1")
            .send()
    };
    let first = send().await.unwrap();
    let again = send().await.unwrap();
    // Both say the charge may have been made and that a retry gets the
    // same answer (a caller that retries 500s, or counts them, reads that).
    for (answer, replayed) in [(&first, false), (&again, true)] {
        assert_eq!(answer.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(
            answer.headers().get("idempotent-replayed").is_some(),
            replayed
        );
        assert!(resilient::http::says_may_have_taken_effect(
            answer.headers()
        ));
        assert!(resilient::http::is_do_not_retry(answer.headers()));
    }
    let body = first.text().await.unwrap();
    assert!(body.contains("not run again"), "{body}");
    assert_eq!(PANIC_RUNS.load(Ordering::SeqCst), 1);
}

#[resilient::resilient(retries = 3, timeout_ms = 200, base_ms = 10, cap_ms = 20)]
async fn pay(
    client: &reqwest::Client,
    addr: SocketAddr,
    key: &resilient::IdempotencyKey,
) -> Result<String, resilient::http::Error> {
    use resilient::reqwest::RequestBuilderExt;
    Ok(client
        .post(format!("http://{addr}/charges"))
        .idempotency_key(key)
        .body("100")
        .send_checked()
        .await?
        .text()
        .await?)
}

/// The library's own client against a slow handler: the first attempt is
/// cut by `timeout_ms`, the retry carries the same key, waits for the
/// running handler and gets its answer. One charge.
#[tokio::test]
async fn a_retry_by_the_library_client_with_the_same_key_charges_once() {
    let provider = Arc::new(Provider {
        delay: Duration::from_millis(300),
        ..Provider::default()
    });
    let addr = serve(provider.clone(), IdempotencyLayer::new()).await;
    let client = reqwest::Client::new();
    let key = resilient::IdempotencyKey::random();
    let answer = pay(&client, addr, &key).await.unwrap();
    assert_eq!(answer, "charge 1 of 100");
    assert_eq!(provider.runs.load(Ordering::SeqCst), 1);
}

static ACTED_RUNS: AtomicU32 = AtomicU32::new(0);

#[resilient::resilient]
async fn record_charge() -> Result<(), resilient::http::Error> {
    ACTED_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// Charges through an annotated call, then answers 503 + `Retry-After: 1`
/// (which alone says "not processed, retry in a second").
async fn charge_then_busy() -> (StatusCode, [(&'static str, &'static str); 1], &'static str) {
    record_charge().await.unwrap();
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [("retry-after", "1")],
        "busy after charging",
    )
}

/// A "not processed" answer is kept when an annotated call inside the
/// handler succeeded: the work is partly done, and a retry must not run
/// it again. Kept, it no longer invites a retry: its `Retry-After` would
/// send the caller back for the same stored answer until the key expires.
#[tokio::test]
async fn a_not_processed_answer_is_kept_when_a_call_inside_did_its_work() {
    let router = Router::new()
        .route("/charges", post(charge_then_busy))
        .layer(IdempotencyLayer::new());
    let addr = listen(router).await;
    let first = post_charge(addr, Some("acted"), "1").await;
    assert_eq!((first.0, first.1), (StatusCode::SERVICE_UNAVAILABLE, false));
    let again = post_charge(addr, Some("acted"), "1").await;
    assert_eq!((again.0, again.1), (StatusCode::SERVICE_UNAVAILABLE, true));
    assert_eq!(ACTED_RUNS.load(Ordering::SeqCst), 1);

    // What a caller reads: may have taken effect, do not retry, no wait.
    let client = reqwest::Client::new();
    let key = resilient::IdempotencyKey::random();
    let answer = client
        .post(format!("http://{addr}/charges"))
        .header("idempotency-key", key.as_str())
        .body("1")
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(answer.headers().get("retry-after").is_none());
    assert!(resilient::http::is_do_not_retry(answer.headers()));
    assert!(resilient::http::says_may_have_taken_effect(
        answer.headers()
    ));
    assert_eq!(ACTED_RUNS.load(Ordering::SeqCst), 2);

    // A caller that retries 503s and obeys Retry-After asks once, and
    // knows the charge may have been made.
    let key = resilient::IdempotencyKey::random();
    let (result, report) = resilient::observe(pay(&client, addr, &key)).await;
    let error = result.unwrap_err();
    assert_eq!(error.status(), Some(StatusCode::SERVICE_UNAVAILABLE));
    assert!(error.may_have_taken_effect(), "{error:?}");
    assert_eq!(report.attempts().len(), 1, "{report:?}");
    assert_eq!(ACTED_RUNS.load(Ordering::SeqCst), 3);
}

static HUNG_RUNS: AtomicU32 = AtomicU32::new(0);

async fn charge_then_hang() -> String {
    HUNG_RUNS.fetch_add(1, Ordering::SeqCst);
    std::future::pending::<()>().await;
    unreachable!()
}

/// A handler that hangs after its client went away is cut after
/// `max_run_without_client`, not left running (and holding its key's
/// slot) for ever; its key keeps a 500, and is not run again.
#[tokio::test]
async fn a_handler_that_hangs_after_its_client_went_away_is_cut_and_not_run_again() {
    let layer = IdempotencyLayer::new().max_run_without_client(Duration::from_millis(200));
    let router = Router::new()
        .route("/charges", post(charge_then_hang))
        .layer(layer);
    let addr = listen(router).await;
    let impatient = reqwest::Client::builder()
        .timeout(Duration::from_millis(50))
        .build()
        .unwrap();
    let cut = impatient
        .post(format!("http://{addr}/charges"))
        .header("idempotency-key", "hangs")
        .body("1")
        .send()
        .await;
    assert!(cut.is_err());
    // A repeat waits for the running handler, and gets the 500 it keeps
    // once it is cut.
    let repeat = tokio::time::timeout(
        Duration::from_secs(5),
        post_charge(addr, Some("hangs"), "1"),
    )
    .await
    .expect("the hung handler is cut, and its waiter answered");
    assert_eq!(
        (repeat.0, repeat.1),
        (StatusCode::INTERNAL_SERVER_ERROR, true)
    );
    assert!(repeat.2.contains("not run again"), "{}", repeat.2);
    let later = post_charge(addr, Some("hangs"), "1").await;
    assert_eq!(
        (later.0, later.1),
        (StatusCode::INTERNAL_SERVER_ERROR, true)
    );
    assert_eq!(HUNG_RUNS.load(Ordering::SeqCst), 1);
}

/// Regression (found from outside): a budget already spent on arrival but
/// not zero (`grpc-timeout: 1n`, what the library sends for a deadline that
/// has passed) was answered as if the handler had been cut while running,
/// so the idempotency layer around it kept that 504 and the retry never ran.
#[tokio::test]
async fn a_budget_spent_before_the_handler_runs_is_not_stored() {
    let provider = Arc::new(Provider::default());
    let addr = serve_outside_resilience(provider.clone()).await;
    let client = reqwest::Client::new();
    let spent = client
        .post(format!("http://{addr}/charges"))
        .header("idempotency-key", "spent")
        .header("grpc-timeout", "1n")
        .body("9")
        .send()
        .await
        .unwrap();
    assert_eq!(spent.status(), StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(provider.runs.load(Ordering::SeqCst), 0);
    let retry = post_charge(addr, Some("spent"), "9").await;
    assert_eq!(retry, (StatusCode::CREATED, false, "charge 1 of 9".into()));
    assert_eq!(provider.runs.load(Ordering::SeqCst), 1);
}

/// Tells how long the handler has left, from the deadline it runs under.
async fn time_left(body: String) -> String {
    let left = resilient::remaining().map(|d| d.as_millis());
    format!("{} bytes, {left:?} ms left", body.len())
}

/// With the idempotency layer outside `ResilienceLayer`, the caller's
/// budget runs from when the request arrived, not from when its body had
/// been read: a 400 ms upload left the handler 449 ms of a 500 ms budget,
/// working on 350 ms after its caller gave up (review 25).
#[tokio::test]
async fn a_slow_upload_is_taken_off_the_callers_budget() {
    use resilient::tower::ResilienceLayer;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tower::ServiceBuilder;
    let router = Router::new().route("/charges", post(time_left)).layer(
        ServiceBuilder::new()
            .layer(IdempotencyLayer::new())
            .layer(ResilienceLayer::new()),
    );
    let addr = listen(router).await;
    let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
    socket
        .write_all(
            b"POST /charges HTTP/1.1\r\nhost: localhost\r\nrequest-budget-ms: 500\r\n\
              idempotency-key: slow-upload\r\ncontent-length: 40\r\nconnection: close\r\n\r\n",
        )
        .await
        .unwrap();
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        socket.write_all(&[b'x'; 10]).await.unwrap();
    }
    let mut answer = String::new();
    socket.read_to_string(&mut answer).await.unwrap();
    let left: u64 = answer
        .split("Some(")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .and_then(|ms| ms.parse().ok())
        .unwrap_or_else(|| panic!("no time left in the answer: {answer}"));
    // 500 ms, less the reply reserve (50 ms) and the 400 ms upload.
    assert!(
        left <= 60,
        "{left} ms left after a 400 ms upload of a 500 ms budget"
    );
}

/// A capacity meant as "every key" panicked on the first keyed request
/// (`2 * capacity` overflowed; review 25).
#[tokio::test]
async fn a_capacity_of_usize_max_keeps_keys_without_a_panic() {
    let provider = Arc::new(Provider::default());
    let addr = serve(
        provider.clone(),
        IdempotencyLayer::new().capacity(usize::MAX),
    )
    .await;
    assert_eq!(
        post_charge(addr, Some("every-key"), "1").await,
        (StatusCode::CREATED, false, "charge 1 of 1".into())
    );
    assert!(post_charge(addr, Some("every-key"), "1").await.1);
    assert_eq!(provider.runs.load(Ordering::SeqCst), 1);
}
