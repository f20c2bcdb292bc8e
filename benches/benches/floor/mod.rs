//! Floor sketches: for each `resilient` case of the peer benchmark, the
//! least code that has the same semantics on the success path and on the
//! plain failure path, written by hand for speed, as futures polled like
//! the library's. They show what those semantics cost at minimum, measured
//! in the same run as the library and its peers: a target ratio below a
//! sketch's ratio asks for less than the semantics allow.
//!
//! What every sketch does, as the library does:
//!
//! * **An attempt frame.** Each attempt polls its body with a small `Copy`
//!   frame swapped into a thread-local `Cell` for the poll and back out
//!   after it (so other tasks on the thread never see it): nested annotated
//!   calls inherit the deadline from it, and report into it how far the
//!   path of nested calls got (`high`) and whether they gave up. A layer
//!   retries only while the path's position is below its `cap`, the
//!   attempts of the most generous layer on the path. An attempt dropped
//!   while it runs (a timer, a `select!`) drops its body inside its frame
//!   and passes on how far it got.
//! * **Graceful shutdown.** One relaxed load of a static at the start: a
//!   draining process refuses calls made outside any attempt.
//!
//! Then each adds its parts: a deadline whose timer is made only when the
//! body has to wait; retries with a full-jitter backoff and a fresh body
//! future per attempt; a breaker with a count-based window of 100 outcomes
//! and a slow-call check timed as the library times it (from tokio's clock
//! to the coarse one if the body never waited), shared through a static; a
//! bulkhead; a retry budget's request count. The parameters are the
//! benchmarked attributes' and the library's defaults.
//!
//! No telemetry: no `tracing` span or event and no metrics (the README has
//! a table of what the library's telemetry costs), except in the `_traced`
//! variants, which run a sketch in the library's span.
//!
//! Lower bounds: `breaker_unclocked` and `full_unclocked` are the breaker
//! and full sketches without timing their calls at all. They are not the
//! semantics (no call is ever slow), but every design of the slow-call
//! check costs at least as much as they do: a target under their ratio is
//! under what any design allows.
//!
//! What the library does beyond these sketches is listed at the end of the
//! peer benchmark's module docs (`peers.rs`).

use std::cell::Cell;
use std::future::Future;
use std::hash::{BuildHasher, RandomState};
use std::marker::PhantomData;
use std::ops::Deref;
use std::pin::Pin;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};

// ---------------------------------------------------------------------------
// The benchmarked attributes, and the library's defaults for the rest. The
// durations are fixed and short: an `Instant` plus one of them cannot
// overflow, so they are added with `+` (the library, whose durations come
// from users, saturates).

/// `deadline_ms = 1000`.
const DEADLINE: Duration = Duration::from_millis(1000);
/// `timeout_ms = 500`.
const TIMEOUT: Duration = Duration::from_millis(500);
/// `retries = 3`.
const ATTEMPTS: u32 = 4;
/// The default backoff, full jitter: retry `n` (from 0) waits
/// `U(0, min(cap, base * 2^n))`.
const BACKOFF_BASE: Duration = Duration::from_millis(100);
const BACKOFF_CAP: Duration = Duration::from_secs(30);
/// `BreakerConfig::default()`: a count-based window of 100 outcomes, which
/// opens at 50 % failures or 100 % slow calls (over 60 s) once it holds
/// 100, for 60 s.
const WINDOW: u32 = 100;
const MIN_CALLS: u64 = 100;
const FAILURE_RATE_PERCENT: u64 = 50;
const SLOW_RATE_PERCENT: u64 = 100;
const SLOW_CALL: Duration = Duration::from_secs(60);
const OPEN_WAIT: Duration = Duration::from_secs(60);
/// `BulkheadConfig::default()`: 25 slots, no waiting for one.
const BULKHEAD_SLOTS: u32 = 25;
/// `BudgetConfig::default()`: retries up to 10 % of the requests of the
/// last 10 s, plus 10 per second of window.
const BUDGET_SECONDS: u64 = 10;
const BUDGET_RATIO_PERCENT: u64 = 10;
const BUDGET_RESERVE_PER_SECOND: u64 = 10;

// ---------------------------------------------------------------------------
// What the sketches ask of the body's error.

/// Why a sketch ended a call without the body's own answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    ShuttingDown,
    DeadlineExceeded,
    TimedOut,
    BreakerOpen,
    BulkheadFull,
}

/// The body's error: a refusal converts into it, and it says whether
/// another attempt may succeed. A transient error counts as a failure for a
/// breaker; any other error counts as neither failure nor success.
pub(crate) trait Transient: From<Refusal> {
    fn is_transient(&self) -> bool;
}

// ---------------------------------------------------------------------------
// The attempt frame.

#[derive(Debug, Clone, Copy)]
struct Frame {
    /// The task's deadline inside the attempt.
    deadline: Option<Instant>,
    /// Attempts the most generous layer on the path allows; 0 outside any
    /// attempt.
    cap: u32,
    /// Attempts made on the path before this one.
    base: u32,
    /// The furthest position nested calls reached: at least `base + 1`.
    high: u32,
    /// Inside a retry of some layer: not a new request (for the budget).
    in_retry: bool,
    /// A nested call gave up: no layer above may retry the failure.
    gave_up: bool,
}

impl Frame {
    const NONE: Frame = Frame {
        deadline: None,
        cap: 0,
        base: 0,
        high: 0,
        in_retry: false,
        gave_up: false,
    };

    /// The frame of an attempt at position `base` of a call on `path`;
    /// `retry` for every attempt after the first.
    fn attempt(path: &Frame, base: u32, retry: bool, deadline: Option<Instant>) -> Frame {
        Frame {
            deadline,
            cap: path.cap,
            base,
            high: base.saturating_add(1),
            in_retry: path.in_retry || retry,
            gave_up: false,
        }
    }

    fn in_attempt(&self) -> bool {
        self.cap > 0
    }
}

thread_local! {
    /// The frame of the attempt being polled on this thread.
    static FRAME: Cell<Frame> = const { Cell::new(Frame::NONE) };
}

