//! Readiness: the registry's unavailable dependencies as plain data, before,
//! during and after an outage, and the axum `/health/ready` endpoint on a
//! real server on 127.0.0.1.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use resilient::{
    BreakerConfig, BulkheadConfig, Classification, Classify, PartKind, Readiness, Registry,
    SlidingWindow, State, Unavailable, resilient,
};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(Debug)]
enum E {
    Down,
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
            E::Down => Classification::Transient,
            E::Refused(e) => e.classify(),
        }
    }
}

#[resilient(breaker = "r-dep")]
async fn call_dep(up: &AtomicBool) -> Result<(), E> {
    if up.load(Ordering::SeqCst) {
        Ok(())
    } else {
        Err(E::Down)
    }
}

fn registry() -> Registry {
    Registry::builder()
        .breaker(
            "r-dep",
            BreakerConfig::default()
                .sliding_window(SlidingWindow::CountBased { size: 4 })
                .minimum_number_of_calls(4)
                .permitted_number_of_calls_in_half_open_state(1)
                .wait_duration_in_open_state(Duration::from_secs(10)),
        )
        .bulkhead("r-pool", BulkheadConfig::default().max_concurrent(2))
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn readiness_before_during_and_after_an_outage() {
    let registry = registry();
    let up = AtomicBool::new(true);

    // Before: healthy.
    registry.scope(call_dep(&up)).await.unwrap();
    let before = registry.readiness();
    assert!(before.ready);
    assert!(before.unavailable.is_empty());
    assert_eq!(
        serde_json::to_value(&before).unwrap(),
        json!({"ready": true, "shutting_down": false, "unavailable": [], "saturated": []})
    );

    // During: the dependency fails, the breaker opens, readiness says so.
    up.store(false, Ordering::SeqCst);
    for _ in 0..4 {
        let _ = registry.scope(call_dep(&up)).await;
    }
    let during = registry.readiness();
    assert!(!during.ready);
    let [
        Unavailable {
            kind, name, reason, ..
        },
    ] = during.unavailable.as_slice()
    else {
        panic!("one part unavailable: {during:?}")
    };
    assert_eq!(
        (*kind, name.as_str(), *reason),
        (PartKind::Breaker, "r-dep", "open")
    );
    assert_eq!(
        serde_json::to_value(&during).unwrap(),
        json!({
            "ready": false,
            "shutting_down": false,
            "unavailable": [{"kind": "breaker", "name": "r-dep", "reason": "open"}],
            "saturated": []
        })
    );

    // Still not ready just before the wait is over.
    tokio::time::advance(Duration::from_millis(9_999)).await;
    assert!(!registry.readiness().ready);
    // Once it is over, the breaker would admit a probe: ready again, with
    // no call made (a load balancer sends no traffic to an instance out of
    // rotation, so waiting for a call to move the breaker would keep it
    // out for good). The breaker itself still says open until a call.
    tokio::time::advance(Duration::from_millis(1)).await;
    let after_wait = registry.readiness();
    assert!(after_wait.ready, "{after_wait:?}");
    assert!(after_wait.unavailable.is_empty(), "{after_wait:?}");
    assert_eq!(registry.breaker("r-dep").unwrap().state(), State::Open);

    // After: the dependency is back; a probe succeeds, the breaker closes
    // and the service stays ready.
    up.store(true, Ordering::SeqCst);
    registry.scope(call_dep(&up)).await.unwrap();
    assert_eq!(registry.breaker("r-dep").unwrap().state(), State::Closed);
    assert!(registry.readiness().ready);
}

#[tokio::test]
async fn a_forced_open_breaker_is_unavailable_and_a_full_bulkhead_only_saturated() {
    let registry = registry();
    let pool = registry.bulkhead("r-pool").unwrap();
    let one = pool.try_acquire().unwrap();
    let two = pool.try_acquire().unwrap();
    // Busy is not down: a full bulkhead keeps the service in rotation.
    let busy = registry.readiness();
    assert!(busy.ready, "{busy:?}");
    assert_eq!(
        serde_json::to_value(&busy).unwrap()["saturated"],
        json!([{"kind": "bulkhead", "name": "r-pool", "reason": "full"}])
    );
    registry
        .breaker("r-dep")
        .unwrap()
        .transition_to(State::ForcedOpen);
    let readiness = Readiness::of(&registry);
    assert!(!readiness.ready);
    assert_eq!(
        serde_json::to_value(&readiness).unwrap()["unavailable"],
        json!([{"kind": "breaker", "name": "r-dep", "reason": "forced_open"}])
    );
    drop((one, two));
    registry.breaker("r-dep").unwrap().reset();
    let after = registry.readiness();
    assert!(after.ready && after.saturated.is_empty(), "{after:?}");
}

/// `GET path` over HTTP/1.0 on loopback: the status code and the body.
async fn get(port: u16, path: &str) -> (u16, serde_json::Value) {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let status = response[9..12].parse().unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/json"),
        "{head}"
    );
    (status, serde_json::from_str(body).unwrap())
}

#[tokio::test]
async fn the_axum_endpoint_answers_200_then_503_during_an_outage_then_200() {
    let registry = registry();
    let app = axum::Router::new().route(
        "/health/ready",
        resilient::readiness::axum::route(registry.clone()),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    let (status, body) = get(port, "/health/ready").await;
    assert_eq!(status, 200);
    assert_eq!(body["ready"], json!(true));

    // The outage: the breaker opens on failures.
    let up = AtomicBool::new(false);
    for _ in 0..4 {
        let _ = registry.scope(call_dep(&up)).await;
    }
    let (status, body) = get(port, "/health/ready").await;
    assert_eq!(status, 503);
    assert_eq!(
        body,
        json!({
            "ready": false,
            "shutting_down": false,
            "unavailable": [{"kind": "breaker", "name": "r-dep", "reason": "open"}],
            "saturated": []
        })
    );

    // Recovered (closed by hand here; the paused-time test above shows the
    // probe closing it).
    registry.breaker("r-dep").unwrap().reset();
    let (status, _) = get(port, "/health/ready").await;
    assert_eq!(status, 200);
    server.abort();
}
