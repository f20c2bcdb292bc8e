//! The engine's lean path for calls that name a breaker, budget or
//! bulkhead, exercised from outside in the outage shapes users meet.
//!
//! When a call's parts come from the GLOBAL registry (installed once, with
//! `Registry::builder()…build()?.install()`), its first attempt is
//! admitted, run and its success recorded in a hand-written future
//! (`runtime/src/engine/lean.rs`) instead of the `async` engine; a first
//! attempt that must wait for a bulkhead slot is handed over to the engine
//! with its breaker permit, one refused by the breaker or bulkhead is
//! concluded on the lean path, and a failed one with `retries` goes on in
//! the engine's retry loop. Calls whose parts come from a registry scoped
//! around the task (`registry.scope(fut)`, what most other test files use)
//! never take that path. So every test here runs against the global
//! registry, which is why this file is a test binary of its own: the global
//! registry is process-wide, installed once (by [`on_global_registry`],
//! which every test calls first) with a breaker, bulkhead and budget of its
//! own for each test, so that tests running in parallel do not meet.
//! The last test runs one script of calls through the lean path and through
//! the `async` engine (the same function, inside a scoped registry
//! configured identically) and compares what the parts recorded.
//!
//! Every test runs on tokio's paused clock: sleeps, timeouts, bulkhead
//! waits and breaker waits are exact and instantaneous.

use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::Poll;
use std::time::Duration;

use resilient::{
    BreakerConfig, BreakerSnapshot, BudgetConfig, BudgetSnapshot, BulkheadConfig, BulkheadSnapshot,
    Classification, Classify, ErrorKind, Registry, RegistryBuilder, SlidingWindow, State,
    resilient,
};
use tokio::sync::Notify;
use tokio::time::{Instant, advance, sleep};
use tracing_subscriber::layer::SubscriberExt;

// ---- The caller's error type ----

/// The functions' own error type: the library's refusals reach callers
/// through `From<resilient::Error>`.
#[derive(Debug)]
enum E {
    /// A transient failure of the dependency.
    Unavailable,
    /// A permanent one: not retried, not counted by breakers.
    Declined,
    /// A refusal by the library.
    Refused(resilient::Error),
}

impl From<resilient::Error> for E {
    fn from(e: resilient::Error) -> Self {
        E::Refused(e)
    }
}

impl Classify for E {
    fn classify(&self) -> Classification {
        match self {
            E::Unavailable => Classification::Transient,
            E::Declined => Classification::Permanent,
            E::Refused(e) => e.classify(),
        }
    }

    fn is_refusal(&self) -> Option<bool> {
        Some(matches!(self, E::Refused(_)))
    }
}

/// The library's refusal carried by `result`, or a panic naming what came
/// instead.
#[track_caller]
fn refusal<T: std::fmt::Debug>(result: Result<T, E>) -> resilient::Error {
    match result {
        Err(E::Refused(e)) => e,
        other => panic!("expected a refusal by the library, got {other:?}"),
    }
}

// ---- The global registry ----

const OPEN_WAIT: Duration = Duration::from_secs(5);
const SLOT_WAIT: Duration = Duration::from_secs(10);
const SLOW: Duration = Duration::from_secs(1);
const SLOW_EXACT: Duration = Duration::from_millis(100);
const BUDGET_WINDOW: Duration = Duration::from_secs(3600);

/// A count-based window of `size` outcomes, rated once it is full.
fn window(size: u32) -> BreakerConfig {
    BreakerConfig::default()
        .sliding_window(SlidingWindow::CountBased { size })
        .minimum_number_of_calls(size)
        .wait_duration_in_open_state(OPEN_WAIT)
}

/// One slot; callers wait for it up to `wait`.
fn one_slot(wait: Duration) -> BulkheadConfig {
    BulkheadConfig::default().max_concurrent(1).max_wait(wait)
}

/// Every part the tests use, one set per test.
fn global_parts() -> RegistryBuilder {
    let b = Registry::builder()
        .breaker(
            "lean-open",
            window(4).permitted_number_of_calls_in_half_open_state(1),
        )
        .breaker(
            "lean-probe-cancel",
            window(2).permitted_number_of_calls_in_half_open_state(1),
        )
        .bulkhead("lean-slot-cancel", one_slot(Duration::ZERO))
        .bulkhead("lean-drop-order", one_slot(Duration::ZERO))
        .bulkhead("lean-panic-copy", one_slot(Duration::ZERO))
        // Windows of 10 that these tests never fill: the breakers only count.
        .breaker("lean-wait", window(10).slow_call_duration_threshold(SLOW))
        .bulkhead("lean-wait", one_slot(SLOT_WAIT))
        .breaker(
            "lean-wait-retry",
            window(10).slow_call_duration_threshold(SLOW),
        )
        .bulkhead("lean-wait-retry", one_slot(SLOT_WAIT))
        .breaker("lean-wait-maxwait", window(10))
        .bulkhead("lean-wait-maxwait", one_slot(SLOT_WAIT))
        .bulkhead("lean-rejected", one_slot(SLOT_WAIT))
        .breaker("lean-wait-deadline", window(10))
        .bulkhead("lean-wait-deadline", one_slot(SLOT_WAIT))
        .breaker("lean-full", window(10))
        .bulkhead("lean-full", one_slot(Duration::ZERO))
        // Failures never open these two: only slow calls do.
        .breaker(
            "lean-slow",
            window(4)
                .failure_rate_threshold(100.0)
                .slow_call_rate_threshold(50.0)
                .slow_call_duration_threshold(SLOW),
        )
        .breaker(
            "lean-slow-exact",
            window(4)
                .failure_rate_threshold(100.0)
                .slow_call_rate_threshold(50.0)
                .slow_call_duration_threshold(SLOW_EXACT),
        )
        .breaker("lean-timeout", window(3))
        .breaker("lean-retry", window(10))
        // 20 % of the window's requests, no per-second reserve: see
        // `the_retry_budget_bounds_retries_and_counts_every_first_attempt`.
        .budget(
            "lean-budget",
            BudgetConfig::ratio(0.2)
                .min_retries_per_second(0)
                .window(BUDGET_WINDOW),
        );
    equivalence_parts(b)
}

