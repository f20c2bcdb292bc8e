//! The lean path: a call that names no breaker, budget or bulkhead runs its
//! first attempt in a hand-written future, and only a first attempt that
//! fails (or is cut by its deadline) is handed to the `async` engine.
//!
//! Such a call needs no admission and records nothing in shared parts, so
//! its success path is: begin the call, open the attempt's frame, poll the
//! body inside it and the call's span, end the call. Written as the
//! engine's nested `async fn`s, that path also paid for moving the
//! engine's state between them; here the first attempt's body, timer and
//! frame are fields of one pinned future, set in place, and of the call it
//! keeps only what a success needs ([`Start`]): its `Call` (classifier,
//! parts) is put together only when the attempt fails, out of line. The
//! decisions after a failure (retry or not, backoff, budget, what to tell
//! enclosing layers) are the `async` engine's alone: the call is handed
//! over as it stands, with its first attempt's outcome, and goes on in a
//! boxed `async` future exactly as if the engine had run it from the start
//! (one allocation, on that failure path only; boxed so that the lean
//! future stays the size of one attempt). Calls that name a part run in
//! the `async` engine from the start.
//!
//! Measured with `benches/callgrind.sh` (instructions per call, default
//! features): `retries` 603 before this shape, 414 after; `deadline_ms`
//! 651 and 521.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;
use tokio::time::Sleep;

use super::{Attempted, BodyEnd, Call, DepsRef, NO_DEPS, Policy, Resumed, Start, once_end};
use crate::__private::ReturnsResult;
use crate::Error;
use crate::classify::Verdict;
use crate::context::earliest;
use crate::deps::Admission;
use crate::frame::{self, Frame, PathStart};
use crate::report::{self, AttemptOutcome};
use crate::telemetry::{self, AttemptEnd, CallOutcome, CallSpan, Describe};

pin_project! {
    /// A call with retries: lean (see the module) until its first attempt
    /// fails, then in the `async` engine.
    pub(super) struct Engine<R, C, V, F, Fut, G, Gen>
    where
        R: ReturnsResult,
    {
        // Goes on with a handed-over call: `retry_resumed`, as a value, so
        // that its unnameable future type can be `Gen`.
        general: G,
        #[pin]
        state: State<R, C, V, F, Fut, Gen>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<R, C, V, F, Fut, Gen>
    where
        R: ReturnsResult,
    {
        Lean {
            #[pin]
            lean: Lean<R, C, V, F, Fut>,
        },
        // Boxed: the lean future stays the size of its first attempt, not
        // of the whole retry loop (a future is moved at least once after it
        // is made, and a bigger one costs a `memcpy` call per call).
        General {
            fut: Pin<Box<Gen>>,
        },
    }
}

impl<R, C, V, F, Fut, G, Gen> Engine<R, C, V, F, Fut, G, Gen>
where
    R: ReturnsResult,
{
    pub(super) fn new(
        policy: &'static Policy,
        classify: C,
        refuse: fn(Error) -> R::Error,
        describe: Describe<R::Error>,
        make: F,
        general: G,
    ) -> Self {
        Engine {
            general,
            state: State::Lean {
                lean: Lean::new(policy, classify, refuse, describe, make, true),
            },
        }
    }
}

impl<R, C, V, F, Fut, G, Gen> Future for Engine<R, C, V, F, Fut, G, Gen>
where
    R: ReturnsResult,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<R::Ok, R::Error>>,
    C: Fn(&R::Error) -> V,
    V: Into<Verdict>,
    G: Fn(Resumed<C, R::Ok, R::Error>, fn(Error) -> R::Error, Describe<R::Error>, F) -> Gen,
    Gen: Future<Output = R>,
{
    type Output = R;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<R> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Lean { lean } => match lean.poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(LeanEnd::Done(out)) => return Poll::Ready(out),
                    Poll::Ready(LeanEnd::Handover(h)) => {
                        let fut = general(this.general, h);
                        this.state.set(State::General { fut });
                    }
                },
                StateProj::General { fut } => return poll_general(fut, cx),
            }
        }
    }
}

