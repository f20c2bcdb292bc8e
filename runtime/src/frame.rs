//! The attempt frame: the task's deadline, and what an annotated call
//! learns from the annotated calls nested inside one of its attempts.
//!
//! Every attempt runs its body inside a frame, which also carries the task's
//! deadline. A frame is task-local: it is put in a thread-local slot for
//! each poll of its future and taken out again afterwards (as tokio's
//! `task_local!` does), but the slot is three `Copy` words in `Cell`s,
//! which makes entering a frame a few moves instead of a `RefCell` swap of
//! an `Option` (the success path enters one per attempt). [`with_deadline`](crate::with_deadline)
//! and [`observe`](crate::observe) open *transparent* frames, which pass
//! everything they collect on to the frame around them. Nested annotated
//! calls report into the frame of the attempt that encloses them, and
//! nowhere else:
//!
//! * **How far the path got.** A *path* is one chain of nested calls from
//!   the user's request down to a dependency. Positions on it count the
//!   attempts that reached the end of the chain: the frame's `base` is the
//!   position before its attempt began, `high` the furthest position any
//!   call inside it reached. A layer may retry only while its position is
//!   below the path's `cap`, the attempts of the most generous layer on the
//!   path. So however layers, timeouts and deadlines mix (a dependency that
//!   hangs lets outer timeouts cut inner retry loops), the dependency sees
//!   at most `cap` attempts per request on each path.
//! * **Whether a nested call gave up** (retries, budget or deadline spent,
//!   or a local refusal): the enclosing layer then must not retry.
//! * **Whether a nested call ended on this attempt's own deadline**, which
//!   it inherited: that failure is this layer's timer, not the body's.
//! * **The retry budget nearest the dependency**, which every retry on the
//!   path must ask, whichever layer makes it.
//!
//! Concurrent calls in one attempt (`join!`, `select!`) report into the
//! same frame, as siblings: positions are absolute on the path and combined
//! with `max`, so one sibling's retries never use up another's; each
//! sibling's own retries are decided by its own frames. A frame is dropped
//! with its attempt: when a timer cuts an attempt, the nested futures are
//! dropped inside the frame, and each reports how far it got on the way
//! out, so nothing is lost to cancellation.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;
use tokio::time::Instant;

use crate::RetryBudget;

/// The frame being polled on this thread, if any: in three words, each
/// always written and read whole. A slot is swapped into the thread-local
/// and out of it on every poll of an attempt, often right after it was
/// made; a `Cell` of one struct with fields of mixed sizes was copied in
/// pieces that did not line up with the stores that wrote it, and on AMD
/// processors such a load waits for the stores to retire (the largest
/// single cost of a call in `perf`'s samples). Leaving a frame reads back
/// only its report: nested calls change nothing else.
#[derive(Debug, Clone, Copy)]
struct Slot {
    report: Report,
    path: Path,
    /// The task's deadline inside the frame; for an attempt, its own, by
    /// which nested refusals of it are recognised.
    deadline: Option<Instant>,
}

/// A frame as nested calls read it (the slot's parts, unpacked).
#[derive(Debug, Clone, Copy)]
struct Fixed {
    /// Inside an attempt of some annotated call (not only a transparent
    /// frame): a graceful shutdown still admits the call.
    in_call: bool,
    cap: u32,
    base: u32,
    in_retry: bool,
    observed: bool,
    /// Passes everything it collects on to the enclosing frame.
    transparent: bool,
    deadline: Option<Instant>,
}

/// The path's attempt cap (low 32 bits) and the frame's base position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Path(u64);

impl Path {
    #[inline]
    fn new(cap: u32, base: u32) -> Path {
        Path(u64::from(cap) | (u64::from(base) << 32))
    }

    #[inline]
    fn cap(self) -> u32 {
        self.0 as u32
    }

    #[inline]
    fn base(self) -> u32 {
        (self.0 >> 32) as u32
    }
}

/// What nested calls report into a frame, and the frame's flags, in one
/// word: the furthest position reached (`high`, the low 32 bits), how
/// many nested calls gave up (24 bits, saturating: only whether any did,
/// and a transparent frame's count passed on, are used), and eight flags,
/// one of them whether there is a frame at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Report(u64);