/// Set by a graceful shutdown (here only by [`check`], which tests that a
/// draining process refuses new calls).
static DRAINING: AtomicBool = AtomicBool::new(false);

/// The start of every call: where it stands on its path, with the path's
/// cap raised to this layer's `attempts`. A draining process refuses calls
/// made outside any attempt; nested ones are part of admitted work.
fn begin(attempts: u32) -> Result<Frame, Refusal> {
    let mut path = FRAME.get();
    if DRAINING.load(Ordering::Relaxed) && !path.in_attempt() {
        return Err(Refusal::ShuttingDown);
    }
    path.cap = path.cap.max(attempts);
    Ok(path)
}

/// Changes the enclosing attempt's frame, if there is one.
fn report(change: impl FnOnce(&mut Frame)) {
    let mut frame = FRAME.get();
    if frame.in_attempt() {
        change(&mut frame);
        FRAME.set(frame);
    }
}

/// Tells the enclosing attempt that the path reached `position`.
fn reach(position: u32) {
    report(|f| f.high = f.high.max(position));
}

/// Tells the enclosing attempt that this call gave up: retries, budget or
/// deadline spent, or refused here.
fn give_up() {
    report(|f| f.gave_up = true);
}

/// Runs `f` with `frame` as the current frame, and takes back what nested
/// calls wrote into it, also if `f` panics.
fn enter<R>(frame: &mut Frame, f: impl FnOnce() -> R) -> R {
    struct Restore<'a> {
        slot: &'a Cell<Frame>,
        frame: &'a mut Frame,
        outer: Frame,
    }
    impl Drop for Restore<'_> {
        fn drop(&mut self) {
            *self.frame = self.slot.replace(self.outer);
        }
    }
    FRAME.with(|slot| {
        let outer = slot.replace(*frame);
        let _restore = Restore { slot, frame, outer };
        f()
    })
}

fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

pin_project! {
    /// One attempt: the body polled in its frame.
    struct Attempt<F> {
        frame: Frame,
        // Started and not ended: dropping it now must report.
        live: bool,
        #[pin]
        body: Option<F>,
    }

    impl<F> PinnedDrop for Attempt<F> {
        fn drop(this: Pin<&mut Self>) {
            // Cancelled while it ran (an enclosing timer, a `select!`): the
            // body is dropped inside the frame, so the nested calls report
            // how far they got, and that is passed on.
            let this = this.project();
            if *this.live {
                let mut body = this.body;
                enter(this.frame, || body.set(None));
                reach(this.frame.high);
            }
        }
    }
}

impl<F: Future> Attempt<F> {
    fn idle() -> Self {
        Attempt {
            frame: Frame::NONE,
            live: false,
            body: None,
        }
    }

    fn start(self: Pin<&mut Self>, frame: Frame, body: F) {
        let mut this = self.project();
        *this.frame = frame;
        *this.live = true;
        this.body.set(Some(body));
    }

    /// The body's output. The frame, as the nested calls left it, stays
    /// readable (`attempt.frame`) until the next attempt starts.
    fn poll_body(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let mut this = self.project();
        let Some(body) = this.body.as_mut().as_pin_mut() else {
            panic!("an attempt polled before it started");
        };
        let out = ready!(enter(this.frame, || body.poll(cx)));
        *this.live = false;
        Poll::Ready(out)
    }

