//! Calls with parts on the global registry, handed over from the lean
//! path to the retry loop when their first attempt fails (review 41, which
//! found these holding): attempts, delays and give-ups, exact retry budget
//! snapshots (retries that succeed, a call dropped in its backoff, a retry
//! refused by a breaker that opened or a full bulkhead, nested budgets),
//! and every slot, probe and in-flight count given back on cancellation.
//! (Review 41 checked the same on a registry scoped around the task; the
//! scoped path's grants are covered by `reliability.rs`.)
#[path = "support/interest.rs"]
mod interest;

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};
use std::task::Poll;
use std::time::Duration;

use resilient::{
    AttemptOutcome, BreakerConfig, BudgetConfig, BulkheadConfig, Classification, Classify,
    ErrorKind, Registry, SlidingWindow, State, resilient,
};
use tokio::time::{Instant, advance};

#[derive(Debug)]
pub enum E {
    Transient,
    Throttled(Duration),
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
            E::Transient => Classification::Transient,
            E::Throttled(d) => Classification::Throttled {
                retry_after: Some(*d),
            },
            E::Refused(e) => e.classify(),
        }
    }
    fn is_refusal(&self) -> Option<bool> {
        Some(matches!(self, E::Refused(_)))
    }
}

#[derive(Debug)]
pub enum Step {
    Ok,
    Fail,
    Throttle(u64),
    Hang,
}

#[derive(Debug, Default)]
pub struct Dep {
    script: Mutex<VecDeque<Step>>,
    calls: AtomicU32,
    at: Mutex<Vec<Instant>>,
}
impl Dep {
    fn new(steps: Vec<Step>) -> Dep {
        Dep {
            script: Mutex::new(steps.into()),
            ..Default::default()
        }
    }
    async fn call(&self) -> Result<u32, E> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        self.at.lock().unwrap().push(Instant::now());
        let step = self.script.lock().unwrap().pop_front().unwrap_or(Step::Ok);
        match step {
            Step::Ok => Ok(n),
            Step::Fail => Err(E::Transient),
            Step::Throttle(ms) => Err(E::Throttled(Duration::from_millis(ms))),
            Step::Hang => {
                std::future::pending::<()>().await;
                unreachable!()
            }
        }
    }
    fn calls(&self) -> u32 {
        self.calls.load(Ordering::SeqCst)
    }
    fn gaps(&self) -> Vec<Duration> {
        let at = self.at.lock().unwrap();
        at.windows(2).map(|w| w[1] - w[0]).collect()
    }
}

fn one_failure_opens() -> BreakerConfig {
    BreakerConfig::default()
        .sliding_window(SlidingWindow::CountBased { size: 1 })
        .minimum_number_of_calls(1)
        .wait_duration_in_open_state(Duration::from_secs(60))
        .permitted_number_of_calls_in_half_open_state(1)
}

fn parts() -> resilient::RegistryBuilder {
    Registry::builder()
        .budget("g-ok", BudgetConfig::ratio(0.1))
        .budget("g-drop", BudgetConfig::ratio(0.1))
        .budget("g-open", BudgetConfig::ratio(0.1))
        .breaker("g-open", one_failure_opens())
        .budget("g-full", BudgetConfig::ratio(0.1))
        .bulkhead("g-full", BulkheadConfig::default().max_concurrent(1))
        .budget("g-inner", BudgetConfig::ratio(0.1))
        .budget("g-outer", BudgetConfig::ratio(0.1))
        .breaker("g-plain", BreakerConfig::default())
        .bulkhead(
            "g-wait",
            BulkheadConfig::default()
                .max_concurrent(1)
                .max_wait(Duration::from_secs(10)),
        )
        .breaker("g-probe", one_failure_opens())
        .breaker(
            "g-probe2",
            one_failure_opens().permitted_number_of_calls_in_half_open_state(2),
        )
        .budget("g-rwait", BudgetConfig::ratio(0.1))
        .bulkhead(
            "g-rwait",
            BulkheadConfig::default()
                .max_concurrent(1)
                .max_wait(Duration::from_secs(10)),
        )
        .budget("g-wait-drop", BudgetConfig::ratio(0.1))
        .bulkhead(
            "g-wait-drop",
            BulkheadConfig::default()
                .max_concurrent(1)
                .max_wait(Duration::from_secs(10)),
        )
        .breaker("g-wait-drop", one_failure_opens())
        .breaker("g-panic", one_failure_opens())
        .bulkhead("g-panic", BulkheadConfig::default().max_concurrent(1))
}

