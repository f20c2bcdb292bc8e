//! Graceful shutdown with calls in flight, on tokio's paused clock: new
//! calls refused with `ShuttingDown`, readiness not ready, calls in flight
//! (their retries and nested calls included) left to finish, the drain
//! bounded and its report exact. Work spawned through `propagate` from
//! inside counted work is counted until it ends or is dropped, whatever
//! ends it (a panic, an abort, a dropped `JoinSet`, the runtime shutting
//! down, never being polled), and waited for and admitted, also when it
//! comes from a retry's attempt, a fallback, other propagated work, or
//! starts during the drain (the last group from review 39, which found
//! them holding).
//!
//! The shutdown state is the process's, so these tests take turns.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use resilient::{Classification, Classify, ErrorKind, GracefulShutdown, Registry, resilient};
use tokio::sync::Mutex;
use tokio::time::Instant;

static ONE_AT_A_TIME: Mutex<()> = Mutex::const_new(());

#[derive(Debug)]
enum E {
    Flaky,
    Refused(resilient::Error),
}

impl From<resilient::Error> for E {
    fn from(e: resilient::Error) -> Self {
        E::Refused(e)
    }
}

impl Classify for E {
    fn classify(&self) -> Classification {
        match self {
            E::Flaky => Classification::Transient,
            E::Refused(e) => e.classify(),
        }
    }
}

fn refusal(result: Result<u32, E>) -> Option<ErrorKind> {
    refusal_of(&result)
}

fn refusal_of<T>(result: &Result<T, E>) -> Option<ErrorKind> {
    match result {
        Err(E::Refused(e)) => Some(e.kind()),
        _ => None,
    }
}

/// Works for `secs`, then asks a nested annotated call.
#[resilient(deadline_ms = 120_000)]
async fn work(secs: u64) -> Result<u32, E> {
    tokio::time::sleep(Duration::from_secs(secs)).await;
    nested().await
}

#[resilient(timeout_ms = 1_000)]
async fn nested() -> Result<u32, E> {
    Ok(1)
}

/// Fails its first attempt, then succeeds after a 2 s backoff.
#[resilient(
    retries = 2,
    idempotent,
    backoff = "exponential",
    base_ms = 2_000,
    cap_ms = 2_000
)]
async fn flaky(fails: &AtomicU32) -> Result<u32, E> {
    if fails
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
    {
        Err(E::Flaky)
    } else {
        Ok(2)
    }
}

/// Spawns, through `propagate`, a task making a nested call, and waits for it.
#[resilient(deadline_ms = 120_000)]
async fn spawns_work() -> Result<u32, E> {
    tokio::time::sleep(Duration::from_secs(2)).await;
    tokio::spawn(resilient::propagate(nested()))
        .await
        .expect("the spawned task ends")
}

/// Lets spawned tasks run up to their first sleep.
async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_drain_refuses_new_calls_and_waits_for_the_calls_in_flight_up_to_its_bound() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let shutdown = GracefulShutdown::install();
    assert_eq!(shutdown.in_flight(), 0);

    let short = tokio::spawn(work(5));
    let long = tokio::spawn(work(50));
    let spawning = tokio::spawn(spawns_work());
    static FAILS: AtomicU32 = AtomicU32::new(1);
    let retried = tokio::spawn(flaky(&FAILS));
    settle().await;
    assert_eq!(shutdown.in_flight(), 4);
    assert!(Registry::current().readiness().ready);

    let start = Instant::now();
    let drain = tokio::spawn(async move { shutdown.drain(Duration::from_secs(10)).await });
    settle().await;

    // Draining: new calls are refused at once, and readiness says so.
    assert!(shutdown.is_draining());
    assert_eq!(refusal(work(0).await), Some(ErrorKind::ShuttingDown));
    assert_eq!(refusal(nested().await), Some(ErrorKind::ShuttingDown));
    // A new request's handler runs its calls under `observe` or a deadline
    // (as `ResilienceLayer` does): those frames are not admitted calls.
    let (observed, _) = resilient::observe(nested()).await;
    assert_eq!(refusal(observed), Some(ErrorKind::ShuttingDown));
    let deadlined = resilient::with_deadline(Duration::from_secs(5), nested())
        .await
        .unwrap();
    assert_eq!(refusal(deadlined), Some(ErrorKind::ShuttingDown));
    let readiness = Registry::current().readiness();
    assert!(!readiness.ready);
    assert!(readiness.shutting_down);

    // Calls in flight finish: the retry after the backoff and the nested
    // call after 5 s are part of them and are admitted.
    assert_eq!(retried.await.unwrap().unwrap(), 2);
    assert_eq!(short.await.unwrap().unwrap(), 1);
    // Work an admitted call spawned through `propagate` is part of it.
    assert_eq!(spawning.await.unwrap().unwrap(), 1);

    // The long call outlives the bound: the drain reports it.
    let report = drain.await.unwrap();
    assert_eq!(report.still_running, 1);
    assert!(!report.is_clean());
    assert_eq!(report.waited, Duration::from_secs(10));
    assert_eq!(start.elapsed(), Duration::from_secs(10));
    assert_eq!(report.to_string(), "1 call(s) still running after 10s");

    // The drain never cancels: the long call still completes.
    assert_eq!(long.await.unwrap().unwrap(), 1);
    assert_eq!(shutdown.in_flight(), 0);

    shutdown.resume();
    assert!(!shutdown.is_draining());
    assert_eq!(work(0).await.unwrap(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_drain_returns_when_the_last_call_ends_not_at_its_bound() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let shutdown = GracefulShutdown::install();
    let call = tokio::spawn(work(3));
    settle().await;
    let start = Instant::now();
    let report = shutdown.drain(Duration::from_secs(30)).await;
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.waited, Duration::from_secs(3));
    assert_eq!(start.elapsed(), Duration::from_secs(3));
    assert_eq!(call.await.unwrap().unwrap(), 1);
    shutdown.resume();
}

