//! gRPC over tonic against a real server on 127.0.0.1 (the standard
//! `grpc.health.v1` service from `tonic-health`, so no protoc is needed):
//! `tonic::Status` as an annotated function's error type, the deadline sent
//! in `grpc-timeout` and read by `ResilienceLayer` into the handler's
//! deadline, and a passed deadline answered `DEADLINE_EXCEEDED` at once.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use resilient::tonic::RequestExt;
use resilient::tower::ResilienceLayer;
use resilient::{Classification, Classify, resilient};
use tonic::transport::{Channel, Server, server::TcpIncoming};
use tonic::{Code, Status};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;
use tower::Layer;

type Seen = Arc<Mutex<Vec<Option<Duration>>>>;

/// Starts the health service behind `ResilienceLayer`, recording the
/// deadline each handler runs under.
async fn serve() -> (SocketAddr, Seen) {
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter
        .set_service_status("payments", tonic_health::ServingStatus::Serving)
        .await;
    let seen: Seen = Arc::default();
    let record = {
        let seen = seen.clone();
        tower::util::MapFutureLayer::new(move |fut| {
            let seen = seen.clone();
            async move {
                seen.lock().unwrap().push(resilient::remaining());
                fut.await
            }
        })
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _reporter = reporter;
        Server::builder()
            .layer(ResilienceLayer::new())
            .layer(record)
            .add_service(health)
            .serve_with_incoming(TcpIncoming::from(listener))
            .await
            .unwrap()
    });
    (addr, seen)
}

/// A registry whose breaker `name` judges its last 4 calls, once it has 4.
fn breaker_of_four(name: &str) -> resilient::Registry {
    resilient::Registry::builder()
        .breaker(
            name,
            resilient::BreakerConfig::default()
                .sliding_window(resilient::SlidingWindow::CountBased { size: 4 })
                .minimum_number_of_calls(4),
        )
        .build()
        .unwrap()
}

fn client(addr: SocketAddr) -> HealthClient<Channel> {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_lazy();
    HealthClient::new(channel)
}

#[resilient(retries = 3, base_ms = 1, cap_ms = 5, deadline_ms = 800, idempotent)]
async fn check(mut client: HealthClient<Channel>, service: &str) -> Result<i32, Status> {
    let mut request = tonic::Request::new(HealthCheckRequest {
        service: service.to_owned(),
    });
    request.propagate_deadline();
    Ok(client.check(request).await?.into_inner().status)
}

#[tokio::test]
async fn the_deadline_crosses_in_grpc_timeout_and_becomes_the_handlers() {
    let (addr, seen) = serve().await;
    let status = check(client(addr), "payments").await.unwrap();
    assert_eq!(
        status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );
    let seen = seen.lock().unwrap();
    let remaining = seen[0].expect("the handler runs under the caller's deadline");
    assert!(remaining <= Duration::from_millis(800), "{remaining:?}");
    assert!(remaining > Duration::from_millis(100), "{remaining:?}");
}

