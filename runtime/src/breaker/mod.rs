//! See the docs of `Breaker`, which carry this module's documentation
//! (the module is private; its items are re-exported at the crate root).

mod config;
mod core;
mod events;
mod places;
mod snapshot;

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

pub use self::config::{BreakerConfig, SlidingWindow};
use self::core::{
    Acquired, Admission, Cause, Core, Now, Phase, Sample, Settings, Transition, WindowKind,
    gen_newer, generations_after,
};
pub use self::events::{BreakerEvent, EventHub, Subscription, TransitionReason};
pub use self::snapshot::BreakerSnapshot;
use crate::config::ConfigError;
use crate::outcome::Outcome;
use crate::time::nanos;

/// The state of a circuit breaker. Displayed in snake case (`half_open`), as
/// in configuration files.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum State {
    /// Calls run and are counted.
    Closed,
    /// Calls are refused until the wait is over.
    Open,
    /// A few probe calls run; their outcomes decide.
    HalfOpen,
    /// Calls run and nothing is counted.
    Disabled,
    /// Calls are refused until someone changes the state by hand.
    ForcedOpen,
    /// Calls run and are counted, but the breaker never opens.
    MetricsOnly,
}

impl State {
    fn phase(self) -> Phase {
        match self {
            State::Closed => Phase::Closed,
            State::Open => Phase::Open,
            State::HalfOpen => Phase::HalfOpen,
            State::Disabled => Phase::Disabled,
            State::ForcedOpen => Phase::ForcedOpen,
            State::MetricsOnly => Phase::MetricsOnly,
        }
    }

    fn of(phase: Phase) -> State {
        match phase {
            Phase::Closed => State::Closed,
            Phase::Open => State::Open,
            Phase::HalfOpen => State::HalfOpen,
            Phase::Disabled => State::Disabled,
            Phase::ForcedOpen => State::ForcedOpen,
            Phase::MetricsOnly => State::MetricsOnly,
        }
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            State::Closed => "closed",
            State::Open => "open",
            State::HalfOpen => "half_open",
            State::Disabled => "disabled",
            State::ForcedOpen => "forced_open",
            State::MetricsOnly => "metrics_only",
        })
    }
}

/// A circuit breaker guarding one dependency. Share it as `Arc<Breaker>`.
///
/// ```
/// use resilient::{Breaker, BreakerConfig, Classification, State};
///
/// let breaker = Breaker::new("inventory", BreakerConfig::default()).unwrap();
/// let permit = breaker.try_acquire().expect("a new breaker is closed");
/// // ... make the call, then say how it went:
/// permit.record(Some(Classification::Transient));
/// assert_eq!(breaker.state(), State::Closed);
/// ```
#[doc = include_str!("../docs/breaker.md")]
///
pub struct Breaker {
    name: Arc<str>,
    config: BreakerConfig,
    core: Core,
    /// When the breaker was made, as [`crate::time::ticks`]: its windows
    /// count from there, as they would from its own clock.
    origin: u64,
    /// When the coarse clock times this breaker's calls inside annotated
    /// functions (see `crate::clock`; a count-based window and a threshold
    /// of at least `RESOLUTIONS` ticks): the coarse duration past which a
    /// call is slow, the threshold plus a tick (saturating).
    /// In nanoseconds, as the coarse clock reads.
    coarse_slow: Option<u64>,
    /// Calls refused since the breaker was made: never reset, so that the
    /// exported counter ([`crate::metrics`]) only rises.
    not_permitted: AtomicU64,
    /// `not_permitted` at the last [`reset`](Breaker::reset): the snapshot
    /// counts from there.
    not_permitted_at_reset: AtomicU64,
    /// Transitions made since the breaker was made, by `from` and `to`
    /// (`State as usize`): counted where they happen, so that the exported
    /// counter ([`crate::metrics`]) misses none, also when the event queue
    /// drops their events; never reset, so that it only rises.
    #[cfg(feature = "metrics")]
    transitions: [AtomicU64; STATE_COUNT * STATE_COUNT],
    events: Arc<EventHub>,
    /// Transitions are announced in the order they were made (see
    /// [`Order`]).
    order: Mutex<Order>,
}

/// How many [`State`]s there are.
#[cfg(feature = "metrics")]
const STATE_COUNT: usize = 6;

