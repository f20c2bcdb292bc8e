//! Metrics through the [`metrics`](https://docs.rs/metrics) facade
//! (feature `metrics`): every name the crate records, and the publisher of
//! the registry's parts.
//!
//! # Getting a dashboard
//!
//! Install a recorder (e.g. `metrics-exporter-prometheus`) **at start-up,
//! before the first annotated call** (each call site registers its
//! counters once, with the recorder installed at that moment), then
//! publish the registry's breakers, bulkheads and budgets:
//!
//! ```no_run
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use std::time::Duration;
//! // metrics_exporter_prometheus::PrometheusBuilder::new()
//! //     .with_http_listener(([0, 0, 0, 0], 9000))
//! //     .install()
//! //     .unwrap();
//! let _publisher = resilient::metrics::spawn_publisher(
//!     resilient::Registry::global().clone(),
//!     Duration::from_secs(5),
//! );
//! # }
//! ```
//!
//! # Names
//!
//! Every name is a constant below, with its unit and labels. They follow
//! the [Prometheus naming conventions](https://prometheus.io/docs/practices/naming/):
//! a `resilient_` prefix, base units in the name (`_seconds`), `_total` on
//! counters, ratios from 0 to 1 named `_ratio`. They mirror what
//! [Resilience4j's Micrometer
//! binding](https://resilience4j.readme.io/docs/micrometer) records (per
//! breaker: `resilience4j_circuitbreaker_state` with a `state` label set to 1
//! for the current state, `…_failure_rate`, `…_slow_call_rate`,
//! `…_not_permitted_calls_total`; per retry: `resilience4j_retry_calls_total`
//! by `kind`; per bulkhead: available and maximum concurrent calls) and
//! [Polly v8's meter](https://www.pollydocs.org/advanced/telemetry.html)
//! (`resilience.polly.strategy.attempt.duration` per attempt,
//! `resilience.polly.pipeline.duration` per execution, events by name).
//! Where they differ, this crate takes the Prometheus convention: rates as
//! ratios (Resilience4j reports percent), durations in seconds (Polly
//! reports milliseconds), one counter per call outcome.
//!
//! # Labels
//!
//! Labels come only from names fixed in the program: the annotated
//! function's path (`module::name`, from the attribute) and the names of
//! breakers, bulkheads and budgets (from the attribute or the
//! configuration), plus fixed vocabularies (`outcome`, `reason`, `state`).
//! Never from a request or an error's text: the number of series is bounded
//! by the code and the configuration.
//!
//! # Cost
//!
//! A call site registers its handles on its first call (allocating once);
//! after that a call records without allocating or locking in this crate:
//! one counter per call and per attempt, one histogram sample per call and
//! per attempt, and the clock reads those durations need (up to two per
//! call and two per attempt where the call would not read the clock
//! anyway). What the recorder does with a sample is the recorder's cost.

use std::fmt;
use std::sync::Once;
use std::time::Duration;

use ::metrics::{Counter, Histogram, Unit};
use tokio::task::JoinHandle;

use crate::telemetry::{AttemptEnd, CallOutcome};
use crate::{ErrorKind, Registry, State};

// ----- per annotated function ------------------------------------------------

/// Counter: annotated calls ended, by outcome.
///
/// Labels: `function` (the annotated function's path); `outcome`:
/// `success`; `failure` (the function's own error, after any retries);
/// `timeout` (its last attempt was cut by the attempt timeout or the
/// deadline); `refused` (the library refused to run it: breaker open,
/// bulkhead full, load shed, a deadline already passed, shutting down);
/// `fallback` (the call failed and its fallback answered); `cancelled`
/// (its caller dropped it before it ended, its fallback included, or a
/// panic unwound it: the caller's own timeout, a
/// `select!` that chose another branch, a client gone; neither a success
/// nor a failure of the dependency, so no breaker counts it, but a
/// dependency that hangs under callers' own timeouts shows here). With
/// `outcome="refused"`, `reason`: the refusal's [`ErrorKind::as_str`]
/// (`breaker_open`, `bulkhead_full`, `load_shed`, `deadline_exceeded`,
/// `unknown_name`, `shutting_down`).
pub const CALLS: &str = "resilient_calls_total";

/// Histogram, seconds: how long annotated calls took, first attempt to
/// result, sleeps between retries included (and, for `fallback`, the
/// fallback's own time, to its answer).
///
/// Labels: `function`; `outcome` as in [`CALLS`] (without `reason`).
pub const CALL_DURATION: &str = "resilient_call_duration_seconds";

