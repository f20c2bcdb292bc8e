//! The success path allocates nothing: after the first call (which finds
//! and caches the call site's breaker, budget and bulkhead, and registers
//! its metric handles), a call through retries, a deadline, a timeout, a
//! breaker, its budget and a bulkhead makes no heap allocation. With the
//! `tracing` and `metrics` features on (this crate enables them), checked
//! with no subscriber and no recorder, with subscribers whose filters turn
//! the call's span off (`OFF`, `WARN`) and one that records it (`INFO`, a
//! bare registry), with graceful shutdown counting calls in flight, and
//! with a `metrics` recorder installed whose handles record without
//! allocating (so that what is counted is this crate's, not a recorder's:
//! an exporter's histogram may allocate as its samples pile up between
//! scrapes). Its own test binary, with a counting global
//! allocator, run without the libtest harness (`harness = false` in
//! `tests/Cargo.toml`): the allocator counts every thread, and libtest's
//! main thread allocates while a test runs.

use std::alloc::System;
use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use resilient::{GracefulShutdown, Registry, resilient};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::SubscriberExt;

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// A function through every part, and one with retries only.
macro_rules! success_path_functions {
    ($everything:ident, $retries_only:ident) => {
        #[resilient(
            retries = 3,
            idempotent,
            deadline_ms = 5000,
            timeout_ms = 1000,
            breaker = "no-alloc",
            bulkhead = "no-alloc"
        )]
        async fn $everything(x: u64) -> Result<u64, std::io::Error> {
            Ok(x + 1)
        }

        #[resilient(retries = 2, idempotent)]
        async fn $retries_only(x: u64) -> Result<u64, std::io::Error> {
            Ok(x + 1)
        }
    };
}

success_path_functions!(everything, retries_only);
// The same two, first called once the recorder is installed (a call site
// registers its metric handles on its first call).
success_path_functions!(everything_recorded, retries_only_recorded);

