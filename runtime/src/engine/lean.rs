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
//! future stays the size of one attempt).
//!
//! A call that names a breaker, budget or bulkhead takes the same path
//! when its parts are cached for the call site (the global registry) and
//! admit its first attempt at once: the admission is held in place, and
//! the success recorded in the parts as `Call::conclude` records it. A
//! first attempt that must wait for a bulkhead slot, or a call whose parts
//! come from a registry scoped around the task (not held across polls), is
//! handed over before its attempt is made; for such calls the `async`
//! future is held in place rather than boxed, so that neither allocates.
//!
//! Measured with `benches/callgrind.sh` (instructions per call, default
//! features): `retries` 603 before this shape, 414 after; `deadline_ms`
//! 651 and 521. Calls with parts, which ran in the `async` engine before:
//! the breaker case 1211 and 1100, the full stack 1518 and 1361; in CPU
//! time on an AMD EPYC, 149 and about 131 ns, 168 and about 142 ns, most
//! of it from no longer copying the call's state through the stack (on
//! that processor a copy read right after its parts were written one by
//! one stalls: `Start::begin` and `Deps::try_admit` write in place).

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};

use super::{
    Attempted, BodyEnd, Call, DepsRef, First, NO_DEPS, Policy, Resumed, Start, finish_held,
    once_end, refused,
};
use crate::__private::ReturnsResult;
use crate::Error;
use crate::classify::Verdict;
use crate::context::earliest;
use crate::deps::{Admission, Admit};
use crate::frame::{self, BudgetRef, Frame, PathStart};
use crate::outcome::Outcome;
use crate::report::{self, AttemptOutcome};
use crate::shutdown::InFlight;
use crate::telemetry::{self, AttemptEnd, CallOutcome, CallSpan, Describe};

/// Where a lean call keeps its first attempt's admission: nowhere for a
/// call without parts ([`NoParts`], so that neither its future nor its
/// `poll` carries any of it), in place for one with parts ([`Parts`]).
pub(super) trait Held {
    /// The function names a breaker, budget or bulkhead.
    const PARTS: bool;
    /// The admission's place, if the call has one.
    fn slot(&mut self) -> Option<&mut Option<Admission<'static>>>;
}

/// A call without parts admits nothing.
#[derive(Debug)]
pub(super) struct NoParts;

impl Held for NoParts {
    const PARTS: bool = false;

    #[inline(always)]
    fn slot(&mut self) -> Option<&mut Option<Admission<'static>>> {
        None
    }
}

/// The admission of a call with parts, while its first attempt runs.
#[derive(Debug)]
pub(super) struct Parts(pub(super) Option<Admission<'static>>);

impl Held for Parts {
    const PARTS: bool = true;

    #[inline(always)]
    fn slot(&mut self) -> Option<&mut Option<Admission<'static>>> {
        Some(&mut self.0)
    }
}

pin_project! {
    /// A call that may go on in the `async` engine: lean (see the module)
    /// until it is handed over, then in the engine's future `H`.
    pub(super) struct Engine<R, C, V, F, Fut, G, H, A>
    where
        R: ReturnsResult,
        A: Held,
    {
        // Goes on with a handed-over call (`retry_resumed`, `once_resumed`
        // or a boxing wrapper), as a value, so that its unnameable future
        // type can be `H`.
        general: G,
        #[pin]
        state: State<R, C, V, F, Fut, H, A>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<R, C, V, F, Fut, H, A>
    where
        R: ReturnsResult,
        A: Held,
    {
        Lean {
            #[pin]
            lean: Lean<R, C, V, F, Fut, A>,
        },
        General {
            #[pin]
            fut: H,
        },
    }
}

impl<R, C, V, F, Fut, G, H, A> Engine<R, C, V, F, Fut, G, H, A>
where
    R: ReturnsResult,
    A: Held,
{
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        policy: &'static Policy,
        classify: C,
        refuse: fn(Error) -> R::Error,
        describe: Describe<R::Error>,
        make: F,
        general: G,
        retrying: bool,
        admission: A,
    ) -> Self {
        Engine {
            general,
            state: State::Lean {
                lean: Lean::new(
                    policy, classify, refuse, describe, make, retrying, admission,
                ),
            },
        }
    }
}