    /// The body's output, or `None` when the frame's deadline passed first.
    /// The timer (`sleep`, the call's one slot for a `Sleep`) is made only
    /// once the body has had to wait: a body ready at once never touches
    /// tokio's timer.
    // Inlined into each call's `poll`: the success path.
    #[inline(always)]
    fn poll_timed(
        mut self: Pin<&mut Self>,
        mut sleep: Pin<&mut Option<Sleep>>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<F::Output>> {
        if let Poll::Ready(out) = self.as_mut().poll_body(cx) {
            if sleep.is_some() {
                sleep.set(None);
            }
            return Poll::Ready(Some(out));
        }
        let this = self.project();
        let Some(at) = this.frame.deadline else {
            return Poll::Pending;
        };
        if sleep.is_none() {
            sleep.set(Some(tokio::time::sleep_until(at)));
        }
        if let Some(timer) = sleep.as_mut().as_pin_mut() {
            ready!(timer.poll(cx));
        }
        sleep.set(None);
        let mut body = this.body;
        enter(this.frame, || body.set(None));
        *this.live = false;
        Poll::Ready(None)
    }
}

// ---------------------------------------------------------------------------
// Shared state: a breaker, a bulkhead, a retry budget.

/// Alone on its cache lines (128 bytes: x86 prefetches 64-byte lines in
/// pairs), so what every call writes does not evict what every call reads.
#[repr(align(128))]
struct Padded<T>(T);

impl<T> Deref for Padded<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

/// Time kept in atomics: since a process-wide origin, on tokio's clock.
fn since_origin(now: Instant) -> Duration {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    now.saturating_duration_since(*ORIGIN.get_or_init(Instant::now))
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The state word: the phase in the low two bits, a generation above them
/// that every transition bumps, so an outcome admitted under one state is
/// not counted in another.
const CLOSED: u64 = 0;
const OPEN: u64 = 1;
const HALF_OPEN: u64 = 2;
const PHASE: u64 = 0b11;
const GENERATION: u64 = 0b100;

/// The word of the state after `word`, in `phase`.
fn next_state(word: u64, phase: u64) -> u64 {
    (word & !PHASE).wrapping_add(GENERATION) | phase
}

/// A circuit breaker, as the registry would share it.
struct Circuit {
    /// Read by every call, written by transitions.
    head: Padded<Head>,
    /// Written by every call: the count of outcomes recorded, whose
    /// remainder is the next slot.
    next: Padded<AtomicU32>,
    /// Read by every call, written when an outcome changes.
    window: Padded<Window>,
}

struct Head {
    state: AtomicU64,
    /// When an open breaker admits a probe: nanoseconds since the origin.
    open_until: AtomicU64,
}

/// The last `WINDOW` outcomes, each `0` (none yet) or
/// `1 | failed << 1 | slow << 2`, and their totals.
struct Window {
    slots: [AtomicU8; WINDOW as usize],
    calls: AtomicU32,
    failed: AtomicU32,
    slow: AtomicU32,
}

static CIRCUIT: Circuit = Circuit {
    head: Padded(Head {
        state: AtomicU64::new(CLOSED),
        open_until: AtomicU64::new(0),
    }),
    next: Padded(AtomicU32::new(0)),
    window: Padded(Window {
        slots: [const { AtomicU8::new(0) }; WINDOW as usize],
        calls: AtomicU32::new(0),
        failed: AtomicU32::new(0),
        slow: AtomicU32::new(0),
    }),
};

/// How a call is timed for the slow-call check, as the library times the
/// calls of annotated functions (its `runtime/src/clock.rs`): from its
/// start on tokio's clock, to its end on the coarse clock if the body never
/// waited, else on tokio's.
#[derive(Clone, Copy)]
enum Timing {
    /// From this coarse reading while the body has not waited; slow after
    /// `exact` on tokio's clock once it has.
    Coarse { start: u64, exact: Instant },
    /// Slow after this instant on tokio's clock.
    Exact(Instant),
}

/// The coarse duration past which a call is slow, in nanoseconds:
/// `SLOW_CALL` plus the coarse clock's tick (60 s spans far more than the
/// library's minimum of 100 ticks). Readings and durations are `u64`
/// nanoseconds, as the library keeps them.
fn coarse_slow() -> u64 {
    static SLOW: OnceLock<u64> = OnceLock::new();
    *SLOW.get_or_init(|| (SLOW_CALL + coarse::tick()).as_nanos() as u64)
}

#[cfg(target_os = "linux")]
mod coarse {
    use std::time::Duration;

    use rustix::time::{ClockId, Timespec, clock_getres, clock_gettime};

    fn duration(t: Timespec) -> Duration {
        Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
    }

    pub(super) fn tick() -> Duration {
        duration(clock_getres(ClockId::MonotonicCoarse))
    }

    #[inline]
    pub(super) fn now() -> u64 {
        let t = clock_gettime(ClockId::MonotonicCoarse);
        (t.tv_sec as u64) * 1_000_000_000 + t.tv_nsec as u64
    }
}

// Elsewhere, a precise clock stands in for the coarse one.
#[cfg(not(target_os = "linux"))]
mod coarse {
    use std::sync::OnceLock;
    use std::time::{Duration, Instant};

    pub(super) fn tick() -> Duration {
        Duration::ZERO
    }

    pub(super) fn now() -> u64 {
        static ORIGIN: OnceLock<Instant> = OnceLock::new();
        ORIGIN.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}

impl Timing {
    /// A call starts at `now` on tokio's clock.
    fn start(now: Instant) -> Timing {
        Timing::Coarse {
            start: coarse::now(),
            exact: now + SLOW_CALL,
        }
    }

    /// The body has had to wait: it ends on tokio's clock.
    fn waited(&mut self) {
        if let Timing::Coarse { exact, .. } = *self {
            *self = Timing::Exact(exact);
        }
    }

    /// Was the call slow, ending now? A coarse duration counts only past a
    /// tick beyond the threshold.
    fn slow(self) -> bool {
        match self {
            Timing::Coarse { start, .. } => coarse::now().saturating_sub(start) > coarse_slow(),
            Timing::Exact(after) => Instant::now() > after,
        }
    }
}

/// Admission to one call, with how it is timed (not at all in a sketch
/// that is a lower bound).
struct Permit {
    circuit: &'static Circuit,
    word: u64,
    timing: Option<Timing>,
}

impl Circuit {
    /// Admits a call: a closed breaker at one load; the clock is read only
    /// for an open one.
    #[inline]
    fn try_acquire(&'static self, timing: Option<Timing>) -> Result<Permit, Refusal> {
        let word = self.head.state.load(Ordering::Acquire);
        let permit = |word| Permit {
            circuit: self,
            word,
            timing,
        };
        match word & PHASE {
            CLOSED => Ok(permit(word)),
            OPEN if nanos(since_origin(Instant::now()))
                >= self.head.open_until.load(Ordering::Acquire) =>
            {
                // The wait is over: the caller that moves the breaker to
                // half-open is its probe. (The library lets 10 probes
                // through and judges them by the thresholds; here one
                // probe decides.)
                let probe = next_state(word, HALF_OPEN);
                self.head
                    .state
                    .compare_exchange(word, probe, Ordering::AcqRel, Ordering::Relaxed)
                    .map(|_| permit(probe))
                    .map_err(|_| Refusal::BreakerOpen)
            }
            // Open and waiting, or half-open with its probe out.
            _ => Err(Refusal::BreakerOpen),
        }
    }

    #[inline]
    fn record(&self, word: u64, failed: bool, slow: bool, now: Option<Instant>) {
        if word & PHASE == HALF_OPEN {
            return self.record_probe(word, failed || slow, now);
        }
        // Admitted under an earlier state: not evidence about this one.
        if self.head.state.load(Ordering::Acquire) != word {
            return;
        }
        let new = 1 | u8::from(failed) << 1 | u8::from(slow) << 2;
        let i = self.next.fetch_add(1, Ordering::Relaxed) % WINDOW;
        let slot = &self.window.slots[i as usize];
        // A success replacing a success changes nothing: no write, so the
        // threads sharing the breaker do not bounce the slot's line.
        if slot.load(Ordering::Relaxed) != new {
            self.replace(slot, new, word, now);
        }
    }

    /// Puts a changed outcome into its slot, updates the totals, and opens
    /// the breaker if that tripped it.
    fn replace(&self, slot: &AtomicU8, new: u8, word: u64, now: Option<Instant>) {
        let old = slot.swap(new, Ordering::AcqRel);
        let bit = |v: u8, b: u8| v & b != 0;
        let w = &self.window;
        for (total, b) in [(&w.calls, 1), (&w.failed, 2), (&w.slow, 4)] {
            match (bit(old, b), bit(new, b)) {
                (false, true) => total.fetch_add(1, Ordering::AcqRel),
                (true, false) => total.fetch_sub(1, Ordering::AcqRel),
                _ => 0,
            };
        }
        // Only a failure or a slow call coming in can open it.
        if new & !old & 0b110 != 0 && self.tripped() {
            self.open(word, now);
        }
    }

    /// The half-open probe's outcome decides: closed again, or open.
    fn record_probe(&self, word: u64, bad: bool, now: Option<Instant>) {
        if bad {
            self.open(word, now);
        } else {
            self.close(word);
        }
    }

    /// The window's rates reached a threshold.
    fn tripped(&self) -> bool {
        let w = &self.window;
        let calls = u64::from(w.calls.load(Ordering::Acquire));
        let failed = u64::from(w.failed.load(Ordering::Acquire));
        let slow = u64::from(w.slow.load(Ordering::Acquire));
        // Totals read while another thread records may be a count off; one
        // that wrapped below zero (a subtraction seen before its addition)
        // is no evidence.
        calls >= MIN_CALLS
            && failed <= calls
            && slow <= calls
            && (failed * 100 >= FAILURE_RATE_PERCENT * calls
                || slow * 100 >= SLOW_RATE_PERCENT * calls)
    }

    /// Opens the breaker; `now` is read here if the call was not timed.
    fn open(&self, from: u64, now: Option<Instant>) {
        // Stored before the state word that makes it meaningful. Racing
        // openers store ends nanoseconds apart: either will do.
        let now = now.unwrap_or_else(Instant::now);
        let until = nanos(since_origin(now)).saturating_add(nanos(OPEN_WAIT));
        self.head.open_until.store(until, Ordering::Release);
        let _ = self.head.state.compare_exchange(
            from,
            next_state(from, OPEN),
            Ordering::AcqRel,
            Ordering::Relaxed,
        );
    }

    /// The probe succeeded: closed, with an empty window.
    fn close(&self, from: u64) {
        let w = &self.window;
        for slot in &w.slots {
            slot.store(0, Ordering::Relaxed);
        }
        for total in [&w.calls, &w.failed, &w.slow] {
            total.store(0, Ordering::Relaxed);
        }
        let _ = self.head.state.compare_exchange(
            from,
            next_state(from, CLOSED),
            Ordering::AcqRel,
            Ordering::Relaxed,
        );
    }
}

impl Permit {
    /// Records the call's outcome: `Some(failed)`, or `None` for an error
    /// that counts as neither failure nor success. `end`: tokio's time, if
    /// the caller read it (the breaker reads it itself to open).
    #[inline]
    fn record(mut self, failed: Option<bool>, end: Option<Instant>) {
        let Some(failed) = failed else {
            return; // dropped: a probe is given back
        };
        let word = std::mem::take(&mut self.word); // closed: disarms `drop`
        let slow = self.timing.is_some_and(Timing::slow);
        self.circuit.record(word, failed, slow, end);
    }

    /// The body has had to wait.
    fn waited(&mut self) {
        if let Some(timing) = &mut self.timing {
            timing.waited();
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        // A probe that ended with no outcome (cancelled, or an error that
        // counts as neither): open again with the wait over, so that the
        // next call probes.
        if self.word & PHASE == HALF_OPEN {
            let head = &self.circuit.head;
            head.open_until.store(0, Ordering::Release);
            let _ = head.state.compare_exchange(
                self.word,
                next_state(self.word, OPEN),
                Ordering::AcqRel,
                Ordering::Relaxed,
            );
        }
    }
}

/// What an attempt's result tells a breaker: `Some(failed)`, or `None`
/// for an error that counts as neither. A cut attempt (`None`) failed.
fn verdict<T, E: Transient>(out: Option<&Result<T, E>>) -> Option<bool> {
    match out {
        Some(Ok(_)) => Some(false),
        Some(Err(e)) => e.is_transient().then_some(true),
        None => Some(true),
    }
}

/// A bulkhead: at most `BULKHEAD_SLOTS` attempts at once. A
/// compare-and-swap, so the count is never seen above the maximum.
struct Bulkhead {
    in_flight: AtomicU32,
}

static BULKHEAD: Padded<Bulkhead> = Padded(Bulkhead {
    in_flight: AtomicU32::new(0),
});

impl Bulkhead {
    fn try_acquire(&'static self) -> Result<Slot, Refusal> {
        let mut n = self.in_flight.load(Ordering::Relaxed);
        while n < BULKHEAD_SLOTS {
            match self.in_flight.compare_exchange_weak(
                n,
                n + 1,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(Slot(self)),
                Err(seen) => n = seen,
            }
        }
        Err(Refusal::BulkheadFull)
    }
}

/// A bulkhead slot, given back when dropped: also by a cancelled call.
struct Slot(&'static Bulkhead);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Release);
    }
}

/// The dependency's retry budget: requests and retries per second over the
/// last `BUDGET_SECONDS`, one bucket per second, each tagged with its
/// second (high 32 bits; the count in the low 32).
struct Budget {
    requests: Padded<Buckets>,
    retries: Padded<Buckets>,
}

type Buckets = [AtomicU64; BUDGET_SECONDS as usize];

static BUDGET: Budget = Budget {
    requests: Padded([const { AtomicU64::new(0) }; BUDGET_SECONDS as usize]),
    retries: Padded([const { AtomicU64::new(0) }; BUDGET_SECONDS as usize]),
};

const COUNT: u64 = 0xffff_ffff;

impl Budget {
    fn on_request(&self, now: Instant) {
        count(&self.requests, since_origin(now).as_secs());
    }

    /// Asks for one retry, and counts it if allowed. Check and count are
    /// two steps: racing retries may overrun the allowance by one each.
    fn try_retry(&self, now: Instant) -> bool {
        let second = since_origin(now).as_secs();
        let allowed = total(&self.requests, second) * BUDGET_RATIO_PERCENT / 100
            + BUDGET_RESERVE_PER_SECOND * BUDGET_SECONDS;
        if total(&self.retries, second) >= allowed {
            return false;
        }
        count(&self.retries, second);
        true
    }
}

fn count(buckets: &Buckets, second: u64) {
    let bucket = &buckets[(second % BUDGET_SECONDS) as usize];
    let tag = (second & COUNT) << 32;
    let mut w = bucket.load(Ordering::Relaxed);
    loop {
        if w & !COUNT == tag {
            // (Should another thread start the bucket anew for a later
            // second just after the load, this count lands in that second:
            // harmless.)
            bucket.fetch_add(1, Ordering::Relaxed);
            return;
        }
        // A bucket of an older second: start it anew.
        match bucket.compare_exchange_weak(w, tag | 1, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return,
            Err(seen) => w = seen,
        }
    }
}

fn total(buckets: &Buckets, second: u64) -> u64 {
    buckets
        .iter()
        .map(|b| b.load(Ordering::Relaxed))
        .filter(|w| (second & COUNT).wrapping_sub(w >> 32) & COUNT < BUDGET_SECONDS)
        .map(|w| w & COUNT)
        .sum()
}

/// The full-jitter delay before retry `n` (from 0).
fn full_jitter(n: u32) -> Duration {
    let ceiling = BACKOFF_BASE.saturating_mul(1 << n.min(31)).min(BACKOFF_CAP);
    Duration::from_nanos(random() % (nanos(ceiling) + 1))
}

/// A thread's xorshift64* generator, seeded at random on first use.
fn random() -> u64 {
    thread_local! {
        static STATE: Cell<u64> = const { Cell::new(0) };
    }
    let mut x = STATE.get();
    if x == 0 {
        x = RandomState::new().hash_one(0u64) | 1;
    }
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    STATE.set(x);
    x.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

// ---------------------------------------------------------------------------
// The four calls. Each takes a function that makes the body's future (a
// fresh one per attempt where it retries) and starts on its first poll, as
// an `async fn` does.

pin_project! {
    /// `#[resilient(deadline_ms = 1000)]`: the call's deadline is the
    /// earlier of the inherited one and one second from its start.
    pub(crate) struct DeadlineCall<M, F, T: Telemetry = Untraced> {
        make: Option<M>,
        span: T::Span,
        // The deadline is this call's own, not an inherited one: passing
        // it is this call's give-up.
        own: bool,
        #[pin]
        attempt: Attempt<F>,
        #[pin]
        timer: Option<Sleep>,
        telemetry: PhantomData<T>,
    }
}

pub(crate) fn deadline<M, F>(make: M) -> DeadlineCall<M, F>
where
    M: FnOnce() -> F,
    F: Future,
{
    deadline_in(make)
}

/// The `deadline_ms` sketch in the library's per-call span.
pub(crate) fn deadline_traced<M, F>(make: M) -> DeadlineCall<M, F, InSpan>
where
    M: FnOnce() -> F,
    F: Future,
{
    deadline_in(make)
}

fn deadline_in<M, F: Future, S: Telemetry>(make: M) -> DeadlineCall<M, F, S> {
    DeadlineCall {
        make: Some(make),
        span: S::NONE,
        own: false,
        attempt: Attempt::idle(),
        timer: None,
        telemetry: PhantomData,
    }
}

impl<M, F, T, E, S> Future for DeadlineCall<M, F, S>
where
    M: FnOnce() -> F,
    F: Future<Output = Result<T, E>>,
    E: Transient,
    S: Telemetry,
{
    type Output = Result<T, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        if let Some(make) = this.make.take() {
            S::open(this.span);
            let path = match begin(1) {
                Ok(path) => path,
                Err(refusal) => return Poll::Ready(Err(refusal.into())),
            };
            let now = Instant::now();
            let own = now + DEADLINE;
            let deadline = match path.deadline {
                // Only an inherited deadline can have passed already: the
                // enclosing attempt's timer, not a give-up of this call.
                Some(d) if d <= own => {
                    if now >= d {
                        return Poll::Ready(Err(Refusal::DeadlineExceeded.into()));
                    }
                    d
                }
                _ => {
                    *this.own = true;
                    own
                }
            };
            let frame = Frame::attempt(&path, path.base, false, Some(deadline));
            this.attempt.as_mut().start(frame, make());
        }
        let out = {
            let _in_span = S::enter(this.span);
            ready!(this.attempt.as_mut().poll_timed(this.timer, cx))
        };
        let frame = &this.attempt.frame;
        reach(frame.high);
        Poll::Ready(match out {
            Some(Ok(v)) => Ok(v),
            Some(Err(e)) => {
                // Not retried here; an enclosing layer may, unless a
                // nested call gave up.
                if frame.gave_up && e.is_transient() {
                    give_up();
                }
                Err(e)
            }
            None => {
                if *this.own {
                    give_up();
                }
                Err(Refusal::DeadlineExceeded.into())
            }
        })
    }
}

pin_project! {
    /// `#[resilient(retries = 3, idempotent)]`: up to four attempts, each
    /// a fresh future, a full-jitter backoff between them. No clock read
    /// on the success path.
    pub(crate) struct RetryCall<M, F, T: Telemetry = Untraced> {
        make: M,
        span: T::Span,
        // Attempts started; 0 before the first poll. The last attempt's
        // frame carries the call's path (its cap and deadline are the
        // call's, and its `high` is the call's position after it).
        number: u32,
        #[pin]
        attempt: Attempt<F>,
        #[pin]
        backoff: Option<Sleep>,
        telemetry: PhantomData<T>,
    }
}

pub(crate) fn retries<M, F>(make: M) -> RetryCall<M, F>
where
    M: FnMut() -> F,
    F: Future,
{
    retries_in(make)
}

/// The `retries` sketch in the library's per-call span.
pub(crate) fn retries_traced<M, F>(make: M) -> RetryCall<M, F, InSpan>
where
    M: FnMut() -> F,
    F: Future,
{
    retries_in(make)
}

fn retries_in<M, F: Future, S: Telemetry>(make: M) -> RetryCall<M, F, S> {
    RetryCall {
        make,
        span: S::NONE,
        number: 0,
        attempt: Attempt::idle(),
        backoff: None,
        telemetry: PhantomData,
    }
}

impl<M, F, T, E, S> Future for RetryCall<M, F, S>
where
    M: FnMut() -> F,
    F: Future<Output = Result<T, E>>,
    E: Transient,
    S: Telemetry,
{
    type Output = Result<T, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        if *this.number == 0 {
            S::open(this.span);
            let path = match begin(ATTEMPTS) {
                Ok(path) => path,
                Err(refusal) => return Poll::Ready(Err(refusal.into())),
            };
            // The clock is read only under an inherited deadline.
            if path.deadline.is_some_and(|d| Instant::now() >= d) {
                return Poll::Ready(Err(Refusal::DeadlineExceeded.into()));
            }
            *this.number = 1;
            let frame = Frame::attempt(&path, path.base, false, path.deadline);
            this.attempt.as_mut().start(frame, (this.make)());
        }
        loop {
            if let Some(sleep) = this.backoff.as_mut().as_pin_mut() {
                ready!(sleep.poll(cx));
                this.backoff.set(None);
                *this.number += 1;
                let last = this.attempt.frame;
                let frame = Frame::attempt(&last, last.high, true, last.deadline);
                this.attempt.as_mut().start(frame, (this.make)());
            }
            // No timer of its own: an inherited deadline is the enclosing
            // attempt's timer, which drops this call when it fires.
            let out = {
                let _in_span = S::enter(this.span);
                ready!(this.attempt.as_mut().poll_body(cx))
            };
            let frame = &this.attempt.frame;
            reach(frame.high);
            let error = match out {
                Ok(v) => return Poll::Ready(Ok(v)),
                Err(e) if e.is_transient() => e,
                // Final here, and not a give-up: an enclosing layer decides.
                Err(e) => return Poll::Ready(Err(e)),
            };
            // A nested layer gave up (retrying too would multiply attempts),
            // this layer's retries are spent, or the path's.
            if frame.gave_up || *this.number >= ATTEMPTS || frame.high >= frame.cap {
                give_up();
                return Poll::Ready(Err(error));
            }
            let delay = full_jitter(*this.number - 1);
            // A sleep that ends at or past the deadline is not slept.
            let too_late = frame
                .deadline
                .is_some_and(|d| Instant::now().checked_add(delay).is_none_or(|w| w >= d));
            if too_late {
                give_up();
                return Poll::Ready(Err(error));
            }
            this.backoff.set(Some(tokio::time::sleep(delay)));
        }
    }
}

/// Whether a sketch runs in the span the library opens for every call with
/// its default `tracing` feature: [`Untraced`] for the sketches (no span,
/// not even an empty place for one), [`InSpan`] for their `_traced`
/// variants.
pub(crate) trait Telemetry {
    /// Where the call keeps its span.
    type Span;
    const NONE: Self::Span;
    /// Opens the call's span, on its first poll.
    fn open(span: &mut Self::Span);
    /// Enters the call's span for as long as the guard lives.
    fn enter(span: &Self::Span) -> Option<tracing::span::Entered<'_>>;
}

pub(crate) struct Untraced;
pub(crate) struct InSpan;

impl Telemetry for Untraced {
    type Span = ();
    const NONE: () = ();

    #[inline(always)]
    fn open(_: &mut ()) {}

    #[inline(always)]
    fn enter(_: &()) -> Option<tracing::span::Entered<'_>> {
        None
    }
}

/// The library's per-call span, kept by a sketch (see [`InSpan`]).
fn call_span() -> tracing::Span {
    tracing::info_span!(
        target: "resilient",
        "resilient",
        function = "bench",
        breaker = None::<&str>,
        budget = None::<&str>,
        bulkhead = None::<&str>,
        deadline_ms = tracing::field::Empty,
    )
}

/// The library's per-call span (the same name, target, level and fields).
/// No subscriber is installed, so it is disabled, as it is in the library's
/// figures. The sketch keeps it in its own state, made on the first poll
/// and entered while the body is polled, as the library keeps its span: a
/// wrapper future holding the span would move the whole call into it, a
/// copy the library does not make (this wrapper measured 36 instructions
/// per call more for `retries`).
impl Telemetry for InSpan {
    type Span = Option<tracing::Span>;
    const NONE: Option<tracing::Span> = None;