pin_project! {
    /// A call without retries: its one attempt on the lean path, and its
    /// end, whatever it is, decided there.
    pub(super) struct OnceLean<R, C, V, F, Fut>
    where
        R: ReturnsResult,
    {
        #[pin]
        lean: Lean<R, C, V, F, Fut>,
    }
}

impl<R, C, V, F, Fut> OnceLean<R, C, V, F, Fut>
where
    R: ReturnsResult,
{
    pub(super) fn new(
        policy: &'static Policy,
        classify: C,
        refuse: fn(Error) -> R::Error,
        describe: Describe<R::Error>,
        make: F,
    ) -> Self {
        OnceLean {
            lean: Lean::new(policy, classify, refuse, describe, make, false),
        }
    }
}

impl<R, C, V, F, Fut> Future for OnceLean<R, C, V, F, Fut>
where
    R: ReturnsResult,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<R::Ok, R::Error>>,
    C: Fn(&R::Error) -> V,
    V: Into<Verdict>,
{
    type Output = R;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<R> {
        match self.project().lean.poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(LeanEnd::Done(out)) => Poll::Ready(out),
            // A call without retries ends on the lean path (`once_end`).
            Poll::Ready(LeanEnd::Handover(_)) => {
                unreachable!("a call without retries is never handed over")
            }
        }
    }
}

pin_project! {
    /// The first attempt of a call that names no part, shaped like a
    /// hand-written future: the attempt's body, its timer and its frame in
    /// place, and of the call only what a success needs ([`Start`]). The
    /// call's `Call` is put together only if the attempt fails.
    pub(super) struct Lean<R, C, V, F, Fut>
    where
        R: ReturnsResult,
    {
        // `Some` while the attempt runs.
        #[pin]
        body: Option<Fut>,
        #[pin]
        sleep: Option<Sleep>,
        // The attempt's frame: between polls, what nested calls reported.
        frame: Frame,
        // `Some` from the first poll until the call ends.
        start: Option<Start>,
        span: Option<CallSpan>,
        // The classifier and the maker of attempts: `None` once the call
        // has ended (or been handed over).
        parts: Option<(C, F)>,
        policy: &'static Policy,
        refuse: fn(Error) -> R::Error,
        describe: Describe<R::Error>,
        // Hand a failed first attempt to `retry_resumed`; else end the call
        // as `once_inner` does.
        retrying: bool,
        _verdict: PhantomData<fn() -> V>,
    }

    impl<R, C, V, F, Fut> PinnedDrop for Lean<R, C, V, F, Fut>
    where
        R: ReturnsResult,
    {
        fn drop(this: Pin<&mut Self>) {
            // Dropped while its attempt ran (an enclosing timer, the
            // caller's `select!`): as the `async` engine's locals drop. The
            // body is dropped inside its frame, so nested calls report how
            // far they got, and that is passed on; an observed call reports
            // the attempt as possibly applied. The call and its span drop
            // after, with the fields.
            let this = this.project();
            if this.body.is_some() {
                let mut body = this.body;
                this.frame.enter_attempt(|| body.set(None));
                frame::forward(&this.frame.take_end());
                if this.start.as_ref().is_some_and(|start| start.path.observed) {
                    report::record(this.policy.function, 1, AttemptOutcome::Cancelled, true);
                }
            }
        }
    }
}

impl<R, C, V, F, Fut> Lean<R, C, V, F, Fut>
where
    R: ReturnsResult,
{
    fn new(
        policy: &'static Policy,
        classify: C,
        refuse: fn(Error) -> R::Error,
        describe: Describe<R::Error>,
        make: F,
        retrying: bool,
    ) -> Self {
        Lean {
            body: None,
            sleep: None,
            frame: Frame::IDLE,
            start: None,
            span: None,
            parts: Some((classify, make)),
            policy,
            refuse,
            describe,
            retrying,
            _verdict: PhantomData,
        }
    }
}