#[tokio::test(start_paused = true)]
async fn a_drain_with_nothing_in_flight_returns_at_once() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let shutdown = GracefulShutdown::install();
    let report = shutdown.drain(Duration::from_secs(30)).await;
    assert!(report.is_clean());
    assert_eq!(report.waited, Duration::ZERO);
    shutdown.resume();
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_call_leaves_the_in_flight_count() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let shutdown = GracefulShutdown::install();
    let call = tokio::spawn(work(60));
    settle().await;
    assert_eq!(shutdown.in_flight(), 1);
    call.abort();
    assert!(call.await.unwrap_err().is_cancelled());
    assert_eq!(shutdown.in_flight(), 0);
    let report = shutdown.drain(Duration::from_secs(30)).await;
    assert!(report.is_clean());
    shutdown.resume();
}

/// Regression: a request making two calls in sequence (reserve, then
/// charge) had its second call refused when a drain started between them,
/// leaving the work half done while the drain reported all well.
#[tokio::test(start_paused = true)]
async fn a_unit_of_work_admitted_before_a_drain_runs_all_its_calls() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let shutdown = GracefulShutdown::install();
    let request = tokio::spawn(resilient::admitted(async {
        let reserved = work(2).await?; // the drain starts during this one
        let charged = nested().await?;
        Ok::<_, E>(reserved + charged)
    }));
    settle().await;
    assert_eq!(
        shutdown.in_flight(),
        2,
        "the unit of work and its first call"
    );
    let drain = tokio::spawn(async move { shutdown.drain(Duration::from_secs(10)).await });
    settle().await;
    // A new unit of work is refused before any of it runs.
    let refused = resilient::admitted(async { unreachable!("refused before it runs") }).await;
    assert_eq!(refused.unwrap_err().kind(), ErrorKind::ShuttingDown);
    // The admitted one runs both of its calls.
    assert_eq!(request.await.unwrap().unwrap().unwrap(), 2);
    let report = drain.await.unwrap();
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.waited, Duration::from_secs(2));
    shutdown.resume();
}

/// Fails after 100 ms, for its fallback to answer.
#[resilient(deadline_ms = 10_000, fallback = slow_fallback)]
async fn answered_slowly_by_its_fallback() -> Result<u32, E> {
    tokio::time::sleep(Duration::from_millis(100)).await;
    Err(E::Flaky)
}

static FALLBACK_DONE: AtomicU32 = AtomicU32::new(0);

/// Answers after 500 ms.
async fn slow_fallback(_: E) -> Result<u32, E> {
    tokio::time::sleep(Duration::from_millis(500)).await;
    FALLBACK_DONE.fetch_add(1, Ordering::SeqCst);
    Ok(3)
}