impl Report {
    const GAVE_UP_SHIFT: u32 = 32;
    const GAVE_UP_MAX: u64 = (1 << 24) - 1;
    /// See [`Fixed`]: set when the frame is made, never by a report.
    const IN_CALL: u64 = 1 << 56;
    const IN_RETRY: u64 = 1 << 57;
    const OBSERVED: u64 = 1 << 58;
    const TRANSPARENT: u64 = 1 << 59;
    /// There is a frame: the slot is not empty.
    const PRESENT: u64 = 1 << 60;
    /// A nested call ended on this frame's own deadline.
    const TIMER_REFUSED: u64 = 1 << 61;
    /// `BUDGET` holds this frame's budget: a frame without one (most) is
    /// entered and left without touching `BUDGET` at all.
    const HAS_BUDGET: u64 = 1 << 62;
    /// The budget is that of a nested call that failed: a later report of
    /// a call that did not fail does not replace it.
    const BUDGET_FAILED: u64 = 1 << 63;

    const EMPTY: Report = Report(0);

    /// The flags a call's [`PathStart`] keeps of the enclosing frame.
    const PATH_FLAGS: u64 = Self::IN_CALL | Self::IN_RETRY | Self::OBSERVED | Self::PRESENT;

    #[inline]
    fn present(self) -> bool {
        self.has(Self::PRESENT)
    }

    #[inline]
    fn high(self) -> u32 {
        self.0 as u32
    }

    #[inline]
    fn with_high(self, high: u32) -> Report {
        Report((self.0 & !u64::from(u32::MAX)) | u64::from(high))
    }

    #[inline]
    fn gave_up(self) -> u32 {
        ((self.0 >> Self::GAVE_UP_SHIFT) & Self::GAVE_UP_MAX) as u32
    }

    #[inline]
    fn one_more_gave_up(self) -> Report {
        if u64::from(self.gave_up()) < Self::GAVE_UP_MAX {
            Report(self.0 + (1 << Self::GAVE_UP_SHIFT))
        } else {
            self
        }
    }

    #[inline]
    fn has(self, flag: u64) -> bool {
        self.0 & flag != 0
    }

    #[inline]
    fn with(self, flag: u64, on: bool) -> Report {
        if on {
            Report(self.0 | flag)
        } else {
            Report(self.0 & !flag)
        }
    }
}

impl Slot {
    const EMPTY: Slot = Slot {
        report: Report::EMPTY,
        path: Path(0),
        deadline: None,
    };

    /// The slot of a frame that is `fixed`, with nothing reported yet, its
    /// path at `high`.
    #[inline(always)]
    fn new(fixed: Fixed, high: u32) -> Slot {
        let report = Report(u64::from(high) | Report::PRESENT)
            .with(Report::IN_CALL, fixed.in_call)
            .with(Report::IN_RETRY, fixed.in_retry)
            .with(Report::OBSERVED, fixed.observed)
            .with(Report::TRANSPARENT, fixed.transparent);
        Slot {
            report,
            path: Path::new(fixed.cap, fixed.base),
            deadline: fixed.deadline,
        }
    }

    /// The slot of an attempt on `path` at `base`, which counts as
    /// reaching `base + 1`: `in_retry` is [`Report::IN_RETRY`] or 0.
    #[inline(always)]
    fn attempt(path: &PathStart, base: u32, in_retry: u64, deadline: Option<Instant>) -> Slot {
        debug_assert!(in_retry & !Report::IN_RETRY == 0);
        Slot {
            report: Report(
                u64::from(base.saturating_add(1))
                    | Report::PRESENT
                    | Report::IN_CALL
                    | (path.flags.0 & Report::OBSERVED)
                    | in_retry,
            ),
            path: Path::new(path.cap, base),
            deadline,
        }
    }