/// Counter: attempts ended, by outcome.
///
/// Labels: `function`; `outcome`: `success`, `failure` (the body returned
/// an error), `timeout` (its timeout or the deadline cut it), `refused` (a
/// breaker, throttle or bulkhead refused it before it ran), `cancelled`
/// (dropped while it ran, with its call: see [`CALLS`]).
pub const ATTEMPTS: &str = "resilient_attempts_total";

/// Histogram, seconds: how long each attempt's body ran (after any wait for
/// a bulkhead slot). Refused attempts did not run and are not recorded.
///
/// Labels: `function`; `outcome`: `success`, `failure`, `timeout`.
pub const ATTEMPT_DURATION: &str = "resilient_attempt_duration_seconds";

/// Counter: retries made (attempts after a call's first), each counted as
/// [`ATTEMPTS`] counts it: once admitted, or refused by the breaker,
/// throttle or bulkhead; not a retry the call was dropped before (during
/// its backoff, or while it waited for a bulkhead slot).
///
/// Labels: `function`.
pub const RETRIES: &str = "resilient_retries_total";

// ----- per breaker (published from the registry) ------------------------------

/// Gauge: 1 for the breaker's current state, 0 for the others.
///
/// Labels: `breaker`; `state`: `closed`, `open`, `half_open`,
/// `forced_open`, `disabled`, `metrics_only`.
pub const BREAKER_STATE: &str = "resilient_breaker_state";

/// Gauge, ratio 0 to 1: failed calls among the calls in the breaker's
/// window; NaN until the window holds `minimum_number_of_calls`.
///
/// Labels: `breaker`.
pub const BREAKER_FAILURE_RATIO: &str = "resilient_breaker_failure_ratio";

/// Gauge, ratio 0 to 1: slow calls among the calls in the window; NaN until
/// the window holds `minimum_number_of_calls`.
///
/// Labels: `breaker`.
pub const BREAKER_SLOW_CALL_RATIO: &str = "resilient_breaker_slow_call_ratio";

/// Gauge, calls: outcomes in the breaker's window.
///
/// Labels: `breaker`.
pub const BREAKER_BUFFERED_CALLS: &str = "resilient_breaker_buffered_calls";

/// Counter: calls the breaker refused without running them, since it was
/// made ([`Breaker::reset`](crate::Breaker::reset) zeroes the snapshot's
/// count, not this one).
///
/// Labels: `breaker`.
pub const BREAKER_NOT_PERMITTED: &str = "resilient_breaker_not_permitted_calls_total";

/// Counter: state transitions since the breaker was made. Each breaker
/// counts its own as they happen; the counter is set to those totals by
/// [`publish`] and at once by [`spawn_publisher`] on each transition, so
/// none is missed when the breaker event queue drops events.
///
/// Labels: `breaker`; `from` and `to`: states as in [`BREAKER_STATE`].
pub const BREAKER_TRANSITIONS: &str = "resilient_breaker_transitions_total";

// ----- per bulkhead -----------------------------------------------------------

/// Gauge, calls: slots taken now.
///
/// Labels: `bulkhead`.
pub const BULKHEAD_IN_FLIGHT: &str = "resilient_bulkhead_in_flight_calls";

/// Gauge, calls: the bulkhead's limit (`max_concurrent`).
///
/// Labels: `bulkhead`.
pub const BULKHEAD_MAX_CONCURRENT: &str = "resilient_bulkhead_max_concurrent_calls";

/// Gauge, calls: annotated calls waiting for a slot now (counted by the
/// calls themselves, as they wait).
///
/// Labels: `bulkhead`.
pub const BULKHEAD_WAITING: &str = "resilient_bulkhead_waiting_calls";

/// Counter: calls refused for want of a slot.
///
/// Labels: `bulkhead`.
pub const BULKHEAD_REFUSED: &str = "resilient_bulkhead_refused_calls_total";

// ----- per retry budget -------------------------------------------------------

/// Gauge, retries: what the budget would still grant now (see
/// [`BudgetSnapshot::remaining`](crate::BudgetSnapshot::remaining)).
///
/// Labels: `budget`.
pub const BUDGET_REMAINING: &str = "resilient_budget_remaining_retries";

/// Counter: retries the budget granted (for annotated functions, counted
/// when the retry's attempt goes out; a grant given back, the retry not
/// made or refused by a breaker, bulkhead or throttle, is not counted).
///
/// Labels: `budget`.
pub const BUDGET_GRANTED: &str = "resilient_budget_granted_retries_total";

