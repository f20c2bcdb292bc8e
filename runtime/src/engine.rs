//! The retry engine the `#[resilient]` expansion calls: one call, its
//! deadline, its attempts, the sleeps between them, and the decision after
//! each failure.

use std::future::Future;
use std::ops::Deref;
use std::pin::Pin;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::__private::ReturnsResult;
use crate::backoff::{Backoff, DEFAULT_BASE, DEFAULT_CAP};
use crate::classify::Verdict;
use crate::context::earliest;
use crate::deps::{Admission, Admit, Deps, Names};
use crate::frame::{self, BudgetRef, Frame, FrameEnd, PathStart};
use crate::future::{Bounded, IntoResult};
use crate::outcome::Outcome;
use crate::registry::Registry;
use crate::report::{self, AttemptOutcome};
use crate::shutdown::{self, InFlight};
use crate::telemetry::{
    self, AttemptEnd, Began, CallOutcome, CallSpan, Cause, DelaySource, Describe,
};
use crate::{BreakerPermit, Classification, Delays, Error};

/// The longest `Retry-After` a call without a deadline waits for. A server
/// asking for longer ends the retry loop at once: retrying sooner than it
/// asked would disobey it, and parking a call for longer than a minute
/// (days, for a broken or hostile server) helps no caller. A call with a
/// deadline waits for any `Retry-After` that ends before its deadline.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// What one annotated function asked for, fixed at compile time.
#[derive(Debug)]
pub struct Policy {
    function: &'static str,
    retries: u32,
    deadline: Option<Duration>,
    timeout: Option<Duration>,
    backoff: Backoff,
    names: Names,
    /// A fallback answers the call's final error.
    fallback: bool,
    /// The parts from the global registry, found on the first call.
    global: OnceLock<Result<Deps, Error>>,
    /// The function's metric handles, registered on its first call.
    #[cfg(feature = "metrics")]
    metrics: OnceLock<crate::metrics::FunctionMetrics>,
}

impl Policy {
    /// The policy of a function that asked for nothing: one attempt, no deadline.
    pub const fn new(function: &'static str) -> Self {
        Policy {
            function,
            retries: 0,
            deadline: None,
            timeout: None,
            backoff: Backoff::full_jitter(DEFAULT_BASE, DEFAULT_CAP),
            names: Names::NONE,
            fallback: false,
            global: OnceLock::new(),
            #[cfg(feature = "metrics")]
            metrics: OnceLock::new(),
        }
    }

    /// `breaker = "name"`.
    pub const fn breaker(mut self, name: &'static str) -> Self {
        self.names.breaker = Some(name);
        self
    }

    /// `budget = "name"`.
    pub const fn budget(mut self, name: &'static str) -> Self {
        self.names.budget = Some(name);
        self
    }

    /// `bulkhead = "name"`.
    pub const fn bulkhead(mut self, name: &'static str) -> Self {
        self.names.bulkhead = Some(name);
        self
    }

    /// `fallback = path`: the call's final error goes to a fallback, so
    /// enclosing layers are not told of its give-up: they judge the call by
    /// what the fallback returns. They are told of its attempts, which did
    /// reach the dependency whatever the fallback answers.
    pub const fn fallback(mut self) -> Self {
        self.fallback = true;
        self
    }

