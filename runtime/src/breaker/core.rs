//! The lock-free state machine of one circuit breaker and its sliding
//! windows, on integer time (nanoseconds since the breaker's origin).
//!
//! This file names its atomics through `crate::sync::atomic` only and uses no
//! other module of the crate: `tests/tests/model_breaker.rs` compiles this very
//! file against `loom`'s atomics, so the code that ships is the code that is
//! model-checked.
//!
//! # The state word
//!
//! Everything that decides admission lives in one `AtomicU64`, so that a single
//! compare-and-swap both checks and changes it:
//!
//! ```text
//! bits 0..3    phase
//! bits 3..24   generation (wrapping), bumped by every transition
//! bits 24..64  Open: open-until, whole milliseconds since the origin, wrapping
//!              HalfOpen: permits taken (24..44) | probe outcomes recorded (44..64)
//! ```
//!
//! The generation travels with every permit; an outcome is counted only while
//! the word still carries the generation it was admitted under.
//!
//! # Time that never runs out
//!
//! Nothing here may depend on how long the breaker has lived. Two choices
//! make that so:
//!
//! * **Open-until** is kept exactly, in nanoseconds since the origin, in a
//!   word of its own (`open_until`, 64 bits: 584 years, which no process
//!   lives). The state word keeps only the whole millisecond of it, wrapping
//!   in 40 bits, as a tag: the exact value belongs to the open state whose
//!   word carries its millisecond. The tag costs no precision (an open wait
//!   ends at exactly its nanosecond, so a caller who slept exactly the
//!   `Retry-After` is admitted) and gives a fallback during the two
//!   instructions between a transition and the publication of its exact end.
//! * **Time-window buckets** are tagged with the low 19 bits of their second
//!   *and* the low 3 bits of a window epoch. The epoch (24 bits, kept with
//!   the present second) is bumped whenever the present jumps by a whole
//!   window or more, that is, whenever every bucket has become stale. Within
//!   one epoch the present only ever moves by less than a window at a time
//!   and every sweep clears what left the window, so any two seconds ever
//!   compared are less than two windows apart (at most 172 800 s, well under
//!   2^18), and a wrapping comparison in 19 bits is exact; across epochs the
//!   epoch alone says "stale". No comparison ever spans the breaker's age.
//!   (The alternative, 64-bit tags, would leave no room in the bucket word
//!   for the counts that must change in the same compare-and-swap.)

use crate::modulo::Modulo;
use crate::sync::SHARDS;
use crate::sync::atomic::{AtomicU32, AtomicU64, Ordering};

const GEN_SHIFT: u32 = 3;
const GEN_BITS: u32 = 21;
const GEN_MASK: u64 = (1 << GEN_BITS) - 1;
const PAYLOAD_SHIFT: u32 = 24;
const FIELD20: u64 = (1 << 20) - 1;
/// The state word's millisecond tag of open-until wraps in 40 bits (34.8 years).
const UNTIL_MASK: u64 = (1 << 40) - 1;
const NANOS_PER_MS: u64 = 1_000_000;
const NANOS_PER_SEC: u64 = 1_000_000_000;

/// The most half-open probes the state word can count.
pub(crate) const MAX_HALF_OPEN_PERMITS: u32 = (1 << 20) - 1;
/// The largest count-based window: one `AtomicU32` per slot is allocated up
/// front, so a typo must not allocate gigabytes.
pub(crate) const MAX_COUNT_WINDOW: u32 = 1_000_000;
/// The longest time-based window: one day. Bucket seconds are compared by
/// wrapping difference in 19 bits, which needs two windows to be shorter
/// than 2^18 seconds.
pub(crate) const MAX_TIME_WINDOW_SECS: u32 = 86_400;

/// The phase of a breaker, as stored in the state word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Closed,
    Open,
    HalfOpen,
    Disabled,
    ForcedOpen,
    MetricsOnly,
}

impl Phase {
    fn code(self) -> u64 {
        match self {
            Phase::Closed => 0,
            Phase::Open => 1,
            Phase::HalfOpen => 2,
            Phase::Disabled => 3,
            Phase::ForcedOpen => 4,
            Phase::MetricsOnly => 5,
        }
    }

    fn from_code(code: u64) -> Phase {
        match code {
            0 => Phase::Closed,
            1 => Phase::Open,
            2 => Phase::HalfOpen,
            3 => Phase::Disabled,
            4 => Phase::ForcedOpen,
            _ => Phase::MetricsOnly,
        }
    }

    /// Phases whose outcomes go into the sliding window.
    fn records(self) -> bool {
        matches!(self, Phase::Closed | Phase::MetricsOnly)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Word(u64);

impl Word {
    fn new(phase: Phase, generation: u32, payload: u64) -> Word {
        Word(
            phase.code()
                | ((generation as u64 & GEN_MASK) << GEN_SHIFT)
                | (payload << PAYLOAD_SHIFT),
        )
    }
    /// An open word whose exact end is `until_ns` (published separately).
    fn open(generation: u32, until_ns: u64) -> Word {
        Word::new(Phase::Open, generation, until_tag(until_ns))
    }
    fn half_open(generation: u32, taken: u64, recorded: u64) -> Word {
        Word::new(Phase::HalfOpen, generation, taken | (recorded << 20))
    }
    fn phase(self) -> Phase {
        Phase::from_code(self.0 & 0b111)
    }
    fn generation(self) -> u32 {
        ((self.0 >> GEN_SHIFT) & GEN_MASK) as u32
    }
    /// A permit under this state, as it stands.
    #[inline]
    fn admission(self) -> Admission {
        Admission {
            phase: self.phase(),
            generation: self.generation(),
        }
    }
    fn next_generation(self) -> u32 {
        ((self.generation() as u64 + 1) & GEN_MASK) as u32
    }
    fn payload(self) -> u64 {
        self.0 >> PAYLOAD_SHIFT
    }
    fn until_tag(self) -> u64 {
        self.payload()
    }
    fn taken(self) -> u64 {
        self.payload() & FIELD20
    }
    fn recorded(self) -> u64 {
        (self.payload() >> 20) & FIELD20
    }
}

/// The whole millisecond of `ns`, wrapping in 40 bits: the state word's tag.
fn until_tag(ns: u64) -> u64 {
    (ns / NANOS_PER_MS) & UNTIL_MASK
}

/// How many generations `a` is after `b` (both wrapping in `GEN_BITS`).
pub(crate) fn generations_after(a: u32, b: u32) -> u32 {
    (u64::from(a).wrapping_sub(u64::from(b)) & GEN_MASK) as u32
}

/// `a` is a later generation than `b` (both wrapping in `GEN_BITS`).
pub(crate) fn gen_newer(a: u64, b: u64) -> bool {
    let d = a.wrapping_sub(b) & GEN_MASK;
    d != 0 && d < (1 << (GEN_BITS - 1))
}

/// Which kind of sliding window, with its size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WindowKind {
    /// The last `size` outcomes.
    Count(u32),
    /// The outcomes of the last `seconds` whole seconds.
    Time(u32),
}

/// What the core needs of the configuration; already validated.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    pub(crate) failure_rate_threshold: f64,
    pub(crate) slow_call_rate_threshold: f64,
    pub(crate) minimum_calls: u32,
    pub(crate) permitted_in_half_open: u32,
    pub(crate) wait_ns: u64,
    pub(crate) window: WindowKind,
    /// A `Retry-After` may open a closed or half-open breaker (opt-in);
    /// otherwise it only lengthens an open one.
    pub(crate) retry_after_opens: bool,
}

/// A granted permit, as the core sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Admission {
    pub(crate) phase: Phase,
    pub(crate) generation: u32,
}