/// The parts of the equivalence script, configured alike in the global
/// registry and in the scoped one.
fn equivalence_parts(b: RegistryBuilder) -> RegistryBuilder {
    b.breaker(
        "lean-equiv",
        BreakerConfig::default()
            .sliding_window(SlidingWindow::CountBased { size: 6 })
            .minimum_number_of_calls(4)
            .failure_rate_threshold(50.0)
            .slow_call_rate_threshold(100.0)
            .slow_call_duration_threshold(SLOW)
            .wait_duration_in_open_state(Duration::from_secs(10))
            .permitted_number_of_calls_in_half_open_state(2),
    )
    .bulkhead("lean-equiv", one_slot(Duration::from_secs(5)))
    .budget(
        "lean-equiv",
        BudgetConfig::ratio(0.5)
            .min_retries_per_second(0)
            .window(BUDGET_WINDOW),
    )
}

/// Installs the global registry, once for the whole binary, and brings this
/// test's paused clock up to the moment it was installed.
///
/// Breakers and budgets count time from when they were made. Built on a
/// plain thread, outside any runtime, they are made on the real clock; a
/// test whose runtime (and so its paused clock) started a moment before
/// would otherwise begin "before" its breaker, and an open breaker's wait
/// would seem to end that moment late.
async fn on_global_registry() {
    static INSTALLED_AT: OnceLock<std::time::Instant> = OnceLock::new();
    let installed_at = *INSTALLED_AT.get_or_init(|| {
        // Before any call, so that every call site's span is enabled from
        // its first use (a subscriber set per test could find a call site
        // already cached as disabled by another test's call).
        tracing::subscriber::set_global_default(tracing_subscriber::registry().with(SlotsAtClose))
            .expect("the only global subscriber");
        std::thread::spawn(|| {
            global_parts()
                .build()
                .expect("a valid configuration")
                .install()
                .expect("installed once, before any annotated call");
            std::time::Instant::now()
        })
        .join()
        .expect("the registry was installed")
    });
    if let Some(behind) = installed_at.checked_duration_since(Instant::now().into_std()) {
        // In whole milliseconds, tokio's timer's unit: advanced by a
        // fraction, the clock would be off the timer's grid, and every
        // sleep would end up to a millisecond late.
        let millis = u64::try_from(behind.as_millis()).expect("a moment") + 1;
        advance(Duration::from_millis(millis)).await;
    }
    assert!(Registry::current().same_as(Registry::global()));
}

fn breaker(name: &str) -> BreakerSnapshot {
    Registry::global()
        .breaker(name)
        .expect("a configured breaker")
        .snapshot()
}

fn bulkhead(name: &str) -> BulkheadSnapshot {
    Registry::global()
        .bulkhead(name)
        .expect("a configured bulkhead")
        .snapshot()
}

fn budget(name: &str) -> BudgetSnapshot {
    Registry::global()
        .budget(name)
        .expect("a budget configured, or made by a call")
        .snapshot()
}

fn count(runs: &AtomicUsize) -> usize {
    runs.load(Ordering::SeqCst)
}

/// Polls a future once: `Some` with its output if it was ready.
async fn poll_once<F: Future + Unpin>(fut: &mut F) -> Option<F::Output> {
    std::future::poll_fn(|cx| {
        Poll::Ready(match Pin::new(&mut *fut).poll(cx) {
            Poll::Ready(v) => Some(v),
            Poll::Pending => None,
        })
    })
    .await
}

// ---- 1. A breaker opens, refuses fast, and a probe closes it ----

#[resilient(breaker = "lean-open")]
async fn opens_and_closes(runs: &AtomicUsize, fail: bool) -> Result<u32, E> {
    runs.fetch_add(1, Ordering::SeqCst);
    if fail { Err(E::Unavailable) } else { Ok(7) }
}

#[tokio::test(start_paused = true)]
async fn a_breaker_opens_refuses_without_running_the_body_and_a_probe_closes_it() {
    on_global_registry().await;
    let runs = AtomicUsize::new(0);

    for n in 1..=3u32 {
        assert!(matches!(
            opens_and_closes(&runs, true).await,
            Err(E::Unavailable)
        ));
        let s = breaker("lean-open");
        assert_eq!(s.state, State::Closed, "fewer outcomes than the minimum");
        assert_eq!((s.buffered_calls, s.failed_calls), (n, n));
        assert_eq!(s.failure_rate, None);
    }
    assert!(matches!(
        opens_and_closes(&runs, true).await,
        Err(E::Unavailable)
    ));
    let s = breaker("lean-open");
    assert_eq!(s.state, State::Open, "four failures of four");
    assert_eq!((s.buffered_calls, s.failed_calls), (4, 4));
    assert_eq!(s.failure_rate, Some(100.0));
    assert_eq!(s.not_permitted_calls, 0);
    assert_eq!(count(&runs), 4);

    // Open: refused at once, through the caller's own error type, and the
    // body does not run.
    let started = Instant::now();
    let e = refusal(opens_and_closes(&runs, false).await);
    assert_eq!(started.elapsed(), Duration::ZERO);
    assert_eq!(e.kind(), ErrorKind::BreakerOpen);
    assert_eq!(e.name(), Some("lean-open"));
    assert_eq!(e.retry_in(), Some(OPEN_WAIT));
    assert_eq!(count(&runs), 4, "the body ran while the breaker was open");
    let s = breaker("lean-open");
    assert_eq!(s.state, State::Open);
    assert_eq!(s.not_permitted_calls, 1);
    assert_eq!(
        (s.buffered_calls, s.failed_calls),
        (4, 4),
        "a refusal is not an outcome"
    );

    // A moment before the wait is over: still refused.
    advance(OPEN_WAIT - Duration::from_millis(1)).await;
    let e = refusal(opens_and_closes(&runs, false).await);
    assert_eq!(e.retry_in(), Some(Duration::from_millis(1)));
    assert_eq!(count(&runs), 4);
    assert_eq!(breaker("lean-open").not_permitted_calls, 2);

    // The wait is over: one probe runs, succeeds, and closes the breaker
    // with an empty window.
    advance(Duration::from_millis(1)).await;
    assert_eq!(opens_and_closes(&runs, false).await.unwrap(), 7);
    assert_eq!(count(&runs), 5, "the probe ran its body");
    let s = breaker("lean-open");
    assert_eq!(s.state, State::Closed, "the successful probe closed it");
    assert_eq!((s.buffered_calls, s.failed_calls), (0, 0));

    // Closed again: calls run and are counted.
    assert_eq!(opens_and_closes(&runs, false).await.unwrap(), 7);
    assert_eq!(count(&runs), 6);
    assert_eq!(breaker("lean-open").buffered_calls, 1);
}