    /// The function's path, for telemetry.
    pub const fn function(&self) -> &'static str {
        self.function
    }

    /// Does a fallback answer the call's final error?
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub(crate) const fn has_fallback(&self) -> bool {
        self.fallback
    }

    /// The names of the breaker, budget and bulkhead, for telemetry.
    #[cfg_attr(not(any(feature = "metrics", feature = "tracing")), allow(dead_code))]
    pub(crate) const fn names(&self) -> Names {
        self.names
    }

    /// The function's metric handles.
    #[cfg(feature = "metrics")]
    pub(crate) fn metrics(&'static self) -> &'static crate::metrics::FunctionMetrics {
        self.metrics
            .get_or_init(|| crate::metrics::FunctionMetrics::new(self.function))
    }

    /// `retries = n`.
    pub const fn retries(mut self, n: u32) -> Self {
        self.retries = n;
        self
    }

    /// `deadline_ms = n`.
    pub const fn deadline_ms(mut self, ms: u64) -> Self {
        self.deadline = Some(Duration::from_millis(ms));
        self
    }

    /// `timeout_ms = n`.
    pub const fn timeout_ms(mut self, ms: u64) -> Self {
        self.timeout = Some(Duration::from_millis(ms));
        self
    }

    /// `backoff`, `base_ms`, `cap_ms`.
    pub const fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// The parts cached for this call site from the global registry, when
    /// no registry was ever scoped around a task (so none is around this
    /// one): the success path's case, with nothing to move or drop. `None`
    /// asks [`deps`](Self::deps), which decides every other case.
    #[inline(always)]
    fn cached_deps(&'static self) -> Option<&'static Deps> {
        if !Registry::never_scoped() {
            return None;
        }
        match self.global.get() {
            Some(Ok(deps)) => Some(deps),
            _ => None,
        }
    }

    /// The named parts this call goes through. From the global registry
    /// they are found once per call site and cached, so the success path
    /// does no lookup; a registry scoped around the task (tests) is
    /// searched on every call.
    #[inline(always)]
    fn deps(&'static self) -> Result<DepsRef, Error> {
        if self.names.is_empty() {
            return Ok(DepsRef::Static(&NO_DEPS));
        }
        if let Some(registry) = Registry::scoped() {
            return Deps::resolve(&registry, self.names).map(DepsRef::Owned);
        }
        match self
            .global
            .get_or_init(|| Deps::resolve(Registry::global(), self.names))
        {
            Ok(deps) => Ok(DepsRef::Static(deps)),
            Err(e) => Err(e.clone()),
        }
    }
}

/// The parts of a call that names none.
static NO_DEPS: Deps = Deps::NONE;

/// The parts of one call: cached for the call site, or resolved for it.
enum DepsRef {
    Static(&'static Deps),
    Owned(Deps),
}

impl DepsRef {
    /// The call's retry budget, to report to enclosing layers.
    fn budget(&self) -> Option<BudgetRef> {
        match self {
            DepsRef::Static(d) => d.budget().map(|b| BudgetRef::Static(b)),
            DepsRef::Owned(d) => d.budget().map(|b| BudgetRef::Shared(b.clone())),
        }
    }
}

impl Deref for DepsRef {
    type Target = Deps;

    fn deref(&self) -> &Deps {
        match self {
            DepsRef::Static(d) => d,
            DepsRef::Owned(d) => d,
        }
    }
}

/// Why one attempt did not return `Ok`.
enum Failure<E> {
    /// The function returned an error, so classified.
    Failed(E, Verdict),
    /// The per-attempt timeout passed while the body ran.
    TimedOut(Duration),
    /// The call's deadline passed while the body ran.
    Deadline,
    /// A breaker, throttle or bulkhead refused the attempt: it did not run.
    Refused(Error),
}

/// One finished attempt: its result and what its frame collected (nothing
/// for an attempt refused before it ran).
struct Attempted<T, E> {
    result: Result<T, Failure<E>>,
    frame: Option<FrameEnd>,
}

/// A call handed over by the lean path, with how far its first attempt got.
struct Resumed<C, T, E> {
    call: Call<C>,
    span: CallSpan,
    first: First<T, E>,
}

/// How far the lean path took a handed-over call's first attempt.
enum First<T, E> {
    /// Made, and failed (or was refused): the engine decides what follows.
    Attempted(Attempted<T, E>),
    /// Through the breaker (holding its permit, for this attempt only) and
    /// the throttle; waits for a bulkhead slot.
    Waiting(Option<BreakerPermit<'static>>),
    /// Not begun: the call's parts come from a registry scoped around the
    /// task, which the lean path does not hold across polls.
    NotBegun,
}

/// How an attempt's body ended: its output and what its frame collected,
/// or (`Err`) only the latter, when its deadline cut it.
type BodyEnd<T, E> = Result<(Result<T, E>, FrameEnd), FrameEnd>;

/// What a failed attempt means for the call.
enum Settled<E> {
    /// Another attempt may succeed.
    Retryable(E, Classification),
    /// The call's final error.
    Final(E),
}

/// One call in progress: what every attempt of it shares.
struct Call<C> {
    policy: &'static Policy,
    classify: C,
    deps: DepsRef,
    deadline: Option<Instant>,
    /// Is `deadline` this layer's own `deadline_ms`, not an inherited one?
    own_deadline: bool,
    /// Does an attempt need to know when it started and ended?
    clocked: bool,
    /// When the call began, if the clock was read.
    start: Option<Instant>,
    /// Where the call stands on its path of nested calls.
    path: PathStart,
    /// Counts the call in flight while a graceful shutdown may wait for it.
    _in_flight: Option<InFlight>,
    /// When the call began, for its duration metric (nothing without the
    /// `metrics` feature).
    began: Began,
    /// The call ended ([`Call::end`]); dropped before, it was cancelled.
    ended: AtomicBool,
}

impl<C> Drop for Call<C> {
    fn drop(&mut self) {
        if !*self.ended.get_mut() {
            telemetry::call_cancelled(self.policy, &self.began);
        }
    }
}

/// What a call knows once it has begun, apart from its classifier and its
/// parts: all a lean call ([`lean`]) keeps until its first attempt fails.
///
/// `repr(C)`, the path first: a `Start` was once built aside and copied
/// into its place in 16-byte pieces, and with the compiler's layout the
/// path, itself copied in 16-byte pieces, lay 4 bytes into the `Start`, so
/// each piece of the second copy spanned two stores of the first; on AMD
/// processors such a load waits for the stores to retire (a quarter of
/// `begin_with_parts`'s samples in `perf`). [`Start::write`] now writes it
/// in place; the path stays first, where the pieces of any copy line up.
#[repr(C)]
struct Start {
    path: PathStart,
    deadline: Option<Instant>,
    start: Option<Instant>,
    in_flight: Option<InFlight>,
    own_deadline: bool,
    clocked: bool,
    began: Began,
}

impl Start {
    /// Admits a call on `path` (where it stands) by a graceful shutdown,
    /// and raises the path's cap to this call's attempts.
    #[inline(always)]
    fn admit<E>(
        policy: &'static Policy,
        span: &CallSpan,
        path: &mut PathStart,
        refuse: fn(Error) -> E,
    ) -> Result<Option<InFlight>, E> {
        // A call nested in an admitted one is part of the work in flight: a
        // draining shutdown admits it.
        let in_flight = match shutdown::admit(path.in_call()) {
            Ok(in_flight) => in_flight,
            Err(error) => return Err(refused(policy, *path, span, error, refuse, true, None)),
        };
        path.cap = path.cap.max(policy.retries.saturating_add(1));
        Ok(in_flight)
    }

    /// Fixes the call's deadline, and refuses a call whose deadline has
    /// already passed. `needs_clock`: a part of the call keeps time-based
    /// statistics. The `Start` is written in its place, `into`: a `Start`
    /// returned and moved there is copied through the stack, and on some
    /// processors (AMD's) a copy read right after its parts were written
    /// one by one stalls the load.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn begin<'s, E>(
        policy: &'static Policy,
        span: &CallSpan,
        path: PathStart,
        in_flight: Option<InFlight>,
        needs_clock: bool,
        refuse: fn(Error) -> E,
        into: &'s mut Option<Start>,
    ) -> Result<&'s Start, E> {
        let times = Times::of(policy, path.deadline, needs_clock);
        if times.passed() {
            return Err(times.refuse(policy, path, span, refuse));
        }
        telemetry::entered(span, times.at, times.deadline);
        if into.is_some() {
            unreachable!("a call begins once");
        }
        Ok(Start::write(into, times, path, in_flight))
    }

    /// Writes the `Start` of a call begun at `times` on `path` in its
    /// place, which the caller has found empty (a call begins once): known
    /// so, the `Start` is written straight there, with no old value to drop
    /// first (`insert` built it aside to drop the old one, and copied it
    /// in).
    #[inline(always)]
    fn write(
        into: &mut Option<Start>,
        times: Times,
        path: PathStart,
        in_flight: Option<InFlight>,
    ) -> &Start {
        *into = Some(Start {
            deadline: times.deadline,
            own_deadline: times.own_deadline,
            clocked: times.clocked,
            start: times.at,
            path,
            in_flight,
            began: telemetry::began(times.at),
        });
        match into {
            Some(start) => start,
            None => unreachable!("written above"),
        }
    }

    /// [`admit`](Start::admit) and [`begin`](Start::begin) for a call
    /// without parts, on the path of the current frame, read here: the
    /// path goes from the frame's thread-locals straight into the `Start`'s
    /// place. Read first into a local, as `admit` takes it, it was spilled
    /// to the stack around the calls between (a counted shutdown, the
    /// clock) and copied into its place in 16-byte pieces, each over
    /// narrower stores just made, which on AMD processors cannot be
    /// forwarded and wait for the stores to retire (about a third of the
    /// `retries` case's samples in `perf`). A refusal reads the path again
    /// (the frame has not changed).
    #[inline(always)]
    fn begin_current<'s, E>(
        policy: &'static Policy,
        span: &CallSpan,
        refuse: fn(Error) -> E,
        into: &'s mut Option<Start>,
    ) -> Result<&'s Start, E> {
        let in_flight = match shutdown::admit(frame::in_call()) {
            Ok(in_flight) => in_flight,
            Err(error) => return Err(refused_current(policy, span, error, refuse)),
        };
        let times = Times::of(policy, frame::deadline(), false);
        if times.passed() {
            return Err(times.refuse_current(policy, span, refuse));
        }
        telemetry::entered(span, times.at, times.deadline);
        if into.is_some() {
            unreachable!("a call begins once");
        }
        let mut path = PathStart::current();
        path.cap = path.cap.max(policy.retries.saturating_add(1));
        Ok(Start::write(into, times, path, in_flight))
    }
}