impl fmt::Debug for Breaker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Breaker")
            .field("name", &self.name)
            .field("state", &self.state())
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Breaker {
    /// A breaker named `name`, after checking `config` and the name (a
    /// registry's rule for names); the error lists every refused setting.
    pub fn new(name: impl Into<Arc<str>>, config: BreakerConfig) -> Result<Breaker, ConfigError> {
        let name = name.into();
        ConfigError::of_part("breaker", &name, config.validate(&name))?;
        Ok(Breaker::with_events(name, config, EventHub::new()))
    }

    /// A breaker whose events go to a hub shared with others (a registry's);
    /// `config` must already be validated.
    pub(crate) fn with_events(
        name: Arc<str>,
        config: BreakerConfig,
        events: Arc<EventHub>,
    ) -> Breaker {
        let settings = Settings {
            failure_rate_threshold: config.failure_rate_threshold,
            slow_call_rate_threshold: config.slow_call_rate_threshold,
            minimum_calls: config.minimum_number_of_calls,
            permitted_in_half_open: config.permitted_number_of_calls_in_half_open_state,
            wait_ns: nanos(config.wait_duration_in_open_state),
            window: match config.sliding_window {
                SlidingWindow::CountBased { size } => WindowKind::Count(size),
                SlidingWindow::TimeBased { seconds } => WindowKind::Time(seconds),
            },
            retry_after_opens: config.honor_retry_after && config.open_on_retry_after,
        };
        let threshold = config.slow_call_duration_threshold;
        let coarse_slow = crate::clock::resolution()
            .filter(|&tick| {
                matches!(config.sliding_window, SlidingWindow::CountBased { .. })
                    && threshold >= tick * crate::clock::RESOLUTIONS
            })
            .map(|tick| nanos(threshold.saturating_add(tick)));
        Breaker {
            origin: crate::time::ticks(Instant::now()),
            coarse_slow,
            core: Core::new(settings, config.initial_state.phase()),
            name,
            config,
            not_permitted: AtomicU64::new(0),
            not_permitted_at_reset: AtomicU64::new(0),
            #[cfg(feature = "metrics")]
            transitions: [const { AtomicU64::new(0) }; STATE_COUNT * STATE_COUNT],
            events,
            order: Mutex::new(Order::new()),
        }
    }

    /// The breaker's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The breaker's current state. An open breaker whose wait is over still
    /// reports open until the next acquire moves it to half-open.
    pub fn state(&self) -> State {
        State::of(self.core.phase())
    }

    /// Whether a call made now would be refused for the breaker's state:
    /// forced open, or open with its wait not over. Unlike
    /// [`state`](Self::state), an open breaker whose wait is over does not
    /// count: it admits the next call as a probe.
    pub(crate) fn refuses_now(&self) -> bool {
        self.core.refuses_at(self.since_origin(Instant::now()))
    }

    /// The settings the breaker was built with.
    pub fn config(&self) -> &BreakerConfig {
        &self.config
    }

    #[inline]
    fn since_origin(&self, now: Instant) -> u64 {
        crate::time::ticks(now).saturating_sub(self.origin)
    }

    /// Asks to make one call. `Err` is an [`ErrorKind::BreakerOpen`]
    /// refusal: do not make the call, and do not retry it.
    ///
    /// [`ErrorKind::BreakerOpen`]: crate::ErrorKind::BreakerOpen
    pub fn try_acquire(&self) -> Result<BreakerPermit<'_>, crate::Error> {
        // Timed on tokio's clock: the engine cannot tell whether a call made
        // under a permit taken by hand ever waits.
        match self.core.try_acquire_untimed() {
            Some(admission) => Ok(self.permit(admission, Timing::exact(self, Instant::now()))),
            None => self.try_acquire_timed(Instant::now(), Timing::exact, None),
        }
    }

    /// Does this breaker need tokio's time at the end of every call of an
    /// annotated function? (Otherwise only of one whose body waited: one
    /// ready at its first poll is timed on the coarse clock, `crate::clock`.)
    /// Its start is read all the same: on a paused clock, the time a body
    /// moves the clock by before its first wait is the call's too.
    #[inline]
    pub(crate) fn needs_clock_at_end(&self) -> bool {
        self.coarse_slow.is_none()
    }

    /// Admits one attempt of an annotated function, started at `now` on
    /// tokio's clock (read here if the caller did not). The engine tells the
    /// permit if the body waits ([`BreakerPermit::waited`]). A transition
    /// the admission makes (`open -> half_open`: this call is the first
    /// probe) is announced inside `span`, the call's.
    #[inline]
    pub(crate) fn try_acquire_in_call<'a>(
        &'a self,
        now: Option<Instant>,
        into: &mut Option<BreakerPermit<'a>>,
        span: &crate::telemetry::CallSpan,
    ) -> Result<(), crate::Error> {
        let now = now.unwrap_or_else(Instant::now);
        match self.core.try_acquire_untimed() {
            // Made in its place (the caller's admission), not returned.
            Some(admission) => {
                *into = Some(self.permit(admission, Timing::in_call(self, now)));
                Ok(())
            }
            None => {
                *into = Some(self.try_acquire_timed(now, Timing::in_call, Some(span))?);
                Ok(())
            }
        }
    }

    #[inline]
    fn permit(&self, admission: Admission, timing: Timing) -> BreakerPermit<'_> {
        BreakerPermit {
            breaker: self,
            admission,
            timing,
            done: false,
        }
    }

    /// A half-open probe is timed as a closed breaker's call is (`timing`):
    /// the same body gets the same verdict in either state. A transition is
    /// announced inside `span` if there is one (the call's).
    #[cold]
    #[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
    fn try_acquire_timed(
        &self,
        now: Instant,
        timing: fn(&Breaker, Instant) -> Timing,
        span: Option<&crate::telemetry::CallSpan>,
    ) -> Result<BreakerPermit<'_>, crate::Error> {
        match self.core.try_acquire(self.since_origin(now)) {
            Acquired::Admitted {
                admission,
                transition,
            } => {
                // The permit owns the probe slot before anything else runs:
                // whatever happens while the transition is announced, dropping
                // the permit hands the slot back.
                let permit = self.permit(admission, timing(self, now));
                if transition.is_some() {
                    #[cfg(feature = "tracing")]
                    let _in_span = span.map(tracing::Span::enter);
                    self.announce([transition, None], false);
                }
                Ok(permit)
            }
            Acquired::Rejected { retry_in_ns } => {
                self.not_permitted.fetch_add(1, Ordering::Relaxed);
                if self.events.is_observed() {
                    self.events.emit(&BreakerEvent::CallNotPermitted {
                        name: Arc::clone(&self.name),
                    });
                }
                Err(crate::Error::breaker_open(
                    Arc::clone(&self.name),
                    retry_in_ns.map(Duration::from_nanos),
                ))
            }
        }
    }

    /// Moves the breaker to `to` by hand, whatever its state. Every state but
    /// open and half-open starts with an empty window; open waits
    /// `wait_duration_in_open_state` from now. Calls in flight when the state
    /// changes are not counted in the new state. Announced as a
    /// [`BreakerEvent::StateTransition`] even when `to` is the current state
    /// (the window is emptied all the same).
    pub fn transition_to(&self, to: State) {
        let t = self
            .core
            .transition_to(to.phase(), self.since_origin(Instant::now()));
        self.announce([Some(t), None], false);
    }

    /// Closes the breaker with an empty window and zeroes its count of
    /// refused calls (the snapshot's; the exported metrics counter keeps
    /// counting); announced as a transition to closed.
    pub fn reset(&self) {
        let t = self
            .core
            .transition_to(Phase::Closed, self.since_origin(Instant::now()));
        let total = self.not_permitted.load(Ordering::Relaxed);
        self.not_permitted_at_reset.store(total, Ordering::Relaxed);
        self.announce([Some(t), None], true);
    }

    /// The breaker's state and counts now.
    pub fn snapshot(&self) -> BreakerSnapshot {
        let m = self.core.metrics(self.since_origin(Instant::now()));
        let count = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
        BreakerSnapshot {
            name: self.name.to_string(),
            state: State::of(m.phase),
            failure_rate: m.failure_rate,
            slow_call_rate: m.slow_call_rate,
            buffered_calls: count(m.calls),
            failed_calls: count(m.failed),
            slow_calls: count(m.slow),
            not_permitted_calls: self
                .not_permitted
                .load(Ordering::Relaxed)
                .saturating_sub(self.not_permitted_at_reset.load(Ordering::Relaxed)),
        }
    }

    /// Calls refused since the breaker was made, resets included: what
    /// the metrics counter exports (a counter never goes down).
    #[cfg(feature = "metrics")]
    pub(crate) fn not_permitted_total(&self) -> u64 {
        self.not_permitted.load(Ordering::Relaxed)
    }

    /// Transitions from `from` to `to` since the breaker was made.
    #[cfg(feature = "metrics")]
    pub(crate) fn transitions_total(&self, from: State, to: State) -> u64 {
        self.transitions[from as usize * STATE_COUNT + to as usize].load(Ordering::Relaxed)
    }

    /// Calls `f` with every event of this breaker until the returned
    /// [`Subscription`] is dropped.
    ///
    /// `f` never runs on a caller's task: events are queued (without
    /// blocking or allocating) and delivered in order on a thread of the
    /// breaker's own, so a slow or panicking subscriber cannot delay or break
    /// a call. See [`EventHub`] for the delivery guarantees.
    pub fn subscribe(&self, f: impl Fn(&BreakerEvent) + Send + Sync + 'static) -> Subscription {
        let name = Arc::clone(&self.name);
        self.events.subscribe(move |event| {
            if event.name() == &*name {
                f(event)
            }
        })
    }

    /// Why transition `t` happened, in the public vocabulary.
    fn reason(&self, t: &Transition, reset: bool) -> TransitionReason {
        let count = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
        let (failure_threshold, slow_threshold) = (
            self.config.failure_rate_threshold as f32,
            self.config.slow_call_rate_threshold as f32,
        );
        match t.cause {
            Cause::Rates {
                failure_rate,
                slow_call_rate,
                calls,
                ..
            } if t.from == Phase::HalfOpen => TransitionReason::ProbesFailed {
                failure_rate,
                failure_rate_threshold: failure_threshold,
                slow_call_rate,
                slow_call_rate_threshold: slow_threshold,
                calls: count(calls),
            },
            Cause::Rates {
                failure_rate,
                failure_tripped: true,
                calls,
                ..
            } => TransitionReason::FailureRate {
                rate: failure_rate,
                threshold: failure_threshold,
                calls: count(calls),
            },
            Cause::Rates {
                slow_call_rate,
                calls,
                ..
            } => TransitionReason::SlowCallRate {
                rate: slow_call_rate,
                threshold: slow_threshold,
                calls: count(calls),
            },
            Cause::ProbesSucceeded { calls } => TransitionReason::ProbesSucceeded {
                calls: count(calls),
            },
            Cause::RetryAfter { hold_ns } => TransitionReason::RetryAfter {
                hold: Duration::from_nanos(hold_ns),
            },
            Cause::WaitElapsed => TransitionReason::WaitElapsed,
            Cause::Manual if reset => TransitionReason::Reset,
            Cause::Manual => TransitionReason::Manual,
        }
    }

    /// Tells the subscribers and the log about transitions this caller
    /// made (one, or a record's two). Allocates nothing (unless two
    /// announcements cross, and one must wait for the other): the reason is
    /// a `Copy` value, formatted only by a tracing subscriber that wants it,
    /// and events are queued without allocating. Queued first, for all of
    /// them: the log runs a tracing subscriber's code, which may panic,
    /// and a transition left unqueued would hold back the next ones (see
    /// [`Order`]).
    fn announce(&self, transitions: [Option<Transition>; 2], reset: bool) {
        let reasons = transitions.map(|t| t.map(|t| self.reason(&t, reset)));
        let mut first_drop = false;
        for (t, reason) in transitions.iter().zip(reasons) {
            let (Some(t), Some(reason)) = (t, reason) else {
                continue;
            };
            let events = if !t.quiet && self.events.is_observed() {
                self.events_of(t, reason)
            } else {
                Default::default()
            };
            first_drop |= self
                .order
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .admit(t.generations, events, &self.events);
        }
        // Logged once both transitions are queued, out of the lock: a
        // tracing subscriber that panics there leaves the order whole
        // (reviews 29, 30 and 32).
        if first_drop {
            EventHub::log_first_drop(&self.name);
        }
        for (t, reason) in transitions.iter().zip(reasons) {
            if let (Some(t), Some(reason)) = (t, reason) {
                if !t.quiet {
                    self.log(t, reason);
                }
            }
        }
    }

    /// The events of transition `t`, in the order subscribers get them.
    fn events_of(&self, t: &Transition, reason: TransitionReason) -> Events {
        let (from, to) = (State::of(t.from), State::of(t.to));
        let mut events: Events = Default::default();
        if let Cause::Rates {
            failure_rate,
            slow_call_rate,
            failure_tripped,
            slow_tripped,
            ..
        } = t.cause
        {
            if failure_tripped {
                events[0] = Some(BreakerEvent::FailureRateExceeded {
                    name: Arc::clone(&self.name),
                    rate: failure_rate,
                });
            }
            if slow_tripped {
                events[1] = Some(BreakerEvent::SlowCallRateExceeded {
                    name: Arc::clone(&self.name),
                    rate: slow_call_rate,
                });
            }
        }
        events[2] = Some(BreakerEvent::StateTransition {
            name: Arc::clone(&self.name),
            from,
            to,
            reason,
        });
        events
    }

    /// Counts transition `t` and logs it.
    fn log(&self, t: &Transition, reason: TransitionReason) {
        let (from, to) = (State::of(t.from), State::of(t.to));
        #[cfg(feature = "metrics")]
        self.transitions[from as usize * STATE_COUNT + to as usize].fetch_add(1, Ordering::Relaxed);
        #[cfg(feature = "tracing")]
        {
            let name: &str = &self.name;
            let (rate, threshold, calls, hold) = reason.fields();
            if matches!(to, State::Open | State::ForcedOpen) {
                tracing::warn!(
                    breaker = name, %from, %to, %reason, rate, threshold, calls, hold_ms = hold,
                    "circuit breaker opened"
                );
            } else {
                tracing::info!(
                    breaker = name, %from, %to, %reason, rate, threshold, calls,
                    "circuit breaker changed state"
                );
            }
        }
        #[cfg(not(feature = "tracing"))]
        let _ = (from, to, reason);
    }
}

