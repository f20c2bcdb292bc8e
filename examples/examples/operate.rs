//! Operating it: what an annotated service shows its operators. A payments
//! client whose dependency fails once, then goes down, then recovers; with
//! its `tracing` output, its Prometheus metrics, its readiness and a
//! graceful shutdown with a call still in flight.
//!
//! Run with `cargo run -p resilient-examples --example operate`.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use resilient::{
    BreakerConfig, Classification, Classify, GracefulShutdown, Registry, SlidingWindow, resilient,
};
use tracing_subscriber::fmt::format::FmtSpan;

#[derive(Debug)]
enum PayError {
    /// 503 from the provider: worth another attempt.
    Unavailable,
    /// A refusal by `resilient`.
    Resilience(resilient::Error),
}

impl std::fmt::Display for PayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PayError::Unavailable => f.write_str("503 Service Unavailable from the provider"),
            PayError::Resilience(e) => e.fmt(f),
        }
    }
}

impl From<resilient::Error> for PayError {
    fn from(e: resilient::Error) -> Self {
        PayError::Resilience(e)
    }
}

impl Classify for PayError {
    fn classify(&self) -> Classification {
        match self {
            PayError::Unavailable => Classification::Transient,
            PayError::Resilience(e) => e.classify(),
        }
    }
}

/// How many of the next requests the provider fails.
static PROVIDER_FAILS: AtomicU32 = AtomicU32::new(0);

#[resilient(
    retries = 2,
    idempotent,
    deadline_ms = 2_000,
    timeout_ms = 500,
    breaker = "payments",
    backoff = "exponential",
    base_ms = 50,
    cap_ms = 200
)]
async fn charge(cents: u64) -> Result<u64, PayError> {
    tracing::info!(cents, "POST /charges");
    tokio::time::sleep(Duration::from_millis(5)).await;
    if PROVIDER_FAILS
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
    {
        return Err(PayError::Unavailable);
    }
    Ok(cents)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    // Operators' side, at start-up: logs, metrics, registry, shutdown.
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_span_events(FmtSpan::CLOSE)
        .with_target(true)
        .without_time()
        .with_ansi(false)
        .init();
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new()
        .set_buckets(&[0.005, 0.05, 0.5, 5.0])
        .unwrap()
        .build_recorder();
    let metrics = recorder.handle();
    metrics::set_global_recorder(recorder).unwrap();
    Registry::builder()
        .breaker(
            "payments",
            BreakerConfig::default()
                .sliding_window(SlidingWindow::CountBased { size: 4 })
                .minimum_number_of_calls(4)
                .permitted_number_of_calls_in_half_open_state(1)
                .wait_duration_in_open_state(Duration::from_millis(300)),
        )
        .build()
        .unwrap()
        .install()
        .unwrap();
    let shutdown = GracefulShutdown::install();
    let registry = Registry::global();

    println!("== one call that fails once, then succeeds on its retry");
    PROVIDER_FAILS.store(1, Ordering::SeqCst);
    charge(1_000).await.unwrap();

    println!("\n== a few calls that succeed at once (nothing logged but the span)");
    for cents in [200, 300] {
        charge(cents).await.unwrap();
    }

    println!("\n== the provider goes down: the call gives up, the breaker opens");
    PROVIDER_FAILS.store(u32::MAX, Ordering::SeqCst);
    let _ = charge(400).await;
    let _ = charge(500).await;
    let refused = charge(600).await.unwrap_err();
    println!("caller sees: {refused}");
    println!(
        "readiness: {}",
        serde_json::to_string(&registry.readiness()).unwrap()
    );

    println!("\n== the provider recovers; after the breaker's wait a probe closes it");
    PROVIDER_FAILS.store(0, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(300)).await;
    charge(700).await.unwrap();
    println!(
        "readiness: {}",
        serde_json::to_string(&registry.readiness()).unwrap()
    );

    println!("\n== SIGTERM: drain with a call in flight");
    let in_flight = tokio::spawn(charge(800));
    tokio::task::yield_now().await;
    let draining = tokio::spawn(async move { shutdown.drain(Duration::from_secs(5)).await });
    tokio::task::yield_now().await;
    println!("a new call: {}", charge(900).await.unwrap_err());
    println!(
        "readiness: {}",
        serde_json::to_string(&registry.readiness()).unwrap()
    );
    in_flight.await.unwrap().unwrap();
    println!("drain: {}", draining.await.unwrap());

    println!("\n== metrics (Prometheus text, excerpt)");
    resilient::metrics::publish(registry);
    for line in metrics.render().lines() {
        let wanted = line.starts_with("resilient_calls_total")
            || line.starts_with("resilient_attempts_total")
            || line.starts_with("resilient_retries_total")
            || line.starts_with("resilient_call_duration_seconds_count")
            || line.starts_with("resilient_breaker_state")
            || line.starts_with("resilient_breaker_not_permitted")
            || line.starts_with("resilient_budget");
        if wanted && !line.ends_with(" 0") {
            println!("{line}");
        }
    }
}