    #[inline]
    fn fixed(&self) -> Fixed {
        Fixed {
            in_call: self.report.has(Report::IN_CALL),
            cap: self.path.cap(),
            base: self.path.base(),
            in_retry: self.report.has(Report::IN_RETRY),
            observed: self.report.has(Report::OBSERVED),
            transparent: self.report.has(Report::TRANSPARENT),
            deadline: self.deadline,
        }
    }

    /// The thread's current slot.
    #[inline]
    fn current() -> Slot {
        Slot {
            report: REPORT.with(Cell::get),
            path: PATH.with(Cell::get),
            deadline: DEADLINE.with(Cell::get),
        }
    }

    /// Makes this the thread's current slot, and returns the one it was.
    #[inline(always)]
    fn swap_in(self) -> Slot {
        Slot {
            report: REPORT.with(|c| c.replace(self.report)),
            path: PATH.with(|c| c.replace(self.path)),
            deadline: DEADLINE.with(|c| c.replace(self.deadline)),
        }
    }

    /// Makes this the thread's current slot.
    #[inline(always)]
    fn set(self) {
        REPORT.with(|c| c.set(self.report));
        PATH.with(|c| c.set(self.path));
        DEADLINE.with(|c| c.set(self.deadline));
    }
}

thread_local! {
    static REPORT: Cell<Report> = const { Cell::new(Report::EMPTY) };
    static PATH: Cell<Path> = const { Cell::new(Path(0)) };
    static DEADLINE: Cell<Option<Instant>> = const { Cell::new(None) };
    /// The budget the current frame collected: kept apart because it is
    /// not `Copy`, and touched only while the current frame has one
    /// (`Report::HAS_BUDGET`).
    static BUDGET: Cell<Option<BudgetRef>> = const { Cell::new(None) };
    /// The budget a failed call with a fallback reports, held from the
    /// engine's end to the expansion's `fallback_served`, in the same poll:
    /// whether it is reported as a failure's depends on what the fallback
    /// answers.
    static FALLBACK_BUDGET: Cell<Option<BudgetRef>> = const { Cell::new(None) };
}

/// Holds the budget of a call whose fallback is about to answer.
pub(crate) fn hold_for_fallback(budget: Option<BudgetRef>) {
    let _ = FALLBACK_BUDGET.try_with(|b| b.set(budget));
}

/// The budget [`hold_for_fallback`] held, taken.
pub(crate) fn take_held_for_fallback() -> Option<BudgetRef> {
    FALLBACK_BUDGET.try_with(Cell::take).ok().flatten()
}

#[inline]
fn current() -> Fixed {
    Slot::current().fixed()
}

/// What the current frame has collected.
fn current_report() -> Report {
    REPORT.with(Cell::get)
}

/// Changes what the current frame collected, if there is a frame.
fn update(f: impl FnOnce(Report) -> Report) {
    REPORT.with(|r| {
        let report = r.get();
        if report.present() {
            r.set(f(report));
        }
    });
}

/// A retry budget a frame names: cached for a call site, or shared.
#[derive(Debug, Clone)]
pub(crate) enum BudgetRef {
    Static(&'static RetryBudget),
    Shared(Arc<RetryBudget>),
}

impl BudgetRef {
    pub(crate) fn get(&self) -> &RetryBudget {
        match self {
            BudgetRef::Static(b) => b,
            BudgetRef::Shared(b) => b,
        }
    }

    pub(crate) fn same(&self, other: &RetryBudget) -> bool {
        std::ptr::eq(self.get(), other)
    }
}

/// Where a call stands on its path when it begins: the enclosing frame's
/// view, or a fresh path for a call made outside any frame. Its flags stay
/// packed as the enclosing slot holds them: unpacked into four `bool`s and
/// packed again for the call's first frame, they cost about 25
/// instructions a call.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PathStart {
    /// Attempts the most generous enclosing layer allows.
    pub(crate) cap: u32,
    /// Attempts already made on this path.
    pub(crate) base: u32,
    /// The enclosing frame's flags (`Report::PATH_FLAGS`).
    flags: Report,
    /// The task's deadline.
    pub(crate) deadline: Option<Instant>,
}