/// How the lean path ended. A value returned once and taken apart at once,
/// never kept: the size of a handed-over call is paid only on failure.
#[allow(clippy::large_enum_variant)]
pub(super) enum LeanEnd<R: ReturnsResult, C, F> {
    Done(R),
    Handover(Handover<R, C, F>),
}

/// A call for the `async` engine to go on with.
pub(super) struct Handover<R: ReturnsResult, C, F> {
    resumed: Resumed<C, R::Ok, R::Error>,
    refuse: fn(Error) -> R::Error,
    describe: Describe<R::Error>,
    make: F,
}

impl<R, C, V, F, Fut> Future for Lean<R, C, V, F, Fut>
where
    R: ReturnsResult,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<R::Ok, R::Error>>,
    C: Fn(&R::Error) -> V,
    V: Into<Verdict>,
{
    type Output = LeanEnd<R, C, F>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let policy = *this.policy;
        if this.start.is_none() {
            let Some((_, make)) = this.parts.as_mut() else {
                panic!("a `#[resilient]` call polled after it completed");
            };
            let span = this.span.insert(telemetry::span(policy));
            let refuse = *this.refuse;
            // `Call::begin` for a call without parts: nothing to resolve,
            // no clock needed for statistics, no budget to report.
            let mut path = PathStart::current();
            let begun = Start::admit(policy, span, &mut path, refuse)
                .and_then(|in_flight| Start::begin(policy, span, path, in_flight, false, refuse));
            let start = match begun {
                Ok(start) => this.start.insert(start),
                Err(error) => {
                    *this.span = None;
                    *this.parts = None;
                    return Poll::Ready(LeanEnd::Done(R::from_result(Err(error))));
                }
            };
            // The first attempt, as `Call::attempt` runs it for a call
            // without parts: nothing to admit, no budget to earn.
            let timeout_at = start.start.and_then(|at| at.checked_add(policy.timeout?));
            let deadline = earliest(start.deadline, timeout_at);
            let path = &start.path;
            *this.frame = Frame::attempt(path, path.base, path.in_retry, deadline);
            this.body.set(Some(make()));
        }
        let (Some(start), Some(span)) = (this.start.as_ref(), this.span.as_ref()) else {
            unreachable!("set above");
        };
        let result = {
            #[cfg(feature = "tracing")]
            let _in_span = span.enter();
            #[cfg(not(feature = "tracing"))]
            let _ = span;
            let mut body = this.body.as_mut();
            let polled = this
                .frame
                .enter_attempt(|| match body.as_mut().as_pin_mut() {
                    Some(body) => body.poll(cx),
                    None => unreachable!("the body runs while the call has begun"),
                });
            match polled {
                Poll::Ready(out) => Ok(out),
                Poll::Pending => {
                    // The timer is set only once the body has had to wait:
                    // a body ready at once never touches tokio's timer.
                    let Some(deadline) = this.frame.deadline() else {
                        return Poll::Pending;
                    };
                    if this.sleep.is_none() {
                        let at = crate::context::timer_at(deadline);
                        this.sleep.set(Some(tokio::time::sleep_until(at)));
                    }
                    let timer = this.sleep.as_mut().as_pin_mut().expect("set above");
                    match timer.poll(cx) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(()) => {
                            // Cut: the body is dropped inside its frame, so
                            // nested calls report how far they got.
                            this.frame.enter_attempt(|| body.set(None));
                            Err(())
                        }
                    }
                }
            }
        };
        // The body is over: drop it and its timer before the attempt is
        // concluded, as the `async` engine does.
        this.body.set(None);
        this.sleep.set(None);
        let deadline = this.frame.deadline();
        let end = this.frame.take_end();
        match result {
            Ok(Ok(value)) => {
                // `Call::conclude` and the end of `retry_loop` for a
                // success with no parts to record it in. The first
                // attempt began with the call.
                telemetry::attempt_ended(policy, &start.began, None, AttemptEnd::Success);
                let path = &start.path;
                if path.observed {
                    report::record(policy.function, 1, AttemptOutcome::Succeeded, false);
                }
                if path.nested {
                    frame::reach(path.base.max(end.high));
                    frame::report_budget(end.budget);
                }
                telemetry::call_ended(policy, &start.began, CallOutcome::Success);
                // The call is over: it leaves the work in flight and its
                // span closes now, not whenever the future is dropped.
                *this.start = None;
                *this.span = None;
                *this.parts = None;
                Poll::Ready(LeanEnd::Done(R::from_result(Ok(value))))
            }
            result => {
                let (Some(start), Some(span), Some((classify, make))) =
                    (this.start.take(), this.span.take(), this.parts.take())
                else {
                    unreachable!("checked above");
                };
                let result = match result {
                    Ok(out) => Ok((out, end)),
                    Err(()) => Err(end),
                };
                let how = Ending {
                    retrying: *this.retrying,
                    refuse: *this.refuse,
                    describe: *this.describe,
                };
                Poll::Ready(failed(
                    policy, start, span, classify, make, result, deadline, how,
                ))
            }
        }
    }
}