    #[inline(always)]
    fn open(span: &mut Option<tracing::Span>) {
        *span = Some(call_span());
    }

    #[inline(always)]
    fn enter(span: &Option<tracing::Span>) -> Option<tracing::span::Entered<'_>> {
        span.as_ref().map(tracing::Span::enter)
    }
}

/// Whether a sketch times its calls for the breaker's slow-call check (on
/// the coarse clock, as the library does: [`Timing`]): [`Clocked`] for the
/// sketches, [`Unclocked`] for their lower bounds.
pub(crate) trait Clocking {
    const CLOCKED: bool;
}

pub(crate) struct Clocked;
pub(crate) struct Unclocked;

impl Clocking for Clocked {
    const CLOCKED: bool = true;
}

impl Clocking for Unclocked {
    const CLOCKED: bool = false;
}

pin_project! {
    /// `#[resilient(breaker = "bench")]`: admitted by the breaker, timed
    /// (a slow call counts), its outcome recorded. With `Unclocked`, a
    /// lower bound rather than a sketch: no clock read at all, so no call
    /// is ever slow (see `breaker_unclocked`). With `InSpan`, in the
    /// library's per-call span (see `breaker_traced`).
    pub(crate) struct BreakerCall<M, F, K, T: Telemetry = Untraced> {
        make: Option<M>,
        span: T::Span,
        #[pin]
        attempt: Attempt<F>,
        // Taken at the start, handed to `record` at the end; dropped
        // unrecorded (a cancelled call), it gives a probe back.
        permit: Option<Permit>,
        clocking: PhantomData<(K, T)>,
    }
}