/// The events of one transition: the thresholds it tripped, then the
/// transition itself.
type Events = [Option<BreakerEvent>; 3];

/// How many transitions may wait for an earlier one to be announced: far
/// more than a breaker makes while one thread is preempted between making
/// a transition and announcing it (review 26 saw 4 overflow on two cores).
const PARKED: usize = 4096;

/// Puts a breaker's transitions in the order they were made. Each changes
/// the state word from one generation to the next, but two threads that
/// make two transitions one after the other may reach their announcements
/// the other way round (review 22 saw subscribers get `closed -> open`
/// after the `open -> half_open` that followed it). So a transition is
/// queued only once the one before it (the transition into its `from`
/// generation) has been, starting from the breaker's first generation; a
/// transition that comes early waits here, and is queued by the one it
/// waited for. Every transition is announced right after it is made, with
/// nothing between that can fail, so the wait lasts at most as long as the
/// thread that made the earlier one is kept off the processor. Only if
/// `PARKED` wait are they queued in their order without it; if it comes
/// after that, it is queued as it comes, late.
struct Order {
    /// The generation the last queued transition made (the breaker's
    /// first, 0, before any).
    last: u32,
    /// Transitions waiting for an earlier one: empty, and unallocated,
    /// unless two announcements crossed.
    parked: Vec<((u32, u32), Events)>,
    /// How many may wait: `PARKED`.
    limit: usize,
}