/// Counter: retries the budget refused (each one a call that gave up).
///
/// Labels: `budget`.
pub const BUDGET_REFUSED: &str = "resilient_budget_refused_retries_total";

// ----- process ----------------------------------------------------------------

/// Gauge: work in flight, when [`GracefulShutdown`](crate::GracefulShutdown)
/// counts it, as [`GracefulShutdown::in_flight`](crate::GracefulShutdown::in_flight)
/// does: annotated calls and units of work begun with
/// [`admitted`](crate::admitted) (every request a `ResilienceLayer`
/// serves is one).
///
/// No labels.
pub const IN_FLIGHT: &str = "resilient_in_flight_calls";

/// Gauge: 1 while draining for a graceful shutdown, else 0.
///
/// No labels.
pub const SHUTTING_DOWN: &str = "resilient_shutting_down";

/// Registers every metric's unit and description with the installed
/// recorder (Prometheus shows them as `# HELP` lines). Done on the first
/// annotated call or publish; call it yourself to describe them earlier.
pub fn describe() {
    static DESCRIBED: Once = Once::new();
    DESCRIBED.call_once(|| {
        use ::metrics::{describe_counter, describe_gauge, describe_histogram};
        describe_counter!(CALLS, Unit::Count, "Annotated calls ended, by outcome.");
        describe_histogram!(
            CALL_DURATION,
            Unit::Seconds,
            "Duration of annotated calls, retries included."
        );
        describe_counter!(ATTEMPTS, Unit::Count, "Attempts ended, by outcome.");
        describe_histogram!(
            ATTEMPT_DURATION,
            Unit::Seconds,
            "Duration of each attempt's body."
        );
        describe_counter!(RETRIES, Unit::Count, "Retries made.");
        describe_gauge!(BREAKER_STATE, "1 for the breaker's current state.");
        describe_gauge!(
            BREAKER_FAILURE_RATIO,
            "Failure ratio in the breaker's window."
        );
        describe_gauge!(
            BREAKER_SLOW_CALL_RATIO,
            "Slow-call ratio in the breaker's window."
        );
        describe_gauge!(
            BREAKER_BUFFERED_CALLS,
            Unit::Count,
            "Outcomes in the breaker's window."
        );
        describe_counter!(
            BREAKER_NOT_PERMITTED,
            Unit::Count,
            "Calls refused by the breaker."
        );
        describe_counter!(
            BREAKER_TRANSITIONS,
            Unit::Count,
            "Breaker state transitions."
        );
        describe_gauge!(BULKHEAD_IN_FLIGHT, Unit::Count, "Bulkhead slots taken.");
        describe_gauge!(BULKHEAD_MAX_CONCURRENT, Unit::Count, "Bulkhead slot limit.");
        describe_gauge!(
            BULKHEAD_WAITING,
            Unit::Count,
            "Calls waiting for a bulkhead slot."
        );
        describe_counter!(
            BULKHEAD_REFUSED,
            Unit::Count,
            "Calls refused by a full bulkhead."
        );
        describe_gauge!(
            BUDGET_REMAINING,
            Unit::Count,
            "Retries the budget would grant now."
        );
        describe_counter!(
            BUDGET_GRANTED,
            Unit::Count,
            "Retries granted by the budget."
        );
        describe_counter!(
            BUDGET_REFUSED,
            Unit::Count,
            "Retries refused by the budget."
        );
        describe_gauge!(IN_FLIGHT, Unit::Count, "Annotated calls in flight.");
        describe_gauge!(SHUTTING_DOWN, "1 while draining for shutdown.");
    });
}

/// One annotated function's handles, registered on its first call.
pub(crate) struct FunctionMetrics {
    function: &'static str,
    calls: [Counter; 4],
    call_duration: [Histogram; 4],
    attempts: [Counter; 3],
    attempt_duration: [Histogram; 3],
    retries: Counter,
}

impl fmt::Debug for FunctionMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FunctionMetrics")
            .field("function", &self.function)
            .finish_non_exhaustive()
    }
}

const CALL_OUTCOMES: [&str; 4] = ["success", "failure", "timeout", "fallback"];

const ATTEMPT_OUTCOMES: [&str; 3] = ["success", "failure", "timeout"];

