//! The count of an event hub's queue: how many events wait for delivery,
//! which decides what a new event may take. Rejections stop at one limit,
//! transitions (with the rates they report) at a higher one, so that a
//! flood of rejections leaves room for the transition that ends an outage.
//!
//! Places are taken with one compare-and-swap that never counts past the
//! limit, even for a moment: a count added and then taken back on overflow
//! made a concurrent transition find the queue full while a place was free
//! (review 37).
//!
//! This file depends on `crate::sync` and `std` only: the loom models in
//! `tests/tests/model_breaker.rs` compile it as it ships.

use crate::sync::atomic::{AtomicUsize, Ordering};

/// Places in a queue, taken before an event is sent and given back when it
/// is received (or could not be sent).
pub(crate) struct Places(AtomicUsize);

impl Places {
    pub(crate) fn new() -> Places {
        Places(AtomicUsize::new(0))
    }

    /// Takes `n` places if that leaves at most `limit` taken.
    pub(crate) fn take(&self, n: usize, limit: usize) -> bool {
        self.0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |q| {
                q.checked_add(n).filter(|&after| after <= limit)
            })
            .is_ok()
    }

    /// Gives back `n` places taken by [`Places::take`].
    pub(crate) fn give_back(&self, n: usize) {
        let before = self.0.fetch_sub(n, Ordering::Relaxed);
        debug_assert!(before >= n, "queue places given back twice");
    }

    /// Places taken now.
    pub(crate) fn taken(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }
}