/// How a lean call goes on after a failed first attempt.
struct Ending<E> {
    retrying: bool,
    refuse: fn(Error) -> E,
    describe: Describe<E>,
}

/// The first attempt failed (or its deadline cut it): the call is put
/// together, the attempt concluded as the `async` engine concludes it, and
/// the call ended here or handed over. Out of line: the success path's
/// `poll` stays small (a `poll` holding the whole failure path saved and
/// restored more registers on every call).
#[cold]
#[inline(never)]
#[allow(clippy::too_many_arguments)]
fn failed<R, C, V, F>(
    policy: &'static Policy,
    start: Start,
    span: CallSpan,
    classify: C,
    make: F,
    result: BodyEnd<R::Ok, R::Error>,
    deadline: Option<tokio::time::Instant>,
    how: Ending<R::Error>,
) -> LeanEnd<R, C, F>
where
    R: ReturnsResult,
    C: Fn(&R::Error) -> V,
    V: Into<Verdict>,
{
    let began = start.began;
    let call = Call::resume(policy, classify, DepsRef::Static(&NO_DEPS), start);
    let admission = Admission::none(&NO_DEPS);
    let attempted: Attempted<R::Ok, R::Error> =
        call.conclude(&span, 1, admission, deadline, began, result);
    if !how.retrying {
        // The call ends (leaving the work in flight) before its span, a
        // parameter, closes.
        return LeanEnd::Done(once_end(&call, &span, attempted, how.refuse, how.describe));
    }
    LeanEnd::Handover(Handover {
        resumed: Resumed {
            call,
            span,
            attempted,
        },
        refuse: how.refuse,
        describe: how.describe,
        make,
    })
}

/// The `async` engine's future for a handed-over call, boxed.
#[cold]
#[inline(never)]
fn general<R, C, F, G, Gen>(general: &G, h: Handover<R, C, F>) -> Pin<Box<Gen>>
where
    R: ReturnsResult,
    G: Fn(Resumed<C, R::Ok, R::Error>, fn(Error) -> R::Error, Describe<R::Error>, F) -> Gen,
{
    Box::pin(general(h.resumed, h.refuse, h.describe, h.make))
}

/// Polls a handed-over call: out of line, as the failure path is.
#[inline(never)]
fn poll_general<Gen: Future>(fut: &mut Pin<Box<Gen>>, cx: &mut Context<'_>) -> Poll<Gen::Output> {
    fut.as_mut().poll(cx)
}