#[tokio::test]
async fn a_permanent_status_is_not_retried() {
    let (addr, seen) = serve().await;
    let (result, report) = resilient::observe(check(client(addr), "no-such-service")).await;
    let status = result.unwrap_err();
    assert_eq!(status.code(), Code::NotFound);
    assert_eq!(status.classify(), Classification::Permanent);
    assert_eq!(report.attempts().len(), 1);
    assert_eq!(seen.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn an_unreachable_server_is_unavailable_retried_and_certainly_not_done() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let (result, report) = resilient::observe(check(client(addr), "payments")).await;
    let status = result.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert_eq!(status.classify(), Classification::Transient);
    assert_eq!(report.attempts().len(), 4);
    assert!(!report.may_have_taken_effect());
}

/// Without pushback: the caller's own deadline decides whether another
/// attempt fits (the budget it sent may have been one attempt's).
#[tokio::test]
async fn a_passed_deadline_is_answered_deadline_exceeded_which_the_caller_may_retry() {
    let (addr, seen) = serve().await;
    let mut request = tonic::Request::new(HealthCheckRequest {
        service: "payments".into(),
    });
    request
        .metadata_mut()
        .insert("request-budget-ms", "0".parse().unwrap());
    let status = client(addr).check(request).await.unwrap_err();
    assert_eq!(status.code(), Code::DeadlineExceeded);
    assert!(status.metadata().get("grpc-retry-pushback-ms").is_none());
    assert_eq!(status.classify(), Classification::Transient);
    assert!(seen.lock().unwrap().is_empty(), "the handler did not run");
}

#[test]
fn refusals_become_statuses_no_one_retries() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let refusal = rt
        .block_on(resilient::with_deadline(Duration::ZERO, async {}))
        .unwrap_err();
    let status = Status::from(refusal);
    assert_eq!(status.code(), Code::DeadlineExceeded);
    // A deadline says the time the caller gave is spent: its own deadline
    // decides whether another attempt fits.
    assert!(status.metadata().get("grpc-retry-pushback-ms").is_none());
    let sent = Status::with_metadata(status.code(), status.message(), status.metadata().clone());
    assert_eq!(sent.classify(), Classification::Transient);
    // In this process it is still the refusal, final for enclosing layers
    // (as `resilient::http::Error::from(refusal)` is).
    assert_eq!(status.classify(), Classification::Permanent);
    assert_eq!(status.is_refusal(), Some(true));

    // Any other refusal is this service's decision: no one retries it.
    let breaker = resilient::Breaker::new(
        "payments",
        resilient::BreakerConfig::default().initial_state(resilient::State::ForcedOpen),
    )
    .unwrap();
    let open = Status::from(breaker.try_acquire().unwrap_err());
    assert_eq!(open.code(), Code::Unavailable);
    assert_eq!(open.metadata().get("grpc-retry-pushback-ms").unwrap(), "-1");
    // In this process, the refusal it was made from: final, and no
    // failure for an enclosing breaker.
    assert_eq!(open.classify(), Classification::Permanent);
    assert_eq!(open.is_refusal(), Some(true));
    // As its caller reads it off the wire: not retried, but this service
    // failing (its breaker open).
    let sent = Status::with_metadata(open.code(), open.message(), open.metadata().clone());
    assert_eq!(
        sent.classify(),
        Classification::DoNotRetry { retry_after: None }
    );
    assert_eq!(sent.is_refusal(), Some(false));

    // tonic's own client-side timeout, from the `grpc-timeout` that
    // `propagate_deadline` sets, ends the attempt as it times out.
    let expired = Status::cancelled(tonic::TimeoutExpired(()).to_string());
    assert_eq!(expired.classify(), Classification::Transient);
    assert_eq!(
        Status::cancelled("the client went away").classify(),
        Classification::Permanent
    );

    let pushed = Status::with_metadata(Code::ResourceExhausted, "slow down", {
        let mut m = tonic::metadata::MetadataMap::new();
        m.insert("grpc-retry-pushback-ms", "250".parse().unwrap());
        m
    });
    assert_eq!(
        pushed.classify(),
        Classification::Throttled {
            retry_after: Some(Duration::from_millis(250))
        }
    );
}

#[resilient(retries = 3, base_ms = 1, cap_ms = 2, idempotent)]
async fn flaky_dependency() -> Result<(), std::io::Error> {
    Err(std::io::ErrorKind::ConnectionRefused.into())
}

