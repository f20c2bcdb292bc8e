//! The attempt frame: the task's deadline, and what an annotated call
//! learns from the annotated calls nested inside one of its attempts.
//!
//! Every attempt runs its body inside a frame, which also carries the task's
//! deadline. A frame is task-local: it is put in a thread-local slot for
//! each poll of its future and taken out again afterwards (as tokio's
//! `task_local!` does), but the slot is a plain `Copy` value in a `Cell`,
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

/// The frame being polled on this thread, if any (`present`).
///
/// `repr(C)`, in this order: the layout is fixed rather than the
/// compiler's. A slot is copied into and out of the thread-local on every
/// poll of an attempt, and this layout measured 12-14 % less time per call
/// for calls without parts and 3-5 % with them than the compiler's own
/// (10 million calls of each annotated function, the two builds
/// alternated five times, fastest run of each taken), though it runs a
/// few more instructions. A
/// tighter `repr(C)` order (deadline first, 40 bytes) measured no better
/// than the compiler's layout.
#[derive(Debug, Clone, Copy)]
#[repr(C)]
struct Slot {
    present: bool,
    /// Inside an attempt of some annotated call (not only a transparent
    /// frame): a graceful shutdown still admits the call.
    in_call: bool,
    cap: u32,
    base: u32,
    in_retry: bool,
    observed: bool,
    /// Passes everything it collects on to the enclosing frame.
    transparent: bool,
    /// The task's deadline inside the frame; for an attempt, its own, by
    /// which nested refusals of it are recognised.
    deadline: Option<Instant>,
    high: u32,
    gave_up: u32,
    timer_refused: bool,
    /// `BUDGET` holds this frame's budget: a frame without one (most) is
    /// entered and left without touching `BUDGET` at all.
    has_budget: bool,
    /// The budget is that of a nested call that failed: a later report of
    /// a call that did not fail does not replace it.
    budget_failed: bool,
}

impl Slot {
    const EMPTY: Slot = Slot {
        present: false,
        in_call: false,
        cap: 0,
        base: 0,
        in_retry: false,
        observed: false,
        transparent: false,
        deadline: None,
        high: 0,
        gave_up: 0,
        timer_refused: false,
        has_budget: false,
        budget_failed: false,
    };
}