/// A call's fallback is part of the call: a drain that began while the
/// call ran waits for its fallback's answer (review 19: the call left the
/// count when its engine returned, and the drain reported every call
/// finished with the fallback 500 ms from done).
#[tokio::test(start_paused = true)]
async fn a_drain_waits_for_a_call_in_its_fallback() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let shutdown = GracefulShutdown::install();
    FALLBACK_DONE.store(0, Ordering::SeqCst);
    let call = tokio::spawn(answered_slowly_by_its_fallback());
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(shutdown.in_flight(), 2, "the call, and its fallback's hold");
    let report = shutdown.drain(Duration::from_secs(10)).await;
    let done_when_drained = FALLBACK_DONE.load(Ordering::SeqCst);
    assert_eq!(call.await.unwrap().unwrap(), 3);
    shutdown.resume();
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.waited, Duration::from_millis(550));
    assert_eq!(
        done_when_drained, 1,
        "the drain ({report}) ended while the call was in its fallback"
    );
}

/// Fails after 100 ms; its fallback asks a nested annotated call.
#[resilient(deadline_ms = 10_000, fallback = fallback_with_a_call)]
async fn answered_by_a_call_in_its_fallback() -> Result<u32, E> {
    tokio::time::sleep(Duration::from_millis(100)).await;
    Err(E::Flaky)
}

async fn fallback_with_a_call(_: E) -> Result<u32, E> {
    nested().await
}

/// The calls a fallback makes for a call in flight are part of it: a
/// draining shutdown admits them (review 19: they were refused with
/// `ShuttingDown`, failing the call the drain waited for).
#[tokio::test(start_paused = true)]
async fn a_drain_admits_the_calls_of_a_fallback_of_a_call_in_flight() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let shutdown = GracefulShutdown::install();
    let call = tokio::spawn(answered_by_a_call_in_its_fallback());
    tokio::time::sleep(Duration::from_millis(50)).await;
    let report = shutdown.drain(Duration::from_secs(10)).await;
    let answer = call.await.unwrap();
    // A new call's fallback is not waited for, and its calls are new.
    let refused = answered_by_a_call_in_its_fallback().await;
    shutdown.resume();
    assert!(report.is_clean(), "{report}");
    assert_eq!(answer.unwrap(), 1, "the fallback's nested call was refused");
    assert_eq!(refusal(refused), Some(ErrorKind::ShuttingDown));
}

/// Runs a unit of work inside its attempt.
#[resilient(deadline_ms = 10_000)]
async fn admits_work_inside() -> Result<u32, E> {
    tokio::time::sleep(Duration::from_millis(100)).await;
    resilient::admitted(async { 4 }).await.map_err(E::from)
}

/// `admitted` inside work in flight is part of it (review 19: it asked
/// as a new unit of work and was refused, failing the call around it).
#[tokio::test(start_paused = true)]
async fn admitted_inside_a_call_in_flight_is_part_of_it() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let shutdown = GracefulShutdown::install();
    let call = tokio::spawn(admits_work_inside());
    tokio::time::sleep(Duration::from_millis(50)).await;
    let report = shutdown.drain(Duration::from_secs(10)).await;
    let answer = call.await.unwrap();
    shutdown.resume();
    assert!(report.is_clean(), "{report}");
    assert_eq!(answer.unwrap(), 4);
}

static FOLLOW_UPS: AtomicU32 = AtomicU32::new(0);
static FOLLOW_UPS_REFUSED: AtomicU32 = AtomicU32::new(0);

/// Answers at once, leaving work of its own through `propagate` (a cache
/// refresh, an audit write) that makes its call a second later.
#[resilient(deadline_ms = 120_000)]
async fn leaves_follow_up_work() -> Result<u32, E> {
    tokio::spawn(resilient::propagate(async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        match nested().await {
            Ok(_) => FOLLOW_UPS.fetch_add(1, Ordering::SeqCst),
            Err(_) => FOLLOW_UPS_REFUSED.fetch_add(1, Ordering::SeqCst),
        };
    }));
    Ok(3)
}

/// Work a call leaves through `propagate` is part of the work in flight
/// until it ends: the drain waits for it and admits its call (review 38:
/// the drain reported every call finished at once, and then admitted the
/// spawned work's call, which a process exiting on that report would cut).
#[tokio::test(start_paused = true)]
async fn a_drain_waits_for_work_a_call_left_through_propagate() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let shutdown = GracefulShutdown::install();
    let refused = FOLLOW_UPS_REFUSED.load(Ordering::SeqCst);
    let done = FOLLOW_UPS.load(Ordering::SeqCst);
    assert_eq!(leaves_follow_up_work().await.unwrap(), 3);
    // The call has ended; the work it left has not.
    assert_eq!(shutdown.in_flight(), 1);
    let start = Instant::now();
    let report = shutdown.drain(Duration::from_secs(30)).await;
    let waited = start.elapsed();
    shutdown.resume();
    assert!(report.is_clean(), "{report}");
    assert_eq!(waited, Duration::from_secs(1));
    assert_eq!(FOLLOW_UPS.load(Ordering::SeqCst), done + 1);
    assert_eq!(FOLLOW_UPS_REFUSED.load(Ordering::SeqCst), refused);
    assert_eq!(shutdown.in_flight(), 0);
}