/// [`refused`] on the current frame's path, by a graceful shutdown: the
/// refusal is final for the task.
#[cold]
fn refused_current<E>(
    policy: &'static Policy,
    span: &CallSpan,
    error: Error,
    refuse: fn(Error) -> E,
) -> E {
    refused(
        policy,
        PathStart::current(),
        span,
        error,
        refuse,
        true,
        None,
    )
}

/// When a call began and when it must end.
#[derive(Clone, Copy)]
struct Times {
    /// Does an attempt need to know when it started and ended?
    clocked: bool,
    /// When the call began, if the clock was read.
    at: Option<Instant>,
    /// The call's deadline: its own or the one it inherited, the earlier.
    deadline: Option<Instant>,
    /// Is `deadline` this layer's own `deadline_ms`, not an inherited one?
    own_deadline: bool,
}

impl Times {
    /// The times of a call that inherited `inherited`. `needs_clock`: a
    /// part of the call keeps time-based statistics.
    #[inline(always)]
    fn of(policy: &Policy, inherited: Option<Instant>, needs_clock: bool) -> Times {
        // The clock is read only when something needs the time: a deadline
        // or timeout, or a part that keeps time-based statistics. This one
        // read also serves as the first attempt's start.
        let clocked = inherited.is_some()
            || policy.deadline.is_some()
            || policy.timeout.is_some()
            || needs_clock;
        let at = clocked.then(Instant::now);
        let own = match (policy.deadline, at) {
            (Some(d), Some(at)) => at.checked_add(d),
            _ => None,
        };
        let deadline = earliest(inherited, own);
        Times {
            clocked,
            at,
            deadline,
            // Only a deadline this layer set is this layer's to give up on;
            // an inherited one is the enclosing attempt's timer.
            own_deadline: own.is_some() && own == deadline && own != inherited,
        }
    }

    /// Had the deadline passed when the call began?
    #[inline(always)]
    fn passed(&self) -> bool {
        matches!((self.deadline, self.at), (Some(deadline), Some(at)) if at >= deadline)
    }

    /// [`refuse`](Times::refuse) on the current frame's path.
    #[cold]
    fn refuse_current<E>(
        self,
        policy: &'static Policy,
        span: &CallSpan,
        refuse: fn(Error) -> E,
    ) -> E {
        self.refuse(policy, PathStart::current(), span, refuse)
    }

    /// The refusal of a call whose deadline had passed when it began: so
    /// it does no work.
    #[cold]
    fn refuse<E>(
        self,
        policy: &'static Policy,
        path: PathStart,
        span: &CallSpan,
        refuse: fn(Error) -> E,
    ) -> E {
        let error = Error::deadline_exceeded();
        let own = self.own_deadline;
        let inherited = if own { None } else { self.deadline };
        refused(policy, path, span, error, refuse, own, inherited)
    }
}

impl<C> Call<C> {
    /// The call begun as `start` says, with its classifier and parts.
    #[inline(always)]
    fn resume(policy: &'static Policy, classify: C, deps: DepsRef, start: Start) -> Self {
        let Start {
            deadline,
            own_deadline,
            clocked,
            start,
            path,
            in_flight,
            began,
        } = start;
        Call {
            policy,
            classify,
            deps,
            deadline,
            own_deadline,
            clocked,
            start,
            path,
            began,
            _in_flight: in_flight,
            ended: AtomicBool::new(false),
        }
    }

    /// Runs one attempt under the breaker, throttle and bulkhead, with its
    /// timeout, in its own frame, and records its outcome.
    ///
    /// Takes a function that makes the body's future rather than the future
    /// itself: a future passed by value into an `async fn` is stored twice
    /// in its state, and nested layers would multiply that.
    /// `started`: the attempt's start, when already read (the first one's
    /// is the call's). `base`: the path's position before this attempt.
    /// `waiting`: the lean path's first attempt, through the breaker (its
    /// permit) and the throttle, waiting for a bulkhead slot. `grants`: a
    /// retry's budget grants, spent once the attempt is admitted (given
    /// back, dropped, if it is refused).
    #[allow(clippy::too_many_arguments)]
    async fn attempt<T, E, V, Fut>(
        &self,
        span: &CallSpan,
        number: u32,
        base: u32,
        started: Option<Instant>,
        waiting: Option<Option<BreakerPermit<'static>>>,
        grants: Option<Grants>,
        make: impl FnOnce() -> Fut,
    ) -> Attempted<T, E>
    where
        Fut: Future<Output = Result<T, E>>,
        C: Fn(&E) -> V,
        V: Into<Verdict>,
    {
        let now = started.or_else(|| self.clocked.then(Instant::now));
        // Most attempts are admitted at once; only a wait for a bulkhead
        // slot needs the asynchronous path.
        let mut ready = None;
        let admit = match waiting {
            Some(breaker) => Admit::Wait(breaker),
            None => self.deps.try_admit(now, &mut ready, span),
        };
        let admitted = match (admit, ready) {
            (Admit::Ready, Some(admission)) => Ok((admission, now)),
            (Admit::Ready, None) => unreachable!("an admission ready at once is in its place"),
            (Admit::Refused(refusal), _) => Err(refusal),
            (Admit::Wait(breaker), _) => {
                let wait = self.deps.wait_for_slot(breaker, now, self.deadline);
                telemetry::waiting(self.policy, wait).await
            }
        };
        // Admitted or refused, a retry is made (and counted, as its attempt
        // is); one dropped before this point is not.
        if number > 1 {
            telemetry::retry_made(self.policy);
        }
        // A retry refused here never went out: its budgets' grants go back
        // (dropped). Admitted, it goes out, and spends them.
        let (mut admission, body_start) = match admitted {
            Ok(admitted) => admitted,
            Err(refusal) => return self.refused_attempt(number, refusal),
        };
        if let Some(grants) = grants {
            grants.spend();
        }
        // A request earns retry budget once, when it really goes out: not
        // when refused locally, not again when an enclosing layer retries
        // it, and not at all when no layer on its path can retry (the
        // budget only ever pays for retries of requests that may have one).
        if number == 1 && !self.path.in_retry() && self.path.cap > 1 {
            self.deps.on_request(body_start.or(now));
        }
        // The attempt's timeout runs from when its body starts, after any
        // wait for a bulkhead slot.
        let timeout_at = body_start.and_then(|start| start.checked_add(self.policy.timeout?));
        let attempt_deadline = earliest(self.deadline, timeout_at);
        // Nested annotated calls inherit the attempt's deadline, so none
        // of them plans a retry the attempt cannot wait for.
        let frame = Frame::attempt(
            &self.path,
            base,
            self.path.in_retry() || number > 1,
            attempt_deadline,
        );
        let attempt_began = telemetry::began(body_start.or(now));
        // An attempt dropped while it runs (the caller's own timeout, a
        // `select!` that chose another branch) may have reached the
        // dependency: an observed call reports it so.
        let cut = CutAttempt {
            policy: self.policy,
            number,
            observed: self.path.observed(),
            began: attempt_began,
        };
        let result = Bounded::new(attempt_deadline, frame, span, &mut admission, make()).await;
        cut.disarm();
        self.conclude(
            span,
            number,
            admission,
            attempt_deadline,
            attempt_began,
            result,
        )
    }