impl Order {
    /// For a breaker whose state word starts at generation 0.
    fn new() -> Order {
        Order::starting_at(0, PARKED)
    }

    fn starting_at(last: u32, limit: usize) -> Order {
        Order {
            last,
            parked: Vec::new(),
            limit,
        }
    }

    /// Queues the transition, or parks it; `true` if the hub dropped its
    /// first event doing so (for the caller to log, out of the lock).
    fn admit(&mut self, generations: (u32, u32), events: Events, hub: &EventHub) -> bool {
        if generations.0 == self.last {
            let first_drop = self.queue(generations, events, hub);
            return self.release(hub) || first_drop;
        }
        if !gen_newer(u64::from(generations.0), u64::from(self.last)) {
            // Late: the transitions after it went without it when too
            // many waited (below). Queued now, out of their order, rather
            // than parked behind a generation that has already passed,
            // where it would wait for good.
            return hub.emit_transition_quietly(&events);
        }
        if self.parked.len() < self.limit {
            self.parked.push((generations, events));
            return false;
        }
        // One never came: the waiting ones and this one go, earliest
        // (nearest after the last queued) first.
        self.parked.push((generations, events));
        let last = self.last;
        let mut waiting = std::mem::take(&mut self.parked);
        waiting.sort_unstable_by_key(|(g, _)| generations_after(g.0, last));
        let mut first_drop = false;
        for (g, e) in waiting {
            first_drop |= self.queue(g, e, hub);
        }
        first_drop
    }