/// The gRPC branch of the layer's "do not retry": a handler whose
/// annotated call gave up answers with `grpc-retry-pushback-ms: -1`, which
/// a client does not retry (proposal A6) but counts as the service failing,
/// for its breaker. Called in process: a
/// gRPC handler of our own would need generated code.
#[tokio::test]
async fn a_grpc_handler_that_gave_up_answers_pushback_minus_one() {
    use tower::{Service, ServiceExt};

    let handler = tower::service_fn(|_: http::Request<()>| async {
        let failed = flaky_dependency().await.is_err();
        let status = if failed {
            Status::unavailable("db down")
        } else {
            Status::ok("")
        };
        Ok::<_, std::convert::Infallible>(status.into_http::<()>())
    });
    let mut service = ResilienceLayer::new().layer(handler);
    let request = http::Request::builder()
        .header("content-type", "application/grpc")
        .body(())
        .unwrap();
    let response = service.ready().await.unwrap().call(request).await.unwrap();
    assert_eq!(response.headers()["grpc-retry-pushback-ms"], "-1");
    let status = Status::from_header_map(response.headers()).unwrap();
    assert_eq!(status.code(), Code::Unavailable);
    let metadata = tonic::metadata::MetadataMap::from_headers(response.headers().clone());
    let status = Status::with_metadata(status.code(), status.message(), metadata);
    assert_eq!(
        status.classify(),
        Classification::DoNotRetry { retry_after: None }
    );
    assert!(!status.classify().is_retryable());
    assert!(status.classify().is_dependency_failure());
}

/// A gRPC service whose own dependency is down answers every call
/// `UNAVAILABLE` with pushback -1 (it already retried, or its breaker is
/// open). Its callers do not retry that, and their breaker on it counts it
/// as a failure and opens: before, it was classified permanent, which a
/// breaker ignores, so callers kept sending every call into it.
#[tokio::test]
async fn a_breaker_opens_on_a_service_answering_unavailable_with_pushback_minus_one() {
    breaker_opens_on_a_service_answering("14", Some("-1")).await;
}

/// A gRPC service that fails every call with `INTERNAL` (as an HTTP
/// service answering 500) is not retried, and its callers' breaker opens
/// on it (before, `INTERNAL` was permanent: never counted; review 13
/// found the same for HTTP 500).
#[tokio::test]
async fn a_breaker_opens_on_a_service_answering_internal() {
    breaker_opens_on_a_service_answering("13", None).await;
}

/// A server answering every call with `grpc-status: code` (and the
/// pushback, if given): six calls through a breaker of 4 make four
/// requests, none retried, and the breaker opens.
async fn breaker_opens_on_a_service_answering(code: &'static str, pushback: Option<&'static str>) {
    use std::sync::atomic::{AtomicU32, Ordering};

    let calls = Arc::new(AtomicU32::new(0));
    let seen_calls = calls.clone();
    let down = tower::layer::layer_fn(move |_inner: tonic::service::Routes| {
        let calls = calls.clone();
        tower::service_fn(move |_: http::Request<tonic::body::Body>| {
            calls.fetch_add(1, Ordering::SeqCst);
            let mut answer = http::Response::builder()
                .header("content-type", "application/grpc")
                .header("grpc-status", code)
                .header("grpc-message", "dependency%20down");
            if let Some(pushback) = pushback {
                answer = answer.header("grpc-retry-pushback-ms", pushback);
            }
            let answer = answer.body(tonic::body::Body::empty()).unwrap();
            async move { Ok::<_, std::convert::Infallible>(answer) }
        })
    });
    let (_reporter, health) = tonic_health::server::health_reporter();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        Server::builder()
            .layer(down)
            .add_service(health)
            .serve_with_incoming(TcpIncoming::from(listener))
            .await
            .unwrap()
    });

    let registry = breaker_of_four("health");
    let mut seen = Vec::new();
    registry
        .scope(async {
            for _ in 0..6 {
                seen.push(check_through_breaker(client(addr)).await.unwrap_err());
            }
        })
        .await;
    server.abort();
    assert_eq!(
        registry.breaker("health").unwrap().state(),
        resilient::State::Open,
        "{seen:?}"
    );
    // Four calls, none retried; then refused without a call.
    assert_eq!(seen_calls.load(Ordering::SeqCst), 4, "{seen:?}");
    for status in &seen[..4] {
        assert_eq!(status.code() as i32, code.parse::<i32>().unwrap());
        assert_eq!(
            status.classify(),
            Classification::DoNotRetry { retry_after: None }
        );
    }
    for status in &seen[4..] {
        assert_eq!(status.is_refusal(), Some(true), "{status:?}");
    }
}