    /// An attempt the breaker, throttle or bulkhead refused: it did not
    /// run, and nothing of it reached the dependency.
    fn refused_attempt<T, E>(&self, number: u32, refusal: Error) -> Attempted<T, E> {
        telemetry::attempt_refused(self.policy);
        self.record(number, AttemptOutcome::Refused(refusal.kind()), false);
        Attempted {
            result: Err(Failure::Refused(refusal)),
            frame: None,
        }
    }

    /// Records how an attempt's body ended (or that its deadline cut it,
    /// `Err`) in the breaker, throttle and budget, telemetry and the report.
    /// `attempt_deadline`: the attempt's own (the call's, or its timeout's
    /// if sooner).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn conclude<T, E, V>(
        &self,
        span: &CallSpan,
        number: u32,
        admission: Admission<'_>,
        attempt_deadline: Option<Instant>,
        attempt_began: Began,
        result: BodyEnd<T, E>,
    ) -> Attempted<T, E>
    where
        C: Fn(&E) -> V,
        V: Into<Verdict>,
    {
        // The end time feeds breakers (slow calls) and windows; without
        // them, save the clock read (a breaker that times calls on the
        // coarse clock reads tokio's itself if its body waited).
        let end = self.deps.needs_clock_at_end().then(Instant::now);
        let (result, frame_end) = match result {
            Ok((Ok(value), frame_end)) => {
                telemetry::attempt_ended(self.policy, &attempt_began, end, AttemptEnd::Success);
                finish_in(span, admission, Outcome::Success, end);
                self.record(number, AttemptOutcome::Succeeded, false);
                (Ok(value), frame_end)
            }
            Ok((Err(error), frame_end)) => {
                // A classifier that panics unwinds the call: the attempt
                // that ran is counted as cancelled with it, as one cut
                // while it ran.
                let cut = CutAttempt {
                    policy: self.policy,
                    number,
                    observed: self.path.observed(),
                    began: attempt_began,
                };
                let verdict: Verdict = (self.classify)(&error).into();
                cut.disarm();
                // A nested annotated call ended on this attempt's deadline,
                // which it inherited, a moment before this layer's own timer
                // fired, and the body passed its refusal on: it is this
                // layer's timeout (or deadline). Any other error is the
                // function's own, whenever it came: an error returned at its
                // timeout's instant is still that error.
                if frame_end.timer_refused && verdict.is_refusal != Some(false) {
                    telemetry::attempt_ended(self.policy, &attempt_began, end, AttemptEnd::Timeout);
                    finish_in(span, admission, Outcome::Failure { retry_after: None }, end);
                    return Attempted {
                        result: Err(self.elapsed(number, attempt_deadline)),
                        frame: Some(frame_end),
                    };
                }
                telemetry::attempt_ended(self.policy, &attempt_began, end, AttemptEnd::Failure);
                finish_in(span, admission, Outcome::of_failure(verdict.class), end);
                self.record(
                    number,
                    AttemptOutcome::Failed(verdict.class),
                    verdict.may_have_taken_effect,
                );
                (Err(Failure::Failed(error, verdict)), frame_end)
            }
            Err(frame_end) => {
                telemetry::attempt_ended(self.policy, &attempt_began, end, AttemptEnd::Timeout);
                finish_in(span, admission, Outcome::Failure { retry_after: None }, end);
                (Err(self.elapsed(number, attempt_deadline)), frame_end)
            }
        };
        Attempted {
            result,
            frame: Some(frame_end),
        }
    }

    /// The failure of an attempt whose deadline passed while it ran: the
    /// request may have reached the dependency.
    fn elapsed<E>(&self, number: u32, attempt_deadline: Option<Instant>) -> Failure<E> {
        self.record(number, AttemptOutcome::TimedOut, true);
        if attempt_deadline == self.deadline {
            Failure::Deadline
        } else {
            Failure::TimedOut(self.policy.timeout.unwrap_or_default())
        }
    }

    /// What a failed attempt means for the call: a failure another attempt
    /// may fix, or the call's final error. Refusals and a passed deadline of
    /// this layer's own are also final for every enclosing layer.
    fn settle<E>(&self, failure: Failure<E>, refuse: fn(Error) -> E) -> Settled<E> {
        match failure {
            Failure::Failed(error, verdict) if verdict.class.is_retryable() => {
                Settled::Retryable(error, verdict.class)
            }
            // The dependency said not to retry (it already did, or cannot
            // serve now), or failed while processing (a 500): final for
            // every enclosing layer too, as a nested
            // give-up is, also one that classifies its own error transient,
            // and for the caller of this service (`ResilienceLayer`).
            Failure::Failed(error, verdict)
                if matches!(verdict.class, Classification::DoNotRetry { .. }) =>
            {
                Settled::Final(self.give_up(error))
            }
            Failure::Failed(error, _) => Settled::Final(error),
            Failure::TimedOut(after) => Settled::Retryable(
                refuse(Error::attempt_timed_out(after)),
                Classification::Transient,
            ),
            Failure::Deadline => {
                let error = refuse(Error::deadline_cut());
                Settled::Final(if self.own_deadline {
                    self.give_up(error)
                } else {
                    // The enclosing attempt's timer: that layer handles it.
                    if self.path.nested() {
                        frame::report_deadline(self.deadline);
                    }
                    error
                })
            }
            Failure::Refused(refusal) => Settled::Final(self.give_up(refuse(refusal))),
        }
    }

    /// Tells enclosing layers that this call stopped on a failure they must
    /// not retry (unless a fallback answers it).
    fn give_up<E>(&self, error: E) -> E {
        if !self.policy.fallback {
            if self.path.nested() {
                frame::report_give_up();
            }
            if self.path.observed() {
                report::record_give_up();
            }
        }
        error
    }

    /// Tells the enclosing attempt how far this call got on its path. Also
    /// from a call with a fallback: the attempts reached the dependency,
    /// whatever the fallback answers.
    fn reach(&self, position: u32) {
        if self.path.nested() {
            frame::reach(position);
        }
    }

    /// Tells the enclosing attempt the budget nearest the dependency.
    fn report_budget(&self, budget: Option<&BudgetRef>) {
        if self.path.nested() {
            frame::report_budget(budget.cloned());
        }
    }

    /// Tells the enclosing attempt that this call failed, and the budget
    /// nearest the dependency that failed: `nested`, the one below its last
    /// attempt, else its own. The enclosing layer's retry asks that budget,
    /// not one a sibling that succeeded reported. A call with a fallback
    /// has not failed its caller yet: its budget is held for the
    /// expansion, which reports it once the fallback has answered
    /// (`__private::fallback_ended`).
    fn report_failed_budget(&self, nested: Option<BudgetRef>) {
        let budget = if self.path.nested() {
            nested.or_else(|| self.deps.budget())
        } else {
            None
        };
        if self.policy.fallback {
            frame::hold_for_fallback(budget);
        } else {
            frame::report_failed_budget(budget);
        }
    }

    /// Records an attempt in the report, when the call is observed.
    fn record(&self, number: u32, outcome: AttemptOutcome, may_have_taken_effect: bool) {
        if self.path.observed() {
            report::record(self.policy.function, number, outcome, may_have_taken_effect);
        }
    }
}