/// A call's propagated work that is aborted (or otherwise dropped) leaves
/// the count with it.
#[tokio::test(start_paused = true)]
async fn propagated_work_aborted_leaves_the_in_flight_count() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let shutdown = GracefulShutdown::install();
    // The handle is awaited below, not inside the unit of work.
    #[allow(clippy::async_yields_async)]
    let task = resilient::admitted(async {
        tokio::spawn(resilient::propagate(tokio::time::sleep(
            Duration::from_secs(3_600),
        )))
    })
    .await
    .unwrap();
    settle().await;
    assert_eq!(shutdown.in_flight(), 1);
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    assert_eq!(shutdown.in_flight(), 0);
    let report = shutdown.drain(Duration::from_secs(30)).await;
    shutdown.resume();
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.waited, Duration::ZERO);
}

/// Outside any call, `propagate` passes the deadline and registry on and
/// holds nothing: a task spawned from start-up code is not work in flight,
/// and its calls are new ones, refused while draining.
#[tokio::test(start_paused = true)]
async fn work_propagated_outside_any_call_is_not_in_flight() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let shutdown = GracefulShutdown::install();
    let task = tokio::spawn(resilient::propagate(async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        nested().await
    }));
    settle().await;
    assert_eq!(shutdown.in_flight(), 0);
    let report = shutdown.drain(Duration::from_secs(30)).await;
    let answer = task.await.unwrap();
    shutdown.resume();
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.waited, Duration::ZERO);
    assert_eq!(refusal(answer), Some(ErrorKind::ShuttingDown));
}

static ORDERED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Plain work (no annotated call in flight), then done.
async fn slow_order() -> Result<String, resilient::http::Error> {
    tokio::time::sleep(Duration::from_millis(300)).await;
    ORDERED.store(true, Ordering::SeqCst);
    Ok("ordered".to_owned())
}

/// Regression (found from outside): `IdempotencyLayer` runs a started
/// handler to its end on a task of its own, but nothing counted that task
/// as work in flight once its request was gone (the client timed out), so
/// a drain between the handler's annotated calls reported all well while
/// the handler still ran. Real sockets, real time.
#[tokio::test]
async fn a_drain_waits_for_a_handler_the_idempotency_layer_runs_to_its_end() {
    use axum::Router;
    use axum::routing::post;
    use resilient::tower::{IdempotencyLayer, ResilienceLayer};
    let _turn = ONE_AT_A_TIME.lock().await;
    let shutdown = GracefulShutdown::install();
    let router = Router::new()
        .route("/orders", post(slow_order))
        .layer(IdempotencyLayer::new())
        .layer(ResilienceLayer::new());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    let impatient = reqwest::Client::builder()
        .timeout(Duration::from_millis(50))
        .build()
        .unwrap();
    let sent = impatient
        .post(format!("http://{addr}/orders"))
        .header("idempotency-key", "order-7")
        .body("7")
        .send()
        .await;
    assert!(sent.is_err(), "the client gives up first");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!ORDERED.load(Ordering::SeqCst), "the handler still runs");
    // One piece of work: the handler (counted once, though it runs in the
    // request's admitted unit and is spawned through `propagate`).
    assert_eq!(shutdown.in_flight(), 1);
    let report = shutdown.drain(Duration::from_secs(5)).await;
    assert!(report.is_clean(), "{report}");
    assert!(
        ORDERED.load(Ordering::SeqCst),
        "the drain returned before the handler ended"
    );
    shutdown.resume();
    server.abort();
}

static PAGES: AtomicU32 = AtomicU32::new(0);
static PAGES_REFUSED: AtomicU32 = AtomicU32::new(0);

/// One page of a dependency, fetched while a response body streams.
#[resilient(timeout_ms = 1_000)]
async fn page(i: u32) -> Result<String, resilient::http::Error> {
    Ok(format!("page {i}\n"))
}