    /// Queues a transition's events, without logging (see `admit`): no
    /// code but this crate's runs under the lock.
    fn queue(&mut self, generations: (u32, u32), events: Events, hub: &EventHub) -> bool {
        self.last = generations.1;
        hub.emit_transition_quietly(&events)
    }

    /// Queues the waiting transitions whose turn has come.
    fn release(&mut self, hub: &EventHub) -> bool {
        let mut first_drop = false;
        while let Some(i) = self.parked.iter().position(|(g, _)| g.0 == self.last) {
            let (g, e) = self.parked.swap_remove(i);
            first_drop |= self.queue(g, e, hub);
        }
        first_drop
    }
}

/// Leave to make one call through a [`Breaker`]. Report how the call went
/// with [`BreakerPermit::record`]; dropping the permit instead means the call
/// was cancelled: nothing is recorded, and a half-open probe slot is handed
/// back.
#[must_use = "a permit dropped without `record` counts as a cancelled call"]
pub struct BreakerPermit<'a> {
    breaker: &'a Breaker,
    admission: Admission,
    /// How the call is timed, for the slow-call check.
    timing: Timing,
    done: bool,
}

impl fmt::Debug for BreakerPermit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BreakerPermit")
            .field("breaker", &self.breaker.name)
            .field("admitted_in", &State::of(self.admission.phase))
            .finish_non_exhaustive()
    }
}