impl<E> Failure<E> {
    /// What telemetry says of this failure.
    fn cause(&self) -> Cause {
        match self {
            Failure::Failed(_, verdict) => Cause::Error(verdict.class),
            Failure::TimedOut(after) => Cause::TimedOut(*after),
            Failure::Deadline => Cause::Deadline,
            Failure::Refused(refusal) => Cause::Refused(refusal.clone()),
        }
    }
}

impl<C> Call<C> {
    /// Records how the call ended and hands its result on.
    fn end<T, E>(&self, result: Result<T, (E, CallOutcome)>) -> Result<T, E> {
        self.ended.store(true, Ordering::Relaxed);
        match result {
            Ok(value) => {
                telemetry::call_ended(self.policy, &self.began, CallOutcome::Success);
                Ok(value)
            }
            Err((error, outcome)) => {
                // The expansion answers every error of such a call with
                // its fallback, and counts the call once it has answered
                // (`__private::fallback_ended`).
                if !self.policy.fallback {
                    telemetry::call_ended(self.policy, &self.began, outcome);
                }
                Err(error)
            }
        }
    }

    /// Traces a failure that ends the call without a decision of this
    /// layer's retry loop: not retryable, refused, or a deadline.
    fn trace_final<E>(
        &self,
        span: &CallSpan,
        number: u32,
        cause: &Cause,
        error: &E,
        describe: Describe<E>,
    ) {
        match cause {
            Cause::Deadline if self.own_deadline => telemetry::gave_up(
                self.policy,
                span,
                number,
                cause,
                error,
                describe,
                "the call's deadline passed",
            ),
            Cause::Deadline => telemetry::failed(
                self.policy,
                span,
                number,
                cause,
                error,
                describe,
                "the enclosing attempt's deadline passed",
            ),
            Cause::Refused(_) => {
                telemetry::failed(self.policy, span, number, cause, error, describe, "refused")
            }
            // A give-up (`settle`), logged as the retry loop logs its own.
            Cause::Error(Classification::DoNotRetry { .. }) => telemetry::gave_up(
                self.policy,
                span,
                number,
                cause,
                error,
                describe,
                "the dependency failed and is not to be retried",
            ),
            _ => telemetry::failed(
                self.policy,
                span,
                number,
                cause,
                error,
                describe,
                "not retryable",
            ),
        }
    }
}

/// [`record_in`] for an admission the caller owns, dropped (its permits
/// given back) once recorded.
#[inline]
fn finish_in(
    span: &CallSpan,
    mut admission: Admission<'_>,
    outcome: Outcome,
    end: Option<Instant>,
) {
    record_in(span, &mut admission, outcome, end);
}

/// Records an attempt's outcome in the admission's parts, where the
/// admission lies (its drop gives the permits back). A breaker transition
/// it causes is logged inside the call's span, which is entered only then
/// (entering it for every record cost 9 to 12 instructions a call).
#[inline]
fn record_in(
    span: &CallSpan,
    admission: &mut Admission<'_>,
    outcome: Outcome,
    end: Option<Instant>,
) {
    // Without a breaker, throttle or budget there is nothing to record:
    // the admission only gives back its permits.
    if !admission.records() {
        return;
    }
    admission.finish(outcome, end, span);
}

/// [`finish_in`] for an admission held in its place (the lean path's):
/// recorded there and dropped there, not moved out (its parts were
/// written one by one in this poll, and on AMD processors a whole copy
/// read back so soon stalls).
#[inline]
fn finish_held(
    span: &CallSpan,
    held: &mut Option<Admission<'_>>,
    outcome: Outcome,
    end: Option<Instant>,
) {
    if let Some(admission) = held.as_mut() {
        record_in(span, admission, outcome, end);
    }
    *held = None;
}

/// Records an attempt dropped while it ran: in metrics, and for
/// [`observe`](crate::observe).
struct CutAttempt {
    policy: &'static Policy,
    number: u32,
    observed: bool,
    began: Began,
}

impl CutAttempt {
    /// The attempt ended: nothing to record here.
    fn disarm(self) {
        std::mem::forget(self);
    }
}

impl Drop for CutAttempt {
    fn drop(&mut self) {
        telemetry::attempt_cancelled(self.policy, &self.began);
        if self.observed {
            report::record(
                self.policy.function,
                self.number,
                AttemptOutcome::Cancelled,
                true,
            );
        }
    }
}

/// A call refused before its first attempt ran.
#[cold]
fn refused<E>(
    policy: &'static Policy,
    path: PathStart,
    span: &CallSpan,
    error: Error,
    refuse: fn(Error) -> E,
    final_for_task: bool,
    inherited_deadline: Option<Instant>,
) -> E {
    if path.observed() {
        report::record(
            policy.function,
            1,
            AttemptOutcome::Refused(error.kind()),
            false,
        );
    }
    telemetry::refused_before_start(policy, span, &error);
    if inherited_deadline.is_some() {
        if path.nested() {
            frame::report_deadline(inherited_deadline);
        }
    } else if final_for_task && !policy.fallback {
        if path.nested() {
            frame::report_give_up();
        }
        if path.observed() {
            report::record_give_up();
        }
    }
    if policy.fallback {
        // Its fallback is about to answer, with no budget of this call to
        // report: whatever an earlier call left held (it panicked between
        // holding and handing over) must not be taken for this one's.
        frame::hold_for_fallback(None);
    }
    refuse(error)
}

/// Runs an annotated function's body once: the expansion of a function
/// without `retries` that names no breaker, budget or bulkhead. Its
/// deadline and timeout apply; its attempt runs on the lean path (the
/// `lean` module).
///
/// Generic over the return type `R` rather than `Result<T, E>`, with the
/// same bounds the expansion checks at the user's return type, so a
/// function returning something else gets exactly one error, there.
///
/// A plain function returning a future, not an `async fn` around it: each
/// layer of futures nests in the type of every enclosing annotated call's
/// future, and deep nesting of calls meets the compiler's recursion limit
/// when it proves the future `Send`.
///
/// `describe` shows the function's error in telemetry: `Some` when the
/// error type is `Display`, found by the expansion where the type is known.
pub fn once_lean<R, C, V, M, Fut>(
    policy: &'static Policy,
    classify: C,
    refuse: fn(Error) -> R::Error,
    describe: Describe<R::Error>,
    make: M,
) -> impl Future<Output = R>
where
    M: FnOnce() -> Fut,
    Fut: Future<Output = R>,
    R: ReturnsResult,
    C: Fn(&R::Error) -> V,
    V: Into<Verdict>,
{
    OnceLean::new(policy, classify, refuse, describe, once(make))
}