impl FunctionMetrics {
    pub(crate) fn new(function: &'static str) -> FunctionMetrics {
        describe();
        FunctionMetrics {
            function,
            calls: CALL_OUTCOMES
                .map(|o| ::metrics::counter!(CALLS, "function" => function, "outcome" => o)),
            call_duration: CALL_OUTCOMES.map(
                |o| ::metrics::histogram!(CALL_DURATION, "function" => function, "outcome" => o),
            ),
            attempts: ATTEMPT_OUTCOMES
                .map(|o| ::metrics::counter!(ATTEMPTS, "function" => function, "outcome" => o)),
            attempt_duration: ATTEMPT_OUTCOMES.map(
                |o| ::metrics::histogram!(ATTEMPT_DURATION, "function" => function, "outcome" => o),
            ),
            retries: ::metrics::counter!(RETRIES, "function" => function),
        }
    }

    pub(crate) fn call(&self, outcome: CallOutcome, took: Duration) {
        let i = match outcome {
            CallOutcome::Success => 0,
            CallOutcome::Failure => 1,
            CallOutcome::Timeout => 2,
            CallOutcome::Fallback => 3,
            CallOutcome::Refused(kind) => {
                // Refusals are rare and come in seven kinds: registered
                // when they happen rather than held per call site.
                refused_call(self.function, kind, took);
                return;
            }
        };
        self.calls[i].increment(1);
        self.call_duration[i].record(took.as_secs_f64());
    }

    pub(crate) fn attempt(&self, end: AttemptEnd, took: Duration) {
        let i = end as usize;
        self.attempts[i].increment(1);
        self.attempt_duration[i].record(took.as_secs_f64());
    }

    /// Rare (a caller's own timeout, a `select!`): registered when it
    /// happens, like refusals.
    pub(crate) fn cancelled_call(&self, took: Duration) {
        ::metrics::counter!(CALLS, "function" => self.function, "outcome" => "cancelled")
            .increment(1);
        ::metrics::histogram!(CALL_DURATION, "function" => self.function, "outcome" => "cancelled")
            .record(took.as_secs_f64());
    }

    pub(crate) fn cancelled_attempt(&self, took: Duration) {
        ::metrics::counter!(ATTEMPTS, "function" => self.function, "outcome" => "cancelled")
            .increment(1);
        ::metrics::histogram!(ATTEMPT_DURATION, "function" => self.function, "outcome" => "cancelled")
            .record(took.as_secs_f64());
    }

    pub(crate) fn attempt_refused(&self) {
        ::metrics::counter!(ATTEMPTS, "function" => self.function, "outcome" => "refused")
            .increment(1);
    }

    pub(crate) fn retry(&self) {
        self.retries.increment(1);
    }
}

/// A call refused before its handles were needed (or at all registered).
pub(crate) fn refused_call(function: &'static str, kind: ErrorKind, took: Duration) {
    describe();
    ::metrics::counter!(
        CALLS,
        "function" => function,
        "outcome" => "refused",
        "reason" => kind.as_str()
    )
    .increment(1);
    ::metrics::histogram!(CALL_DURATION, "function" => function, "outcome" => "refused")
        .record(took.as_secs_f64());
}

fn state_label(state: State) -> &'static str {
    match state {
        State::Closed => "closed",
        State::Open => "open",
        State::HalfOpen => "half_open",
        State::Disabled => "disabled",
        State::ForcedOpen => "forced_open",
        State::MetricsOnly => "metrics_only",
    }
}

/// Sets the transition counters of `breaker` to its totals: every pair of
/// states it moved between.
fn publish_transitions(breaker: &crate::Breaker) {
    for from in STATES {
        for to in STATES {
            let n = breaker.transitions_total(from, to);
            if n > 0 {
                ::metrics::counter!(
                    BREAKER_TRANSITIONS,
                    "breaker" => breaker.name().to_string(),
                    "from" => state_label(from),
                    "to" => state_label(to)
                )
                .absolute(n);
            }
        }
    }
}

const STATES: [State; 6] = [
    State::Closed,
    State::Open,
    State::HalfOpen,
    State::ForcedOpen,
    State::Disabled,
    State::MetricsOnly,
];