impl BreakerPermit<'_> {
    /// Reports the call's outcome: `None` for success, or how its error was
    /// classified. The call's duration, measured from the acquire, decides
    /// whether it was slow.
    pub fn record(self, result: Option<crate::Classification>) {
        let outcome = result.map_or(Outcome::Success, Outcome::of_failure);
        self.record_at(outcome, Some(Instant::now()));
    }

    /// Starts the call's clock again, now: the permit was taken before a
    /// wait (for a bulkhead slot) that is not the dependency's time. `now`:
    /// tokio's time, if the caller read it.
    pub(crate) fn restart(&mut self, now: Option<Instant>) {
        let now = now.unwrap_or_else(Instant::now);
        self.timing = match self.timing {
            Timing::Coarse { .. } => Timing::in_call(self.breaker, now),
            Timing::Exact(_) => Timing::exact(self.breaker, now),
        };
    }

    /// The body has had to wait: the call is timed on tokio's clock, from
    /// its start, which a test may pause and advance. The threshold is added
    /// to the start only now: a body ready at once never needs it.
    #[inline]
    pub(crate) fn waited(&mut self) {
        if let Timing::Coarse { began, .. } = self.timing {
            self.timing = Timing::exact(self.breaker, began);
        }
    }

    /// Records the attempt's outcome at its end: `now`, tokio's time, if
    /// the caller read it (else read here if the record needs it).
    #[inline]
    pub(crate) fn record_at(mut self, outcome: Outcome, now: Option<Instant>) {
        self.record_in_place(outcome, now, None);
    }

    /// [`record_at`](Self::record_at) where the permit lies, which its drop
    /// then leaves alone: the lean path's permit was written field by field
    /// moments before, and moving it out whole to record it stalled the
    /// copy's loads on AMD processors.
    ///
    /// A transition the record makes is announced inside `span` (the
    /// call's), entered only then: the steady path enters no span here.
    #[inline]
    #[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
    pub(crate) fn record_in_place(
        &mut self,
        outcome: Outcome,
        now: Option<Instant>,
        span: Option<&crate::telemetry::CallSpan>,
    ) {
        if self.done {
            return;
        }
        self.done = true;
        let breaker = self.breaker;
        let config = &breaker.config;
        // The end is compared with the start as `Instant`s, and converted
        // to the core's nanoseconds only if the record needs the time.
        let mut now_ns = Ticks {
            breaker,
            at: now,
            ns: None,
        };
        let mut slow = || match self.timing {
            Timing::Exact(after) => after.is_some_and(|after| now_ns.instant() > after),
            // Slow only past a tick beyond the threshold: a coarse reading
            // never makes slow a call that was not.
            Timing::Coarse { start, .. } => {
                let slow_past = breaker.coarse_slow.unwrap_or(u64::MAX);
                crate::clock::now().nanos_since(start) > slow_past
            }
        };
        let sample = match outcome {
            Outcome::Ignored => Sample::Ignored,
            Outcome::Success => Sample::Call {
                failed: false,
                slow: slow(),
                hold_until_ns: None,
            },
            Outcome::Failure { retry_after } => Sample::Call {
                failed: true,
                slow: slow(),
                // Bounded: a `Retry-After` of days (or `Duration::MAX`) from a
                // broken or hostile server holds for `max_retry_after_hold`.
                hold_until_ns: retry_after
                    .filter(|d| config.honor_retry_after && !d.is_zero())
                    .map(|d| {
                        now_ns
                            .ns()
                            .saturating_add(nanos(d.min(config.max_retry_after_hold)))
                    }),
            },
        };
        breaker
            .core
            .record_then(self.admission, sample, now_ns, |transitions| {
                #[cfg(feature = "tracing")]
                let _in_span = span.map(tracing::Span::enter);
                breaker.announce(transitions, false);
            });
    }
}

