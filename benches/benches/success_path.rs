//! The success path: a bare call against the same call through
//! `#[resilient]`, with and without a circuit breaker, on one thread and on
//! two threads sharing one breaker.
//!
//! The bodies complete on their first poll, so what is measured is the
//! wrapper's own cost: the clock reads, the breaker's atomics, the policy
//! lookup. Futures are polled by hand with a no-op waker inside a tokio
//! runtime context, so no scheduler cost is mixed in.
//!
//! Run: `cargo bench -p resilient-benches`.

use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use resilient::{BreakerConfig, Registry, resilient};

#[derive(Debug)]
struct E;

impl From<resilient::Error> for E {
    fn from(_: resilient::Error) -> Self {
        E
    }
}

impl resilient::Classify for E {
    fn classify(&self) -> resilient::Classification {
        resilient::Classification::Transient
    }
}

async fn bare(x: u64) -> Result<u64, E> {
    Ok(black_box(x) + 1)
}

#[resilient(deadline_ms = 1000)]
async fn with_deadline(x: u64) -> Result<u64, E> {
    Ok(black_box(x) + 1)
}

#[resilient(retries = 3, idempotent)]
async fn with_retries(x: u64) -> Result<u64, E> {
    Ok(black_box(x) + 1)
}

#[resilient(breaker = "bench")]
async fn with_breaker(x: u64) -> Result<u64, E> {
    Ok(black_box(x) + 1)
}

#[resilient(retries = 3, idempotent, breaker = "bench", timeout_ms = 1000)]
async fn with_everything(x: u64) -> Result<u64, E> {
    Ok(black_box(x) + 1)
}

/// Polls a future that is ready on its first poll.
fn run<F: Future<Output = Result<u64, E>>>(fut: F) -> u64 {
    let mut cx = Context::from_waker(Waker::noop());
    match pin!(fut).poll(&mut cx) {
        Poll::Ready(Ok(v)) => v,
        _ => panic!("the benchmarked body completes on its first poll"),
    }
}

fn single_thread(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let _guard = rt.enter();
    let mut g = c.benchmark_group("one thread");
    g.bench_function("bare async fn", |b| b.iter(|| run(bare(black_box(1)))));
    g.bench_function("deadline_ms", |b| {
        b.iter(|| run(with_deadline(black_box(1))))
    });
    g.bench_function("retries = 3", |b| {
        b.iter(|| run(with_retries(black_box(1))))
    });
    g.bench_function("breaker", |b| b.iter(|| run(with_breaker(black_box(1)))));
    g.bench_function("retries + breaker + timeout_ms", |b| {
        b.iter(|| run(with_everything(black_box(1))))
    });
    g.finish();
}

/// Two threads calling through one shared breaker: the time per call of
/// each thread when both run at once (contention on the breaker's atomics).
fn two_threads(c: &mut Criterion) {
    let mut g = c.benchmark_group("two threads, one breaker");
    fn measure(iters: u64, call: fn(u64) -> u64) -> Duration {
        let start = Instant::now();
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_time()
                        .build()
                        .unwrap();
                    let _guard = rt.enter();
                    for i in 0..iters {
                        black_box(call(i));
                    }
                });
            }
        });
        start.elapsed()
    }
    g.bench_function("bare async fn", |b| {
        b.iter_custom(|iters| measure(iters, |i| run(bare(i))))
    });
    g.bench_function("breaker", |b| {
        b.iter_custom(|iters| measure(iters, |i| run(with_breaker(i))))
    });
    g.finish();
}

/// The cost of the `tracing` span on the full stack: no subscriber (the
/// span is never created), a subscriber whose filter turns it off (WARN, a
/// production default for libraries), and one that records it (INFO,
/// tracing-subscriber's bare registry). With `--features metrics`, every
/// case also records its metrics into a Prometheus recorder.
fn telemetry(c: &mut Criterion) {
    use tracing_subscriber::filter::LevelFilter;
    use tracing_subscriber::layer::SubscriberExt;

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let _guard = rt.enter();
    let mut g = c.benchmark_group("telemetry, full stack");
    g.bench_function("no subscriber", |b| {
        b.iter(|| run(with_everything(black_box(1))))
    });
    for (name, filter) in [
        ("subscriber at WARN (span off)", LevelFilter::WARN),
        ("subscriber at INFO (span recorded)", LevelFilter::INFO),
    ] {
        let subscriber = tracing_subscriber::registry().with(filter);
        tracing::subscriber::with_default(subscriber, || {
            g.bench_function(name, |b| b.iter(|| run(with_everything(black_box(1)))));
        });
    }
    g.finish();
}

/// With `--features metrics`: a Prometheus recorder, installed before the
/// first call (call sites register their handles on their first call),
/// its histograms drained in the background as an exporter would.
#[cfg(feature = "metrics")]
fn install_recorder() {
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder).expect("installed once");
    std::thread::spawn(move || {
        loop {
            std::thread::sleep(Duration::from_millis(200));
            handle.run_upkeep();
        }
    });
}

fn configure() -> Criterion {
    #[cfg(feature = "metrics")]
    install_recorder();
    // The breaker named "bench" must never open during the run: it only
    // sees successes, but configure it explicitly so the figures are of a
    // closed breaker with the default window.
    Registry::builder()
        .breaker("bench", BreakerConfig::default())
        .build()
        .expect("valid configuration")
        .install()
        .expect("installed before the first call");
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
}

criterion_group! {
    name = benches;
    config = configure();
    targets = single_thread, two_threads, telemetry
}
criterion_main!(benches);