/// The answer to an acquire.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Acquired {
    /// Run the call. `transition` is set for the one caller whose acquire moved
    /// the breaker from open to half-open.
    Admitted {
        admission: Admission,
        transition: Option<Transition>,
    },
    /// Do not run it. `retry_in_ns` is the time left until a probe is admitted,
    /// when known.
    Rejected { retry_in_ns: Option<u64> },
}

/// The time of a record, in nanoseconds since the origin, asked for only
/// when the record needs it: a success in a closed count-based window (the
/// steady path) does not, and converting an `Instant` costs more than the
/// atomics it would feed. Every ask of one record gets the same time.
pub(crate) trait Now {
    fn ns(&mut self) -> u64;
}

/// A time already converted (the models and unit tests give one).
impl Now for u64 {
    fn ns(&mut self) -> u64 {
        *self
    }
}

impl<T: Now + ?Sized> Now for &mut T {
    fn ns(&mut self) -> u64 {
        (**self).ns()
    }
}

/// One outcome handed to the core.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sample {
    /// Counts as neither failure nor success; returns a half-open permit.
    Ignored,
    /// A finished call.
    Call {
        failed: bool,
        slow: bool,
        /// Stay open at least until this instant (nanoseconds since origin):
        /// the server's `Retry-After`, already bounded, when it is honoured.
        hold_until_ns: Option<u64>,
    },
}

/// Why a transition happened.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Cause {
    /// The rates over `calls` outcomes (the closed window's, or the half-open
    /// probes'): at least one of them reached its threshold.
    Rates {
        failure_rate: f32,
        slow_call_rate: f32,
        failure_tripped: bool,
        slow_tripped: bool,
        calls: u64,
    },
    /// Every half-open probe reported and the rates stayed below the thresholds.
    ProbesSucceeded { calls: u64 },
    /// A `Retry-After` opened it, for `hold_ns`.
    RetryAfter { hold_ns: u64 },
    /// The open wait is over; this acquire is the first probe.
    WaitElapsed,
    /// Changed by hand.
    Manual,
}

/// A transition performed by the caller that receives it (exactly one caller
/// receives each transition).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Transition {
    pub(crate) from: Phase,
    pub(crate) to: Phase,
    pub(crate) cause: Cause,
    /// The state word's generation before and after: transitions made by
    /// different threads are announced in this order (see
    /// `Breaker::announce`).
    pub(crate) generations: (u32, u32),
    /// Only the end of an open state moved (a longer `Retry-After`): no
    /// change to announce, but a new generation all the same.
    pub(crate) quiet: bool,
}

/// Counts and rates for a snapshot.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Metrics {
    pub(crate) phase: Phase,
    pub(crate) calls: u64,
    pub(crate) failed: u64,
    pub(crate) slow: u64,
    pub(crate) failure_rate: Option<f32>,
    pub(crate) slow_call_rate: Option<f32>,
}

/// Window totals. Updated with wrapping adds by whoever put counts into, or
/// took counts out of, a slot or bucket; so they equal the sum of the slots
/// once writers finish, but a reader racing a writer may see a count whose
/// subtraction arrived before its addition. `read` refuses such a view.
#[derive(Debug)]
struct Totals {
    calls: AtomicU64,
    failed: AtomicU64,
    slow: AtomicU64,
}

impl Totals {
    fn new() -> Totals {
        Totals {
            calls: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            slow: AtomicU64::new(0),
        }
    }

    fn add(&self, calls: u64, failed: u64, slow: u64) {
        if calls != 0 {
            self.calls.fetch_add(calls, Ordering::AcqRel);
        }
        if failed != 0 {
            self.failed.fetch_add(failed, Ordering::AcqRel);
        }
        if slow != 0 {
            self.slow.fetch_add(slow, Ordering::AcqRel);
        }
    }

    fn sub(&self, calls: u64, failed: u64, slow: u64) {
        self.add(
            calls.wrapping_neg(),
            failed.wrapping_neg(),
            slow.wrapping_neg(),
        );
    }

    fn read(&self) -> Option<(u64, u64, u64)> {
        let calls = self.calls.load(Ordering::Acquire);
        let failed = self.failed.load(Ordering::Acquire);
        let slow = self.slow.load(Ordering::Acquire);
        let sane = |v: u64| (v as i64) >= 0 && v <= calls;
        ((calls as i64) >= 0 && sane(failed) && sane(slow)).then_some((calls, failed, slow))
    }
}

// Count window slot: 0 = empty, else bit 0 | failed << 1 | slow << 2, with
// the generation of the state it was recorded under above
// (`SLOT_GENERATION_SHIFT`), so that a recorder that finds the state changed
// after its write can take back exactly its own outcome (see `Window::record`).
fn slot_value(failed: bool, slow: bool) -> u32 {
    1 | (u32::from(failed) << 1) | (u32::from(slow) << 2)
}
const SLOT_GENERATION_SHIFT: u32 = 3;
fn slot_counts(v: u32) -> (u64, u64, u64) {
    ((v & 1) as u64, ((v >> 1) & 1) as u64, ((v >> 2) & 1) as u64)
}

// Time window bucket, low to high: second (19 bits, wrapping) | epoch (3
// bits, wrapping) | calls | failed | slow (14 bits each). A bucket whose
// calls are 0 is empty, whatever its stamp.
const SECOND_BITS: u32 = 19;
const SECOND_MASK: u64 = (1 << SECOND_BITS) - 1;
const EPOCH_TAG_BITS: u32 = 3;
const EPOCH_TAG_MASK: u64 = (1 << EPOCH_TAG_BITS) - 1;
const STAMP_BITS: u32 = SECOND_BITS + EPOCH_TAG_BITS;
const STAMP_MASK: u64 = (1 << STAMP_BITS) - 1;
const COUNT_BITS: u32 = 14;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;
/// The calls a time window's bucket counts in one second (16 383).
pub(crate) const MAX_CALLS_PER_SECOND: u32 = COUNT_MASK as u32;
const CALLS_SHIFT: u32 = STAMP_BITS;
const FAILED_SHIFT: u32 = STAMP_BITS + COUNT_BITS;
const SLOW_SHIFT: u32 = STAMP_BITS + 2 * COUNT_BITS;

// The present of a time window: epoch (24 bits, wrapping) << 40 | second.
// 2^40 seconds is 34 800 years.
const PRESENT_SECOND_BITS: u32 = 40;
const PRESENT_SECOND_MASK: u64 = (1 << PRESENT_SECOND_BITS) - 1;

fn present_word(epoch: u64, second: u64) -> u64 {
    (epoch << PRESENT_SECOND_BITS) | (second & PRESENT_SECOND_MASK)
}
/// `(epoch, second)` of a present word.
fn present_parts(p: u64) -> (u64, u64) {
    (p >> PRESENT_SECOND_BITS, p & PRESENT_SECOND_MASK)
}
fn stamp(epoch: u64, second: u64) -> u64 {
    ((epoch & EPOCH_TAG_MASK) << SECOND_BITS) | (second & SECOND_MASK)
}
fn bucket_stamp(w: u64) -> u64 {
    w & STAMP_MASK
}
fn bucket_counts(w: u64) -> (u64, u64, u64) {
    (
        (w >> CALLS_SHIFT) & COUNT_MASK,
        (w >> FAILED_SHIFT) & COUNT_MASK,
        (w >> SLOW_SHIFT) & COUNT_MASK,
    )
}
fn bucket_delta(failed: bool, slow: bool) -> u64 {
    (1 << CALLS_SHIFT) | (u64::from(failed) << FAILED_SHIFT) | (u64::from(slow) << SLOW_SHIFT)
}