async fn on_global_registry() {
    static INSTALLED_AT: OnceLock<std::time::Instant> = OnceLock::new();
    let installed_at = *INSTALLED_AT.get_or_init(|| {
        std::thread::spawn(|| {
            parts().build().unwrap().install().unwrap();
            std::time::Instant::now()
        })
        .join()
        .unwrap()
    });
    if let Some(behind) = installed_at.checked_duration_since(Instant::now().into_std()) {
        let millis = u64::try_from(behind.as_millis()).unwrap() + 1;
        advance(Duration::from_millis(millis)).await;
    }
}

fn counts(name: &str) -> (u64, u64, u64, u64, u64) {
    let s = Registry::global().budget(name).unwrap().snapshot();
    (s.requests, s.retries, s.granted, s.refused, s.remaining)
}

pub async fn poll_once<F: Future + ?Sized>(mut fut: Pin<&mut F>) -> Poll<F::Output> {
    std::future::poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx))).await
}

#[resilient(
    retries = 3,
    idempotent,
    budget = "g-ok",
    backoff = "exponential",
    base_ms = 100
)]
async fn with_budget_ok(dep: &Dep) -> Result<u32, E> {
    dep.call().await
}

#[resilient(
    retries = 3,
    idempotent,
    budget = "g-drop",
    backoff = "exponential",
    base_ms = 100
)]
async fn with_budget_drop(dep: &Dep) -> Result<u32, E> {
    dep.call().await
}

#[resilient(
    retries = 3,
    idempotent,
    breaker = "g-open",
    budget = "g-open",
    backoff = "exponential",
    base_ms = 100
)]
async fn with_breaker_opens(dep: &Dep) -> Result<u32, E> {
    dep.call().await
}

#[resilient(
    retries = 3,
    idempotent,
    bulkhead = "g-full",
    budget = "g-full",
    backoff = "exponential",
    base_ms = 100
)]
async fn with_bulkhead_full(dep: &Dep) -> Result<u32, E> {
    dep.call().await
}

#[resilient(bulkhead = "g-full")]
async fn hog(dep: &Dep) -> Result<u32, E> {
    dep.call().await
}

#[resilient(
    retries = 3,
    idempotent,
    breaker = "g-plain",
    backoff = "exponential",
    base_ms = 100
)]
async fn parts_retries(dep: &Dep) -> Result<u32, E> {
    dep.call().await
}

#[resilient(budget = "g-inner")]
async fn inner(dep: &Dep) -> Result<u32, E> {
    dep.call().await
}

#[resilient(
    retries = 3,
    idempotent,
    budget = "g-outer",
    backoff = "exponential",
    base_ms = 100
)]
async fn outer(dep: &Dep) -> Result<u32, E> {
    inner(dep).await
}

#[resilient(
    retries = 2,
    idempotent,
    bulkhead = "g-wait",
    backoff = "exponential",
    base_ms = 100
)]
async fn waits(dep: &Dep) -> Result<u32, E> {
    dep.call().await
}

#[resilient(bulkhead = "g-wait")]
async fn wait_hog(dep: &Dep) -> Result<u32, E> {
    dep.call().await
}

#[resilient(
    retries = 2,
    idempotent,
    breaker = "g-wait-drop",
    bulkhead = "g-wait-drop",
    budget = "g-wait-drop",
    backoff = "exponential",
    base_ms = 100
)]
async fn waits_probe(dep: &Dep) -> Result<u32, E> {
    dep.call().await
}

#[resilient(bulkhead = "g-wait-drop")]
async fn waits_probe_hog(dep: &Dep) -> Result<u32, E> {
    dep.call().await
}