#[resilient(retries = 3, base_ms = 1, cap_ms = 5, breaker = "health", idempotent)]
async fn check_through_breaker(mut client: HealthClient<Channel>) -> Result<i32, Status> {
    let request = tonic::Request::new(HealthCheckRequest {
        service: "payments".to_owned(),
    });
    Ok(client.check(request).await?.into_inner().status)
}

/// A write this service makes before its handler fails (always succeeds).
#[resilient(deadline_ms = 1000)]
async fn write_ledger() -> Result<(), std::io::Error> {
    Ok(())
}

#[resilient(deadline_ms = 800)]
async fn check_once(mut client: HealthClient<Channel>) -> Result<i32, Status> {
    let request = tonic::Request::new(HealthCheckRequest {
        service: "payments".to_owned(),
    });
    Ok(client.check(request).await?.into_inner().status)
}

/// A gRPC handler that wrote through an annotated call and then failed
/// with `UNAVAILABLE`, which alone reads "not processed": behind
/// `ResilienceLayer` its answer carries `may-have-taken-effect: ?1`, and
/// the caller's report says the call may have taken effect. Before, the
/// caller read "certainly not done" for a request that wrote.
#[tokio::test]
async fn a_grpc_failure_after_a_write_says_it_may_have_taken_effect() {
    let acting = tower::layer::layer_fn(|_inner: tonic::service::Routes| {
        tower::service_fn(|_: http::Request<tonic::body::Body>| async {
            write_ledger().await.unwrap();
            Ok::<_, std::convert::Infallible>(
                Status::unavailable("mailer down")
                    .into_http::<tonic::body::Body>()
                    .map(|_| tonic::body::Body::empty()),
            )
        })
    });
    let (_reporter, health) = tonic_health::server::health_reporter();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        Server::builder()
            .layer(ResilienceLayer::new())
            .layer(acting)
            .add_service(health)
            .serve_with_incoming(TcpIncoming::from(listener))
            .await
            .unwrap()
    });
    let (result, report) = resilient::observe(check_once(client(addr))).await;
    server.abort();
    let status = result.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(status.may_have_taken_effect(), "{status:?}");
    assert!(report.may_have_taken_effect(), "{report:?}");
    // The mark alone: an UNAVAILABLE without it did nothing.
    assert!(!Status::unavailable("down").may_have_taken_effect());
}

#[resilient(timeout_ms = 100)]
async fn check_within_100ms(mut client: HealthClient<Channel>) -> Result<i32, Status> {
    let request = tonic::Request::new(HealthCheckRequest {
        service: "payments".to_owned(),
    });
    Ok(client.check(request).await?.into_inner().status)
}

/// A gRPC call cut by the library's attempt timeout after it was sent: the
/// status made from that refusal says it may have taken effect, as the
/// report does (review 13: it said "certainly not done").
#[tokio::test]
async fn a_grpc_call_cut_by_its_timeout_may_have_taken_effect() {
    let hangs = tower::layer::layer_fn(|_inner: tonic::service::Routes| {
        tower::service_fn(|_: http::Request<tonic::body::Body>| async {
            std::future::pending::<()>().await;
            Ok::<_, std::convert::Infallible>(http::Response::new(tonic::body::Body::empty()))
        })
    });
    let (_reporter, health) = tonic_health::server::health_reporter();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        Server::builder()
            .layer(hangs)
            .add_service(health)
            .serve_with_incoming(TcpIncoming::from(listener))
            .await
            .unwrap()
    });
    let (result, report) = resilient::observe(check_within_100ms(client(addr))).await;
    server.abort();
    let status = result.unwrap_err();
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert!(status.may_have_taken_effect(), "{status:?}");
    assert!(report.may_have_taken_effect(), "{report:?}");
}