fn poll_once<F: Future<Output = Result<u64, std::io::Error>>>(fut: F) -> u64 {
    let mut cx = Context::from_waker(Waker::noop());
    match pin!(fut).poll(&mut cx) {
        Poll::Ready(Ok(v)) => v,
        _ => panic!("the body completes on its first poll"),
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let _guard = rt.enter();
    let scoped = Registry::builder().build().unwrap();

    the_success_path_makes_no_heap_allocation(&scoped, "no subscriber, no recorder");
    // OFF and WARN turn the call's INFO span off; INFO creates it (in
    // tracing-subscriber's registry, whose slab reuses its slots).
    for filter in [LevelFilter::OFF, LevelFilter::WARN, LevelFilter::INFO] {
        let subscriber = tracing_subscriber::registry().with(filter);
        tracing::subscriber::with_default(subscriber, || {
            the_success_path_makes_no_heap_allocation(
                &scoped,
                &format!("a subscriber filtering at {filter}"),
            );
        });
    }
    let shutdown = GracefulShutdown::install();
    the_success_path_makes_no_heap_allocation(&scoped, "graceful shutdown counting calls");
    assert_eq!(shutdown.in_flight(), 0);
    with_a_recorder_the_success_path_records_without_allocating();
    println!("no_alloc: 6 passed, 0 failed");
}

/// A recorder whose counters and histograms are atomics, registered once
/// per key (the registration allocates; recording does not).
#[derive(Default)]
struct AtomicRecorder {
    handles: Mutex<Vec<(metrics::Key, Arc<AtomicU64>)>>,
}

/// A histogram that counts its samples.
struct Samples(Arc<AtomicU64>);

impl metrics::HistogramFn for Samples {
    fn record(&self, _: f64) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

impl AtomicRecorder {
    fn handle(&self, key: &metrics::Key) -> Arc<AtomicU64> {
        let mut handles = self.handles.lock().unwrap();
        if let Some((_, h)) = handles.iter().find(|(k, _)| k == key) {
            return h.clone();
        }
        let h = Arc::new(AtomicU64::new(0));
        handles.push((key.clone(), h.clone()));
        h
    }

    /// The value of `name` for the function `function` and outcome
    /// `outcome`, summed over counters and histograms of that name.
    fn value(&self, name: &str, function: &str, outcome: &str) -> u64 {
        let handles = self.handles.lock().unwrap();
        handles
            .iter()
            .filter(|(k, _)| {
                k.name() == name
                    && k.labels()
                        .any(|l| l.key() == "function" && l.value() == function)
                    && k.labels()
                        .any(|l| l.key() == "outcome" && l.value() == outcome)
            })
            .map(|(_, h)| h.load(Ordering::Relaxed))
            .sum()
    }
}

impl metrics::Recorder for AtomicRecorder {
    fn describe_counter(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_gauge(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_histogram(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }

    fn register_counter(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
        metrics::Counter::from_arc(self.handle(key))
    }

    fn register_gauge(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        metrics::Gauge::noop()
    }

    fn register_histogram(
        &self,
        key: &metrics::Key,
        _: &metrics::Metadata<'_>,
    ) -> metrics::Histogram {
        metrics::Histogram::from_arc(Arc::new(Samples(self.handle(key))))
    }
}

/// With a recorder installed, the success path records every call and
/// attempt (counter and duration) and still allocates nothing after its
/// first call.
fn with_a_recorder_the_success_path_records_without_allocating() {
    let recorder: &'static AtomicRecorder = Box::leak(Box::default());
    metrics::set_global_recorder(recorder).expect("no recorder installed before");
    for i in 0..10 {
        poll_once(everything_recorded(i));
        poll_once(retries_only_recorded(i));
    }
    let region = Region::new(GLOBAL);
    let mut sum = 0;
    for i in 0..1000 {
        sum += poll_once(everything_recorded(i));
        sum += poll_once(retries_only_recorded(i));
    }
    let change = region.change();
    assert_eq!(sum, 2 * (1000 * 999 / 2 + 1000));
    let case = "a metrics recorder installed";
    assert_eq!(
        change.allocations, 0,
        "allocations on the success path ({case}): {change:?}"
    );
    assert_eq!(change.reallocations, 0, "{case}: {change:?}");
    // The recorder did record: 1010 calls of each, one attempt each, a
    // duration sample for every call and every attempt.
    for function in ["everything_recorded", "retries_only_recorded"] {
        let path = format!("no_alloc::{function}");
        for name in [
            resilient::metrics::CALLS,
            resilient::metrics::ATTEMPTS,
            resilient::metrics::CALL_DURATION,
            resilient::metrics::ATTEMPT_DURATION,
        ] {
            assert_eq!(
                recorder.value(name, &path, "success"),
                1010,
                "{name} of {path}"
            );
        }
    }
}

fn the_success_path_makes_no_heap_allocation(scoped: &Registry, case: &str) {
    // Warm up: the global registry, the call sites' caches, the scoped
    // registry's lazily created parts, tokio's thread-locals.
    for i in 0..10 {
        poll_once(everything(i));
        poll_once(retries_only(i));
        poll_once(scoped.scope(everything(i)));
    }

    // The counter does count: one allocation is seen.
    let probe = Region::new(GLOBAL);
    drop(std::hint::black_box(vec![1u8]));
    assert_eq!(probe.change().allocations, 1);

    let region = Region::new(GLOBAL);
    let mut sum = 0;
    for i in 0..1000 {
        sum += poll_once(everything(i));
        sum += poll_once(retries_only(i));
        sum += poll_once(scoped.scope(everything(i)));
    }
    let change = region.change();
    assert_eq!(sum, 3 * (1000 * 999 / 2 + 1000));
    assert_eq!(
        change.allocations, 0,
        "allocations on the success path ({case}): {change:?}"
    );
    assert_eq!(change.reallocations, 0, "{case}: {change:?}");
}