#[resilient(
    retries = 2,
    idempotent,
    breaker = "g-probe",
    backoff = "exponential",
    base_ms = 100
)]
async fn probe(dep: &Dep) -> Result<u32, E> {
    dep.call().await
}

#[tokio::test(start_paused = true)]
async fn global_retries_that_succeed_count_their_grants() {
    on_global_registry().await;
    let dep = Dep::new(vec![Step::Fail, Step::Fail, Step::Ok]);
    assert_eq!(with_budget_ok(&dep).await.unwrap(), 3);
    assert_eq!(
        dep.gaps(),
        vec![Duration::from_millis(100), Duration::from_millis(200)]
    );
    assert_eq!(counts("g-ok"), (1, 2, 2, 0, 98));
}

#[tokio::test(start_paused = true)]
async fn global_drop_in_backoff_gives_grant_back() {
    on_global_registry().await;
    let dep = Dep::new(vec![Step::Fail]);
    let mut fut = Box::pin(with_budget_drop(&dep));
    assert!(poll_once(fut.as_mut()).await.is_pending());
    assert_eq!(dep.calls(), 1);
    drop(fut);
    assert_eq!(counts("g-drop"), (1, 0, 0, 0, 100));
}

#[tokio::test(start_paused = true)]
async fn global_breaker_opened_meanwhile() {
    on_global_registry().await;
    let dep = Dep::new(vec![Step::Fail]);
    let (r, report) = resilient::observe(with_breaker_opens(&dep)).await;
    match r {
        Err(E::Refused(e)) => assert_eq!(e.kind(), ErrorKind::BreakerOpen),
        other => panic!("{other:?}"),
    }
    assert_eq!(counts("g-open"), (1, 0, 0, 0, 100));
    let outcomes: Vec<_> = report
        .attempts()
        .iter()
        .map(|a| (a.attempt, a.outcome))
        .collect();
    assert_eq!(
        outcomes,
        vec![
            (1, AttemptOutcome::Failed(Classification::Transient)),
            (2, AttemptOutcome::Refused(ErrorKind::BreakerOpen))
        ]
    );
    assert!(report.gave_up());
}

#[tokio::test(start_paused = true)]
async fn global_bulkhead_full_on_retry() {
    on_global_registry().await;
    let dep = Dep::new(vec![Step::Fail]);
    let hog_dep = Dep::new(vec![Step::Hang]);
    let mut call = Box::pin(with_bulkhead_full(&dep));
    assert!(poll_once(call.as_mut()).await.is_pending());
    let mut h = Box::pin(hog(&hog_dep));
    assert!(poll_once(h.as_mut()).await.is_pending());
    match call.await {
        Err(E::Refused(e)) => assert_eq!(e.kind(), ErrorKind::BulkheadFull),
        other => panic!("{other:?}"),
    }
    drop(h);
    assert_eq!(counts("g-full"), (1, 0, 0, 0, 100));
    assert_eq!(
        Registry::global().bulkhead("g-full").unwrap().in_flight(),
        0
    );
}