// ---- 2. Cancelled calls give their permits back ----

#[resilient(breaker = "lean-probe-cancel")]
async fn probe(runs: &AtomicUsize, how: Body) -> Result<(), E> {
    runs.fetch_add(1, Ordering::SeqCst);
    match how {
        Body::Fail => Err(E::Unavailable),
        Body::Hang => std::future::pending().await,
        Body::Succeed => Ok(()),
    }
}

#[derive(Debug, Clone, Copy)]
enum Body {
    Fail,
    Hang,
    Succeed,
}

#[tokio::test(start_paused = true)]
async fn a_half_open_probe_dropped_mid_body_gives_its_probe_slot_back() {
    on_global_registry().await;
    let runs = AtomicUsize::new(0);
    for _ in 0..2 {
        assert!(probe(&runs, Body::Fail).await.is_err());
    }
    assert_eq!(breaker("lean-probe-cancel").state, State::Open);
    advance(OPEN_WAIT).await;

    // The only probe half-open admits hangs; the caller's own timeout drops
    // the call while its body runs.
    let cut = tokio::time::timeout(Duration::from_secs(1), probe(&runs, Body::Hang)).await;
    assert!(cut.is_err(), "the hanging probe ended by itself");
    assert_eq!(count(&runs), 3, "the probe was admitted and ran");
    let s = breaker("lean-probe-cancel");
    assert_eq!(s.state, State::HalfOpen);
    assert_eq!(s.not_permitted_calls, 0);

    // Its slot came back: the next call is admitted as the probe, not
    // refused, and closes the breaker.
    probe(&runs, Body::Succeed)
        .await
        .expect("the dropped probe kept its half-open slot");
    assert_eq!(count(&runs), 4);
    let s = breaker("lean-probe-cancel");
    assert_eq!(s.state, State::Closed);
    assert_eq!(s.not_permitted_calls, 0);
}

