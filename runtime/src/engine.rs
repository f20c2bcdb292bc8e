//! The retry engine the `#[resilient]` expansion calls: one call, its
//! deadline, its attempts, the sleeps between them, and the decision after
//! each failure.

use std::future::Future;
use std::ops::Deref;
use std::sync::OnceLock;
use std::time::Duration;

use tokio::time::Instant;

use crate::__private::ReturnsResult;
use crate::backoff::{Backoff, DEFAULT_BASE, DEFAULT_CAP};
use crate::context::{
    current_deadline, earliest, give_ups, in_retry_scope, mark_gave_up, scope_retries,
};
use crate::deps::{Deps, Names};
use crate::future::{Bounded, Elapsed, IntoResult, MaybeScoped};
use crate::outcome::Outcome;
use crate::registry::Registry;
use crate::{Classification, Error};

/// What one annotated function asked for, fixed at compile time.
#[derive(Debug)]
pub struct Policy {
    function: &'static str,
    retries: u32,
    deadline: Option<Duration>,
    timeout: Option<Duration>,
    backoff: Backoff,
    names: Names,
    /// The parts from the global registry, found on the first call.
    global: OnceLock<Result<Deps, Error>>,
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
            global: OnceLock::new(),
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

    /// The function's path, for telemetry.
    pub const fn function(&self) -> &'static str {
        self.function
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

