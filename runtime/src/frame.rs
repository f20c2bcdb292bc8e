//! The attempt frame: the task's deadline, and what an annotated call
//! learns from the annotated calls nested inside one of its attempts.
//!
//! Every attempt runs its body inside a frame (a tokio task-local scoped to
//! that attempt's future), which also carries the task's deadline, so an
//! attempt sets one task-local, not two. [`with_deadline`](crate::with_deadline)
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

tokio::task_local! {
    static FRAME: Frame;
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
}

impl PathStart {
    const FRESH: PathStart = PathStart {
        cap: 0,
        base: 0,
        in_retry: false,
        observed: false,
        deadline: None,
        nested: false,
    };

    /// The path a call starts on: the enclosing frame's, if any.
    pub(crate) fn current() -> PathStart {
        FRAME
            .try_with(|f| PathStart {
                cap: f.cap,
                base: f.base,
                in_retry: f.in_retry,
                observed: f.observed,
                deadline: f.deadline,
                nested: true,
            })
            .unwrap_or(PathStart::FRESH)
    }
}

/// The task's deadline, if a caller set one.
pub(crate) fn deadline() -> Option<Instant> {
    FRAME.try_with(|f| f.deadline).ok().flatten()
}

/// One attempt's frame, or a transparent one.
pub(crate) struct Frame {
    cap: u32,
    base: u32,
    in_retry: bool,
    observed: bool,
    /// Passes everything it collects on to the enclosing frame.
    transparent: bool,
    /// The task's deadline inside the frame; for an attempt, its own, by
    /// which nested refusals of it are recognised.
    deadline: Option<Instant>,
    high: Cell<u32>,
    gave_up: Cell<u32>,
    timer_refused: Cell<bool>,
    budget: Cell<Option<BudgetRef>>,
}

impl std::fmt::Debug for Frame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Frame")
            .field("cap", &self.cap)
            .field("base", &self.base)
            .field("high", &self.high.get())
            .field("gave_up", &self.gave_up.get())
            .finish_non_exhaustive()
    }
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
    /// The budget nearest the dependency below this attempt.
    pub(crate) budget: Option<BudgetRef>,
    transparent: bool,
    deadline: Option<Instant>,
}

impl Frame {
    /// The frame of one attempt, which counts as reaching `base + 1`.
    pub(crate) fn attempt(
        path: &PathStart,
        base: u32,
        in_retry: bool,
        deadline: Option<Instant>,
    ) -> Frame {
        Frame {
            cap: path.cap,
            base,
            in_retry,
            observed: path.observed,
            transparent: false,
            deadline,
            high: Cell::new(base.saturating_add(1)),
            gave_up: Cell::new(0),
            timer_refused: Cell::new(false),
            budget: Cell::new(None),
        }
    }

    /// A transparent frame inside the current one, with `deadline` as the
    /// task's deadline; `observed` when it starts an [`observe`](crate::observe).
    pub(crate) fn transparent(deadline: Option<Instant>, observed: bool) -> Frame {
        let path = PathStart::current();
        Frame {
            cap: path.cap,
            base: path.base,
            in_retry: path.in_retry,
            observed: observed || path.observed,
            transparent: true,
            deadline,
            high: Cell::new(path.base),
            gave_up: Cell::new(0),
            timer_refused: Cell::new(false),
            budget: Cell::new(None),
        }
    }

    /// The frame of a spawned task: a new path with the spawner's deadline.
    pub(crate) fn spawned(deadline: Option<Instant>) -> Frame {
        Frame {
            cap: 0,
            base: 0,
            in_retry: false,
            observed: false,
            transparent: false,
            deadline,
            high: Cell::new(0),
            gave_up: Cell::new(0),
            timer_refused: Cell::new(false),
            budget: Cell::new(None),
        }
    }

    /// A copy to carry out of the task-local (the budget moves).
    fn take(&self) -> Frame {
        Frame {
            cap: self.cap,
            base: self.base,
            in_retry: self.in_retry,
            observed: self.observed,
            transparent: self.transparent,
            deadline: self.deadline,
            high: Cell::new(self.high.get()),
            gave_up: Cell::new(self.gave_up.get()),
            timer_refused: Cell::new(self.timer_refused.get()),
            budget: Cell::new(self.budget.take()),
        }
    }