pub(crate) fn breaker<M, F>(make: M) -> BreakerCall<M, F, Clocked>
where
    M: FnOnce() -> F,
    F: Future,
{
    breaker_in(make)
}

/// The `breaker` sketch in the library's per-call span, entered while the
/// body is polled (the library enters it to record only when the record
/// changes the breaker's state, which a steady call never does).
pub(crate) fn breaker_traced<M, F>(make: M) -> BreakerCall<M, F, Clocked, InSpan>
where
    M: FnOnce() -> F,
    F: Future,
{
    breaker_in(make)
}

fn breaker_in<M, F: Future, K, S: Telemetry>(make: M) -> BreakerCall<M, F, K, S> {
    BreakerCall {
        make: Some(make),
        span: S::NONE,
        attempt: Attempt::idle(),
        permit: None,
        clocking: PhantomData,
    }
}

/// The breaker sketch without timing its calls (a read of tokio's clock
/// and two of the coarse one): what any design of the slow-call check costs
/// at least, since it can only add to this. Not the semantics: no call is
/// ever slow.
pub(crate) fn breaker_unclocked<M, F>(make: M) -> BreakerCall<M, F, Unclocked>
where
    M: FnOnce() -> F,
    F: Future,
{
    breaker_in(make)
}

impl<M, F, T, E, K: Clocking, S: Telemetry> Future for BreakerCall<M, F, K, S>
where
    M: FnOnce() -> F,
    F: Future<Output = Result<T, E>>,
    E: Transient,
{
    type Output = Result<T, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        if let Some(make) = this.make.take() {
            S::open(this.span);
            let path = match begin(1) {
                Ok(path) => path,
                Err(refusal) => return Poll::Ready(Err(refusal.into())),
            };
            // The start of the call, for the slow-call check.
            let now = K::CLOCKED.then(Instant::now);
            if path
                .deadline
                .is_some_and(|d| now.unwrap_or_else(Instant::now) >= d)
            {
                return Poll::Ready(Err(Refusal::DeadlineExceeded.into()));
            }
            match CIRCUIT.try_acquire(now.map(Timing::start)) {
                Ok(permit) => *this.permit = Some(permit),
                Err(refusal) => {
                    give_up();
                    return Poll::Ready(Err(refusal.into()));
                }
            }
            let frame = Frame::attempt(&path, path.base, false, path.deadline);
            this.attempt.as_mut().start(frame, make());
        }
        // No timer of its own, as for `RetryCall`.
        let polled = {
            let _in_span = S::enter(this.span);
            this.attempt.as_mut().poll_body(cx)
        };
        let Poll::Ready(out) = polled else {
            if let Some(permit) = this.permit.as_mut() {
                permit.waited();
            }
            return Poll::Pending;
        };
        if let Some(permit) = this.permit.take() {
            permit.record(verdict(Some(&out)), None);
        }
        let frame = &this.attempt.frame;
        reach(frame.high);
        if let Err(e) = &out
            && frame.gave_up
            && e.is_transient()
        {
            give_up();
        }
        Poll::Ready(out)
    }
}