#[resilient(bulkhead = "lean-slot-cancel")]
async fn in_the_slot(gate: &Notify, runs: &AtomicUsize, hold: bool) -> Result<(), E> {
    runs.fetch_add(1, Ordering::SeqCst);
    if hold {
        gate.notified().await;
    }
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_call_dropped_mid_body_gives_its_bulkhead_slot_back() {
    on_global_registry().await;
    let gate = Notify::new();
    let runs = AtomicUsize::new(0);

    // The first call takes the only slot and waits inside its body.
    let mut holder = Box::pin(in_the_slot(&gate, &runs, true));
    assert!(poll_once(&mut holder).await.is_none());
    assert_eq!(count(&runs), 1);
    assert_eq!(bulkhead("lean-slot-cancel").in_flight, 1);
    // Meanwhile the slot is taken: refused at once.
    let e = refusal(in_the_slot(&gate, &runs, false).await);
    assert_eq!(e.kind(), ErrorKind::BulkheadFull);
    assert_eq!(e.name(), Some("lean-slot-cancel"));
    assert_eq!(count(&runs), 1);

    // The holder is dropped mid-body (its caller gave up, say).
    drop(holder);
    let s = bulkhead("lean-slot-cancel");
    assert_eq!(s.in_flight, 0, "the dropped call kept its slot");
    assert_eq!(s.rejected, 1);

    // The next call gets the slot.
    in_the_slot(&gate, &runs, false)
        .await
        .expect("the slot was given back");
    assert_eq!(count(&runs), 2);
    assert_eq!(bulkhead("lean-slot-cancel").rejected, 1);
}

// ---- 3. A first attempt that waits for a bulkhead slot ----

#[resilient(breaker = "lean-wait", bulkhead = "lean-wait")]
async fn through_one_slot(gate: &Notify, runs: &AtomicUsize, hold: bool) -> Result<(), E> {
    runs.fetch_add(1, Ordering::SeqCst);
    if hold {
        gate.notified().await;
    }
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_call_waiting_for_the_slot_runs_when_it_frees_and_the_breaker_counts_both() {
    on_global_registry().await;
    let gate = Notify::new();
    let (runs_a, runs_b) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let start = Instant::now();
    // A takes the slot and holds it for 2 s; B, polled next, waits for it.
    let a = async {
        let r = through_one_slot(&gate, &runs_a, true).await;
        (r, start.elapsed())
    };
    let b = async {
        let r = through_one_slot(&gate, &runs_b, false).await;
        (r, start.elapsed())
    };
    let release = async {
        sleep(Duration::from_secs(2)).await;
        assert_eq!(count(&runs_a), 1);
        assert_eq!(count(&runs_b), 0, "B ran without a slot");
        assert_eq!(bulkhead("lean-wait").in_flight, 1);
        assert_eq!(breaker("lean-wait").buffered_calls, 0);
        gate.notify_one();
    };
    let ((ra, ta), (rb, tb), ()) = tokio::join!(a, b, release);
    ra.expect("A succeeds");
    rb.expect("B got the slot A freed");
    assert_eq!(ta, Duration::from_secs(2));
    assert_eq!(tb, Duration::from_secs(2), "B ran as soon as A finished");
    assert_eq!((count(&runs_a), count(&runs_b)), (1, 1));

    let s = bulkhead("lean-wait");
    assert_eq!(s.rejected, 0, "B waited and got its slot: not refused");
    assert_eq!(s.in_flight, 0);
    let s = breaker("lean-wait");
    assert_eq!(s.state, State::Closed);
    assert_eq!(
        (s.buffered_calls, s.failed_calls),
        (2, 0),
        "the breaker recorded both calls"
    );
    // A's body took 2 s, past the 1 s threshold; B's wait for the slot is
    // not the dependency's time, and its body took none.
    assert_eq!(s.slow_calls, 1, "A is slow, B is not");
}

#[resilient(
    breaker = "lean-wait-retry",
    bulkhead = "lean-wait-retry",
    retries = 2,
    idempotent,
    backoff = "exponential",
    base_ms = 10,
    cap_ms = 10
)]
async fn through_one_slot_retrying(
    gate: &Notify,
    runs: &AtomicUsize,
    hold: bool,
    fail_first: bool,
) -> Result<(), E> {
    let n = runs.fetch_add(1, Ordering::SeqCst);
    if hold {
        gate.notified().await;
    }
    if fail_first && n == 0 {
        return Err(E::Unavailable);
    }
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_call_that_waited_for_its_slot_then_failed_is_retried() {
    on_global_registry().await;
    let gate = Notify::new();
    let (runs_a, runs_b) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let start = Instant::now();
    let a = async {
        let r = through_one_slot_retrying(&gate, &runs_a, true, false).await;
        (r, start.elapsed())
    };
    // B waits for the slot, then its first attempt fails and its retry
    // (10 ms later) succeeds.
    let b = async {
        let r = through_one_slot_retrying(&gate, &runs_b, false, true).await;
        (r, start.elapsed())
    };
    let release = async {
        sleep(Duration::from_secs(2)).await;
        assert_eq!(count(&runs_b), 0, "B ran without a slot");
        gate.notify_one();
    };
    let ((ra, ta), (rb, tb), ()) = tokio::join!(a, b, release);
    ra.expect("A succeeds");
    rb.expect("B's retry succeeds");
    assert_eq!(ta, Duration::from_secs(2));
    assert_eq!(tb, Duration::from_millis(2010));
    assert_eq!((count(&runs_a), count(&runs_b)), (1, 2));

    let s = breaker("lean-wait-retry");
    assert_eq!(
        (s.buffered_calls, s.failed_calls, s.slow_calls),
        (3, 1, 1),
        "A's success (slow), B's failure and B's success"
    );
    let s = bulkhead("lean-wait-retry");
    assert_eq!(s.rejected, 0, "B waited and got its slot: not refused");
    assert_eq!(s.in_flight, 0);
    // Both calls went out: each earned its request, once; B's retry was
    // granted by the breaker's budget.
    let s = budget("lean-wait-retry");
    assert_eq!((s.requests, s.retries, s.granted, s.refused), (2, 1, 1, 0));
}

#[resilient(breaker = "lean-wait-maxwait", bulkhead = "lean-wait-maxwait")]
async fn slot_never_freed(gate: &Notify, runs: &AtomicUsize, hold: bool) -> Result<(), E> {
    runs.fetch_add(1, Ordering::SeqCst);
    if hold {
        gate.notified().await;
    }
    Ok(())
}

#[resilient(
    breaker = "lean-wait-deadline",
    bulkhead = "lean-wait-deadline",
    deadline_ms = 3000
)]
async fn slot_never_freed_by_the_deadline(
    gate: &Notify,
    runs: &AtomicUsize,
    hold: bool,
) -> Result<(), E> {
    runs.fetch_add(1, Ordering::SeqCst);
    if hold {
        gate.notified().await;
    }
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_wait_for_a_slot_that_never_frees_ends_at_max_wait_with_bulkhead_full() {
    on_global_registry().await;
    let gate = Notify::new();
    let (runs_a, runs_b) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let start = Instant::now();
    let b = tokio::select! {
        biased;
        _ = slot_never_freed(&gate, &runs_a, true) => panic!("A never finishes"),
        r = slot_never_freed(&gate, &runs_b, false) => r,
    };
    assert_eq!(start.elapsed(), SLOT_WAIT, "B waited max_wait, no more");
    let e = refusal(b);
    assert_eq!(e.kind(), ErrorKind::BulkheadFull);
    assert_eq!(e.name(), Some("lean-wait-maxwait"));
    assert_eq!((count(&runs_a), count(&runs_b)), (1, 0));
    // A was dropped with the `select!`: its slot came back. B's refusal is
    // no outcome for the breaker, and A's cancelled call none either.
    let s = bulkhead("lean-wait-maxwait");
    assert_eq!(s.rejected, 1, "B, refused once");
    assert_eq!(s.in_flight, 0);
    let s = breaker("lean-wait-maxwait");
    assert_eq!(
        (s.buffered_calls, s.failed_calls, s.not_permitted_calls),
        (0, 0, 0)
    );
    // B's breaker permit came back too: the next call runs and is counted.
    slot_never_freed(&gate, &runs_b, false).await.unwrap();
    assert_eq!(breaker("lean-wait-maxwait").buffered_calls, 1);
}

#[tokio::test(start_paused = true)]
async fn a_wait_for_a_slot_ends_at_the_calls_deadline_when_that_is_sooner() {
    on_global_registry().await;
    let gate = Notify::new();
    let (runs_a, runs_b) = (AtomicUsize::new(0), AtomicUsize::new(0));
    // A takes the only slot and waits in its body (it is not polled again,
    // so its own deadline never cuts it).
    let mut holder = Box::pin(slot_never_freed_by_the_deadline(&gate, &runs_a, true));
    assert!(poll_once(&mut holder).await.is_none());
    assert_eq!(bulkhead("lean-wait-deadline").in_flight, 1);
    let start = Instant::now();
    let b = slot_never_freed_by_the_deadline(&gate, &runs_b, false).await;
    assert_eq!(
        start.elapsed(),
        Duration::from_secs(3),
        "B's wait ended at its deadline, before max_wait"
    );
    let e = refusal(b);
    assert_eq!(e.kind(), ErrorKind::BulkheadFull);
    assert_eq!(e.name(), Some("lean-wait-deadline"));
    assert_eq!(count(&runs_b), 0);
    drop(holder);
    let s = bulkhead("lean-wait-deadline");
    assert_eq!(s.rejected, 1, "B, refused once");
    assert_eq!(s.in_flight, 0);
    let s = breaker("lean-wait-deadline");
    assert_eq!((s.buffered_calls, s.not_permitted_calls), (0, 0));
}

#[resilient(bulkhead = "lean-rejected")]
async fn counted_once(gate: &Notify, hold: bool) -> Result<(), E> {
    if hold {
        gate.notified().await;
    }
    Ok(())
}

/// `BulkheadSnapshot::rejected` (and the `metrics` counter made from it)
/// counts the calls refused: a call that waits for a slot and gets it is
/// not one, and one refused after `max_wait` is one. (The first look for a
/// slot, before the wait, once counted a refusal itself.)
#[tokio::test(start_paused = true)]
async fn a_waiting_call_is_refused_once_or_not_at_all() {
    on_global_registry().await;
    let gate = Notify::new();
    // B waits 2 s and gets the slot A frees: not refused.
    let (a, b, ()) = tokio::join!(
        counted_once(&gate, true),
        counted_once(&gate, false),
        async {
            sleep(Duration::from_secs(2)).await;
            gate.notify_one();
        }
    );
    a.unwrap();
    b.unwrap();
    assert_eq!(
        bulkhead("lean-rejected").rejected,
        0,
        "a call that got its slot was counted as refused"
    );
    // B waits max_wait for a slot that never frees: refused, once.
    let b = tokio::select! {
        biased;
        _ = counted_once(&gate, true) => unreachable!("A never finishes"),
        b = counted_once(&gate, false) => b,
    };
    assert_eq!(refusal(b).kind(), ErrorKind::BulkheadFull);
    assert_eq!(
        bulkhead("lean-rejected").rejected,
        1,
        "one refusal, counted twice"
    );
}

// ---- 4. A full bulkhead without waiting: refused at once, and finally ----

#[resilient(breaker = "lean-full", bulkhead = "lean-full", retries = 3, idempotent)]
async fn full_at_once(gate: &Notify, runs: &AtomicUsize, hold: bool) -> Result<(), E> {
    runs.fetch_add(1, Ordering::SeqCst);
    if hold {
        gate.notified().await;
    }
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_full_bulkhead_refuses_at_once_and_the_refusal_is_not_retried() {
    on_global_registry().await;
    let gate = Notify::new();
    let (runs_a, runs_b) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let mut holder = Box::pin(full_at_once(&gate, &runs_a, true));
    assert!(poll_once(&mut holder).await.is_none());
    assert_eq!(bulkhead("lean-full").in_flight, 1);

    let started = Instant::now();
    let e = refusal(full_at_once(&gate, &runs_b, false).await);
    assert_eq!(started.elapsed(), Duration::ZERO, "max_wait = 0 waits not");
    assert_eq!(e.kind(), ErrorKind::BulkheadFull);
    assert_eq!(e.name(), Some("lean-full"));
    assert_eq!(count(&runs_b), 0, "the refused call's body ran");
    // One refusal: `retries = 3` did not try the bulkhead again.
    assert_eq!(bulkhead("lean-full").rejected, 1);
    let s = breaker("lean-full");
    assert_eq!(
        (s.buffered_calls, s.not_permitted_calls),
        (0, 0),
        "a bulkhead's refusal is no outcome for the breaker"
    );
    // Only the holder's request went out and earned budget; the refused
    // call asked for no retry.
    let s = budget("lean-full");
    assert_eq!((s.requests, s.granted, s.refused), (1, 0, 0));

    gate.notify_one();
    holder.await.expect("the holder finishes");
    full_at_once(&gate, &runs_b, false)
        .await
        .expect("the slot is free again");
    assert_eq!((count(&runs_a), count(&runs_b)), (1, 1));
    let s = breaker("lean-full");
    assert_eq!((s.buffered_calls, s.failed_calls), (2, 0));
    assert_eq!(budget("lean-full").requests, 2);
}

// ---- 5. Slow calls open a breaker; calls within the threshold do not ----

/// Threshold 1 s: at least 100 ticks of the coarse clock, so a body ready
/// at once is timed on it, and one that waited on tokio's clock.
#[resilient(breaker = "lean-slow")]
async fn takes(time: Duration) -> Result<(), E> {
    if !time.is_zero() {
        sleep(time).await;
    }
    Ok(())
}

/// Threshold 100 ms: timed on tokio's clock at both ends.
#[resilient(breaker = "lean-slow-exact")]
async fn takes_exact(time: Duration) -> Result<(), E> {
    if !time.is_zero() {
        sleep(time).await;
    }
    Ok(())
}

async fn slow_calls_open(
    call: impl Fn(Duration) -> Pin<Box<dyn Future<Output = Result<(), E>>>>,
    name: &str,
    threshold: Duration,
) {
    // Within the threshold (at it is not past it): the window fills with
    // calls none of which is slow.
    let within = [
        Duration::ZERO,
        threshold / 2,
        threshold,
        threshold - Duration::from_millis(1),
    ];
    for (n, time) in (1u32..).zip(within) {
        let started = Instant::now();
        call(time).await.unwrap();
        assert_eq!(started.elapsed(), time);
        let s = breaker(name);
        assert_eq!((s.buffered_calls, s.slow_calls), (n, 0), "{time:?} is slow");
    }
    let s = breaker(name);
    assert_eq!(s.state, State::Closed);
    assert_eq!(s.slow_call_rate, Some(0.0));

    // Past it: one slow call of four is 25 %, two are 50 %, the threshold.
    call(threshold * 2).await.unwrap();
    let s = breaker(name);
    assert_eq!((s.state, s.slow_calls), (State::Closed, 1));
    assert_eq!(s.slow_call_rate, Some(25.0));
    call(threshold + Duration::from_millis(1)).await.unwrap();
    let s = breaker(name);
    assert_eq!(s.state, State::Open, "two slow calls of four");
    assert_eq!((s.slow_calls, s.failed_calls), (2, 0));
    assert_eq!(s.slow_call_rate, Some(50.0));

    let started = Instant::now();
    let e = refusal(call(Duration::ZERO).await);
    assert_eq!(e.kind(), ErrorKind::BreakerOpen);
    assert_eq!(e.name(), Some(name));
    assert_eq!(started.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn slow_successes_open_a_breaker_timed_on_the_coarse_clock_and_fast_ones_do_not() {
    on_global_registry().await;
    slow_calls_open(|t| Box::pin(takes(t)), "lean-slow", SLOW).await;
}

#[tokio::test(start_paused = true)]
async fn slow_successes_open_a_breaker_timed_on_tokios_clock_and_fast_ones_do_not() {
    on_global_registry().await;
    slow_calls_open(|t| Box::pin(takes_exact(t)), "lean-slow-exact", SLOW_EXACT).await;
}

// ---- 6. Timeouts count as failures ----

#[resilient(breaker = "lean-timeout", timeout_ms = 200)]
async fn hangs(runs: &AtomicUsize) -> Result<(), E> {
    runs.fetch_add(1, Ordering::SeqCst);
    std::future::pending().await
}

#[tokio::test(start_paused = true)]
async fn attempts_cut_by_their_timeout_are_failures_that_open_the_breaker() {
    on_global_registry().await;
    let runs = AtomicUsize::new(0);
    for n in 1..=3u32 {
        let started = Instant::now();
        let e = refusal(hangs(&runs).await);
        assert_eq!(started.elapsed(), Duration::from_millis(200));
        assert_eq!(e.kind(), ErrorKind::AttemptTimedOut);
        assert_eq!(e.timeout(), Some(Duration::from_millis(200)));
        let s = breaker("lean-timeout");
        assert_eq!((s.buffered_calls, s.failed_calls), (n, n));
        let expected = if n < 3 { State::Closed } else { State::Open };
        assert_eq!(s.state, expected, "after {n} timeouts");
    }
    assert_eq!(breaker("lean-timeout").failure_rate, Some(100.0));

    let started = Instant::now();
    let e = refusal(hangs(&runs).await);
    assert_eq!(e.kind(), ErrorKind::BreakerOpen);
    assert_eq!(started.elapsed(), Duration::ZERO);
    assert_eq!(count(&runs), 3, "the body ran while the breaker was open");
}

// ---- 7. A retry after a transient failure ----

#[resilient(
    breaker = "lean-retry",
    retries = 2,
    idempotent,
    backoff = "exponential",
    base_ms = 10,
    cap_ms = 10
)]
async fn fails_once(runs: &AtomicUsize) -> Result<usize, E> {
    let n = runs.fetch_add(1, Ordering::SeqCst);
    if n == 0 { Err(E::Unavailable) } else { Ok(n) }
}

#[tokio::test(start_paused = true)]
async fn a_transient_failure_is_retried_and_the_breaker_records_both_attempts() {
    on_global_registry().await;
    let runs = AtomicUsize::new(0);
    let started = Instant::now();
    assert_eq!(fails_once(&runs).await.unwrap(), 1);
    assert_eq!(started.elapsed(), Duration::from_millis(10), "one backoff");
    assert_eq!(count(&runs), 2);
    let s = breaker("lean-retry");
    assert_eq!(s.state, State::Closed);
    assert_eq!(
        (s.buffered_calls, s.failed_calls, s.slow_calls),
        (2, 1, 0),
        "one failure and one success"
    );
    // The breaker's budget (the default one) counted the call's request
    // once and granted its retry.
    let s = budget("lean-retry");
    assert_eq!((s.requests, s.retries, s.granted, s.refused), (1, 1, 1, 0));
}

// ---- 8. The retry budget bounds retries ----

#[resilient(
    retries = 3,
    idempotent,
    budget = "lean-budget",
    backoff = "exponential",
    base_ms = 1,
    cap_ms = 1
)]
async fn always_down(runs: &AtomicUsize) -> Result<(), E> {
    runs.fetch_add(1, Ordering::SeqCst);
    Err(E::Unavailable)
}