    fn end(self) -> FrameEnd {
        FrameEnd {
            high: self.high.get(),
            gave_up: self.gave_up.get(),
            timer_refused: self.timer_refused.get(),
            budget: self.budget.into_inner(),
            transparent: self.transparent,
            deadline: self.deadline,
        }
    }
}

/// Reports to the enclosing frame, if any, that this path reached `position`.
pub(crate) fn reach(position: u32) {
    let _ = FRAME.try_with(|f| f.high.set(f.high.get().max(position)));
}

/// Reports to the enclosing frame that a nested call gave up.
pub(crate) fn report_give_up() {
    let _ = FRAME.try_with(|f| f.gave_up.set(f.gave_up.get().saturating_add(1)));
}

/// Reports that a nested call ended because `deadline`, which it
/// inherited, passed. Only the frame whose attempt set that very deadline
/// takes it as its own timer.
pub(crate) fn report_deadline(deadline: Option<Instant>) {
    let _ = FRAME.try_with(|f| {
        if deadline.is_some() && f.deadline == deadline {
            f.timer_refused.set(true);
        }
    });
}

/// Reports the retry budget nearest the dependency: deeper calls report
/// later, so the last report wins.
pub(crate) fn report_budget(budget: Option<BudgetRef>) {
    if budget.is_some() {
        let _ = FRAME.try_with(|f| f.budget.set(budget));
    }
}

/// Passes what a cancelled attempt learned up to the frame that encloses
/// its call: how far it got, and the budget below it. A transparent frame
/// passes on everything, also when it ends normally (see
/// [`forward_all`]).
fn forward(end: &FrameEnd) {
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

/// Runs a future about to be spawned in a frame of its own: a new path,
/// with the spawner's deadline.
pub(crate) fn scope_spawned<F: Future>(
    deadline: Option<Instant>,
    fut: F,
) -> tokio::task::futures::TaskLocalFuture<Frame, F> {
    FRAME.scope(Frame::spawned(deadline), fut)
}

/// Passes everything a transparent frame collected to the enclosing one.
pub(crate) fn forward_all(end: &FrameEnd) {
    forward(end);
}

pin_project! {
    /// A future run inside an attempt frame.
    pub(crate) struct InFrame<F> {
        // Outside the task-local between polls; `None` once ended.
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
            if let Some(frame) = this.frame.take() {
                let mut fut = this.fut;
                let frame = FRAME.sync_scope(frame, || {
                    fut.set(None);
                    FRAME.with(Frame::take)
                });
                forward(&frame.end());
            }
        }
    }
}

impl<F: Future> InFrame<F> {
    pub(crate) fn new(frame: Frame, fut: F) -> Self {
        InFrame {
            frame: Some(frame),
            fut: Some(fut),
        }
    }

    /// Ends the attempt early: drops the body inside the frame and returns
    /// what the frame collected.
    pub(crate) fn cancel(self: Pin<&mut Self>) -> FrameEnd {
        let this = self.project();
        let Some(frame) = this.frame.take() else {
            return FrameEnd::default();
        };
        let mut fut = this.fut;
        FRAME
            .sync_scope(frame, || {
                fut.set(None);
                FRAME.with(Frame::take)
            })
            .end()
    }
}

impl<F: Future> Future for InFrame<F> {
    type Output = (F::Output, FrameEnd);

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let frame = this
            .frame
            .take()
            .expect("`InFrame` polled after it completed");
        let fut = this
            .fut
            .as_pin_mut()
            .expect("the body is present until the frame ends");
        let (poll, frame) = FRAME.sync_scope(frame, || (fut.poll(cx), FRAME.with(Frame::take)));
        match poll {
            Poll::Ready(out) => Poll::Ready((out, frame.end())),
            Poll::Pending => {
                *this.frame = Some(frame);
                Poll::Pending
            }
        }
    }
}