/// The maker of a call without retries' one attempt, for the lean path,
/// which asks for attempts as a retry loop does: it asks once, and ends a
/// failed attempt in place (`once_end`) or hands the call over before it
/// asked (`once_resumed`), never asking again.
fn once<M, Fut>(make: M) -> impl FnMut() -> IntoResult<Fut>
where
    M: FnOnce() -> Fut,
{
    let mut make = Some(make);
    move || {
        let make = make
            .take()
            .expect("a call without retries makes one attempt");
        IntoResult::new(make())
    }
}

/// A call without retries handed over by the lean path before its attempt
/// was made ([`First::Waiting`], [`First::NotBegun`]): it goes on exactly
/// as a call the lean path began. (A first attempt the lean path made ends
/// there, in [`once_end`].)
fn once_resumed<R, C, V, F, Fut>(
    resumed: Resumed<C, R::Ok, R::Error>,
    refuse: fn(Error) -> R::Error,
    describe: Describe<R::Error>,
    make: F,
) -> Handed<R, impl Future<Output = R>>
where
    R: ReturnsResult,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<R::Ok, R::Error>>,
    C: Fn(&R::Error) -> V,
    V: Into<Verdict>,
{
    // Taken apart whole: the future below holds nothing of a first
    // attempt's output or error (see `Progress`).
    let Resumed { call, span, first } = resumed;
    let waiting = match first {
        First::Attempted(attempted) => {
            let out = once_end(&call, &span, attempted, refuse, describe);
            close(span, call);
            return Handed::Done(out);
        }
        First::Waiting(breaker) => Some(breaker),
        First::NotBegun => None,
    };
    Handed::Go(once_waiting::<R, C, V, F, Fut>(
        span, call, waiting, refuse, describe, make,
    ))
}

/// [`once_resumed`]'s attempt, made here. The span comes before the
/// call: parameters are dropped last first, so the call ends (leaving the
/// work in flight) before its span closes, also when this is dropped.
async fn once_waiting<R, C, V, F, Fut>(
    span: CallSpan,
    call: Call<C>,
    waiting: Option<Option<BreakerPermit<'static>>>,
    refuse: fn(Error) -> R::Error,
    describe: Describe<R::Error>,
    make: F,
) -> R
where
    R: ReturnsResult,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<R::Ok, R::Error>>,
    C: Fn(&R::Error) -> V,
    V: Into<Verdict>,
{
    let attempted = call
        .attempt(&span, 1, call.path.base, call.start, waiting, None, make)
        .await;
    once_end(&call, &span, attempted, refuse, describe)
}

/// How a call without retries ends after its one attempt. These are the
/// retry loop's decisions (`retry_resumed`) for `retries = 0`, kept
/// apart on purpose: a call without retries run through the retry loop
/// (its backoff iterator, its larger state) measured about 65 instructions
/// more per call on the success path (`benches/callgrind.sh`).
#[inline(always)]
fn once_end<R, C, V>(
    call: &Call<C>,
    span: &CallSpan,
    attempted: Attempted<R::Ok, R::Error>,
    refuse: fn(Error) -> R::Error,
    describe: Describe<R::Error>,
) -> R
where
    R: ReturnsResult,
    C: Fn(&R::Error) -> V,
    V: Into<Verdict>,
{
    let policy = call.policy;
    let mut attempted = attempted;
    let nested = attempted.frame.as_mut().and_then(|f| f.budget.take());
    if let Some(frame) = &attempted.frame {
        call.reach(frame.high);
        call.report_budget(nested.as_ref());
    }
    let result = match attempted.result {
        Ok(value) => Ok(value),
        Err(failure) => {
            let cause = failure.cause();
            let outcome = cause.outcome();
            match call.settle(failure, refuse) {
                // Not retried here, so an enclosing layer may still retry it;
                // a nested give-up, though, stays final for it too.
                Settled::Retryable(error, _) => match attempted.frame {
                    Some(frame) if frame.gave_up > 0 => {
                        telemetry::gave_up(
                            policy,
                            span,
                            1,
                            &cause,
                            &error,
                            describe,
                            "a nested call gave up",
                        );
                        Err((call.give_up(error), outcome))
                    }
                    _ => {
                        telemetry::failed(
                            policy,
                            span,
                            1,
                            &cause,
                            &error,
                            describe,
                            "no retries here",
                        );
                        Err((error, outcome))
                    }
                },
                Settled::Final(error) => {
                    call.trace_final(span, 1, &cause, &error, describe);
                    Err((error, outcome))
                }
            }
        }
    };
    if result.is_err() {
        call.report_failed_budget(nested);
    }
    R::from_result(call.end(result))
}

/// Runs an annotated function's body up to `1 + retries` times: the
/// expansion of a function with `retries` that names no breaker, budget or
/// bulkhead. `attempt` makes each attempt's future from fresh copies of
/// the arguments. Its first attempt runs on the lean path (the `lean`
/// module); after a failed one, the call goes on in `retry_resumed`.
/// A plain function for the reason given at [`once_lean`]; `describe` as
/// there.
pub fn retry_lean<R, C, V, F, Fut>(
    policy: &'static Policy,
    classify: C,
    refuse: fn(Error) -> R::Error,
    describe: Describe<R::Error>,
    attempt: F,
) -> impl Future<Output = R>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = R>,
    R: ReturnsResult,
    C: Fn(&R::Error) -> V,
    V: Into<Verdict>,
{
    let mut attempt = attempt;
    let make = move || IntoResult::new(attempt());
    Engine::new(
        policy,
        classify,
        refuse,
        describe,
        make,
        boxed_retry_resumed::<R, C, V, _, _>,
        true,
        NoParts,
    )
}

/// [`retry_lean`] for a function that names a breaker, budget or
/// bulkhead: its first attempt, admitted at once by parts cached for the
/// call site, runs on the lean path (the `lean` module) too. A call whose
/// first attempt waits for a bulkhead slot, or whose parts come from a
/// registry scoped around the task, goes on in the `async` engine, held in
/// place (no allocation).
pub fn retry_parts<R, C, V, F, Fut>(
    policy: &'static Policy,
    classify: C,
    refuse: fn(Error) -> R::Error,
    describe: Describe<R::Error>,
    attempt: F,
) -> impl Future<Output = R>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = R>,
    R: ReturnsResult,
    C: Fn(&R::Error) -> V,
    V: Into<Verdict>,
{
    let mut attempt = attempt;
    let make = move || IntoResult::new(attempt());
    Engine::new(
        policy,
        classify,
        refuse,
        describe,
        make,
        retry_resumed::<R, C, V, _, _>,
        true,
        Parts(None),
    )
}

