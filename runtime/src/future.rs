//! Small hand-written futures the engine composes, so that each layer of
//! nested annotated calls stores the inner future once. (Written as `async`
//! blocks with one `.await` per branch, the compiler keeps a separate slot
//! for each branch's future, and nested layers multiply: four layers came
//! to 87 KB.)

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};

use crate::__private::ReturnsResult;
use crate::deps::Admission;
use crate::frame::{Frame, FrameEnd, InFrame};
use crate::telemetry::CallSpan;

pin_project! {
    /// The body's future, run in its attempt's frame with the task's
    /// deadline set to `deadline`, and cancelled when that passes; inside
    /// the call's span, so that what the body logs is the call's. The
    /// timer is set only once the body has had to wait: a body that is
    /// ready at once never touches tokio's timer. The attempt's admission
    /// is told when the body first waits (a breaker then times it on
    /// tokio's clock: `crate::clock`).
    pub(crate) struct Bounded<'s, 'd, F> {
        span: &'s CallSpan,
        admission: &'s mut Admission<'d>,
        #[pin]
        fut: InFrame<F>,
        deadline: Option<Instant>,
        waited: bool,
        #[pin]
        sleep: Option<Sleep>,
    }
}

impl<'s, 'd, F: Future> Bounded<'s, 'd, F> {
    pub(crate) fn new(
        deadline: Option<Instant>,
        frame: Frame,
        span: &'s CallSpan,
        admission: &'s mut Admission<'d>,
        fut: F,
    ) -> Self {
        Bounded {
            span,
            admission,
            fut: InFrame::new(frame, fut),
            deadline,
            waited: false,
            sleep: None,
        }
    }
}

impl<F: Future> Future for Bounded<'_, '_, F> {
    /// The body's output, or `Err` when the deadline passed first; with
    /// what the attempt's frame collected either way.
    type Output = Result<(F::Output, FrameEnd), FrameEnd>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        #[cfg(feature = "tracing")]
        let _in_span = this.span.enter();
        if let Poll::Ready(v) = this.fut.as_mut().poll(cx) {
            return Poll::Ready(Ok(v));
        }
        if !*this.waited {
            *this.waited = true;
            this.admission.waited();
        }
        let Some(deadline) = *this.deadline else {
            return Poll::Pending;
        };
        if this.sleep.is_none() {
            this.sleep
                .set(Some(tokio::time::sleep_until(crate::context::timer_at(
                    deadline,
                ))));
        }
        let sleep = this.sleep.as_pin_mut().expect("set above");
        ready!(sleep.poll(cx));
        Poll::Ready(Err(this.fut.cancel()))
    }
}

pin_project! {
    /// The body's output as a `Result`.
    pub(crate) struct IntoResult<F> {
        #[pin]
        fut: F,
    }
}

impl<F> IntoResult<F> {
    pub(crate) fn new(fut: F) -> Self {
        IntoResult { fut }
    }
}

impl<F> Future for IntoResult<F>
where
    F: Future,
    F::Output: ReturnsResult,
{
    type Output = Result<<F::Output as ReturnsResult>::Ok, <F::Output as ReturnsResult>::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.project().fut.poll(cx).map(ReturnsResult::into_result)
    }
}