/// How a call is timed for the slow-call check.
#[derive(Debug, Clone, Copy)]
enum Timing {
    /// On tokio's clock: slow after this instant (never, past the end of
    /// the clock). The threshold is added once, at the start, which costs
    /// less than a subtraction at the end.
    Exact(Option<Instant>),
    /// On the coarse clock from `start`, while the body has not waited;
    /// on tokio's, from `began` (the call's start on it), once it has (see
    /// `crate::clock`).
    Coarse {
        start: crate::clock::Coarse,
        began: Instant,
    },
}

impl Timing {
    /// On tokio's clock from `start`.
    #[inline]
    fn exact(breaker: &Breaker, start: Instant) -> Timing {
        Timing::Exact(Timing::slow_after(breaker, start))
    }

    /// The timing of a call of an annotated function started at `start` on
    /// tokio's clock: on the coarse clock where there is one.
    #[inline]
    fn in_call(breaker: &Breaker, start: Instant) -> Timing {
        match breaker.coarse_slow {
            Some(_) => Timing::Coarse {
                start: crate::clock::now(),
                began: start,
            },
            None => Timing::exact(breaker, start),
        }
    }

    /// On tokio's clock, a call started at `start` is slow after this.
    #[inline]
    fn slow_after(breaker: &Breaker, start: Instant) -> Option<Instant> {
        start.checked_add(breaker.config.slow_call_duration_threshold)
    }
}

/// The end of a call: tokio's time, read on first ask if the caller did
/// not, and converted to the core's nanoseconds on first ask. Every use in
/// one record sees the same time.
struct Ticks<'a> {
    breaker: &'a Breaker,
    at: Option<Instant>,
    ns: Option<u64>,
}

impl Ticks<'_> {
    fn instant(&mut self) -> Instant {
        *self.at.get_or_insert_with(Instant::now)
    }
}

impl Now for Ticks<'_> {
    fn ns(&mut self) -> u64 {
        if let Some(ns) = self.ns {
            return ns;
        }
        let ns = self.breaker.since_origin(self.instant());
        self.ns = Some(ns);
        ns
    }
}

impl Drop for BreakerPermit<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.breaker.core.release(self.admission);
        }
    }
}

#[cfg(all(test, feature = "tracing"))]
mod tests {
    //! The log lines a transition writes, captured by a minimal subscriber
    //! (the crate has no dependency on `tracing-subscriber`).

    use std::fmt;
    use std::sync::{Arc, Mutex};

    use tracing::field::{Field, Visit};
    use tracing::span::{Attributes, Id, Record};
    use tracing::{Event, Level, Metadata};

    use super::*;
    use crate::Classification;

    type Lines = Arc<Mutex<Vec<(Level, Vec<(String, String)>)>>>;

    struct Capture(Lines);

    struct Fields(Vec<(String, String)>);

    impl Visit for Fields {
        fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
            self.0.push((field.name().to_owned(), format!("{value:?}")));
        }
    }

    impl tracing::Subscriber for Capture {
        fn enabled(&self, _: &Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &Attributes<'_>) -> Id {
            Id::from_u64(1)
        }
        fn record(&self, _: &Id, _: &Record<'_>) {}
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, event: &Event<'_>) {
            let mut fields = Fields(Vec::new());
            event.record(&mut fields);
            self.0
                .lock()
                .unwrap()
                .push((*event.metadata().level(), fields.0));
        }
        fn enter(&self, _: &Id) {}
        fn exit(&self, _: &Id) {}
    }

    fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
        fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn opening_logs_a_warning_with_its_reason_and_closing_an_info() {
        let lines = Lines::default();
        let config = BreakerConfig::default()
            .sliding_window(SlidingWindow::CountBased { size: 4 })
            .minimum_number_of_calls(4);
        let breaker = Breaker::new("payments", config).unwrap();
        tracing::subscriber::with_default(Capture(lines.clone()), || {
            for _ in 0..4 {
                breaker
                    .try_acquire()
                    .unwrap()
                    .record(Some(Classification::Transient));
            }
            breaker.reset();
        });
        let lines = lines.lock().unwrap();
        let transitions: Vec<_> = lines
            .iter()
            .filter(|(_, f)| field(f, "breaker") == Some("\"payments\""))
            .collect();
        assert_eq!(transitions.len(), 2, "{lines:?}");
        let (level, opened) = transitions[0];
        assert_eq!(*level, Level::WARN);
        assert_eq!(field(opened, "from"), Some("closed"));
        assert_eq!(field(opened, "to"), Some("open"));
        assert_eq!(
            field(opened, "reason"),
            Some("failure rate 100.0 % over 4 calls >= threshold 50 %")
        );
        assert_eq!(field(opened, "rate"), Some("100.0"));
        assert_eq!(field(opened, "threshold"), Some("50.0"));
        assert_eq!(field(opened, "calls"), Some("4"));
        let (level, closed) = transitions[1];
        assert_eq!(*level, Level::INFO);
        assert_eq!(field(closed, "to"), Some("closed"));
        assert_eq!(field(closed, "reason"), Some("reset by hand"));
    }
}

