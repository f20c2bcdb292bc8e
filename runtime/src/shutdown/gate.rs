//! The admission protocol of a graceful shutdown: how a call is counted in
//! flight, refused once draining, and how a drain learns that the calls it
//! waits for have ended.
//!
//! This file names its atomics through `crate::sync::atomic` only and uses
//! no other module of the crate: `tests/tests/model_shutdown.rs` compiles
//! this very file against `loom`'s atomics, so the protocol that ships is
//! the one that is model-checked.
//!
//! Each shard is one word: the count of calls in flight on it, and a
//! *draining* bit the drain sets in every shard. Every step is a
//! read-modify-write of that one word, so every step on a shard is in one
//! order (the word's modification order), and both promises follow from
//! what each step reads, with no reasoning across words:
//!
//! * **No call slips past a drain.** A call adds itself and reads the bit
//!   in the same step: either it comes before the drain's step on that
//!   shard (and the drain counts it), or after (and it sees the bit and
//!   backs out).
//! * **No lost wake-up.** A drain registers for a wake-up, then reads the
//!   counts. A call that ends after that read takes itself out in a step
//!   that comes after the drain set the bit, so it sees the bit and wakes
//!   the drain.

use crate::sync::atomic::{AtomicUsize, Ordering};

/// The draining bit of a shard's word; the rest is the count.
const DRAINING: usize = 1 << (usize::BITS - 1);

/// What [`enter`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Entered {
    /// Counted in the shard: [`leave`] it when the call ends.
    Admitted,
    /// Refused (draining) and not counted. The drain must be woken: it may
    /// have counted this call for the moment it was.
    Refused,
}

/// Counts a call in `shard`. `nested`: the call is part of work already in
/// flight, admitted while draining.
pub(crate) fn enter(shard: &AtomicUsize, nested: bool) -> Entered {
    let before = shard.fetch_add(1, Ordering::AcqRel);
    if !nested && before & DRAINING != 0 {
        shard.fetch_sub(1, Ordering::AcqRel);
        return Entered::Refused;
    }
    Entered::Admitted
}

/// Takes an ended (or cancelled) call out of `shard`. Returns whether a
/// drain may be waiting for it and must be woken.
pub(crate) fn leave(shard: &AtomicUsize) -> bool {
    shard.fetch_sub(1, Ordering::AcqRel) & DRAINING != 0
}

/// Starts a drain: from now on, new calls are refused.
pub(crate) fn start_drain<'a>(shards: impl IntoIterator<Item = &'a AtomicUsize>) {
    for shard in shards {
        shard.fetch_or(DRAINING, Ordering::AcqRel);
    }
}

/// Ends a drain: new calls are admitted again.
pub(crate) fn resume<'a>(shards: impl IntoIterator<Item = &'a AtomicUsize>) {
    for shard in shards {
        shard.fetch_and(!DRAINING, Ordering::AcqRel);
    }
}

/// The calls in flight, summed over the shards.
pub(crate) fn in_flight<'a>(shards: impl IntoIterator<Item = &'a AtomicUsize>) -> usize {
    shards
        .into_iter()
        .map(|s| s.load(Ordering::Acquire) & !DRAINING)
        .fold(0, usize::wrapping_add)
}