impl PathStart {
    /// The path a call starts on: the enclosing frame's, if any.
    #[inline]
    pub(crate) fn current() -> PathStart {
        let slot = Slot::current();
        PathStart {
            cap: slot.path.cap(),
            base: slot.path.base(),
            flags: Report(slot.report.0 & Report::PATH_FLAGS),
            deadline: slot.deadline,
        }
    }

    /// Inside a retry of some enclosing layer: not a new request.
    #[inline]
    pub(crate) fn in_retry(&self) -> bool {
        self.flags.has(Report::IN_RETRY)
    }

    /// Inside [`observe`](crate::observe): attempts are recorded.
    #[inline]
    pub(crate) fn observed(&self) -> bool {
        self.flags.has(Report::OBSERVED)
    }

    /// There is an enclosing frame to report to.
    #[inline]
    pub(crate) fn nested(&self) -> bool {
        self.flags.has(Report::PRESENT)
    }

    /// Inside an attempt of an annotated call.
    #[inline]
    pub(crate) fn in_call(&self) -> bool {
        self.flags.has(Report::IN_CALL)
    }
}

/// Inside work a graceful shutdown counts in flight (an attempt of an
/// annotated call, [`admitted`](crate::admitted), a call's fallback).
pub(crate) fn in_call() -> bool {
    current_report().has(Report::IN_CALL)
}

/// The task's deadline, if a caller set one.
pub(crate) fn deadline() -> Option<Instant> {
    DEADLINE.with(Cell::get)
}

/// One frame, outside the thread-local between polls.
#[derive(Debug)]
pub(crate) struct Frame {
    slot: Slot,
    budget: Option<BudgetRef>,
}

/// What one attempt's frame collected.
#[derive(Debug, Default)]
pub(crate) struct FrameEnd {
    /// The furthest position reached inside (at least `base + 1`).
    pub(crate) high: u32,
    /// Nested calls that gave up.
    pub(crate) gave_up: u32,
    /// A nested call ended on this attempt's deadline.
    pub(crate) timer_refused: bool,
    /// The budget a retry of this attempt asks, nearest the dependency:
    /// that of the last nested call that failed, if one did, else the last
    /// one reported (by any call, as it began or after an attempt). Not a
    /// budget a sibling that succeeded or was dropped reported after a
    /// failure; but, when nothing below failed (the attempt failed on its
    /// own, or was cut), the budget of the requests it sent down, which
    /// the retry sends again.
    pub(crate) budget: Option<BudgetRef>,
    transparent: bool,
    deadline: Option<Instant>,
}

impl Frame {
    /// No frame: a placeholder until an attempt starts.
    pub(crate) const IDLE: Frame = Frame {
        slot: Slot::EMPTY,
        budget: None,
    };

    /// The frame of one attempt, which counts as reaching `base + 1`.
    #[inline(always)]
    pub(crate) fn attempt(
        path: &PathStart,
        base: u32,
        in_retry: bool,
        deadline: Option<Instant>,
    ) -> Frame {
        let in_retry = if in_retry { Report::IN_RETRY } else { 0 };
        Frame {
            slot: Slot::attempt(path, base, in_retry, deadline),
            budget: None,
        }
    }

    /// Makes this idle frame ([`IDLE`](Self::IDLE)) the frame of a call's
    /// first attempt, as [`attempt`](Self::attempt) makes one, and returns
    /// it for [`enter_first`](Self::enter_first), which takes it from there
    /// rather than from the fields just written (a copy of them read back
    /// so soon may wait for the stores).
    #[inline(always)]
    pub(crate) fn start_first(&mut self, path: &PathStart, deadline: Option<Instant>) -> First {
        debug_assert!(self.budget.is_none() && !self.slot.report.present());
        // `attempt(path, path.base, path.in_retry(), deadline)`, with the
        // path's retry flag taken as it is.
        let slot = Slot::attempt(path, path.base, path.flags.0 & Report::IN_RETRY, deadline);
        self.slot = slot;
        First(slot)
    }