/// Writes the state of every breaker, bulkhead and budget of `registry`,
/// and the graceful-shutdown gauges, to the installed recorder: gauges set,
/// counters set to their totals. Takes one
/// [snapshot](Registry::snapshot) (it allocates; call it from a timer or
/// before a scrape, not per request). [`spawn_publisher`] does it
/// periodically.
pub fn publish(registry: &Registry) {
    describe();
    let snapshot = registry.snapshot();
    for b in &snapshot.breakers {
        let name = b.name.clone();
        for state in STATES {
            ::metrics::gauge!(BREAKER_STATE, "breaker" => name.clone(), "state" => state_label(state))
                .set(if state == b.state { 1.0 } else { 0.0 });
        }
        let ratio = |pct: Option<f32>| pct.map_or(f64::NAN, |p| f64::from(p) / 100.0);
        ::metrics::gauge!(BREAKER_FAILURE_RATIO, "breaker" => name.clone())
            .set(ratio(b.failure_rate));
        ::metrics::gauge!(BREAKER_SLOW_CALL_RATIO, "breaker" => name.clone())
            .set(ratio(b.slow_call_rate));
        ::metrics::gauge!(BREAKER_BUFFERED_CALLS, "breaker" => name.clone())
            .set(f64::from(b.buffered_calls));
        // The snapshot counts from the breaker's last reset; a counter
        // never goes down (recorders keep the largest value given), so it
        // exports every refusal since the breaker was made.
        let refused = registry
            .breaker(&b.name)
            .map_or(b.not_permitted_calls, |breaker| {
                breaker.not_permitted_total()
            });
        ::metrics::counter!(BREAKER_NOT_PERMITTED, "breaker" => name).absolute(refused);
        if let Some(breaker) = registry.breaker(&b.name) {
            publish_transitions(&breaker);
        }
    }
    for b in &snapshot.bulkheads {
        let name = b.name.clone();
        ::metrics::gauge!(BULKHEAD_IN_FLIGHT, "bulkhead" => name.clone()).set(b.in_flight as f64);
        ::metrics::gauge!(BULKHEAD_MAX_CONCURRENT, "bulkhead" => name.clone())
            .set(b.max_concurrent as f64);
        ::metrics::counter!(BULKHEAD_REFUSED, "bulkhead" => name).absolute(b.rejected);
    }
    for b in &snapshot.budgets {
        let name = b.name.clone();
        ::metrics::gauge!(BUDGET_REMAINING, "budget" => name.clone()).set(b.remaining as f64);
        ::metrics::counter!(BUDGET_GRANTED, "budget" => name.clone()).absolute(b.granted);
        ::metrics::counter!(BUDGET_REFUSED, "budget" => name).absolute(b.refused);
    }
    let shutdown = crate::GracefulShutdown;
    ::metrics::gauge!(IN_FLIGHT).set(shutdown.in_flight() as f64);
    ::metrics::gauge!(SHUTTING_DOWN).set(if shutdown.is_draining() { 1.0 } else { 0.0 });
}

/// Publishes `registry` every `every` (see [`publish`]) and publishes breaker
/// transitions as they happen ([`BREAKER_TRANSITIONS`]), updating the
/// state gauges at once. Runs on the current tokio runtime until the
/// returned handle is dropped.
///
/// Its subscription to breaker events makes the breakers deliver them: on
/// the refusal path (a call an open breaker turns away), not on a call that
/// succeeds in a closed breaker. A slow subscriber of the same registry
/// delays the gauges (events are delivered in order, to one subscriber
/// after another); a flood of rejections cannot make a transition be
/// dropped (see [`EventHub::RESERVED_FOR_TRANSITIONS`](crate::EventHub::RESERVED_FOR_TRANSITIONS)),
/// and if transitions ever are, the next periodic publish sets the gauges
/// from the breakers' states.
///
/// # Panics
///
/// Outside a tokio runtime, like `tokio::spawn`.
pub fn spawn_publisher(registry: Registry, every: Duration) -> Publisher {
    describe();
    let breakers = registry.clone();
    let events = registry.subscribe(move |event| {
        if let crate::BreakerEvent::StateTransition { name, to, .. } = event {
            // The totals the breaker counted, not one per event: an event
            // the queue dropped (a slow subscriber, a burst of refusals)
            // is counted all the same, here or at the next publish.
            if let Some(breaker) = breakers.breaker(name) {
                publish_transitions(&breaker);
            }
            for state in STATES {
                ::metrics::gauge!(BREAKER_STATE, "breaker" => name.to_string(), "state" => state_label(state))
                    .set(if state == *to { 1.0 } else { 0.0 });
            }
        }
    });
    let every = every.max(Duration::from_millis(1));
    let task = tokio::spawn(async move {
        let _events = events;
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            publish(&registry);
        }
    });
    Publisher { task }
}

/// The task [`spawn_publisher`] started; dropping it stops publishing.
#[derive(Debug)]
#[must_use = "dropping the publisher stops it at once"]
pub struct Publisher {
    task: JoinHandle<()>,
}

impl Drop for Publisher {
    fn drop(&mut self) {
        self.task.abort();
    }
}