/// A TCP server on loopback that takes each connection and closes it:
/// at once (an instance going away), or once it has read `read` bytes (the
/// HTTP/2 preface and the request's frames: the request went out).
async fn closes_connections(read: usize) -> SocketAddr {
    use tokio::io::AsyncReadExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let mut got = 0;
                while got < read {
                    let wait = Duration::from_millis(200);
                    match tokio::time::timeout(wait, socket.read(&mut buf)).await {
                        Ok(Ok(n)) if n > 0 => got += n,
                        _ => break,
                    }
                }
            });
        }
    });
    addr
}

#[resilient(
    retries = 2,
    base_ms = 1,
    cap_ms = 2,
    deadline_ms = 3000,
    breaker = "conn",
    idempotent
)]
async fn check_conn(mut client: HealthClient<Channel>) -> Result<i32, Status> {
    let mut request = tonic::Request::new(HealthCheckRequest {
        service: "payments".to_owned(),
    });
    request.propagate_deadline();
    Ok(client.check(request).await?.into_inner().status)
}

/// tonic's client reports a connection the server closed as `CANCELLED`
/// (closed before the request went out) or `UNKNOWN` "transport error"
/// (after): both were permanent or not retried, and a breaker on a
/// dependency whose every connection closed never opened (review 28).
/// Now a connection failure: retried, counted, as `UNAVAILABLE` is.
#[tokio::test]
async fn a_connection_the_server_closes_is_retried_and_opens_the_breaker() {
    for read in [0, 60] {
        let addr = closes_connections(read).await;
        let registry = breaker_of_four("conn");
        let (result, report) = registry
            .scope(resilient::observe(check_conn(client(addr))))
            .await;
        let status = result.unwrap_err();
        assert!(
            matches!(status.code(), Code::Cancelled | Code::Unknown),
            "{status:?}"
        );
        assert!(status.classify().is_retryable(), "{status:?}");
        assert_eq!(report.attempts().len(), 3, "read {read}: {report:?}");
        // Three failures, then the fourth opens it.
        let refused = registry.scope(check_conn(client(addr))).await.unwrap_err();
        assert_eq!(refused.is_refusal(), Some(true), "{refused:?}");
        assert_eq!(
            registry.breaker("conn").unwrap().state(),
            resilient::State::Open
        );
    }
}

/// A service whose call to a hung dependency timed out (tonic's own
/// `CANCELLED` "Timeout expired") and answers its caller with that status,
/// marked not to retry since it retried itself: its caller's breaker must
/// count it (review 28: permanent, so a hung dependency never opened the
/// breakers of its callers' callers).
#[test]
fn a_timeout_passed_on_by_a_service_counts_for_its_callers_breaker() {
    let timed_out = || Status::cancelled(tonic::TimeoutExpired(()).to_string());
    assert_eq!(timed_out().classify(), Classification::Transient);
    let mut passed_on = timed_out();
    passed_on
        .metadata_mut()
        .insert("grpc-retry-pushback-ms", "-1".parse().unwrap());
    assert_eq!(
        passed_on.classify(),
        Classification::DoNotRetry { retry_after: None }
    );
    // A `CANCELLED` off the wire, with no source, is the caller's own
    // cancellation: permanent, as before.
    assert_eq!(
        Status::cancelled("the client went away").classify(),
        Classification::Permanent
    );
}

/// `propagate_deadline` keeps a shorter timeout already set on the request
/// (review 28: it replaced 50 ms with the 2 s the deadline left).
#[tokio::test]
async fn propagate_deadline_keeps_a_shorter_timeout() {
    let sent = |set: Duration| async move {
        resilient::with_deadline(Duration::from_secs(2), async move {
            let mut request = tonic::Request::new(());
            request.set_timeout(set);
            request.propagate_deadline();
            let value = request.metadata().get("grpc-timeout").unwrap();
            value
                .to_str()
                .unwrap()
                .parse::<resilient::GrpcTimeout>()
                .unwrap()
                .duration()
        })
        .await
        .unwrap()
    };
    assert_eq!(
        sent(Duration::from_millis(50)).await,
        Duration::from_millis(50)
    );
    // A zero timeout, which tonic writes `0n`, is the soonest of all
    // (review 33: replaced by the deadline's 2 s).
    let zero = resilient::with_deadline(Duration::from_secs(2), async {
        let mut request = tonic::Request::new(());
        request.set_timeout(Duration::ZERO);
        request.propagate_deadline();
        request.metadata().get("grpc-timeout").unwrap().clone()
    })
    .await
    .unwrap();
    assert_eq!(zero, "0n");
    let longer = sent(Duration::from_secs(10)).await;
    assert!(longer <= Duration::from_secs(2), "{longer:?}");
    assert!(longer > Duration::from_millis(1900), "{longer:?}");
}