/// [`once_lean`] for a function that names a breaker, budget or bulkhead:
/// as [`retry_parts`] runs its first attempt.
pub fn once_parts<R, C, V, M, Fut>(
    policy: &'static Policy,
    classify: C,
    refuse: fn(Error) -> R::Error,
    describe: Describe<R::Error>,
    make: M,
) -> impl Future<Output = R>
where
    M: FnOnce() -> Fut,
    Fut: Future<Output = R>,
    R: ReturnsResult,
    C: Fn(&R::Error) -> V,
    V: Into<Verdict>,
{
    Engine::new(
        policy,
        classify,
        refuse,
        describe,
        once(make),
        once_resumed::<R, C, V, _, _>,
        false,
        Parts(None),
    )
}

/// The retry loop's state between attempts: nothing of an attempt's
/// output or error, so that the loop's future holds none of them across
/// its awaits and is `Send` whenever the body is, whatever its error and
/// output types (review 40: a failed attempt's error, an error type that is
/// not `Send`, made it not `Send`).
struct Progress {
    delays: Delays,
    /// This call's position on its path: attempts that reached the end of
    /// the chain, its own and those of the enclosing layers before it.
    position: u32,
    /// The number of the attempt last made.
    number: u32,
    /// The budget below the last attempt, nearest the dependency.
    last_nested: Option<BudgetRef>,
}

/// What follows an attempt.
enum Next<T, E> {
    /// The call ends so.
    End(Result<T, (E, CallOutcome)>),
    /// Another attempt after `delay`, with the budgets' grants for it.
    Retry(Grants, Duration),
}

/// How the retry loop of a handed-over call begins.
enum Begin {
    /// With the attempt the lean path did not make (waiting for a bulkhead
    /// slot with the breaker's permit, or not begun).
    Attempt(Option<Option<BreakerPermit<'static>>>),
    /// With the retry after the lean path's failed first attempt.
    Retry(Grants, Duration),
}

/// Decides what follows an attempt: the call's end, or another attempt (its
/// budgets' grants taken). Synchronous: the attempt's output and error are
/// consumed here, never held across an await.
fn after_attempt<R, C, V>(
    call: &Call<C>,
    span: &CallSpan,
    refuse: fn(Error) -> R::Error,
    describe: Describe<R::Error>,
    progress: &mut Progress,
    attempted: Attempted<R::Ok, R::Error>,
) -> Next<R::Ok, R::Error>
where
    R: ReturnsResult,
    C: Fn(&R::Error) -> V,
    V: Into<Verdict>,
{
    let policy = call.policy;
    let number = progress.number;
    let Attempted { result, frame } = attempted;
    let nested_gave_up = match frame {
        Some(frame) => {
            progress.position = progress.position.max(frame.high);
            call.reach(progress.position);
            progress.last_nested = frame.budget;
            call.report_budget(progress.last_nested.as_ref());
            frame.gave_up > 0
        }
        None => {
            progress.last_nested = None;
            false
        }
    };
    let (error, class, cause) = match result {
        Ok(value) => return Next::End(Ok(value)),
        Err(failure) => {
            let cause = failure.cause();
            match call.settle(failure, refuse) {
                Settled::Retryable(error, class) => (error, class, cause),
                Settled::Final(error) => {
                    call.trace_final(span, number, &cause, &error, describe);
                    return Next::End(Err((error, cause.outcome())));
                }
            }
        }
    };
    let outcome = cause.outcome();
    let give_up = |error: R::Error, why: &'static str| {
        telemetry::gave_up(policy, span, number, &cause, &error, describe, why);
        Err((call.give_up(error), outcome))
    };
    // A nested layer already retried this failure and gave up: retrying
    // here too would multiply attempts (one retrying layer).
    if nested_gave_up {
        return Next::End(give_up(error, "a nested call gave up"));
    }
    if number > policy.retries {
        // A layer that never retries (only here for its fallback) has
        // not retried this failure: an enclosing layer still may.
        if policy.retries == 0 {
            telemetry::failed(
                policy,
                span,
                number,
                &cause,
                &error,
                describe,
                "no retries here",
            );
            return Next::End(Err((error, outcome)));
        }
        return Next::End(give_up(error, "retries spent"));
    }
    // Another attempt would take the path past what its most generous
    // layer allows: nested calls (cut by timeouts, say) already made
    // those attempts.
    if progress.position >= call.path.cap {
        return Next::End(give_up(error, "the path's attempts are spent"));
    }
    let backoff = progress.delays.next().unwrap_or(policy.backoff.cap());
    let mut delay = backoff;
    let mut source = DelaySource::Backoff;
    if let Classification::Throttled {
        retry_after: Some(floor),
    } = class
    {
        // Without a deadline, a server that asks for more than the
        // maximum is not retried at all: sooner would disobey it.
        if call.deadline.is_none() && floor > MAX_RETRY_AFTER {
            return Next::End(give_up(error, "Retry-After beyond the maximum wait"));
        }
        if floor > backoff {
            delay = floor;
            source = DelaySource::RetryAfter;
        }
    }
    let now = Instant::now();
    // A sleep that would end at or after the deadline is not slept:
    // the attempt after it could not finish in time.
    if call
        .deadline
        .is_some_and(|d| now.checked_add(delay).is_none_or(|wake| wake >= d))
    {
        return Next::End(give_up(error, "deadline too close to retry"));
    }
    // The budget nearest the dependency is asked first, whichever
    // layer retries: an enclosing layer's retry sends the same request
    // down again.
    let own = call.deps.budget_ref();
    let nested = progress
        .last_nested
        .as_ref()
        .filter(|n| !own.is_some_and(|o| n.same(o)));
    if let Some(nested) = nested {
        if !nested.get().try_retry_held(now) {
            return Next::End(give_up(error, "retry budget spent"));
        }
    }
    if !call.deps.try_retry_held(now) {
        // The retry is not made: the nested budget's grant
        // goes back, or each refusal here would spend it.
        if let Some(nested) = nested {
            nested.get().give_back(now);
        }
        return Next::End(give_up(error, "retry budget spent"));
    }
    // Until the retry's attempt is admitted, its grants are held: a
    // call dropped while it sleeps (its caller's timeout, a
    // `select!`) or waits for a bulkhead slot never makes it, nor
    // does one a breaker, bulkhead or throttle refuses, and they
    // go back.
    let held = Grants {
        own: call.deps.budget(),
        nested: nested.cloned(),
        at: now,
        spent: false,
    };
    let left = call.deadline.map(|d| d.saturating_duration_since(now));
    telemetry::retrying(
        policy, span, number, &cause, &error, describe, delay, source, left,
    );
    Next::Retry(held, delay)
}