/// Answers its head at once and produces its body as it goes, each piece
/// asking the dependency (a listing proxied page by page, a report).
async fn listing() -> axum::response::Response {
    let stream = futures_util::stream::unfold(0u32, |i| async move {
        if i >= 5 {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let piece = match page(i).await {
            Ok(piece) => {
                PAGES.fetch_add(1, Ordering::SeqCst);
                piece
            }
            Err(e) => {
                PAGES_REFUSED.fetch_add(1, Ordering::SeqCst);
                format!("ERROR {e}\n")
            }
        };
        Some((Ok::<_, std::io::Error>(piece), i + 1))
    });
    axum::response::Response::new(axum::body::Body::from_stream(stream))
}

/// A response body still streaming is part of its request's work: the
/// drain waits for it and admits its calls (review 39: the drain reported
/// every call finished at once, then refused each of the body's calls,
/// and the client got a 200 of five errors). Real sockets, real time.
#[tokio::test]
async fn a_drain_waits_for_a_response_body_still_streaming() {
    use axum::Router;
    use axum::routing::get;
    use resilient::tower::ResilienceLayer;
    let _turn = ONE_AT_A_TIME.lock().await;
    let shutdown = GracefulShutdown::install();
    let (pages, refused) = (
        PAGES.load(Ordering::SeqCst),
        PAGES_REFUSED.load(Ordering::SeqCst),
    );
    let router = Router::new()
        .route("/listing", get(listing))
        .layer(ResilienceLayer::new());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    let response = reqwest::get(format!("http://{addr}/listing"))
        .await
        .unwrap();
    assert!(response.status().is_success());
    // The head is here; the body is on its way.
    let body = tokio::spawn(async move { response.text().await.unwrap() });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(shutdown.in_flight(), 1, "the request is still being served");
    let start = std::time::Instant::now();
    let report = shutdown.drain(Duration::from_secs(5)).await;
    let waited = start.elapsed();
    let body = body.await.unwrap();
    shutdown.resume();
    server.abort();
    assert!(report.is_clean(), "{report}");
    assert_eq!(PAGES_REFUSED.load(Ordering::SeqCst), refused, "{body}");
    assert_eq!(PAGES.load(Ordering::SeqCst), pages + 5, "{body}");
    assert!(waited >= Duration::from_millis(800), "{waited:?}");
}

static SECOND_STEPS: AtomicU32 = AtomicU32::new(0);
static SECOND_STEPS_REFUSED: AtomicU32 = AtomicU32::new(0);

#[resilient(timeout_ms = 1_000)]
async fn step(n: u32) -> Result<u32, resilient::http::Error> {
    Ok(n)
}

/// Reserves, waits, charges.
async fn two_steps() -> Result<String, resilient::http::Error> {
    step(1).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    match step(2).await {
        Ok(_) => {
            SECOND_STEPS.fetch_add(1, Ordering::SeqCst);
            Ok("done".to_owned())
        }
        Err(e) => {
            SECOND_STEPS_REFUSED.fetch_add(1, Ordering::SeqCst);
            Err(e)
        }
    }
}

/// `IdempotencyLayer` without `ResilienceLayer`: the handler it runs on a
/// task of its own is work in flight, so its calls are admitted while the
/// drain waits for it (review 39: it was counted, and its second step
/// refused, the order left half done and that answer kept under the key).
#[tokio::test]
async fn a_handler_the_idempotency_layer_runs_alone_has_its_calls_admitted() {
    use axum::Router;
    use axum::routing::post;
    use resilient::tower::IdempotencyLayer;
    let _turn = ONE_AT_A_TIME.lock().await;
    let shutdown = GracefulShutdown::install();
    let (done, refused) = (
        SECOND_STEPS.load(Ordering::SeqCst),
        SECOND_STEPS_REFUSED.load(Ordering::SeqCst),
    );
    let router = Router::new()
        .route("/orders", post(two_steps))
        .layer(IdempotencyLayer::new());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    let request = tokio::spawn(async move {
        let response = reqwest::Client::new()
            .post(format!("http://{addr}/orders"))
            .header("idempotency-key", "two-steps-1")
            .body("x")
            .send()
            .await
            .unwrap();
        (response.status(), response.text().await.unwrap())
    });
    // Until the handler runs (counted), however long the request takes.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while shutdown.in_flight() == 0 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(shutdown.in_flight(), 1, "the handler is counted");
    let report = shutdown.drain(Duration::from_secs(5)).await;
    let (status, body) = request.await.unwrap();
    shutdown.resume();
    server.abort();
    assert!(report.is_clean(), "{report}");
    assert_eq!(
        SECOND_STEPS_REFUSED.load(Ordering::SeqCst),
        refused,
        "{status} {body}"
    );
    assert_eq!(SECOND_STEPS.load(Ordering::SeqCst), done + 1);
    assert_eq!((status.as_u16(), body.as_str()), (200, "done"));
}

static CHARGES_RUN: AtomicU32 = AtomicU32::new(0);

async fn charge_handler() -> &'static str {
    CHARGES_RUN.fetch_add(1, Ordering::SeqCst);
    "charged"
}