pin_project! {
    /// `#[resilient(retries = 3, idempotent, breaker = "bench",
    /// deadline_ms = 1000, timeout_ms = 500, bulkhead = "bench")]`, with
    /// the breaker's retry budget. One read of tokio's clock at the start
    /// of each attempt serves the deadline, the attempt's timeout, the
    /// budget and the breaker's start; two of the coarse clock end the
    /// breaker's timing of an attempt whose body never waited; tokio's is
    /// read again after a failure, for the retry decision.
    /// With `Unclocked`, a lower bound rather than a sketch: no coarse
    /// reads, so no call is ever slow (see `full_unclocked`). With
    /// `InSpan`, in the library's per-call span (see `full_traced`).
    pub(crate) struct FullCall<M, F, K, T: Telemetry = Untraced> {
        make: M,
        span: T::Span,
        // The call's deadline: the earlier of the inherited one and one
        // second from the start.
        deadline: Option<Instant>,
        // It is this call's own (passing it is this call's give-up).
        own: bool,
        // Attempts started, as for `RetryCall`.
        number: u32,
        #[pin]
        attempt: Attempt<F>,
        // The running attempt's timer, or the backoff before the next
        // attempt (`backing_off`): never both at once.
        #[pin]
        sleep: Option<Sleep>,
        backing_off: bool,
        // What the running attempt holds, given back when it ends or is
        // dropped: the breaker's permit and a bulkhead slot.
        held: Option<(Permit, Slot)>,
        clocking: PhantomData<(K, T)>,
    }
}

