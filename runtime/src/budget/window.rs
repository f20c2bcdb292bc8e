//! A sliding window of two event counts, lock-free, shared by the ratio
//! retry budget (requests, retries) and adaptive throttling (requests,
//! accepts).
//!
//! Time is cut into `slots.len()` slots of `width` nanoseconds; slot `i`
//! holds the counts of the epochs congruent to `i`. Besides the slots, the
//! window keeps running totals so that reading the window costs two loads,
//! not a sum over every slot: adaptive throttling reads it on every call.
//!
//! Exact accounting rests on two rules. Every event is added to the total
//! before it is added to a slot, so a total is never less than what the
//! slots hold (a swap that takes a slot's count sees the matching total
//! increment, and subtracts after it). And a slot's counts leave the window
//! only through the thread that wins the compare-and-swap of the slot's epoch
//! tag, which takes them with `swap(0)` and subtracts exactly what it took.
//! An event racing with the rotation of its own slot may be counted in the
//! next epoch or leave the window early; it is never lost from, or counted
//! twice in, the totals.
//!
//! This file depends on `crate::sync` and `std` only: the loom models in
//! `tests/tests/model_overload.rs` compile it as it ships.

use crate::modulo::Modulo;
use crate::sync::atomic::{AtomicU64, Ordering};

/// One of the two counts a [`Window`] keeps.
pub(crate) const FIRST: usize = 0;
/// The other count a [`Window`] keeps.
pub(crate) const SECOND: usize = 1;

/// One epoch's two counts: each slot on cache lines of its own, for the
/// reason the window is (below).
#[derive(Debug)]
#[repr(align(128))]
struct Slot {
    /// The epoch (time / width) whose events the counts belong to.
    epoch: AtomicU64,
    counts: [AtomicU64; 2],
}

/// Two event counts over the last `width * slots` nanoseconds.
///
/// Alone on its cache lines (128 bytes: x86 prefetches 64-byte lines in
/// pairs): written by every call on every thread, so that where the heap
/// puts another part's data cannot make that data's readers and these
/// writers take the line from each other (the full stack on two threads
/// ran at 494 to 647 ns a call in 4 runs of 5, at 315 to 381 ns once
/// aligned).
#[derive(Debug)]
#[repr(align(128))]
pub(crate) struct Window {
    width: u64,
    slots: Box<[Slot]>,
    /// The remainder by the number of slots.
    modulo: Modulo,
    /// The latest epoch for which every stale slot has been emptied.
    head: AtomicU64,
    totals: [AtomicU64; 2],
}

impl Window {
    /// A window of `slots` slots (at least one) of `width` nanoseconds (at
    /// least one) each.
    pub(crate) fn new(width: u64, slots: usize) -> Self {
        let slots = slots.clamp(1, u32::MAX as usize);
        Self {
            width: width.max(1),
            modulo: Modulo::new(slots as u32),
            // Slot `i` starts as the empty slot of epoch `i`, so the first
            // `slots` epochs need no rotation.
            slots: (0..slots)
                .map(|i| Slot {
                    epoch: AtomicU64::new(i as u64),
                    counts: [AtomicU64::new(0), AtomicU64::new(0)],
                })
                .collect(),
            head: AtomicU64::new(0),
            totals: [AtomicU64::new(0), AtomicU64::new(0)],
        }
    }

    /// Empties the slots whose epochs fell out of the window at `now`
    /// (nanoseconds since the owner's origin), and returns the current epoch.
    fn advance(&self, now: u64) -> u64 {
        let head = self.head.load(Ordering::Acquire);
        // Nearly every event falls in the head's epoch: known so by a
        // multiplication, without dividing (a 64-bit division was a quarter
        // of a ratio budget's cost per call).
        if matches!(now.checked_sub(head.saturating_mul(self.width)), Some(into) if into < self.width)
        {
            return head;
        }
        let epoch = now / self.width;
        if epoch <= head {
            return epoch;
        }
        let n = self.slots.len() as u64;
        for (i, slot) in self.slots.iter().enumerate() {
            let i = i as u64;
            if epoch < i {
                continue;
            }
            // The latest epoch at or before `epoch` that this slot holds.
            let target = epoch - (epoch - i) % n;
            let mut current = slot.epoch.load(Ordering::Acquire);
            while current < target {
                match slot.epoch.compare_exchange(
                    current,
                    target,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => {
                        // The first count, then the second: the order
                        // `totals` relies on.
                        for (count, total) in slot.counts.iter().zip(&self.totals) {
                            let stale = count.swap(0, Ordering::AcqRel);
                            total.fetch_sub(stale, Ordering::AcqRel);
                        }
                        break;
                    }
                    Err(seen) => current = seen,
                }
            }
        }
        self.head.fetch_max(epoch, Ordering::AcqRel);
        epoch
    }