/// The end of a retried call: its failed budget reported, its outcome
/// recorded, and the call (leaving the work in flight) ended before its
/// span closes.
fn retry_end<R: ReturnsResult, C>(
    span: CallSpan,
    call: Call<C>,
    last_nested: Option<BudgetRef>,
    result: Result<R::Ok, (R::Error, CallOutcome)>,
) -> R {
    if result.is_err() {
        call.report_failed_budget(last_nested);
    }
    let out = R::from_result(call.end(result));
    close(span, call);
    out
}

/// Ends a call, then closes its span: parameters are dropped last first,
/// so the call (leaving the work in flight) before the span.
fn close<C>(_span: CallSpan, _call: Call<C>) {}

/// A call handed over by the lean path, for the retry loop: ended here if
/// its first attempt's failure ends it, else the loop's future, which
/// holds nothing of that attempt (see [`Progress`]).
#[allow(clippy::type_complexity)]
fn retry_begin<R, C, V>(
    resumed: Resumed<C, R::Ok, R::Error>,
    refuse: fn(Error) -> R::Error,
    describe: Describe<R::Error>,
) -> Result<(Call<C>, CallSpan, Begin, Progress), R>
where
    R: ReturnsResult,
    C: Fn(&R::Error) -> V,
    V: Into<Verdict>,
{
    let Resumed { call, span, first } = resumed;
    let mut progress = Progress {
        delays: call.policy.backoff.delays(),
        position: call.path.base,
        number: 1,
        last_nested: None,
    };
    let begin = match first {
        First::Attempted(attempted) => {
            match after_attempt::<R, C, V>(&call, &span, refuse, describe, &mut progress, attempted)
            {
                Next::End(result) => {
                    let last_nested = progress.last_nested.take();
                    return Err(retry_end::<R, C>(span, call, last_nested, result));
                }
                Next::Retry(held, delay) => Begin::Retry(held, delay),
            }
        }
        First::Waiting(breaker) => Begin::Attempt(Some(breaker)),
        First::NotBegun => Begin::Attempt(None),
    };
    Ok((call, span, begin, progress))
}

/// [`retry_resumed`]: the loop's future boxed, for a call without parts,
/// handed over only after its first attempt failed: its lean future stays
/// the size of that attempt, not of the whole retry loop (a future is
/// moved at least once after it is made, and a bigger one costs a
/// `memcpy` call per call). One allocation, on that failure path only.
#[cold]
#[inline(never)]
fn boxed_retry_resumed<R, C, V, F, Fut>(
    resumed: Resumed<C, R::Ok, R::Error>,
    refuse: fn(Error) -> R::Error,
    describe: Describe<R::Error>,
    attempt: F,
) -> Handed<R, Pin<Box<impl Future<Output = R>>>>
where
    R: ReturnsResult,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<R::Ok, R::Error>>,
    C: Fn(&R::Error) -> V,
    V: Into<Verdict>,
{
    match retry_resumed::<R, C, V, F, Fut>(resumed, refuse, describe, attempt) {
        Handed::Done(out) => Handed::Done(out),
        Handed::Go(fut) => Handed::Go(Box::pin(fut)),
    }
}

/// The retry loop of a call handed over by the lean path ([`lean`]): after
/// its first attempt failed, or before it was made ([`First::Waiting`],
/// [`First::NotBegun`]); held in place (a call with parts).
fn retry_resumed<R, C, V, F, Fut>(
    resumed: Resumed<C, R::Ok, R::Error>,
    refuse: fn(Error) -> R::Error,
    describe: Describe<R::Error>,
    attempt: F,
) -> Handed<R, impl Future<Output = R>>
where
    R: ReturnsResult,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<R::Ok, R::Error>>,
    C: Fn(&R::Error) -> V,
    V: Into<Verdict>,
{
    match retry_begin::<R, C, V>(resumed, refuse, describe) {
        Err(out) => Handed::Done(out),
        Ok((call, span, begin, progress)) => Handed::Go(retry_loop::<R, C, V, F, Fut>(
            span, call, begin, progress, refuse, describe, attempt,
        )),
    }
}

/// The retry loop proper: each attempt made, then decided
/// ([`after_attempt`]), until the call ends. Its arguments and what it
/// holds across its awaits carry nothing of an attempt's output or error.
/// The span comes before the call: parameters are dropped last first, so
/// the call ends (leaving the work in flight) before its span closes, also
/// when this is dropped.
async fn retry_loop<R, C, V, F, Fut>(
    span: CallSpan,
    call: Call<C>,
    begin: Begin,
    mut progress: Progress,
    refuse: fn(Error) -> R::Error,
    describe: Describe<R::Error>,
    mut attempt: F,
) -> R
where
    R: ReturnsResult,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<R::Ok, R::Error>>,
    C: Fn(&R::Error) -> V,
    V: Into<Verdict>,
{
    let mut next = begin;
    let result = loop {
        let attempted = match next {
            // The first attempt (only it begins so) uses the call's start:
            // retries read the clock again.
            Begin::Attempt(waiting) => {
                call.attempt(
                    &span,
                    progress.number,
                    progress.position,
                    call.start,
                    waiting,
                    None,
                    &mut attempt,
                )
                .await
            }
            Begin::Retry(held, delay) => {
                tokio::time::sleep(delay).await;
                progress.number += 1;
                // The grants go with the attempt: spent once it is
                // admitted, given back if it is refused or never made.
                call.attempt(
                    &span,
                    progress.number,
                    progress.position,
                    None,
                    None,
                    Some(held),
                    &mut attempt,
                )
                .await
            }
        };
        match after_attempt::<R, C, V>(&call, &span, refuse, describe, &mut progress, attempted) {
            Next::End(result) => break result,
            Next::Retry(held, delay) => next = Begin::Retry(held, delay),
        }
    };
    let last_nested = progress.last_nested.take();
    retry_end::<R, C>(span, call, last_nested, result)
}

/// The retry budgets' grants of a retry not yet made: given back if it is
/// not made (the call dropped before, or the attempt refused here).
struct Grants {
    own: Option<BudgetRef>,
    nested: Option<BudgetRef>,
    /// When they were granted: the window slot they were counted in.
    at: Instant,
    spent: bool,
}

impl Grants {
    /// The retry's attempt goes out: the grants are spent, and counted as
    /// granted.
    fn spend(mut self) {
        self.spent = true;
        if let Some(own) = &self.own {
            own.get().count_granted();
        }
        if let Some(nested) = &self.nested {
            nested.get().count_granted();
        }
    }
}

impl Drop for Grants {
    fn drop(&mut self) {
        if self.spent {
            return;
        }
        if let Some(own) = &self.own {
            own.get().give_back(self.at);
        }
        if let Some(nested) = &self.nested {
            nested.get().give_back(self.at);
        }
    }
}

mod lean;
use lean::{Engine, Handed, NoParts, OnceLean, Parts};