#[derive(Debug)]
enum Slots {
    Count {
        slots: Box<[AtomicU32]>,
        /// The next position to hand out, as a count that wraps at 2^32;
        /// slot `i` is position `i` modulo the window's size. Where the slot
        /// count does not divide 2^32, the wrap makes one record in four
        /// billion overwrite a slot early: harmless, and a 32-bit count takes
        /// its remainder by two multiplications (`Modulo`) where a 64-bit one
        /// needs a division. Alone on its cache lines: every shard writes it
        /// once per block, and beside the fields every call reads (`block`,
        /// the slots) it made two threads on one breaker move that line
        /// between their cores every few calls (in `perf`, a third of the
        /// window's time on two threads was the load of `block`).
        next: Alone<AtomicU32>,
        /// Since when the window counts outcomes, in one word so that a
        /// reader sees one emptying's values, never a mix
        /// ([`Since`]): `next` when it was last emptied, whether the
        /// window's size of outcomes has been recorded since (sticky until
        /// it is emptied again), and how many times it has been emptied.
        since: AtomicU64,
        /// Positions counted as handed out since the window was emptied
        /// whose outcomes their recorders took back (calls of an earlier
        /// state, see [`Window::record_under`]): the count (low 32 bits)
        /// and the emptying it belongs to ([`Since::epoch`], above).
        withdrawn: AtomicU64,
        /// Positions are handed out `block` at a time to each shard of
        /// threads (`crate::sync::shard`), which records into them in order
        /// through its own cursor, on its own cache line: threads of
        /// different shards then share a write only once per block, where a
        /// shared cursor cost every call a contended read-modify-write. The
        /// calls of one thread fill consecutive positions, exactly as one
        /// ring would; with several, a position handed out but not yet
        /// written keeps its older outcome a little longer, so the window
        /// holds its `size` most recent outcomes give or take `block - 1` per
        /// shard. Every outcome recorded is in the totals exactly once.
        cursors: Box<[Cursor; SHARDS]>,
        block: u32,
        modulo: Modulo,
    },
    Time {
        buckets: Box<[AtomicU64]>,
        /// The latest second anyone has recorded or read at, with the
        /// window's epoch (see `present`).
        present: AtomicU64,
        /// How many emptyings are sweeping the window now: nothing is
        /// judged on it meanwhile.
        sweepers: AtomicU32,
    },
}

/// A value alone on its cache lines (128 bytes: adjacent-line prefetching
/// pairs 64-byte lines on x86), away from what other threads read.
#[derive(Debug)]
#[repr(align(128))]
struct Alone<T>(T);

impl<T> std::ops::Deref for Alone<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

/// One shard's cursor: its next position (low 32 bits) and how many of
/// its block are left after it (high 32 bits). Alone on its cache line
/// (128 bytes: adjacent-line prefetching pairs 64-byte lines on x86).
#[derive(Debug)]
#[repr(align(128))]
struct Cursor(AtomicU64);

impl Cursor {
    /// The next position for this shard's record: from its block, or from
    /// a new block taken from `next` by the thread that claims the refill
    /// (its shard-mates meanwhile take single positions straight from
    /// `next`). Every position handed out is written: none is skipped, so
    /// no slot keeps an old outcome a pass longer. Windows of blocks of one
    /// take every position from `next`.
    #[inline]
    fn take(&self, next: &AtomicU32, block: u32) -> u32 {
        // The thread that finds the block spent claims the refill first, so
        // that no block is ever taken and then dropped.
        const CLAIMED: u32 = u32::MAX;
        if block == 1 {
            return next.fetch_add(1, Ordering::Relaxed);
        }
        let mut w = self.0.load(Ordering::Relaxed);
        loop {
            let (pos, left) = (w as u32, (w >> 32) as u32);
            if left == CLAIMED {
                // Another thread of this shard is taking a block: one
                // position of its own, straight from `next`.
                return next.fetch_add(1, Ordering::Relaxed);
            }
            let want = if left > 0 {
                u64::from(pos.wrapping_add(1)) | (u64::from(left - 1) << 32)
            } else {
                u64::from(pos) | (u64::from(CLAIMED) << 32)
            };
            match self
                .0
                .compare_exchange_weak(w, want, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) if left > 0 => return pos,
                Ok(_) => {
                    let start = next.fetch_add(block, Ordering::Relaxed);
                    self.0.store(
                        u64::from(start.wrapping_add(1)) | (u64::from(block - 1) << 32),
                        Ordering::Relaxed,
                    );
                    return start;
                }
                Err(seen) => w = seen,
            }
        }
    }
}

/// A count window's `since` word: the position it counts from (low 32
/// bits), whether it has been filled since (bit 32), how many emptyings
/// are sweeping it now (bits 33 to 39), and how many times its count has
/// restarted (the bits above, wrapping), so that a look that began before
/// one can tell (its word no longer matches).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Since(u64);

impl Since {
    const FILLED: u64 = 1 << 32;
    const SWEEPER: u64 = 1 << 33;
    const SWEEPERS: u64 = 0x7f << 33;
    const EPOCH: u64 = 1 << 40;

    fn start(self) -> u32 {
        self.0 as u32
    }

    /// Which emptying's count this is (24 bits, wrapping).
    fn epoch(self) -> u32 {
        (self.0 / Self::EPOCH) as u32
    }

    fn filled(self) -> bool {
        self.0 & Self::FILLED != 0
    }

    fn sweeping(self) -> bool {
        self.0 & Self::SWEEPERS != 0
    }

    fn marked_filled(self) -> Since {
        Since(self.0 | Self::FILLED)
    }

    /// An emptying begins: nothing recorded counts until it ends.
    fn sweep_begins(self) -> Since {
        // Saturates: past 127 sweeps at once, it stays marked until the
        // ends bring it down (an end at the top does not undercount).
        let sweepers = (self.0 & Self::SWEEPERS)
            .saturating_add(Self::SWEEPER)
            .min(Self::SWEEPERS);
        let epoch = (self.0 & !(Self::EPOCH - 1)).wrapping_add(Self::EPOCH);
        Since(epoch | sweepers | u64::from(self.start()))
    }

    /// An emptying ends: the count restarts from `next`.
    fn sweep_ends(self, next: u32) -> Since {
        let sweepers = (self.0 & Self::SWEEPERS).saturating_sub(Self::SWEEPER);
        let epoch = (self.0 & !(Self::EPOCH - 1)).wrapping_add(Self::EPOCH);
        Since(epoch | sweepers | u64::from(next))
    }
}

/// Counts `position` as withdrawn from the outcomes recorded since the
/// window was emptied, if it is one of them: a call of an earlier state
/// took its outcome back, and the position it was handed after the
/// emptying holds nothing of it.
#[cold]
fn withdraw(since: &AtomicU64, withdrawn: &AtomicU64, next: &AtomicU32, position: u32) {
    let from = Since(since.load(Ordering::SeqCst));
    if from.sweeping() {
        return; // not counted: the count restarts when the sweep ends
    }
    let handed = next.load(Ordering::Acquire).wrapping_sub(from.start());
    if position.wrapping_sub(from.start()) >= handed {
        return; // handed out before the emptying
    }
    let epoch = u64::from(from.epoch());
    let _ = withdrawn.fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
        Some(if w >> 32 == epoch {
            w + 1
        } else {
            (epoch << 32) | 1
        })
    });
}

/// A sliding window with exactly-once accounting of its totals.
#[derive(Debug)]
pub(crate) struct Window {
    slots: Slots,
    totals: Totals,
}

