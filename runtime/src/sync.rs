//! The synchronisation primitives the lock-free cores are written against.
//!
//! The cores (`breaker/core.rs`, the budget, throttle and bulkhead counters,
//! the graceful shutdown's gate)
//! name their atomics through `crate::sync` only. The model-checking tests in
//! `tests/tests/model_*.rs` compile those same files with a `sync` module
//! that re-exports `loom`'s types instead, so the code that ships is the code
//! that is checked, with no `cfg` in it.

pub(crate) mod atomic {
    pub(crate) use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
}

/// How many shards threads are spread over, for counters every call
/// writes (the graceful shutdown's in-flight count, a breaker window's
/// cursors): threads in different shards write different cache lines. A
/// power of two, so that a mask takes the remainder.
pub(crate) const SHARDS: usize = 16;
const _: () = assert!(SHARDS.is_power_of_two());

/// The calling thread's shard, given out round-robin on first use by
/// every thread that asks (workers, the main thread, blocking-pool
/// threads): threads share a shard only once more than `SHARDS` have
/// asked.
#[inline]
pub(crate) fn shard() -> usize {
    use std::cell::Cell;
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        // `usize::MAX` until given out: a constant initialiser keeps each
        // read a plain thread-local load.
        static SHARD: Cell<usize> = const { Cell::new(usize::MAX) };
    }
    SHARD.with(|shard| match shard.get() {
        usize::MAX => {
            let given = NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS;
            shard.set(given);
            given
        }
        given => given,
    })
}