    /// A transparent frame inside the current one, with `deadline` as the
    /// task's deadline; `observed` when it starts an [`observe`](crate::observe).
    pub(crate) fn transparent(deadline: Option<Instant>, observed: bool) -> Frame {
        let path = current();
        let fixed = Fixed {
            observed: observed || path.observed,
            transparent: true,
            deadline,
            ..path
        };
        Frame {
            slot: Slot::new(fixed, path.base),
            budget: None,
        }
    }

    /// A transparent frame for one unit of work a graceful shutdown waits
    /// for ([`admitted`](crate::admitted)): the annotated calls inside are
    /// part of work in flight.
    pub(crate) fn admitted(deadline: Option<Instant>) -> Frame {
        let mut frame = Frame::transparent(deadline, false);
        frame.slot.report = frame.slot.report.with(Report::IN_CALL, true);
        frame
    }

    /// The frame of a spawned task: a new path with the spawner's deadline
    /// and, for a graceful shutdown, its standing: `in_call` if the task is
    /// work in flight (spawned by an admitted call, or counted on its own).
    pub(crate) fn spawned(deadline: Option<Instant>, in_call: bool) -> Frame {
        let fixed = Fixed {
            in_call,
            cap: 0,
            base: 0,
            in_retry: false,
            observed: false,
            transparent: false,
            deadline,
        };
        Frame {
            slot: Slot::new(fixed, 0),
            budget: None,
        }
    }

    fn end(mut self) -> FrameEnd {
        self.take_end()
    }