impl Window {
    pub(crate) fn new(kind: WindowKind) -> Window {
        let slots = match kind {
            WindowKind::Count(size) => {
                let size = size.max(1);
                Slots::Count {
                    slots: (0..size).map(|_| AtomicU32::new(0)).collect(),
                    next: Alone(AtomicU32::new(0)),
                    since: AtomicU64::new(0),
                    withdrawn: AtomicU64::new(0),
                    cursors: Box::new(std::array::from_fn(|_| Cursor(AtomicU64::new(0)))),
                    // A sixteenth of the window, up to 8: the window of 100
                    // calls by default hands out 6 at a time; windows under
                    // 32, one (exactly the order of the records).
                    block: (size / 16).clamp(1, 8),
                    modulo: Modulo::new(size),
                }
            }
            WindowKind::Time(seconds) => Slots::Time {
                buckets: (0..seconds.max(1)).map(|_| AtomicU64::new(0)).collect(),
                present: AtomicU64::new(present_word(0, 0)),
                sweepers: AtomicU32::new(0),
            },
        };
        Window {
            slots,
            totals: Totals::new(),
        }
    }

    /// Puts one outcome into the window. Returns whether the breaker may
    /// have to open: a success that only replaces a success (the steady
    /// path), or takes a failure or slow mark out, cannot open it, and the
    /// caller skips reading the totals. A failure or slow call always asks,
    /// also when it replaces one (a window full of failures): the record
    /// that filled the window may have read the totals while a racing
    /// writer left them inconsistent, or before enough outcomes were in
    /// (see [`Window::recorded_enough`]).
    #[allow(dead_code)] // the loom models' entry (tests/tests/model_breaker.rs)
    pub(crate) fn record(&self, failed: bool, slow: bool, now: impl Now) -> bool {
        self.record_under(failed, slow, 0, now, || true)
    }

    /// [`record`](Self::record) by a call admitted under the state of
    /// `generation`, which `current` tells is still the breaker's. A state
    /// change empties the window after it is published, and a recorder
    /// that read the state before the change may write after the sweep
    /// went past its slot: when `current` says the state changed after a
    /// write, the recorder takes its outcome back out (a count window's
    /// slot carries the generation, so it takes back its own and no
    /// other). A time window does the same by its own epoch, which an
    /// emptying moves on.
    pub(crate) fn record_under(
        &self,
        failed: bool,
        slow: bool,
        generation: u32,
        mut now: impl Now,
        current: impl FnOnce() -> bool,
    ) -> bool {
        match &self.slots {
            Slots::Count {
                slots,
                next,
                cursors,
                block,
                modulo,
                since,
                withdrawn,
            } => {
                // `SHARDS` is a power of two: the mask is the remainder.
                let cursor = &cursors[crate::sync::shard() & (SHARDS - 1)];
                let position = cursor.take(next, *block);
                let i = modulo.of(position);
                let value = slot_value(failed, slow);
                let new = value | (generation << SLOT_GENERATION_SHIFT);
                let slot = &slots[i as usize];
                // A success replacing a success changes nothing: no write,
                // so callers sharing the breaker do not bounce the slot's
                // cache line between their cores.
                // A failure or slow call asks in any case (`value` is a
                // success's, 1, for neither).
                let bad = value != slot_value(false, false);
                if slot.load(Ordering::Acquire) == new {
                    return bad;
                }
                // Sequentially consistent with the state's changes and the
                // sweep after them: either `current` below sees the change,
                // or the sweep sees this write.
                let old = slot.swap(new, Ordering::SeqCst);
                if old == new {
                    return bad;
                }
                let (nc, nf, ns) = slot_counts(new);
                let (oc, of, os) = slot_counts(old);
                self.totals.add(
                    nc.wrapping_sub(oc),
                    nf.wrapping_sub(of),
                    ns.wrapping_sub(os),
                );
                if !current() {
                    // Put back what was there, unless the sweep took this
                    // outcome already; but not an outcome of this call's
                    // own state, which the sweep has taken or will take
                    // (another call of that state may have written it after
                    // the sweep went past, and taken nothing back when it
                    // found this one's outcome in its place). Such an
                    // outcome of an opened breaker's evidence is lost: one
                    // fewer in a window nothing is judged on until it is
                    // emptied.
                    let back = if old >> SLOT_GENERATION_SHIFT == generation {
                        0
                    } else {
                        old
                    };
                    if slot
                        .compare_exchange(new, back, Ordering::SeqCst, Ordering::Relaxed)
                        .is_ok()
                    {
                        let (bc, bf, bs) = slot_counts(back);
                        self.totals.add(
                            bc.wrapping_sub(nc),
                            bf.wrapping_sub(nf),
                            bs.wrapping_sub(ns),
                        );
                    }
                    withdraw(since, withdrawn, next, position);
                    return false;
                }
                bad || nc > oc
            }
            Slots::Time {
                buckets, present, ..
            } => {
                let second = now.ns() / NANOS_PER_SEC;
                self.advance_to(second);
                let len = buckets.len() as u64;
                let bucket = &buckets[(second % len) as usize];
                let delta = bucket_delta(failed, slow);
                let mut w = bucket.load(Ordering::Acquire);
                loop {
                    // Read after the bucket: whoever wrote a later second into
                    // it had moved the present there first, so this read sees
                    // at least that second.
                    let (epoch, last) = present_parts(present.load(Ordering::Acquire));
                    if second + len <= last {
                        return false; // this call's second has already left the window
                    }
                    let mine = stamp(epoch, second);
                    let (new, expired) = if bucket_counts(w).0 == 0 {
                        (mine | delta, (0, 0, 0))
                    } else if bucket_stamp(w) == mine {
                        if bucket_counts(w).0 == COUNT_MASK {
                            // A full second: the outcomes already in it are the sample.
                            return false;
                        }
                        (w + delta, (0, 0, 0))
                    } else {
                        // Another second of this bucket. It cannot be a later
                        // one (that would have moved the present past this
                        // second's window, checked above); this second of an
                        // earlier epoch is a record that an emptying's sweep
                        // missed and its recorder has not taken back yet: it
                        // is stale, and replaced here if no sweep got to it.
                        (mine | delta, bucket_counts(w))
                    };
                    // Sequentially consistent with the moves of the present
                    // and the sweeps after them (see below).
                    match bucket.compare_exchange(w, new, Ordering::SeqCst, Ordering::Acquire) {
                        Ok(_) => {
                            let (c, f, s) = bucket_counts(delta);
                            self.totals.add(c, f, s);
                            self.totals.sub(expired.0, expired.1, expired.2);
                            // A new epoch since this call read the present
                            // (a jump of a whole window, or an emptying, whose
                            // sweep may have gone past the bucket before this
                            // write), a present that has left this second
                            // behind (its sweep likewise), or a new state
                            // (its emptying sweeps only the epochs before its
                            // own, and this call may have read the new one):
                            // this outcome is not the window's, and is taken
                            // back. Else the state changes after this check,
                            // and its emptying sweeps this write out.
                            let (now_epoch, now_last) =
                                present_parts(present.load(Ordering::SeqCst));
                            if now_epoch != epoch || second + len <= now_last || !current() {
                                self.take_back(bucket, mine, delta);
                                return false;
                            }
                            return true;
                        }
                        Err(actual) => w = actual,
                    }
                }
            }
        }
    }

    /// Takes one outcome (`delta`) recorded into `bucket` under `mine`
    /// back out, unless a sweep has taken the bucket's second already (no
    /// other epoch's outcome carries `mine`).
    #[cold]
    fn take_back(&self, bucket: &AtomicU64, mine: u64, delta: u64) {
        let mut w = bucket.load(Ordering::Acquire);
        while bucket_stamp(w) == mine && bucket_counts(w).0 > 0 {
            match bucket.compare_exchange(w, w - delta, Ordering::SeqCst, Ordering::Acquire) {
                Ok(_) => {
                    let (c, f, s) = bucket_counts(delta);
                    self.totals.sub(c, f, s);
                    return;
                }
                Err(actual) => w = actual,
            }
        }
    }