/// A new request that carries an `Idempotency-Key` is refused while the
/// process drains, before its handler runs, as one without a key is,
/// whichever of `IdempotencyLayer` and `ResilienceLayer` is outside, and
/// with `IdempotencyLayer` alone (helper audit, 2026-11-27: with
/// `IdempotencyLayer` outside, the keyed request was taken for work already
/// in flight and its handler ran; the drain would have waited for it too).
/// Its key is not kept: once the process serves again, the request runs.
#[tokio::test]
async fn a_new_keyed_request_is_refused_while_draining_whatever_the_order_of_the_layers() {
    use axum::Router;
    use axum::routing::post;
    use resilient::tower::{IdempotencyLayer, ResilienceLayer};
    let _turn = ONE_AT_A_TIME.lock().await;
    let shutdown = GracefulShutdown::install();
    let routes = || Router::new().route("/charges", post(charge_handler));
    for (order, router) in [
        (
            "idempotency outside",
            routes()
                .layer(ResilienceLayer::new())
                .layer(IdempotencyLayer::new()),
        ),
        (
            "resilience outside",
            routes()
                .layer(IdempotencyLayer::new())
                .layer(ResilienceLayer::new()),
        ),
        ("idempotency alone", routes().layer(IdempotencyLayer::new())),
    ] {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
        let client = reqwest::Client::new();
        let send = |key: &'static str| {
            client
                .post(format!("http://{addr}/charges"))
                .header("idempotency-key", key)
                .body("1")
                .send()
        };
        let before = CHARGES_RUN.load(Ordering::SeqCst);
        assert!(shutdown.drain(Duration::from_millis(100)).await.is_clean());
        let refused = send("new-during-drain").await.unwrap();
        let status = refused.status();
        let do_not_retry = refused.headers().get("do-not-retry").cloned();
        let body = refused.text().await.unwrap();
        assert_eq!(status.as_u16(), 503, "{order}: {body}");
        assert_eq!(do_not_retry, None, "{order}: another instance may take it");
        assert_eq!(CHARGES_RUN.load(Ordering::SeqCst), before, "{order}");
        shutdown.resume();
        let served = send("new-during-drain").await.unwrap();
        assert_eq!(served.status().as_u16(), 200, "{order}");
        assert_eq!(served.text().await.unwrap(), "charged", "{order}");
        assert_eq!(CHARGES_RUN.load(Ordering::SeqCst), before + 1, "{order}");
        server.abort();
    }
}

#[resilient(deadline_ms = 10_000)]
async fn grpc_dependency() -> Result<(), tonic::Status> {
    Ok(())
}

/// A draining instance's refusal, as a gRPC status, carries no pushback:
/// like its 503 over HTTP, the caller may retry it on another instance.
#[tokio::test(start_paused = true)]
async fn a_draining_instance_refusal_over_grpc_may_be_retried_elsewhere() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let shutdown = GracefulShutdown::install();
    let report = shutdown.drain(Duration::from_secs(1)).await;
    assert!(report.is_clean());
    let status = grpc_dependency().await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable);
    assert!(
        status.metadata().get("grpc-retry-pushback-ms").is_none(),
        "{status:?}"
    );
    // As its caller reads it off the wire: retried (in this process it is
    // still the library's refusal, final for enclosing layers).
    let sent =
        tonic::Status::with_metadata(status.code(), status.message(), status.metadata().clone());
    assert_eq!(sent.classify(), Classification::Transient);
    assert_eq!(status.classify(), Classification::Permanent);
    shutdown.resume();
}

// ---------------------------------------------------------------- panics

#[resilient(deadline_ms = 60_000)]
async fn spawns_panicking() -> Result<tokio::task::JoinHandle<()>, E> {
    Ok(tokio::spawn(resilient::propagate(async {
        tokio::time::sleep(Duration::from_millis(10)).await;
        panic!("boom in propagated work");
    })))
}

#[tokio::test(start_paused = true)]
async fn a_panicking_propagated_future_leaves_the_count() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let shutdown = GracefulShutdown::install();
    let h = spawns_panicking().await.unwrap();
    assert_eq!(shutdown.in_flight(), 1);
    assert!(h.await.unwrap_err().is_panic());
    assert_eq!(shutdown.in_flight(), 0);
}

// ---------------------------------------------------------------- retries

static RETRY_FAILS: AtomicU32 = AtomicU32::new(0);
static RETRY_SPAWNED_DONE: AtomicU32 = AtomicU32::new(0);

