//! The named parts one call goes through, resolved from the registry: its
//! breaker, the dependency's adaptive throttle, its bulkhead and its retry
//! budget.
//!
//! Per attempt the order is breaker, throttle, bulkhead, then the body
//! under its timeout. The breaker comes first because an open breaker must
//! cost nothing, not even a wait for a bulkhead slot; the bulkhead comes
//! last so that a slot is held only by an attempt that will really run.

use std::sync::Arc;

use tokio::time::Instant;

use crate::outcome::Outcome;
use crate::registry::Registry;
use crate::telemetry::CallSpan;
use crate::{
    AdaptiveThrottle, Breaker, BreakerPermit, Bulkhead, BulkheadPermit, Error, RetryBudget,
};

/// The names one annotated function uses, fixed at compile time.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Names {
    pub(crate) breaker: Option<&'static str>,
    pub(crate) budget: Option<&'static str>,
    pub(crate) bulkhead: Option<&'static str>,
}

impl Names {
    pub(crate) const NONE: Names = Names {
        breaker: None,
        budget: None,
        bulkhead: None,
    };

    pub(crate) const fn is_empty(&self) -> bool {
        self.breaker.is_none() && self.budget.is_none() && self.bulkhead.is_none()
    }
}

/// The parts one call site uses.
#[derive(Debug)]
pub(crate) struct Deps {
    breaker: Option<Arc<Breaker>>,
    throttle: Option<Arc<AdaptiveThrottle>>,
    bulkhead: Option<Arc<Bulkhead>>,
    budget: Option<Arc<RetryBudget>>,
}

/// How far [`Deps::try_admit`] got.
#[derive(Debug)]
pub(crate) enum Admit<'a> {
    /// Admitted at once: the admission is in the place given.
    Ready,
    /// Refused at once.
    Refused(Error),
    /// Through the breaker (holding its permit) and the throttle; waits for
    /// a bulkhead slot ([`Deps::wait_for_slot`]).
    Wait(Option<BreakerPermit<'a>>),
}

/// A full bulkhead's refusal, traced.
#[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
fn bulkhead_full(bulkhead: &Bulkhead, full: Error) -> Error {
    #[cfg(feature = "tracing")]
    tracing::debug!(
        bulkhead = bulkhead.name(),
        "resilient: bulkhead full, call refused"
    );
    full
}

/// What one admitted attempt holds until it finishes. Dropping it (a
/// cancelled call) gives back the breaker's half-open permit and the
/// bulkhead slot, and records nothing.
#[derive(Debug)]
pub(crate) struct Admission<'a> {
    deps: &'a Deps,
    breaker: Option<BreakerPermit<'a>>,
    _bulkhead: Option<BulkheadPermit<'a>>,
}

impl Deps {
    pub(crate) const NONE: Deps = Deps {
        breaker: None,
        throttle: None,
        bulkhead: None,
        budget: None,
    };

    pub(crate) fn resolve(registry: &Registry, names: Names) -> Result<Deps, Error> {
        let breaker = names
            .breaker
            .map(|n| registry.resolve_breaker(n))
            .transpose()?;
        // A function's budget is the one it names, else its dependency's.
        let budget = match (names.budget, names.breaker) {
            (Some(explicit), _) => Some(registry.resolve_budget(explicit, true)?),
            (None, Some(dependency)) => Some(registry.resolve_budget(dependency, false)?),
            (None, None) => None,
        };
        let throttle = names.breaker.and_then(|n| registry.throttle(n));
        let bulkhead = names
            .bulkhead
            .map(|n| registry.resolve_bulkhead(n))
            .transpose()?;
        Ok(Deps {
            breaker,
            throttle,
            bulkhead,
            budget,
        })
    }