    /// Moves a time window's present to `second`; the one caller that moves it
    /// forward expires the buckets that left the window.
    pub(crate) fn advance_to(&self, second: u64) {
        let Slots::Time {
            buckets, present, ..
        } = &self.slots
        else {
            return;
        };
        let len = buckets.len() as u64;
        let second = second & PRESENT_SECOND_MASK;
        let mut p = present.load(Ordering::Acquire);
        let target = loop {
            let (epoch, last) = present_parts(p);
            if second <= last {
                return;
            }
            // A jump of a whole window makes every bucket stale: a new epoch,
            // so that no bucket's second is ever compared across the gap.
            let epoch = if second - last >= len {
                epoch.wrapping_add(1) & (u64::MAX >> PRESENT_SECOND_BITS)
            } else {
                epoch
            };
            let next = present_word(epoch, second);
            // Sequentially consistent, as the sweep below: a recorder that
            // read the epoch before a jump sees it after its write (see
            // `record_under`).
            match present.compare_exchange(p, next, Ordering::SeqCst, Ordering::Acquire) {
                Ok(_) => break next,
                Err(actual) => p = actual,
            }
        };
        let (epoch, now) = present_parts(target);
        for bucket in buckets.iter() {
            let mut w = bucket.load(Ordering::Acquire);
            loop {
                let (c, f, s) = bucket_counts(w);
                if c == 0 {
                    break;
                }
                // Read after the bucket (see `record`): while the present is
                // still `target`, the bucket holds no second after `now`.
                if present.load(Ordering::Acquire) != target {
                    return; // a later present; its own sweep expires what this one would
                }
                let stale = (bucket_stamp(w) >> SECOND_BITS) != (epoch & EPOCH_TAG_MASK)
                    || (now.wrapping_sub(bucket_stamp(w)) & SECOND_MASK) >= len;
                if !stale {
                    break;
                }
                match bucket.compare_exchange(w, 0, Ordering::SeqCst, Ordering::Acquire) {
                    Ok(_) => {
                        self.totals.sub(c, f, s);
                        break;
                    }
                    Err(actual) => w = actual,
                }
            }
        }
    }

    /// Whether at least `minimum` outcomes have been recorded since the
    /// window was last emptied, when it holds only `calls`. A count window
    /// can hold fewer outcomes than it was given: a shard of threads takes
    /// positions a block at a time, and the positions of a block its
    /// threads have not reached yet (a thread that stopped making calls)
    /// stay empty until the window wraps onto them again. Outcomes
    /// recorded since the window was emptied are the positions handed out
    /// since, less those the shards hold unused; once they reach the
    /// window's size, the window counts as full (until it is emptied), and
    /// its rates are taken over the outcomes it holds.
    pub(crate) fn recorded_enough(&self, calls: u64, minimum: u64) -> bool {
        !self.sweeping() && (calls >= minimum || self.recorded_since_emptied(minimum))
    }

    /// [`recorded_enough`](Self::recorded_enough) of a window holding
    /// fewer than `minimum` outcomes: out of line, off the path of a
    /// window that is full. `false` whenever the window was emptied while
    /// this looked (a stale answer could only be too large).
    #[inline(never)]
    fn recorded_since_emptied(&self, minimum: u64) -> bool {
        let Slots::Count {
            slots,
            next,
            since,
            withdrawn,
            cursors,
            block,
            ..
        } = &self.slots
        else {
            return false;
        };
        // Positions handed out one at a time leave no holes: the window
        // holds every outcome recorded since (and a position taken, not yet
        // written, must not count as one).
        if *block == 1 {
            return false;
        }
        let word = since.load(Ordering::Acquire);
        let from = Since(word);
        if from.filled() {
            return true;
        }
        // Being emptied: what is recorded meanwhile may be swept out.
        if from.sweeping() {
            return false;
        }
        let handed = next.load(Ordering::Acquire).wrapping_sub(from.start());
        // Read after `next`: a block taken meanwhile is counted unused but
        // not handed out, which can only delay the answer. A shard taking
        // a new block (its cursor claimed) may have taken it from `next`
        // already: all of it but the position it records is unused.
        let unused: u32 = cursors
            .iter()
            .map(|c| match (c.0.load(Ordering::Relaxed) >> 32) as u32 {
                u32::MAX => block - 1,
                left => left,
            })
            .fold(0, u32::saturating_add);
        let taken_back = match withdrawn.load(Ordering::Acquire) {
            w if w >> 32 == u64::from(from.epoch()) => w as u32,
            _ => 0,
        };
        if since.load(Ordering::Acquire) != word {
            return false;
        }
        let recorded = u64::from(handed.saturating_sub(unused).saturating_sub(taken_back));
        if recorded >= slots.len() as u64 {
            // Only if the window has not been emptied since `word`.
            let _ = since.compare_exchange(
                word,
                from.marked_filled().0,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
        }
        recorded >= minimum
    }

    /// Marks the window as being emptied: until
    /// [`finish_emptying`](Self::finish_emptying) has swept it, no record
    /// is judged on it ([`recorded_enough`](Self::recorded_enough) says
    /// no), so that a call of the state published meanwhile is never
    /// judged on the old window's remains.
    pub(crate) fn begin_emptying(&self) {
        match &self.slots {
            Slots::Count { since, .. } => {
                let _ = since.fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
                    Some(Since(w).sweep_begins().0)
                });
            }
            Slots::Time { sweepers, .. } => {
                sweepers.fetch_add(1, Ordering::SeqCst);
            }
        }
    }

    /// Sweeps every slot out, and counts the window's outcomes from the
    /// positions handed out from now on: the shards' blocks taken before
    /// are dropped (their unused positions would be neither counted nor
    /// handed out again), and outcomes recorded during the sweep that
    /// stayed are not counted (which can only delay an opening).
    pub(crate) fn finish_emptying(&self) {
        match &self.slots {
            Slots::Count {
                slots,
                next,
                since,
                cursors,
                ..
            } => {
                for slot in slots.iter() {
                    let (c, f, s) = slot_counts(slot.swap(0, Ordering::SeqCst));
                    self.totals.sub(c, f, s);
                }
                for cursor in cursors.iter() {
                    cursor.0.store(0, Ordering::Relaxed);
                }
                let _ = since.fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
                    Some(Since(w).sweep_ends(next.load(Ordering::Acquire)).0)
                });
            }
            Slots::Time {
                buckets,
                present,
                sweepers,
            } => {
                // A new epoch first (after the new state is published), then
                // a sweep of the buckets of earlier epochs. A recorder of the
                // old state that writes after the sweep went past its bucket
                // sees the new epoch or the new state, and takes its outcome
                // back (see `record_under`); one that read the new epoch
                // already wrote where the sweep does not go, and sees the new
                // state. Outcomes of the new state stamped with the old epoch
                // are swept out, which can only delay an opening.
                let bumped = present.fetch_update(Ordering::SeqCst, Ordering::Acquire, |p| {
                    let (epoch, second) = present_parts(p);
                    Some(present_word(
                        epoch.wrapping_add(1) & (u64::MAX >> PRESENT_SECOND_BITS),
                        second,
                    ))
                });
                let (epoch, _) = present_parts(bumped.unwrap_or_else(|p| p));
                let fresh = (epoch.wrapping_add(1) & EPOCH_TAG_MASK) << SECOND_BITS;
                for bucket in buckets.iter() {
                    // Read by a write (of nothing): a recorder whose write
                    // comes after it in the bucket's order then sees the
                    // new epoch and state.
                    let mut w = bucket.fetch_or(0, Ordering::SeqCst);
                    while bucket_counts(w).0 > 0 && bucket_stamp(w) & !SECOND_MASK != fresh {
                        match bucket.compare_exchange(w, 0, Ordering::SeqCst, Ordering::Acquire) {
                            Ok(_) => {
                                let (c, f, s) = bucket_counts(w);
                                self.totals.sub(c, f, s);
                                break;
                            }
                            Err(actual) => w = actual,
                        }
                    }
                }
                sweepers.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }

    /// Being emptied ([`begin_emptying`](Self::begin_emptying)).
    fn sweeping(&self) -> bool {
        match &self.slots {
            Slots::Count { since, .. } => Since(since.load(Ordering::Acquire)).sweeping(),
            Slots::Time { sweepers, .. } => sweepers.load(Ordering::Acquire) != 0,
        }
    }

    /// `(calls, failed, slow)` in the window, or `None` while a racing writer
    /// leaves the totals inconsistent.
    pub(crate) fn totals(&self) -> Option<(u64, u64, u64)> {
        self.totals.read()
    }

    /// `(calls, failed, slow)` summed over the slots themselves; equal to
    /// [`Window::totals`] whenever no writer is running.
    pub(crate) fn slot_sum(&self) -> (u64, u64, u64) {
        let mut sum = (0, 0, 0);
        let mut add = |(c, f, s): (u64, u64, u64)| {
            sum.0 += c;
            sum.1 += f;
            sum.2 += s;
        };
        match &self.slots {
            Slots::Count { slots, .. } => slots
                .iter()
                .for_each(|x| add(slot_counts(x.load(Ordering::Acquire)))),
            Slots::Time { buckets, .. } => buckets
                .iter()
                .for_each(|x| add(bucket_counts(x.load(Ordering::Acquire)))),
        }
        sum
    }
}