    /// The named parts this call goes through. From the global registry
    /// they are found once per call site and cached, so the success path
    /// does no lookup; a registry scoped around the task (tests) is
    /// searched on every call.
    fn deps(&'static self) -> Result<DepsRef, Error> {
        static NONE: Deps = Deps::NONE;
        if self.names.is_empty() {
            return Ok(DepsRef::Static(&NONE));
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

/// The parts of one call: cached for the call site, or resolved for it.
enum DepsRef {
    Static(&'static Deps),
    Owned(Deps),
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
    Failed(E, Classification),
    /// The per-attempt timeout passed.
    TimedOut(Duration),
    /// The overall deadline passed during the attempt.
    Deadline,
    /// A breaker, throttle or bulkhead refused the attempt: it did not run.
    Refused(Error),
}

/// What a failed attempt means for the call.
enum Settled<E> {
    /// Another attempt may succeed.
    Retryable(E, Classification),
    /// The call's final error.
    Final(E),
}

/// A call refused before its first attempt.
struct Refusal {
    error: Error,
    /// Must enclosing layers treat it as final (see `mark_gave_up`)?
    final_for_task: bool,
}

impl Refusal {
    fn into_error<E>(self, refuse: fn(Error) -> E) -> E {
        let error = refuse(self.error);
        if self.final_for_task {
            give_up(error)
        } else {
            error
        }
    }
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
}

impl<C> Call<C> {
    /// Starts a call: fixes its deadline and finds its named parts. Refuses
    /// a call whose deadline has already passed, so it does no work.
    fn begin(policy: &'static Policy, classify: C) -> Result<Self, Refusal> {
        let inherited = current_deadline();
        let deps = policy.deps().map_err(|error| Refusal {
            error,
            final_for_task: true,
        })?;
        // The clock is read only when something needs the time: a deadline
        // or timeout, or a part that keeps time-based statistics. This one
        // read also serves as the first attempt's start.
        let clocked = inherited.is_some()
            || policy.deadline.is_some()
            || policy.timeout.is_some()
            || deps.needs_clock();
        let start = clocked.then(Instant::now);
        let own = match (policy.deadline, start) {
            (Some(d), Some(start)) => start.checked_add(d),
            _ => None,
        };
        let deadline = earliest(inherited, own);
        // Only a deadline this layer set is this layer's to give up on; an
        // inherited one is the enclosing layer's, which sees it pass too.
        let own_deadline = own.is_some() && own == deadline && own != inherited;
        if let (Some(deadline), Some(start)) = (deadline, start) {
            if start >= deadline {
                return Err(Refusal {
                    error: Error::deadline_exceeded(),
                    final_for_task: own_deadline,
                });
            }
        }
        Ok(Call {
            policy,
            classify,
            deps,
            deadline,
            own_deadline,
            clocked,
            start,
        })
    }

    /// Runs one attempt under the breaker, throttle and bulkhead, with its
    /// timeout, and records its outcome.
    ///
    /// Takes a function that makes the body's future rather than the future
    /// itself: a future passed by value into an `async fn` is stored twice
    /// in its state, and nested layers would multiply that.
    /// `started`: the attempt's start, when already read (the first one's
    /// is the call's).
    async fn attempt<T, E, Fut>(
        &self,
        started: Option<Instant>,
        make: impl FnOnce() -> Fut,
    ) -> Result<T, Failure<E>>
    where
        Fut: Future<Output = Result<T, E>>,
        C: Fn(&E) -> Classification,
    {
        let now = started.or_else(|| self.clocked.then(Instant::now));
        // The attempt's timeout runs from when its body starts, after any
        // wait for a bulkhead slot.
        let (admission, body_start) = self
            .deps
            .admit(now, self.deadline)
            .await
            .map_err(Failure::Refused)?;
        let timeout_at = body_start.and_then(|start| start.checked_add(self.policy.timeout?));
        let attempt_deadline = earliest(self.deadline, timeout_at);
        // Nested annotated calls inherit the attempt's deadline, so none
        // of them plans a retry the attempt cannot wait for.
        let result = Bounded::new(attempt_deadline, make()).await;
        // The end time feeds breakers (slow calls) and windows; without
        // them, save the clock read.
        let end = self.deps.needs_clock().then(Instant::now);
        match result {
            Ok(Ok(value)) => {
                admission.finish(Outcome::Success, end);
                Ok(value)
            }
            // The body failed after this attempt's deadline had passed: a
            // nested annotated call, which inherits that deadline, gave up
            // on it a moment before this layer's own timer fired. It is
            // this layer's timeout (or deadline), to be handled here.
            Ok(Err(_))
                if attempt_deadline.is_some_and(|d| end.unwrap_or_else(Instant::now) >= d) =>
            {
                admission.finish(Outcome::Failure { retry_after: None }, end);
                Err(self.elapsed(attempt_deadline))
            }
            Ok(Err(error)) => {
                let class = (self.classify)(&error);
                admission.finish(Outcome::of_failure(class), end);
                Err(Failure::Failed(error, class))
            }
            Err(Elapsed) => {
                admission.finish(Outcome::Failure { retry_after: None }, end);
                Err(self.elapsed(attempt_deadline))
            }
        }
    }

    /// The failure of an attempt whose deadline passed.
    fn elapsed<E>(&self, attempt_deadline: Option<Instant>) -> Failure<E> {
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
            Failure::Failed(error, class) if class.is_retryable() => {
                Settled::Retryable(error, class)
            }
            Failure::Failed(error, _) => Settled::Final(error),
            Failure::TimedOut(after) => Settled::Retryable(
                refuse(Error::attempt_timed_out(after)),
                Classification::Transient,
            ),
            Failure::Deadline => {
                let error = refuse(Error::deadline_exceeded());
                Settled::Final(if self.own_deadline {
                    give_up(error)
                } else {
                    error
                })
            }
            Failure::Refused(refusal) => Settled::Final(give_up(refuse(refusal))),
        }
    }
}

/// Runs an annotated function's body once: the expansion of a function
/// without `retries`. Its deadline, timeout, breaker and bulkhead apply.
///
/// Generic over the return type `R` rather than `Result<T, E>`, with the
/// same bounds the expansion checks at the user's return type, so a
/// function returning something else gets exactly one error, there.
pub async fn once<R, C, M, Fut>(
    policy: &'static Policy,
    classify: C,
    refuse: fn(Error) -> R::Error,
    make: M,
) -> R
where
    M: FnOnce() -> Fut,
    Fut: Future<Output = R>,
    R: ReturnsResult,
    C: Fn(&R::Error) -> Classification,
{
    R::from_result(once_inner(policy, classify, refuse, move || IntoResult::new(make())).await)
}

async fn once_inner<T, E, C, M, Fut>(
    policy: &'static Policy,
    classify: C,
    refuse: fn(Error) -> E,
    make: M,
) -> Result<T, E>
where
    M: FnOnce() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    C: Fn(&E) -> Classification,
{
    let call = match Call::begin(policy, classify) {
        Ok(call) => call,
        Err(refusal) => return Err(refusal.into_error(refuse)),
    };
    call.deps.on_request(call.start);
    match call.attempt(call.start, make).await {
        Ok(value) => Ok(value),
        Err(failure) => match call.settle(failure, refuse) {
            // Not retried here, so an enclosing layer may still retry it.
            Settled::Retryable(error, _) | Settled::Final(error) => Err(error),
        },
    }
}

/// Runs an annotated function's body up to `1 + retries` times: the
/// expansion of a function with `retries`. `attempt` makes each attempt's
/// future from fresh copies of the arguments.
pub async fn retry<R, C, F, Fut>(
    policy: &'static Policy,
    classify: C,
    refuse: fn(Error) -> R::Error,
    mut attempt: F,
) -> R
where
    F: FnMut() -> Fut,
    Fut: Future<Output = R>,
    R: ReturnsResult,
    C: Fn(&R::Error) -> Classification,
{
    let attempt = move || IntoResult::new(attempt());
    let call = match Call::begin(policy, classify) {
        Ok(call) => call,
        Err(refusal) => return R::from_result(Err(refusal.into_error(refuse))),
    };
    // The outermost retrying layer of the task opens the scope in which
    // nested layers report giving up.
    // Built in place, not through a constructor taking the (large,
    // unstarted) future by value: each such move is a memcpy.
    let scoped = if in_retry_scope() {
        MaybeScoped::Plain {
            fut: retry_loop(call, refuse, attempt),
        }
    } else {
        MaybeScoped::Scoped {
            fut: scope_retries(retry_loop(call, refuse, attempt)),
        }
    };
    R::from_result(scoped.await)
}

async fn retry_loop<T, E, C, F, Fut>(
    call: Call<C>,
    refuse: fn(Error) -> E,
    mut attempt: F,
) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    C: Fn(&E) -> Classification,
{
    let policy = call.policy;
    let mut delays = policy.backoff.delays();
    call.deps.on_request(call.start);
    let mut started = call.start;
    let mut retry: u32 = 0;
    loop {
        let nested_give_ups = give_ups();
        let (error, class) = match call.attempt(started.take(), &mut attempt).await {
            Ok(value) => return Ok(value),
            Err(failure) => match call.settle(failure, refuse) {
                Settled::Retryable(error, class) => (error, class),
                Settled::Final(error) => return Err(error),
            },
        };
        // A nested layer already retried this failure and gave up: retrying
        // here too would multiply attempts (one retrying layer).
        if give_ups() != nested_give_ups {
            return Err(error);
        }
        if retry >= policy.retries {
            // A layer that never retries (only here for its fallback) has
            // not retried this failure: an enclosing layer still may.
            if policy.retries == 0 {
                return Err(error);
            }
            trace_give_up(policy, retry, "retries spent");
            return Err(give_up(error));
        }
        let mut delay = delays.next().unwrap_or(policy.backoff.cap());
        if let Classification::Throttled {
            retry_after: Some(floor),
        } = class
        {
            delay = delay.max(floor);
        }
        let now = Instant::now();
        // A sleep that would end at or after the deadline is not slept:
        // the attempt after it could not finish in time.
        if call
            .deadline
            .is_some_and(|d| now.checked_add(delay).is_none_or(|wake| wake >= d))
        {
            trace_give_up(policy, retry, "deadline too close to retry");
            return Err(give_up(error));
        }
        if !call.deps.try_retry(now) {
            trace_give_up(policy, retry, "retry budget spent");
            return Err(give_up(error));
        }
        retry += 1;
        #[cfg(feature = "tracing")]
        tracing::debug!(
            function = policy.function,
            retry,
            delay_ms = delay.as_millis() as u64,
            "resilient: retrying after a retryable failure"
        );
        tokio::time::sleep(delay).await;
    }
}

/// Marks that this layer stopped on a failure enclosing layers must not retry.
fn give_up<E>(error: E) -> E {
    mark_gave_up();
    error
}

#[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
fn trace_give_up(policy: &Policy, retries: u32, why: &'static str) {
    #[cfg(feature = "tracing")]
    tracing::debug!(
        function = policy.function,
        retries,
        why,
        "resilient: giving up"
    );
}