#[tokio::test(start_paused = true)]
async fn global_retry_after_and_backoff() {
    on_global_registry().await;
    let dep = Dep::new(vec![
        Step::Throttle(700),
        Step::Fail,
        Step::Throttle(50),
        Step::Ok,
    ]);
    assert_eq!(parts_retries(&dep).await.unwrap(), 4);
    assert_eq!(
        dep.gaps(),
        vec![
            Duration::from_millis(700),
            Duration::from_millis(200),
            Duration::from_millis(400)
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn global_nested_budgets() {
    on_global_registry().await;
    let dep = Dep::new(vec![Step::Fail, Step::Ok]);
    let (r, _report) = resilient::observe(outer(&dep)).await;
    assert_eq!(r.unwrap(), 2);
    assert_eq!(counts("g-inner"), (1, 1, 1, 0, 99));
    assert_eq!(counts("g-outer"), (1, 1, 1, 0, 99));
}

#[tokio::test(start_paused = true)]
async fn global_first_attempt_waits_then_fails_then_retries() {
    on_global_registry().await;
    let hog_dep = Dep::new(vec![Step::Hang]);
    let mut h = Box::pin(wait_hog(&hog_dep));
    assert!(poll_once(h.as_mut()).await.is_pending());
    let dep = Dep::new(vec![Step::Fail, Step::Ok]);
    let mut call = Box::pin(resilient::observe(waits(&dep)));
    assert!(poll_once(call.as_mut()).await.is_pending());
    assert_eq!(dep.calls(), 0);
    advance(Duration::from_secs(1)).await;
    drop(h);
    let (r, report) = call.await;
    assert_eq!(r.unwrap(), 2);
    assert_eq!(report.attempts().len(), 2);
    assert_eq!(
        Registry::global().bulkhead("g-wait").unwrap().in_flight(),
        0
    );
}

#[tokio::test(start_paused = true)]
async fn global_drop_while_waiting_for_a_slot_gives_back_the_probe() {
    on_global_registry().await;
    let breaker = Registry::global().breaker("g-wait-drop").unwrap();
    // Open the breaker, wait for half-open.
    let dep = Dep::new(vec![Step::Fail, Step::Fail]);
    let _ = waits_probe(&dep).await;
    assert_eq!(breaker.state(), State::Open);
    advance(Duration::from_secs(61)).await;
    // The slot is taken.
    let hog_dep = Dep::new(vec![Step::Hang]);
    let mut h = Box::pin(waits_probe_hog(&hog_dep));
    assert!(poll_once(h.as_mut()).await.is_pending());
    let dep = Dep::new(vec![Step::Ok]);
    let mut call = Box::pin(waits_probe(&dep));
    assert!(poll_once(call.as_mut()).await.is_pending());
    assert_eq!(breaker.state(), State::HalfOpen);
    drop(call);
    drop(h);
    // The probe is back: a new call is admitted and closes it.
    let dep = Dep::new(vec![Step::Ok]);
    assert_eq!(waits_probe(&dep).await.unwrap(), 1);
    assert_eq!(breaker.state(), State::Closed);
    let s = Registry::global().budget("g-wait-drop").unwrap().snapshot();
    eprintln!("{s:?}");
}

#[tokio::test(start_paused = true)]
async fn global_probe_dropped_in_retry_attempt() {
    on_global_registry().await;
    let breaker = Registry::global().breaker("g-probe").unwrap();
    let dep = Dep::new(vec![Step::Fail]);
    let _ = probe(&dep).await;
    assert_eq!(breaker.state(), State::Open);
    advance(Duration::from_secs(61)).await;
    // Half-open: the first attempt is the probe, which hangs; dropped.
    let dep = Dep::new(vec![Step::Hang]);
    let mut call = Box::pin(probe(&dep));
    assert!(poll_once(call.as_mut()).await.is_pending());
    assert_eq!(breaker.state(), State::HalfOpen);
    drop(call);
    let dep = Dep::new(vec![Step::Ok]);
    assert_eq!(probe(&dep).await.unwrap(), 1);
    assert_eq!(breaker.state(), State::Closed);
}

#[resilient(
    retries = 2,
    idempotent,
    breaker = "g-probe2",
    backoff = "exponential",
    base_ms = 100
)]
async fn probe2(dep: &Dep) -> Result<u32, E> {
    dep.call().await
}

#[tokio::test(start_paused = true)]
async fn global_half_open_probe_dropped_in_a_retry_attempt() {
    on_global_registry().await;
    let breaker = Registry::global().breaker("g-probe2").unwrap();
    let _ = probe2(&Dep::new(vec![Step::Fail])).await;
    assert_eq!(breaker.state(), State::Open);
    advance(Duration::from_secs(61)).await;
    // First attempt (probe 1) fails; the breaker waits for probe 2, which
    // is the retry: it hangs, and is dropped.
    let dep = Dep::new(vec![Step::Fail, Step::Hang]);
    let mut call = Box::pin(probe2(&dep));
    assert!(poll_once(call.as_mut()).await.is_pending());
    advance(Duration::from_secs(1)).await;
    assert!(poll_once(call.as_mut()).await.is_pending());
    assert_eq!(dep.calls(), 2);
    assert_eq!(breaker.state(), State::HalfOpen);
    drop(call);
    // Probe 2 is back: a new call is admitted.
    let r = probe2(&Dep::new(vec![Step::Ok])).await;
    assert!(r.is_ok(), "{r:?}");
}

#[resilient(
    retries = 2,
    idempotent,
    bulkhead = "g-rwait",
    budget = "g-rwait",
    backoff = "exponential",
    base_ms = 100
)]
async fn rwait(dep: &Dep) -> Result<u32, E> {
    dep.call().await
}
#[resilient(bulkhead = "g-rwait")]
async fn rwait_hog(dep: &Dep) -> Result<u32, E> {
    dep.call().await
}