impl<R, C, V, F, Fut, G, H, A> Future for Engine<R, C, V, F, Fut, G, H, A>
where
    R: ReturnsResult,
    A: Held,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<R::Ok, R::Error>>,
    C: Fn(&R::Error) -> V,
    V: Into<Verdict>,
    G: Fn(
        Resumed<C, R::Ok, R::Error>,
        fn(Error) -> R::Error,
        Describe<R::Error>,
        F,
    ) -> Handed<R, H>,
    H: Future<Output = R>,
{
    type Output = R;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<R> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Lean { lean } => match lean.poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(LeanEnd::Done(out)) => return Poll::Ready(out),
                    Poll::Ready(LeanEnd::Handover(h)) => match general(this.general, h) {
                        // Decided at once (the first attempt's failure
                        // ends the call): nothing of it is kept in a future.
                        Handed::Done(out) => return Poll::Ready(out),
                        Handed::Go(fut) => this.state.set(State::General { fut }),
                    },
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
        lean: Lean<R, C, V, F, Fut, NoParts>,
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
            lean: Lean::new(policy, classify, refuse, describe, make, false, NoParts),
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
            // A call without retries or parts ends on the lean path
            // (`once_end`).
            Poll::Ready(LeanEnd::Handover(_)) => {
                unreachable!("a call without retries or parts is never handed over")
            }
        }
    }
}

pin_project! {
    /// The first attempt of a call, shaped like a hand-written future: the
    /// attempt's body, its timer, its frame and its admission in place, and
    /// of the call only what a success needs ([`Start`]). The call's `Call`
    /// is put together only if the attempt fails (or is handed over).
    #[project = LeanProj]
    pub(super) struct Lean<R, C, V, F, Fut, A>
    where
        R: ReturnsResult,
        A: Held,
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
        // What the call's breaker, throttle and bulkhead let the attempt
        // hold (given back when dropped).
        admission: A,
        policy: &'static Policy,
        refuse: fn(Error) -> R::Error,
        describe: Describe<R::Error>,
        // Hand a failed first attempt to the retry loop; else end the call
        // as `once_end` does.
        retrying: bool,
        // The attempt's future is being made (a panic there leaves it so).
        making: bool,
        _verdict: PhantomData<fn() -> V>,
    }

    impl<R, C, V, F, Fut, A> PinnedDrop for Lean<R, C, V, F, Fut, A>
    where
        R: ReturnsResult,
        A: Held,
    {
        fn drop(this: Pin<&mut Self>) {
            // A call that ended, or never began, has nothing to give back
            // here: its fields drop as they are. Checked in line, before
            // projecting (which LLVM otherwise spells out on the stack);
            // the rest is out of line, off the success path.
            if this.making || this.body.is_some() {
                dropped_mid_attempt(this.project());
            }
        }
    }
}