fn percent(part: u64, whole: u64) -> f64 {
    part as f64 * 100.0 / whole as f64
}

/// The state machine.
///
/// Alone on its cache lines (128 bytes: x86 prefetches 64-byte lines in
/// pairs): its state word is read by every call and its window written, so that where the heap
/// puts another part's data cannot make that data's readers and these
/// writers take the line from each other (the full stack on two threads
/// ran at 494 to 647 ns a call in 4 runs of 5, at 315 to 381 ns once
/// aligned).
#[derive(Debug)]
#[repr(align(128))]
pub(crate) struct Core {
    settings: Settings,
    state: AtomicU64,
    /// The exact end of the current open state, in nanoseconds since the
    /// origin; valid while its whole millisecond equals the state word's tag
    /// (see the module's documentation and `publish_until`).
    open_until: AtomicU64,
    /// Half-open failures and slow calls: generation (21 bits) | failed (21)
    /// | slow (21). Tagged rather than reset, so that a reset can never wipe
    /// counts of a later half-open period.
    half_open_counts: AtomicU64,
    window: Window,
    /// The latest end a server's `Retry-After` asked for while the breaker
    /// was closed or half-open and did not open on it, in nanoseconds since
    /// the origin (0: none): an opening before then waits until then (see
    /// [`hold_open`](Core::hold_open)). Cleared by a manual transition
    /// only: an end in the past changes nothing.
    held_until: AtomicU64,
}

impl Core {
    pub(crate) fn new(settings: Settings, initial: Phase) -> Core {
        Core {
            settings,
            state: AtomicU64::new(Word::new(initial, 0, 0).0),
            open_until: AtomicU64::new(0),
            half_open_counts: AtomicU64::new(GEN_MASK),
            window: Window::new(settings.window),
            held_until: AtomicU64::new(0),
        }
    }

    pub(crate) fn phase(&self) -> Phase {
        Word(self.state.load(Ordering::Acquire)).phase()
    }

    #[allow(dead_code, reason = "read by the loom model test")]
    pub(crate) fn window(&self) -> &Window {
        &self.window
    }

    /// The exact end of the open state, when it is published and the breaker
    /// is open: for the model test.
    #[allow(dead_code, reason = "read by the loom model test")]
    pub(crate) fn open_until_ns(&self) -> Option<u64> {
        let w = Word(self.state.load(Ordering::Acquire));
        let f = self.open_until.load(Ordering::Acquire);
        (w.phase() == Phase::Open && until_tag(f) == w.until_tag()).then_some(f)
    }

    /// Makes `until_ns` the exact end of the open state `word`, unless the
    /// state has moved on. Called by the one caller whose compare-and-swap
    /// installed `word`. The check and the write are one compare-and-swap on
    /// the value read before the check, so a writer whose state was replaced
    /// meanwhile can never overwrite the end its successor published (the
    /// successor either finds its own word and writes after, or changed
    /// `open_until` first and so fails this exchange).
    fn publish_until(&self, word: Word, until_ns: u64) {
        loop {
            let current = self.open_until.load(Ordering::Acquire);
            if self.state.load(Ordering::Acquire) != word.0 || current == until_ns {
                return;
            }
            if self
                .open_until
                .compare_exchange(current, until_ns, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return;
            }
        }
    }

    /// When open state `w` ends: exact once published; before that (two
    /// instructions after the transition) the start of the millisecond the
    /// word carries, so that nobody is refused past the end.
    fn open_end(&self, w: Word, now_ns: u64) -> u64 {
        let exact = self.open_until.load(Ordering::Acquire);
        if until_tag(exact) == w.until_tag() {
            return exact;
        }
        // The tag wraps every 2^40 ms; read it as the nearest such
        // millisecond not more than half a period before now.
        let now_ms = now_ns / NANOS_PER_MS;
        let ahead = w.until_tag().wrapping_sub(now_ms) & UNTIL_MASK;
        let end_ms = if ahead < (1 << 39) {
            now_ms + ahead
        } else {
            now_ms.saturating_sub((UNTIL_MASK + 1) - ahead)
        };
        end_ms.saturating_mul(NANOS_PER_MS)
    }

    /// Whether a call made at `now_ns` would be refused for the state the
    /// breaker is in: forced open, or open with its wait not over (an open
    /// breaker whose wait is over admits the next call as a probe).
    pub(crate) fn refuses_at(&self, now_ns: u64) -> bool {
        let w = Word(self.state.load(Ordering::Acquire));
        match w.phase() {
            Phase::ForcedOpen => true,
            Phase::Open => now_ns < self.open_end(w, now_ns),
            Phase::Closed | Phase::MetricsOnly | Phase::Disabled | Phase::HalfOpen => false,
        }
    }

    /// Admits a call without the time, when the breaker's state decides
    /// without it (closed, metrics only, disabled): the steady path. `None`
    /// for every other state: ask [`try_acquire`](Core::try_acquire).
    #[inline]
    pub(crate) fn try_acquire_untimed(&self) -> Option<Admission> {
        let w = Word(self.state.load(Ordering::Acquire));
        match w.phase() {
            Phase::Closed | Phase::MetricsOnly | Phase::Disabled => Some(w.admission()),
            Phase::ForcedOpen | Phase::Open | Phase::HalfOpen => None,
        }
    }

