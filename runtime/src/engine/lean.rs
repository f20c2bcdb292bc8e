//! The lean path: a call that names no breaker, budget or bulkhead runs its
//! first attempt in a hand-written future, and only a first attempt that
//! fails (or is cut by its deadline) is handed to the `async` engine.
//!
//! Such a call needs no admission and records nothing in shared parts, so
//! its success path is: begin the call, open the attempt's frame, poll the
//! body inside it and the call's span, end the call. Written as the
//! engine's nested `async fn`s, that path also paid for moving the
//! engine's state between them (about 140-180 instructions per call,
//! `benches/callgrind.sh`); here the first attempt's state lives in the
//! fields of one pinned future, set in place. The decisions after a
//! failure (retry or not, backoff, budget, what to tell enclosing layers)
//! are the `async` engine's alone: the call is handed over as it stands,
//! boxed, with its first attempt's outcome, and goes on exactly as if the
//! engine had run it from the start. Calls that name a part run in the
//! `async` engine from the start.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};

use super::{Attempted, Call, CutAttempt, NO_DEPS, Policy, Resumed, once_end};
use crate::__private::ReturnsResult;
use crate::Error;
use crate::classify::Verdict;
use crate::context::earliest;
use crate::deps::Admission;
use crate::frame::{Frame, InFrame};
use crate::report::AttemptOutcome;
use crate::telemetry::{self, AttemptEnd, Began, CallSpan, Describe};

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
        General {
            #[pin]
            fut: Gen,
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
    G: Fn(Box<Resumed<C, R::Ok, R::Error>>, fn(Error) -> R::Error, Describe<R::Error>, F) -> Gen,
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
                        let fut = (this.general)(h.resumed, h.refuse, h.describe, h.make);
                        this.state.set(State::General { fut });
                    }
                },
                StateProj::General { fut } => return fut.poll(cx),
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
    /// The first attempt of a call that names no part. Its fields drop in
    /// the order the `async` engine's locals do when the call is cancelled:
    /// the body inside its frame (nested calls report how far they got),
    /// its timer, the report of the cut attempt, then the call and its
    /// span.
    pub(super) struct Lean<R, C, V, F, Fut>
    where
        R: ReturnsResult,
    {
        #[pin]
        body: Option<InFrame<Fut>>,
        #[pin]
        sleep: Option<Sleep>,
        cut: Option<CutAttempt>,
        // The attempt's deadline, and when it began (for its metrics).
        end: Option<(Option<Instant>, Began)>,
        call: Option<Call<C>>,
        span: Option<CallSpan>,
        make: Option<F>,
        classify: Option<C>,
        policy: &'static Policy,
        refuse: fn(Error) -> R::Error,
        describe: Describe<R::Error>,
        // Hand a failed first attempt to `retry_resumed`; else end the call
        // as `once_inner` does.
        retrying: bool,
        _verdict: PhantomData<fn() -> V>,
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
            cut: None,
            end: None,
            call: None,
            span: None,
            make: Some(make),
            classify: Some(classify),
            policy,
            refuse,
            describe,
            retrying,
            _verdict: PhantomData,
        }
    }
}

/// How the lean path ended.
pub(super) enum LeanEnd<R: ReturnsResult, C, F> {
    Done(R),
    Handover(Handover<R, C, F>),
}

/// A call for the `async` engine to go on with.
pub(super) struct Handover<R: ReturnsResult, C, F> {
    resumed: Box<Resumed<C, R::Ok, R::Error>>,
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
        if this.call.is_none() {
            let Some(classify) = this.classify.take() else {
                panic!("a `#[resilient]` call polled after it completed");
            };
            let span = this.span.insert(telemetry::span(this.policy));
            // Begun in place: the call is not moved after it is made.
            let call = match Call::begin(this.policy, span, classify, *this.refuse) {
                Ok(call) => this.call.insert(call),
                Err(error) => {
                    *this.span = None;
                    return Poll::Ready(LeanEnd::Done(R::from_result(Err(error))));
                }
            };
            // The first attempt, as `Call::attempt` runs it for a call
            // without parts: nothing to admit, no budget to earn.
            let now = call.start;
            let timeout_at = now.and_then(|start| start.checked_add(this.policy.timeout?));
            let deadline = earliest(call.deadline, timeout_at);
            let frame = Frame::attempt(&call.path, call.path.base, call.path.in_retry, deadline);
            *this.cut = Some(CutAttempt {
                function: this.policy.function,
                number: 1,
                armed: call.path.observed,
            });
            *this.end = Some((deadline, telemetry::began(now)));
            let make = this.make.as_mut().expect("made before the first attempt");
            this.body.set(Some(InFrame::new(frame, make())));
        }
        let (Some(call), Some(span)) = (this.call.as_ref(), this.span.as_ref()) else {
            unreachable!("set above");
        };
        let Some(mut body) = this.body.as_mut().as_pin_mut() else {
            panic!("a `#[resilient]` call polled after it completed");
        };
        let result = {
            #[cfg(feature = "tracing")]
            let _in_span = span.enter();
            match body.as_mut().poll(cx) {
                Poll::Ready(out) => Ok(out),
                Poll::Pending => {
                    // The timer is set only once the body has had to wait:
                    // a body ready at once never touches tokio's timer.
                    let Some(deadline) = this.end.as_ref().and_then(|end| end.0) else {
                        return Poll::Pending;
                    };
                    if this.sleep.is_none() {
                        let at = crate::context::timer_at(deadline);
                        this.sleep.set(Some(tokio::time::sleep_until(at)));
                    }
                    let timer = this.sleep.as_mut().as_pin_mut().expect("set above");
                    match timer.poll(cx) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(()) => Err(body.as_mut().cancel()),
                    }
                }
            }
        };
        // The body is over: drop it and its timer before the attempt is
        // concluded, as the `async` engine does.
        this.body.set(None);
        this.sleep.set(None);
        if let Some(mut cut) = this.cut.take() {
            cut.disarm_in_place();
        }
        let (deadline, began) = this.end.take().expect("the first attempt ends once");
        match result {
            Ok((Ok(value), frame)) => {
                // `Call::conclude` and the end of `retry_loop` for a
                // success with no parts to record it in.
                telemetry::attempt_ended(this.policy, &began, None, AttemptEnd::Success);
                call.record(1, AttemptOutcome::Succeeded, false);
                call.reach(call.path.base.max(frame.high));
                call.report_budget(frame.budget);
                let out = R::from_result(call.end(Ok(value)));
                // The call is over: it leaves the work in flight and its
                // span closes now, not whenever the future is dropped.
                *this.call = None;
                *this.span = None;
                *this.make = None;
                Poll::Ready(LeanEnd::Done(out))
            }
            result => {
                let admission = Admission::none(&NO_DEPS);
                let attempted: Attempted<R::Ok, R::Error> =
                    call.conclude(span, 1, admission, deadline, began, result);
                if !*this.retrying {
                    let out = once_end(call, span, attempted, *this.refuse, *this.describe);
                    *this.call = None;
                    *this.span = None;
                    *this.make = None;
                    return Poll::Ready(LeanEnd::Done(out));
                }
                let (Some(call), Some(span)) = (this.call.take(), this.span.take()) else {
                    unreachable!("checked above");
                };
                Poll::Ready(LeanEnd::Handover(Handover {
                    resumed: Box::new(Resumed {
                        call,
                        span,
                        attempted,
                    }),
                    refuse: *this.refuse,
                    describe: *this.describe,
                    make: this.make.take().expect("handed over once"),
                }))
            }
        }
    }
}