#[resilient(retries = 2, idempotent, base_ms = 1, cap_ms = 1)]
async fn spawns_each_attempt() -> Result<u32, E> {
    tokio::spawn(resilient::propagate(async {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let r = nested().await;
        assert!(r.is_ok(), "a call of propagated work is admitted: {r:?}");
        RETRY_SPAWNED_DONE.fetch_add(1, Ordering::SeqCst);
    }));
    if RETRY_FAILS
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
    {
        return Err(E::Flaky);
    }
    Ok(7)
}

#[tokio::test(start_paused = true)]
async fn propagate_in_each_attempt_of_a_retried_call_is_counted_once_each() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let shutdown = GracefulShutdown::install();
    RETRY_FAILS.store(2, Ordering::SeqCst);
    RETRY_SPAWNED_DONE.store(0, Ordering::SeqCst);
    assert_eq!(spawns_each_attempt().await.unwrap(), 7);
    settle().await;
    assert_eq!(shutdown.in_flight(), 3);
    let report = shutdown.drain(Duration::from_secs(30)).await;
    shutdown.resume();
    assert!(report.is_clean(), "{report}");
    assert_eq!(RETRY_SPAWNED_DONE.load(Ordering::SeqCst), 3);
    assert_eq!(shutdown.in_flight(), 0);
}

// ---------------------------------------------------------------- nested

static NESTED_INNER: AtomicU32 = AtomicU32::new(0);

#[resilient(deadline_ms = 60_000)]
async fn spawns_nested() -> Result<u32, E> {
    tokio::spawn(resilient::propagate(async {
        // Outside any annotated call, but inside counted work.
        tokio::spawn(resilient::propagate(async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            let r = nested().await;
            if r.is_ok() {
                NESTED_INNER.fetch_add(1, Ordering::SeqCst);
            }
        }));
    }));
    Ok(1)
}

#[tokio::test(start_paused = true)]
async fn propagate_inside_propagated_work_is_waited_for() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let shutdown = GracefulShutdown::install();
    NESTED_INNER.store(0, Ordering::SeqCst);
    spawns_nested().await.unwrap();
    settle().await;
    assert_eq!(shutdown.in_flight(), 1, "the outer ended, the inner runs");
    let report = shutdown.drain(Duration::from_secs(30)).await;
    shutdown.resume();
    assert!(report.is_clean(), "{report}");
    assert_eq!(NESTED_INNER.load(Ordering::SeqCst), 1);
    assert_eq!(report.waited, Duration::from_secs(5));
}

// ---------------------------------------------------------------- fallback

static FALLBACK_SPAWNED: AtomicU32 = AtomicU32::new(0);

async fn fb_spawns(_: E) -> Result<u32, E> {
    tokio::spawn(resilient::propagate(async {
        tokio::time::sleep(Duration::from_secs(3)).await;
        if nested().await.is_ok() {
            FALLBACK_SPAWNED.fetch_add(1, Ordering::SeqCst);
        }
    }));
    Ok(9)
}

#[resilient(fallback = fb_spawns)]
async fn fails_to_fallback() -> Result<u32, E> {
    Err(E::Flaky)
}

#[tokio::test(start_paused = true)]
async fn propagate_in_a_fallback_is_waited_for() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let shutdown = GracefulShutdown::install();
    FALLBACK_SPAWNED.store(0, Ordering::SeqCst);
    assert_eq!(fails_to_fallback().await.unwrap(), 9);
    settle().await;
    assert_eq!(shutdown.in_flight(), 1);
    let report = shutdown.drain(Duration::from_secs(30)).await;
    shutdown.resume();
    assert!(report.is_clean(), "{report}");
    assert_eq!(FALLBACK_SPAWNED.load(Ordering::SeqCst), 1);
}

// ---------------------------------------------------------------- never polled

#[tokio::test(start_paused = true)]
async fn a_propagated_future_never_polled_and_dropped_leaves_the_count() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let shutdown = GracefulShutdown::install();
    // Made inside the unit of work, never awaited: on purpose.
    #[allow(clippy::async_yields_async)]
    let fut = resilient::admitted(async { resilient::propagate(async { 1 }) })
        .await
        .unwrap();
    assert_eq!(shutdown.in_flight(), 1);
    drop(fut);
    assert_eq!(shutdown.in_flight(), 0);
}

// ---------------------------------------------------------------- runtime shutdown