#[tokio::test(start_paused = true)]
async fn the_retry_budget_bounds_retries_and_counts_every_first_attempt() {
    on_global_registry().await;
    const CALLS: usize = 20;
    let runs = AtomicUsize::new(0);
    for _ in 0..CALLS {
        assert!(matches!(always_down(&runs).await, Err(E::Unavailable)));
    }
    // A ratio budget grants a retry while the window's retries are fewer
    // than `requests × ratio + min_retries_per_second × window`
    // (`runtime/src/budget/mod.rs`, `allowance`). Here: ratio 0.2, no
    // reserve, and a window of an hour that every call falls in. So over
    // 20 calls at most 20 × 0.2 = 4 retries, whatever `retries = 3` would
    // allow (60).
    let ratio = 0.2;
    let bound = CALLS + (CALLS as f64 * ratio).floor() as usize;
    let runs = count(&runs);
    assert!(runs <= bound, "{runs} attempts, over the budget's {bound}");
    assert!(
        runs > CALLS,
        "no retry at all: the calls' requests earned no budget"
    );
    // Calls one after the other: call k is retried once when k × 0.2 passes
    // a whole number (calls 5, 10, 15 and 20), and every call's last ask is
    // refused.
    assert_eq!(runs, bound);
    let s = budget("lean-budget");
    assert_eq!(s.requests, CALLS as u64, "each call counted once");
    assert_eq!((s.retries, s.granted, s.refused), (4, 4, CALLS as u64));
    assert_eq!(s.remaining, 0);
}