pub(crate) fn full<M, F>(make: M) -> FullCall<M, F, Clocked>
where
    M: FnMut() -> F,
    F: Future,
{
    full_in(make)
}

/// The full sketch in the library's per-call span, entered while an
/// attempt's body is polled (as for `breaker_traced`).
pub(crate) fn full_traced<M, F>(make: M) -> FullCall<M, F, Clocked, InSpan>
where
    M: FnMut() -> F,
    F: Future,
{
    full_in(make)
}

fn full_in<M, F: Future, K, S: Telemetry>(make: M) -> FullCall<M, F, K, S> {
    FullCall {
        make,
        span: S::NONE,
        deadline: None,
        own: false,
        number: 0,
        attempt: Attempt::idle(),
        sleep: None,
        backing_off: false,
        held: None,
        clocking: PhantomData,
    }
}

/// The full sketch without the coarse reads that time an attempt for the
/// breaker's slow-call check (tokio's clock is still read at the start:
/// the deadline is counted from it): what any design of that check costs
/// at least. Not the semantics: no call is ever slow.
pub(crate) fn full_unclocked<M, F>(make: M) -> FullCall<M, F, Unclocked>
where
    M: FnMut() -> F,
    F: Future,
{
    full_in(make)
}

impl<M, F, T, E, K: Clocking, S: Telemetry> Future for FullCall<M, F, K, S>
where
    M: FnMut() -> F,
    F: Future<Output = Result<T, E>>,
    E: Transient,
{
    type Output = Result<T, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        // An attempt to start now: when, on which path, at which position.
        let mut start = None;
        if *this.number == 0 {
            S::open(this.span);
            let path = match begin(ATTEMPTS) {
                Ok(path) => path,
                Err(refusal) => return Poll::Ready(Err(refusal.into())),
            };
            let now = Instant::now();
            let own = now + DEADLINE;
            *this.deadline = Some(match path.deadline {
                Some(d) if d <= own => {
                    if now >= d {
                        return Poll::Ready(Err(Refusal::DeadlineExceeded.into()));
                    }
                    d
                }
                _ => {
                    *this.own = true;
                    own
                }
            });
            start = Some((now, path, path.base));
        }
        loop {
            if *this.backing_off {
                if let Some(backoff) = this.sleep.as_mut().as_pin_mut() {
                    ready!(backoff.poll(cx));
                }
                this.sleep.set(None);
                *this.backing_off = false;
                let last = this.attempt.frame;
                start = Some((Instant::now(), last, last.high));
            }
            if let Some((now, path, base)) = start.take() {
                *this.number += 1;
                // The breaker first (an open one costs nothing more), the
                // bulkhead last (a slot only for an attempt that runs).
                let admitted = CIRCUIT
                    .try_acquire(K::CLOCKED.then(|| Timing::start(now)))
                    .and_then(|permit| Ok((permit, BULKHEAD.try_acquire()?)));
                match admitted {
                    Ok(held) => *this.held = Some(held),
                    Err(refusal) => {
                        give_up();
                        return Poll::Ready(Err(refusal.into()));
                    }
                }
                // A request earns retry budget once, when it goes out.
                if *this.number == 1 && !path.in_retry {
                    BUDGET.on_request(now);
                }
                let timer = earliest(*this.deadline, Some(now + TIMEOUT));
                let frame = Frame::attempt(&path, base, *this.number > 1, timer);
                this.attempt.as_mut().start(frame, (this.make)());
            }
            let polled = {
                let _in_span = S::enter(this.span);
                this.attempt.as_mut().poll_timed(this.sleep.as_mut(), cx)
            };
            let Poll::Ready(out) = polled else {
                if let Some((permit, _)) = this.held.as_mut() {
                    permit.waited();
                }
                return Poll::Pending;
            };
            if let Some((permit, slot)) = this.held.take() {
                permit.record(verdict(out.as_ref()), None);
                drop(slot);
            }
            let frame = &this.attempt.frame;
            reach(frame.high);
            let error = match out {
                Some(Ok(v)) => return Poll::Ready(Ok(v)),
                Some(Err(e)) if e.is_transient() => e,
                Some(Err(e)) => return Poll::Ready(Err(e)),
                // The call's deadline cut the attempt: final.
                None if frame.deadline == *this.deadline => {
                    if *this.own {
                        give_up();
                    }
                    return Poll::Ready(Err(Refusal::DeadlineExceeded.into()));
                }
                // The attempt's timeout: another attempt may succeed.
                None => Refusal::TimedOut.into(),
            };
            if frame.gave_up || *this.number >= ATTEMPTS || frame.high >= frame.cap {
                give_up();
                return Poll::Ready(Err(error));
            }
            // Only a failure reads the time at its end: for the retry.
            let end = Instant::now();
            let delay = full_jitter(*this.number - 1);
            let too_late = this
                .deadline
                .is_some_and(|d| end.checked_add(delay).is_none_or(|w| w >= d));
            if too_late || !BUDGET.try_retry(end) {
                give_up();
                return Poll::Ready(Err(error));
            }
            this.sleep.set(Some(tokio::time::sleep(delay)));
            *this.backing_off = true;
        }
    }
}