/// An error of the caller's own, made a status with `Status::from_error`
/// (UNKNOWN, or the code of a status in its chain, with the error as
/// source): not a failed connection (review 29: taken for one while any
/// source counted, and retried).
#[derive(Debug)]
struct Mine(Option<Box<dyn std::error::Error + Send + Sync>>);

impl std::fmt::Display for Mine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("amount must be positive")
    }
}

impl std::error::Error for Mine {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.as_deref().map(|e| e as _)
    }
}

#[test]
fn a_status_made_from_the_callers_own_error_keeps_its_classification() {
    let own = Status::from_error(Box::new(Mine(None)));
    assert_eq!(own.code(), Code::Unknown);
    assert_eq!(
        own.classify(),
        Classification::DoNotRetry { retry_after: None }
    );
    // A status off the wire, wrapped in the caller's error and back.
    let cancelled = Status::from_error(Box::new(Mine(Some(Box::new(Status::cancelled(
        "the client went away",
    ))))));
    assert_eq!(cancelled.code(), Code::Cancelled);
    assert_eq!(cancelled.classify(), Classification::Permanent);
    // The library's refusal, wrapped in the caller's error and back.
    let breaker = resilient::Breaker::new("wrapped", resilient::BreakerConfig::default()).unwrap();
    breaker.transition_to(resilient::State::ForcedOpen);
    let refused = breaker.try_acquire().unwrap_err();
    let refused = Status::from_error(Box::new(Mine(Some(Box::new(refused)))));
    assert_eq!(refused.classify(), Classification::Permanent);
    assert_eq!(refused.is_refusal(), Some(true));
}

/// The health service on loopback behind a layer that panics on every
/// request (a handler with a bug), counting the requests it got.
async fn serve_panicking() -> (SocketAddr, Arc<std::sync::atomic::AtomicU32>) {
    use std::sync::atomic::{AtomicU32, Ordering};
    let runs = Arc::new(AtomicU32::new(0));
    let counted = runs.clone();
    let panics = tower::layer::layer_fn(move |_inner: tonic::service::Routes| {
        let runs = runs.clone();
        tower::service_fn(move |_: http::Request<tonic::body::Body>| {
            runs.fetch_add(1, Ordering::SeqCst);
            async move {
                if true {
                    panic!("a handler with a bug");
                }
                Ok::<http::Response<tonic::body::Body>, std::convert::Infallible>(
                    http::Response::new(tonic::body::Body::empty()),
                )
            }
        })
    });
    let (_reporter, health) = tonic_health::server::health_reporter();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        Server::builder()
            .layer(panics)
            .add_service(health)
            .serve_with_incoming(TcpIncoming::from(listener))
            .await
            .unwrap()
    });
    (addr, counted)
}