// ---- 9. The lean path and the async engine record alike ----

#[derive(Debug, Clone, Copy, PartialEq)]
enum Step {
    Succeed,
    /// Succeeds after 1.5 s: slow.
    Slow,
    Fail,
    Decline,
    /// Fails on the call's first attempt, succeeds on its retry.
    FailThenSucceed,
    /// Hangs until the attempt's timeout (3 s) cuts it.
    Hang,
    /// Holds its slot until the gate opens.
    Hold,
}

async fn scripted_body(step: Step, runs: &AtomicUsize, gate: &Notify) -> Result<(), E> {
    let n = runs.fetch_add(1, Ordering::SeqCst);
    match step {
        Step::Succeed => Ok(()),
        Step::Slow => {
            sleep(Duration::from_millis(1500)).await;
            Ok(())
        }
        Step::Fail => Err(E::Unavailable),
        Step::Decline => Err(E::Declined),
        Step::FailThenSucceed if n == 0 => Err(E::Unavailable),
        Step::FailThenSucceed => Ok(()),
        Step::Hang => std::future::pending().await,
        Step::Hold => {
            gate.notified().await;
            Ok(())
        }
    }
}

#[resilient(breaker = "lean-equiv", bulkhead = "lean-equiv", timeout_ms = 3000)]
async fn equiv_once(step: Step, runs: &AtomicUsize, gate: &Notify) -> Result<(), E> {
    scripted_body(step, runs, gate).await
}