#[cfg(test)]
mod order_tests {
    //! [`Order`]: transitions announced out of order are queued in order.

    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use super::*;

    /// Events that tell transitions apart: the "rate" is the generation made.
    fn events(made: u32) -> Events {
        [
            None,
            None,
            Some(BreakerEvent::FailureRateExceeded {
                name: Arc::from("order"),
                rate: made as f32,
            }),
        ]
    }

    /// How many may wait in these tests.
    const LIMIT: usize = 4;

    fn delivered(admitted: &[(u32, u32)]) -> Vec<u32> {
        delivered_from(0, admitted)
    }

    fn delivered_from(start: u32, admitted: &[(u32, u32)]) -> Vec<u32> {
        let hub = EventHub::new();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sub = {
            let seen = seen.clone();
            hub.subscribe(move |e| {
                if let BreakerEvent::FailureRateExceeded { rate, .. } = e {
                    seen.lock().unwrap().push(*rate as u32);
                }
            })
        };
        let mut order = Order::starting_at(start, LIMIT);
        for &g in admitted {
            order.admit(g, events(g.1), &hub);
        }
        assert!(sub.flush(Duration::from_secs(5)));
        let delivered = seen.lock().unwrap().clone();
        drop(sub);
        delivered
    }

    #[test]
    fn transitions_in_order_are_queued_at_once() {
        assert_eq!(delivered(&[(0, 1), (1, 2), (2, 3)]), [1, 2, 3]);
    }

    #[test]
    fn an_early_transition_waits_for_the_one_before_it() {
        assert_eq!(delivered(&[(0, 1), (2, 3), (3, 4), (1, 2)]), [1, 2, 3, 4]);
    }

    /// The breaker's first transition announced after its second: the
    /// first was parked for good when the order started from whichever
    /// came first (review 26).
    #[test]
    fn the_first_transition_may_come_second() {
        assert_eq!(delivered(&[(1, 2), (2, 3), (0, 1)]), [1, 2, 3]);
    }

    #[test]
    fn generations_wrap() {
        let top = (1 << 21) - 1;
        assert_eq!(
            delivered_from(top - 1, &[(top - 1, top), (0, 1), (top, 0)]),
            [top, 0, 1]
        );
    }

    /// One that never comes holds back no more than the limit of
    /// transitions: then they go, earliest first.
    #[test]
    fn a_transition_that_never_comes_holds_back_a_few_at_most() {
        let mut admitted = vec![(0, 1)];
        // (1, 2) never comes.
        admitted.extend((2..=(2 + LIMIT as u32)).rev().map(|g| (g, g + 1)));
        let mut expected: Vec<u32> = (3..=(3 + LIMIT as u32)).collect();
        expected.insert(0, 1);
        assert_eq!(delivered(&admitted), expected);
        // And the order goes on from the last one.
        let last = 3 + LIMIT as u32;
        let mut more = admitted.clone();
        more.push((last, last + 1));
        expected.push(last + 1);
        assert_eq!(delivered(&more), expected);
    }

    /// The one the others waited for comes after they went without it:
    /// delivered late, not parked behind a generation that has passed
    /// (where it waited for good, uncounted; review 37).
    #[test]
    fn a_transition_that_comes_after_the_others_went_is_delivered_late() {
        let mut admitted = vec![(0, 1)];
        admitted.extend((2..=(2 + LIMIT as u32)).rev().map(|g| (g, g + 1)));
        admitted.push((1, 2));
        let mut expected: Vec<u32> = (3..=(3 + LIMIT as u32)).collect();
        expected.insert(0, 1);
        expected.push(2);
        assert_eq!(delivered(&admitted), expected);
        // And the order goes on from the last in order, not the late one.
        let last = 3 + LIMIT as u32;
        admitted.push((last, last + 1));
        expected.push(last + 1);
        assert_eq!(delivered(&admitted), expected);
    }
}