#[test]
fn runtime_shutdown_with_propagated_work_leaves_the_count() {
    let _turn = ONE_AT_A_TIME.blocking_lock();
    let shutdown = GracefulShutdown::install();
    for flavor in 0..2 {
        let rt = if flavor == 0 {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
        } else {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap()
        };
        rt.block_on(async {
            resilient::admitted(async {
                tokio::spawn(resilient::propagate(async {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                }));
                // And one spawned but never polled (spawned from a
                // blocking thread after the runtime's last poll).
            })
            .await
            .unwrap();
            settle().await;
        });
        assert_eq!(shutdown.in_flight(), 1, "flavor {flavor}");
        drop(rt);
        assert_eq!(shutdown.in_flight(), 0, "flavor {flavor}");
    }
}

#[test]
fn runtime_shutdown_background_with_propagated_work_leaves_the_count() {
    let _turn = ONE_AT_A_TIME.blocking_lock();
    let shutdown = GracefulShutdown::install();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        resilient::admitted(async {
            for _ in 0..10 {
                tokio::spawn(resilient::propagate(async {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                }));
            }
        })
        .await
        .unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    });
    assert_eq!(shutdown.in_flight(), 10);
    rt.shutdown_timeout(Duration::from_secs(5));
    assert_eq!(shutdown.in_flight(), 0);
}

// ---------------------------------------------------------------- drain: still_running exact

#[tokio::test(start_paused = true)]
async fn still_running_counts_propagated_work_past_the_bound() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let shutdown = GracefulShutdown::install();
    let handles = resilient::admitted(async {
        (0..3)
            .map(|i| {
                tokio::spawn(resilient::propagate(async move {
                    tokio::time::sleep(Duration::from_secs(10 * (i + 1))).await;
                }))
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    settle().await;
    let report = shutdown.drain(Duration::from_secs(15)).await;
    assert_eq!(report.still_running, 2, "{report}");
    assert_eq!(report.waited, Duration::from_secs(15));
    for h in handles {
        h.abort();
        let _ = h.await;
    }
    assert_eq!(shutdown.in_flight(), 0);
    shutdown.resume();
}

// ---------------------------------------------------------------- drain: calls during drain

#[tokio::test(start_paused = true)]
async fn propagated_work_started_during_the_drain_is_admitted_and_waited_for() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let shutdown = GracefulShutdown::install();
    static DONE: AtomicU32 = AtomicU32::new(0);
    DONE.store(0, Ordering::SeqCst);
    let unit = tokio::spawn(resilient::admitted(async {
        tokio::time::sleep(Duration::from_secs(2)).await;
        // The drain has begun: the unit spawns follow-up work.
        tokio::spawn(resilient::propagate(async {
            tokio::time::sleep(Duration::from_secs(2)).await;
            let r = nested().await;
            assert!(refusal_of(&r).is_none(), "{r:?}");
            DONE.fetch_add(1, Ordering::SeqCst);
        }));
    }));
    settle().await;
    let drain = tokio::spawn(async move { shutdown.drain(Duration::from_secs(30)).await });
    settle().await;
    let report = drain.await.unwrap();
    unit.await.unwrap().unwrap();
    shutdown.resume();
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.waited, Duration::from_secs(4));
    assert_eq!(DONE.load(Ordering::SeqCst), 1);
}

// ---------------------------------------------------------------- select! cancel

#[resilient(deadline_ms = 60_000)]
async fn spawns_and_hangs() -> Result<u32, E> {
    tokio::spawn(resilient::propagate(async {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }));
    std::future::pending::<()>().await;
    Ok(1)
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_call_leaves_its_propagated_work_counted_until_it_ends() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let shutdown = GracefulShutdown::install();
    let r = tokio::time::timeout(Duration::from_millis(100), spawns_and_hangs()).await;
    assert!(r.is_err());
    assert_eq!(shutdown.in_flight(), 1);
    let report = shutdown.drain(Duration::from_secs(30)).await;
    shutdown.resume();
    assert!(report.is_clean(), "{report}");
    assert_eq!(shutdown.in_flight(), 0);
}

// ---------------------------------------------------------------- JoinSet

#[tokio::test(start_paused = true)]
async fn a_joinset_dropped_leaves_the_count() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let shutdown = GracefulShutdown::install();
    let set = resilient::admitted(async {
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..5 {
            set.spawn(resilient::propagate(tokio::time::sleep(
                Duration::from_secs(100),
            )));
        }
        set
    })
    .await
    .unwrap();
    settle().await;
    assert_eq!(shutdown.in_flight(), 5);
    drop(set);
    settle().await;
    assert_eq!(shutdown.in_flight(), 0);
}