    pub(crate) fn try_acquire(&self, now_ns: u64) -> Acquired {
        let mut w = Word(self.state.load(Ordering::Acquire));
        loop {
            let next = match w.phase() {
                Phase::Closed | Phase::MetricsOnly | Phase::Disabled => {
                    return Acquired::Admitted {
                        admission: w.admission(),
                        transition: None,
                    };
                }
                Phase::ForcedOpen => return Acquired::Rejected { retry_in_ns: None },
                Phase::Open => {
                    let end = self.open_end(w, now_ns);
                    if now_ns < end {
                        return Acquired::Rejected {
                            retry_in_ns: Some(end - now_ns),
                        };
                    }
                    Word::half_open(w.next_generation(), 1, 0)
                }
                Phase::HalfOpen => {
                    if w.taken() >= u64::from(self.settings.permitted_in_half_open) {
                        return Acquired::Rejected { retry_in_ns: None };
                    }
                    Word(w.0 + (1 << PAYLOAD_SHIFT))
                }
            };
            match self
                .state
                .compare_exchange(w.0, next.0, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    let admission = Admission {
                        phase: Phase::HalfOpen,
                        generation: next.generation(),
                    };
                    let transition = (w.phase() == Phase::Open).then(|| {
                        self.add_half_open_counts(next.generation(), false, false);
                        Transition {
                            from: Phase::Open,
                            to: Phase::HalfOpen,
                            cause: Cause::WaitElapsed,
                            generations: (w.generation(), next.generation()),
                            quiet: false,
                        }
                    });
                    return Acquired::Admitted {
                        admission,
                        transition,
                    };
                }
                Err(actual) => w = Word(actual),
            }
        }
    }

    /// Returns a half-open permit whose call ended without an outcome that counts.
    pub(crate) fn release(&self, admission: Admission) {
        if admission.phase != Phase::HalfOpen {
            return;
        }
        let mut w = Word(self.state.load(Ordering::Acquire));
        while w.phase() == Phase::HalfOpen
            && w.generation() == admission.generation
            && w.taken() > 0
        {
            let next = Word(w.0 - (1 << PAYLOAD_SHIFT));
            match self
                .state
                .compare_exchange(w.0, next.0, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return,
                Err(actual) => w = Word(actual),
            }
        }
    }

    /// Records one outcome; returns the transitions this caller performed.
    /// The loom model's entry (`tests/tests/model_breaker.rs`); the library
    /// records through [`record_then`](Self::record_then).
    #[allow(dead_code, reason = "used by the loom model, which includes this file")]
    pub(crate) fn record(
        &self,
        admission: Admission,
        sample: Sample,
        now: impl Now,
    ) -> [Option<Transition>; 2] {
        let mut performed = [None, None];
        self.record_then(admission, sample, now, |t| performed = t);
        performed
    }

    /// Records one outcome, and hands the transitions this caller
    /// performed to `performed`, only if it performed any. The steady path
    /// then tests each `Option` where it was made, rather than returning
    /// the pair through memory (on AMD processors, reading it back whole
    /// right after its tags were written a byte at a time stalled the load:
    /// about 4 % of a breaker call).
    #[inline]
    pub(crate) fn record_then(
        &self,
        admission: Admission,
        sample: Sample,
        mut now: impl Now,
        performed: impl FnOnce([Option<Transition>; 2]),
    ) {
        let (failed, slow, hold_until_ns) = match sample {
            Sample::Ignored => {
                self.release(admission);
                return;
            }
            Sample::Call {
                failed,
                slow,
                hold_until_ns,
            } => (failed, slow, hold_until_ns),
        };
        let first = match admission.phase {
            Phase::Closed | Phase::MetricsOnly => {
                self.record_closed(admission, failed, slow, &mut now)
            }
            Phase::HalfOpen => self.record_half_open(admission, failed, slow, now.ns()),
            Phase::Open | Phase::Disabled | Phase::ForcedOpen => None,
        };
        let second = match &first {
            Some(t) if t.to == Phase::Open => self.opened_then_hold(hold_until_ns, now.ns()),
            _ => hold_until_ns.and_then(|until| self.hold_open(until, now.ns())),
        };
        if first.is_some() || second.is_some() {
            performed([first, second]);
        }
    }

    /// Records an outcome admitted while closed (or only measured). In
    /// line, so that on the steady path (nothing may rise) the caller sees
    /// `None` without a returned `Option<Transition>` written to memory
    /// and read back (on AMD processors, a load of a value written a byte
    /// at a time just before stalls until the stores retire).
    #[inline(always)]
    fn record_closed(
        &self,
        admission: Admission,
        failed: bool,
        slow: bool,
        now: &mut impl Now,
    ) -> Option<Transition> {
        let w = Word(self.state.load(Ordering::Acquire));
        if !w.phase().records() || w.generation() != admission.generation {
            return None; // admitted under an earlier state: not evidence about this one
        }
        let may_rise = self
            .window
            .record_under(failed, slow, w.generation(), &mut *now, || {
                Word(self.state.load(Ordering::SeqCst)).generation() == admission.generation
            });
        if !may_rise || w.phase() != Phase::Closed {
            return None;
        }
        self.trip_closed(w, now)
    }

    /// Opens a closed breaker whose rates have risen to a threshold.
    #[inline(never)]
    fn trip_closed(&self, w: Word, now: &mut impl Now) -> Option<Transition> {
        let (calls, failures, slows) = self.window.totals()?;
        if calls == 0
            || !self
                .window
                .recorded_enough(calls, u64::from(self.settings.minimum_calls))
        {
            return None;
        }
        let cause = self.tripping(failures, slows, calls)?;
        let until = self.opening_end(now.ns());
        let open = Word::open(w.next_generation(), until);
        // A closed word carries no payload, so it changes only by a transition:
        // one attempt suffices, and only one recorder can win it. Sequentially
        // consistent with `hold_open`'s record of a `Retry-After` (see there).
        self.state
            .compare_exchange(w.0, open.0, Ordering::SeqCst, Ordering::Acquire)
            .ok()
            .map(|_| {
                self.publish_until(open, until);
                Transition {
                    from: Phase::Closed,
                    to: Phase::Open,
                    cause,
                    generations: (w.generation(), open.generation()),
                    quiet: false,
                }
            })
    }

    /// The cause to open, when either rate over `calls` reaches its threshold.
    fn tripping(&self, failed: u64, slow: u64, calls: u64) -> Option<Cause> {
        let fr = percent(failed, calls);
        let sr = percent(slow, calls);
        let failure_tripped = fr >= self.settings.failure_rate_threshold;
        let slow_tripped = sr >= self.settings.slow_call_rate_threshold;
        (failure_tripped || slow_tripped).then_some(Cause::Rates {
            failure_rate: fr as f32,
            slow_call_rate: sr as f32,
            failure_tripped,
            slow_tripped,
            calls,
        })
    }

    fn record_half_open(
        &self,
        admission: Admission,
        failed: bool,
        slow: bool,
        now_ns: u64,
    ) -> Option<Transition> {
        let generation = admission.generation;
        // Counted before the probe is marked recorded, so that the recorder that
        // completes the set finds every probe's failure already counted.
        self.add_half_open_counts(generation, failed, slow);
        let until = self.opening_end(now_ns);
        let mut w = Word(self.state.load(Ordering::Acquire));
        loop {
            if w.phase() != Phase::HalfOpen || w.generation() != generation {
                return None;
            }
            let recorded = w.recorded() + 1;
            let (next, transition) = if recorded >= u64::from(self.settings.permitted_in_half_open)
            {
                let (failures, slows) = self.half_open_counts(generation);
                match self.tripping(failures, slows, recorded) {
                    Some(cause) => (
                        Word::open(w.next_generation(), until),
                        Some(Transition {
                            from: Phase::HalfOpen,
                            to: Phase::Open,
                            cause,
                            generations: (generation, w.next_generation()),
                            quiet: false,
                        }),
                    ),
                    None => (
                        Word::new(Phase::Closed, w.next_generation(), 0),
                        Some(Transition {
                            from: Phase::HalfOpen,
                            to: Phase::Closed,
                            cause: Cause::ProbesSucceeded { calls: recorded },
                            generations: (generation, w.next_generation()),
                            quiet: false,
                        }),
                    ),
                }
            } else {
                (Word::half_open(generation, w.taken(), recorded), None)
            };
            match self.change_state(w, next) {
                Ok(_) => {
                    if next.phase() == Phase::Open {
                        self.publish_until(next, until);
                    }
                    return transition;
                }
                Err(actual) => w = Word(actual),
            }
        }
    }

    fn add_half_open_counts(&self, generation: u32, failed: bool, slow: bool) {
        let generation = u64::from(generation);
        let delta = (u64::from(failed) << 21) | (u64::from(slow) << 42);
        let mut w = self.half_open_counts.load(Ordering::Acquire);
        loop {
            let tag = w & GEN_MASK;
            let next = if tag == generation {
                if delta == 0 {
                    return;
                }
                w + delta
            } else if gen_newer(tag, generation) {
                return; // a later half-open period owns the counters
            } else {
                generation | delta
            };
            match self.half_open_counts.compare_exchange(
                w,
                next,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return,
                Err(actual) => w = actual,
            }
        }
    }

    fn half_open_counts(&self, generation: u32) -> (u64, u64) {
        let w = self.half_open_counts.load(Ordering::Acquire);
        if w & GEN_MASK == u64::from(generation) {
            ((w >> 21) & GEN_MASK, (w >> 42) & GEN_MASK)
        } else {
            (0, 0)
        }
    }

    /// [`hold_open`](Core::hold_open) for a record that opened the breaker:
    /// its own `Retry-After` (`own`), and one a racing call kept while the
    /// breaker was closed (the opening's end took in those kept before it).
    /// What is kept is read by a read-modify-write that changes nothing: it
    /// reads the latest value, which the argument in `hold_open` needs.
    #[cold]
    fn opened_then_hold(&self, own: Option<u64>, now_ns: u64) -> Option<Transition> {
        let held = self.held_until.fetch_max(0, Ordering::SeqCst);
        self.hold_open(own.map_or(held, |own| own.max(held)), now_ns)
    }

    /// The end of an open state the window's verdict begins at `now_ns`:
    /// the configured wait, or a `Retry-After` recorded while the breaker
    /// was closed or half-open, if that ends later.
    fn opening_end(&self, now_ns: u64) -> u64 {
        let waited = now_ns.saturating_add(self.settings.wait_ns);
        waited.max(self.held_until.load(Ordering::Acquire))
    }

    /// A server's `Retry-After` (already bounded) asks us to stay away until
    /// `until_ns`: an open breaker stays open at least that long (never
    /// shorter than it already would); a closed or half-open one opens only
    /// when the configuration opts in. Otherwise it is kept, and a breaker
    /// the window opens before then stays open until then: the server said
    /// when it can take calls again, whichever failure opened the breaker.
    /// Kept, then the state read again; an opening swaps the state, then
    /// reads what is kept ([`record_then`](Core::record_then)). Each read is
    /// a read-modify-write (one that changes nothing), which reads the
    /// latest value: whichever of the two reads comes second sees the
    /// other's write, so either this one sees the breaker open and
    /// lengthens its wait here, or the opener sees the `Retry-After`.
    fn hold_open(&self, until_ns: u64, now_ns: u64) -> Option<Transition> {
        if until_ns <= now_ns {
            return None;
        }
        let mut w = Word(self.state.load(Ordering::Acquire));
        let mut kept = false;
        loop {
            let next = match w.phase() {
                Phase::Closed | Phase::HalfOpen if self.settings.retry_after_opens => {
                    Word::open(w.next_generation(), until_ns)
                }
                Phase::Closed | Phase::HalfOpen if !kept => {
                    self.held_until.fetch_max(until_ns, Ordering::SeqCst);
                    kept = true;
                    match self
                        .state
                        .compare_exchange(w.0, w.0, Ordering::SeqCst, Ordering::SeqCst)
                    {
                        Ok(_) => return None,
                        Err(actual) => {
                            w = Word(actual);
                            continue;
                        }
                    }
                }
                // A new generation even when only the end moves, so that each
                // end published belongs to one word (see `publish_until`).
                Phase::Open if self.open_end(w, now_ns) < until_ns => {
                    Word::open(w.next_generation(), until_ns)
                }
                _ => return None,
            };
            match self
                .state
                .compare_exchange(w.0, next.0, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    self.publish_until(next, until_ns);
                    return Some(Transition {
                        from: w.phase(),
                        to: Phase::Open,
                        cause: Cause::RetryAfter {
                            hold_ns: until_ns - now_ns,
                        },
                        generations: (w.generation(), next.generation()),
                        quiet: w.phase() == Phase::Open,
                    });
                }
                Err(actual) => w = Word(actual),
            }
        }
    }

    /// Replaces state word `w` with `next` (compare-and-swap), emptying the
    /// window when `next`'s phase starts with an empty one: every phase but
    /// open and half-open, which show the evidence that opened them (a
    /// half-open word that only counts its probes stays half-open). The
    /// window is marked as being emptied before the new state is
    /// published, and swept after, so that no call of the new state is
    /// judged on the old window's remains, and calls of the old one are
    /// refused by the new state's generation rather than swept into it;
    /// the mark is lifted also when another change came first. The swap is
    /// sequentially consistent with the window's writes (see
    /// [`Window::record_under`]).
    fn change_state(&self, w: Word, next: Word) -> Result<u64, u64> {
        let empties = !matches!(next.phase(), Phase::Open | Phase::HalfOpen);
        if empties {
            self.window.begin_emptying();
        }
        let swapped = self
            .state
            .compare_exchange(w.0, next.0, Ordering::SeqCst, Ordering::Acquire);
        if empties {
            self.window.finish_emptying();
        }
        swapped
    }

    /// Moves to `to` whatever the current phase; the window starts empty in
    /// every phase but open and half-open (which show the evidence that
    /// opened them).
    pub(crate) fn transition_to(&self, to: Phase, now_ns: u64) -> Transition {
        // A manual transition (an operator's `reset`, a forced state) is a
        // decision about the server now: a `Retry-After` kept earlier no
        // longer holds a later opening.
        self.held_until.store(0, Ordering::Release);
        let until = now_ns.saturating_add(self.settings.wait_ns);
        let mut w = Word(self.state.load(Ordering::Acquire));
        loop {
            let generation = w.next_generation();
            let next = match to {
                Phase::Open => Word::open(generation, until),
                Phase::HalfOpen => Word::half_open(generation, 0, 0),
                other => Word::new(other, generation, 0),
            };
            match self.change_state(w, next) {
                Ok(_) => {
                    match to {
                        Phase::HalfOpen => self.add_half_open_counts(generation, false, false),
                        Phase::Open => self.publish_until(next, until),
                        _ => {}
                    }
                    return Transition {
                        from: w.phase(),
                        to,
                        cause: Cause::Manual,
                        generations: (w.generation(), generation),
                        quiet: false,
                    };
                }
                Err(actual) => w = Word(actual),
            }
        }
    }

    pub(crate) fn metrics(&self, now_ns: u64) -> Metrics {
        let w = Word(self.state.load(Ordering::Acquire));
        let (calls, failed, slow, rated) = if w.phase() == Phase::HalfOpen {
            let (failed, slow) = self.half_open_counts(w.generation());
            let calls = w.recorded();
            // A probe's failure is counted before the probe is marked
            // recorded: read apart, the counts may be one ahead.
            let (failed, slow) = (failed.min(calls), slow.min(calls));
            let minimum = self.settings.permitted_in_half_open;
            (calls, failed, slow, calls >= u64::from(minimum))
        } else {
            self.window.advance_to(now_ns / NANOS_PER_SEC);
            let (calls, failed, slow) = self
                .window
                .totals()
                .unwrap_or_else(|| self.window.slot_sum());
            let minimum = u64::from(self.settings.minimum_calls);
            (
                calls,
                failed,
                slow,
                self.window.recorded_enough(calls, minimum),
            )
        };
        let rated = calls > 0 && rated;
        Metrics {
            phase: w.phase(),
            calls,
            failed,
            slow,
            failure_rate: rated.then(|| percent(failed, calls) as f32),
            slow_call_rate: rated.then(|| percent(slow, calls) as f32),
        }
    }
}