#[tokio::test(start_paused = true)]
async fn global_retry_dropped_while_waiting_for_a_slot() {
    on_global_registry().await;
    let dep = Dep::new(vec![Step::Fail, Step::Ok]);
    let mut call = Box::pin(rwait(&dep));
    assert!(poll_once(call.as_mut()).await.is_pending());
    let hog_dep = Dep::new(vec![Step::Hang]);
    let mut h = Box::pin(rwait_hog(&hog_dep));
    assert!(poll_once(h.as_mut()).await.is_pending());
    advance(Duration::from_secs(1)).await;
    assert!(poll_once(call.as_mut()).await.is_pending());
    assert_eq!(dep.calls(), 1);

    drop(call);
    drop(h);
    assert_eq!(counts("g-rwait"), (1, 0, 0, 0, 100));
    let b = Registry::global().bulkhead("g-rwait").unwrap().snapshot();
    assert_eq!(b.in_flight, 0);
}

#[resilient(breaker = "g-panic", bulkhead = "g-panic")]
async fn guarded(dep: &Dep) -> Result<u32, E> {
    dep.call().await
}

/// A `tracing` layer that panics when a breaker's closing is logged.
struct PanicOnClose;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for PanicOnClose {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct To(bool);
        impl tracing::field::Visit for To {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "to" && format!("{value:?}") == "closed" {
                    self.0 = true;
                }
            }
        }
        let mut to = To(false);
        event.record(&mut to);
        assert!(!to.0, "the subscriber panics on the breaker's closing");
    }
}

/// A subscriber that panics while a half-open probe's success closes the
/// breaker, on the lean path (the admission is recorded in place there):
/// the bulkhead slot goes back as the panic unwinds out of the annotated
/// function, whose `async fn` drops the engine's future on the way, not
/// only when the caller drops the panicked future (review of this stop).
#[tokio::test(start_paused = true)]
async fn global_panic_while_a_probe_closes_gives_the_slot_back() {
    use std::panic::{AssertUnwindSafe, catch_unwind};
    use tracing_subscriber::layer::SubscriberExt;

    on_global_registry().await;
    let registry = Registry::global();
    let breaker = registry.breaker("g-panic").unwrap();
    let _ = guarded(&Dep::new(vec![Step::Fail])).await;
    assert_eq!(breaker.state(), State::Open);
    advance(Duration::from_secs(61)).await;
    let dep = Dep::new(vec![Step::Ok]);
    let mut call = Box::pin(guarded(&dep));
    interest::keep();
    let subscriber = tracing_subscriber::registry().with(PanicOnClose);
    let polled = tracing::subscriber::with_default(subscriber, || {
        // The other tests of this binary log on their threads with no
        // subscriber; a callsite they register while this subscriber is
        // being set can keep the interest they computed ("never"), and
        // the closing would not reach this one (`tracing-core` rebuilds
        // the interest of registered callsites only). Rebuilt here, once
        // every callsite this poll meets is registered.
        tracing::callsite::rebuild_interest_cache();
        catch_unwind(AssertUnwindSafe(|| {
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            call.as_mut().poll(&mut cx)
        }))
    });
    assert!(polled.is_err(), "the subscriber panicked");
    assert_eq!(dep.calls(), 1);
    assert_eq!(breaker.state(), State::Closed);
    // The panicked call is still held here, and its slot is free.
    assert_eq!(registry.bulkhead("g-panic").unwrap().in_flight(), 0);
    assert_eq!(guarded(&Dep::new(vec![Step::Ok])).await.unwrap(), 1);
    drop(call);
}