    /// Admits one attempt as far as it can without waiting: through the
    /// breaker and the throttle, and into the bulkhead when a slot is free
    /// (or the bulkhead refuses at once). `now` is `Some` whenever
    /// [`needs_clock_at_start`](Deps::needs_clock_at_start) is true. The breaker and the
    /// throttle decide once per attempt, here, also for an attempt that then
    /// waits for a slot ([`Admit::Wait`]). An admission is written in its
    /// place, `into`, not returned: returned, it was copied there through
    /// the stack, and on some processors (AMD's) that copy, read right
    /// after its parts were written one by one, stalled.
    #[inline]
    pub(crate) fn try_admit<'a>(
        &'a self,
        now: Option<Instant>,
        into: &mut Option<Admission<'a>>,
        span: &CallSpan,
    ) -> Admit<'a> {
        // Filled in its place, part by part: the breaker's permit is made
        // in the admission's field rather than returned through a `Result`
        // (with an `Error` beside it) and copied in.
        let admission = into.insert(Admission {
            deps: self,
            breaker: None,
            _bulkhead: None,
        });
        if let Some(b) = &self.breaker {
            if let Err(open) = b.try_acquire_in_call(now, &mut admission.breaker, span) {
                *into = None;
                return Admit::Refused(open);
            }
        }
        if let Some(t) = &self.throttle {
            if t.shed(now.unwrap_or_else(Instant::now)) {
                #[cfg(feature = "tracing")]
                tracing::debug!(
                    dependency = t.name(),
                    "resilient: call shed by adaptive throttling"
                );
                // The breaker's permit (a half-open probe) goes back.
                *into = None;
                return Admit::Refused(Error::load_shed(Arc::from(t.name())));
            }
        }
        if let Some(b) = &self.bulkhead {
            match b.try_take() {
                Some(permit) => admission._bulkhead = Some(permit),
                // A call that then waits for a slot is not refused yet: only
                // one that gets none counts in the bulkhead's `rejected`.
                None if b.may_wait() => {
                    let breaker = admission.breaker.take();
                    *into = None;
                    return Admit::Wait(breaker);
                }
                None => {
                    *into = None;
                    return Admit::Refused(bulkhead_full(b, b.refuse()));
                }
            }
        }
        Admit::Ready
    }

    /// Finishes an admission that must wait for a bulkhead slot, at most the
    /// bulkhead's `max_wait` and never past `deadline`. Returns the admission
    /// and the time the body may start: after the wait, which is not counted
    /// as the call's time (the breaker's clock restarts then).
    pub(crate) async fn wait_for_slot<'a>(
        &'a self,
        mut breaker: Option<BreakerPermit<'a>>,
        now: Option<Instant>,
        deadline: Option<Instant>,
    ) -> Result<(Admission<'a>, Option<Instant>), Error> {
        let Some(b) = &self.bulkhead else {
            unreachable!("only a bulkhead makes an attempt wait");
        };
        let permit = b
            .acquire(deadline)
            .await
            .map_err(|full| bulkhead_full(b, full))?;
        let body_start = now.map(|_| Instant::now());
        if let Some(permit) = &mut breaker {
            permit.restart(body_start);
        }
        Ok((
            Admission {
                deps: self,
                breaker,
                _bulkhead: Some(permit),
            },
            body_start,
        ))
    }

    /// Do these parts need tokio's time when an attempt starts? Breakers
    /// time calls from there; throttles count in time windows; a budget
    /// counts requests in one, but only those of a call that may retry
    /// (`may_retry`: some layer on its path retries).
    #[inline]
    pub(crate) fn needs_clock_at_start(&self, may_retry: bool) -> bool {
        self.breaker.is_some() || self.throttle.is_some() || (may_retry && self.budget.is_some())
    }

    /// Do these parts need tokio's time when an attempt ends? A budget
    /// records outcomes without it; a breaker that times calls on the
    /// coarse clock reads it itself, only if the body waited.
    #[inline]
    pub(crate) fn needs_clock_at_end(&self) -> bool {
        self.throttle.is_some()
            || self
                .breaker
                .as_ref()
                .is_some_and(|b| b.needs_clock_at_end())
    }

    /// Do these parts record an attempt's outcome at all?
    #[inline]
    pub(crate) fn records(&self) -> bool {
        self.breaker.is_some() || self.throttle.is_some() || self.budget.is_some()
    }

    /// The retry budget, if the call has one.
    pub(crate) fn budget(&self) -> Option<&Arc<RetryBudget>> {
        self.budget.as_ref()
    }

    /// The retry budget, borrowed.
    pub(crate) fn budget_ref(&self) -> Option<&RetryBudget> {
        self.budget.as_deref()
    }

    #[inline]
    pub(crate) fn on_request(&self, now: Option<Instant>) {
        if let Some(b) = &self.budget {
            b.on_request(now.unwrap_or_else(Instant::now));
        }
    }

    /// Asks the call's budget for a retry, counted as granted only once
    /// it is made ([`RetryBudget::count_granted`]).
    pub(crate) fn try_retry_held(&self, now: Instant) -> bool {
        self.budget.as_ref().is_none_or(|b| b.try_retry_held(now))
    }
}

impl<'a> Admission<'a> {
    /// The parts that admitted the attempt.
    #[inline]
    pub(crate) fn deps(&self) -> &'a Deps {
        self.deps
    }
}

impl Admission<'_> {
    /// The admission of a call without breaker, throttle or bulkhead.
    pub(crate) fn none(deps: &Deps) -> Admission<'_> {
        Admission {
            deps,
            breaker: None,
            _bulkhead: None,
        }
    }

    /// Do the parts record the attempt's outcome?
    #[inline]
    pub(crate) fn records(&self) -> bool {
        self.deps.records()
    }

    /// The body has had to wait: a breaker timing the call on the coarse
    /// clock goes on with tokio's (`crate::clock`).
    #[inline]
    pub(crate) fn waited(&mut self) {
        if let Some(permit) = &mut self.breaker {
            permit.waited();
        }
    }

    /// Records the attempt's outcome. `end`: tokio's time, read by the
    /// caller whenever [`Deps::needs_clock_at_end`]; the parts read it
    /// themselves if they need it otherwise (a breaker after its body
    /// waited, or to open). Recorded where the admission lies; its permits
    /// are given back when it is dropped. A breaker transition the record
    /// makes is logged inside `span`, the call's.
    #[inline]
    pub(crate) fn finish(&mut self, outcome: Outcome, end: Option<Instant>, span: &CallSpan) {
        if let Some(permit) = &mut self.breaker {
            permit.record_in_place(outcome, end, Some(span));
        }
        if let Some(t) = &self.deps.throttle {
            t.record(
                !matches!(outcome, Outcome::Failure { .. }),
                end.unwrap_or_else(Instant::now),
            );
        }
        if let Some(b) = &self.deps.budget {
            b.on_outcome(outcome);
        }
    }
}