    fn slot(&self, epoch: u64) -> &Slot {
        &self.slots[self.modulo.of_u64(epoch) as usize]
    }

    /// Counts one event of kind `which` ([`FIRST`] or [`SECOND`]) at `now`.
    pub(crate) fn add(&self, now: u64, which: usize) {
        let epoch = self.advance(now);
        // Total first, slot second: see the module comment.
        self.totals[which].fetch_add(1, Ordering::AcqRel);
        self.slot(epoch).counts[which].fetch_add(1, Ordering::AcqRel);
    }

    /// Counts one event of kind [`FIRST`] and, with `second`, one of kind
    /// [`SECOND`] that goes with it (a request and its accept): the second
    /// first. [`totals`](Self::totals) reads the first total first, so a
    /// reader that sees the first event sees the second with it: a
    /// throttle never reads an accepted request as a refused one (review
    /// 27: half the calls of a burst to a healthy backend were shed).
    pub(crate) fn add_pair(&self, now: u64, second: bool) {
        if second {
            self.add(now, SECOND);
        }
        self.add(now, FIRST);
    }

    /// Counts one event of kind `which` at `now` if `allow(first, second)`
    /// holds for the totals just before it, and says whether it did. The
    /// check and the increment are one compare-and-swap on the total of
    /// `which`, so concurrent callers cannot overrun the limit together.
    pub(crate) fn try_add(&self, now: u64, which: usize, allow: impl Fn(u64, u64) -> bool) -> bool {
        let epoch = self.advance(now);
        let other = &self.totals[1 - which];
        let total = &self.totals[which];
        let mut current = total.load(Ordering::Acquire);
        loop {
            let counts = if which == FIRST {
                (current, other.load(Ordering::Acquire))
            } else {
                (other.load(Ordering::Acquire), current)
            };
            if !allow(counts.0, counts.1) {
                return false;
            }
            match total.compare_exchange(current, current + 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(seen) => current = seen,
            }
        }
        self.slot(epoch).counts[which].fetch_add(1, Ordering::AcqRel);
        true
    }

    /// Takes back one event of kind `which` that this caller counted at
    /// `now` (with [`add`](Self::add) or [`try_add`](Self::try_add)). Slot
    /// first, total second, the reverse of counting, so a total is never
    /// less than what the slots hold. If the event's slot has been emptied
    /// since (a whole window later), the event already left with it and
    /// nothing is taken; if the emptying races with this, an event of the
    /// slot's next epoch may be taken in its place: one event leaving the
    /// window early, the imprecision the module accepts, never a count
    /// taken twice from the totals.
    pub(crate) fn remove(&self, now: u64, which: usize) {
        let epoch = now / self.width;
        let slot = self.slot(epoch);
        if slot.epoch.load(Ordering::Acquire) != epoch {
            return;
        }
        let taken = slot.counts[which]
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |count| {
                count.checked_sub(1)
            })
            .is_ok();
        if taken {
            self.totals[which].fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// The two counts over the window ending at `now`. The second is never
    /// less than what went with the first (an accept with its request):
    /// `add_pair` counts the second first, and a rotation takes the first
    /// count out first, so the second is read before and after the first
    /// and the larger kept. A reader between a rotation's two subtractions
    /// read a request without its accept (review 30); the cost is at most
    /// a second count a moment newer than the first.
    pub(crate) fn totals(&self, now: u64) -> (u64, u64) {
        self.advance(now);
        let before = self.totals[SECOND].load(Ordering::Acquire);
        let first = self.totals[FIRST].load(Ordering::Acquire);
        let after = self.totals[SECOND].load(Ordering::Acquire);
        (first, before.max(after))
    }

    /// What the slots hold of `which`, summed; equal to the total when no
    /// thread is between its two increments.
    #[cfg(test)]
    #[allow(dead_code, reason = "for the loom models, which include this file")]
    pub(crate) fn slot_sum(&self, which: usize) -> u64 {
        self.slots
            .iter()
            .map(|s| s.counts[which].load(Ordering::Acquire))
            .sum()
    }

    /// The running total of `which`, without expiring anything. For the
    /// models.
    #[cfg(test)]
    #[allow(dead_code, reason = "for the loom models, which include this file")]
    pub(crate) fn raw_total(&self, which: usize) -> u64 {
        self.totals[which].load(Ordering::Acquire)
    }
}
