//! The token bucket of gRPC retry throttling, lock-free.
//!
//! gRPC's design ("A6: gRPC Retry Design", section "Throttling Retry
//! Attempts and Hedged RPCs") keeps the count in fixed point with three
//! decimal places, so a `token_ratio` of 0.1 adds exactly 100 thousandths per
//! success and no rounding drifts the bucket over millions of calls. We keep
//! it the same way, in one `AtomicU64`, changed only by compare-and-swap
//! loops so that the clamps at 0 and at `max_tokens` hold under any
//! interleaving (a `fetch_add` followed by a correction would let another
//! thread see a value outside the bucket).
//!
//! This file depends on `crate::sync` and `std` only: the loom models in
//! `tests/tests/model_overload.rs` compile it as it ships.

use crate::sync::atomic::{AtomicU64, Ordering};

/// Thousandths of a token in one token.
pub(crate) const MILLI: u64 = 1000;

/// A token count in thousandths, between 0 and `max` inclusive.
#[derive(Debug)]
pub(crate) struct Tokens {
    milli: AtomicU64,
    max: u64,
    refill: u64,
}

impl Tokens {
    /// A full bucket of `max` thousandths, refilled by `refill` thousandths
    /// per success.
    pub(crate) fn new(max: u64, refill: u64) -> Self {
        Self {
            milli: AtomicU64::new(max),
            max,
            refill,
        }
    }

    fn update(&self, f: impl Fn(u64) -> u64) {
        let mut current = self.milli.load(Ordering::Acquire);
        loop {
            match self.milli.compare_exchange(
                current,
                f(current),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return,
                Err(seen) => current = seen,
            }
        }
    }

    /// A failed attempt costs one token, down to zero.
    pub(crate) fn on_failure(&self) {
        self.update(|t| t.saturating_sub(MILLI));
    }

    /// A success earns `refill` thousandths, up to `max`.
    pub(crate) fn on_success(&self) {
        let (max, refill) = (self.max, self.refill);
        self.update(move |t| t.saturating_add(refill).min(max));
    }

    /// gRPC throttles retries once the count is at or below half the
    /// maximum.
    pub(crate) fn allows_retry(&self) -> bool {
        self.milli() > self.max / 2
    }

    /// The current count, in thousandths.
    pub(crate) fn milli(&self) -> u64 {
        self.milli.load(Ordering::Acquire)
    }

    /// The maximum, in thousandths.
    pub(crate) fn max(&self) -> u64 {
        self.max
    }
}
