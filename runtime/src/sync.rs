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
