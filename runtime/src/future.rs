//! Small hand-written futures the engine composes, so that each layer of
//! nested annotated calls stores the inner future once. (Written as `async`
//! blocks with one `.await` per branch, the compiler keeps a separate slot
//! for each branch's future, and nested layers multiply: four layers came
//! to 87 KB.)

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use pin_project_lite::pin_project;
use tokio::task::futures::TaskLocalFuture;
use tokio::time::{Instant, Sleep};

use crate::__private::ReturnsResult;
use crate::context::RetryScope;

pin_project! {
    /// The body's future, run with the task's deadline set to `deadline`
    /// and cancelled when it passes.
    pub(crate) struct Bounded<F> {
        #[pin]
        fut: TaskLocalFuture<Option<Instant>, F>,
        #[pin]
        sleep: Option<Sleep>,
    }
}

/// The attempt's deadline passed before the body finished.
pub(crate) struct Elapsed;

impl<F: Future> Bounded<F> {
    pub(crate) fn new(deadline: Option<Instant>, fut: F) -> Self {
        Bounded {
            fut: crate::context::scope_deadline(deadline, fut),
            sleep: deadline.map(tokio::time::sleep_until),
        }
    }
}

impl<F: Future> Future for Bounded<F> {
    type Output = Result<F::Output, Elapsed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        // The body first: a body that is ready never registers a timer.
        if let Poll::Ready(v) = this.fut.poll(cx) {
            return Poll::Ready(Ok(v));
        }
        match this.sleep.as_pin_mut() {
            Some(sleep) => {
                ready!(sleep.poll(cx));
                Poll::Ready(Err(Elapsed))
            }
            None => Poll::Pending,
        }
    }
}

pin_project! {
    /// The engine's future, inside a new retry scope only if the task has
    /// none yet (the outermost retrying layer opens it).
    #[project = MaybeScopedProj]
    pub(crate) enum MaybeScoped<F> {
        Plain { #[pin] fut: F },
        Scoped { #[pin] fut: TaskLocalFuture<RetryScope, F> },
    }
}

impl<F: Future> Future for MaybeScoped<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        match self.project() {
            MaybeScopedProj::Plain { fut } => fut.poll(cx),
            MaybeScopedProj::Scoped { fut } => fut.poll(cx),
        }
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