    /// The task's deadline inside the frame: an attempt's own.
    #[inline]
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.slot.deadline
    }

    /// The furthest position nested calls reached (at least `base + 1`).
    #[inline]
    pub(crate) fn high(&self) -> u32 {
        self.slot.report.high()
    }

    /// The budget the frame collected, taken out of it.
    #[inline]
    pub(crate) fn take_budget(&mut self) -> Option<BudgetRef> {
        self.budget.take()
    }

    /// What the frame collected, for a frame kept in place: its budget is
    /// taken out of it.
    #[inline]
    pub(crate) fn take_end(&mut self) -> FrameEnd {
        let report = self.slot.report;
        FrameEnd {
            high: report.high(),
            gave_up: report.gave_up(),
            timer_refused: report.has(Report::TIMER_REFUSED),
            budget: self.budget.take(),
            transparent: report.has(Report::TRANSPARENT),
            deadline: self.slot.deadline,
        }
    }

    /// Runs `f` with this frame as the current one, and takes back what it
    /// collected, also if `f` panics.
    #[inline(always)]
    pub(crate) fn enter<R>(&mut self, f: impl FnOnce() -> R) -> R {
        if self.slot.report.has(Report::TRANSPARENT) {
            return self.enter_transparent(f);
        }
        self.enter_attempt(f)
    }

    /// [`enter`](Self::enter) for an attempt's frame (never transparent),
    /// which the lean path knows it holds: no check on its success path.
    #[inline(always)]
    pub(crate) fn enter_attempt<R>(&mut self, f: impl FnOnce() -> R) -> R {
        let slot = self.slot;
        self.enter_as(slot, f)
    }

    /// [`enter_attempt`](Self::enter_attempt) for the first time, as
    /// [`start_first`](Self::start_first) made the frame.
    #[inline(always)]
    pub(crate) fn enter_first<R>(&mut self, first: First, f: impl FnOnce() -> R) -> R {
        self.enter_as(first.0, f)
    }

    /// Enters this attempt's frame, whose slot is `slot`.
    #[inline(always)]
    fn enter_as<R>(&mut self, slot: Slot, f: impl FnOnce() -> R) -> R {
        debug_assert!(!slot.report.has(Report::TRANSPARENT));
        struct Restore<'a> {
            frame: &'a mut Frame,
            outer: Slot,
            outer_budget: Option<BudgetRef>,
        }
        impl Restore<'_> {
            #[inline(always)]
            fn restore(&mut self) {
                // Only the report is read back: nested calls change nothing
                // else.
                let report = REPORT.with(|r| r.replace(self.outer.report));
                PATH.with(|c| c.set(self.outer.path));
                DEADLINE.with(|c| c.set(self.outer.deadline));
                self.frame.slot.report = report;
                if report.has(Report::HAS_BUDGET) {
                    self.frame.budget = BUDGET.try_with(Cell::take).ok().flatten();
                }
                if self.outer.report.has(Report::HAS_BUDGET) {
                    let outer = self.outer_budget.take();
                    let _ = BUDGET.try_with(|b| b.set(outer));
                }
            }
        }
        // The guard restores the outer frame if `f` panics; on return it is
        // restored in line (the guard's drop glue was a call of its own on
        // every poll: about 12 instructions more per call).
        impl Drop for Restore<'_> {
            fn drop(&mut self) {
                self.restore();
            }
        }
        let slot = Slot {
            report: slot.report.with(Report::HAS_BUDGET, self.budget.is_some()),
            ..slot
        };
        let outer = slot.swap_in();
        let outer_budget = if outer.report.has(Report::HAS_BUDGET) {
            BUDGET.try_with(Cell::take).ok().flatten()
        } else {
            None
        };
        if let Some(mine) = self.budget.take() {
            let _ = BUDGET.try_with(|b| b.set(Some(mine)));
        }
        let mut restore = Restore {
            frame: self,
            outer,
            outer_budget,
        };
        let out = f();
        restore.restore();
        // Restored: nothing is left to drop (`restore` took the outer
        // budget back out of the guard).
        std::mem::forget(restore);
        out
    }

    /// [`enter`](Self::enter) for a transparent frame: it shares the
    /// enclosing frame's budget instead of collecting one, so a nested
    /// call's report reaches the enclosing attempt when it is made, not
    /// when the transparent frame ends (which could put an earlier
    /// failure's budget over a later one's).
    #[cold]
    #[inline(never)]
    fn enter_transparent<R>(&mut self, f: impl FnOnce() -> R) -> R {
        struct Restore<'a> {
            frame: &'a mut Frame,
            outer: Slot,
        }
        impl Drop for Restore<'_> {
            fn drop(&mut self) {
                let inner = REPORT.with(Cell::get);
                let mut outer = self.outer;
                if outer.report.present() {
                    outer.report = outer
                        .report
                        .with(Report::HAS_BUDGET, inner.has(Report::HAS_BUDGET))
                        .with(Report::BUDGET_FAILED, inner.has(Report::BUDGET_FAILED));
                } else if inner.has(Report::HAS_BUDGET) {
                    // No frame encloses this one: what was reported inside
                    // has no attempt to go to.
                    let _ = BUDGET.try_with(Cell::take);
                }
                outer.set();
                self.frame.slot.report = inner;
            }
        }
        let outer = Slot::current();
        let shared = outer.report.present();
        self.slot.report = self
            .slot
            .report
            .with(
                Report::HAS_BUDGET,
                shared && outer.report.has(Report::HAS_BUDGET),
            )
            .with(
                Report::BUDGET_FAILED,
                shared && outer.report.has(Report::BUDGET_FAILED),
            );
        self.slot.set();
        let _restore = Restore { frame: self, outer };
        f()
    }
}

/// A call's first attempt's frame, from [`Frame::start_first`] to
/// [`Frame::enter_first`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct First(Slot);

/// Reports to the enclosing frame, if any, that this path reached `position`.
pub(crate) fn reach(position: u32) {
    update(|r| r.with_high(r.high().max(position)));
}

/// Reports to the enclosing frame that a nested call gave up.
pub(crate) fn report_give_up() {
    update(Report::one_more_gave_up);
}

/// Reports that a nested call ended because `deadline`, which it
/// inherited, passed. Only the frame whose attempt set that very deadline
/// takes it as its own timer.
pub(crate) fn report_deadline(deadline: Option<Instant>) {
    if deadline.is_some() && DEADLINE.with(Cell::get) == deadline {
        update(|r| r.with(Report::TIMER_REFUSED, true));
    }
}

/// Reports the retry budget nearest the dependency: deeper calls report
/// later, so the last report wins, unless a nested call that failed
/// reported its own ([`report_failed_budget`]).
pub(crate) fn report_budget(budget: Option<BudgetRef>) {
    let report = current_report();
    if budget.is_some() && report.present() && !report.has(Report::BUDGET_FAILED) {
        let _ = BUDGET.try_with(|b| b.set(budget));
        update(|r| r.with(Report::HAS_BUDGET, true));
    }
}