// ---------------------------------------------------------------------------

/// The sketches' breaker stayed closed and saw successes only, the
/// bulkhead has every slot back, and a draining process refuses a new
/// call: otherwise the figures are of another path. Run between cases, on
/// one thread.
pub(crate) fn check() -> Result<(), String> {
    check_parts()?;
    check_drain()
}

fn check_drain() -> Result<(), String> {
    #[derive(Debug)]
    struct Refused(Option<Refusal>);
    impl From<Refusal> for Refused {
        fn from(r: Refusal) -> Self {
            Refused(Some(r))
        }
    }
    impl Transient for Refused {
        fn is_transient(&self) -> bool {
            false
        }
    }
    let call = || {
        let call = std::pin::pin!(deadline(|| std::future::ready(Ok::<(), Refused>(()))));
        call.poll(&mut Context::from_waker(std::task::Waker::noop()))
    };
    DRAINING.store(true, Ordering::Relaxed);
    let draining = call();
    DRAINING.store(false, Ordering::Relaxed);
    match (draining, call()) {
        (Poll::Ready(Err(Refused(Some(Refusal::ShuttingDown)))), Poll::Ready(Ok(()))) => Ok(()),
        other => Err(format!(
            "the floor sketches' graceful shutdown does not refuse new calls \
             while draining only: {other:?}"
        )),
    }
}

fn check_parts() -> Result<(), String> {
    let state = CIRCUIT.head.state.load(Ordering::Acquire);
    let w = &CIRCUIT.window;
    let (calls, failed, slow) = (
        w.calls.load(Ordering::Acquire),
        w.failed.load(Ordering::Acquire),
        w.slow.load(Ordering::Acquire),
    );
    let in_flight = BULKHEAD.in_flight.load(Ordering::Acquire);
    if state != CLOSED || calls == 0 || failed != 0 || slow != 0 || in_flight != 0 {
        return Err(format!(
            "the floor sketches' breaker or bulkhead saw more than successes: state word \
             {state}, {calls} calls in the window, {failed} failed, {slow} slow, \
             {in_flight} bulkhead slots taken"
        ));
    }
    Ok(())
}