/// A stream the server resets on a live connection (its handler panicked)
/// is no failed connection: not retried, so the bug does not run once per
/// attempt, but counted, as a 500 is (review 30: retried as UNAVAILABLE).
#[tokio::test]
async fn a_handler_that_panics_is_not_retried_but_opens_the_breaker() {
    use std::sync::atomic::Ordering;
    let (addr, runs) = serve_panicking().await;
    let registry = breaker_of_four("conn");
    let status = registry.scope(check_conn(client(addr))).await.unwrap_err();
    assert_eq!(
        status.classify(),
        Classification::DoNotRetry { retry_after: None },
        "{status:?}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1, "ran once: {status:?}");
    for _ in 0..3 {
        registry.scope(check_conn(client(addr))).await.unwrap_err();
    }
    assert_eq!(
        registry.breaker("conn").unwrap().state(),
        resilient::State::Open
    );
}

#[resilient(breaker = "own-limit")]
async fn check_with_a_limit(
    mut client: HealthClient<Channel>,
    service: String,
) -> Result<i32, Status> {
    let request = tonic::Request::new(HealthCheckRequest { service });
    Ok(client.check(request).await?.into_inner().status)
}

/// A request over the client's own size limit is reset by the client:
/// the caller's fault, permanent, and no failure of the server's (review
/// 30: counted, it opened a healthy server's breaker).
#[tokio::test]
async fn the_clients_own_oversized_request_is_not_the_servers_failure() {
    let (addr, _) = serve().await;
    let registry = breaker_of_four("own-limit");
    let limited = client(addr).max_encoding_message_size(8);
    for _ in 0..4 {
        let status = registry
            .scope(check_with_a_limit(limited.clone(), "x".repeat(100)))
            .await
            .unwrap_err();
        assert_eq!(status.classify(), Classification::Permanent, "{status:?}");
    }
    assert_eq!(
        registry.breaker("own-limit").unwrap().state(),
        resilient::State::Closed
    );
    // A request within limits goes through.
    assert_eq!(
        registry
            .scope(check_with_a_limit(client(addr), "payments".into()))
            .await
            .unwrap(),
        1
    );
}

/// An HTTP/2 server on loopback that, once the client's request is in,
/// answers `GOAWAY` with last stream id 0 and `NO_ERROR`: a graceful
/// shutdown that took none of the client's streams (RFC 9113 §6.8), as
/// during a rolling restart. Counts the connections.
async fn goes_away_unprocessed() -> (SocketAddr, Arc<std::sync::atomic::AtomicU32>) {
    use std::sync::atomic::{AtomicU32, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let connections = Arc::new(AtomicU32::new(0));
    let counted = connections.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                // The preface (24 bytes), SETTINGS and the request's frames.
                let mut buf = [0u8; 4096];
                let mut got = 0;
                while got < 60 {
                    match socket.read(&mut buf).await {
                        Ok(n) if n > 0 => got += n,
                        _ => return,
                    }
                }
                // An empty SETTINGS, then GOAWAY(last stream 0, NO_ERROR).
                let mut frames = vec![0, 0, 0, 4, 0, 0, 0, 0, 0];
                frames.extend_from_slice(&[0, 0, 8, 7, 0, 0, 0, 0, 0]);
                frames.extend_from_slice(&[0; 8]);
                let _ = socket.write_all(&frames).await;
                tokio::time::sleep(Duration::from_millis(100)).await;
            });
        }
    });
    (addr, connections)
}

/// A stream a graceful `GOAWAY` left unprocessed is retried, and was
/// certainly not done (review 33: tonic reports it `INTERNAL`, which was
/// not retried, and counted against a server in a rolling restart).
#[tokio::test]
async fn a_stream_left_unprocessed_by_a_graceful_goaway_is_retried() {
    use std::sync::atomic::Ordering;
    let (addr, connections) = goes_away_unprocessed().await;
    let registry = resilient::Registry::builder()
        .breaker("conn", resilient::BreakerConfig::default())
        .build()
        .unwrap();
    let (result, report) = registry
        .scope(resilient::observe(check_conn(client(addr))))
        .await;
    let status = result.unwrap_err();
    assert_eq!(status.classify(), Classification::Transient, "{status:?}");
    assert!(!status.may_have_taken_effect(), "{status:?}");
    assert_eq!(report.attempts().len(), 3, "{report:?}");
    assert!(!report.may_have_taken_effect(), "{report:?}");
    assert_eq!(connections.load(Ordering::SeqCst), 3);
}