/// Reports the retry budget nearest the dependency of a nested call that
/// failed: the enclosing attempt's retry asks it, whatever other calls
/// report later (siblings that succeed, or are dropped), until another
/// nested call fails.
pub(crate) fn report_failed_budget(budget: Option<BudgetRef>) {
    if budget.is_some() && current_report().present() {
        let _ = BUDGET.try_with(|b| b.set(budget));
        update(|r| {
            r.with(Report::HAS_BUDGET, true)
                .with(Report::BUDGET_FAILED, true)
        });
    }
}

/// Passes what a frame learned up to the frame that encloses it: how far
/// the path got, and the budget below it, for a cancelled attempt; and, for
/// a transparent frame (`with_deadline`, `observe`, `admitted`), also its
/// give-ups and refused deadlines, whether it ended or was cancelled (its
/// budget reports went up as they were made: it has none of its own).
///
/// A cancelled attempt's budget goes up as a plain report, even if a call
/// inside it had failed: the cancelled call itself did not fail, so a
/// sibling that did keeps its say over which budget a retry asks.
pub(crate) fn forward(end: &FrameEnd) {
    reach(end.high);
    if let Some(budget) = &end.budget {
        report_budget(Some(budget.clone()));
    }
    if end.transparent {
        for _ in 0..end.gave_up {
            report_give_up();
        }
        if end.timer_refused {
            report_deadline(end.deadline);
        }
    }
}

/// Runs `fut` to its end in `frame`, a transparent one (`observe`,
/// `admitted`, a fallback), and passes what it learned up to the frame
/// that encloses it.
pub(crate) async fn run_in<F: Future>(frame: Frame, fut: F) -> F::Output {
    let (output, end) = InFrame::new(frame, fut).await;
    forward(&end);
    output
}

/// Runs a future about to be spawned in a frame of its own: a new path,
/// with the spawner's deadline.
pub(crate) fn scope_spawned<F: Future>(
    deadline: Option<Instant>,
    in_call: bool,
    fut: F,
) -> InFrame<F> {
    InFrame::new(Frame::spawned(deadline, in_call), fut)
}

pin_project! {
    /// A future run inside a frame.
    pub(crate) struct InFrame<F> {
        // `None` once ended.
        frame: Option<Frame>,
        #[pin]
        fut: Option<F>,
    }

    impl<F> PinnedDrop for InFrame<F> {
        fn drop(this: Pin<&mut Self>) {
            // Dropped before it ended: a timer or the caller cancelled the
            // attempt. Drop the nested futures inside the frame, so each
            // reports how far it got, then pass that on.
            let this = this.project();
            if let Some(mut frame) = this.frame.take() {
                let mut fut = this.fut;
                frame.enter(|| fut.set(None));
                forward(&frame.end());
            }
        }
    }
}

impl<F> InFrame<F> {
    pub(crate) fn new(frame: Frame, fut: F) -> Self {
        InFrame {
            frame: Some(frame),
            fut: Some(fut),
        }
    }

    /// Ends the frame early: drops the future inside it and returns what
    /// the frame collected.
    pub(crate) fn cancel(self: Pin<&mut Self>) -> FrameEnd {
        let this = self.project();
        let Some(mut frame) = this.frame.take() else {
            return FrameEnd::default();
        };
        let mut fut = this.fut;
        frame.enter(|| fut.set(None));
        frame.end()
    }
}

impl<F: Future> Future for InFrame<F> {
    type Output = (F::Output, FrameEnd);

    #[inline(always)]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let Some(frame) = this.frame.as_mut() else {
            panic!("`InFrame` polled after it completed");
        };
        let Some(fut) = this.fut.as_pin_mut() else {
            panic!("`InFrame` polled after it completed");
        };
        match frame.enter(|| fut.poll(cx)) {
            Poll::Ready(out) => {
                let frame = this.frame.take().map(Frame::end).unwrap_or_default();
                Poll::Ready((out, frame))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}