thread_local! {
    static SLOT: Cell<Slot> = const { Cell::new(Slot::EMPTY) };
    /// The budget the current frame collected: kept apart because it is
    /// not `Copy`, and touched only while the current frame has one
    /// (`Slot::has_budget`).
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
fn current() -> Slot {
    SLOT.with(Cell::get)
}

/// Changes the current frame, if there is one.
fn update(f: impl FnOnce(&mut Slot)) {
    SLOT.with(|slot| {
        let mut s = slot.get();
        if s.present {
            f(&mut s);
            slot.set(s);
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
/// view, or a fresh path for a call made outside any frame.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PathStart {
    /// Attempts the most generous enclosing layer allows.
    pub(crate) cap: u32,
    /// Attempts already made on this path.
    pub(crate) base: u32,
    /// Inside a retry of some enclosing layer: not a new request.
    pub(crate) in_retry: bool,
    /// Inside [`observe`](crate::observe): attempts are recorded.
    pub(crate) observed: bool,
    /// The task's deadline.
    pub(crate) deadline: Option<Instant>,
    /// There is an enclosing frame to report to.
    pub(crate) nested: bool,
    /// Inside an attempt of an annotated call.
    pub(crate) in_call: bool,
}

impl PathStart {
    /// The path a call starts on: the enclosing frame's, if any.
    #[inline]
    pub(crate) fn current() -> PathStart {
        let s = current();
        PathStart {
            cap: s.cap,
            base: s.base,
            in_retry: s.in_retry,
            observed: s.observed,
            deadline: s.deadline,
            nested: s.present,
            in_call: s.in_call,
        }
    }
}

/// Inside work a graceful shutdown counts in flight (an attempt of an
/// annotated call, [`admitted`](crate::admitted), a call's fallback).
pub(crate) fn in_call() -> bool {
    current().in_call
}

/// The task's deadline, if a caller set one.
pub(crate) fn deadline() -> Option<Instant> {
    current().deadline
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
    #[inline]
    pub(crate) fn attempt(
        path: &PathStart,
        base: u32,
        in_retry: bool,
        deadline: Option<Instant>,
    ) -> Frame {
        Frame {
            slot: Slot {
                present: true,
                in_call: true,
                cap: path.cap,
                base,
                in_retry,
                observed: path.observed,
                transparent: false,
                deadline,
                high: base.saturating_add(1),
                gave_up: 0,
                timer_refused: false,
                has_budget: false,
                budget_failed: false,
            },
            budget: None,
        }
    }

    /// Makes this idle frame ([`IDLE`](Self::IDLE)) the frame of a call's
    /// first attempt, as [`attempt`](Self::attempt) makes one: written in
    /// place, with no budget of an earlier attempt to drop.
    #[inline]
    pub(crate) fn start_first(&mut self, path: &PathStart, deadline: Option<Instant>) {
        debug_assert!(self.budget.is_none() && !self.slot.present);
        self.slot = Frame::attempt(path, path.base, path.in_retry, deadline).slot;
    }

    /// A transparent frame inside the current one, with `deadline` as the
    /// task's deadline; `observed` when it starts an [`observe`](crate::observe).
    pub(crate) fn transparent(deadline: Option<Instant>, observed: bool) -> Frame {
        let path = current();
        Frame {
            slot: Slot {
                present: true,
                in_call: path.in_call,
                cap: path.cap,
                base: path.base,
                in_retry: path.in_retry,
                observed: observed || path.observed,
                transparent: true,
                deadline,
                high: path.base,
                gave_up: 0,
                timer_refused: false,
                has_budget: false,
                budget_failed: false,
            },
            budget: None,
        }
    }

    /// A transparent frame for one unit of work a graceful shutdown waits
    /// for ([`admitted`](crate::admitted)): the annotated calls inside are
    /// part of work in flight.
    pub(crate) fn admitted(deadline: Option<Instant>) -> Frame {
        let mut frame = Frame::transparent(deadline, false);
        frame.slot.in_call = true;
        frame
    }

    /// The frame of a spawned task: a new path with the spawner's deadline
    /// and, for a graceful shutdown, its standing: `in_call` if the task is
    /// work in flight (spawned by an admitted call, or counted on its own).
    pub(crate) fn spawned(deadline: Option<Instant>, in_call: bool) -> Frame {
        Frame {
            slot: Slot {
                present: true,
                in_call,
                deadline,
                ..Slot::EMPTY
            },
            budget: None,
        }
    }

    fn end(self) -> FrameEnd {
        FrameEnd {
            high: self.slot.high,
            gave_up: self.slot.gave_up,
            timer_refused: self.slot.timer_refused,
            budget: self.budget,
            transparent: self.slot.transparent,
            deadline: self.slot.deadline,
        }
    }

    /// The task's deadline inside the frame: an attempt's own.
    #[inline]
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.slot.deadline
    }

    /// The furthest position nested calls reached (at least `base + 1`).
    #[inline]
    pub(crate) fn high(&self) -> u32 {
        self.slot.high
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
        FrameEnd {
            high: self.slot.high,
            gave_up: self.slot.gave_up,
            timer_refused: self.slot.timer_refused,
            budget: self.budget.take(),
            transparent: self.slot.transparent,
            deadline: self.slot.deadline,
        }
    }

    /// Runs `f` with this frame as the current one, and takes back what it
    /// collected, also if `f` panics.
    #[inline(always)]
    pub(crate) fn enter<R>(&mut self, f: impl FnOnce() -> R) -> R {
        if self.slot.transparent {
            return self.enter_transparent(f);
        }
        self.enter_attempt(f)
    }

    /// [`enter`](Self::enter) for an attempt's frame (never transparent),
    /// which the lean path knows it holds: no check on its success path.
    #[inline(always)]
    pub(crate) fn enter_attempt<R>(&mut self, f: impl FnOnce() -> R) -> R {
        debug_assert!(!self.slot.transparent);
        struct Restore<'a> {
            frame: &'a mut Frame,
            outer: &'a Slot,
            outer_budget: Option<BudgetRef>,
        }
        impl Restore<'_> {
            #[inline(always)]
            fn restore(&mut self) {
                self.frame.slot = SLOT.with(|s| s.replace(*self.outer));
                if self.frame.slot.has_budget {
                    self.frame.budget = BUDGET.try_with(Cell::take).ok().flatten();
                }
                if self.outer.has_budget {
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
        self.slot.has_budget = self.budget.is_some();
        let outer = SLOT.with(|s| s.replace(self.slot));
        let outer_budget = if outer.has_budget {
            BUDGET.try_with(Cell::take).ok().flatten()
        } else {
            None
        };
        if let Some(mine) = self.budget.take() {
            let _ = BUDGET.try_with(|b| b.set(Some(mine)));
        }
        let mut restore = Restore {
            frame: self,
            outer: &outer,
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
                let inner = SLOT.with(Cell::get);
                let mut outer = self.outer;
                if outer.present {
                    outer.has_budget = inner.has_budget;
                    outer.budget_failed = inner.budget_failed;
                } else if inner.has_budget {
                    // No frame encloses this one: what was reported inside
                    // has no attempt to go to.
                    let _ = BUDGET.try_with(Cell::take);
                }
                SLOT.with(|s| s.set(outer));
                self.frame.slot = inner;
            }
        }
        let outer = current();
        self.slot.has_budget = outer.present && outer.has_budget;
        self.slot.budget_failed = outer.present && outer.budget_failed;
        SLOT.with(|s| s.set(self.slot));
        let _restore = Restore { frame: self, outer };
        f()
    }
}

/// Reports to the enclosing frame, if any, that this path reached `position`.
pub(crate) fn reach(position: u32) {
    update(|s| s.high = s.high.max(position));
}

/// Reports to the enclosing frame that a nested call gave up.
pub(crate) fn report_give_up() {
    update(|s| s.gave_up = s.gave_up.saturating_add(1));
}

/// Reports that a nested call ended because `deadline`, which it
/// inherited, passed. Only the frame whose attempt set that very deadline
/// takes it as its own timer.
pub(crate) fn report_deadline(deadline: Option<Instant>) {
    update(|s| {
        if deadline.is_some() && s.deadline == deadline {
            s.timer_refused = true;
        }
    });
}

/// Reports the retry budget nearest the dependency: deeper calls report
/// later, so the last report wins, unless a nested call that failed
/// reported its own ([`report_failed_budget`]).
pub(crate) fn report_budget(budget: Option<BudgetRef>) {
    let slot = current();
    if budget.is_some() && slot.present && !slot.budget_failed {
        let _ = BUDGET.try_with(|b| b.set(budget));
        update(|s| s.has_budget = true);
    }
}

/// Reports the retry budget nearest the dependency of a nested call that
/// failed: the enclosing attempt's retry asks it, whatever other calls
/// report later (siblings that succeed, or are dropped), until another
/// nested call fails.
pub(crate) fn report_failed_budget(budget: Option<BudgetRef>) {
    if budget.is_some() && current().present {
        let _ = BUDGET.try_with(|b| b.set(budget));
        update(|s| {
            s.has_budget = true;
            s.budget_failed = true;
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