#[resilient(
    breaker = "lean-equiv",
    bulkhead = "lean-equiv",
    timeout_ms = 3000,
    retries = 2,
    idempotent,
    backoff = "exponential",
    base_ms = 10,
    cap_ms = 10
)]
async fn equiv_retry(step: Step, runs: &AtomicUsize, gate: &Notify) -> Result<(), E> {
    scripted_body(step, runs, gate).await
}

/// What one step of the script saw, and what the parts held after it.
#[derive(Debug, PartialEq)]
struct Seen {
    step: String,
    result: Result<(), String>,
    runs: usize,
    elapsed: Duration,
    breaker: BreakerSnapshot,
    bulkhead: BulkheadSnapshot,
    budget: BudgetSnapshot,
}

fn outcome(result: Result<(), E>) -> Result<(), String> {
    result.map_err(|e| match e {
        E::Refused(e) => e.kind().as_str().to_owned(),
        other => format!("{other:?}"),
    })
}

/// One step of the script.
#[derive(Debug, Clone, Copy)]
enum Act {
    /// A call of `equiv_once`.
    Once(Step),
    /// A call of `equiv_retry`.
    Retrying(Step),
    /// `equiv_once(Hold)` takes the slot for 500 ms while
    /// `equiv_retry(FailThenSucceed)` waits for it.
    Concurrently,
    /// The breaker's wait in open state passes.
    WaitOpen,
}

/// The script. The comments say what the breaker's window (size 6, rated
/// from 4 outcomes; `S*` slow) and the budget (half of the requests of
/// calls that may retry) hold after each step, on both paths.
const SCRIPT: &[Act] = {
    use Act::*;
    use Step::*;
    &[
        Retrying(Succeed), // [S]                       1 request
        Once(Slow),        // [S S*]
        Retrying(Succeed), // [S S* S]                  2 requests
        // Failed, retried (0 retries < 3 × 0.5), succeeded: [S S* S F S].
        Retrying(FailThenSucceed),
        Retrying(Decline), // neither counted nor retried; 4 requests
        // A holds the slot 500 ms; B waits, fails, is retried (1 < 5 × 0.5)
        // and succeeds: the last six are [S F S S F S].
        Concurrently,
        // Cut by its timeout after 3 s (a slow failure): 3 failures of 6,
        // 50 %: open.
        Once(Hang),
        Retrying(Fail), // refused
        Once(Succeed),  // refused
        WaitOpen,
        Once(Succeed), // the first of two probes
        // The second probe fails: 50 %, open again. Its retry, granted by
        // the budget (2 < 6 × 0.5), is refused by the breaker, and its
        // grant goes back.
        Retrying(Fail),
        WaitOpen,
        Once(Slow),        // a slow probe
        Retrying(Succeed), // closes it: half the probes slow, under 100 %
        // Retried twice (2 and 3 < 8 × 0.5): [F F F].
        Retrying(Fail),
        // Fails: [F F F F], 100 %, open; its retry is refused by the
        // budget (4 < 9 × 0.5 is false).
        Retrying(Fail),
        Once(Succeed), // refused: open
    ]
};

/// The script, through whichever registry is current: the global one (the
/// lean path) or a scoped one (the `async` engine).
async fn script() -> Vec<Seen> {
    let registry = Registry::current();
    let gate = Notify::new();
    let mut seen = Vec::new();
    let mut record = |step: String, result, runs: &AtomicUsize, elapsed| {
        seen.push(Seen {
            step,
            result: outcome(result),
            runs: count(runs),
            elapsed,
            breaker: registry.breaker("lean-equiv").unwrap().snapshot(),
            bulkhead: registry.bulkhead("lean-equiv").unwrap().snapshot(),
            budget: registry.budget("lean-equiv").unwrap().snapshot(),
        });
    };
    for &act in SCRIPT {
        let runs = AtomicUsize::new(0);
        let started = Instant::now();
        match act {
            Act::Once(step) => {
                let result = equiv_once(step, &runs, &gate).await;
                record(format!("{act:?}"), result, &runs, started.elapsed());
            }
            Act::Retrying(step) => {
                let result = equiv_retry(step, &runs, &gate).await;
                record(format!("{act:?}"), result, &runs, started.elapsed());
            }
            Act::Concurrently => {
                let waiting = AtomicUsize::new(0);
                let (a, b, ()) = tokio::join!(
                    async {
                        let r = equiv_once(Step::Hold, &runs, &gate).await;
                        (r, started.elapsed())
                    },
                    async {
                        let r = equiv_retry(Step::FailThenSucceed, &waiting, &gate).await;
                        (r, started.elapsed())
                    },
                    async {
                        sleep(Duration::from_millis(500)).await;
                        gate.notify_one();
                    }
                );
                record("Concurrently: Hold".to_owned(), a.0, &runs, a.1);
                record(
                    "Concurrently: FailThenSucceed, waiting".to_owned(),
                    b.0,
                    &waiting,
                    b.1,
                );
            }
            Act::WaitOpen => advance(Duration::from_secs(10)).await,
        }
    }
    seen
}

