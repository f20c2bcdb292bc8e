//! The random numbers behind jitter and probabilistic load shedding.
//!
//! One generator per thread, seeded at random; [`seed_jitter`] fixes the
//! current thread's seed so a test on tokio's current-thread runtime (the
//! default for `#[tokio::test]`) can assert the exact schedule of attempts.
//! Idempotency keys do not use this generator: seeding jitter must never
//! make two keys collide (see [`IdempotencyKey`](crate::IdempotencyKey)).

use std::cell::Cell;

thread_local! {
    static RNG: Cell<Option<fastrand::Rng>> = const { Cell::new(None) };
}

/// Seeds the jitter generator of the current thread.
///
/// Every backoff delay and every adaptive-throttling draw made on this thread
/// afterwards follows from `seed`. On a multi-threaded runtime a task may
/// move between threads, so seed each worker or test on the current-thread
/// runtime.
///
/// ```
/// resilient::seed_jitter(42);
/// ```
pub fn seed_jitter(seed: u64) {
    RNG.with(|cell| cell.set(Some(fastrand::Rng::with_seed(seed))));
}

fn with_rng<T>(f: impl FnOnce(&mut fastrand::Rng) -> T) -> T {
    RNG.with(|cell| {
        let mut rng = cell.take().unwrap_or_default();
        let out = f(&mut rng);
        cell.set(Some(rng));
        out
    })
}

/// A uniform draw from `[0, 1)`.
pub(crate) fn unit() -> f64 {
    with_rng(|rng| rng.f64())
}

/// A uniform draw from `[low, high]` (inclusive), in nanoseconds.
pub(crate) fn between(low: u64, high: u64) -> u64 {
    if high <= low {
        return low;
    }
    with_rng(|rng| rng.u64(low..=high))
}
