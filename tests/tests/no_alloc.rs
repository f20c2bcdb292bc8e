//! The success path allocates nothing: after the first call (which finds
//! and caches the call site's breaker, budget and bulkhead, and registers
//! its metric handles), a call through retries, a deadline, a timeout, a
//! breaker, its budget and a bulkhead makes no heap allocation. With the
//! `tracing` and `metrics` features on (this crate enables them), checked
//! with no subscriber and no recorder, with subscribers whose filters turn
//! the call's span off (`OFF`, `WARN`) and one that records it (`INFO`, a
//! bare registry), and with graceful shutdown counting calls in flight. Its own test binary, with a counting global
//! allocator, run without the libtest harness (`harness = false` in
//! `tests/Cargo.toml`): the allocator counts every thread, and libtest's
//! main thread allocates while a test runs.

use std::alloc::System;
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use resilient::{GracefulShutdown, Registry, resilient};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::SubscriberExt;

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

#[resilient(
    retries = 3,
    idempotent,
    deadline_ms = 5000,
    timeout_ms = 1000,
    breaker = "no-alloc",
    bulkhead = "no-alloc"
)]
async fn everything(x: u64) -> Result<u64, std::io::Error> {
    Ok(x + 1)
}

#[resilient(retries = 2, idempotent)]
async fn retries_only(x: u64) -> Result<u64, std::io::Error> {
    Ok(x + 1)
}

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
    println!("no_alloc: 5 passed, 0 failed");
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