#[tokio::test(start_paused = true)]
async fn the_lean_path_records_what_the_async_engine_records() {
    on_global_registry().await;
    let lean = script().await;

    let scoped = equivalence_parts(Registry::builder()).build().unwrap();
    let engine = scoped
        .scope(async {
            assert!(Registry::current().same_as(&scoped));
            script().await
        })
        .await;

    for (lean, engine) in lean.iter().zip(&engine) {
        assert_eq!(
            lean, engine,
            "the lean path (left) and the async engine (right) differ"
        );
    }
    assert_eq!(lean.len(), engine.len());

    // The script went through the shapes it is meant to compare.
    let states: Vec<State> = lean.iter().map(|s| s.breaker.state).collect();
    assert!(states.contains(&State::Open), "{lean:#?}");
    assert!(states.contains(&State::HalfOpen), "{lean:#?}");
    assert!(
        lean.iter()
            .any(|s| s.result.as_ref().is_err_and(|e| e == "breaker_open")),
        "{lean:#?}"
    );
    assert!(
        lean.iter()
            .any(|s| s.result.as_ref().is_err_and(|e| e == "attempt_timed_out")),
        "{lean:#?}"
    );
    assert!(lean.iter().any(|s| s.breaker.slow_calls > 0), "{lean:#?}");
    let waited = lean
        .iter()
        .find(|s| s.step.contains("waiting"))
        .expect("the concurrent step");
    assert_eq!(
        (&waited.result, waited.runs),
        (&Ok(()), 2),
        "the call that waited for the slot ran, failed, and succeeded on its retry"
    );
    assert!(lean.iter().any(|s| s.budget.granted > 0), "{lean:#?}");
    assert!(lean.iter().any(|s| s.budget.refused > 0), "{lean:#?}");
}

// ---- Dropped mid-attempt: the slot goes back before the span closes ----

#[resilient(bulkhead = "lean-drop-order")]
async fn held_slot(gate: &Notify) -> Result<(), E> {
    gate.notified().await;
    Ok(())
}

/// Records, when the span of a call of `held_slot` closes, how many of its
/// bulkhead's slots were still taken. The global subscriber of this test
/// binary (see [`on_global_registry`]).
struct SlotsAtClose;

static SLOTS_AT_CLOSE: std::sync::Mutex<Vec<usize>> = std::sync::Mutex::new(Vec::new());

/// Marks the span of a call of `held_slot`.
struct HeldSlotSpan;

struct IsHeldSlot(bool);

impl tracing::field::Visit for IsHeldSlot {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "function" && value.ends_with("::held_slot") {
            self.0 = true;
        }
    }

    fn record_debug(&mut self, _: &tracing::field::Field, _: &dyn std::fmt::Debug) {}
}

impl<S> tracing_subscriber::Layer<S> for SlotsAtClose
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let mut is = IsHeldSlot(false);
        attrs.record(&mut is);
        if let (true, Some(span)) = (is.0, ctx.span(id)) {
            span.extensions_mut().insert(HeldSlotSpan);
        }
    }

    fn on_close(&self, id: tracing::span::Id, ctx: tracing_subscriber::layer::Context<'_, S>) {
        if ctx
            .span(&id)
            .is_some_and(|span| span.extensions().get::<HeldSlotSpan>().is_some())
        {
            let in_flight = Registry::global()
                .bulkhead("lean-drop-order")
                .expect("a configured bulkhead")
                .in_flight();
            SLOTS_AT_CLOSE.lock().unwrap().push(in_flight);
        }
    }
}

/// As in the `async` engine, a call dropped while its attempt runs gives
/// its bulkhead slot (and a half-open probe) back before it leaves the
/// work in flight and its span closes: whoever sees the call end (a
/// graceful shutdown's drain, a subscriber) sees the slot free.
#[tokio::test(start_paused = true)]
async fn a_call_dropped_mid_attempt_frees_its_slot_before_its_span_closes() {
    on_global_registry().await;
    let gate = Notify::new();
    let cut = tokio::time::timeout(Duration::from_millis(10), held_slot(&gate)).await;
    assert!(cut.is_err(), "the body waits on a gate nobody opens");
    assert_eq!(
        *SLOTS_AT_CLOSE.lock().unwrap(),
        [0],
        "the slot was free when the span closed"
    );
    assert_eq!(bulkhead("lean-drop-order").in_flight, 0);
}

// ---- Making the attempt panics: reported, and the slot goes back ----

/// An argument whose copy for an attempt panics.
#[derive(Debug)]
struct PanicsOnClone;

impl Clone for PanicsOnClone {
    fn clone(&self) -> Self {
        panic!("this argument cannot be copied");
    }
}

#[resilient(bulkhead = "lean-panic-copy", retries = 2, idempotent)]
async fn copies_its_argument(arg: PanicsOnClone) -> Result<(), E> {
    let _ = arg;
    Ok(())
}

/// The attempt was admitted (its bulkhead slot taken) before its future
/// was made, and making it panicked: an observed call reports the attempt
/// as possibly applied, as the `async` engine does, and the slot goes back.
#[tokio::test(start_paused = true)]
async fn an_attempt_that_panics_to_make_is_reported_and_gives_its_slot_back() {
    use futures_util::FutureExt;
    on_global_registry().await;
    let (result, report) = resilient::observe(async {
        std::panic::AssertUnwindSafe(copies_its_argument(PanicsOnClone))
            .catch_unwind()
            .await
    })
    .await;
    assert!(result.is_err(), "the copy panicked");
    assert_eq!(report.attempts().len(), 1);
    assert_eq!(
        report.attempts()[0].outcome,
        resilient::AttemptOutcome::Cancelled
    );
    assert!(report.may_have_taken_effect());
    assert_eq!(bulkhead("lean-panic-copy").in_flight, 0);
    copies_nothing().await.expect("the slot came back");
}

#[resilient(bulkhead = "lean-panic-copy")]
async fn copies_nothing() -> Result<(), E> {
    Ok(())
}