/// A lean call dropped while its attempt ran (an enclosing timer, the
/// caller's `select!`), or while the attempt's future was being made: in
/// the order the `async` engine's locals drop. The body is dropped inside
/// its frame, so nested calls report how far they got, and that is passed
/// on; an observed call reports the attempt as possibly applied; the
/// admission goes back. The call and its span drop after, with the fields.
#[cold]
#[inline(never)]
fn dropped_mid_attempt<R, C, V, F, Fut, A>(this: LeanProj<'_, R, C, V, F, Fut, A>)
where
    R: ReturnsResult,
    A: Held,
{
    if *this.making
        && this
            .start
            .as_ref()
            .is_some_and(|start| start.path.observed())
    {
        report::record(this.policy.function, 1, AttemptOutcome::Cancelled, true);
    }
    if this.body.is_some() {
        let mut body = this.body;
        this.frame.enter_attempt(|| body.set(None));
        frame::forward(&this.frame.take_end());
        if this
            .start
            .as_ref()
            .is_some_and(|start| start.path.observed())
        {
            report::record(this.policy.function, 1, AttemptOutcome::Cancelled, true);
        }
        // The admission (bulkhead slot, half-open probe) goes back now,
        // before the call leaves the work in flight (its `Start`) and its
        // span closes, as the engine's does.
        if let Some(held) = this.admission.slot() {
            *held = None;
        }
        if let Some(start) = this.start.as_ref() {
            telemetry::attempt_cancelled(this.policy, &start.began);
        }
    }
    // The call's end for metrics: `cancelled`, as the engine's `Call`
    // counts one dropped before its end.
    if let Some(start) = this.start.as_ref() {
        telemetry::call_cancelled(this.policy, &start.began);
    }
}

impl<R, C, V, F, Fut, A> Lean<R, C, V, F, Fut, A>
where
    R: ReturnsResult,
    A: Held,
{
    fn new(
        policy: &'static Policy,
        classify: C,
        refuse: fn(Error) -> R::Error,
        describe: Describe<R::Error>,
        make: F,
        retrying: bool,
        admission: A,
    ) -> Self {
        Lean {
            body: None,
            sleep: None,
            frame: Frame::IDLE,
            start: None,
            span: None,
            parts: Some((classify, make)),
            admission,
            policy,
            refuse,
            describe,
            retrying,
            making: false,
            _verdict: PhantomData,
        }
    }
}

/// What the `async` engine makes of a handed-over call: its end, when the
/// first attempt's failure decides it at once, or the future that goes on
/// with it. A value taken apart at once, never kept: the end's output is
/// never held in a future across an await.
pub(super) enum Handed<R, H> {
    Done(R),
    Go(H),
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

impl<R, C, V, F, Fut, A> Future for Lean<R, C, V, F, Fut, A>
where
    R: ReturnsResult,
    A: Held,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<R::Ok, R::Error>>,
    C: Fn(&R::Error) -> V,
    V: Into<Verdict>,
{
    type Output = LeanEnd<R, C, F>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let policy = *this.policy;
        // The first attempt's frame as it is entered, on the first poll.
        let mut first = None;
        if this.start.is_none() {
            if this.parts.is_none() {
                panic!("a `#[resilient]` call polled after it completed");
            }
            let span = this.span.get_or_insert_with(|| telemetry::span(policy));
            let refuse = *this.refuse;
            let start = if A::PARTS {
                let Some(admission) = this.admission.slot() else {
                    unreachable!("a call with parts has a place for its admission");
                };
                let how = Ending {
                    retrying: *this.retrying,
                    refuse,
                    describe: *this.describe,
                };
                let path = PathStart::current();
                let (span, parts, start) = (&mut *this.span, &mut *this.parts, &mut *this.start);
                if let Some(end) =
                    begin_with_parts(policy, how, path, span, parts, start, admission)
                {
                    return Poll::Ready(end);
                }
                let Some(start) = this.start.as_ref() else {
                    unreachable!("the call has begun");
                };
                start
            } else {
                // The call's beginning without parts: nothing to
                // resolve, no clock needed for statistics, no budget to
                // report.
                let begun = Start::begin_current(policy, span, refuse, &mut *this.start);
                match begun {
                    Ok(start) => start,
                    Err(error) => {
                        *this.span = None;
                        *this.parts = None;
                        return Poll::Ready(LeanEnd::Done(R::from_result(Err(error))));
                    }
                }
            };
            // The first attempt, as `Call::attempt` runs it once admitted.
            let timeout_at = start.start.and_then(|at| at.checked_add(policy.timeout?));
            let deadline = earliest(start.deadline, timeout_at);
            let path = &start.path;
            first = Some(this.frame.start_first(path, deadline));
            let Some((_, make)) = this.parts.as_mut() else {
                unreachable!("checked above");
            };
            // Making the attempt's future (cloning the arguments) may
            // panic: marked, so that the future's drop reports the attempt
            // to an observer as possibly applied, as the engine's
            // `Call::attempt` does (a mark, not a guard with drop glue of
            // its own, which cost 5 to 8 ns a call).
            *this.making = true;
            this.body.set(Some(make()));
            *this.making = false;
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
            let poll_body = || match body.as_mut().as_pin_mut() {
                Some(body) => body.poll(cx),
                None => unreachable!("the body runs while the call has begun"),
            };
            let polled = match first {
                Some(first) => this.frame.enter_first(first, poll_body),
                None => this.frame.enter_attempt(poll_body),
            };
            match polled {
                Poll::Ready(out) => Ok(out),
                Poll::Pending => {
                    // A breaker timing the call on the coarse clock goes on
                    // with tokio's (as `Bounded` tells it).
                    if let Some(admission) = this.admission.slot().and_then(Option::as_mut) {
                        admission.waited();
                    }
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
        match result {
            Ok(Ok(value)) => {
                // `Call::conclude` and the end of the retry loop for a
                // success. The first attempt began with the call.
                match this.admission.slot() {
                    None => {
                        telemetry::attempt_ended(policy, &start.began, None, AttemptEnd::Success);
                    }
                    Some(held) => {
                        // Recorded from its place: taken out there, it was
                        // copied twice through the stack, and the second
                        // copy stalled (AMD).
                        let end = held
                            .as_ref()
                            .is_some_and(|a| a.deps().needs_clock_at_end())
                            .then(Instant::now);
                        telemetry::attempt_ended(policy, &start.began, end, AttemptEnd::Success);
                        finish_held(span, held, Outcome::Success, end);
                    }
                }
                let path = &start.path;
                if path.observed() {
                    report::record(policy.function, 1, AttemptOutcome::Succeeded, false);
                }
                if path.nested() {
                    // What the attempt's frame collected, read from its
                    // place: a success needs only these two.
                    frame::reach(path.base.max(this.frame.high()));
                    frame::report_budget(this.frame.take_budget());
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
                let deadline = this.frame.deadline();
                let end = this.frame.take_end();
                let (Some(start), Some(span), Some((classify, make))) =
                    (this.start.take(), this.span.take(), this.parts.take())
                else {
                    unreachable!("checked above");
                };
                let result = match result {
                    Ok(out) => Ok((out, end)),
                    Err(()) => Err(end),
                };
                let admission = this.admission.slot().and_then(Option::take);
                let how = Ending {
                    retrying: *this.retrying,
                    refuse: *this.refuse,
                    describe: *this.describe,
                };
                Poll::Ready(failed(
                    policy, start, span, classify, make, admission, result, deadline, how,
                ))
            }
        }
    }
}

/// The beginning of a call that names parts, and its first attempt's
/// admission (as `Call::attempt` admits later ones): the parts are found
/// (cached for the call site from the global registry), the call's budget
/// is reported to enclosing layers, the attempt admitted (its admission
/// kept in place, in `admission`) and the request counted by the budget.
/// `Some`: the call ended here, or goes on in the `async` engine. Out of
/// line, and given only the fields it needs: a call without parts carries
/// none of this in its `poll`.
#[inline(never)]
#[allow(clippy::too_many_arguments)]
fn begin_with_parts<R, C, V, F>(
    policy: &'static Policy,
    how: Ending<R::Error>,
    mut path: PathStart,
    span: &mut Option<CallSpan>,
    parts: &mut Option<(C, F)>,
    start: &mut Option<Start>,
    admission: &mut Option<Admission<'static>>,
) -> Option<LeanEnd<R, C, F>>
where
    R: ReturnsResult,
    C: Fn(&R::Error) -> V,
    V: Into<Verdict>,
{
    let refuse = how.refuse;
    let Some(call_span) = span.as_ref() else {
        unreachable!("the call's span is made first");
    };
    // The call's `Start` is made in its place (moving it costs more than
    // the rest of this function's own work), and taken out again only on
    // the paths that end the call here or hand it over.
    // Step by step rather than through `Result` combinators: the parts
    // (`DepsRef`) are then not moved through a `Result` on the stack.
    let in_flight = match Start::admit(policy, call_span, &mut path, refuse) {
        Ok(in_flight) => in_flight,
        Err(error) => return Some(ended_early(span, parts, error)),
    };
    let deps = match policy.cached_deps() {
        Some(deps) => deps,
        None => match policy.deps() {
            Ok(DepsRef::Static(deps)) => deps,
            // A registry scoped around the task: the `async` engine runs it.
            Ok(owned) => {
                return Some(begin_scoped(
                    policy, how, path, span, parts, start, in_flight, owned,
                ));
            }
            Err(error) => {
                let error = refused(policy, path, call_span, error, refuse, true, None);
                drop(in_flight);
                return Some(ended_early(span, parts, error));
            }
        },
    };
    let needs_clock = deps.needs_clock_at_start(path.cap > 1);
    if let Err(error) = Start::begin(
        policy,
        call_span,
        path,
        in_flight,
        needs_clock,
        refuse,
        start,
    ) {
        return Some(ended_early(span, parts, error));
    }
    let Some(begun) = start.as_ref() else {
        unreachable!("set above");
    };
    let at = begun.start;
    // A request earns retry budget once, and only if some layer on its
    // path may retry it.
    let earns = !begun.path.in_retry() && begun.path.cap > 1;
    // Enclosing layers ask the budget nearest the dependency before they
    // retry, whichever layer it belongs to.
    if begun.path.nested() {
        frame::report_budget(deps.budget_ref().map(BudgetRef::Static));
    }
    let admit = deps.try_admit(at, admission, call_span);
    // The call is over here, or goes on in the `async` engine.
    let mut taken = || {
        let (Some(span), Some(parts), Some(start)) = (span.take(), parts.take(), start.take())
        else {
            unreachable!("the call has begun");
        };
        (span, parts, start)
    };
    match admit {
        Admit::Ready => {}
        Admit::Refused(refusal) => {
            let (span, (classify, make), begun) = taken();
            let call = Call::resume(policy, classify, DepsRef::Static(deps), begun);
            return Some(refused_first(call, span, make, refusal, how));
        }
        Admit::Wait(breaker) => {
            let (span, parts, begun) = taken();
            let first = First::Waiting(breaker);
            let deps = DepsRef::Static(deps);
            return Some(hand_over(policy, how, begun, span, parts, deps, first));
        }
    }
    // The request goes out.
    if earns {
        deps.on_request(at);
    }
    None
}

/// [`begin_with_parts`] for a call whose parts come from a registry scoped
/// around the task: begun here, then handed over to the `async` engine
/// before its first attempt.
#[cold]
#[inline(never)]
#[allow(clippy::too_many_arguments)]
fn begin_scoped<R, C, F>(
    policy: &'static Policy,
    how: Ending<R::Error>,
    path: PathStart,
    span: &mut Option<CallSpan>,
    parts: &mut Option<(C, F)>,
    start: &mut Option<Start>,
    in_flight: Option<InFlight>,
    deps: DepsRef,
) -> LeanEnd<R, C, F>
where
    R: ReturnsResult,
{
    let Some(call_span) = span.as_ref() else {
        unreachable!("the call's span is made first");
    };
    let needs_clock = deps.needs_clock_at_start(path.cap > 1);
    let begun = Start::begin(
        policy,
        call_span,
        path,
        in_flight,
        needs_clock,
        how.refuse,
        start,
    );
    if let Err(error) = begun {
        return ended_early(span, parts, error);
    }
    let (Some(span), Some(parts), Some(begun)) = (span.take(), parts.take(), start.take()) else {
        unreachable!("the call has begun");
    };
    if begun.path.nested() {
        frame::report_budget(deps.budget());
    }
    hand_over(policy, how, begun, span, parts, deps, First::NotBegun)
}

/// A call with parts refused before its first attempt: by a graceful
/// shutdown, its parts' look-up, or a deadline already passed.
#[cold]
#[inline(never)]
fn ended_early<R: ReturnsResult, C, F>(
    span: &mut Option<CallSpan>,
    parts: &mut Option<(C, F)>,
    error: R::Error,
) -> LeanEnd<R, C, F> {
    *span = None;
    *parts = None;
    LeanEnd::Done(R::from_result(Err(error)))
}

/// Hands a begun call over to the `async` engine before its first attempt
/// is made.
#[cold]
#[inline(never)]
fn hand_over<R, C, F>(
    policy: &'static Policy,
    how: Ending<R::Error>,
    start: Start,
    span: CallSpan,
    (classify, make): (C, F),
    deps: DepsRef,
    first: First<R::Ok, R::Error>,
) -> LeanEnd<R, C, F>
where
    R: ReturnsResult,
{
    LeanEnd::Handover(Handover {
        resumed: Resumed {
            call: Call::resume(policy, classify, deps, start),
            span,
            first,
        },
        refuse: how.refuse,
        describe: how.describe,
        make,
    })
}

/// The call's parts refused its first attempt: concluded as
/// `Call::attempt` concludes a refused one.
#[cold]
#[inline(never)]
fn refused_first<R, C, V, F>(
    call: Call<C>,
    span: CallSpan,
    make: F,
    refusal: Error,
    how: Ending<R::Error>,
) -> LeanEnd<R, C, F>
where
    R: ReturnsResult,
    C: Fn(&R::Error) -> V,
    V: Into<Verdict>,
{
    let attempted = call.refused_attempt(1, refusal);
    ended(call, span, make, attempted, how)
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
    admission: Option<Admission<'static>>,
    result: BodyEnd<R::Ok, R::Error>,
    deadline: Option<Instant>,
    how: Ending<R::Error>,
) -> LeanEnd<R, C, F>
where
    R: ReturnsResult,
    C: Fn(&R::Error) -> V,
    V: Into<Verdict>,
{
    let began = start.began;
    let admission = admission.unwrap_or_else(|| Admission::none(&NO_DEPS));
    let deps = DepsRef::Static(admission.deps());
    let call = Call::resume(policy, classify, deps, start);
    let attempted: Attempted<R::Ok, R::Error> =
        call.conclude(&span, 1, admission, deadline, began, result);
    ended(call, span, make, attempted, how)
}

/// A lean call whose first attempt failed: ended here, or handed over to
/// the retry loop.
fn ended<R, C, V, F>(
    call: Call<C>,
    span: CallSpan,
    make: F,
    attempted: Attempted<R::Ok, R::Error>,
    how: Ending<R::Error>,
) -> LeanEnd<R, C, F>
where
    R: ReturnsResult,
    C: Fn(&R::Error) -> V,
    V: Into<Verdict>,
{
    if !how.retrying {
        let out = once_end(&call, &span, attempted, how.refuse, how.describe);
        // The call ends (leaving the work in flight) before its span, a
        // parameter, closes.
        drop(call);
        return LeanEnd::Done(out);
    }
    LeanEnd::Handover(Handover {
        resumed: Resumed {
            call,
            span,
            first: First::Attempted(attempted),
        },
        refuse: how.refuse,
        describe: how.describe,
        make,
    })
}

/// The `async` engine's future for a handed-over call.
#[cold]
#[inline(never)]
fn general<R, C, F, G, H>(general: &G, h: Handover<R, C, F>) -> Handed<R, H>
where
    R: ReturnsResult,
    G: Fn(
        Resumed<C, R::Ok, R::Error>,
        fn(Error) -> R::Error,
        Describe<R::Error>,
        F,
    ) -> Handed<R, H>,
{
    general(h.resumed, h.refuse, h.describe, h.make)
}

/// Polls a handed-over call: out of line, so that the lean path's `poll`
/// does not take in the whole `async` engine.
#[inline(never)]
fn poll_general<H: Future>(fut: Pin<&mut H>, cx: &mut Context<'_>) -> Poll<H::Output> {
    fut.poll(cx)
}
